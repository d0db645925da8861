"""The embedded simulated crowd: seeded workers of differing quality answering HITs from a knowledge base.

A worker answers from knowledge with probability equal to its quality, otherwise makes an error: a uniformly
drawn wrong answer (a random row for pick-a-row items). Knowledge is the ground truth of the nearest record to
the tuple the worker imagines from the published values (see ``knowledge.py``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .._random import make_rng
from ..errors import ArgumentError, PlatformError, UnknownHITError
from .knowledge import KnowledgeBase
from .platform import Collected, HitBatch, Platform, ProgressFn

_CHUNK = 25  # HITs simulated per vectorized step (the progress bar advances per chunk)


class SimulatedCrowd(Platform):
    """An in-process crowd of ``n_workers`` whose qualities are drawn from Beta(a, b) (default mean 0.8)."""

    name = "simulated"
    needs_knowledge = True  # its workers answer from the input's hidden ground-truth column
    excludes_workers = True  # each item of a batch with ``exclude`` is answered by workers not excluded for it
    offers_to_workers = True  # a HIT in ``offer`` is answered first by its worker (who always comes, here)

    def __init__(self, n_workers: int = 100, quality: tuple[float, float] = (8.0, 2.0),
                 seed: int | np.random.Generator | None = None,
                 qualities: np.ndarray | None = None) -> None:
        if qualities is None:
            if n_workers < 1:
                raise ArgumentError("the simulated crowd needs at least one worker")
            rng = make_rng(seed)
            qualities = rng.beta(quality[0], quality[1], size=n_workers)
            self._rng = rng
        else:
            qualities = np.asarray(qualities, dtype=float)
            if qualities.ndim != 1 or len(qualities) == 0 or ((qualities < 0) | (qualities > 1)).any():
                raise ArgumentError("worker qualities must be a non-empty list of probabilities in [0, 1]")
            self._rng = make_rng(seed)
        self._quality = qualities
        self._ids = np.array([f"W{i + 1:04d}" for i in range(len(qualities))], dtype=object)
        self._pending: dict[str, tuple[HitBatch, KnowledgeBase | None]] = {}
        self._collected: list[Collected] = []      # what each collect() returned (a HIT collected again: the same)
        self._collected_in: dict[str, int] = {}    # hit_id -> index into _collected

    def workers(self) -> pd.DataFrame:
        return pd.DataFrame({"worker_id": self._ids, "quality": self._quality})

    def publish(self, batch: HitBatch, *, knowledge: KnowledgeBase | None = None) -> None:
        if knowledge is None:
            raise PlatformError("the simulated crowd needs a ground-truth column to answer from: declare one with "
                                "role 'ground_truth' on the input table")
        too_many = batch.hits["assignments"] > len(self._ids)
        if too_many.any():
            raise PlatformError(f"a HIT asks for {int(batch.hits['assignments'].max())} assignments but the "
                                f"simulated crowd has {len(self._ids)} workers")
        for hit_id in batch.hits["hit_id"]:  # idempotent: a HIT id posted before is not posted again
            if hit_id not in self._pending and hit_id not in self._collected_in:
                self._pending[hit_id] = (batch, knowledge)

    def known(self, hit_ids: list[str]) -> set[str]:
        return {h for h in hit_ids if h in self._pending or h in self._collected_in}

    def collect(self, hit_ids: list[str], *, progress: ProgressFn | None = None,
                timeout: float | None = None) -> Collected:  # answers at once: never waits
        missing = [h for h in hit_ids if h not in self._pending and h not in self._collected_in]
        if missing:
            raise UnknownHITError(f"HITs never published here: {missing[:5]}")
        again = [h for h in hit_ids if h in self._collected_in]
        fresh = [h for h in hit_ids if h not in self._collected_in]
        got = self._collect_fresh(fresh, progress)
        if again:  # collected before: the same assignments and answers (nothing is answered or paid twice)
            parts = [got] if len(got.assignments) else []
            for index in sorted({self._collected_in[h] for h in again}):
                old = self._collected[index]
                parts.append(Collected(old.assignments[old.assignments["hit_id"].isin(again)],
                                       old.answers[old.answers["hit_id"].isin(again)]))
            got = Collected(pd.concat([p.assignments for p in parts], ignore_index=True),
                            pd.concat([p.answers for p in parts], ignore_index=True))
            if progress is not None:
                progress(len(again))
        return got

    def _collect_fresh(self, hit_ids: list[str], progress: ProgressFn | None) -> Collected:
        batches: dict[int, tuple[HitBatch, KnowledgeBase | None, list[str]]] = {}
        for hit_id in hit_ids:
            batch, knowledge = self._pending[hit_id]
            batches.setdefault(id(batch), (batch, knowledge, []))[2].append(hit_id)
        assignments, answers = [], []
        for batch, knowledge, ids in batches.values():
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start:start + _CHUNK]
                got = self._answer(batch, knowledge, chunk)
                assignments.append(got.assignments)
                answers.append(got.answers)
                if progress is not None:
                    progress(len(chunk))
        if not assignments:
            return Collected(pd.DataFrame(columns=["assignment_id", "hit_id", "worker_id"]),
                             pd.DataFrame(columns=["assignment_id", "hit_id", "item_no", "worker_id", "answer"]))
        got = Collected(pd.concat(assignments, ignore_index=True), pd.concat(answers, ignore_index=True))
        self._collected.append(got)
        for hit_id in hit_ids:
            del self._pending[hit_id]
            self._collected_in[hit_id] = len(self._collected) - 1
        return got

    def _answer(self, batch: HitBatch, knowledge: KnowledgeBase, hit_ids: list[str]) -> Collected:
        """Simulate every assignment of ``hit_ids`` at once."""
        rng = self._rng
        hits = batch.hits.set_index("hit_id").loc[hit_ids]
        n_hits, n_workers = len(hits), len(self._ids)
        per_hit = hits["assignments"].to_numpy(np.int64)
        width = int(per_hit.max())
        # distinct workers per HIT: the first `a` of a random permutation of the pool
        chosen = np.argsort(rng.random((n_hits, n_workers)), axis=1)[:, :width]
        hit_of, slot = np.nonzero(np.arange(width)[None, :] < per_hit[:, None])
        worker = chosen[hit_of, slot]
        hit_ids_arr = np.asarray(hit_ids, dtype=object)
        assignment_ids = pd.Series(hit_ids_arr[hit_of]) + "-A" + pd.Series(slot + 1).astype(str)
        assignments = pd.DataFrame({"assignment_id": assignment_ids, "hit_id": hit_ids_arr[hit_of],
                                    "worker_id": self._ids[worker]})
        # (hit, slot) -> worker quality, as a (n_hits, width) table
        quality = np.full((n_hits, width), np.nan)
        quality[hit_of, slot] = self._quality[worker]

        items = batch.items[batch.items["hit_id"].isin(hit_ids)]
        hit_pos = pd.Index(hit_ids).get_indexer(items["hit_id"])
        truth = knowledge.sample(items[knowledge.columns], width, rng)  # (rows, width)
        domain = hits["domain"].iloc[0]
        exclude, offer = batch.exclude, batch.offer
        if exclude is not None and len(exclude) and domain is not None:
            exclude = exclude[exclude["hit_id"].isin(hit_ids)]
        if offer is not None and len(offer) and domain is not None:
            offer = offer[offer["hit_id"].isin(hit_ids)]
        if domain is not None and any(f is not None and len(f) for f in (exclude, offer)):
            return self._answer_excluding(items, hit_pos, hit_ids_arr, per_hit, truth, np.asarray(domain, dtype=object),
                                          exclude, assignments, rng, offer)
        if domain is not None:
            picked = self._pick_answer(truth, np.asarray(domain, dtype=object), quality[hit_pos], rng)
            item_no = items["item_no"].to_numpy()
            rows_hit = hit_pos
        else:
            target = hits["target"].to_numpy(dtype=object)
            picked, item_no, rows_hit = self._pick_row(items, truth, target[hit_pos], quality[hit_pos], hit_pos, rng)
        mask = np.arange(width)[None, :] < per_hit[rows_hit][:, None]
        r, s = np.nonzero(mask)
        answers = pd.DataFrame({
            "assignment_id": (pd.Series(hit_ids_arr[rows_hit[r]]) + "-A" + pd.Series(s + 1).astype(str)).to_numpy(),
            "hit_id": hit_ids_arr[rows_hit[r]],
            "item_no": item_no[r],
            "worker_id": self._ids[chosen[rows_hit[r], s]],
            "answer": picked[r, s],
        })
        return Collected(assignments, answers)

    def _answer_excluding(self, items: pd.DataFrame, hit_pos: np.ndarray, hit_ids: np.ndarray, per_hit: np.ndarray,
                          truth: np.ndarray, domain: np.ndarray, exclude: pd.DataFrame | None,
                          assignments: pd.DataFrame, rng: np.random.Generator,
                          offer: pd.DataFrame | None = None) -> Collected:
        """Choose-one-of-M items, each answered in every slot by a distinct worker not excluded for it (issue 28:
        a later round asks only workers who have not answered the item), the worker a HIT is offered to first. One
        slot of a HIT is then answered by several workers, one per item (as ReplayCrowd serves recorded answers): the
        assignment names the worker of its HIT's first item, each answer its own."""
        n_rows, n_workers = len(items), len(self._ids)
        width = truth.shape[1]
        score = rng.random((n_rows, n_workers))
        ids = pd.Index(self._ids)
        if offer is not None and len(offer):  # the HIT's worker sorts first on each of its items
            by_hit = pd.Series(ids.get_indexer(offer["worker_id"]), index=offer["hit_id"].to_numpy())
            w = by_hit.reindex(items["hit_id"].to_numpy()).fillna(-1).to_numpy(np.int64)
            r = np.flatnonzero(w >= 0)
            score[r, w[r]] = -1.0
        keep = np.zeros(0, bool)
        r = w = np.zeros(0, np.int64)
        if exclude is not None and len(exclude):
            rows = pd.MultiIndex.from_arrays([items["hit_id"], items["item_no"]])
            r = rows.get_indexer(pd.MultiIndex.from_arrays([exclude["hit_id"], exclude["item_no"]]))
            w = ids.get_indexer(exclude["worker_id"])
            keep = (r >= 0) & (w >= 0)
            score[r[keep], w[keep]] = np.inf  # an excluded worker sorts last
        chosen = np.argsort(score, axis=1)[:, :width]  # (rows, width): distinct workers per item
        need = per_hit[hit_pos]
        eligible = n_workers - np.bincount(r[keep], minlength=n_rows)
        if (eligible < need).any():
            raise PlatformError(f"an item needs {int(need.max())} more answers but only {int(eligible.min())} of the "
                                f"simulated crowd's {n_workers} workers have not answered it yet")
        quality = self._quality[chosen]
        picked = self._pick_answer(truth, domain, quality, rng)
        rr, ss = np.nonzero(np.arange(width)[None, :] < need[:, None])
        answers = pd.DataFrame({
            "assignment_id": (pd.Series(hit_ids[hit_pos[rr]]) + "-A" + pd.Series(ss + 1).astype(str)).to_numpy(),
            "hit_id": hit_ids[hit_pos[rr]],
            "item_no": items["item_no"].to_numpy()[rr],
            "worker_id": self._ids[chosen[rr, ss]],
            "answer": picked[rr, ss],
        })
        hits_seen, first_row = np.unique(hit_pos, return_index=True)
        slot = assignments["assignment_id"].str.rsplit("-A", n=1).str[1].astype(np.int64).to_numpy() - 1
        at = first_row[np.searchsorted(hits_seen, pd.Index(hit_ids).get_indexer(assignments["hit_id"]))]
        return Collected(assignments.assign(worker_id=self._ids[chosen[at, slot]]), answers)

    @staticmethod
    def _pick_answer(truth: np.ndarray, domain: np.ndarray, quality: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
        """Choose-one-of-M: right with probability = quality, else a uniformly drawn wrong answer."""
        m = len(domain)
        code = pd.Index(domain).get_indexer(truth.ravel()).reshape(truth.shape)
        knows = rng.random(truth.shape) < quality
        unknown = code < 0  # the world's truth is not among the offered answers: the worker can only guess
        guess = rng.integers(0, m, size=truth.shape)
        wrong = rng.integers(0, max(m - 1, 1), size=truth.shape)
        wrong = np.where(wrong >= code, wrong + 1, wrong) if m > 1 else np.zeros_like(wrong)
        out = np.where(knows, code, wrong)
        out = np.where(unknown, guess, out)
        return domain[out]

    @staticmethod
    def _pick_row(items: pd.DataFrame, truth: np.ndarray, target: np.ndarray, quality: np.ndarray,
                  hit_pos: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pick-a-row: a knowing worker picks at random among rows whose truth is the target, else any row."""
        segment = pd.factorize(pd.MultiIndex.from_arrays([items["hit_id"], items["item_no"]]))[0]
        match = truth == target[:, None]
        knows = rng.random(truth.shape) < quality
        first_row = np.concatenate([[True], segment[1:] != segment[:-1]])
        starts = np.flatnonzero(first_row)
        knows_item = knows[starts]  # one coin per (item, slot), taken at the item's first row
        knows_row = knows_item[np.cumsum(first_row) - 1]
        score = rng.random(truth.shape) + np.where(knows_row & match, 1.0, 0.0)
        n_items = len(starts)
        best = np.empty((n_items, truth.shape[1]), dtype=object)
        row_no = items["row_no"].to_numpy()
        for s in range(truth.shape[1]):  # one vectorized segment-argmax per assignment slot (at most a handful)
            idx = np.lexsort((score[:, s], segment))
            last = np.concatenate([idx[np.flatnonzero(np.diff(segment[idx]))], idx[-1:]])
            best[:, s] = row_no[last].astype(str)
        item_no = items["item_no"].to_numpy()[starts]
        return best, item_no, hit_pos[starts]
