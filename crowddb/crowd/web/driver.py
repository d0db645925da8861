"""Simulated people on the HIT web page: the simulated crowd playing workers who open their links and submit.

``SimulatedPeople`` drives the page only through HTTP, as a person's browser does: each worker opens its worker link
(``/w/{token}``) or arrives through the study link (``/study?PROLIFIC_PID=..``), reads the form (the question, the
item blocks, the radio values or numeric inputs and the hidden ``csrf`` field), picks answers with its policy,
submits, follows the redirect to the thank-you page and asks for the next HIT, until the page says "No HIT
available" or its steps or time run out. Every request is recorded with its latency and outcome, every submit with
its answers, so a test can compare what the people gave with what the marketplace stored, and ``bench/web.py`` can
report throughput and latency.

Policies (``policy(form, rng) -> {item_no: answer}``): ``crowd_policy`` answers like the simulated crowd (right with
probability ``quality`` where a ``truth(hit_id, item_no)`` is given, else a uniformly drawn choice);
``gold_wrong_policy`` answers every gold item wrongly. The page shows no hit id (a worker needs none): policies that
need it get it from ``hit_of(assignment_id)`` when the driver is given one.

The people run as asyncio tasks, each with its own ``httpx.AsyncClient`` (hundreds of concurrent people on two
cores: threads would spend the time on the GIL); ``run()`` blocks the calling thread until all are done. Layering:
HTTP only, no DuckDB and no marketplace import.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import random
import re
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

import httpx

NO_HIT = "No HIT available"
STUDY_PARAMS = ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID")


# ---------------------------------------------------------------------------------------------------------- parsing
@dataclasses.dataclass
class Item:
    """One question of a HIT as the page shows it: ``kind`` 'choice' (radio buttons: ``choices`` are their values,
    the domain, or the row numbers for a pick-a-row item) or 'number'; ``rows`` the item's published rows as
    {column header: text}."""

    item_no: int
    kind: str = "choice"
    choices: list[str] = dataclasses.field(default_factory=list)
    rows: list[dict[str, str]] = dataclasses.field(default_factory=list)
    checked: str | None = None


@dataclasses.dataclass
class HitForm:
    """A parsed HIT page: where to post, the csrf token, the question and the items (by item number)."""

    action: str
    csrf: str
    assignment_id: str
    question: str
    items: dict[int, Item]
    hit_id: str | None = None
    errors: str = ""
    text: str = ""


@dataclasses.dataclass
class Thanks:
    """A parsed thank-you page."""

    earned: str = ""
    next_url: str | None = None
    completion_code: str | None = None
    redirect: str | None = None


class _PageParser(HTMLParser):
    """Collects what a person looks at on the worker pages (stdlib html.parser: tolerant, no dependency)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.action: str | None = None
        self.form_hit: str | None = None
        self.csrf: str | None = None
        self.items: dict[int, Item] = {}
        self.headers: list[str] = []
        self.ids: dict[str, list[str]] = {}      # text of elements with an id we care about
        self.links: dict[str, str] = {}          # id -> href
        self.meta_refresh: str | None = None
        self.hidden: dict[str, str] = {}
        self._stack: list[tuple[str, int | None, str | None]] = []  # (tag, item_no opened here, id opened here)
        self._item: list[int] = []
        self._id: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._in_head_row = False
        self._row_input = False   # a row holding the answer inputs is no published row
        self._question_tags: list[str] = []
        self.question_candidates: list[str] = []

    _WATCH = frozenset({"question", "errors", "earned", "completion-code", "total", "reward", "no-hit"})
    _VOID = frozenset({"input", "br", "img", "meta", "link", "hr", "col", "area", "base", "source", "wbr"})

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v or "") for k, v in attrs}
        if tag == "meta" and a.get("http-equiv", "").lower() == "refresh":
            m = re.search(r"url\s*=\s*['\"]?([^'\"]+)", a.get("content", ""), re.IGNORECASE)
            self.meta_refresh = m.group(1).strip() if m else None
        if tag == "form" and (a.get("id") == "hit-form" or self.action is None):
            self.action = a.get("action")
            self.form_hit = a.get("data-hit") or a.get("data-hit-id") or self.form_hit
        if tag == "a" and a.get("id"):
            self.links[a["id"]] = a.get("href", "")
        if tag == "input":
            self._input(a)
        if tag in self._VOID:
            return
        opened_item = None
        classes = a.get("class", "").split()
        if "item" in classes and a.get("data-item", "").strip().lstrip("-").isdigit():
            opened_item = int(a["data-item"])
            self.items.setdefault(opened_item, Item(opened_item))
            self._item.append(opened_item)
        opened_id = None
        if a.get("id") in self._WATCH or (a.get("class") and "question" in classes):
            opened_id = a.get("id") if a.get("id") in self._WATCH else "question"
            self.ids.setdefault(opened_id, []).append("")
            self._id.append(opened_id)
        self._stack.append((tag, opened_item, opened_id))
        if tag == "tr":
            self._row = []
            self._in_head_row = False
            self._row_input = False
        elif tag in ("td", "th"):
            self._cell = []
            if tag == "th":
                self._in_head_row = True
        elif tag in ("h1", "h2", "legend"):
            self._question_tags.append(tag)
            self.question_candidates.append("")

    def _input(self, a: dict[str, str]) -> None:
        name, kind = a.get("name", ""), a.get("type", "text").lower()
        self._row_input = True
        if name == "csrf":
            self.csrf = a.get("value", "")
        elif kind == "hidden":
            self.hidden[name] = a.get("value", "")
        m = re.fullmatch(r"answer-(\d+)", name)
        if not m:
            return
        item = self.items.setdefault(int(m.group(1)), Item(int(m.group(1))))
        if kind == "radio":
            item.kind = "choice"
            item.choices.append(a.get("value", ""))
            if "checked" in a:
                item.checked = a.get("value", "")
        elif kind == "number":
            item.kind = "number"
            if a.get("value"):
                item.checked = a["value"]

    def handle_endtag(self, tag: str) -> None:
        if tag in self._VOID:
            return
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._in_head_row:
                self.headers = self._row
            elif self._item and self._row and not self._row_input:
                rows = self.items[self._item[-1]].rows
                rows.append(dict(zip(self.headers, self._row)) if len(self.headers) == len(self._row)
                            else {str(i): v for i, v in enumerate(self._row)})
            self._row = None
        elif tag in ("h1", "h2", "legend") and self._question_tags:
            self._question_tags.pop()
        # close up to the matching open tag (tolerates unclosed <p>, <li>, ...)
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                for _, item, ident in self._stack[i:]:
                    if item is not None and self._item:
                        self._item.pop()
                    if ident is not None and self._id:
                        self._id.pop()
                del self._stack[i:]
                break

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)
        for ident in self._id:
            self.ids[ident][-1] += data
        if self._question_tags:
            self.question_candidates[-1] += data

    def first(self, ident: str) -> str:
        got = self.ids.get(ident)
        return " ".join(got[0].split()) if got else ""


