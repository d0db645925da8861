"""The synthetic dataset of kanon-crowd-db §5.1, rebuilt from the shipped Adult table by a seeded generator.

What the paper says (§5.1): "a synthetic dataset, derived from the US census dataset in 1990. The data space is
partitioned into regions based on the ground-truth results. Tuples in the same region must have the same
ground-truth values. The unsatisfied tuples are considered as noises and discarded. The synthetic dataset has 10,000
tuples and denotes the idea case, where the optimal K-anonymity approach can maximize the crowdsourcing accuracy."

What is ours (the paper gives no construction): the census data is Adult (the cleaned UCI table crowddb ships, the
1994 CPS extract, not the 1990 census); the ground truth is the occupation mapped to Table 6's five categories
(``OCCUPATION_CATEGORY``); the regions are the cells of an axis-aligned grid over the quasi-identifiers (by default
age, education_num and sex, the three anonymized attributes of Table 7's default), so a k-anonymous box can lie
inside one region: each numeric QI is cut at ``cuts[q]`` distinct values drawn by the seed among the values between
its 5th and 95th percentiles (a cut c keeps c on the left), each categorical QI value is a slab of its own; each
region is labelled with the category most of its Adult rows hold (the lowest category on ties); every row whose
category is not its region's label is noise and discarded; ``n`` of the remaining rows are drawn without replacement.
The same seed gives the same table."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from crowddb._random import make_rng
from crowddb.datasets import OCCUPATION_CATEGORY, load_adult
from crowddb.errors import ArgumentError

__all__ = ["SyntheticSet", "kanon_synthetic"]

DEFAULT_QIS = ("age", "education_num", "sex")
DEFAULT_CUTS = {"age": 3, "education_num": 2}  # ours: 4 age bands x 3 education bands x 2 sexes = 24 regions


@dataclass(frozen=True)
class SyntheticSet:
    """The generated rows and the regions they were kept by."""

    frame: pd.DataFrame  # Adult's columns (its ids), plus 'category' (0..4, Table 6), 'job' ('CAT0'..) and 'region'
    cuts: dict[str, np.ndarray]  # per numeric QI, its cut values (a value v lies left of cut c when v <= c)
    levels: dict[str, np.ndarray]  # per categorical QI, its values in slab order
    labels: np.ndarray  # the category of each region (flat grid id, QIs in ``qis`` order)
    qis: tuple[str, ...]

    def region_of(self, frame: pd.DataFrame) -> np.ndarray:
        """Flat grid id of each row's region (slabs in ``qis`` order)."""
        return _region(frame, self.qis, self.cuts, self.levels)[0]


def _region(frame: pd.DataFrame, qis, cuts, levels) -> tuple[np.ndarray, tuple[int, ...]]:
    """Flat region id of each row and the grid's shape."""
    slabs, shape = [], []
    for q in qis:
        if q in cuts:
            slabs.append(np.searchsorted(cuts[q], frame[q].to_numpy(), side="left"))
            shape.append(len(cuts[q]) + 1)
        else:
            slabs.append(pd.Index(levels[q]).get_indexer(frame[q].astype(str)))
            shape.append(len(levels[q]))
    return np.ravel_multi_index(tuple(slabs), tuple(shape)), tuple(shape)


def kanon_synthetic(n: int = 10_000, seed: int | np.random.Generator | None = 0, *,
                    qis: tuple[str, ...] = DEFAULT_QIS, cuts: dict[str, int] | None = None,
                    adult: pd.DataFrame | None = None) -> SyntheticSet:
    """§5.1's synthetic dataset: ``n`` Adult rows whose Table 6 category is their QI region's label (module docs).

    ``cuts``: cut values per numeric QI (default ``DEFAULT_CUTS``, 0 for a numeric QI not named); a QI of another
    dtype is categorical. ``adult``: the source table (default the shipped one)."""
    rng = make_rng(seed)
    src = load_adult() if adult is None else adult
    want = dict(DEFAULT_CUTS if cuts is None else cuts)
    cat = src["occupation"].map(OCCUPATION_CATEGORY)
    src = src[cat.notna()].reset_index(drop=True)
    cat = cat[cat.notna()].astype(np.int64).to_numpy()
    cut_values: dict[str, np.ndarray] = {}
    levels: dict[str, np.ndarray] = {}
    for q in qis:
        if q not in src:
            raise ArgumentError(f"the synthetic dataset's QI {q!r} is not a column of the source table")
        if pd.api.types.is_numeric_dtype(src[q]):
            lo, hi = np.percentile(src[q], [5, 95])
            values = np.unique(src[q][(src[q] >= lo) & (src[q] < hi)])  # a cut at the top value splits nothing
            c = int(want.get(q, 0))
            if c > len(values):
                raise ArgumentError(f"{q}: {c} cuts asked, only {len(values)} values lie between its 5th and 95th "
                                    "percentiles")
            cut_values[q] = np.sort(rng.choice(values, c, replace=False))
        else:
            levels[q] = np.sort(src[q].astype(str).unique())
    region, shape = _region(src, qis, cut_values, levels)
    n_cat = int(cat.max()) + 1
    counts = np.bincount(region * n_cat + cat, minlength=int(np.prod(shape)) * n_cat).reshape(-1, n_cat)
    labels = counts.argmax(axis=1)  # the majority category of each region (argmax: the lowest on ties)
    keep = np.flatnonzero(cat == labels[region])  # §5.1: tuples whose value differs from their region's are noise
    if len(keep) < n:
        raise ArgumentError(f"only {len(keep)} rows agree with their region's label, fewer than n={n}; ask for fewer "
                            "rows or fewer cuts")
    pick = np.sort(rng.choice(keep, n, replace=False))
    frame = src.iloc[pick].reset_index(drop=True)
    frame = frame.assign(category=cat[pick], job=[f"CAT{c}" for c in cat[pick]], region=region[pick])
    return SyntheticSet(frame, cut_values, levels, labels, tuple(qis))
