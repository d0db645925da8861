"""Datafly (Sweeney 2002): greedy full-domain generalization of the QI with most distinct values, then suppression."""

from __future__ import annotations

import numpy as np
import pandas as pd

from crowddb.anonymize.encoding import Encoding
from crowddb.anonymize.fulldomain import FullDomain
from crowddb.anonymize.generalize import Release
from crowddb.errors import ArgumentError


def datafly(frame: pd.DataFrame, enc: Encoding, k: int, *, max_suppressed: int | None = None,
            bands: int = 16, shared_groups: np.ndarray | None = None) -> Release:
    """Generalize the QI with most distinct values until at most ``max_suppressed`` rows (default k, Sweeney's rule)
    sit in classes smaller than k, then suppress those rows ('*' in every QI, one class of >= k rows)."""
    limit = k if max_suppressed is None else int(max_suppressed)
    if limit < 0:
        raise ArgumentError(f"max_suppressed must be >= 0, got {max_suppressed}")
    fd = FullDomain(enc, bands, shared_groups)
    node = np.zeros(len(enc.qis), np.int64)
    while True:
        sup = fd.suppression(node, k, limit)
        if sup is not None:
            break
        open_dims = np.flatnonzero(node < fd.heights)
        distinct = [len(np.unique(fd.ladders[j].ids[node[j]][np.unique(enc.codes[:, j])])) for j in open_dims]
        node[open_dims[int(np.argmax(distinct))]] += 1  # the QI with most distinct values climbs one level
    return fd.release(frame, node, k, "datafly", sup, {"max_suppressed": limit})
