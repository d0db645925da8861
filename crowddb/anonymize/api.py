"""The one entry point the engine calls: anonymize(frame, quasi_identifiers, k, method=...) -> Release.

Behaviour at the edges (tested in tests/algorithms/anonymize/test_anonymize_errors.py):
- k must be an integer with 2 <= k <= len(frame) (ArgumentError otherwise); an empty frame is EmptyInputError.
- Unknown QI / sensitive / hierarchy column: UnknownColumnError naming it. Unknown method or option: ArgumentError.
- NULL in a quasi-identifier: ArgumentError naming the column and count (never published, never silently dropped);
  NULLs in other columns pass through untouched.
- A value that is not a number in a QI declared numeric (kinds={'age': 'numeric'}): ArgumentError with the value.
- A constant QI identifies nobody: it is published as its value and adds zero NCP (it still counts in the mean).
- Kinds: numeric dtypes are 'numeric' (tight ranges '[23-35]'), ordered pandas categoricals 'ordinal' (category
  order), everything else 'categorical', coded in order of first appearance ("intuitive ordering") and published
  as the value set of its code interval '{a,b,c}' ('*' for the whole domain), or, with an ARX hierarchy, as the
  lowest common ancestor's label (categories are then coded in the hierarchy's depth-first order).
- l-diversity (distinct, sensitive=..., l=...) is an extra cut condition for 'mondrian' and 'fka'; PrivacyError if the
  sensitive column has fewer than l distinct values.
Method options: datafly/incognito take max_suppressed (default k) and bands (numeric interval hierarchy, default
16 bands at the first level); incognito also max_evaluations (20,000) and max_lattice (2,000,000 nodes). fka takes ask (required), sample_ratio (0.10),
cell_limit (400, Table 7), delta ('literal' Eq. 10, or ours 'weighted' by row share), allowable (ours 'slabs':
both new histogram slabs keep >= min_samples samples; or 'cells', Definition 3: every new cell does), min_samples
(default max(2, ceil(k * sample_ratio)) for 'slabs', k for 'cells') and volume ('width': Eq. 12/13 α/β from range
widths; or ours 'count', distinct values); an unknown value is an ArgumentError before anything is asked.
Measured in bench/fka_deviations.py.
- shared=[columns] (a subset of the QIs; mondrian, datafly, incognito): rows with equal values on all shared columns
  get the same label on each of them, so a group operator publishing a group's rows together leaks nothing by their
  intersection; every class stays >= k rows (crowddb/anonymize/shared.py). Not a QI or unknown: ArgumentError;
  with 'fka': ArgumentError. Without it, releases are exactly those of the plain methods.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from crowddb._frames import as_frame
from crowddb.anonymize.encoding import check_l, encode, validate
from crowddb.anonymize.generalize import Release, release_from_groups
from crowddb.anonymize.mondrian import mondrian_groups
from crowddb.anonymize.shared import check_shared, shared_ids, shared_mondrian, validate_shared
from crowddb.errors import ArgumentError, PrivacyError

METHODS = ("mondrian", "datafly", "incognito", "fka")


def _sensitive_codes(frame: pd.DataFrame, sensitive: str | None, l: int | None, qis: list[str]) -> np.ndarray | None:
    """Codes of the sensitive column for distinct l-diversity, after checking l is reachable at all."""
    if check_l(sensitive, l, qis, list(frame.columns)) is None:
        return None
    codes = pd.factorize(frame[sensitive], use_na_sentinel=False)[0].astype(np.int64)
    if len(np.unique(codes)) < l:
        raise PrivacyError(f"{sensitive!r} has only {len(np.unique(codes))} distinct values; l={l} is impossible")
    return codes


def check_request(frame: pd.DataFrame, quasi_identifiers: list[str], k: int, method: str) -> None:
    """What ``anonymize`` refuses before it computes anything: an unknown method, a bad k, missing or unusable
    quasi-identifiers (a caller that may not need the release checks the request the same way)."""
    if method not in METHODS:
        raise ArgumentError(f"unknown anonymization method {method!r}; choose one of {METHODS}")
    validate(frame, quasi_identifiers, k)


def anonymize(frame: pd.DataFrame, quasi_identifiers: list[str], k: int, *, method: str = "mondrian",
              strict: bool = True, sensitive: str | None = None, l: int | None = None,
              hierarchies: dict | None = None, kinds: dict[str, str] | None = None, seed=None,
              shared: list[str] | None = None, **method_options) -> Release:
    """k-anonymous release of ``frame`` over ``quasi_identifiers`` with the chosen method; see module docs."""
    frame = as_frame(frame, "anonymize()")
    qis = [quasi_identifiers] if isinstance(quasi_identifiers, str) else list(quasi_identifiers)
    check_request(frame, qis, k, method)
    return anonymize_checked(frame, qis, k, method=method, strict=strict, sensitive=sensitive, l=l,
                             hierarchies=hierarchies, kinds=kinds, seed=seed, shared=shared, **method_options)


def anonymize_checked(frame: pd.DataFrame, quasi_identifiers: list[str], k: int, *, method: str = "mondrian",
                      strict: bool = True, sensitive: str | None = None, l: int | None = None,
                      hierarchies: dict | None = None, kinds: dict[str, str] | None = None, seed=None,
                      shared: list[str] | None = None, **method_options) -> Release:
    """``anonymize`` of a pandas ``frame`` whose request ``check_request`` has passed (ANONYMIZE checks it before it
    knows whether the release is computed at all: not twice)."""
    qis = list(quasi_identifiers)
    shared = validate_shared(shared, qis, frame.columns)
    if "shared_groups" in method_options:  # internal: derived from ``shared``
        raise ArgumentError("unknown option 'shared_groups'; pass shared=[columns]")
    if shared and method == "fka":
        raise ArgumentError(f"shared={shared} is not supported by method 'fka' (its phase-1 partitions cut shared "
                            "columns between equal values); use 'mondrian', 'datafly' or 'incognito'")
    enc = encode(frame, qis, kinds, hierarchies)
    sens = _sensitive_codes(frame, sensitive, l, qis)
    if shared:
        release = _anonymize_shared(frame, enc, int(k), method, shared, strict, sens, l, method_options)
        check_shared(release, shared_ids(enc.codes, [qis.index(s) for s in shared]), shared, int(k))
        return release
    if method == "mondrian":
        if method_options:
            raise ArgumentError(f"unknown option(s) for mondrian: {sorted(method_options)}")
        groups, lo, hi = mondrian_groups(enc.codes, enc.scale_of(), int(k), strict=strict, sensitive=sens, l=l,
                                         return_boxes=True)
        name = "mondrian" if strict else "mondrian-relaxed"
        return release_from_groups(frame, enc, groups, int(k), name, {"l": l, "strict": strict}, (lo, hi))
    if method == "fka":
        from crowddb.anonymize.fka import fka

        return fka(frame, enc, int(k), strict=strict, sensitive=sens, l=l, seed=seed, **method_options)
    if l is not None:
        raise ArgumentError(f"l-diversity is supported by mondrian and fka, not {method}")
    if method == "datafly":
        from crowddb.anonymize.datafly import datafly

        return datafly(frame, enc, int(k), **method_options)
    from crowddb.anonymize.incognito import incognito

    return incognito(frame, enc, int(k), **method_options)


def _anonymize_shared(frame: pd.DataFrame, enc, k: int, method: str, shared: list[str], strict: bool, sens, l,
                      method_options: dict) -> Release:
    """Release whose shared columns are generalized per shared group (crowddb/anonymize/shared.py)."""
    if method == "mondrian":
        if method_options:
            raise ArgumentError(f"unknown option(s) for mondrian: {sorted(method_options)}")
        groups, lo, hi, figures = shared_mondrian(enc, k, shared, strict=strict, sensitive=sens, l=l)
        name = "mondrian" if strict else "mondrian-relaxed"
        return release_from_groups(frame, enc, groups, k, name,
                                   {"l": l, "strict": strict, "shared": list(shared), **figures}, (lo, hi))
    if l is not None:
        raise ArgumentError(f"l-diversity is supported by mondrian and fka, not {method}")
    sid = shared_ids(enc.codes, [enc.qis.index(s) for s in shared])
    if method == "datafly":
        from crowddb.anonymize.datafly import datafly

        release = datafly(frame, enc, k, shared_groups=sid, **method_options)
    else:
        from crowddb.anonymize.incognito import incognito

        release = incognito(frame, enc, k, shared_groups=sid, **method_options)
    release.metrics["shared"] = list(shared)
    return release
