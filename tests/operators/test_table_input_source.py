"""A table function's typed view of its input is registered only when a column is read through it (issue 26: most
inputs are read straight from the Arrow snapshot): a column DuckDB converts itself (DECIMAL, ENUM) reads as before."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import crowddb
from crowddb.truth import discover


def _answers(n: int = 600, seed: int = 2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"task": rng.integers(0, 60, n), "worker": rng.integers(0, 25, n),
                         "score": np.round(rng.normal(5, 2, n), 2), "label": rng.choice(["a", "b", "c"], n)})


@pytest.mark.parametrize(("column", "cast", "method"), [
    ("score", "DECIMAL(6, 2)", "mean"),
    ("score", "DECIMAL(6, 2)", "crh"),
    ("label", "ENUM ('a', 'b', 'c')", "mv"),
])
def test_a_value_column_duckdb_converts_gives_what_discover_gives(column, cast, method):
    frame = _answers()
    with crowddb.connect(seed=1, progress=False) as db:
        db.load_frame("raw", frame)
        db.sql(f"CREATE TABLE answers AS SELECT task, worker, CAST({column} AS {cast}) AS v FROM raw")
        got = db.sql(f"SELECT object, truth, confidence FROM TRUTH_DISCOVER(answers, object := 'task', "
                     f"source := 'worker', value := 'v', method := '{method}') ORDER BY object").df()
        converted = db.con.sql("SELECT task, worker, v FROM answers").df()
    want = discover(converted, "task", "worker", "v", method=method).objects.sort_values("object")
    assert got["object"].tolist() == want["object"].tolist()
    if method == "mv":
        assert got["truth"].astype(str).tolist() == want["truth"].astype(str).tolist()
    else:
        np.testing.assert_array_equal(got["truth"].to_numpy(dtype=float), want["truth"].to_numpy(dtype=float))
    np.testing.assert_array_equal(got["confidence"].to_numpy(), want["confidence"].to_numpy())
