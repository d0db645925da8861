"""Shared contract of the truth-inference methods: input validation, integer coding, the method base class, registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from crowddb.errors import ArgumentError, EmptyInputError

__all__ = [
    "ALIASES",
    "MAX_AUTO_CATEGORIES",
    "METHODS",
    "Answers",
    "CategoricalMethod",
    "NumericMethod",
    "TruthMethod",
    "encode_answers",
    "get_method",
    "register",
    "value_kind",
]

#: ``method='auto'`` treats integer values with at most this many distinct values as categorical labels.
MAX_AUTO_CATEGORIES = 10

_TINY = 1e-12

#: what every method's ``_fit`` returns: truth per object (class codes or numbers), confidence per object,
#: weight per source, number of iterations
FitResult = tuple[np.ndarray, np.ndarray, np.ndarray, int]


@dataclass
class Answers:
    """Integer-coded answers: one entry per (object, source, value) claim; labels kept for decoding."""

    obj: np.ndarray  # int64 object code per answer
    src: np.ndarray  # int64 source code per answer
    val: np.ndarray  # int64 class code (categorical) or float64 value (numeric) per answer
    objects: pd.Index  # object label per object code
    sources: pd.Index  # source label per source code
    classes: pd.Index | None = None  # class label per class code (categorical only)
    kind: str = "numeric"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_objects(self) -> int:
        """Number of distinct objects."""
        return len(self.objects)

    @property
    def n_sources(self) -> int:
        """Number of distinct sources."""
        return len(self.sources)

    @property
    def n_classes(self) -> int:
        """Number of distinct class labels (categorical only)."""
        return 0 if self.classes is None else len(self.classes)


def _is_null(a: np.ndarray | pd.Series) -> np.ndarray:
    return np.asarray(pd.isna(a), dtype=bool)


def value_kind(values: Any) -> str:
    """Return 'categorical' or 'numeric' for ``method='auto'`` from a value column's dtype (see module docs)."""
    s = values if isinstance(values, pd.Series) else pd.Series(np.asarray(values) if not isinstance(values, list) else values)
    s = s[~s.isna()]
    if pd.api.types.is_bool_dtype(s.dtype) or isinstance(s.dtype, pd.CategoricalDtype):
        return "categorical"
    if pd.api.types.is_integer_dtype(s.dtype):
        return "categorical" if s.nunique() <= MAX_AUTO_CATEGORIES else "numeric"
    if pd.api.types.is_float_dtype(s.dtype):
        return "numeric"
    # object dtype: numbers stored as Python objects count as numbers, anything else is a label (every value is
    # looked at: a label after many numbers makes the column categorical, not a parse error)
    if len(s) and _all_numbers(s):
        return value_kind(pd.to_numeric(s))
    return "categorical"


#: what pandas infers for an object column holding only (non-boolean) numbers
_NUMBER_KINDS = frozenset({"integer", "floating", "mixed-integer-float", "decimal"})


def _all_numbers(s: pd.Series) -> bool:
    """Every value of the object column ``s`` is a number (not a bool, not a numeric string), read in C."""
    return pd.api.types.infer_dtype(s, skipna=True) in _NUMBER_KINDS


def _factorize(x: pd.Series) -> tuple[np.ndarray, Any]:
    """pd.factorize, with a shortcut for the common case of a sorted integer column (answers listed object by
    object): codes count the changes and the labels are each run's first value, exactly what pd.factorize gives
    (first-appearance order is sorted order there), in a fraction of its hashing time."""
    if isinstance(x.dtype, np.dtype) and x.dtype.kind in "iu" and len(x) > 1:
        a = x.to_numpy()
        change = a[1:] != a[:-1]
        if np.all(a[1:] >= a[:-1]):
            codes = np.empty(len(a), np.intp)
            codes[0] = 0
            np.cumsum(change, out=codes[1:])
            return codes, pd.Index(a[np.flatnonzero(np.concatenate(([True], change)))])
    return pd.factorize(x)


def _last_answer_per_pair(key: np.ndarray, n_keys: int) -> np.ndarray | None:
    """Positions (ascending) of the last answer of each repeated ``key`` (an (object, source) pair code below
    ``n_keys``), or None when no pair repeats: the answers to keep, in input order."""
    n = len(key)
    if n_keys < (1 << 62) // n:
        # (pair, position) packed in one int64: an unstable sort of unique numbers orders the answers exactly as
        # a stable argsort of the pairs would, several times faster
        packed = np.sort(key * n + np.arange(n, dtype=np.int64))
        ks = packed // n
        pos = packed - ks * n
    else:  # too many pairs to pack: the stable argsort
        pos = np.argsort(key, kind="stable")
        ks = key[pos]
    last_of_run = np.append(ks[1:] != ks[:-1], True)  # the sort puts the last answer of each pair last in its run
    if last_of_run.all():
        return None
    mask = np.zeros(n, bool)
    mask[pos[last_of_run]] = True  # a mask gives the kept answers in input order without another sort
    return np.flatnonzero(mask)


