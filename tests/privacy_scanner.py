"""An independent privacy scanner: reads what crowd workers were shown and looks for what roles forbid.

It imports nothing of crowddb on purpose: it must not share a bug with the code it checks. It reads only
``crowddb_hits`` and ``crowddb_hit_items`` (the exact published content) and the raw input a test hands it.

Threat model
------------
The adversary is a crowd worker (or all of them, colluding) who sees every published HIT item and who knows the
population the operator's input was drawn from, i.e. the raw input rows minus their protected columns (the classic
k-anonymity linkage attacker). From the published items they try to

1. read a protected value directly: a sensitive or ground-truth value shown in any form (raw, upper- or lower-cased,
   or as part of a longer string such as a concatenation or a CASE result), or a key value (a published value equal
   to a key, or a published field whose values are mostly distinct keys);
2. single out a person: every published field whose name names a quasi-identifier (``age``, ``(age + 0)``, ``age_1``,
   ``AGE_X``; by case-insensitive containment of the QI's name, or by an explicit alias map) restricts which input
   rows the item can be; the set of input rows consistent with ALL of an item's QI fields is its equivalence class
   as the worker can reconstruct it. A class of 1..k-1 rows breaks k-anonymity (0 rows is fine: e.g. a synthetic
   sample that is nobody);
3. for group operators (one item = a chunk of one GROUP BY group, whose rows share the grouped columns), intersect
   within one item the boxes published for a grouped quasi-identifier: every row of the item holds a value admitted
   by all of them, which can pin the group's value even when each row alone looks k-anonymous.

Published cells are read as boxes: ``[23-35]`` a numeric range (inclusive), ``{a,b}`` a value set, ``*`` anything,
otherwise a plain value (numeric equality when both sides are numbers, else case-insensitive text equality).

Limits (what this scanner cannot see, so tests must not rely on it): a non-invertible transformation of a
protected value (``salary * 2``, a hash, a lookup table), a protected value shorter than 3 characters, numeric keys of
fewer than 4 digits published one by one, a column that merely correlates with a quasi-identifier without naming it
(an office looked up by zip), and hierarchy labels that are not ranges or value sets. A field named after a QI whose
value matches no input row at all (``upper(sex)`` = ``MALE`` is matched case-insensitively, but ``age * 2`` is not
invertible) is ignored when its name is not exactly the QI's, so it can neither create nor hide a small class.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

import duckdb
import numpy as np
import pandas as pd

__all__ = [
    "box_matches",
    "describe",
    "group_intersection_small_classes",
    "items_from_frame",
    "key_like_fields",
    "leaked_protected",
    "published_fields",
    "published_items",
    "small_classes",
]

_RANGE = re.compile(r"^\[\s*(-?\d+(?:\.\d+)?)\s*-\s*(-?\d+(?:\.\d+)?)\s*\]$")
_NUMBER = re.compile(r"^\s*-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\s*$")
_DIGITS = re.compile(r"\d+")


# --------------------------------------------------------------------------------------------------- reading items

def _cell_text(value) -> str | None:
    """A published JSON value as the text a worker reads (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _records(content: str, base: dict) -> list[dict]:
    parsed = json.loads(content)
    if isinstance(parsed, list):  # a group operator's chunk: one object per row
        return [dict(base, row_no=i, is_group=True,
                     fields={str(k): _cell_text(v) for k, v in (row or {}).items()})
                for i, row in enumerate(parsed)]
    if isinstance(parsed, dict):
        return [dict(base, row_no=None, is_group=False, fields={str(k): _cell_text(v) for k, v in parsed.items()})]
    return [dict(base, row_no=None, is_group=False, fields={"<value>": _cell_text(parsed)})]


def published_items(con) -> pd.DataFrame:
    """Every published record: one row per tuple item, one row per row of a group item.

    Columns: hit_id, run_id, operator, item_no, item_key, occurrence, row_no (None for a tuple item), is_group,
    content (the item's raw JSON text) and fields (dict published-name -> text, None for JSON null).
    ``con`` is a crowddb connection (anything with ``.sql``/``.execute`` returning DuckDB results) or a DuckDB one.
    """
    raw = getattr(con, "con", con)
    query = ("SELECT i.hit_id, h.run_id, h.operator, i.item_no, i.item_key, i.occurrence, i.content "
             "FROM crowddb_hit_items i LEFT JOIN crowddb_hits h USING (hit_id) ORDER BY i.hit_id, i.item_no")
    if isinstance(raw, duckdb.DuckDBPyConnection):
        rows = raw.execute(query).fetchall()
    else:
        rows = con.sql(query).fetchall()
    out: list[dict] = []
    for hit_id, run_id, operator, item_no, item_key, occurrence, content in rows:
        base = {"hit_id": hit_id, "run_id": run_id, "operator": operator, "item_no": item_no, "item_key": item_key,
                    "occurrence": occurrence, "content": content}
        out.extend(_records(content, base))
    columns = ["hit_id", "run_id", "operator", "item_no", "item_key", "occurrence", "content", "row_no", "is_group",
               "fields"]
    return pd.DataFrame(out, columns=columns)


def items_from_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Treat every row of a released frame (e.g. an ANONYMIZE result) as a published tuple item."""
    fields = [{str(c): (None if pd.isna(v) else _cell_text(v.item() if hasattr(v, "item") else v))
               for c, v in row.items()} for _, row in frame.iterrows()]
    n = len(frame)
    return pd.DataFrame({"hit_id": ["<release>"] * n, "run_id": [None] * n, "operator": ["<release>"] * n,
                         "item_no": np.arange(1, n + 1), "item_key": [None] * n, "occurrence": [0] * n,
                         "content": [json.dumps(f) for f in fields], "row_no": [None] * n,
                         "is_group": [False] * n, "fields": fields})


def published_fields(items: pd.DataFrame) -> set[str]:
    """Every field name any published record carries."""
    out: set[str] = set()
    for f in items["fields"]:
        out.update(f)
    return out


# ------------------------------------------------------------------------------------------------------- boxes

def _as_number(text: str) -> float | None:
    return float(text) if _NUMBER.match(text) else None


def box_matches(value_text: str | None, series: pd.Series) -> np.ndarray:
    """Which raw values of ``series`` the published cell ``value_text`` admits (boolean array, one per value).

    ``[a-b]`` inclusive numeric range; ``{a,b}`` value set (each member a plain value); ``*`` anything; None (JSON
    null) only missing values; a plain value: numeric equality when both are numbers, else case-insensitive text
    equality. A bracketed range that is not numeric cannot be read: it admits everything (never invents a class).
    """
    series = pd.Series(series).reset_index(drop=True)
    if value_text is None:
        return series.isna().to_numpy()
    text = value_text.strip()
    if text == "*":
        return np.ones(len(series), dtype=bool)
    m = _RANGE.match(text)
    if m:
        lo, hi = float(m.group(1)), float(m.group(2))
        nums = pd.to_numeric(series, errors="coerce")
        return ((nums >= lo) & (nums <= hi)).fillna(False).to_numpy(dtype=bool)
    if text.startswith("[") and text.endswith("]"):
        return np.ones(len(series), dtype=bool)
    if text.startswith("{") and text.endswith("}"):
        members = [t.strip() for t in text[1:-1].split(",")]
        out = np.zeros(len(series), dtype=bool)
        for member in members:
            out |= _plain_matches(member, series)
        return out
    return _plain_matches(text, series)


def _plain_matches(text: str, series: pd.Series) -> np.ndarray:
    number = _as_number(text)
    if number is not None:
        nums = pd.to_numeric(series, errors="coerce")
        if nums.notna().any():
            return (nums == number).fillna(False).to_numpy(dtype=bool)
    raw = series.map(lambda v: None if pd.isna(v) else _raw_text(v))
    return (raw.str.strip().str.casefold() == text.casefold()).fillna(False).to_numpy(dtype=bool)


def _raw_text(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# ---------------------------------------------------------------------------------------------- protected values

def _protected_texts(frame: pd.DataFrame, columns: Iterable[str], min_len: int) -> set[str]:
    out: set[str] = set()
    for column in columns:
        for value in frame[column].dropna().unique():
            forms = {str(value), _raw_text(value)}
            out.update(f.strip().casefold() for f in forms if len(f.strip()) >= min_len)
    return out


def _key_values(frame: pd.DataFrame, key_column: str) -> tuple[set[str], bool]:
    values = frame[key_column].dropna()
    numeric = pd.api.types.is_numeric_dtype(values) or values.astype(str).str.fullmatch(r"\d+").all()
    if numeric:
        return {str(int(v)) for v in values}, True
    return {str(v).strip().casefold() for v in values}, False


def _distinctive(frame: pd.DataFrame, key_column: str, long_keys: set[str], tolerance: float = 0.001) -> bool:
    """Are numeric key values rare among the other columns' values? (Adult's dense ids 1..30162 are not: fnlwgt and
    capital_gain hold such numbers too, so a bare number there says nothing about the key.)"""
    cells = total = 0
    for column in frame.columns:
        if column == key_column or not pd.api.types.is_numeric_dtype(frame[column]):
            continue
        values = frame[column].dropna()
        values = values[(values == values.round())].astype("int64").astype(str)
        cells += int(values.isin(long_keys).sum())
        total += len(frame[column])
    return total == 0 or cells <= tolerance * total


def key_like_fields(items: pd.DataFrame, frame: pd.DataFrame, key_column: str, *, min_items: int = 5,
                    share: float = 0.8) -> list[dict]:
    """Published fields whose values are mostly distinct key values (the key under another name or form)."""
    keys, numeric = _key_values(frame, key_column)
    by_field: dict[str, list[str]] = {}
    for fields in items["fields"]:
        for name, value in fields.items():
            if value is not None:
                by_field.setdefault(name, []).append(value)
    findings = []
    for name, values in by_field.items():
        if len(values) < min_items:
            continue
        norm = []
        for v in values:
            n = _as_number(v)
            norm.append(str(int(n)) if numeric and n is not None and float(n).is_integer() else v.strip().casefold())
        hits = [v for v in norm if v in keys]
        if len(hits) >= share * len(values) and len(set(hits)) >= share * len(values):
            findings.append({"kind": "key-field", "field": name, "value": values[0],
                             "matched": f"{len(hits)}/{len(values)}", "index": None})
    return findings


def leaked_protected(items: pd.DataFrame, frame: pd.DataFrame, protected_text_columns: Iterable[str],
                     key_column: str | None, *, min_len: int = 3, key_min_len: int = 4) -> list[dict]:
    """Findings (dicts: kind, index, field, value, matched) of protected values in published records.

    kind 'protected': a value of a sensitive/ground-truth column (of at least ``min_len`` characters) occurs,
    case-insensitively, in a published value (equal to it or as a substring). kind 'key': a key value of at least
    ``key_min_len`` characters is published (text keys: as a case-insensitive substring; numeric keys: as a whole run
    of digits inside a published value, counted only when the key's numbers are distinctive, i.e. (almost) never
    values of the input's other numeric columns, or when the field's name contains the key column's name: a dense
    numeric key such as Adult's 1..30162 collides with ordinary numbers like fnlwgt). kind 'key-field': see
    ``key_like_fields`` (catches a renamed numeric key whatever its values' density).
    """
    findings: list[dict] = []
    texts = _protected_texts(frame, protected_text_columns, min_len)
    pattern = re.compile("|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))) if texts else None
    keys, numeric = _key_values(frame, key_column) if key_column else (set(), False)
    long_keys = {k for k in keys if len(k) >= key_min_len}
    distinctive = numeric and _distinctive(frame, key_column, long_keys)
    key_pattern = (re.compile("|".join(re.escape(k) for k in sorted(long_keys, key=len, reverse=True)))
                   if long_keys and not numeric else None)
    for index, fields in zip(items.index, items["fields"]):
        for name, value in fields.items():
            if value is None:
                continue
            folded = value.casefold()
            if pattern is not None:
                m = pattern.search(folded)
                if m:
                    findings.append({"kind": "protected", "index": index, "field": name, "value": value,
                                     "matched": m.group(0)})
                    continue
            if numeric and (distinctive or key_column.lower() in name.lower()):
                run = next((r for r in _DIGITS.findall(value) if len(r) >= key_min_len and str(int(r)) in long_keys),
                           None)
                if run is not None:
                    findings.append({"kind": "key", "index": index, "field": name, "value": value, "matched": run})
            elif key_pattern is not None:
                m = key_pattern.search(folded)
                if m:
                    findings.append({"kind": "key", "index": index, "field": name, "value": value,
                                     "matched": m.group(0)})
    if key_column:
        findings += key_like_fields(items, frame, key_column)
    return findings


# ----------------------------------------------------------------------------------------------- small classes

def _qi_of(field: str, qi_columns: list[str], aliases: Mapping[str, str | None] | None) -> tuple[str | None, bool]:
    """(QI column a published field stands for, whether the mapping is exact/explicit)."""
    if aliases and field in aliases:
        return aliases[field], True
    low = field.lower()
    for q in qi_columns:
        if low == q.lower():
            return q, True
    found = [q for q in qi_columns if q.lower() in low]
    return (max(found, key=len), False) if found else (None, False)


class _Masks:
    """Caches the boolean mask of (QI column, published text) over the input frame."""

    def __init__(self, frame: pd.DataFrame, qi_columns: list[str]):
        self.frame = frame.reset_index(drop=True)
        self.cache: dict[tuple[str, str | None], np.ndarray] = {}
        self.all = np.ones(len(self.frame), dtype=bool)

    def get(self, column: str, text: str | None) -> np.ndarray:
        key = (column, text)
        if key not in self.cache:
            self.cache[key] = box_matches(text, self.frame[column])
        return self.cache[key]

    def record(self, fields: Mapping[str, str | None], qi_columns, aliases, skip: set[str] = frozenset()):
        """Mask of the rows consistent with a record's QI fields (per QI column, for intersection), and the mapped
        field names."""
        per_qi: dict[str, np.ndarray] = {}
        for name, value in fields.items():
            qi, exact = _qi_of(name, qi_columns, aliases)
            if qi is None or qi in skip:
                continue
            mask = self.get(qi, value)
            if not exact and not mask.any():
                continue  # a derived field we cannot invert (see the module docstring)
            per_qi[qi] = per_qi.get(qi, self.all) & mask
        return per_qi


def small_classes(items: pd.DataFrame, frame: pd.DataFrame, qi_columns: Iterable[str], k: int,
                  aliases: Mapping[str, str | None] | None = None) -> pd.DataFrame:
    """Published records whose reconstructed class (input rows consistent with all their QI-mapped fields) has
    1..k-1 rows; the returned frame has a ``count`` column. Every record is judged on its own (see
    ``group_intersection_small_classes`` for the intersection inside group items)."""
    qi_columns = list(qi_columns)
    masks = _Masks(frame, qi_columns)
    counts = []
    for fields in items["fields"]:
        per_qi = masks.record(fields, qi_columns, aliases)
        mask = masks.all.copy()
        for m in per_qi.values():
            mask &= m
        counts.append(int(mask.sum()))
    out = items.assign(count=counts)
    return out[(out["count"] >= 1) & (out["count"] < k)]


def group_intersection_small_classes(items: pd.DataFrame, frame: pd.DataFrame, qi_columns: Iterable[str],
                                     group_columns: Iterable[str], k: int,
                                     aliases: Mapping[str, str | None] | None = None) -> pd.DataFrame:
    """Like ``small_classes`` for group items, after intersecting within each item (hit_id, item_no) the boxes of
    the grouped quasi-identifiers ``group_columns``: every row of the item shares their value. Only group records
    are judged. Returned frame has ``count`` and ``group_rows`` (input rows admitted by the intersection)."""
    qi_columns, group_columns = list(qi_columns), list(group_columns)
    masks = _Masks(frame, qi_columns)
    groups = items[items["is_group"].astype(bool)]
    counts, group_rows = {}, {}
    for _, item in groups.groupby(["hit_id", "item_no", "occurrence"], sort=False, dropna=False):
        shared = masks.all.copy()
        per_record = {}
        for index, fields in zip(item.index, item["fields"]):
            per_qi = masks.record(fields, qi_columns, aliases)
            for g in group_columns:
                if g in per_qi:
                    shared &= per_qi[g]
            per_record[index] = per_qi
        for index, per_qi in per_record.items():
            mask = shared.copy()
            for qi, m in per_qi.items():
                if qi not in group_columns:
                    mask &= m
            counts[index] = int(mask.sum())
            group_rows[index] = int(shared.sum())
    out = groups.assign(count=pd.Series(counts, dtype="int64"), group_rows=pd.Series(group_rows, dtype="int64"))
    return out[(out["count"] >= 1) & (out["count"] < k)]


def describe(findings, limit: int = 3) -> str:
    """A short human-readable summary of findings (a list of dicts or a small-class frame) for assertion messages."""
    if isinstance(findings, pd.DataFrame):
        if findings.empty:
            return "none"
        sample = findings.head(limit)
        n_items = findings[["hit_id", "item_no"]].drop_duplicates().shape[0]
        examples = "; ".join(f"{c} rows <- {json.dumps(f)}" for c, f in zip(sample["count"], sample["fields"]))
        return f"{len(findings)} records in classes below k (of {n_items} items); e.g. {examples}"
    if not findings:
        return "none"
    kinds: dict[str, int] = {}
    for f in findings:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    return (f"{len(findings)} findings {kinds}; e.g. " +
            "; ".join(f"{f['kind']} {f['field']}={f['value']!r} ({f['matched']})" for f in findings[:limit]))
