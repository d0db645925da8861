"""Bad input gets a clear crowddb error naming the problem; documented edge behaviours are pinned down."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowddb.anonymize import anonymize
from crowddb.errors import ArgumentError, CrowdDBError, EmptyInputError, PrivacyError, UnknownColumnError


def frame(n: int = 20) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"age": rng.integers(20, 60, n), "sex": rng.choice(["F", "M"], n), "s": rng.integers(0, 3, n)})


@pytest.mark.parametrize("k", [1, 0, -3])
def test_k_too_small(k: int) -> None:
    with pytest.raises(ArgumentError, match="at least 2"):
        anonymize(frame(), ["age"], k)


def test_k_larger_than_rows() -> None:
    with pytest.raises(ArgumentError, match="larger than the number of rows"):
        anonymize(frame(20), ["age"], 21)
    assert anonymize(frame(20), ["age"], 20).metrics["n_groups"] == 1  # k == n: one class


@pytest.mark.parametrize("k", [2.5, "3", True])
def test_k_not_integer(k) -> None:
    with pytest.raises(ArgumentError, match="integer"):
        anonymize(frame(), ["age"], k)


def test_unknown_qi() -> None:
    with pytest.raises(UnknownColumnError, match="'height'"):
        anonymize(frame(), ["age", "height"], 2)


def test_unknown_method() -> None:
    with pytest.raises(ArgumentError, match="unknown anonymization method 'kmeans'"):
        anonymize(frame(), ["age"], 2, method="kmeans")


def test_unknown_option() -> None:
    with pytest.raises(ArgumentError, match="unknown option"):
        anonymize(frame(), ["age"], 2, cell_limit=3)


def test_non_numeric_in_numeric_column() -> None:
    f = pd.DataFrame({"age": ["20", "31", "abc", "44"], "x": range(4)})
    with pytest.raises(ArgumentError, match="'age' is declared numeric but holds non-numeric value 'abc'"):
        anonymize(f, ["age"], 2, kinds={"age": "numeric"})


def test_bad_kind() -> None:
    with pytest.raises(ArgumentError, match="kind of 'age'"):
        anonymize(frame(), ["age"], 2, kinds={"age": "fuzzy"})


def test_nulls_in_qi_are_rejected() -> None:
    # Documented behaviour: a NULL quasi-identifier is an error (never published, never dropped silently).
    f = frame()
    f.loc[3, "sex"] = None
    with pytest.raises(ArgumentError, match="'sex' has 1 NULL"):
        anonymize(f, ["age", "sex"], 2)
    g = frame().astype({"age": float})
    g.loc[0, "age"] = np.nan
    with pytest.raises(ArgumentError, match="'age' has 1 NULL"):
        anonymize(g, ["age"], 2)


def test_nulls_outside_qis_are_fine() -> None:
    f = frame()
    f["note"] = None
    rel = anonymize(f, ["age"], 2)
    assert rel.table["note"].isna().all()


def test_constant_qi_is_kept_as_is() -> None:
    # Documented behaviour: a constant QI identifies nobody; it is published as its value with zero loss.
    f = frame()
    f["country"] = "US"
    rel = anonymize(f, ["age", "country"], 4)
    assert set(rel.table["country"]) == {"US"}
    assert rel.metrics["min_group_size"] >= 4
    alone = anonymize(f, ["country"], 4)
    assert alone.metrics["ncp"] == 0.0 and alone.metrics["n_groups"] == 1


def test_empty_and_wrong_types() -> None:
    with pytest.raises(EmptyInputError):
        anonymize(frame().iloc[:0], ["age"], 2)
    with pytest.raises(ArgumentError, match="DataFrame"):
        anonymize([[1, 2]], ["age"], 2)
    with pytest.raises(ArgumentError, match="at least one quasi-identifier"):
        anonymize(frame(), [], 2)
    with pytest.raises(ArgumentError, match="twice"):
        anonymize(frame(), ["age", "age"], 2)


def test_l_diversity_errors() -> None:
    with pytest.raises(ArgumentError, match="sensitive column"):
        anonymize(frame(), ["age"], 2, l=2)
    with pytest.raises(UnknownColumnError):
        anonymize(frame(), ["age"], 2, sensitive="nope", l=2)
    with pytest.raises(PrivacyError, match="only 3 distinct"):
        anonymize(frame(), ["age"], 2, sensitive="s", l=4)
    with pytest.raises(ArgumentError, match="not datafly"):
        anonymize(frame(), ["age"], 2, method="datafly", sensitive="s", l=2)


def test_hierarchy_errors(tmp_path) -> None:
    with pytest.raises(ArgumentError, match="not found"):
        anonymize(frame(), ["sex"], 2, hierarchies={"sex": str(tmp_path / "missing.csv")})
    h = pd.DataFrame([["F", "*"]])
    with pytest.raises(ArgumentError, match="missing from its hierarchy"):
        anonymize(frame(), ["sex"], 2, hierarchies={"sex": h})
    with pytest.raises(UnknownColumnError, match="not quasi-identifiers"):
        anonymize(frame(), ["age"], 2, hierarchies={"sex": h})


def test_fka_needs_callable_ask() -> None:
    with pytest.raises(ArgumentError, match="ask=callable"):
        anonymize(frame(), ["age"], 2, method="fka")
    with pytest.raises(ArgumentError, match="integer answers"):
        anonymize(frame(), ["age"], 2, method="fka", ask=lambda lo, hi: np.zeros(3))
    with pytest.raises(ArgumentError, match="sample_ratio"):
        anonymize(frame(), ["age"], 2, method="fka", ask=lambda lo, hi: np.zeros(len(lo), int), sample_ratio=0)


def test_all_errors_are_crowddb_errors() -> None:
    assert issubclass(ArgumentError, CrowdDBError) and issubclass(ArgumentError, ValueError)


def test_incognito_lattice_too_large() -> None:
    rng = np.random.default_rng(0)
    wide = pd.DataFrame({f"q{j}": rng.integers(0, 1000, 100) for j in range(12)})
    with pytest.raises(ArgumentError, match="lattice has .* nodes"):
        anonymize(wide, list(wide.columns), 5, method="incognito")
    assert anonymize(wide, list(wide.columns), 5, method="datafly").metrics["min_group_size"] >= 5