def _clean(text: str) -> str:
    return " ".join(text.split())


def parse_form(page: str) -> HitForm | None:
    """The HIT form of a worker page, or None when the page has none (e.g. "No HIT available")."""
    p = _PageParser()
    p.feed(page)
    p.close()
    if p.action is None or p.csrf is None:
        return None
    m = re.search(r"/a/([^/?#]+)", p.action)
    question = p.first("question") or next((_clean(q) for q in p.question_candidates if "?" in q), "")
    return HitForm(action=p.action, csrf=p.csrf, assignment_id=m.group(1) if m else "", question=question,
                   items=dict(sorted(p.items.items())), hit_id=p.form_hit or p.hidden.get("hit_id"),
                   errors=p.first("errors"), text=_clean(" ".join(p.text)))


_TAG = re.compile(r"<(form|input)\b([^>]*)>", re.IGNORECASE)
_ATTR = re.compile(r"""([\w:-]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?""")


def parse_form_fast(page: str) -> HitForm | None:
    """Only what a submit needs (form action, csrf, each item's radio values or numeric input), read with a regular
    expression over the form's tags: for load tests, where html.parser's full reading costs the load generator more
    than the server spends on the request. No question and no published rows."""
    action = csrf = None
    items: dict[int, Item] = {}
    for tag, body in _TAG.findall(page):
        a = {m[0].lower(): html.unescape(m[1] or m[2] or m[3]) for m in _ATTR.findall(body)}
        if tag.lower() == "form":
            if action is None or a.get("id") == "hit-form":
                action = a.get("action")
            continue
        name = a.get("name", "")
        if name == "csrf":
            csrf = a.get("value", "")
        elif name.startswith("answer-") and name[7:].isdigit():
            item = items.setdefault(int(name[7:]), Item(int(name[7:])))
            if a.get("type", "").lower() == "number":
                item.kind = "number"
            else:
                item.choices.append(a.get("value", ""))
    if action is None or csrf is None:
        return None
    m = re.search(r"/a/([^/?#]+)", action)
    return HitForm(action=action, csrf=csrf, assignment_id=m.group(1) if m else "", question="",
                   items=dict(sorted(items.items())))


