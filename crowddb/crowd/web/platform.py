"""WebCrowd: real people answer the HITs on crowddb's own web page.

``publish`` posts the HITs to the market (an SQLite file beside the database: ``bind``), starts the page server in a
background thread unless one already serves the same market on the port (``crowddb serve`` in another process), and
announces the requester page and the worker links once. ``collect`` polls the market until every assignment is in, or
stops after ``timeout`` seconds with ``AnswersOutstandingError``: the HITs stay posted, and running the same query
again later collects them without buying anything twice.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable

import pandas as pd

from ...errors import AnswersOutstandingError, ArgumentError, PlatformError, UnknownHITError
from ..knowledge import KnowledgeBase
from ..platform import Collected, HitBatch, Platform, ProgressFn
from . import report
from .app import STUDY_PARAMS, create_app
from .market import Market
from .server import ServerHandle, serve_in_thread, url_of


class WebCrowd(Platform):
    """People on the HIT web page served at http://host:port.

    ``market``: the market's SQLite file (default: beside the database, set by ``bind``; a temporary file for an
    in-memory database). ``workers``: worker links created up front (more with ``add_worker()`` or the study link).
    ``lease``: seconds a worker holds a taken assignment. ``poll``: seconds between looks at the market while
    collecting. ``timeout``: seconds ``collect`` waits by default (None: until all answers are in).
    ``gold_min``/``gold_accuracy``: a worker with at least ``gold_min`` gold answers below this accuracy is blocked.
    ``completion_code`` (default: a random one kept in the market) and ``completion_url`` (``{code}`` is replaced):
    the end of a study participant's visit. ``study_params``: the URL parameter names of participant, study and
    session id. ``serve``: start the page server in this process when none answers for this market. ``announce``:
    how the requester page and worker links are told (default ``print``)."""

    #: a HIT of an accuracy target's later round is never given to a worker who answered one of its items before
    excludes_workers = True
    offers_to_workers = True  # the market gives a HIT built for a worker to that worker first (``Market.take``)

    name = "web"
    shows_tradeoff = True  # the requester page plots the query's k trade-off before it runs

    def __init__(self, port: int = 8040, host: str = "127.0.0.1", market: str | os.PathLike | None = None,
                 workers: int = 5, lease: float = 900.0, poll: float = 0.5, timeout: float | None = None,
                 gold_min: int = 3, gold_accuracy: float = 0.7, completion_code: str | None = None,
                 completion_url: str | None = None, study_params: Iterable[str] = STUDY_PARAMS, serve: bool = True,
                 announce: Callable[[str], None] | None = print) -> None:
        if workers < 0:
            raise ArgumentError("workers must be zero or more")
        if poll <= 0 or lease <= 0:
            raise ArgumentError("poll and lease must be positive numbers of seconds")
        if timeout is not None and timeout < 0:
            raise ArgumentError("timeout must be zero or more seconds")
        study_params = tuple(study_params)
        if len(study_params) != 3 or not all(isinstance(p, str) and p and "," not in p for p in study_params):
            raise ArgumentError("study_params names three URL parameters: participant id, study id, session id")
        self.port, self.host = int(port), host
        self._explicit = os.fspath(market) if market is not None else None
        self._path = self._explicit
        self.n_links, self.lease, self.poll, self.timeout = int(workers), float(lease), float(poll), timeout
        self.gold_min, self.gold_accuracy = int(gold_min), float(gold_accuracy)
        self.completion_code, self.completion_url, self.study_params = completion_code, completion_url, study_params
        self.serve, self.announce = serve, announce
        self.extra_panels: Callable[[], Iterable[str]] | None = None  # requester page panels (HTML-safe SVG)
        self._market: Market | None = None
        self._server: ServerHandle | None = None
        self._url: str | None = None
        self._announced = False
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._lock = threading.RLock()
        self._requester_tokens: dict[str, str] = {}  # market path -> the clear token this crowd made (never stored)

    # -- where the market lives --------------------------------------------------------------------------------

    def bind(self, database_path: str | None) -> None:
        """Keep the market beside the database file (``{database_path}.market.sqlite``); a temporary file for an
        in-memory database. An explicit ``market`` path given to the constructor wins."""
        if self._explicit is not None:
            return
        if database_path in (None, "", ":memory:") or str(database_path).startswith(":memory:"):
            path = None
        else:
            path = f"{os.fspath(database_path)}.market.sqlite"
        with self._lock:
            if self._market is not None and (path is None or path == self._market.path):
                return
            if self._market is not None:
                self.close()
            self._path = path

    @property
    def market(self) -> Market:
        with self._lock:
            if self._market is None:
                path = self._path
                if path is None:
                    self._tmp = tempfile.TemporaryDirectory(prefix="crowddb-market-")
                    path = os.path.join(self._tmp.name, "market.sqlite")
                market = Market(path, lease=self.lease, gold_min=self.gold_min, gold_accuracy=self.gold_accuracy)
                if self.completion_code:
                    market.set_setting("completion_code", str(self.completion_code))
                if self.completion_url:
                    market.set_setting("completion_url", str(self.completion_url))
                market.set_setting("study_params", ",".join(self.study_params))
                for _ in range(self.n_links - len(market.link_tokens())):
                    market.add_worker()
                if market.requester_token is not None:
                    self._requester_tokens[market.path] = market.requester_token
                self._market = market
            return self._market

    # -- the page server ---------------------------------------------------------------------------------------

    def app(self):
        """The ASGI app over this crowd's market."""
        return create_app(self.market, study_params=self.study_params,
                          extra_panels=lambda: list(self.extra_panels() if self.extra_panels else []))

    def _serving_elsewhere(self) -> bool:
        """A server answers /healthz on host:port for this very market (e.g. ``crowddb serve``)."""
        if self.port == 0:
            return False
        try:  # stdlib, not httpx: the 'web' extra does not need an HTTP client
            with urllib.request.urlopen(f"{url_of(self.host, self.port)}/healthz", timeout=2.0) as reply:
                market_id = reply.headers.get("x-market-id")
        except urllib.error.HTTPError:
            market_id = None
        except (OSError, ValueError):
            return False
        if market_id == self.market.market_id:
            return True
        raise PlatformError(f"another server answers on {url_of(self.host, self.port)}, not for this market "
                            f"({self.market.path}): choose another port")

    def start(self) -> str:
        """Make sure the page is served; returns its base URL."""
        with self._lock:
            if self._url is not None and (self._server is None or self._server.running):
                return self._url
            if self._serving_elsewhere() or not self.serve:
                self._url = url_of(self.host, self.port)
            else:
                try:
                    self._server = serve_in_thread(self.app(), self.host, self.port)
                except OSError as failed:
                    where = url_of(self.host, self.port)
                    raise PlatformError(f"cannot serve the HIT page on {where}: {failed}") from failed
                self._url = self._server.url
            return self._url

    @property
    def url(self) -> str:
        """The page's base URL (starts the server when it is not running)."""
        return self._url or self.start()

    def _requester_token(self) -> str:
        """The requester page's token in clear: the one this crowd made with the market, else a new one (the market
        file keeps only its SHA-256, so a token made elsewhere cannot be shown again; the old link stops working)."""
        market = self.market
        token = self._requester_tokens.get(market.path)
        if token is None:
            token = self._requester_tokens[market.path] = market.new_requester_token()
        return token

    @property
    def requester_url(self) -> str:
        """The requester page (a new token when this crowd did not make the market's: see ``_requester_token``)."""
        return f"{self.url}/r/{self._requester_token()}"

    def new_requester_link(self) -> str:
        """A new requester token (a link that leaked): the old requester link stops working. Returns the new link."""
        self._requester_tokens[self.market.path] = self.market.new_requester_token()
        return self.requester_url

    @property
    def study_url(self) -> str:
        pid, study, session = self.study_params
        return f"{self.url}/study?{pid}={{{pid}}}&{study}={{{study}}}&{session}={{{session}}}"

    def worker_links(self) -> list[str]:
        """The links of the workers not from a marketplace (one per person you hand them to)."""
        return [f"{self.url}/w/{token}" for token in self.market.link_tokens().values()]

    def add_worker(self) -> str:
        """A new worker; returns its link."""
        _, token = self.market.add_worker()
        return f"{self.url}/w/{token}"

    def announcement(self, base: str | None = None) -> str:
        """What the requester is told: the requester page, the worker links and the study link, under ``base``
        (default: this crowd's page, started if need be). The requester token is stored hashed: a crowd that did not
        make the market announces a new one, and the previous requester link stops working."""
        base = base or self.url
        pid, study, session = self.study_params
        lines = [f"HIT page: requester page {base}/r/{self._requester_token()}", "worker links:"]
        lines += [f"  {base}/w/{token}" for token in self.market.link_tokens().values()]
        lines.append(f"study link (marketplaces fill in the ids): "
                     f"{base}/study?{pid}={{{pid}}}&{study}={{{study}}}&{session}={{{session}}}")
        return "\n".join(lines)

    def _tell(self) -> None:
        if self._announced or self.announce is None:
            return
        self._announced = True
        self.announce(self.announcement())

    # -- the Platform interface --------------------------------------------------------------------------------

    def publish(self, batch: HitBatch, *, knowledge: KnowledgeBase | None = None) -> None:
        self.market.post(batch)
        self.start()
        self._tell()
        need = int(batch.hits["assignments"].max()) if len(batch.hits) else 0
        have = len(self.market.tokens())
        if need > have and self.announce is not None:  # a HIT is answered by as many different people
            self.announce(f"each HIT needs {need} different people and {have} have links: add_worker() or the study "
                          f"link brings more")

    def known(self, hit_ids: list[str]) -> set[str]:
        return self.market.known(hit_ids)

    def collect(self, hit_ids: list[str], *, progress: ProgressFn | None = None,
                timeout: float | None = None) -> Collected:
        market = self.market
        hit_ids = [str(h) for h in hit_ids]
        unknown = sorted(set(hit_ids) - market.known(hit_ids))
        if unknown:
            raise UnknownHITError(f"HITs never posted on this page's market ({market.path}): {unknown[:5]}")
        if self.serve:
            self.start()  # a rerun in a new session collects HITs posted earlier: people need the page
        limit = timeout if timeout is not None else self.timeout
        started = time.monotonic()
        reported = 0
        while True:
            done = market.done_hits(hit_ids)
            if progress is not None and done > reported:
                progress(done - reported)
                reported = done
            submitted, total = market.progress(hit_ids)
            if submitted >= total:
                return market.collected(hit_ids)
            waited = time.monotonic() - started
            if limit is not None and waited >= limit:
                out = total - submitted
                raise AnswersOutstandingError(
                    f"{out} of {total} assignments are still out after {limit:g} s; the HITs stay published: run "
                    f"the same query again later to collect them without buying anything twice",
                    outstanding=out, total=total)
            time.sleep(self.poll if limit is None else max(0.0, min(self.poll, limit - waited)))

    def finished(self, hit_ids: list[str]) -> set[str]:
        """The HITs among ``hit_ids`` whose assignments are all in: crowddb collects them when a session opens the
        database, answered while no session was open."""
        return set(self.market.finished(hit_ids))

    def show_tradeoff(self, query: str, tradeoff: pd.DataFrame) -> None:
        """Put the current query's k-anonymity trade-off (``CrowdDB.tradeoff``: one row per k) on the requester
        page; kept in the market, so a ``crowddb serve`` process shows it too."""
        report.save_tradeoff(self.market, query, tradeoff)

    def workers(self) -> pd.DataFrame:
        """worker_id, quality (accuracy on gold items; NaN without any), blocked (stopped by gold questions),
        marketplace_id (the participant id of a worker who came through the study link, else None)."""
        frame = self.market.workers()
        return frame.rename(columns={"participant_id": "marketplace_id"})[
            ["worker_id", "quality", "blocked", "marketplace_id"]]

    def close(self) -> None:
        """Stop the page server this process runs and close the market."""
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None
            self._url = None
            if self._market is not None:
                self._market.close()
                self._market = None
            self._announced = False
