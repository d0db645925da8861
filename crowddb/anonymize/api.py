"""The one entry point the engine calls: anonymize(frame, quasi_identifiers, k, method=...) -> Release."""

from __future__ import annotations

import numpy as np
import pandas as pd

from crowddb.anonymize.encoding import encode, validate
from crowddb.anonymize.generalize import Release, release_from_groups
from crowddb.anonymize.mondrian import mondrian_groups
from crowddb.errors import ArgumentError, PrivacyError, UnknownColumnError

METHODS = ("mondrian", "datafly", "incognito", "fka")


def _sensitive_codes(frame: pd.DataFrame, sensitive: str | None, l: int | None, qis: list[str]) -> np.ndarray | None:
    """Codes of the sensitive column for distinct l-diversity, after checking l is reachable at all."""
    if l is None:
        return None
    if sensitive is None:
        raise ArgumentError("l-diversity needs a sensitive column: pass sensitive=<column>")
    if sensitive not in frame.columns:
        raise UnknownColumnError(f"unknown sensitive column {sensitive!r}")
    if sensitive in qis:
        raise ArgumentError(f"sensitive column {sensitive!r} is also a quasi-identifier")
    if isinstance(l, bool) or not isinstance(l, (int, np.integer)) or l < 1:
        raise ArgumentError(f"l must be a positive integer, got {l!r}")
    codes = pd.factorize(frame[sensitive], use_na_sentinel=False)[0].astype(np.int64)
    if len(np.unique(codes)) < l:
        raise PrivacyError(f"{sensitive!r} has only {len(np.unique(codes))} distinct values; l={l} is impossible")
    return codes


def anonymize(frame: pd.DataFrame, quasi_identifiers: list[str], k: int, *, method: str = "mondrian",
              strict: bool = True, sensitive: str | None = None, l: int | None = None,
              hierarchies: dict | None = None, kinds: dict[str, str] | None = None, seed=None,
              **method_options) -> Release:
    """k-anonymous release of ``frame`` over ``quasi_identifiers`` with the chosen method; see module docs."""
    qis = [quasi_identifiers] if isinstance(quasi_identifiers, str) else list(quasi_identifiers)
    if method not in METHODS:
        raise ArgumentError(f"unknown anonymization method {method!r}; choose one of {METHODS}")
    validate(frame, qis, k)
    enc = encode(frame, qis, kinds, hierarchies)
    sens = _sensitive_codes(frame, sensitive, l, qis)
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
