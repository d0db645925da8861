"""An independent checker of k-anonymity across releases (issue 15's adversary), importing nothing of crowddb.

Threat model (issue 15): a worker knows every person's quasi-identifier (QI) values, sees every item of every
release, and links one person's items across releases perfectly. The promise: for every row ever published, the rows
such a worker cannot tell apart from it (same set of releases, same published box in each) number at least k, the
smallest k among the releases that published it.

How perfect linkage is made literal: the test adds a unique ``token`` column to the table and declares it core, so
every item carries it raw. The token ties each published record to its row (the checker's item -> row mapping) and to
the same person's records in the other releases. It says nothing else: the worker does not know whose token it is.

What the checker computes
-------------------------
A release is a list of published records (a dict published-field -> text, as the worker read it) and the k it
promised. A crowd run is one release (its records are the ``crowddb_hit_items`` of its HITs; one record per tuple
item, one per row of a group item); an ``ANONYMIZE`` result is one release (one record per returned row).

For every row of the table, its **signature** is, per release, either *absent* (no record of that release carries its
token) or the set of QI boxes its records in that release show (normally exactly one box; the boxes are normalized
syntactically only: ``{b,a}`` equals ``{a,b}``, ``[3-3]`` equals ``3``, text is case-folded, a QI the record does
not publish reads ``*``). A row is *published* when some entry is not absent. Its **joint class** is the set of rows
of the table with exactly the same signature, and its **promised k** is the smallest k among the releases where it is
present. A **violation** is a published row whose joint class holds fewer rows than its promised k.

Decisions, on purpose:

* **Absence distinguishes.** A row absent from a release while its box-mates of another release are present is
  told apart from them: the worker sees every item of that release and, linking by token, knows which members of the
  earlier class are missing (the "same set of releases" clause). So a WHERE, a LIMIT or an INSERT that makes one
  release cover rows another does not splits classes, even when every box is identical.
* **Box intersection.** Two rows that share a box in release A but show different boxes in release B are told apart
  (the worker intersects A's class with B's), so a joint class is the intersection of the per-release classes, minus
  the rows whose presence pattern differs.
* **Text, not semantics.** Two boxes that admit the same people but are printed differently (``[20-30]`` and
  ``[20-31]`` when nobody is 31) are different boxes: a worker sees two different items.
* **Records that are nobody** (no token, or a token of no row: FKA's synthetic samples) are counted, not judged.
* Rows never published (all entries absent) are judged by nobody and join nobody's class.

Each violation names a cause, the first that applies: ``fewer than k in one release`` (some release where the row is
present shows fewer than k rows with its box: a release not k-anonymous as the worker saw it, e.g. because crowddb's
answer cache did not publish the box's other items again), ``box intersection`` (every release alone is fine, the
intersection of its classes across the releases where it is present is below k), else ``absence from other releases``
(the intersection holds k rows, but some of them differ in which releases they appear in).

Besides, for information: ``candidates`` per row, the number of rows of the table whose true QI values every box of
its signature admits (what a worker who ignores absence and exact box identity could narrow to; never smaller than
the joint class when every box covers its own row), and ``uncovered``, records whose box does not admit their own
row's true value (a generalization bug, reported separately).

Limits: the group intersection inside one ``getcandidate`` item (rows of one item share their grouped QI) is not
modelled here (``privacy_scanner.group_intersection_small_classes`` checks it release by release); a published
column that correlates with a QI without naming it is not a QI here; only exact QI field names (or an alias map) map
published fields to QIs.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = ["ABSENT", "Release", "Report", "check", "normalize_box", "release_from_frame", "releases_from_hit_items"]

ABSENT = None  # a signature entry: the row has no record in that release

_RANGE = re.compile(r"^\[\s*(-?\d+(?:\.\d+)?)\s*-\s*(-?\d+(?:\.\d+)?)\s*\]$")
_NUMBER = re.compile(r"^\s*-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\s*$")


@dataclass
class Release:
    """What workers saw of one release: its records (published-field -> text or None) and the k it promised."""

    name: str
    k: int
    records: list[dict] = field(default_factory=list)
    shape: str = ""  # free text (which query), for reports


@dataclass
class Report:
    releases: list[Release]
    signatures: dict  # token -> tuple of entries (ABSENT or frozenset of normalized boxes), published rows only
    classes: dict  # token -> frozenset of tokens (its joint class)
    promised: dict  # token -> smallest k among the releases that published it
    candidates: dict  # token -> number of table rows admitted by every box of its signature
    violations: list[dict]
    nobody: int  # records tied to no row of the table
    uncovered: list[dict]

    @property
    def smallest(self) -> int | None:
        return min((len(c) for c in self.classes.values()), default=None)

    def summary(self, limit: int = 3) -> str:
        if not self.violations:
            return f"no violation ({len(self.classes)} published rows, smallest joint class {self.smallest})"
        worst = sorted(self.violations, key=lambda v: (v["size"], -v["k"]))
        return (f"{len(self.violations)} of {len(self.classes)} published rows below their promised k "
                f"(smallest joint class {worst[0]['size']}); e.g. " + "; ".join(v["why"] for v in worst[:limit]))


# ----------------------------------------------------------------------------------------------------- reading

def _text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and np.isnan(value):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _records_of(content: str) -> list[dict]:
    parsed = json.loads(content)
    if isinstance(parsed, list):  # a group item: one object per row
        return [{str(k): _text(v) for k, v in (row or {}).items()} for row in parsed if isinstance(row, dict)]
    if isinstance(parsed, dict):
        return [{str(k): _text(v) for k, v in parsed.items()}]
    return []


def releases_from_hit_items(con) -> list[Release]:
    """One release per crowd run that published anything: the records of its HITs' items, and the run's k.

    ``con`` is anything with ``.sql(text).fetchall()`` or ``.execute(text).fetchall()`` over the crowd tables
    (a DuckDB connection, or a crowddb one). Reads crowddb_hit_items, crowddb_hits and crowddb_runs only."""
    query = ("SELECT h.run_id, r.k, r.operator, r.query, i.content FROM crowddb_hit_items i "
             "JOIN crowddb_hits h USING (hit_id) LEFT JOIN crowddb_runs r ON r.run_id = h.run_id "
             "ORDER BY h.run_id, i.hit_id, i.item_no")
    runner = getattr(con, "sql", None) or con.execute
    rows = runner(query).fetchall()
    by_run: dict = {}
    for run_id, k, operator, text, content in rows:
        if run_id not in by_run:
            by_run[run_id] = Release(f"run {run_id}", int(k) if k is not None else 1, [],
                                     f"{operator}: {text}" if text else str(operator))
        by_run[run_id].records.extend(_records_of(content))
    return list(by_run.values())


def release_from_frame(name: str, frame: pd.DataFrame, k: int, shape: str = "") -> Release:
    """A returned release (e.g. an ANONYMIZE result): one record per row, every column as the worker reads it."""
    records = [{str(c): _text(v) for c, v in row.items()} for row in frame.to_dict("records")]
    return Release(name, int(k), records, shape)


# ------------------------------------------------------------------------------------------------------- boxes

def _number(text: str) -> float | None:
    return float(text) if _NUMBER.match(text) else None


def _plain(text: str):
    n = _number(text)
    return ("num", n) if n is not None else ("text", text.strip().casefold())


def normalize_box(text: str | None):
    """A published cell as a comparable value: ('any',), ('null',), ('range', lo, hi), ('set', members), or a plain
    ('num', x) / ('text', t). Purely syntactic: different texts for the same people stay different."""
    if text is None:
        return ("null",)
    t = text.strip()
    if t == "*":
        return ("any",)
    m = _RANGE.match(t)
    if m:
        lo, hi = float(m.group(1)), float(m.group(2))
        return ("num", lo) if lo == hi else ("range", lo, hi)
    if t.startswith("{") and t.endswith("}"):
        members = frozenset(_plain(x) for x in t[1:-1].split(","))
        return next(iter(members)) if len(members) == 1 else ("set", members)
    return _plain(t)


def _admits(box, series: pd.Series) -> np.ndarray:
    """Which raw values of ``series`` a normalized box admits."""
    kind = box[0]
    if kind == "any":
        return np.ones(len(series), dtype=bool)
    if kind == "null":
        return series.isna().to_numpy()
    if kind == "range":
        nums = pd.to_numeric(series, errors="coerce")
        return ((nums >= box[1]) & (nums <= box[2])).fillna(False).to_numpy(dtype=bool)
    if kind == "set":
        out = np.zeros(len(series), dtype=bool)
        for member in box[1]:
            out |= _admits(member, series)
        return out
    if kind == "num":
        nums = pd.to_numeric(series, errors="coerce")
        if nums.notna().any():
            return (nums == box[1]).fillna(False).to_numpy(dtype=bool)
        box = ("text", _text(box[1]))
    raw = series.map(lambda v: None if pd.isna(v) else _text(v).strip().casefold())
    return (raw == box[1]).fillna(False).to_numpy(dtype=bool)


# ------------------------------------------------------------------------------------------------------- check

def check(table: pd.DataFrame, quasi_identifiers: Iterable[str], releases: Iterable[Release], *,
          token: str = "token", aliases: Mapping[str, str] | None = None) -> Report:
    """Every published row's joint class under perfect linkage, and the rows below their promised k.

    ``table``: every row that ever existed (inserted ones included), with its true QI values and a unique ``token``.
    ``aliases``: published field name -> QI column, for fields not named exactly like their QI."""
    qis = list(quasi_identifiers)
    releases = list(releases)
    frame = table.reset_index(drop=True)
    tokens = frame[token].map(_text).tolist()
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"the {token!r} column must be unique")
    position = {t: i for i, t in enumerate(tokens)}
    field_of = {q: q for q in qis}
    reverse = {q.casefold(): q for q in qis}
    for published, qi in (aliases or {}).items():
        field_of[qi] = published

    boxes: list[dict] = []  # per release: token -> set of normalized box tuples
    nobody, uncovered = 0, []
    mask_cache: dict = {}

    def mask(qi, box):
        key = (qi, box)
        if key not in mask_cache:
            mask_cache[key] = _admits(box, frame[qi])
        return mask_cache[key]

    for release in releases:
        per_token: dict = defaultdict(set)
        for record in release.records:
            folded = {k.casefold(): v for k, v in record.items()}
            tok = record.get(token, folded.get(token.casefold()))
            if tok is None or tok not in position:
                nobody += 1
                continue
            box = []
            for q in qis:
                name = field_of[q]
                if name in record:
                    text = record[name]
                elif name.casefold() in folded and reverse.get(name.casefold(), q) == q:
                    text = folded[name.casefold()]
                else:
                    text = "*"  # a QI the record does not publish says nothing about it
                box.append(normalize_box(text))
            box = tuple(box)
            row = position[tok]
            if not all(mask(q, b)[row] for q, b in zip(qis, box)):
                uncovered.append({"release": release.name, "token": tok, "record": record})
            per_token[tok].add(box)
        boxes.append({t: frozenset(b) for t, b in per_token.items()})

    signatures = {}
    for tok in tokens:
        sig = tuple(b.get(tok, ABSENT) for b in boxes)
        if any(e is not ABSENT for e in sig):
            signatures[tok] = sig
    by_signature: dict = defaultdict(set)
    for tok, sig in signatures.items():
        by_signature[sig].add(tok)
    classes = {tok: frozenset(by_signature[sig]) for tok, sig in signatures.items()}
    promised = {tok: min(r.k for r, e in zip(releases, sig) if e is not ABSENT) for tok, sig in signatures.items()}

    candidates = {}
    all_rows = np.ones(len(frame), dtype=bool)
    for sig, members in by_signature.items():
        admitted = all_rows.copy()
        for entry in sig:
            if entry is ABSENT:
                continue
            for box in entry:  # every box the row showed must admit it
                for q, b in zip(qis, box):
                    admitted &= mask(q, b)
        n = int(admitted.sum())
        for tok in members:
            candidates[tok] = n

    # per release: box -> tokens with that box (the release's own classes), for explanations
    release_classes = []
    for b in boxes:
        inverse: dict = defaultdict(set)
        for tok, entry in b.items():
            inverse[entry].add(tok)
        release_classes.append(inverse)
    violations = []
    for tok, members in classes.items():
        k = promised[tok]
        if len(members) >= k:
            continue
        sig = signatures[tok]
        present = [i for i, e in enumerate(sig) if e is not ABSENT]
        own = {releases[i].name: len(release_classes[i][sig[i]]) for i in present}
        meet = set.intersection(*(release_classes[i][sig[i]] for i in present))
        if min(own.values()) < k:
            cause = "fewer than k in one release"
        elif len(present) == 1:
            cause = "absence from other releases"
        elif len(meet) < k:
            cause = "box intersection"
        else:
            cause = "absence from other releases"
        why = (f"row {tok}: joint class {len(members)} < k={k}; present in {[releases[i].name for i in present]} "
               f"with own classes {own}, intersection {len(meet)}, same presence {len(members)} ({cause})")
        violations.append({"token": tok, "size": len(members), "k": k, "present": [releases[i].name for i in present],
                           "own_classes": own, "intersection": len(meet), "cause": cause,
                           "members": sorted(members), "candidates": candidates[tok], "why": why})
    return Report(releases, signatures, classes, promised, candidates, violations, nobody, uncovered)