def parse_thanks(page: str) -> Thanks:
    p = _PageParser()
    p.feed(page)
    p.close()
    return Thanks(earned=p.first("earned"), next_url=p.links.get("next"),
                  completion_code=p.first("completion-code") or None, redirect=p.meta_refresh)


# --------------------------------------------------------------------------------------------------------- policies
Policy = Callable[[HitForm, random.Random], Mapping[int, str]]


def _wrong(item: Item, right: str, rng: random.Random) -> str:
    if item.kind == "number":
        try:
            return str(float(right) + rng.choice([-1, 1]) * rng.randint(1, 10))
        except ValueError:
            return str(rng.randint(0, 100))
    others = [c for c in item.choices if c != right]
    return rng.choice(others) if others else right


def crowd_policy(quality: float = 0.8, truth: Callable[[str | None, int], Any] | None = None) -> Policy:
    """Answer like the simulated crowd: the true answer (``truth(hit_id, item_no)``, None where unknown) with
    probability ``quality``, else a uniformly drawn wrong one; without a truth, a uniformly drawn choice."""

    def policy(form: HitForm, rng: random.Random) -> dict[int, str]:
        out = {}
        for no, item in form.items.items():
            right = truth(form.hit_id, no) if truth is not None else None
            if right is not None:
                right = str(right)
                out[no] = right if rng.random() < quality else _wrong(item, right, rng)
            elif item.kind == "number" or not item.choices:
                out[no] = str(rng.randint(0, 100))
            else:
                out[no] = rng.choice(item.choices)
        return out

    return policy


def gold_wrong_policy(gold: Mapping[tuple[str, int], Any], otherwise: Policy | None = None) -> Policy:
    """Answer every gold item (``gold[(hit_id, item_no)]`` = its known answer) wrongly; the others by ``otherwise``
    (default: uniformly drawn choices). Needs the hit id: give the driver ``hit_of``."""
    otherwise = otherwise or crowd_policy()

    def policy(form: HitForm, rng: random.Random) -> dict[int, str]:
        out = dict(otherwise(form, rng))
        for no, item in form.items.items():
            if (form.hit_id, no) in gold:
                out[no] = _wrong(item, str(gold[(form.hit_id, no)]), rng)
        return out

    return policy


def fixed_policy(answers: Mapping[tuple[str | None, int], str] | Callable[[HitForm, int], str]) -> Policy:
    """Answers chosen in advance: a mapping (hit_id, item_no) -> answer or a callable (form, item_no) -> answer."""

    def policy(form: HitForm, rng: random.Random) -> dict[int, str]:
        if callable(answers):
            return {no: answers(form, no) for no in form.items}
        return {no: answers[(form.hit_id, no)] for no in form.items}

    return policy


