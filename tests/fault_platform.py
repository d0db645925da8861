"""A crowd platform that keeps its HITs on disk and fails, sleeps or dies (SIGKILL) on demand (issue 12's tests).

``DiskCrowd(state_path, faults={...})`` stores in one JSON file (under an exclusive file lock, so threads and
processes can share it) every HIT it accepted with what it shows, every posting request it received (``received``:
a HIT id posted twice shows up twice) and how often each HIT was collected. Its workers answer deterministically
from what an item shows (a function of the published content and the assignment slot), so any run, interrupted or
not, in any process, gets the same answer for the same item: results of an interrupted-then-resumed run can be
compared with an uninterrupted one's.

Faults: ``{point: action}`` with point one of ``publish_before`` (the platform never gets the HITs),
``publish_after`` (it has them; the caller never hears back), ``collect`` (before answers are returned), and
action ``kill`` (SIGKILL this process), ``raise`` (a marketplace error), ``sleep:<seconds>``; ``point@n`` fires on
the n-th call only (1-based).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import pandas as pd

from crowddb.crowd import Collected, Platform
from crowddb.errors import UnknownHITError

_LOCK = threading.Lock()  # fcntl locks are per process: threads of one process also take this one


class MarketplaceDown(RuntimeError):
    """What a failing marketplace raises."""


def _h(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


class DiskCrowd(Platform):
    name = "disk"

    def __init__(self, path: str | Path, n_workers: int = 10, faults: dict[str, str] | None = None) -> None:
        self.path = Path(path)
        self.n_workers = n_workers
        self.faults = dict(faults or {})
        self.calls: dict[str, int] = {}

    # ------------------------------------------------------------------------------------------------ state
    @contextlib.contextmanager
    def state(self):
        """The JSON state under an exclusive lock; written back when the block ends without an error."""
        with _LOCK, open(str(self.path) + ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data = json.loads(self.path.read_text()) if self.path.exists() else {
                    "received": [], "hits": {}, "collected": {}}
                yield data
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(data))
                os.replace(tmp, self.path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def snapshot(self) -> dict:
        with self.state() as data:
            return json.loads(json.dumps(data))

    def _fault(self, point: str) -> None:
        self.calls[point] = self.calls.get(point, 0) + 1
        action = self.faults.get(point) or self.faults.get(f"{point}@{self.calls[point]}")
        if not action:
            return
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # never reached
        if action == "raise":
            raise MarketplaceDown(f"marketplace down at {point}")
        if action.startswith("sleep:"):
            time.sleep(float(action.split(":", 1)[1]))

    # ---------------------------------------------------------------------------------------------- platform
    def workers(self) -> pd.DataFrame:
        return pd.DataFrame({"worker_id": [f"W{i + 1:04d}" for i in range(self.n_workers)],
                             "quality": [float("nan")] * self.n_workers})

    def publish(self, batch, *, knowledge=None) -> None:
        self._fault("publish_before")
        columns = list(batch.published_columns)
        items = batch.items.sort_values(["hit_id", "item_no", "row_no"])
        shown: dict[str, dict[str, list]] = {}
        for (hit_id, item_no), part in items.groupby(["hit_id", "item_no"], sort=False):
            rows = part[columns].astype(str).to_numpy().tolist()
            shown.setdefault(hit_id, {})[str(int(item_no))] = rows
        with self.state() as data:
            for hit in batch.hits.itertuples(index=False):
                data["received"].append(hit.hit_id)
                if hit.hit_id in data["hits"]:
                    continue  # idempotent on hit ids
                data["hits"][hit.hit_id] = {
                    "assignments": int(hit.assignments),
                    "domain": None if hit.domain is None else [str(d) for d in hit.domain],
                    "items": shown.get(hit.hit_id, {})}
        self._fault("publish_after")

    def known(self, hit_ids: list[str]) -> set[str]:
        with self.state() as data:
            return {h for h in hit_ids if h in data["hits"]}

    def collect(self, hit_ids: list[str], *, progress=None) -> Collected:
        self._fault("collect")
        with self.state() as data:
            missing = [h for h in hit_ids if h not in data["hits"]]
            if missing:
                raise UnknownHITError(f"unknown HITs {missing[:5]}")
            assignments, answers = [], []
            for hit_id in hit_ids:
                hit = data["hits"][hit_id]
                data["collected"][hit_id] = data["collected"].get(hit_id, 0) + 1
                for slot in range(hit["assignments"]):
                    aid, worker = f"{hit_id}-A{slot + 1}", f"W{slot + 1:04d}"
                    assignments.append((aid, hit_id, worker))
                    for item_no, rows in hit["items"].items():
                        answers.append((aid, hit_id, int(item_no), worker, self._answer(hit, rows, slot)))
        if progress is not None:
            progress(len(hit_ids))
        return Collected(pd.DataFrame(assignments, columns=["assignment_id", "hit_id", "worker_id"]),
                         pd.DataFrame(answers, columns=["assignment_id", "hit_id", "item_no", "worker_id", "answer"]))

    @staticmethod
    def _answer(hit: dict, rows: list, slot: int) -> str:
        """Four of five workers agree on what the content suggests; the fifth answers its own way."""
        content = json.dumps(rows)
        h = _h(content) if slot % 5 < 4 else _h(f"{content}|{slot}")
        if hit["domain"] is None:
            return str(h % len(rows) + 1)  # pick a row
        return hit["domain"][h % len(hit["domain"])]