def encode_answers(
    objects: Any, sources: Any, values: Any, kind: str, *, dropna: bool = False, method: str = "?"
) -> Answers:
    """Validate and integer-code answers with pd.factorize; duplicate (object, source) pairs keep the last answer."""
    o = pd.Series(objects).reset_index(drop=True) if not isinstance(objects, pd.Series) else objects.reset_index(drop=True)
    s = pd.Series(sources).reset_index(drop=True) if not isinstance(sources, pd.Series) else sources.reset_index(drop=True)
    v = pd.Series(values).reset_index(drop=True) if not isinstance(values, pd.Series) else values.reset_index(drop=True)
    if not (len(o) == len(s) == len(v)):
        raise ArgumentError(f"object, source and value must have the same length, got {len(o)}, {len(s)}, {len(v)}")
    if len(o) == 0:
        raise EmptyInputError(f"{method}: the input has no answers")
    if _is_null(o).any():
        raise ArgumentError(f"{method}: {int(_is_null(o).sum())} answers have a NULL object")
    if _is_null(s).any():
        raise ArgumentError(f"{method}: {int(_is_null(s).sum())} answers have a NULL source")
    null_v = _is_null(v)
    if null_v.any():
        if not dropna:
            first = o[null_v].iloc[0]
            raise ArgumentError(
                f"{method}: {int(null_v.sum())} answers have a NULL/NaN value (first on object {first!r}); "
                "filter them out or pass dropna=True"
            )
        keep_objects = pd.unique(o)
        o, s, v = o[~null_v].reset_index(drop=True), s[~null_v].reset_index(drop=True), v[~null_v].reset_index(drop=True)
        missing = pd.Index(keep_objects).difference(pd.Index(pd.unique(o)))
        if len(missing):
            raise ArgumentError(
                f"{method}: {len(missing)} objects have no answers once NULL values are dropped "
                f"(e.g. {list(missing[:5])!r}); there is nothing to infer their truth from"
            )
    if len(o) == 0:
        raise EmptyInputError(f"{method}: the input has no non-NULL answers")

    if kind == "numeric":
        if not (pd.api.types.is_numeric_dtype(v.dtype) and not pd.api.types.is_bool_dtype(v.dtype)):
            try:
                if v.dtype == object and _all_numbers(v):
                    v = pd.to_numeric(v)
                else:
                    raise TypeError
            except (TypeError, ValueError):
                raise ArgumentError(
                    f"{method}: method {method!r} is numeric but the value column holds "
                    f"{v.dtype} values such as {v.iloc[0]!r}; use a categorical method ('mv', 'ds', 'crh_categorical', ...)"
                ) from None
        val = v.to_numpy(dtype=np.float64)
        bad = ~np.isfinite(val)
        if bad.any():
            raise ArgumentError(
                f"{method}: {int(bad.sum())} values are NaN or infinite (first on object {o[bad].iloc[0]!r})"
            )
        classes = None
    else:
        if pd.api.types.is_float_dtype(v.dtype):
            fv = v.to_numpy(dtype=np.float64)
            if not np.isfinite(fv).all():
                raise ArgumentError(f"{method}: the value column holds NaN or infinite values")
            if not np.all(fv == np.round(fv)):
                raise ArgumentError(
                    f"{method}: method {method!r} is categorical but the value column holds "
                    f"non-integral numbers such as {fv[fv != np.round(fv)][0]!r}; use a numeric method "
                    "('mean', 'median', 'crh', 'catd', 'gtm') or cast the labels to text"
                )
            v = pd.Series(fv.astype(np.int64))
        codes, uniq = pd.factorize(v)  # then sort the few distinct labels: cheaper than sort=True over every answer
        order = np.argsort(np.asarray(uniq), kind="stable")
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        val = rank[codes]
        classes = pd.Index(uniq.take(order))
    # duplicates (same object, same source): keep the last answer, as a worker's later answer overrides
    oc, objects_idx = _factorize(o)
    sc, sources_idx = _factorize(s)
    oc = oc.astype(np.int64)
    sc = sc.astype(np.int64)
    keep = _last_answer_per_pair(oc * len(sources_idx) + sc, len(objects_idx) * len(sources_idx))
    if keep is not None:
        oc, sc, val = oc[keep], sc[keep], val[keep]
    return Answers(oc, sc, val, pd.Index(objects_idx), pd.Index(sources_idx), classes, kind)