# ---------------------------------------------------------------------------------------------------------- records
@dataclasses.dataclass
class Request:
    """One HTTP request: ``kind`` 'study' | 'page' | 'submit' | 'thanks'; ``outcome`` what the page meant
    ('form', 'no-hit', 'thanked', 'invalid', 'forbidden', 'reclaimed', 'not-found', 'error', ...)."""

    worker: str
    kind: str
    method: str
    path: str
    status: int
    seconds: float
    outcome: str
    at: float


@dataclasses.dataclass
class Submit:
    """One submitted form: the answers sent and what became of them (``outcome`` as in ``Request``)."""

    worker: str
    token: str
    assignment_id: str
    hit_id: str | None
    answers: dict[int, str]
    status: int
    outcome: str
    earned: str = ""
    thanks: Thanks | None = None


@dataclasses.dataclass
class Person:
    """One simulated person: its label, token, marketplace id, and how its session ended."""

    worker: str
    token: str | None = None
    participant_id: str | None = None
    submitted: int = 0
    completion_code: str | None = None
    redirect: str | None = None
    stopped: str = ""


@dataclasses.dataclass
class PeopleRun:
    """What ``SimulatedPeople.run()`` saw: every request, every submit, every person."""

    requests: list[Request]
    submits: list[Submit]
    people: list[Person]
    seconds: float

    def thanked(self) -> list[Submit]:
        return [s for s in self.submits if s.outcome == "thanked"]

    def answers(self) -> list[tuple[str, int, str, str]]:
        """(assignment_id, item_no, worker token, answer) of every thanked submit, sorted."""
        return sorted((s.assignment_id, no, s.token, a) for s in self.thanked() for no, a in s.answers.items())

    def latencies(self, kind: str, ok_only: bool = True) -> list[float]:
        return [r.seconds for r in self.requests if r.kind == kind and (not ok_only or r.outcome != "error")]

    def summary(self) -> dict[str, dict[str, float]]:
        """Per request kind: count, p50 and p99 latency (s)."""
        out = {}
        for kind in sorted({r.kind for r in self.requests}):
            lat = sorted(self.latencies(kind, ok_only=False))
            out[kind] = {"count": len(lat), "p50": percentile(lat, 50), "p99": percentile(lat, 99),
                         "max": lat[-1] if lat else float("nan")}
        return out


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (NaN when empty)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


