"""Buying and collecting the answers of one operator run: its row in crowddb_runs, the cache, the budget, the
platform, and every purchase recorded through the store as it happens (write-ahead), so nothing is paid for twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..crowd import Collected, HitBatch, KnowledgeBase, Platform
from ..errors import BudgetExceededError, CrowdDBError, PlatformError, PrivacyError, UnknownHITError
from ..store import Store, composition
from .columns import GOLD, ROW_ID, TRUTH
from .context import OperatorContext
from .packing import gold_copies, hit_batch, hit_layout, with_gold

if TYPE_CHECKING:  # human.py imports this module
    from .human import HumanInput, OperatorPlan


def record_new_workers(store: Store, platform: Platform, assignments: pd.DataFrame, known: set[str]) -> set[str]:
    """Put the platform's workers on record when ``assignments`` name one not in ``known`` (people who joined
    since: a study link); returns the workers now known to be on record."""
    if assignments["worker_id"].isin(known).all():
        return known
    workers = platform.workers()
    store.record_workers(workers, platform.name)
    return set(workers["worker_id"])


def record_earlier(store: Store, platform: Platform, ids: list[str], got: Collected,
                   known_workers: set[str] = frozenset()) -> set[str]:
    """What the platform returned for HITs an earlier run posted, on record at the price they were posted at and
    credited to that run (their gold questions' answers stay the platform's); returns the workers on record."""
    known = store.hit_items(ids)
    answers = got.answers.merge(known[["hit_id", "item_no", "item_key", "occurrence"]], on=["hit_id", "item_no"])
    price = got.assignments.merge(known.drop_duplicates("hit_id")[["hit_id", "reward", "fee"]], on="hit_id",
                                  how="left")
    workers = record_new_workers(store, platform, got.assignments, known_workers)
    store.record_collected(got.assignments, answers, got.assignments.assign(
        reward=price["reward"].to_numpy(), fee=price["fee"].to_numpy()), credit=True)
    return workers


def collect_finished(store: Store, platform: Platform) -> int:
    """HITs on record as published whose assignments are all in on the platform (people answered while no session
    was open, through ``crowddb serve``): collected and put on record now, when a session opens the database, as the
    rerun of their query would. A platform that cannot tell which HITs are finished (``finished`` returns None) is
    left to the reruns. Returns how many HITs were collected."""
    published = store.published_hits(platform.name)
    finished = platform.finished(published) if published else None
    ids = sorted(finished) if finished else []
    if not ids:
        return 0
    record_earlier(store, platform, ids, platform.collect(ids))
    return len(ids)


class NoBar:
    """Progress sink for purchases made outside the main progress bar (FKA's samples)."""

    def update(self, n: int) -> None:
        pass


def check_query_budget(estimated_cost: float, budget: float | None) -> None:
    """Refuse a whole query whose estimate (``explain()``) exceeds the connection's budget, before anything is
    published. Each run then checks its own estimate and every round's spending (``Purchase``): the query's
    estimate cannot see how many rounds a run needs, and a call may carry a budget of its own."""
    if budget is not None and estimated_cost > budget + 1e-9:
        raise BudgetExceededError(f"the query's estimated cost ${estimated_cost:,.2f} exceeds the budget "
                                  f"${budget:,.2f}; nothing was published")


class Purchase:
    """What one run buys, collects and spends, on record in the crowddb_* tables (see ``Store``)."""

    def __init__(self, ctx: OperatorContext, call: HumanInput, question: str, domain: tuple[str, ...] | None, *,
                 estimating: bool) -> None:
        self.ctx, self.call, self.op = ctx, call, call.op
        self.question, self.domain = question, domain
        self.store = ctx.store
        self.estimating = estimating  # explain(): estimate what a run would buy; nothing is written or bought
        if estimating:  # the id is only a name
            self.run_id = self.store.next_run_id()
        else:  # runs whose process died are marked interrupted, then this run's row takes its id
            self.store.reap_interrupted()
            self.run_id = self.store.reserve_run(self.op.name, ctx.query, len(call.frame), int(self.op.k),
                                                 self.op.anonymizer)
        self.spent = 0.0
        self._hit_seq = 0
        self.bought: list[tuple[HitBatch, Any, pd.DataFrame]] = []
        self._reserved = not estimating  # this run's crowddb_runs row was written when it started
        self._wrote_hits = False  # a HIT of this run is on record (then its row stays, even if the run fails)
        self.awaited: dict[str, int] = {}  # estimate: HITs an earlier run posted (-> assignments), to collect
        self._workers: set[str] = set()  # the platform's workers this run has put on record

    @property
    def bought_hits(self) -> int:
        return sum(len(b.hits) for b, _, _ in self.bought)

    @property
    def bought_assignments(self) -> int:
        return sum(int(b.hits["assignments"].sum()) for b, _, _ in self.bought)

    # ----------------------------------------------------------------------------------------------- budget
    def budget(self) -> float | None:
        """The tighter of the call's budget and what is left of the query's budget."""
        limits = [b for b in (self.call.budget,
                              None if self.ctx.budget is None else self.ctx.budget - self.ctx.spent) if b is not None]
        return min(limits) if limits else None

    def check_estimate(self, plan: OperatorPlan) -> None:
        """Refuse a run whose estimated cost (beyond what it bought already) exceeds the budget, before it posts."""
        op, budget = self.op, self.budget()
        if op.adaptive and plan.max_cost is not None:  # an accuracy target: the predicted maximum, before round 1
            if budget is not None and self.spent + plan.max_cost > budget + 1e-9:
                raise BudgetExceededError(
                    f"{op.name}: up to ${plan.max_cost:,.2f} ({plan.max_assignments} assignments: every item's "
                    f"max_assignments := {op.max_assignments} at ${op.cost_per_assignment:.4f} each) exceeds the budget "
                    f"${budget:,.2f}; nothing was published. Lower max_assignments or raise the budget")
            return
        if (budget is not None and self.spent + plan.estimated_cost - self.bought_assignments * op.cost_per_assignment
                > budget + 1e-9):
            raise BudgetExceededError(
                f"{op.name}: estimated cost ${plan.estimated_cost:,.2f} ({plan.assignments} assignments at "
                f"${op.cost_per_assignment:.4f} each) exceeds the budget ${budget:,.2f}; nothing was published")

    # ------------------------------------------------------------------------------------------ cache, HITs
    def prepare(self, items: pd.DataFrame, round_no: int) -> tuple[pd.DataFrame, pd.Series, pd.DataFrame,
                                                                   pd.DataFrame]:
        """Cache lookup and HIT layout of a set of items: (cached answers, answers held per item, hits, layout)."""
        if not self.estimating:
            self._collect_outstanding(items)
        cached = self._cached(items)
        have = cached.groupby(["item_key", "occurrence"]).size()
        expected = have
        if self.estimating:  # a run collects HITs an earlier run posted for these items; it does not buy them again
            posted = self._outstanding_hits(items)
            self.awaited.update(zip(posted["hit_id"], posted["assignments"].astype(int)))
            pending = posted.groupby(["item_key", "occurrence"])["assignments"].sum()
            expected = have.add(pending, fill_value=0).astype(np.int64)
        # an accuracy target's round 1 asks one answer of every item none is on record for; later rounds: more()
        first = 1 if self.op.adaptive else self.op.assignments
        hits, layout = hit_layout(items, expected, first, self.op.tuples_per_hit, self.run_id, self._hit_seq, round_no)
        return cached, have, hits, layout

    def _cached(self, items: pd.DataFrame) -> pd.DataFrame:
        """Answers already bought for these items: item_key, occurrence, worker_id, answer (first A per item)."""
        got = self.store.answers_for(items.drop_duplicates("item_id")[["item_key", "occurrence"]])
        got["rank"] = got.groupby(["item_key", "occurrence"]).cumcount()
        held = self.op.max_assignments if self.op.adaptive else self.op.assignments
        return got[got["rank"] < held].drop(columns="rank")

    def more(self, items: pd.DataFrame, round_no: int, offer: pd.DataFrame | None = None
             ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
        """An accuracy target's later round (issue 28): one more assignment of each of ``items`` (hits, layout, and
        the HITs' offers). ``offer``: item_id, worker_id, the worker each item is for (quality-aware assignment):
        each worker's items make HITs of their own, offered to it (hit_id, worker_id)."""
        none = pd.Series([], dtype=np.int64, index=pd.MultiIndex.from_arrays([[], []]))
        if offer is None or not len(offer):
            return (*hit_layout(items, none, 1, self.op.tuples_per_hit, self.run_id, self._hit_seq, round_no), None)
        workers = pd.Index(pd.unique(offer["worker_id"]))
        group = pd.Series(workers.get_indexer(offer["worker_id"]), index=offer["item_id"].to_numpy())
        hits, layout = hit_layout(items, none, 1, self.op.tuples_per_hit, self.run_id, self._hit_seq, round_no,
                                  group=group)
        by_hit = layout.merge(offer, on="item_id").drop_duplicates("hit_id")[["hit_id", "worker_id"]]
        return hits, layout, by_hit.reset_index(drop=True)

    def on_record(self, items: pd.DataFrame) -> pd.DataFrame:
        """Every answer on record for ``items`` (up to max_assignments each, in the order bought): item_id,
        item_key, occurrence, worker_id, answer."""
        ident = items.drop_duplicates("item_id")[["item_id", "item_key", "occurrence"]]
        return self._cached(items).merge(ident, on=["item_key", "occurrence"])[
            ["item_id", "item_key", "occurrence", "worker_id", "answer"]]

    # -------------------------------------------------------------------------------------------------- buy
    def platform_refusal(self, knowledge: KnowledgeBase | None) -> str | None:
        """Why the platform could not answer HITs of this call (a simulated crowd without a ground-truth column to
        answer from), or None; explain() says the same (``HumanOperatorRun._plan_call``)."""
        platform = self.ctx.platform
        if knowledge is None and platform.needs_knowledge:
            return (f"{self.op.name}: the {platform.name} crowd answers from a ground-truth column of the input, and "
                    "this input has none: declare one (role 'ground_truth', e.g. load_frame(..., ground_truth='job')) "
                    "or connect to a platform of real people (crowddb.connect(platform=WebCrowd(...)))")
        return None

    def buy(self, items: pd.DataFrame, cached: pd.DataFrame, hits: pd.DataFrame, layout: pd.DataFrame,
            shown: pd.DataFrame, knowledge: KnowledgeBase | None, bar: Any, round_no: int,
            exclude: pd.DataFrame | None = None, offer: pd.DataFrame | None = None) -> pd.DataFrame:
        """Buy the missing answers of one round: returns every answer of its items (item_id, worker_id, answer).
        ``exclude``: item_id, worker_id pairs that must not answer again (an accuracy target's later rounds);
        ``offer``: hit_id, worker_id, the worker each HIT was built for (``more``)."""
        op = self.op
        spend = float(hits["assignments"].sum()) * op.cost_per_assignment if len(hits) else 0.0
        budget = self.budget()
        if budget is not None and self.spent + spend > budget + 1e-9:
            raise BudgetExceededError(f"{op.name}: round {round_no} would bring the cost to "
                                      f"${self.spent + spend:,.2f}, over the budget ${budget:,.2f}")
        ident = items.drop_duplicates("item_id")[["item_id", "item_key", "occurrence"]]
        answers = [cached.merge(ident, on=["item_key", "occurrence"])[["item_id", "worker_id", "answer"]]]
        if len(hits):
            refusal = self.platform_refusal(knowledge)
            if refusal:  # before the write-ahead record: nothing is on record as publishing
                raise PlatformError(refusal)
            batch = hit_batch(items, hits, layout, shown, self.question, self.domain, op.reward, op.fee,
                              next(iter(self.call.args.values()), None))  # a group operator's first argument (the job)
            platform = self.ctx.platform
            keys = layout.merge(ident, on="item_id")
            batch, keys = with_gold(batch, keys, self._gold(items, layout, round_no))
            if exclude is not None and len(exclude):  # (item_id -> its place in this round's HITs)
                batch = dataclasses.replace(batch, exclude=exclude.merge(layout, on="item_id")[
                    ["hit_id", "item_no", "worker_id"]].reset_index(drop=True))
            if offer is not None and len(offer):
                batch = dataclasses.replace(batch, offer=offer)
            ids = batch.hits["hit_id"].tolist()
            ledger = self._ledger(items, layout, shown, round_no)  # refuses what would break an earlier release
            release = self._release(ident[ident["item_id"].isin(layout["item_id"])], ledger, round_no)
            self._record_posted(batch, keys, ledger, release)  # write-ahead: on record as 'publishing' before the
            # platform is called
            try:
                with self._platform_errors(f"publishing {len(hits)} HITs (round {round_no})"):
                    platform.publish(batch, knowledge=knowledge)
            except BaseException:
                self._resolve_publishing(ids)  # which of them did the platform get? the rest were never posted
                raise
            self.store.set_hit_status(ids, "published", was="publishing")  # from here on they are paid for
            with self._platform_errors(f"collecting {len(hits)} HITs (round {round_no})"):
                got = platform.collect(batch.hits["hit_id"].tolist(), progress=bar.update, **self._wait())
            got.answers = got.answers.merge(layout, on=["hit_id", "item_no"]).merge(ident, on="item_id")
            self._record_collected(got.assignments, got.answers, op.reward, op.reward * op.fee)
            self.bought.append((batch, got, keys))
            self.spent += spend
            self._hit_seq += len(hits)
            answers.append(got.answers[["item_id", "worker_id", "answer"]])
        return pd.concat(answers, ignore_index=True)

    # ---------------------------------------------------------------------------------------------- persist
    def persist(self, plan: OperatorPlan | None, metrics: dict[str, Any] | None, status: str = "completed") -> None:
        """Write the run's totals and its release (one transaction); its purchases were written as they happened.
        The query's spending grows by this run's."""
        op = self.op
        hits = [b.hits for b, _, _ in self.bought]
        release = None
        if metrics is not None:
            release = {"method": op.anonymizer, "k": int(op.k), "metrics": metrics,
                       "params": {"quasi_identifiers": list(self.call.quasi_identifiers)}}
        self.store.finish_run(
            self.run_id, hits=int(sum(len(h) for h in hits)), assignments=int(sum(h["assignments"].sum() for h in hits)),
            cached_items=plan.cached_items if plan else 0, cost=round(self.spent, 4),
            k=plan.k if plan else int(op.k), anonymizer=plan.anonymizer if plan else op.anonymizer, status=status,
            release=release)
        self.ctx.spent += self.spent

    def fail(self, plan: OperatorPlan | None, metrics: dict[str, Any] | None) -> None:
        """After an error: what was bought is still written, with the run marked 'failed', so it is not paid for
        twice; a run that bought nothing leaves no row."""
        if self._reserved:
            if self._wrote_hits and self.store.run_has_hits(self.run_id):
                self.persist(plan, metrics, status="failed")
            else:
                with contextlib.suppress(Exception):  # the run's own error is the one to report
                    self.store.forget_run(self.run_id)

    def _wait(self) -> dict[str, float]:
        """The query's timeout for collect(), passed only when given (a platform written before it takes none)."""
        return {} if self.ctx.timeout is None else {"timeout": self.ctx.timeout}

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
    def _ledger(self, items: pd.DataFrame, layout: pd.DataFrame, shown: pd.DataFrame, round_no: int
                ) -> list[tuple[str, composition.Planned | None]]:
        """The rows this round publishes, per table, for the privacy ledger; the guard of k-anonymity across
        releases checks them as they are recorded (crowddb/store/composition.py), before the platform is called.
        FKA's samples (round 0) are synthetic tuples, nobody's row."""
        rows_of = self.call.rows_of
        if rows_of is None or round_no < 1:
            return []
        if rows_of.column is None:
            targets = [(table, None) for table in rows_of.tables]
        else:
            identities = rows_of.identities(self.call.frame)
            composition.distinct_rows(self.call.op.name, rows_of.tables[0], identities)  # every row of the call
            posted = items.loc[items["item_id"].isin(layout["item_id"]), ROW_ID].to_numpy()
            boxes = composition.box_text(shown.iloc[posted], list(self.call.quasi_identifiers))
            targets = [(rows_of.tables[0], composition.planned(identities[posted], boxes,
                                                               quasi_identifiers=list(self.call.quasi_identifiers)))]
        return targets

    def _gold(self, items: pd.DataFrame, layout: pd.DataFrame, round_no: int) -> pd.DataFrame:
        """The gold questions of one round's HITs (``gold := share``): copies of its items whose answer is known (a
        value of the answer domain) from ``gold_table``, else the ground-truth column; none for FKA's synthetic
        samples (round 0)."""
        frame = self.call.frame
        known_in = GOLD if GOLD in frame else TRUTH  # the table of known answers the requester named, if any
        if not self.op.gold or round_no < 1 or known_in not in frame or self.domain is None:
            return gold_copies(layout, pd.Series(dtype=object), 0)
        posted = items.drop_duplicates("item_id")
        posted = posted[posted["item_id"].isin(layout["item_id"])]
        truth = frame[known_in].iloc[posted[ROW_ID].to_numpy()]
        known = pd.Series(truth.astype(str).where(truth.notna()).to_numpy(dtype=object),
                          index=posted["item_id"].to_numpy())
        return gold_copies(layout, known[known.isin(self.domain)], float(self.op.gold))

    def stopped_workers(self) -> set[str]:
        """Workers the platform stopped for failing gold questions (its workers()' ``blocked`` column)."""
        workers = self.ctx.platform.workers()
        if "blocked" not in workers:
            return set()
        return set(workers.loc[workers["blocked"].fillna(False).astype(bool), "worker_id"])

    def refusal(self, items: pd.DataFrame, layout: pd.DataFrame, shown: pd.DataFrame) -> str | None:
        """explain(): why the guard would refuse round 1 of this run (None: it would not)."""
        try:
            for table, rows in self._ledger(items, layout, shown, 1):
                composition.check(self.store.con, table, f"run:{self.run_id}", int(self.op.k), rows)
        except PrivacyError as refused:
            return str(refused)
        return None

    def _release(self, asked: pd.DataFrame, ledger: list[tuple[str, composition.Planned | None]],
                 round_no: int) -> str:
        """The release a round's rows are recorded in: this run's ('run:<id>'); for a later round of a run that
        showed nothing itself (a rerun after a run died between rounds: its first round was all on record), the
        release of the earliest run that asked every one of these items and showed exactly this call's rows: the
        same call, resumed. The round continues that run as it would have gone on, in its boxes; recorded as a new
        release it would show a subset of that run's rows, which the guard refuses (a worker would tell them from
        the rest of their classes). A call over other rows (a subset chosen by a WHERE) is never such a resumption:
        its rows are judged as a release of their own."""
        own = f"run:{self.run_id}"
        rows_of = self.call.rows_of
        tables = [table for table, rows in ledger if rows is not None]
        if (round_no < 2 or len(tables) != 1 or rows_of is None or rows_of.column is None
                or composition.on_record(self.store.con, tables[0], own)):
            return own
        everyone = rows_of.identities(self.call.frame)  # every row of the call, shown in its first round
        for run in self.store.runs_asking(asked[["item_key", "occurrence"]], self.op.name):
            earlier = f"run:{run}"
            if run != self.run_id and composition.shows_exactly(self.store.con, tables[0], earlier, everyone):
                return earlier
        return own

    def _record_posted(self, batch: HitBatch, keys: pd.DataFrame,
                       ledger: list[tuple[str, composition.Planned | None]] = (), release: str | None = None) -> None:
        """The HITs about to be posted, with exactly what they show, as 'publishing' (one transaction), before the
        platform is called (write-ahead): a run that dies during or after publish() leaves them on record, and the
        next run asks the platform which of them it has instead of posting anything again."""
        hits = batch.hits.assign(
            operator=self.op.name, run_id=self.run_id, platform=self.ctx.platform.name, status="publishing",
            domain=json.dumps(list(self.domain)) if self.domain is not None else None,
            n_items=batch.hits["hit_id"].map(batch.items.groupby("hit_id")["item_no"].nunique()))
        items = batch.items.merge(keys[["hit_id", "item_no", "item_key", "occurrence", "gold"]],
                                  on=["hit_id", "item_no"])
        self.store.record_posted(self.run_id, hits, items, batch.published_columns, group=self.op.kind == "group",
                                 ledger=[(table, release or f"run:{self.run_id}", int(self.op.k), rows)
                                         for table, rows in ledger])
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
        self._workers = record_new_workers(self.store, self.ctx.platform, assignments, self._workers)
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
                got = platform.collect(ids, **self._wait())
        except UnknownHITError:
            self.store.set_hit_status(ids, "lost")
            return
        self._workers = record_earlier(self.store, self.ctx.platform, ids, got, self._workers)
