"""Run one human-operator call: anonymize, batch into HITs, check budget and cache, publish, collect, aggregate.

The planner hands over the operator's input as a DataFrame with fixed column names (see ``HumanInput``) and gets
back one answer per input row (tuple operators) or per group (group operators).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import sys
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..crowd import HitBatch, KnowledgeBase
from ..errors import (
    ArgumentError,
    BudgetExceededError,
    CrowdDBError,
    EmptyInputError,
    PlatformError,
    PrivacyError,
    UnknownHITError,
)
from ..udf import HumanOperator
from .context import OperatorContext

ROW_ID = "__crowd_row"      # position of the row in the operator's input
GROUP_ID = "__crowd_group"  # group number (group operators)
TRUTH = "__crowd_truth"     # hidden ground truth (never published; the simulated crowd's knowledge)
KEY = "__crowd_key"         # the value a group operator returns for the chosen row
_PROGRESS_MIN_HITS = 4


@dataclasses.dataclass
class HumanInput:
    """An operator call bound to its input: the rows, what is published, and how QIs are generalized."""

    op: HumanOperator
    frame: pd.DataFrame            # ROW_ID, [GROUP_ID], [TRUTH], [KEY], then the published columns
    published: list[str]           # published column names (their names in the HIT)
    quasi_identifiers: list[str]   # subset of published that must be generalized
    kinds: dict[str, str]          # QI kinds where declared
    protected: set[str]            # names that must never be published (sensitive, ground truth, key)
    args: dict[str, Any]           # the operator's own positional arguments (e.g. job)
    budget: float | None = None
    seed: int | None = None
    withheld: dict[str, str] = dataclasses.field(default_factory=dict)  # input column -> why it is not published
    shared: list[str] = dataclasses.field(default_factory=list)  # QIs every row of a group shares (group operators)


NOT_ESTIMATED = "not estimated"  # OperatorPlan.anonymizer of an operator a dry run could not plan (see note)


@dataclasses.dataclass
class OperatorPlan:
    """What one operator call posts (or would post) and under which privacy parameters; the row of explain()."""

    operator: str
    kind: str
    input_rows: int
    items: int
    cached_items: int
    hits: int
    assignments: int
    estimated_cost: float
    budget: float | None
    k: int | None
    anonymizer: str
    ncp: float | None = None
    accuracy_lower: float | None = None
    accuracy_upper: float | None = None
    epsilon: float | None = None
    delta: float | None = None
    rounds: int = 1
    note: str = ""
    withheld: dict[str, str] = dataclasses.field(default_factory=dict)  # column -> why lineage keeps it from the HIT

    def as_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def render(values: pd.Series) -> pd.Series:
    """Published text of a column: integers without '.0', NULL shown as '*' (nothing known)."""
    if pd.api.types.is_float_dtype(values) and values.dropna().mod(1).eq(0).all():
        out = values.astype("Int64").astype(str)
    else:
        out = values.astype(str)
    return out.where(values.notna(), "*")


class _NoBar:
    """Progress sink for purchases made outside the main progress bar (FKA's samples)."""

    def update(self, n: int) -> None:
        pass


class HumanOperatorRun:
    """One call of a human operator over its materialized input."""

    def __init__(self, ctx: OperatorContext, call: HumanInput) -> None:
        self.ctx, self.call, self.op = ctx, call, call.op
        if len(call.frame) == 0:
            raise EmptyInputError(f"{self.op.name}: the input has no rows; nothing to ask the crowd")
        leaked = set(call.published) & call.protected
        if leaked:  # the planner never asks for this; the check stays as the last line of defence
            raise PrivacyError(f"{self.op.name}: columns {sorted(leaked)} are sensitive/ground truth/key "
                               "and cannot be published")
        if not call.published:
            raise ArgumentError(f"{self.op.name}: no column is left to publish (all are sensitive, ground truth "
                                "or key); declare core columns or pass columns explicitly")
        self.question = self.op.question.format(**call.args)
        self.domain = self._domain()
        self.store = ctx.store
        if ctx.dry_run:  # explain(): nothing is written, the id is only a name
            self.run_id = self.store.next_run_id()
        else:  # runs whose process died are marked interrupted, then this run's row takes its id
            self.store.reap_interrupted()
            self.run_id = self.store.reserve_run(self.op.name, ctx.query, len(call.frame), int(self.op.k),
                                                 self.op.anonymizer)
        self.rng = ctx.rng(self.run_id, call.seed)
        # with a seed (the call's, or the connection's) the split into HITs is drawn from self.rng as always; without
        # one it is a keyed hash order of the published content: a function of the data, so a rerun splits the same
        # way and is served from the cache
        self._seeded = call.seed is not None or ctx.seed is not None
        self.spent = 0.0
        self._hit_seq = 0
        self._bought: list[tuple[HitBatch, Any, pd.DataFrame]] = []
        self._reserved = not ctx.dry_run  # this run's crowddb_runs row was written when it started
        self._wrote_hits = False  # a HIT of this run is on record (then its row stays, even if the run fails)
        self._fka_tuples = 0
        self._fka_estimate = 0
        self._awaited: dict[str, int] = {}  # dry run: HITs an earlier run posted (-> assignments), to collect

    # ----------------------------------------------------------------------------------------------- set-up
    def _domain(self) -> tuple[str, ...] | None:
        """The answers a worker may give: None for pick-a-row (group) operators."""
        if self.op.kind == "group":
            return None
        if isinstance(self.op.domain, tuple):
            if len(self.op.domain) < 2:
                raise ArgumentError(f"{self.op.name}: the answer domain needs at least two answers")
            return self.op.domain
        if TRUTH not in self.call.frame:
            raise ArgumentError(f"{self.op.name}: its answer domain comes from the ground-truth column, and the "
                                "input has none; declare a ground_truth column or pass domain := [...]")
        values = self.call.frame[TRUTH].dropna().astype(str).unique()
        if not len(values):
            raise ArgumentError(f"{self.op.name}: its answer domain comes from the ground-truth column, which holds "
                                "no known value in the input; pass domain := [...]")
        return tuple(sorted(values))

    def _knowledge(self, raw: pd.DataFrame) -> KnowledgeBase | None:
        if TRUTH not in self.call.frame:
            return None
        truth = self.call.frame[TRUTH].astype(object).where(self.call.frame[TRUTH].notna(), None)
        return KnowledgeBase(raw, truth.astype(str).to_numpy(dtype=object))

    def _signature(self, columns: list[str] | None = None) -> str:
        """Hash of what makes two items the same question: operator, question, answers, published columns."""
        columns = list(self.call.published) if columns is None else list(columns)
        sig = json.dumps([self.op.name, self.op.kind, self.question, self.domain, columns])
        return hashlib.sha1(sig.encode()).hexdigest()[:16]

    # ---------------------------------------------------------------------------------------- anonymization
    def _publishable(self) -> tuple[pd.DataFrame, dict[str, Any] | None]:
        """The published columns as text, QIs generalized to k-anonymous groups (kanon-crowd-db §2.2)."""
        call, op = self.call, self.op
        raw = call.frame[call.published]
        if not call.quasi_identifiers:  # (an unknown anonymizer was already refused by the definition)
            return raw.apply(render), None
        if op.anonymizer == "none":
            raise PrivacyError(f"{op.name}: anonymizer 'none' is only allowed when no quasi-identifier is published; "
                               f"{call.quasi_identifiers} are quasi-identifiers")
        from ..anonymize import anonymize  # the algorithm layer

        if len(raw) < int(op.k):
            raise ArgumentError(
                f"{op.name}: its input has {len(raw)} rows, fewer than k={int(op.k)}, so no group of k rows can hide "
                f"them (a WHERE or LIMIT leaves the operator only the rows it asks about); ask about at least "
                f"{int(op.k)} rows or pass a smaller k := ...")
        options: dict[str, Any] = {}
        method = op.anonymizer
        if method == "fka" and self.ctx.dry_run:
            # FKA needs crowd answers; explain() shows Mondrian's release (FKA's starting point) and FKA's sampling
            # cost: the raw samples and their cell-generalized copies, sample_ratio of the rows each
            self._fka_estimate = 2 * max(2, round(float(op.sample_ratio) * len(raw)))
            method = "mondrian"
        elif method == "fka":
            options.update(ask=self._fka_ask(raw), sample_ratio=float(op.sample_ratio), cell_limit=int(op.cell_limit))
        if call.shared:  # group operators: QIs every row of a group shares are generalized per group
            options["shared"] = list(call.shared)
        release = anonymize(raw, list(call.quasi_identifiers), int(op.k), method=method,
                            kinds=dict(call.kinds) or None, seed=self._anonymizer_rng(raw), **options)
        table = release.table[call.published].copy()
        for col in call.published:
            if col not in call.quasi_identifiers:
                table[col] = render(raw[col])
        return table.astype(str), release.metrics

    def _anonymizer_rng(self, raw: pd.DataFrame) -> np.random.Generator:
        """The anonymizer's randomness (FKA's synthetic samples): with the call's seed, self.rng as always; else a
        generator seeded by a hash of the input, the call's parameters and the connection's seed if any, so a rerun
        draws the same samples and buys nothing twice."""
        if self.call.seed is not None:
            return self.rng
        digest = hashlib.sha256(self._signature().encode())
        digest.update(json.dumps([int(self.op.k), self.op.anonymizer, float(self.op.sample_ratio),
                                  int(self.op.cell_limit), list(self.call.quasi_identifiers), self.ctx.seed],
                                 default=str).encode())
        digest.update(pd.util.hash_pandas_object(raw, index=False).to_numpy().tobytes())
        return np.random.default_rng(int.from_bytes(digest.digest()[:16], "little"))

    def _shuffle(self, row_hash: np.ndarray, split: bool = False) -> np.ndarray:
        """The order rows are packed into HITs in: a shuffle that does not reveal the input order. Without a seed, and
        always where the order decides what an item holds (``split``: a group cut into items, a knock-out round),
        the order of a keyed hash of each row's content and the seed (ties, i.e. identical rows, in input order), so
        the same data is split into the same items on every run and a rerun is served from the cache. Otherwise a
        permutation drawn from self.rng (tuple items hold one row each: their packing never changes what is bought)."""
        n = len(row_hash)
        if self._seeded and not split:
            return self.rng.permutation(n)
        seed = self.call.seed if self.call.seed is not None else self.ctx.seed
        key = self._signature() if seed is None else hashlib.sha1(f"{self._signature()}:{seed}".encode()).hexdigest()
        salt = np.uint64(int(key[:16], 16) & 0xFFFFFFFFFFFFFFFF)
        with np.errstate(over="ignore"):  # splitmix64 of content hash ^ salt
            z = (np.asarray(row_hash, dtype=np.uint64) ^ salt) + np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
        return np.lexsort((np.arange(n), z))

    def _fka_ask(self, raw: pd.DataFrame):
        """FKA's crowd callback: publish synthetic QI boxes as paid HITs of this operator (kanon-crowd-db §4.1, §4.3).

        ``ask(lo, hi)`` gets boxes in the anonymizer's numeric coding; each box is shown as its range / value-set
        labels (a raw synthetic sample has lo == hi), bought like any other item, and aggregated to one answer."""
        from ..anonymize.encoding import encode
        from ..anonymize.generalize import code_labels

        if self.op.kind != "tuple":
            raise ArgumentError(f"{self.op.name}: anonymizer 'fka' needs a per-tuple question; use 'mondrian' for "
                                "group operators")
        qis = list(self.call.quasi_identifiers)
        enc = encode(raw, qis, dict(self.call.kinds) or None)
        knowledge = self._knowledge(raw[qis])
        domain = pd.Index(self.domain)

        def ask(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
            shown = {}
            for j, q in enumerate(qis):
                column = enc.columns[q]
                lo_code = np.searchsorted(column.scale, lo[:, j] - 1e-9, side="left")
                hi_code = np.searchsorted(column.scale, hi[:, j] + 1e-9, side="right") - 1
                labels, inverse, _, _ = code_labels(column, lo_code, np.maximum(hi_code, lo_code))
                shown[q] = np.asarray(labels, dtype=object)[inverse]
            answers = self._buy_tuples(pd.DataFrame(shown), knowledge)
            self._fka_tuples += len(lo)
            return domain.get_indexer(answers).astype(np.int64)

        return ask

    def _buy_tuples(self, shown: pd.DataFrame, knowledge: KnowledgeBase | None) -> np.ndarray:
        """Buy one aggregated answer per row of ``shown`` (published text), through cache, budget and platform."""
        saved, self.shown = getattr(self, "shown", None), shown
        try:
            items = self._items(shown, kind="tuple")
            cached, _, hits, layout = self._prepare(items, 0)
            answers = self._round(items, cached, hits, layout, knowledge, _NoBar(), 0)
        finally:
            self.shown = saved
        return items[[ROW_ID, "item_id"]].merge(answers, on="item_id").sort_values(ROW_ID)["answer"].to_numpy()

    # ------------------------------------------------------------------------------------------------ items
    def _items(self, shown: pd.DataFrame, kind: str | None = None) -> pd.DataFrame:
        """Round-1 question items in shuffled order: item_id, ROW_ID, row_no, row_hash, item_key, occurrence."""
        n = len(shown)
        if (kind or self.op.kind) == "group":
            return self._group_round_items(self.call.frame[GROUP_ID].to_numpy(), np.arange(n), 0)
        row_hash = pd.util.hash_pandas_object(shown, index=False).to_numpy()
        order = self._shuffle(row_hash)  # rows are shuffled before they are grouped into HITs
        row_hash = row_hash[order]
        items = pd.DataFrame({"item_id": np.arange(n), ROW_ID: order, "row_no": 1, "row_hash": row_hash})
        items["item_key"] = np.char.add(self._signature(list(shown.columns)) + ":", row_hash.astype(str)).astype(object)
        return self._with_occurrence(items)

    def _group_round_items(self, groups: np.ndarray, rows: np.ndarray, first_id: int) -> pd.DataFrame:
        """Items of one knock-out round over the given rows of each group (shuffled, then chunked)."""
        row_hash = pd.util.hash_pandas_object(self.shown.iloc[rows], index=False).to_numpy()
        order = self._shuffle(row_hash, split=True)
        row_hash = row_hash[order]
        items = self._group_items(groups[order], rows[order], row_hash)
        items["item_id"] += first_id
        sig = self._signature()
        items["item_key"] = items.groupby("item_id")["row_hash"].transform(
            lambda h: sig + ":" + hashlib.sha1(h.to_numpy().tobytes()).hexdigest()[:20])
        return self._with_occurrence(items)

    @staticmethod
    def _with_occurrence(items: pd.DataFrame) -> pd.DataFrame:
        """Number identical items 0, 1, ... in input order (not shuffled order): the n-th copy of the same content
        reuses the n-th purchase, so a rerun maps the same rows to the same answers."""
        first = items.groupby("item_id", sort=False).agg(item_key=("item_key", "first"), row=(ROW_ID, "min"))
        first = first.sort_values("row", kind="stable")
        occurrence = pd.Series(first.groupby("item_key").cumcount().to_numpy(), index=first.index.to_numpy())
        items["occurrence"] = items["item_id"].map(occurrence).astype(np.int64)
        return items

    def _group_items(self, group: np.ndarray, rows: np.ndarray, row_hash: np.ndarray) -> pd.DataFrame:
        """Round-1 items of a group operator: each group cut into balanced chunks of at most N rows,
        rows inside an item ordered by content (so the cache key and the answer's row_no are stable)."""
        n_per_hit = self.op.tuples_per_hit
        df = pd.DataFrame({"group": group, ROW_ID: rows, "row_hash": row_hash})
        size = df.groupby("group")["group"].transform("size").to_numpy()
        chunks = np.ceil(size / n_per_hit).astype(np.int64)
        pos = df.groupby("group").cumcount().to_numpy()
        df["chunk"] = pos % chunks  # round-robin over the shuffled rows: balanced chunk sizes
        df = df.sort_values(["group", "chunk", "row_hash"], kind="stable")
        df["item_id"] = pd.factorize(pd.MultiIndex.from_arrays([df["group"], df["chunk"]]))[0]
        df["row_no"] = df.groupby("item_id").cumcount() + 1
        return df.reset_index(drop=True)

    # ------------------------------------------------------------------------------------------------ cache
    def _cached(self, items: pd.DataFrame) -> pd.DataFrame:
        """Answers already bought for these items: item_key, occurrence, worker_id, answer (first A per item)."""
        got = self.store.answers_for(items.drop_duplicates("item_id")[["item_key", "occurrence"]])
        got["rank"] = got.groupby(["item_key", "occurrence"]).cumcount()
        return got[got["rank"] < self.op.assignments].drop(columns="rank")

    # ------------------------------------------------------------------------------------------------- HITs
    def _prepare(self, items: pd.DataFrame, round_no: int) -> tuple[pd.DataFrame, pd.Series, pd.DataFrame, pd.DataFrame]:
        """Cache lookup and HIT layout of a set of items: (cached answers, answers held per item, hits, layout)."""
        if not self.ctx.dry_run:
            self._collect_outstanding(items)
        cached = self._cached(items)
        have = cached.groupby(["item_key", "occurrence"]).size()
        expected = have
        if self.ctx.dry_run:  # a run collects HITs an earlier run posted for these items; it does not buy them again
            posted = self._outstanding_hits(items)
            self._awaited.update(zip(posted["hit_id"], posted["assignments"].astype(int)))
            pending = posted.groupby(["item_key", "occurrence"])["assignments"].sum()
            expected = have.add(pending, fill_value=0).astype(np.int64)
        return (cached, have, *self._hits(items, expected, round_no))

    def _hits(self, items: pd.DataFrame, have: pd.Series, round_no: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Pack items that still need answers into HITs of at most N tuples; one HIT layout per missing count.

        Returns ``hits`` (hit_id, assignments, round) and ``layout`` (item_id, hit_id, item_no)."""
        per_item = items.groupby("item_id", sort=False).agg(rows=("row_no", "size"), item_key=("item_key", "first"),
                                                           occurrence=("occurrence", "first"))
        index = pd.MultiIndex.from_arrays([per_item["item_key"], per_item["occurrence"]])
        got = have.reindex(index).fillna(0).to_numpy(np.int64)
        per_item["need"] = self.op.assignments - got
        per_item = per_item[per_item["need"] > 0]
        hits, layout = [], []
        n = self._hit_seq  # HIT numbers continue across FKA's sample HITs and knock-out rounds
        for need, part in per_item.groupby("need", sort=True):
            hit_no = self._pack(part["rows"].to_numpy()) + n
            ids = np.char.add(f"R{self.run_id}-", np.char.zfill((hit_no + 1).astype(str), 5)).astype(object)
            item_no = pd.Series(hit_no).groupby(hit_no).cumcount().to_numpy() + 1
            layout.append(pd.DataFrame({"item_id": part.index.to_numpy(), "hit_id": ids, "item_no": item_no}))
            unique_ids = pd.unique(ids)
            hits.append(pd.DataFrame({"hit_id": unique_ids, "assignments": int(need), "round": round_no}))
            n += len(unique_ids)
        if not hits:
            return (pd.DataFrame({"hit_id": [], "assignments": [], "round": []}),
                    pd.DataFrame({"item_id": [], "hit_id": [], "item_no": []}))
        return pd.concat(hits, ignore_index=True), pd.concat(layout, ignore_index=True)

    def _pack(self, rows: np.ndarray) -> np.ndarray:
        """HIT number of each item, filling HITs in order up to tuples_per_hit rows."""
        cap = self.op.tuples_per_hit
        if (rows == 1).all():
            return np.arange(len(rows)) // cap
        out = np.empty(len(rows), dtype=np.int64)
        hit, fill = 0, 0
        for i, r in enumerate(rows.tolist()):  # group items: one step per item (a group chunk), never per row
            if fill + r > cap and fill > 0:
                hit, fill = hit + 1, 0
            out[i] = hit
            fill += r
        return out

    # -------------------------------------------------------------------------------------------------- run
    def run(self) -> tuple[pd.DataFrame | None, OperatorPlan]:
        """Plan, and unless dry-run, buy and aggregate the answers.

        Returns (answers, plan): answers has ROW_ID + answer (tuple operators) or GROUP_ID + answer (group). If the
        run fails after buying answers (FKA's samples, a knock-out round, a platform error on a later batch), what
        was bought is still written, with the run marked 'failed', so it is not paid for twice; then it re-raises.
        """
        try:
            return self._run()
        except BaseException:
            if self._reserved and not self.ctx.dry_run:
                if self._wrote_hits and self.store.run_has_hits(self.run_id):
                    self._persist(status="failed")
                    self.ctx.spent += self.spent
                else:
                    with contextlib.suppress(Exception):  # the run's own error is the one to report
                        self.store.forget_run(self.run_id)
            raise

    def _run(self) -> tuple[pd.DataFrame | None, OperatorPlan]:
        call, op = self.call, self.op
        shown, metrics = self._publishable()
        self.shown = shown
        items = self._items(shown)
        cached, have, hits, layout = self._prepare(items, 1)
        n_items = items["item_id"].nunique()
        cached_items = int((have >= op.assignments).sum())
        later = self._later_round_hits(items) if op.kind == "group" else 0
        fka_hits = int(np.ceil(self._fka_estimate / 2 / op.tuples_per_hit)) * 2 if self._fka_estimate else 0
        bought_hits = sum(len(b.hits) for b, _, _ in self._bought)  # FKA's samples, already bought
        bought_assignments = sum(int(b.hits["assignments"].sum()) for b, _, _ in self._bought)
        assignments = int(hits["assignments"].sum()) + (later + fka_hits) * op.assignments
        notes = ["later knock-out rounds estimated without cache"] if later else []
        if self._fka_estimate:
            notes.append(f"FKA sampling estimated at {self._fka_estimate} synthetic tuples; NCP is Mondrian's")
        if self._fka_tuples:
            notes.append(f"FKA asked about {self._fka_tuples} synthetic tuples (identical ones answered once)")
        if self._awaited:
            n = len(self._awaited)
            notes.append(f"{n} HIT{'s' if n > 1 else ''} ({sum(self._awaited.values())} assignments) posted by an "
                         "earlier run will be collected, not bought again")
        lower, upper = self._accuracy_bounds() if call.quasi_identifiers else (None, None)
        plan = OperatorPlan(
            operator=op.name, kind=op.kind, input_rows=len(call.frame), items=n_items, cached_items=cached_items,
            hits=len(hits) + later + fka_hits + bought_hits, assignments=assignments + bought_assignments,
            estimated_cost=round((assignments + bought_assignments) * op.cost_per_assignment, 4),
            budget=self._budget(), k=int(op.k) if call.quasi_identifiers else None,
            anonymizer=op.anonymizer if call.quasi_identifiers else "none",
            ncp=(metrics or {}).get("ncp"), accuracy_lower=lower, accuracy_upper=upper, rounds=1 + (later > 0),
            note="; ".join(notes), withheld=dict(call.withheld))
        self.plan = plan
        self.metrics = metrics
        self.ctx.plans.append(plan)
        if self.ctx.dry_run:
            return None, plan
        budget = self._budget()
        if budget is not None and self.spent + plan.estimated_cost - bought_assignments * op.cost_per_assignment \
                > budget + 1e-9:
            raise BudgetExceededError(
                f"{op.name}: estimated cost ${plan.estimated_cost:,.2f} ({plan.assignments} assignments at "
                f"${op.cost_per_assignment:.4f} each) exceeds the budget ${budget:,.2f}; nothing was published")
        knowledge = self._knowledge(call.frame[call.published])
        bar = tqdm(total=plan.hits, desc=f"{op.name}: HITs", unit="HIT", leave=False,
                   disable=not (self.ctx.progress and sys.stderr.isatty() and plan.hits >= _PROGRESS_MIN_HITS))
        try:
            if op.kind == "tuple":
                answers = self._round(items, cached, hits, layout, knowledge, bar, 1)
                result = items[[ROW_ID, "item_id"]].merge(answers, on="item_id")[[ROW_ID, "answer"]]
            else:
                result = self._tournament(items, cached, hits, layout, knowledge, bar)
        finally:
            bar.close()
        self._persist()
        self.ctx.spent += self.spent
        return result, plan

    def _accuracy_bounds(self) -> tuple[float | None, float | None]:
        """Eq. 3 / Eq. 4 bounds of crowd accuracy under any k-anonymous release, from the answer distribution:
        the ground truth's distribution over the input when declared, else uniform over the answer domain."""
        if self.domain is None:
            return None, None
        from ..anonymize import accuracy_bounds

        shares = np.array([])
        if TRUTH in self.call.frame:  # a NULL ground truth is unknown, not a class ('nan' after astype(str), pandas 2)
            shares = self.call.frame[TRUTH].dropna().astype(str).value_counts(normalize=True).to_numpy()
        if not len(shares):  # no ground truth declared, or none known (all NULL): uniform over the answer domain
            shares = np.full(len(self.domain), 1.0 / len(self.domain))
        return accuracy_bounds(shares)

    def _budget(self) -> float | None:
        """The tighter of the call's budget and what is left of the query's budget."""
        limits = [b for b in (self.call.budget,
                              None if self.ctx.budget is None else self.ctx.budget - self.ctx.spent) if b is not None]
        return min(limits) if limits else None

    def _later_round_hits(self, items: pd.DataFrame) -> int:
        """Estimated HITs of the knock-out rounds after the first: each round's winners, N rows per HIT."""
        cap = self.op.tuples_per_hit
        groups = self.call.frame[GROUP_ID].to_numpy()[items.drop_duplicates("item_id")[ROW_ID].to_numpy()]
        winners = pd.Series(groups).value_counts().to_numpy()  # items per group = winners entering round 2
        total = 0
        while (winners > 1).any():
            winners = winners[winners > 1]
            total += int(np.ceil(winners.sum() / cap))
            winners = np.ceil(winners / cap).astype(np.int64)
        return total

    def _round(self, items: pd.DataFrame, cached: pd.DataFrame, hits: pd.DataFrame, layout: pd.DataFrame,
               knowledge: KnowledgeBase | None, bar: Any, round_no: int) -> pd.DataFrame:
        """Buy the missing answers of one round and aggregate: returns item_id, answer."""
        op = self.op
        spend = float(hits["assignments"].sum()) * op.cost_per_assignment if len(hits) else 0.0
        budget = self._budget()
        if budget is not None and self.spent + spend > budget + 1e-9:
            raise BudgetExceededError(f"{op.name}: round {round_no} would bring the cost to "
                                      f"${self.spent + spend:,.2f}, over the budget ${budget:,.2f}")
        ident = items.drop_duplicates("item_id")[["item_id", "item_key", "occurrence"]]
        answers = [cached.merge(ident, on=["item_key", "occurrence"])[["item_id", "worker_id", "answer"]]]
        if len(hits):
            batch = self._batch(items, hits, layout)
            platform = self.ctx.platform
            keys = layout.merge(ident, on="item_id")
            ids = batch.hits["hit_id"].tolist()
            self._record_posted(batch, keys)  # write-ahead: on record as 'publishing' before the platform is called
            try:
                with self._platform_errors(f"publishing {len(hits)} HITs (round {round_no})"):
                    platform.publish(batch, knowledge=knowledge)
            except BaseException:
                self._resolve_publishing(ids)  # which of them did the platform get? the rest were never posted
                raise
            self.store.set_hit_status(ids, "published", was="publishing")  # from here on they are paid for
            with self._platform_errors(f"collecting {len(hits)} HITs (round {round_no})"):
                got = platform.collect(batch.hits["hit_id"].tolist(), progress=bar.update)
            got.answers = got.answers.merge(layout, on=["hit_id", "item_no"]).merge(ident, on="item_id")
            self._record_collected(got.assignments, got.answers, self.op.reward, self.op.reward * self.op.fee)
            self._bought.append((batch, got, keys))
            self.spent += spend
            self._hit_seq += len(hits)
            answers.append(got.answers[["item_id", "worker_id", "answer"]])
        return self._aggregate(pd.concat(answers, ignore_index=True))

    def _batch(self, items: pd.DataFrame, hits: pd.DataFrame, layout: pd.DataFrame) -> HitBatch:
        """The HITs in the platform's columnar form: only published text leaves here."""
        rows = items.merge(layout, on="item_id").sort_values(["hit_id", "item_no", "row_no"], kind="stable")
        shown = self.shown.iloc[rows[ROW_ID].to_numpy()].reset_index(drop=True)
        table = pd.concat([rows[["hit_id", "item_no", "row_no"]].reset_index(drop=True), shown], axis=1)
        hit_rows = hits.assign(
            question=self.question, domain=[self.domain] * len(hits), reward=self.op.reward, fee_rate=self.op.fee,
            target=next(iter(self.call.args.values()), None))  # a group operator's first argument (the job)
        return HitBatch(hit_rows.reset_index(drop=True), table, list(self.shown.columns))

    def _aggregate(self, answers: pd.DataFrame) -> pd.DataFrame:
        """One answer per item from its assignments, with the operator's truth-inference method."""
        from ..truth import discover

        # seeded by the operator's signature, not the run: the same answers always aggregate to the same result
        try:
            result = discover(answers, object="item_id", source="worker_id", value="answer",
                              method=self.op.aggregation, seed=int(self._signature()[:8], 16))
        except CrowdDBError as err:  # the truth layer names the method; the user called the operator
            raise type(err)(f"{self.op.name}: aggregating the answers: {err}") from None
        out = result.objects.rename(columns={"object": "item_id", "truth": "answer"})
        return out[["item_id", "answer"]]

    def _tournament(self, items: pd.DataFrame, cached: pd.DataFrame, hits: pd.DataFrame, layout: pd.DataFrame,
                    knowledge: KnowledgeBase | None, bar: Any) -> pd.DataFrame:
        """Group operators: knock-out rounds until each group has one winner; returns GROUP_ID, answer (key)."""
        group_of, key = self.call.frame[GROUP_ID].to_numpy(), self.call.frame[KEY].to_numpy()
        decided, round_no = [], 1
        while True:
            winners = self._round(items, cached, hits, layout, knowledge, bar, round_no)
            chosen = items.merge(winners, on="item_id")
            chosen = chosen[chosen["row_no"].astype(str) == chosen["answer"].astype(str)]
            rows = chosen[ROW_ID].to_numpy()
            groups = group_of[rows]
            counts = pd.Series(groups).value_counts()
            final = np.isin(groups, counts.index[counts == 1].to_numpy())
            decided.append(pd.DataFrame({GROUP_ID: groups[final], "answer": key[rows[final]]}))
            if final.all():
                return pd.concat(decided, ignore_index=True)
            round_no += 1
            items = self._group_round_items(groups[~final], rows[~final], int(items["item_id"].max()) + 1)
            cached, _, hits, layout = self._prepare(items, round_no)

    # ---------------------------------------------------------------------------------------------- persist
    def _persist(self, status: str = "completed") -> None:
        """Write the run's totals and its release (one transaction); its purchases were written as they happened."""
        op = self.op
        plan = getattr(self, "plan", None)  # a run that failed while FKA bought its samples has no plan yet
        hits = [b.hits for b, _, _ in self._bought]
        release = None
        if getattr(self, "metrics", None) is not None:
            release = {"method": op.anonymizer, "k": int(op.k), "metrics": self.metrics,
                       "params": {"quasi_identifiers": list(self.call.quasi_identifiers)}}
        self.store.finish_run(
            self.run_id, hits=int(sum(len(h) for h in hits)), assignments=int(sum(h["assignments"].sum() for h in hits)),
            cached_items=plan.cached_items if plan else 0, cost=round(self.spent, 4),
            k=plan.k if plan else int(op.k), anonymizer=plan.anonymizer if plan else op.anonymizer, status=status,
            release=release)

    @contextlib.contextmanager
    def _platform_errors(self, doing: str):
        """A platform's own exceptions (a real marketplace's) become a PlatformError naming it and what it was doing."""
        try:
            yield
        except CrowdDBError:
            raise
        except Exception as err:
            raise PlatformError(f"{self.op.name}: platform {self.ctx.platform.name!r} failed while {doing}: "
                                f"{type(err).__name__}: {err}") from err

    # ---------------------------------------------------------------------- purchases, recorded as they happen
    def _record_posted(self, batch: HitBatch, keys: pd.DataFrame) -> None:
        """The HITs about to be posted, with exactly what they show, as 'publishing' (one transaction), before the
        platform is called (write-ahead): a run that dies during or after publish() leaves them on record, and the
        next run asks the platform which of them it has instead of posting anything again."""
        hits = batch.hits.assign(
            operator=self.op.name, run_id=self.run_id, platform=self.ctx.platform.name, status="publishing",
            domain=json.dumps(list(self.domain)) if self.domain is not None else None,
            n_items=batch.hits["hit_id"].map(batch.items.groupby("hit_id")["item_no"].nunique()))
        items = batch.items.merge(keys[["hit_id", "item_no", "item_key", "occurrence"]], on=["hit_id", "item_no"])
        self.store.record_posted(self.run_id, hits, items, batch.published_columns, group=self.op.kind == "group")
        self._wrote_hits = True

    def _resolve_publishing(self, hit_ids: list[str]) -> list[str]:
        """HITs on record as 'publishing' whose publication was never confirmed: the ones the platform has become
        'published' (returned), the others were never posted and their records are dropped (the crowd saw nothing;
        their items are bought normally). If the platform cannot be asked, they stay 'publishing' for a later run."""
        if not hit_ids:
            return []
        try:
            with self._platform_errors(f"asking about {len(hit_ids)} HITs whose publication was not confirmed"):
                known = self.ctx.platform.known(list(hit_ids))
        except PlatformError:  # cannot be asked now: they stay 'publishing', never posted again unasked
            return []
        posted = [h for h in hit_ids if h in known]
        self.store.resolve_publishing(posted, [h for h in hit_ids if h not in known])
        return posted

    def _record_collected(self, assignments: pd.DataFrame, answers: pd.DataFrame, reward: Any, fee: Any,
                          credit: bool = False) -> None:
        """Collected HITs on record (``reward``/``fee``: per assignment, a number or an array aligned with it;
        ``credit``: HITs an earlier run posted, added to that run's figures)."""
        self.store.record_collected(assignments, answers, assignments.assign(reward=reward, fee=fee), credit=credit)

    def _outstanding_hits(self, items: pd.DataFrame) -> pd.DataFrame:
        """HITs an earlier run posted (or was posting) for these items and never collected (see Store)."""
        return self.store.outstanding_hits(items.drop_duplicates("item_id")[["item_key", "occurrence"]],
                                           self.op.name, self.ctx.platform.name)

    def _collect_outstanding(self, items: pd.DataFrame) -> None:
        """Collect HITs an earlier run posted for these items but never collected (it failed or was stopped), so
        their answers are not bought twice; HITs the platform no longer knows are recorded as lost."""
        platform = self.ctx.platform
        outstanding = self._outstanding_hits(items).drop_duplicates("hit_id")
        if not len(outstanding):
            return
        publishing = outstanding.loc[outstanding["status"] == "publishing", "hit_id"].tolist()
        confirmed = set(self._resolve_publishing(publishing))
        ids = [h for h, st in zip(outstanding["hit_id"], outstanding["status"])
               if st == "published" or h in confirmed]
        if not ids:
            return
        try:
            with self._platform_errors(f"collecting {len(ids)} HITs posted by an earlier run"):
                got = platform.collect(ids)
        except UnknownHITError:
            self.store.set_hit_status(ids, "lost")
            return
        known = self.store.hit_items(ids)
        answers = got.answers.merge(known[["hit_id", "item_no", "item_key", "occurrence"]], on=["hit_id", "item_no"])
        price = got.assignments.merge(known.drop_duplicates("hit_id")[["hit_id", "reward", "fee"]], on="hit_id",
                                      how="left")
        self._record_collected(got.assignments, answers, price["reward"].to_numpy(), price["fee"].to_numpy(),
                               credit=True)

