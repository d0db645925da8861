"""Run one human-operator call: anonymize, batch into HITs, check budget and cache, publish, collect, aggregate.

The planner hands over the operator's input as a DataFrame with fixed column names (see ``HumanInput``) and gets
back one answer per input row (tuple operators) or per group (group operators). ``HumanOperatorRun`` tells the story
of one call in order; each step is one module:

- ``publishing``: what may be shown (the answer domain, the anonymized release, FKA's crowd callback);
- ``packing``: pure functions turning shown rows into question items and items into HITs;
- ``purchase``: the run's record, cache, budget, platform: buying and collecting, written as it happens;
- ``aggregate``: assignments into answers, knock-out rounds of group operators, accuracy bounds.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..crowd import KnowledgeBase
from ..errors import ArgumentError, EmptyInputError, PlatformError, PrivacyError
from ..privacy import serve
from ..store import composition
from ..truth import adaptive
from ..udf import HumanOperator
from .aggregate import accuracy_range, aggregate, tournament
from .columns import CONFIDENCE, GOLD, GROUP_ID, KEY, ROW_ID, TRUTH, WIDENED
from .context import OperatorContext
from .packing import Shuffle, group_round_items, later_round_hits, signature, tuple_items
from .publishing import Publisher, answer_domain, knowledge, render
from .purchase import NoBar, Purchase

__all__ = ["GROUP_ID", "KEY", "NOT_ESTIMATED", "ROW_ID", "TRUTH", "HumanInput", "HumanOperatorRun", "OperatorPlan",
           "render"]

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
    rows_of: RowsOf | None = None  # whose rows the generalized QIs are (the privacy ledger); None: no QI published
    #: the joint classes of its rows (``composition.joint_classes``), when the planner read them to widen the rows
    joint_classes: pd.DataFrame | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True)
class RowsOf:
    """The table(s) a call's published rows belong to, for the privacy ledger: with ``column`` (the frame's column
    holding each row's identity, or with ``refs`` an index into ``refs``, the identities) they are rows of the one
    table ``tables[0]``; without, crowddb cannot tie them to rows of ``tables`` (a join, an aggregate)."""

    tables: tuple[str, ...]
    column: str | None
    refs: np.ndarray | None = dataclasses.field(default=None, compare=False)

    def identities(self, frame: pd.DataFrame) -> np.ndarray:
        """Each row's identity in ``tables[0]``, for the rows of ``frame`` (a traceable call's input)."""
        refs = frame[self.column].to_numpy()
        return refs if self.refs is None else self.refs[refs]  # a materialized view/CTE/subquery: its rowids index


NOT_ESTIMATED = "not estimated"  # OperatorPlan.anonymizer of an operator explain() could not estimate (see note)


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
    # an accuracy target (issue 28): answers (one item, one worker) expected and their range, and the most it may buy
    # (every open item at max_assignments): ``assignments``/``estimated_cost`` are then the expected HIT assignments
    answers_expected: float | None = None
    answers_low: float | None = None
    answers_high: float | None = None
    answers_max: int | None = None
    max_assignments: int | None = None  # HIT assignments at most
    max_cost: float | None = None

    def as_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class HumanOperatorRun:
    """One call of a human operator over its materialized input."""

    def __init__(self, ctx: OperatorContext, call: HumanInput, *, estimating: bool = False) -> None:
        """``estimating``: for explain(), which calls ``estimate()``: nothing is written, bought or collected."""
        self.ctx, self.call, self.op = ctx, call, call.op
        self.estimating = estimating
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
        self.domain = answer_domain(self.op, call.frame)
        self.purchase = Purchase(ctx, call, self.question, self.domain, estimating=estimating)  # its runs row
        self.run_id = self.purchase.run_id
        self.rng = ctx.rng(self.run_id, call.seed)
        self.signature = signature(self.op, self.question, self.domain, call.published)
        # with a seed (the call's, or the connection's) the split into HITs is drawn from self.rng as always; without
        # one it is a keyed hash order of the published content: a function of the data, so a rerun splits the same
        # way and is served from the cache
        self.shuffle = Shuffle(self.signature, call.seed if call.seed is not None else ctx.seed, self.rng)
        self.publisher = Publisher(call, estimating=estimating, signature=self.signature, rng=self.rng,
                                   connection_seed=ctx.seed, buy=self._buy_tuples, domain=self.domain,
                                   served=self._served, shown_before=self._shown_before)
        self._any_k = False  # serve rows shown before in earlier boxes of any k (``_plan_call``)
        self._last_served: serve.Served | None = None
        self.plan: OperatorPlan | None = None  # a run that failed while FKA bought its samples has no plan yet
        self.metrics: dict[str, Any] | None = None

    def estimate(self) -> OperatorPlan:
        """What the call would post and cost (explain()): its release, items and HITs, against the cache."""
        if not self.estimating:
            raise RuntimeError("estimate() needs HumanOperatorRun(..., estimating=True)")  # pragma: no cover
        return self._plan_call()[0]

    def run(self) -> tuple[pd.DataFrame, OperatorPlan]:
        """Plan, check the budget, buy and aggregate the answers.

        Returns (answers, plan): answers has ROW_ID + answer (tuple operators) or GROUP_ID + answer (group). If the
        run fails after buying answers (FKA's samples, a knock-out round, a platform error on a later batch), what
        was bought is still written, with the run marked 'failed', so it is not paid for twice; then it re-raises.
        """
        if self.estimating:
            raise RuntimeError("run() of an estimating HumanOperatorRun")  # pragma: no cover
        try:
            return self._run()
        except BaseException:
            self.purchase.fail(self.plan, self.metrics)
            raise

    def _plan_call(self):
        """The release, the round-1 items and HITs (against the cache) and the plan; the plan is on record in ctx.

        Rows shown before are first put in their earlier boxes whatever k those had: when every item is then on
        record, nothing is shown again and the answers on record serve (money first); else the release is planned
        at this k (``crowddb.privacy.serve``)."""
        # first the asked rows alone, in earlier boxes of any k: when every item is on record nothing is shown, so
        # neither a larger k nor the rows widening added (to keep classes whole) is needed
        whole = self.call.frame
        widened = whole[WIDENED].to_numpy(dtype=bool) if WIDENED in whole else np.zeros(len(whole), dtype=bool)
        self._any_k = self.op.kind == "tuple"
        self._last_served = None
        if self.op.anonymizer == "fka":  # FKA buys its samples as it anonymizes: one release, planned once
            self._any_k, widened = False, np.zeros(len(whole), dtype=bool)
        if widened.any():
            self.call.frame = whole[~widened].reset_index(drop=True)
        metrics, items, cached, have, hits, layout = self._round_one()
        relaxed = self._last_served is not None and self._last_served.below_k
        if len(hits) and (relaxed or widened.any()):  # the record does not hold every answer: a release at this k
            self._any_k, self.call.frame = False, whole
            metrics, items, cached, have, hits, layout = self._round_one()
        plan = self._plan(items, have, hits, metrics)
        if self.estimating and len(hits):  # explain(): would the platform or the guard of k-anonymity refuse it?
            refusal = (self.purchase.platform_refusal(knowledge(self.call.frame, self.call.frame[self.call.published]))
                       or self.purchase.refusal(items, layout, self.shown))
            if refusal:
                plan.note = "; ".join(filter(None, [plan.note, f"would be refused: {refusal}"]))
        self.plan = plan
        self.metrics = metrics
        self.ctx.plans.append(plan)
        return plan, items, cached, hits, layout

    def _round_one(self):
        """The release of the call's rows as they stand (``self.shown``), its round-1 items and their cache lookup
        and HITs: (metrics, items, cached, have, hits, layout)."""
        self.shown, metrics = self._publishable()
        items = self._items(self.shown)
        return (metrics, items, *self.purchase.prepare(items, 1))

    def _run(self) -> tuple[pd.DataFrame, OperatorPlan]:
        call, op = self.call, self.op
        plan, items, cached, hits, layout = self._plan_call()
        metrics = self.metrics
        self.purchase.check_estimate(plan)
        known = knowledge(call.frame, call.frame[call.published])
        bar = tqdm(total=plan.hits, desc=f"{op.name}: HITs", unit="HIT", leave=False,
                   disable=not (self.ctx.progress and sys.stderr.isatty() and plan.hits >= _PROGRESS_MIN_HITS))

        def play(round_items: pd.DataFrame, round_no: int) -> pd.DataFrame:
            prepared = (cached, hits, layout) if round_no == 1 else self._prepare(round_items, round_no)
            return self._round(round_items, prepared, self.shown, known, bar, round_no)

        try:
            if op.adaptive:
                result = self._adaptive(items, hits, layout, known, bar)
            elif op.kind == "tuple":
                answers = play(items, 1)
                result = items[[ROW_ID, "item_id"]].merge(answers, on="item_id")[[ROW_ID, "answer"]]
            else:
                result = tournament(items, call.frame[GROUP_ID].to_numpy(), call.frame[KEY].to_numpy(), play,
                                    self._group_round)
        finally:
            bar.close()
        self.purchase.persist(plan, metrics)
        return result, plan

    # ------------------------------------------------------------------------------- an accuracy target (issue 28)
    def _objects(self, items: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
        """Each item once and its name for the stopping rule: item_key#occurrence, the same on every run (item_id
        follows the run's shuffle), so a rerun over the same answers reaches the same decisions."""
        every = items.drop_duplicates("item_id")[["item_id", "item_key", "occurrence", ROW_ID]].reset_index(drop=True)
        name = every["item_key"].astype(str) + "#" + every["occurrence"].astype(str)
        return every, pd.Series(name.to_numpy(), index=every["item_id"].to_numpy())

    def _known(self, every: pd.DataFrame, names: pd.Series) -> pd.Series | None:
        """``gold_table := 'name'`` with an accuracy target: the known answers of the call's items (those in the
        answer domain), by item name. The stopping rule clamps these items to their answers (gold in Dawid-Skene's
        EM), so the workers' answers to them, asked in round 1 like every item's, anchor the model; they are never
        asked again, and the result carries the known answer with confidence 1."""
        frame = self.call.frame
        if GOLD not in frame:
            return None
        known = frame[GOLD].iloc[every[ROW_ID].to_numpy()]
        text = known.astype(str).to_numpy(dtype=object)
        ok = known.notna().to_numpy() & np.isin(text, list(self.domain))
        return pd.Series(text[ok], index=names.loc[every["item_id"].to_numpy()[ok]].to_numpy())

    def _stop_state(self, on_record: pd.DataFrame, names: pd.Series, known: pd.Series | None
                    ) -> adaptive.StopState:
        """The stopping rule over every answer on record for the call's items (CDAS's verification model and early
        termination; adaptive.py): each item's posterior, and which need one more answer."""
        op = self.op
        answers = pd.DataFrame({"object": names.loc[on_record["item_id"].to_numpy()].to_numpy(),
                                "worker": on_record["worker_id"].to_numpy(),
                                "label": on_record["answer"].astype(str).to_numpy()})
        return adaptive.stopping_rule(answers, target=float(op.accuracy), max_assignments=int(op.max_assignments),
                                      classes=list(self.domain), items=names.to_numpy(), each_item=bool(op.each_item),
                                      gold=known, **self._bound())

    def _bound(self) -> dict[str, float]:
        """The lower bound the result's accuracy is held to (``bound_level :=``, ``tolerance :=``; unset: the
        stopping rule's defaults, ``adaptive.BOUND_LEVEL`` and ``adaptive.TOLERANCE``)."""
        op = self.op
        return {"bound_level": adaptive.BOUND_LEVEL if op.bound_level is None else float(op.bound_level),
                "tolerance": adaptive.TOLERANCE if op.tolerance is None else float(op.tolerance)}

    def _adaptive(self, items: pd.DataFrame, hits: pd.DataFrame, layout: pd.DataFrame, known: KnowledgeBase | None,
                  bar: Any) -> pd.DataFrame:
        """Buy in rounds until the result's expected accuracy (with ``each_item``: every item's leading posterior)
        reaches the target and its lower confidence bound the target minus the tolerance (``adaptive.BOUND_LEVEL``,
        ``adaptive.TOLERANCE``), items stopping at max_assignments answers (CDAS's online early termination): round 1
        asks one answer of each item none is on record for (``hits``); after each round the stopping rule, over
        every answer on record for these items, gives the items it picks one more assignment from workers who have
        not answered them (``HitBatch.exclude``): items below the target and, when items capped below it leave the
        result short, items at it (``adaptive.result_rule``), shown again alike. Every round goes through
        ``Purchase.buy``: on record before it is posted, in the same boxes (one release of this run, continued), its
        spending checked against the budget. A rerun is served from the record: the same answers, the same
        decisions, nothing bought. Returns ROW_ID, answer (the rule's leading label) and its posterior
        (``CONFIDENCE``)."""
        op, purchase = self.op, self.purchase
        every, names = self._objects(items)
        gold = self._known(every, names)
        no_cache = pd.DataFrame({"item_key": [], "occurrence": [], "worker_id": [], "answer": []})
        round_items, exclude, offer, round_no, bought = items, None, None, 1, 0
        counts = pd.Series(0, index=every["item_id"].to_numpy())  # answers on record per item, before the round
        unanswered: set = set()  # items a round asked and the platform gave no answer (none left: not asked again)
        while True:
            if len(hits):
                purchase.buy(round_items, no_cache, hits, layout, self.shown, known, bar, round_no, exclude=exclude,
                             offer=offer)
                bought += len(layout)
            on_record = purchase.on_record(items)
            now = on_record.groupby("item_id").size().reindex(counts.index, fill_value=0)
            if round_no > 1:  # an item asked again without a new answer: the platform has none for it (a replayed
                asked = round_items["item_id"].unique()  # set runs out, nobody left who has not answered it)
                unanswered |= set(asked[(now.loc[asked] <= counts.loc[asked]).to_numpy()])
            counts = now
            # every round refits the workers on every answer, so an item that stopped may need more again (its
            # workers turned out worse): the run ends when the rule, over all answers, stops every item, which is
            # also what a rerun over the same answers decides (nothing bought); each round gives every item the
            # rule asks (below the target or, making up for capped items, at it) an answer (at most max_assignments
            # in all) or takes it out: the loop ends
            state = self._stop_state(on_record, names, gold)
            more = every["item_id"].to_numpy()[names.isin(state.need_more).to_numpy()]
            more = more[~np.isin(more, list(unanswered))]
            if not len(more):
                break
            round_no += 1
            round_items = items[items["item_id"].isin(more)]
            exclude = on_record.loc[on_record["item_id"].isin(more), ["item_id", "worker_id"]]
            chosen = (self._quality_aware(state, names, round_items, exclude) if self.ctx.platform.offers_to_workers
                      else None)
            hits, layout, offer = purchase.more(round_items, round_no, chosen)
        truth = state.truth.reindex(names.to_numpy())
        confidence = state.confidence.reindex(names.to_numpy())
        summary = state.summary()
        # items the rule still asks that the platform had no more answers for: below the target they stop uncertain
        # too; at it (an item bought to make up for items capped below the target) they are done as they are
        left = names.loc[list(unanswered)] if unanswered else names.iloc[:0]
        left = left[left.isin(state.need_more).to_numpy()]
        short = int((state.confidence.loc[left.to_numpy()] < state.target).sum())
        summary["uncertain"] += short
        summary["done"] += len(left) - short
        report = {
            "operator": op.name, "kind": "accuracy target", "accuracy": float(op.accuracy),
            "max_assignments": int(op.max_assignments), "items": len(every), "rounds": round_no,
            "each_item": bool(op.each_item), "answers": summary["answers"], "bought": bought,
            "done": summary["done"], "accepted": summary["accepted"], "uncertain": summary["uncertain"],
            "gold": summary["gold"],
            "unanswered": short, "model": state.model.kind,
            "mean_confidence": round(float(confidence.mean()), 6), "min_confidence": round(float(confidence.min()), 6),
            # the one-sided lower confidence bound on the result's accuracy the rule holds to accuracy - tolerance
            "accuracy_bound": None if op.each_item else round(state.accuracy_bound, 6),
            "bound_level": None if op.each_item else state.bound_level,
            "tolerance": None if op.each_item else state.tolerance}
        self.ctx.reports.append(report)
        if self.plan is not None:
            self.plan.rounds = round_no
            self.plan.note = "; ".join(filter(None, [self.plan.note, (
                f"bought {bought} answers in {round_no} rounds; {summary['uncertain']} item(s) stopped uncertain at "
                f"max_assignments := {op.max_assignments}"
                + (f" ({short} of them because the platform had no more answers for them)" if short else "")
                + ("" if op.each_item else f"; {summary['accepted']} accepted below the target, the result's mean "
                   f"confidence {confidence.mean():.3f}, its {state.bound_level:.0%} lower bound "
                   f"{state.accuracy_bound:.3f} (held to {op.accuracy - state.tolerance:g})"))]))
        answers = pd.DataFrame({"item_id": every["item_id"].to_numpy(), "answer": truth.to_numpy(),
                                CONFIDENCE: confidence.to_numpy(dtype=float)})
        return items[[ROW_ID, "item_id"]].merge(answers, on="item_id")[[ROW_ID, "answer", CONFIDENCE]]

    def _quality_aware(self, state: adaptive.StopState, names: pd.Series, round_items: pd.DataFrame,
                       exclude: pd.DataFrame) -> pd.DataFrame:
        """Quality-aware assignment (QASCA; ``adaptive.assign_round``) on a platform that lets crowddb choose: the
        platform's workers (not blocked), best estimated accuracy first (ours: the order a HIT built ahead of time
        assumes they ask for work; ties: the platform's order), each take up to tuples_per_hit of the round's items
        where its answer is expected to help most and has not answered, among the items the platform says it can
        give that worker (``Platform.candidates``; None: any). Returns item_id, worker_id of the items given; the
        rest go in HITs anyone may take."""
        more = round_items["item_id"].unique()
        crowd = self.ctx.platform.workers()
        if "blocked" in crowd.columns:
            crowd = crowd[~crowd["blocked"].fillna(False).astype(bool).to_numpy()]
        workers = pd.Index(pd.unique(crowd["worker_id"].astype(str)))
        a, b = state.model.prior
        acc = state.model.accuracy.reindex(workers).fillna(a / (a + b)).to_numpy()
        arrivals = workers.take(np.lexsort((np.arange(len(workers)), -acc)))
        picked = adaptive.assign_round(state, arrivals, per_worker=int(self.op.tuples_per_hit),
                                       candidates=self._candidates(names, round_items, exclude))
        item_of = pd.Series(names.index.to_numpy(), index=names.to_numpy())
        item_id = item_of.reindex(picked["object"].to_numpy()).to_numpy()
        keep = np.isin(item_id, more)
        return pd.DataFrame({"item_id": item_id[keep], "worker_id": picked["worker"].to_numpy()[keep]})

    def _candidates(self, names: pd.Series, round_items: pd.DataFrame, exclude: pd.DataFrame
                    ) -> pd.DataFrame | None:
        """The (item, worker) pairs the platform can serve (``Platform.candidates``), as ``assign_round`` reads them:
        object (the item's name) and worker (text, as crowddb names workers); None: anyone may answer anything."""
        published = self.shown.iloc[round_items[ROW_ID].to_numpy()].reset_index(drop=True)
        asked = pd.concat([round_items[["item_id", "row_no"]].reset_index(drop=True), published], axis=1)
        pairs = self.ctx.platform.candidates(asked, list(self.shown.columns), exclude.reset_index(drop=True))
        if pairs is None:
            return None
        if not isinstance(pairs, pd.DataFrame) or not {"item_id", "worker_id"} <= set(pairs.columns):
            raise PlatformError(f"{self.op.name}: the {self.ctx.platform.name} platform's candidates() returned "
                                f"{type(pairs).__name__} {list(getattr(pairs, 'columns', []))!r}; it must return a "
                                "DataFrame with columns item_id, worker_id (or None: anyone may answer anything)")
        return pd.DataFrame({"object": names.reindex(pairs["item_id"].to_numpy()).to_numpy(),
                             "worker": pairs["worker_id"].astype(str).to_numpy()})

    def _predicted(self, items: pd.DataFrame, have: pd.Series, hits: pd.DataFrame) -> dict[str, Any]:
        """explain()'s figures of an accuracy target: the answers the open items are expected to take and their
        range (``adaptive.predict_assignments``, from the workers' qualities fitted on the answers on record, else
        the prior Beta(8, 2)), in HIT assignments (``tuples_per_hit`` answers each) and cost, and the most it may
        buy (every open item at max_assignments), which the budget is checked against before round 1."""
        op = self.op
        every, names = self._objects(items)
        open_items, held, qualities = len(every), 0, None
        if len(have):
            state = self._stop_state(self.purchase.on_record(items), names, self._known(every, names))
            need = state.need_more
            open_items, held = len(need), int(state.n_answers.loc[need].sum())
            if len(state.model.workers):
                qualities = state.model.accuracy.to_numpy()
        pred = adaptive.predict_assignments(open_items, len(self.domain), target=float(op.accuracy),
                                            max_assignments=int(op.max_assignments), qualities=qualities,
                                            each_item=bool(op.each_item), **self._bound())
        cap, rounds = op.tuples_per_hit, int(op.max_assignments)
        expected, low, high = (max(x - held, 0.0) for x in (pred.expected, pred.low, pred.high))
        # answers become HIT assignments tuples_per_hit at a time; each later round may add one partial HIT (ours)
        first = int(hits["assignments"].sum()) if len(hits) else 0
        most = rounds * int(np.ceil(open_items / cap))
        hit_assignments = min(max(first, int(np.ceil(expected / cap)) + (rounds - 1) * (open_items > 0)), most)
        cost = op.cost_per_assignment
        expected, low, high = float(expected), float(low), float(high)
        return {"assignments": hit_assignments, "estimated_cost": round(hit_assignments * cost, 4),
                "answers_expected": round(expected, 1), "answers_low": round(low, 1), "answers_high": round(high, 1),
                "answers_max": open_items * rounds - held, "max_assignments": most,
                "max_cost": round(most * cost, 4), "cached_items": len(every) - open_items,
                "note": (f"accuracy := {op.accuracy:g}: {expected:,.0f} answers expected ({pred.level:.0%} range "
                         f"{low:,.0f}-{high:,.0f}) for {open_items} open items, at most {open_items * rounds - held} "
                         f"(max_assignments := {rounds}; up to ${most * cost:,.2f}); workers: {pred.basis}")}

    def _served(self) -> serve.Served | None:
        """A safe release of this call's rows when some were shown before (``crowddb.privacy.serve``): their joint
        classes kept whole, each in one box (the earlier one where it fits, merged ones for a larger k); None when
        no row was shown before (anonymize afresh) or the rows cannot be tied to their table."""
        call, rows_of = self.call, self.call.rows_of
        if rows_of is None or rows_of.column is None:
            return None
        identities = rows_of.identities(call.frame)
        if call.joint_classes is None:  # read once: the rows widening added are members of the same classes
            call.joint_classes = composition.joint_classes(self.ctx.store.con, rows_of.tables[0], identities)
        classes = call.joint_classes
        if classes.empty:
            return None
        groups = call.frame[GROUP_ID].to_numpy(dtype=np.int64) if self.op.kind == "group" else None
        try:
            widened = int(call.frame[WIDENED].sum()) if WIDENED in call.frame else 0
            self._last_served = serve.plan(identities, classes, int(self.op.k),
                                           composition.signature(call.quasi_identifiers), groups=groups,
                                           widened=widened, any_k=self._any_k)
            return self._last_served
        except serve.Refused as refused:
            raise PrivacyError(f"{self.op.name}: {refused.reason}; nothing was published. {refused.advice}") from None

    def _shown_before(self) -> int:
        """How many of this call's rows an earlier release showed (rows crowddb cannot tie to a table: all of them,
        if the table has releases on record)."""
        rows_of = self.call.rows_of
        if rows_of is None:
            return 0
        if rows_of.column is None:
            return len(self.call.frame) if composition.has_releases(self.ctx.store.con, rows_of.tables) else 0
        return composition.shown_before(self.ctx.store.con, rows_of.tables[0], rows_of.identities(self.call.frame))

    def _publishable(self) -> tuple[pd.DataFrame, dict[str, Any] | None]:
        """The published columns as text, QIs generalized to k-anonymous groups (kanon-crowd-db §2.2); FKA buys its
        samples here, through ``_buy_tuples``."""
        return self.publisher.release()

    def _items(self, shown: pd.DataFrame, kind: str | None = None) -> pd.DataFrame:
        """Round-1 question items in shuffled order: item_id, ROW_ID, row_no, row_hash, item_key, occurrence."""
        if (kind or self.op.kind) == "group":
            return self._group_round(self.call.frame[GROUP_ID].to_numpy(), np.arange(len(shown)), 0)
        return tuple_items(shown, self.shuffle, signature(self.op, self.question, self.domain, list(shown.columns)))

    def _group_round(self, groups: np.ndarray, rows: np.ndarray, first_id: int) -> pd.DataFrame:
        """Items of one knock-out round over the given rows of each group."""
        return group_round_items(self.shown, groups, rows, first_id, self.shuffle, self.op.tuples_per_hit)

    def _prepare(self, items: pd.DataFrame, round_no: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """Cached answers, HITs and layout of a round's items."""
        cached, _, hits, layout = self.purchase.prepare(items, round_no)
        return cached, hits, layout

    def _round(self, items: pd.DataFrame, prepared: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
               shown: pd.DataFrame, known: KnowledgeBase | None, bar: Any, round_no: int) -> pd.DataFrame:
        """Buy the missing answers of one round and aggregate: returns item_id, answer."""
        cached, hits, layout = prepared
        answers = self.purchase.buy(items, cached, hits, layout, shown, known, bar, round_no)
        if self.op.gold_drop:  # workers the platform stopped for failing gold questions: their answers are left out
            answers = answers[~answers["worker_id"].isin(self.purchase.stopped_workers())]
        return aggregate(answers, self.op, self.signature)

    def _buy_tuples(self, shown: pd.DataFrame, known: KnowledgeBase | None) -> np.ndarray:
        """FKA's purchases: one aggregated answer per row of ``shown`` (published text), through cache, budget and
        platform, as tuple items of this run (round 0)."""
        items = self._items(shown, kind="tuple")
        answers = self._round(items, self._prepare(items, 0), shown, known, NoBar(), 0)
        return items[[ROW_ID, "item_id"]].merge(answers, on="item_id").sort_values(ROW_ID)["answer"].to_numpy()

    def _widened_cost(self, items: pd.DataFrame, have: pd.Series) -> str:
        """What the rows added to keep earlier classes whole cost in round 1, their share of the HITs (their items'
        assignments not on record, ``tuples_per_hit`` items a HIT), as explain() prints it beside them; '' when none
        was added."""
        frame, op = self.call.frame, self.op
        if WIDENED not in frame or not frame[WIDENED].any():
            return ""
        wide = items[ROW_ID].isin(frame.loc[frame[WIDENED].to_numpy(dtype=bool), ROW_ID]).to_numpy()
        keys = pd.MultiIndex.from_frame(items[["item_key", "occurrence"]])
        held = have.reindex(keys).fillna(0).to_numpy(dtype=float) if len(have) else np.zeros(len(items))
        missing = np.clip(op.assignments - held, 0, None)[wide].sum()  # item-assignments, tuples_per_hit a HIT
        return f", +${missing / op.tuples_per_hit * op.cost_per_assignment:,.2f}"

    def _plan(self, items: pd.DataFrame, have: pd.Series, hits: pd.DataFrame,
              metrics: dict[str, Any] | None) -> OperatorPlan:
        """What this call posts (or would post): round 1's HITs, estimates of later rounds and FKA's sampling, and
        what was bought already (FKA's samples)."""
        call, op, purchase, publisher = self.call, self.op, self.purchase, self.publisher
        later = (later_round_hits(call.frame[GROUP_ID].to_numpy(), items, op.tuples_per_hit)
                 if op.kind == "group" else 0)
        estimate = publisher.fka_estimate
        fka_hits = int(np.ceil(estimate / 2 / op.tuples_per_hit)) * 2 if estimate else 0
        bought_hits = purchase.bought_hits  # FKA's samples, already bought
        bought_assignments = purchase.bought_assignments
        assignments = int(hits["assignments"].sum()) + (later + fka_hits) * op.assignments
        notes = ["later knock-out rounds estimated without cache"] if later else []
        if estimate:
            notes.append(f"FKA sampling estimated at {estimate} synthetic tuples; NCP is Mondrian's")
        if metrics and metrics.get("served"):  # rows shown before: how their joint classes are kept (privacy.serve)
            widened = "(shown, their answers not used"  # serve._how's words: the cost goes beside them
            notes.append(str(metrics["served"]).replace(widened, widened + self._widened_cost(items, have), 1))
        if publisher.fka_tuples:
            notes.append(f"FKA asked about {publisher.fka_tuples} synthetic tuples (identical ones answered once)")
        if purchase.awaited:
            n = len(purchase.awaited)
            notes.append(f"{n} HIT{'s' if n > 1 else ''} ({sum(purchase.awaited.values())} assignments) posted by an "
                         "earlier run will be collected, not bought again")
        lower, upper = accuracy_range(call.frame, self.domain) if call.quasi_identifiers else (None, None)
        common = {"operator": op.name, "kind": op.kind, "input_rows": len(call.frame),
                  "items": items["item_id"].nunique(), "budget": purchase.budget(),
                  "k": int(op.k) if call.quasi_identifiers else None,
                  "anonymizer": op.anonymizer if call.quasi_identifiers else "none",
                  "ncp": (metrics or {}).get("ncp"), "accuracy_lower": lower, "accuracy_upper": upper,
                  "withheld": dict(call.withheld)}
        if op.adaptive:  # issue 28: the prediction of an accuracy target, not a fixed count
            figures = self._predicted(items, have, hits)
            notes.append(figures.pop("note"))
            return OperatorPlan(**common, hits=len(hits), rounds=int(op.max_assignments), note="; ".join(notes),
                                **figures)
        return OperatorPlan(
            **common, cached_items=int((have >= op.assignments).sum()),
            hits=len(hits) + later + fka_hits + bought_hits, assignments=assignments + bought_assignments,
            estimated_cost=round((assignments + bought_assignments) * op.cost_per_assignment, 4),
            rounds=1 + (later > 0), note="; ".join(notes))