# ----------------------------------------------------------------------------------------------------------- driver
class SimulatedPeople:
    """People opening HIT pages over HTTP.

    ``base_url``: the server (``http://127.0.0.1:8040``). ``links``: worker links (full URLs or tokens), one person
    each. ``participants``: marketplace ids of people arriving through the study link (``/study`` with
    ``study_params`` names; study and session ids are generated). ``policy``: one policy for all, a list (one per
    person, links first, then participants) or a mapping person label -> policy; default ``crowd_policy()``.
    ``hit_of(assignment_id) -> hit_id`` lets policies use the hit id the page does not show. Each person stops when
    the page says "No HIT available" (after waiting up to ``patience`` s for more work, polling every ``poll`` s),
    after ``max_steps`` submits, or at ``max_seconds`` (the whole run). ``think=(lo, hi)``: seconds a person spends
    on a form before submitting (uniform), like a person reading it. ``ramp``: the people arrive spread evenly over
    this many seconds (0: all at once). ``origin``: the Origin header sent on posts, as a browser does (True: the
    server's own origin; False: none; a string: that one, e.g. a foreign site). ``fast``: read forms with
    ``parse_form_fast`` (load tests: no question, no rows; the thank-you page is then not parsed either)."""

    def __init__(self, base_url: str, links: Sequence[str] = (), *, participants: Sequence[str] = (),
                 policy: Policy | Sequence[Policy] | Mapping[str, Policy] | None = None,
                 hit_of: Callable[[str], str | None] | None = None, study_path: str = "/study",
                 study_params: Sequence[str] = STUDY_PARAMS, study_id: str = "study-1", seed: int = 0,
                 max_steps: int = 10_000, max_seconds: float = 60.0, patience: float = 0.0, poll: float = 0.2,
                 think: tuple[float, float] = (0.0, 0.0), ramp: float = 0.0, origin: str | bool = True,
                 request_timeout: float = 30.0, fast: bool = False) -> None:
        self.base_url = base_url.rstrip("/")
        self.links = [self._link(x) for x in links]
        self.participants = list(participants)
        self.people = [f"link-{i + 1}" for i in range(len(self.links))] + [f"pid-{p}" for p in self.participants]
        self._policy = policy
        self.hit_of = hit_of
        self.study_path, self.study_params, self.study_id = study_path, tuple(study_params), study_id
        self.seed, self.max_steps, self.max_seconds = seed, max_steps, max_seconds
        self.patience, self.poll, self.think, self.ramp, self.origin = patience, poll, think, ramp, origin
        self.request_timeout = request_timeout
        self.fast = fast

    def _link(self, link: str) -> str:
        if link.startswith(("http://", "https://")):
            return link
        return f"{self.base_url}/w/{link.strip('/').split('/')[-1]}"

    def policy_for(self, index: int, label: str) -> Policy:
        p = self._policy
        if p is None:
            return crowd_policy()
        if isinstance(p, Mapping):
            return p.get(label) or crowd_policy()
        if isinstance(p, Sequence):
            return p[index]
        return p

    # -- running
    def run(self) -> PeopleRun:
        """Run every person to the end; blocks until done (at most about ``max_seconds``)."""
        return asyncio.run(self.arun())

    async def arun(self) -> PeopleRun:
        requests: list[Request] = []
        submits: list[Submit] = []
        people = [Person(label) for label in self.people]
        self._tls = ssl.create_default_context() if self.base_url.startswith("https:") else False
        start = time.monotonic()
        deadline = start + self.max_seconds
        tasks = []
        for i, person in enumerate(people):
            rng = random.Random(f"{self.seed}:{person.worker}")
            tasks.append(self._person(i, person, rng, deadline, requests, submits))
        await asyncio.gather(*tasks)
        return PeopleRun(requests, submits, people, time.monotonic() - start)

    async def _get(self, client: httpx.AsyncClient, person: Person, kind: str, url: str,
                   requests: list[Request]) -> httpx.Response | None:
        t0 = time.perf_counter()
        try:
            r = await client.get(url)
        except httpx.HTTPError as e:
            requests.append(Request(person.worker, kind, "GET", _path(url), 0, time.perf_counter() - t0,
                                    f"error: {type(e).__name__}", time.monotonic()))
            return None
        seconds = time.perf_counter() - t0
        requests.append(Request(person.worker, kind, "GET", _path(url), r.status_code, seconds,
                                _outcome(kind, r), time.monotonic()))
        return r

    async def _person(self, index: int, person: Person, rng: random.Random, deadline: float,
                      requests: list[Request], submits: list[Submit]) -> None:
        if self.ramp > 0:
            await asyncio.sleep(self.ramp * index / max(1, len(self.people)))
        # a client (one keep-alive connection) per person, like a browser (one pool of hundreds of connections costs
        # httpx time per request growing with the pool), sharing one TLS context (httpx builds one per client
        # otherwise: 20 ms each, hundreds of them would stall the event loop)
        async with httpx.AsyncClient(base_url=self.base_url, timeout=self.request_timeout, follow_redirects=False,
                                     limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                                     verify=self._tls) as client:
            await self._session(client, index, person, rng, deadline, requests, submits)

    async def _session(self, client: httpx.AsyncClient, index: int, person: Person, rng: random.Random,
                       deadline: float, requests: list[Request], submits: list[Submit]) -> None:
        policy = self.policy_for(index, person.worker)
        if index < len(self.links):
            page_url = self.links[index]
        else:
            pid = self.participants[index - len(self.links)]
            person.participant_id = pid
            names = self.study_params
            query = {names[0]: pid}
            if len(names) > 1:
                query[names[1]] = self.study_id
            if len(names) > 2:
                query[names[2]] = f"session-{pid}"
            r = await self._get(client, person, "study", f"{self.study_path}?{urlencode(query)}", requests)
            if r is None or r.status_code not in (302, 303, 307) or "location" not in r.headers:
                person.stopped = f"study link answered {getattr(r, 'status_code', 'nothing')}"
                return
            page_url = r.headers["location"]
        person.token = urlsplit(page_url).path.rstrip("/").split("/")[-1]
        idle_since = None
        while True:
            if time.monotonic() >= deadline:
                person.stopped = "time"
                return
            if person.submitted >= self.max_steps:
                person.stopped = "steps"
                return
            r = await self._get(client, person, "page", page_url, requests)
            if r is None:
                person.stopped = "error"
                return
            if r.status_code != 200:
                person.stopped = f"page answered {r.status_code}"
                return
            form = None if NO_HIT in r.text else (parse_form_fast if self.fast else parse_form)(r.text)
            if form is None:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since < self.patience:
                    await asyncio.sleep(self.poll)
                    continue
                person.stopped = "no HIT available" if NO_HIT in r.text else "page without a form"
                return
            idle_since = None
            if form.hit_id is None and self.hit_of is not None:
                form.hit_id = self.hit_of(form.assignment_id)
            answers = {int(k): str(v) for k, v in policy(form, rng).items()}
            if self.think[1] > 0:
                await asyncio.sleep(rng.uniform(*self.think))
            sub = await self._submit(client, person, form, answers, requests)
            submits.append(sub)
            if sub.outcome == "thanked":
                person.submitted += 1
                if sub.thanks is not None:
                    person.completion_code = sub.thanks.completion_code or person.completion_code
                    person.redirect = sub.thanks.redirect or person.redirect
            elif sub.outcome == "reclaimed":
                continue  # the lease ran out and the slot went to someone else: ask for the next HIT
            else:
                person.stopped = f"submit {sub.outcome} ({sub.status})"
                return

    async def _submit(self, client: httpx.AsyncClient, person: Person, form: HitForm, answers: dict[int, str],
                      requests: list[Request]) -> Submit:
        data = {"csrf": form.csrf, **{f"answer-{no}": a for no, a in answers.items()}}
        origin = _origin(self.base_url) if self.origin is True else self.origin
        headers = {"origin": origin} if origin else {}
        url = urljoin(self.base_url + "/", form.action)
        t0 = time.perf_counter()
        try:
            r = await client.post(url, data=data, headers=headers)
        except httpx.HTTPError as e:
            requests.append(Request(person.worker, "submit", "POST", _path(url), 0, time.perf_counter() - t0,
                                    f"error: {type(e).__name__}", time.monotonic()))
            return Submit(person.worker, person.token or "", form.assignment_id, form.hit_id, answers, 0, "error")
        seconds = time.perf_counter() - t0
        outcome = _outcome("submit", r)
        requests.append(Request(person.worker, "submit", "POST", _path(url), r.status_code, seconds, outcome,
                                time.monotonic()))
        sub = Submit(person.worker, person.token or "", form.assignment_id, form.hit_id, answers, r.status_code,
                     outcome)
        if outcome == "thanked":
            t = await self._get(client, person, "thanks", r.headers["location"], requests)
            if t is not None and t.status_code == 200 and not self.fast:
                sub.thanks = parse_thanks(t.text)
                sub.earned = sub.thanks.earned
        return sub


def _origin(url: str) -> str:
    s = urlsplit(url)
    return f"{s.scheme}://{s.netloc}"


def _path(url: str) -> str:
    s = urlsplit(url)
    return s.path + (f"?{s.query}" if s.query else "")


def _outcome(kind: str, r: httpx.Response) -> str:
    code = r.status_code
    if kind == "submit":
        return {303: "thanked", 400: "invalid", 403: "forbidden", 404: "not-found", 409: "reclaimed"}.get(
            code, f"http {code}")
    if kind == "study":
        return "worker" if code in (302, 303, 307) else f"http {code}"
    if code == 404:
        return "not-found"
    if code != 200:
        return f"http {code}"
    if kind == "page":
        return "no-hit" if NO_HIT in r.text else "form"
    return "ok"