class TruthMethod:
    """Base of every method: ``fit`` on arrays or ``fit_frame`` on a DataFrame; results as pandas Series."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()

    def __init__(self, tol: float = 1e-6, max_iter: int = 100, seed: int | np.random.Generator | None = None,
                 dropna: bool = False) -> None:
        if not (isinstance(max_iter, (int, np.integer)) and max_iter >= 1):
            raise ArgumentError(f"max_iter must be a positive integer, got {max_iter!r}")
        if not (np.isfinite(tol) and tol >= 0):
            raise ArgumentError(f"tol must be a non-negative number, got {tol!r}")
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self.seed = seed
        self.dropna = dropna

    def fit(self, objects: Any, sources: Any, values: Any) -> TruthMethod:
        """Fit on three equally long 1-D arrays of object labels, source labels and values."""
        ans = encode_answers(objects, sources, values, self.kind, dropna=self.dropna, method=self.name)
        return self.fit_answers(ans)

    def fit_frame(self, df: pd.DataFrame, object: str = "object", source: str = "source", value: str = "value"
                  ) -> TruthMethod:
        """Fit on a DataFrame, naming its object, source and value columns."""
        for role, col in (("object", object), ("source", source), ("value", value)):
            if col not in df.columns:
                from crowddb.errors import UnknownColumnError

                raise UnknownColumnError(f"{role} column {col!r} not in input columns {list(df.columns)!r}")
        return self.fit(df[object], df[source], df[value])

    def fit_answers(self, ans: Answers) -> TruthMethod:
        """Fit on already coded answers and decode the results to labels."""
        truth, conf, weights, n_iter = self._fit(ans)
        if self.kind == "categorical":
            assert ans.classes is not None
            truth_labels = ans.classes.take(np.asarray(truth, dtype=np.int64))
            self.truths_ = pd.Series(np.asarray(truth_labels), index=ans.objects, name="truth")
            self.classes_ = ans.classes
        else:
            self.truths_ = pd.Series(np.asarray(truth, dtype=np.float64), index=ans.objects, name="truth")
        self.truths_.index.name = "object"
        self.confidences_ = pd.Series(np.asarray(conf, dtype=np.float64), index=ans.objects, name="confidence")
        self.confidences_.index.name = "object"
        self.source_weights_ = pd.Series(np.asarray(weights, dtype=np.float64), index=ans.sources, name="weight")
        self.source_weights_.index.name = "source"
        self.n_iter_ = int(n_iter)
        self.answers_ = ans
        return self

    def _fit(self, ans: Answers) -> FitResult:
        raise NotImplementedError

    def __repr__(self) -> str:
        shown = f"{type(self).__name__}(tol={self.tol:g}, max_iter={self.max_iter}, seed={self.seed!r})"
        if not hasattr(self, "truths_"):
            return f"{shown}: not fitted"
        return (f"{shown}: fitted on {len(self.answers_.val):,} answers of {len(self.truths_):,} objects by "
                f"{len(self.source_weights_):,} sources in {self.n_iter_} iterations")

    def _repr_html_(self) -> str:
        """A notebook's view: the repr, then the first truths with their confidence and the sources' weights."""
        import html

        if not hasattr(self, "truths_"):
            return f"<p>{html.escape(repr(self))}</p>"
        truths = pd.concat([self.truths_, self.confidences_], axis=1).head(10)
        weights = self.source_weights_.sort_values(ascending=False, kind="stable").head(10).to_frame()
        return (f"<p>{html.escape(repr(self))}</p><p>truths (first 10):</p>{truths.to_html(escape=True)}"
                f"<p>source weights (10 highest):</p>{weights.to_html(escape=True)}")


class CategoricalMethod(TruthMethod):
    """A method whose values are class labels; truths are labels, confidences posterior probabilities."""

    kind = "categorical"

    def _posterior_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.posteriors_, index=self.truths_.index, columns=self.classes_)

    @property
    def proba_(self) -> pd.DataFrame:
        """Posterior probability of every class per object (objects × classes)."""
        return self._posterior_frame()


class NumericMethod(TruthMethod):
    """A method whose values are real numbers; confidences are in (0, 1], 1 when all sources agree."""

    kind = "numeric"


METHODS: dict[str, type[TruthMethod]] = {}
ALIASES: dict[str, str] = {}


def register(cls: type[TruthMethod]) -> type[TruthMethod]:
    """Class decorator adding a method to METHODS under its name and aliases."""
    METHODS[cls.name] = cls
    for a in cls.aliases:
        ALIASES[a] = cls.name
    return cls


def get_method(name: str) -> type[TruthMethod]:
    """Return the method class for a name or alias (case-insensitive); unknown names raise ArgumentError."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in METHODS:
        raise ArgumentError(
            f"unknown truth-inference method {name!r}; valid methods: {', '.join(sorted(METHODS))} "
            f"(aliases: {', '.join(sorted(ALIASES))}) or 'auto'"
        )
    return METHODS[key]


