"""The simulated crowd's world: answer a published (possibly generalized) tuple from the nearest real records.

A worker shown a generalized tuple assumes values uniform inside each published range or value set
(kanon-crowd-db §4.1), imagines one concrete person, and answers with the ground truth of the nearest record.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from ..anonymize.encoding import sorted_texts

_RANGE = re.compile(r"^\[\s*(-?[\d.eE+]+)\s*[-,~]\s*(-?[\d.eE+]+)\s*\]$")
_SET = re.compile(r"^\{(.*)\}$")
_MISMATCH = 1.0e4  # code-space penalty: any categorical mismatch outweighs every numeric distance
#: standardized coordinate of a missing (NULL, NaN, infinite) number: farther than any known value, nearer than a
#: categorical mismatch (up to 24 missing numbers at once), so a record missing a value is a last resort
_MISSING = 1.0e3


class KnowledgeBase:
    """Ground truth of known records, searchable by nearest neighbour over mixed numeric/categorical columns."""

    def __init__(self, frame: pd.DataFrame, truth: np.ndarray | pd.Series,
                 labels: dict[str, dict[str, list[str]]] | None = None) -> None:
        """``frame``: raw values of the published columns; ``truth``: one answer per row; ``labels``: per column,
        generalization label -> the leaf values it stands for (hierarchy labels of a release)."""
        self.columns = list(frame.columns)
        self.truth = np.asarray(truth, dtype=object)
        self.labels = labels or {}
        self._numeric = [c for c in self.columns if pd.api.types.is_numeric_dtype(frame[c])]
        self._categorical = [c for c in self.columns if c not in self._numeric]
        known = {c: _floats(frame[c]) for c in self._numeric}
        finite = {c: v[np.isfinite(v)] for c, v in known.items()}  # NULL, NaN and inf are missing, not values
        self._center = {c: float(v.mean()) if len(v) else 0.0 for c, v in finite.items()}
        self._scale = {c: float(v.std()) if len(v) and v.std() > 0 else 1.0 for c, v in finite.items()}
        self._categories: dict[str, np.ndarray] = {}
        self._codes: dict[str, np.ndarray] = {}
        for c in self._categorical:
            codes, uniques = pd.factorize(frame[c].astype(str), sort=True)
            self._categories[c], self._codes[c] = np.asarray(uniques, dtype=object), codes
        self._ranges = {c: (float(v.min()), float(v.max())) if len(v) else (0.0, 0.0) for c, v in finite.items()}
        self._integer = {c: pd.api.types.is_integer_dtype(frame[c]) for c in self._numeric}
        points = self._points(known, self._codes)
        self._tree = cKDTree(points)
        self._onehot_tree: cKDTree | None = None

    def __len__(self) -> int:
        return len(self.truth)

    def _standardized(self, column: str, values: np.ndarray) -> np.ndarray:
        """A numeric column standardized; a missing value (NaN, inf) at the far-away ``_MISSING`` coordinate."""
        with np.errstate(invalid="ignore", over="ignore"):
            out = (np.asarray(values, dtype=float) - self._center[column]) / self._scale[column]
        return np.where(np.isfinite(out), out, _MISSING)

    def _points(self, numeric: dict[str, np.ndarray], codes: dict[str, np.ndarray]) -> np.ndarray:
        cols = [self._standardized(c, numeric[c]) for c in self._numeric]
        cols += [codes[c].astype(float) * _MISMATCH for c in self._categorical]
        return np.column_stack(cols) if cols else np.zeros((len(next(iter(codes.values()))), 0))

    def _onehot(self, numeric: dict[str, np.ndarray], codes: dict[str, np.ndarray]) -> np.ndarray:
        cols = [self._standardized(c, numeric[c])[:, None] for c in self._numeric]
        for c in self._categorical:
            eye = np.eye(len(self._categories[c]) + 1)[:, :-1] / np.sqrt(2.0)  # code -1 (unknown) -> all zeros
            cols.append(eye[codes[c]])
        return np.hstack(cols)

    def sample(self, published: pd.DataFrame, draws: int, rng: np.random.Generator) -> np.ndarray:
        """Ground-truth answers of ``draws`` imagined persons per published row: array (len(published), draws)."""
        n = len(published)
        numeric = {c: self._draw_numeric(published[c], n, draws, rng) for c in self._numeric}
        codes = {c: self._draw_categorical(published[c], n, draws, rng) for c in self._categorical}
        flat_num = {c: v.ravel() for c, v in numeric.items()}
        flat_codes = {c: v.ravel() for c, v in codes.items()}
        dist, idx = self._tree.query(self._points(flat_num, flat_codes), k=1, workers=-1)
        far = dist >= _MISMATCH / 2  # no record shares every categorical value: rank mismatches by Hamming distance
        if far.any():
            if self._onehot_tree is None:
                self._onehot_tree = cKDTree(self._onehot(self._known_numeric(), self._codes))
            sub_num = {c: v[far] for c, v in flat_num.items()}
            sub_codes = {c: v[far] for c, v in flat_codes.items()}
            _, idx[far] = self._onehot_tree.query(self._onehot(sub_num, sub_codes), k=1, workers=-1)
        return self.truth[idx].reshape(n, draws)

    def _known_numeric(self) -> dict[str, np.ndarray]:
        data = self._tree.data
        return {c: data[:, j] * self._scale[c] + self._center[c] for j, c in enumerate(self._numeric)}

    def _draw_numeric(self, shown: pd.Series, n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
        """Uniform draws inside each shown range ('[lo-hi]'), the value itself, or the whole domain ('*')."""
        uniques, inverse = sorted_texts(shown.to_numpy())  # each distinct text once (a NULL as 'None'/'nan')
        lo = np.empty(len(uniques))
        hi = np.empty(len(uniques))
        for j, text in enumerate(uniques):  # one parse per distinct published value, not per row
            lo[j], hi[j] = self._parse_range(shown.name, text)
        lo, hi = lo[inverse][:, None], hi[inverse][:, None]
        if self._integer[shown.name]:
            return np.floor(rng.uniform(lo, hi + 1.0, size=(n, draws))).clip(lo, hi)
        return rng.uniform(lo, hi, size=(n, draws))

    def _parse_range(self, column: str, text: str) -> tuple[float, float]:
        text = text.strip()
        if text in ("*", "", "nan", "None"):
            return self._ranges[column]
        match = _RANGE.match(text)
        try:
            lo, hi = (float(match.group(1)), float(match.group(2))) if match else (float(text), float(text))
        except ValueError:
            return self._ranges[column]
        if not (np.isfinite(lo) and np.isfinite(hi)):  # 'nan', 'inf': nothing known, like '*'
            return self._ranges[column]
        return lo, hi

    def _draw_categorical(self, shown: pd.Series, n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
        """Uniform draws among the values a shown set ('{a,b}'), label or '*' stands for; a plain value is itself."""
        categories = self._categories[shown.name]
        index = {v: i for i, v in enumerate(categories)}
        uniques, inverse = sorted_texts(shown.to_numpy())  # each distinct text once (a NULL as 'None'/'nan')
        members = [self._members(shown.name, text, categories, index) for text in uniques]
        sizes = np.array([len(m) for m in members], dtype=np.int64)  # int offsets even with no rows
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        flat = np.concatenate(members) if members else np.zeros(0, dtype=np.int64)
        pick = np.floor(rng.random((n, draws)) * sizes[inverse][:, None]).astype(np.int64)
        return flat[offsets[inverse][:, None] + pick]

    def _members(self, column: str, text: str, categories: np.ndarray, index: dict[str, int]) -> np.ndarray:
        text = text.strip()
        if text == "*":
            return np.arange(len(categories))
        match = _SET.match(text)
        values = [v.strip() for v in match.group(1).split(",")] if match else None
        if values is None:
            values = self.labels.get(column, {}).get(text, [text])
        codes = [index.get(v, -1) for v in values]
        return np.array(codes, dtype=np.int64)


def _floats(values: pd.Series) -> np.ndarray:
    """A numeric column as floats, NULL (also pandas' NA of nullable dtypes) as NaN."""
    return values.astype("float64").to_numpy()
