"""A recorded real answer set served as if its workers were answering now (issue 28): how answer-buying policies
are measured honestly on real people's answers, and how a user tries a policy on their own past data.

Each recorded (task, worker, answer) is served at most once per session, so no worker answers a task twice: asked
for a task, the crowd hands out the recorded answer of a worker who has not answered it yet in this session, in a
seeded order (:meth:`ReplayCrowd.ask`), or the answer of the worker an assignment policy names
(:meth:`ReplayCrowd.answer`, with :meth:`ReplayCrowd.available` listing the pairs it may name). A task whose
recorded answers are all served has no more to give: asking for more returns fewer rows, never an invented answer.

As a ``Platform`` (HITs posted by crowddb): each published item names its task in ``task_column``; every assignment
slot of a HIT gets, for each item, the next recorded answer in the seeded order. What a recorded set cannot give: a
HIT of several items answered by one person (the record has no HITs), so the answers of one assignment may come from
different recorded workers (each answer carries its own worker_id; the assignment's worker_id is that of its first
item); pick-a-row (group) items are served only if the recorded answers are row numbers.
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
    task keeps the last) as a crowd; ``truth``: task -> right answer where known (scores the workers)."""

    name = "replay"
    #: a worker's recorded answer to a task is served once per session, so no worker answers an item twice: what an
    #: accuracy target's ``HitBatch.exclude`` asks for holds without reading it
    excludes_workers = True

    def __init__(self, answers: pd.DataFrame, truth: pd.Series | Mapping[Any, Any] | None = None, *,
                 seed: int | np.random.Generator | None = None, task: str = "task", worker: str = "worker",
                 answer: str = "answer", task_column: str | None = None) -> None:
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
        self._pending: dict[str, HitBatch] = {}
        self._collected: dict[str, Collected] = {}
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
        self._log: list[np.ndarray] = []  # served records (ordered positions), in serving order
        self._pending.clear()
        self._collected.clear()

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
        want = np.bincount(pos, minlength=len(self._tasks)) * int(n)
        open_ = ~self._served & (want[self._rec_task] > 0)
        before = np.concatenate(([0], np.cumsum(open_)[:-1]))  # open records before each one
        rank = before - before[self._start[self._rec_task]]  # ... within its task
        take = np.flatnonzero(open_ & (rank < want[self._rec_task]))
        self._served[take] = True
        self._log.append(take)
        return self._frame(take)

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
        rec_key = (self._rec_task.astype(np.int64) * len(self._workers) + self._worker_codes[self._order])
        by_key = pd.Index(rec_key)  # unique: one record per (task, worker)
        pos = by_key.get_indexer(key)
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

    def _column(self, batch: HitBatch) -> str:
        col = self.task_column
        if col is None:
            cols = [c for c in batch.published_columns if c in batch.items.columns]
            col = "task" if "task" in batch.items.columns else (cols[0] if len(cols) == 1 else None)
        if col is None or col not in batch.items.columns:
            raise PlatformError(f"the replayed crowd finds each item's task in a published column; none named "
                                f"{self.task_column or 'task'!r} among {batch.published_columns!r}: pass "
                                "ReplayCrowd(..., task_column=) naming it")
        return col

    def publish(self, batch: HitBatch, *, knowledge: KnowledgeBase | None = None) -> None:
        col = self._column(batch)
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
        for hit_id in hit_ids:
            if hit_id in self._pending:
                self._collect_one(hit_id)
        got = [self._collected[h] for h in hit_ids]
        if progress is not None:
            progress(len(hit_ids))
        return Collected(pd.concat([g.assignments for g in got], ignore_index=True),
                         pd.concat([g.answers for g in got], ignore_index=True))

    def _collect_one(self, hit_id: str) -> None:
        batch = self._pending.pop(hit_id)
        hit = batch.hits.loc[batch.hits["hit_id"] == hit_id].iloc[0]
        items = batch.items.loc[batch.items["hit_id"] == hit_id].drop_duplicates("item_no")
        n = int(hit["assignments"])
        tasks = items[self._column(batch)].to_numpy(dtype=object)
        served = self.ask(tasks, n)  # every (task, slot): the next recorded answer of a new worker
        slot = served.groupby("task", sort=False).cumcount().to_numpy() + 1
        item_of = pd.Series(items["item_no"].to_numpy(), index=pd.Index(tasks)).drop_duplicates()
        hit_ids = np.full(len(served), hit_id, dtype=object)
        aid = pd.Series(hit_ids) + "-A" + pd.Series(slot).astype(str)
        answers = pd.DataFrame({"assignment_id": aid.to_numpy(), "hit_id": hit_ids,
                                "item_no": item_of.reindex(served["task"]).to_numpy(),
                                "worker_id": served["worker"].to_numpy(), "answer": served["answer"].to_numpy()})
        answers = answers.sort_values(["assignment_id", "item_no"], kind="stable").reset_index(drop=True)
        assignments = answers.drop_duplicates("assignment_id")[["assignment_id", "hit_id", "worker_id"]]
        self._collected[hit_id] = Collected(assignments.reset_index(drop=True), answers)