# ---------------------------------------------------------------- shared vectorized helpers


def segment_sum(idx: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """Sum ``weights`` per segment ``idx`` (np.bincount)."""
    return np.bincount(idx, weights=weights, minlength=n)


def class_votes(ans: Answers, w_answer: np.ndarray | None = None) -> np.ndarray:
    """(objects × classes) matrix of (weighted) votes."""
    k = ans.n_classes
    flat = ans.obj * k + ans.val
    v = np.bincount(flat, weights=w_answer, minlength=ans.n_objects * k)
    return v.reshape(ans.n_objects, k)


def normalize_rows(m: np.ndarray) -> np.ndarray:
    """Divide each row by its sum (rows of zeros stay uniform)."""
    s = m.sum(axis=1, keepdims=True)
    out = np.where(s > 0, m / np.where(s > 0, s, 1.0), 1.0 / m.shape[1])
    return out


#: relative tolerance of the tie rule of :func:`argmax_rows`. Posteriors are ``exp(log-score - max)`` normalized, so
#: their relative gap is the absolute gap of the log-scores, sums of hundreds of logs whose last bits depend on the
#: order of the answers (at |log-score| ~ 1e4 one ulp is ~2e-12, hence not 1e-12); a gap of 1e-9 relative (the
#: smallest the pins treat as real, 0.5 vs 0.5 - 5e-10) stays 100 times above it.
TIE_REL_TOL = 1e-11
#: absolute part of the tie rule: it only matters for scores within 1e-300 of zero (e.g. underflowed posteriors)
TIE_ABS_TOL = 1e-300


def tied_with_max(p: np.ndarray) -> np.ndarray:
    """Boolean mask, same shape as the 2-D ``p``: the entries that equal their row's maximum under the tie rule of
    :func:`argmax_rows`. Integer scores (vote counts) are exact, so they tie only when equal. NaN is never tied, and
    the maximum skips it (a row of NaN has nothing tied)."""
    if p.dtype.kind in "iub":
        return p == p.max(axis=1, keepdims=True)
    m = np.fmax.reduce(p, axis=1, keepdims=True)  # fmax skips NaN (NaN only for an all-NaN row)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: an infinity ties only with itself (p == m)
        near = np.abs(m - p) <= TIE_REL_TOL * np.maximum(np.abs(m), np.abs(p)) + TIE_ABS_TOL
    return (p == m) | (near & np.isfinite(p) & np.isfinite(m))


def argmax_rows(p: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """Per row, the class code with the largest score, ties broken by a stated rule instead of the last bit.

    Rule: a class ties with the row maximum m when ``|m - x| <= TIE_REL_TOL * max(|m|, |x|) + TIE_ABS_TOL``
    (1e-11 relative, 1e-300 absolute; exact equality for infinities and integer scores); among the tied classes the
    lowest class code wins (the first position, as in crowddb/anonymize/ties.py; codes follow the sorted labels, so
    the smallest tied label), or, when ``rng`` is given, the one with the largest of ``rng.random(p.shape)`` (one
    draw per cell, the first on equal draws), so every tied class is equally likely. NaN never wins; a row of NaN
    gives code 0.

    Why: the scores (weighted votes, EM posteriors) are float sums whose last bits depend on the order of the
    answers, so two classes tied in exact arithmetic can come out an ulp apart either way; a plain argmax would then
    pick the label by summation order (numpy version, machine, order of the input rows).
    """
    tied = tied_with_max(p)
    if rng is None:
        return tied.argmax(axis=1)  # first True: the lowest tied code (code 0 for a row with nothing tied)
    draw = rng.random(p.shape)  # one draw per cell whatever the ties: a seed's stream does not depend on the scores
    return np.where(tied, draw, -1.0).argmax(axis=1)  # draws are in [0, 1): an untied class (-1) never wins


def numeric_confidence(ans: Answers, truth: np.ndarray, w_source: np.ndarray | None = None) -> np.ndarray:
    """1 / (1 + weighted RMS deviation of claims from the truth / global std of claims): 1 = all sources agree."""
    w = np.ones(len(ans.val)) if w_source is None else w_source[ans.src]
    w = np.maximum(w, 0.0)
    dev2 = (ans.val - truth[ans.obj]) ** 2
    num = segment_sum(ans.obj, w * dev2, ans.n_objects)
    den = segment_sum(ans.obj, w, ans.n_objects)
    rms = np.sqrt(num / np.maximum(den, _TINY))
    scale = float(np.std(ans.val)) or 1.0
    return 1.0 / (1.0 + rms / scale)
