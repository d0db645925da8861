"""A recorded real answer set served as if its workers were answering now (issue 28): how answer-buying policies
are measured honestly on real people's answers, and how a user tries a policy on their own past data.

Each recorded (task, worker, answer) is served at most once per session, so no worker answers a task twice: asked
for a task, the crowd hands out the recorded answer of a worker who has not answered it yet in this session, in a
seeded order (:meth:`ReplayCrowd.ask`), or the answer of the worker an assignment policy names
(:meth:`ReplayCrowd.answer`, with :meth:`ReplayCrowd.available` listing the pairs it may name). A task whose
recorded answers are all served has no more to give: asking for more returns fewer rows, never an invented answer.

As a ``Platform`` (HITs posted by crowddb): each published item names its task in ``task_column``; every assignment
slot of a HIT gets, for each item, the next recorded answer in the seeded order. The replay lets crowddb choose who
answers (``offers_to_workers``, as the simulated crowd does; an accuracy target's quality-aware rounds): a HIT named in
``HitBatch.offer`` (one or more rows per HIT: its workers in the order offered) gives each of its items the recorded
answer of the first offered worker who answered that item in the record and has not been served for it yet (for a
HIT of several assignments, the first ones). What a record cannot give: an answer nobody recorded, so an item none
of the offered workers has a remaining recorded answer to falls back to the seeded order. crowddb asks first whom it
may offer each item to (:meth:`ReplayCrowd.candidates`: the workers with a recorded answer to its task not served
yet), so on a sparse record (each worker answered a few percent of the tasks) its offers are still kept. Nor a
HIT of several items answered by one person (the record has no HITs), so the answers of one assignment may come
from different recorded workers (each answer carries its own worker_id; the assignment's worker_id is that of its
first item); pick-a-row (group) items are served only if the recorded answers are row numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .._random import make_rng
from ..errors import ArgumentError, EmptyInputError, PlatformError, UnknownHITError
from ..truth.adaptive import answer_columns
from .knowledge import KnowledgeBase
from .platform import Collected, HitBatch, Platform, ProgressFn

__all__ = ["ReplayCrowd"]

_SERVED = ["task", "worker", "answer"]


class ReplayCrowd(Platform):
    """Serve the recorded ``answers`` (columns ``task``, ``worker``, ``answer``; a worker's repeated answer to one
    task keeps the last) as a crowd; ``truth``: task -> right answer where known (scores the workers).
    ``offers=False``: posted HITs ignore ``HitBatch.offer`` and take the seeded order (crowddb then sees a platform
    that does not let it choose: an accuracy target without quality-aware assignment, to compare against)."""

    name = "replay"
    #: a worker's recorded answer to a task is served once per session, and a pair in ``HitBatch.exclude`` (an
    #: answer on record from an earlier session over the same database) is not served: no worker answers an item twice
    excludes_workers = True
    #: a HIT offered to workers gives each item the recorded answer of the first offered worker who has one left
    offers_to_workers = True

    def __init__(self, answers: pd.DataFrame, truth: pd.Series | Mapping[Any, Any] | None = None, *,
                 seed: int | np.random.Generator | None = None, task: str = "task", worker: str = "worker",
                 answer: str = "answer", task_column: str | None = None, offers: bool = True) -> None:
        answer_columns(answers, {"task": task, "worker": worker, "answer": answer}, "the recorded answers")
        if len(answers) == 0:
            raise EmptyInputError("the recorded answer set is empty: there is nothing to replay")
        frame = answers[[task, worker, answer]].set_axis(_SERVED, axis=1)
        nulls = frame.isna().sum()
        if nulls.any():
            raise ArgumentError(f"recorded answers hold NULLs ({dict(nulls[nulls > 0])}); drop those rows first")
        frame = frame.drop_duplicates(["task", "worker"], keep="last").reset_index(drop=True)
        self._task_codes, self._tasks = pd.factorize(frame["task"])
        self._worker_codes, self._workers = pd.factorize(frame["worker"])
        self._tasks, self._workers = pd.Index(self._tasks), pd.Index(self._workers)
        self._answers = frame["answer"].to_numpy(dtype=object)
        self.truth: pd.Series | None = None
        if truth is not None:
            t = truth if isinstance(truth, pd.Series) else pd.Series(truth)
            if t.index.has_duplicates:
                raise ArgumentError("truth names a task twice; give one right answer per task")
            self.truth = t
        self.task_column = task_column
        if not isinstance(offers, (bool, np.bool_)):
            raise ArgumentError(f"offers must be True or False, got {offers!r}")
        self.offers_to_workers = bool(offers)
        self._worker_text: pd.Series | None = None  # text -> worker code, as crowddb names workers (lazily)
        self._pending: dict[str, HitBatch] = {}
        self._collected: dict[str, int] = {}  # hit_id -> index into _parts (what its collection served)
        self._parts: list[Collected] = []
        self.reset(seed)

    # ------------------------------------------------------------ the session

    def reset(self, seed: int | np.random.Generator | None = None) -> None:
        """Start a new session: nothing served, the serving order drawn again from ``seed``."""
        rng = make_rng(seed)
        order = np.lexsort((rng.random(len(self._answers)), self._task_codes))  # per task, a seeded order
        self._order = order
        self._rec_task = self._task_codes[order]
        self._start = np.searchsorted(self._rec_task, np.arange(len(self._tasks) + 1))
        self._served = np.zeros(len(order), bool)  # over the ordered records
        # (task, worker) -> ordered position: one record per pair, so the index is unique
        self._by_key = pd.Index(self._rec_task.astype(np.int64) * len(self._workers) + self._worker_codes[order])
        self._log: list[np.ndarray] = []  # served records (ordered positions), in serving order
        self._pending.clear()
        self._collected.clear()
        self._parts = []

    @property
    def tasks(self) -> pd.Index:
        """Every recorded task."""
        return self._tasks

    def n_recorded(self) -> pd.Series:
        """Recorded answers per task."""
        return pd.Series(np.diff(self._start), index=self._tasks, name="recorded")

    def remaining(self) -> pd.Series:
        """Answers per task not yet served in this session."""
        left = np.bincount(self._rec_task[~self._served], minlength=len(self._tasks))
        return pd.Series(left, index=self._tasks, name="remaining")

    def served(self) -> pd.DataFrame:
        """Everything served in this session, in serving order: task, worker, answer."""
        pos = np.concatenate(self._log) if self._log else np.empty(0, np.int64)
        return self._frame(pos)

    def _frame(self, pos: np.ndarray) -> pd.DataFrame:
        rec = self._order[pos]
        return pd.DataFrame({"task": self._tasks.take(self._task_codes[rec]),
                             "worker": self._workers.take(self._worker_codes[rec]), "answer": self._answers[rec]})

    def _task_positions(self, tasks: Any) -> np.ndarray:
        idx = pd.Index(np.atleast_1d(np.asarray(list(tasks) if not np.isscalar(tasks) else [tasks], dtype=object)))
        pos = self._tasks.get_indexer(idx)
        if (pos < 0).any():
            raise ArgumentError(f"tasks {list(idx[pos < 0][:5])!r} are not in the recorded answer set; ask only "
                                "about recorded tasks (ReplayCrowd.tasks)")
        return pos

    def ask(self, tasks: Sequence[Any], n: int = 1) -> pd.DataFrame:
        """For each task (a task listed twice is asked twice), the next ``n`` recorded answers in the seeded order
        from workers not yet served on it; a task with fewer left gives what is left. Returns task, worker, answer."""
        if not (isinstance(n, (int, np.integer)) and n >= 1):
            raise ArgumentError(f"n must be a positive integer, got {n!r}")
        pos = self._task_positions(tasks)
        return self._frame(self._take(np.bincount(pos, minlength=len(self._tasks)) * int(n)))

    def _take(self, want: np.ndarray, blocked: np.ndarray | None = None) -> np.ndarray:
        """Serve, per task code, the next ``want[task]`` open records in the seeded order (fewer where fewer are
        left), skipping those ``blocked`` (a mask over the ordered records); returns their ordered positions,
        ascending (so grouped by task, in the seeded order within each)."""
        open_ = ~self._served & (want[self._rec_task] > 0)
        if blocked is not None:
            open_ &= ~blocked
        before = np.concatenate(([0], np.cumsum(open_)[:-1]))  # open records before each one
        rank = before - before[self._start[self._rec_task]]  # ... within its task
        take = np.flatnonzero(open_ & (rank < want[self._rec_task]))
        self._served[take] = True
        self._log.append(take)
        return take

    def available(self, tasks: Sequence[Any] | None = None) -> pd.DataFrame:
        """The (task, worker) pairs recorded and not yet served (of ``tasks``, or all): whom a policy may name."""
        open_ = ~self._served
        if tasks is not None:
            keep = np.zeros(len(self._tasks), bool)
            keep[self._task_positions(tasks)] = True
            open_ &= keep[self._rec_task]
        return self._frame(np.flatnonzero(open_))[["task", "worker"]]

    def answer(self, tasks: Sequence[Any], workers: Sequence[Any]) -> pd.DataFrame:
        """Serve the recorded answers of these (task, worker) pairs, as an assignment policy asked. A pair not
        recorded, already served in this session, or listed twice raises ArgumentError and serves nothing."""
        t = self._task_positions(tasks)
        w = self._workers.get_indexer(pd.Index(np.asarray(list(workers), dtype=object)))
        if len(w) != len(t):
            raise ArgumentError(f"tasks and workers must pair up, got {len(t)} tasks and {len(w)} workers")
        if (w < 0).any():
            raise ArgumentError(f"workers {list(pd.Index(list(workers))[w < 0][:5])!r} are not in the recorded set")
        key = t.astype(np.int64) * len(self._workers) + w
        if len(np.unique(key)) < len(key):
            raise ArgumentError("a (task, worker) pair is listed twice: a worker answers a task at most once")
        pos = self._by_key.get_indexer(key)
        if (pos < 0).any():
            i = int(np.flatnonzero(pos < 0)[0])
            raise ArgumentError(f"worker {self._workers[w[i]]!r} has no recorded answer to task {self._tasks[t[i]]!r}; "
                                "name only pairs from ReplayCrowd.available()")
        if self._served[pos].any():
            i = int(np.flatnonzero(self._served[pos])[0])
            raise ArgumentError(f"worker {self._workers[w[i]]!r} already answered task {self._tasks[t[i]]!r} in this "
                                "session; a worker answers a task once (reset() starts a new session)")
        self._served[pos] = True
        self._log.append(pos)
        return self._frame(pos)

    # ------------------------------------------------------------ the Platform

    def workers(self) -> pd.DataFrame:
        """worker_id, quality: accuracy on the tasks with a known truth (NaN without truth or such tasks)."""
        quality = np.full(len(self._workers), np.nan)
        if self.truth is not None:
            right = self.truth.reindex(self._tasks).to_numpy(dtype=object)[self._task_codes]
            known = ~pd.isna(right)
            hit = np.bincount(self._worker_codes[known], weights=(self._answers[known] == right[known]).astype(float),
                              minlength=len(self._workers))
            n = np.bincount(self._worker_codes[known], minlength=len(self._workers))
            quality = np.divide(hit, n, out=quality, where=n > 0)
        return pd.DataFrame({"worker_id": np.asarray(self._workers, dtype=object), "quality": quality})

    def _column(self, items: pd.DataFrame, published: list[str]) -> str:
        """The column of ``items`` (a HIT batch's, or ``candidates``') that names each item's task."""
        col = self.task_column
        if col is None:
            cols = [c for c in published if c in items.columns]
            col = "task" if "task" in items.columns else (cols[0] if len(cols) == 1 else None)
        if col is None or col not in items.columns:
            raise PlatformError(f"the replayed crowd finds each item's task in a published column; none named "
                                f"{self.task_column or 'task'!r} among {published!r}: pass "
                                "ReplayCrowd(..., task_column=) naming it")
        return col

    def candidates(self, items: pd.DataFrame, published_columns: list[str],
                   exclude: pd.DataFrame | None = None) -> pd.DataFrame:
        """item_id, worker_id: for each item, the workers with a recorded answer to its task not yet served in this
        session (in the seeded order), so an offer crowddb makes among them is kept; a pair in ``exclude`` (an answer
        on record from an earlier session) is left out for every item of that task, as ``collect`` blocks it, and so
        is a worker whose text another recorded worker shares (crowddb names workers as text: an offer to it could
        not be told apart). Two items of one task list the same workers, and only one of them is served per worker."""
        col = self._column(items, published_columns)
        items = items.drop_duplicates("item_id")  # an item's first row names its task, as in collect
        task = self._task_positions(items[col].to_numpy(dtype=object))
        open_pos = np.flatnonzero(~self._served)  # ascending: grouped by task, in the seeded order within each
        first = np.searchsorted(self._rec_task[open_pos], np.arange(len(self._tasks) + 1))
        n = (first[1:] - first[:-1])[task]
        item = np.repeat(np.arange(len(items)), n)
        # the k-th open record of each item's task: its task's first open record + k
        pos = open_pos[np.repeat(first[task], n) + np.arange(len(item)) - np.repeat(np.cumsum(n) - n, n)]
        worker = self._worker_codes[self._order[pos]]
        keep = np.zeros(len(self._workers), bool)
        keep[self._by_text().to_numpy()] = True
        keep = keep[worker]
        if exclude is not None and len(exclude):
            at = pd.Index(items["item_id"]).get_indexer(exclude["item_id"])
            w = self._codes(exclude["worker_id"])
            ok = (at >= 0) & (w >= 0)
            blocked = task[at[ok]].astype(np.int64) * len(self._workers) + w[ok]
            keep &= ~np.isin(task[item].astype(np.int64) * len(self._workers) + worker, blocked)
        return pd.DataFrame({"item_id": items["item_id"].to_numpy()[item[keep]],
                             "worker_id": np.asarray(self._workers, dtype=object)[worker[keep]]})

    def publish(self, batch: HitBatch, *, knowledge: KnowledgeBase | None = None) -> None:
        col = self._column(batch.items, batch.published_columns)
        self._task_positions(pd.unique(batch.items[col]))  # unknown tasks are refused before anything is posted
        for hit_id in batch.hits["hit_id"]:  # idempotent on hit ids
            if hit_id not in self._pending and hit_id not in self._collected:
                self._pending[hit_id] = batch

    def known(self, hit_ids: list[str]) -> set[str]:
        return {h for h in hit_ids if h in self._pending or h in self._collected}

    def collect(self, hit_ids: list[str], *, progress: ProgressFn | None = None,
                timeout: float | None = None) -> Collected:  # answers at once: never waits
        missing = [h for h in hit_ids if h not in self._pending and h not in self._collected]
        if missing:
            raise UnknownHITError(f"HITs never published here: {missing[:5]}")
        wanted = list(dict.fromkeys(hit_ids))
        fresh: dict[int, tuple[HitBatch, list[str]]] = {}
        for hit_id in wanted:
            if hit_id in self._pending:
                batch = self._pending[hit_id]
                fresh.setdefault(id(batch), (batch, []))[1].append(hit_id)
        for batch, ids in fresh.values():  # one vectorized step per published batch
            self._collect_batch(batch, ids)
        parts = [self._parts[i] for i in sorted({self._collected[h] for h in wanted})]
        if not parts:  # nothing asked for
            return Collected(pd.DataFrame(columns=["assignment_id", "hit_id", "worker_id"]),
                             pd.DataFrame(columns=["assignment_id", "hit_id", "item_no", "worker_id", "answer"]))
        assignments = pd.concat([p.assignments for p in parts], ignore_index=True)
        answers = pd.concat([p.answers for p in parts], ignore_index=True)
        # collected again: the same rows (nothing is served twice), in the order the HITs were asked for
        at = pd.Index(wanted)
        assignments = assignments[assignments["hit_id"].isin(at)]
        answers = answers[answers["hit_id"].isin(at)]
        assignments = assignments.iloc[np.argsort(at.get_indexer(assignments["hit_id"]), kind="stable")]
        answers = answers.iloc[np.argsort(at.get_indexer(answers["hit_id"]), kind="stable")]
        if progress is not None:
            progress(len(hit_ids))
        return Collected(assignments.reset_index(drop=True), answers.reset_index(drop=True))

    def _codes(self, workers: pd.Series) -> np.ndarray:
        """Worker codes of the workers crowddb names (as text, the way it stores them); -1 for a worker not in the
        record, or whose text another recorded worker shares (1 and "1": it cannot tell them apart)."""
        return self._by_text().reindex(workers.astype(str).to_numpy()).fillna(-1).to_numpy(np.int64)

    def _by_text(self) -> pd.Series:
        """Worker text -> worker code, of the workers whose text no other recorded worker shares."""
        if self._worker_text is None:
            text = pd.Series(np.arange(len(self._workers)), index=self._workers.astype(str))
            self._worker_text = text[~text.index.duplicated(keep=False)]
        return self._worker_text

    def _collect_batch(self, batch: HitBatch, ids: list[str]) -> None:
        """Serve every assignment of the HITs ``ids`` of one batch at once: per item, the HIT's offered workers in
        order (each answer the recorded one of the first offered worker who has one left for that item), then the
        seeded order for the slots still open; pairs in ``batch.exclude`` are never served."""
        col = self._column(batch.items, batch.published_columns)
        items = batch.items[batch.items["hit_id"].isin(ids)].drop_duplicates(["hit_id", "item_no"])
        hit_of = items["hit_id"].to_numpy(dtype=object)
        hits = batch.hits.drop_duplicates("hit_id")
        need = hits["assignments"].to_numpy(np.int64)[pd.Index(hits["hit_id"]).get_indexer(hit_of)]
        task = self._task_positions(items[col].to_numpy(dtype=object)).astype(np.int64)
        n_workers = len(self._workers)
        blocked = np.zeros(len(self._served), bool)
        if batch.exclude is not None and len(batch.exclude):
            # an answer on record (an earlier session over this database) blocks its (task, worker) for every item of
            # that task here: the record holds one answer per pair
            ex = batch.exclude
            at = pd.MultiIndex.from_arrays([items["hit_id"], items["item_no"]]).get_indexer(
                pd.MultiIndex.from_arrays([ex["hit_id"], ex["item_no"]]))
            w = self._codes(ex["worker_id"])
            ok = (at >= 0) & (w >= 0)
            pos = self._by_key.get_indexer(task[at[ok]] * n_workers + w[ok])
            blocked[pos[pos >= 0]] = True
        got = np.zeros(len(items), np.int64)  # answers served per item so far
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (item, ordered position, slot)
        offer = batch.offer if self.offers_to_workers else None
        if offer is not None and len(offer):
            offer = offer[offer["hit_id"].isin(ids)]
            rank = offer.groupby("hit_id", sort=False).cumcount().to_numpy()
            codes = self._codes(offer["worker_id"])
            offer_hit = offer["hit_id"].to_numpy(dtype=object)
            for r in range(int(rank.max()) + 1 if len(offer) else 0):  # a HIT's few offered workers, in order
                at = pd.Index(offer_hit[rank == r]).get_indexer(hit_of)
                w = np.where(at >= 0, codes[rank == r][at], -1)
                cand = np.flatnonzero((w >= 0) & (got < need))
                pos = self._by_key.get_indexer(task[cand] * n_workers + w[cand])
                ok = pos >= 0
                ok[ok] = ~self._served[pos[ok]] & ~blocked[pos[ok]]
                pos, first = np.unique(pos[ok], return_index=True)  # two items of one task: one record, one item
                cand = cand[ok][first]
                self._served[pos] = True
                self._log.append(pos)
                got[cand] += 1
                parts.append((cand, pos, got[cand]))
        # the slots still open: the seeded order, the needs in task order (the HIT's items in order within a task)
        # meeting the served records in task order
        left = need - got
        item = np.repeat(np.arange(len(items)), left)
        slot = got[item] + 1 + np.arange(len(item)) - np.repeat(np.cumsum(left) - left, left)
        by_task = np.argsort(task[item], kind="stable")
        item, slot = item[by_task], slot[by_task]
        t = task[item]
        take = self._take(np.bincount(t, minlength=len(self._tasks)), blocked)
        rank_in_task = np.arange(len(t)) - np.searchsorted(t, t)
        keep = rank_in_task < np.bincount(self._rec_task[take], minlength=len(self._tasks))[t]
        parts.append((item[keep], take, slot[keep]))
        item, pos, slot = (np.concatenate(p) for p in zip(*parts))
        rec = self._order[pos]
        hit = hit_of[item]
        answers = pd.DataFrame({"assignment_id": (pd.Series(hit, dtype=object) + "-A"
                                                  + pd.Series(slot).astype(str)).to_numpy(),
                                "hit_id": hit, "item_no": items["item_no"].to_numpy()[item],
                                "worker_id": np.asarray(self._workers, dtype=object)[self._worker_codes[rec]],
                                "answer": self._answers[rec]})
        order = np.lexsort((answers["item_no"].to_numpy(), slot, pd.Index(ids).get_indexer(hit)))
        answers = answers.iloc[order].reset_index(drop=True)
        # an assignment is named after the worker of its first item (the record has no HITs; see the module)
        assignments = answers.drop_duplicates("assignment_id")[["assignment_id", "hit_id", "worker_id"]]
        self._parts.append(Collected(assignments.reset_index(drop=True), answers))
        for hit_id in ids:
            del self._pending[hit_id]
            self._collected[hit_id] = len(self._parts) - 1
