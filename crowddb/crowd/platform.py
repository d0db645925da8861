"""The crowd platform interface: publish a batch of HITs, collect their assignments (columnar, Arrow-friendly)."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable

import pandas as pd

from .knowledge import KnowledgeBase


@dataclasses.dataclass
class HitBatch:
    """HITs to publish, in columns.

    ``hits``: hit_id, run_id (the crowddb run that posts it), question, domain (tuple of answers, or None when the answer names one of the item's rows),
    assignments, reward (per assignment), fee_rate.
    ``items``: hit_id, item_no, row_no, then the published columns as the crowd sees them (strings). A tuple
    operator's item has one row (row_no 1); a group operator's item has one row per candidate.
    """

    hits: pd.DataFrame
    items: pd.DataFrame
    published_columns: list[str]
    # gold questions: hit_id, item_no, answer of the items whose answer is known (copies of items published
    # anyway, shown exactly like the others); the platform keeps these answers to itself and scores its workers
    gold: pd.DataFrame | None = None
    # issue 28: hit_id, item_no, worker_id: workers who must not answer that item (they answered it in an earlier
    # round); honoured by a platform that ``excludes_workers``, else a worker may answer an item again
    exclude: pd.DataFrame | None = None
    # issue 28: hit_id, worker_id: the worker a HIT was built for (quality-aware assignment: the uncertain items
    # where that worker's answer helps most); honoured by a platform that ``offers_to_workers``
    offer: pd.DataFrame | None = None

    @property
    def n_assignments(self) -> int:
        return int(self.hits["assignments"].sum()) if len(self.hits) else 0


@dataclasses.dataclass
class Collected:
    """What came back: ``assignments`` (assignment_id, hit_id, worker_id) and ``answers``
    (assignment_id, hit_id, item_no, worker_id, answer): an answer is a domain value or, for group items, a row_no."""

    assignments: pd.DataFrame
    answers: pd.DataFrame


ProgressFn = Callable[[int], None]


class Platform(abc.ABC):
    """Where HITs go. A real marketplace implements publish/collect; the simulated crowd answers in-process.

    Besides the four required methods a platform may have optional capabilities, declared here with the defaults of
    a platform that has none (as datasette declares its hooks): ``needs_knowledge``, ``bind``, ``finished``,
    ``shows_tradeoff`` with ``show_tradeoff``, ``offers_to_workers`` with ``candidates``. crowddb calls them
    unconditionally; override what yours offers."""

    name: str = "platform"
    #: capability: answers only from a ground-truth column of the input (``knowledge``), as a simulated crowd does;
    #: crowddb refuses, before anything is recorded or published, a purchase whose input has none
    needs_knowledge: bool = False
    #: capability: a requester page that shows a query's k trade-off before it runs (``show_tradeoff``); crowddb
    #: estimates the trade-off only for a platform that shows it
    shows_tradeoff: bool = False
    #: capability: chooses, per item, a worker who is not in ``HitBatch.exclude`` for it (an accuracy target's later
    #: rounds ask only workers who have not answered the item); a platform without it gets the rounds as they are
    excludes_workers: bool = False
    #: capability: lets crowddb choose who answers: a HIT named in ``HitBatch.offer`` goes to its worker first (the
    #: simulated crowd: that worker answers it; the web page: that worker gets it when asking for work, and others
    #: only when nothing else is open). crowddb then builds an accuracy target's later rounds per worker, from the
    #: uncertain items where each worker's answer helps most (QASCA); a platform without it gets rounds of uncertain
    #: items in HITs anyone may take
    offers_to_workers: bool = False

    def bind(self, database_path: str | None) -> None:
        """Called once when a session opens ``database_path`` (None: an in-memory database), before anything is
        published: a platform that keeps state beside the database (the web crowd's marketplace file) opens it here.
        Default: nothing to keep."""

    def finished(self, hit_ids: list[str]) -> set[str] | None:
        """The HITs among ``hit_ids`` whose assignments are all in (people answered while no session was open):
        crowddb collects them when a session opens the database. None (the default): this platform cannot tell, and
        the reruns of their queries collect them."""
        return None

    def show_tradeoff(self, query: str, tradeoff: pd.DataFrame) -> None:
        """Show ``query``'s k trade-off (``CrowdDB.tradeoff``: one row per k and operator) on the requester page;
        called only when ``shows_tradeoff`` is True. Default: no page."""

    def candidates(self, items: pd.DataFrame, published_columns: list[str],
                   exclude: pd.DataFrame | None = None) -> pd.DataFrame | None:
        """Who can answer which of ``items`` (item_id, row_no, then the ``published_columns`` as the crowd sees them,
        as in ``HitBatch.items`` before they are put in HITs), leaving out the pairs in ``exclude`` (item_id,
        worker_id, as ``HitBatch.exclude``): item_id, worker_id rows, each worker named as ``workers()`` names it.
        Called only when ``offers_to_workers`` is True: crowddb then offers an item only to a worker listed for it
        (a replayed record: the workers who answered that task and were not served yet), so an offer is not made
        where it cannot be kept. None (the default): anyone may answer anything."""
        return None

    @abc.abstractmethod
    def workers(self) -> pd.DataFrame:
        """Known workers: worker_id, quality (NaN where the platform cannot know it)."""

    @abc.abstractmethod
    def publish(self, batch: HitBatch, *, knowledge: KnowledgeBase | None = None) -> None:
        """Post the HITs. ``knowledge`` is the world a simulated crowd answers from; a real platform ignores it.

        Must be idempotent on hit ids: a HIT id the platform already has is not posted again (crowddb records HITs
        as 'publishing' before calling this, and a run that died in between may retry). Real marketplaces offer
        this as a client token / unique request id per HIT: use the hit id."""

    def known(self, hit_ids: list[str]) -> set[str]:
        """The ids among ``hit_ids`` this platform has accepted (posted, whether collected or not).

        crowddb asks this about HITs it recorded as 'publishing' (write-ahead) whose publication it never saw
        confirmed: known ones are collected, unknown ones were never posted and are bought normally. The default
        assumes all were posted; collecting then tells (an unknown HIT raises ``UnknownHITError`` and is recorded
        lost and bought again). A platform that can tell should override this."""
        return set(hit_ids)

    @abc.abstractmethod
    def collect(self, hit_ids: list[str], *, progress: ProgressFn | None = None,
                timeout: float | None = None) -> Collected:
        """Block until every assignment of these HITs is submitted; call ``progress(n_hits_done)`` as HITs finish.
        ``timeout`` (seconds; None: the platform's own default): a platform whose people are slow raises
        ``AnswersOutstandingError`` when it runs out, saying how many assignments are still out (a platform that
        answers at once, like the simulated crowd, never waits).
        Collecting a HIT again returns the same assignments (a run may die after collecting and before recording).

        HITs the platform does not know (any longer) raise ``UnknownHITError``: crowddb then records them as lost and
        buys their answers again. Any other failure leaves them recorded as published, to be collected on a rerun."""
