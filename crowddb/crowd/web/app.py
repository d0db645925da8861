"""The HIT web page: a Starlette (ASGI) app over a ``Market``, pages rendered by Jinja2 templates.

Why Starlette + Jinja2 on uvicorn: a small, well-kept ASGI toolkit (routing, forms, test client) without an ORM or an
admin we would not use; Jinja2 autoescapes every value; uvicorn is the reference ASGI server. The market calls
(SQLite, blocking) run in Starlette's thread pool so the event loop keeps serving while a transaction waits.

HTTP contract (the simulated-people driver and the browser tests depend on it):
  GET  /w/{token}                          the worker's current or next assignment as a form, or "No HIT available"
  POST /w/{token}/a/{assignment_id}        csrf + answer-{item_no}: 303 to the thanks page, 400 with id="errors",
                                           403 (forged form, another worker's assignment, foreign Origin), 409
                                           (lease ran out and the slot went to another worker)
  GET  /w/{token}/thanks/{assignment_id}   what was earned; a study participant's completion code
  GET  /study?PROLIFIC_PID=..&STUDY_ID=..&SESSION_ID=..   303 to the participant's worker link
  GET  /r/{requester_token}                progress, money, plots;  GET /r/{token}/payments.csv?run=N
  GET  /healthz                            "ok" (header X-Market-Id: the market file's id)

Completion codes: a worker who came through the study link sees the completion code (and a link to the completion
URL with it) on every thank-you page and on the "No HIT available" page once it has submitted an assignment: it may
stop after any HIT, and is paid per HIT as a bonus (``payments.csv``). When no further HIT is available, the
thank-you page also sends the browser on to the completion URL (meta refresh, 3 s).

Nothing of a row reaches a page except what the market holds: the published strings of the items.

Reading order: the rendering and security helpers; then one ``async`` endpoint per route, each reading what the app
was made with from ``request.app.state`` and handing its market calls to a plain function run in the thread pool;
last ``create_app``, which makes the app, fills ``app.state`` and lists the routes. The requester page's numbers
and charts come from ``report.py``.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import quote, urlsplit

import jinja2
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from . import report
from .market import InvalidAnswers, LeaseLost, Market, MarketError, NotFound, UnknownToken

STUDY_PARAMS = ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID")
CSP = ("default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; script-src 'none'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    # same-origin, not no-referrer: the worker's token (in the URL) never goes to another site, and browsers send
    # a POST's real Origin (under no-referrer Chromium sends "Origin: null", which would hide a foreign origin)
    (b"referrer-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
]

Posted = Callable[[str], tuple[dict, Markup]]  # hit_id -> the HIT and its items' HTML (``_posted``, cached per app)

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).with_name("templates"))),
                          autoescape=True, undefined=jinja2.StrictUndefined)
_env.filters["money"] = lambda v: f"${float(v):,.2f}"


def _render(name: str, status: int = 200, **context) -> HTMLResponse:
    """The template ``name`` filled with ``context``, as an HTML response."""
    return HTMLResponse(_env.get_template(name).render(**context), status_code=status)


def _error(status: int, message: str) -> HTMLResponse:
    """The error page: the status's title and ``message``."""
    titles = {400: "Bad request", 403: "Not allowed", 404: "Not found", 409: "Too late"}
    return _render("error.html", status, title=titles.get(status, "Error"), message=message)


class _SecurityHeaders:
    """Pure ASGI middleware: the security headers on every response."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [
                    (k, v) for k, v in SECURITY_HEADERS if k not in names]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _refused(err: MarketError, token: str) -> HTMLResponse:
    """The page for a request the market refused (an unknown token or assignment says no more than that)."""
    if isinstance(err, UnknownToken):
        return _error(404, "This page does not exist.")
    if isinstance(err, NotFound):
        return _error(404, "There is no such assignment.")
    if isinstance(err, LeaseLost):
        return _render("error.html", 409, title="Too late", message=str(err), next_url=f"/w/{token}")
    return _error(err.status, str(err))


def _same_origin(request: Request) -> bool:
    """A POST whose Origin header is present must be our own host. An absent or opaque ("null") origin, which
    privacy settings may cause, is let through: the form token (csrf) is what proves the form came from our page."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True
    parts = urlsplit(origin)
    host = request.headers.get("host", "")
    return bool(parts.scheme in ("http", "https") and parts.netloc and parts.netloc.lower() == host.lower())


# -- what the app was made with ----------------------------------------------------------------------------------------


def _study_params(market: Market, given: tuple[str, ...] | None) -> tuple[str, ...]:
    """The URL parameter names of participant, study and session id: given, else the market's, else Prolific's."""
    if given is not None:
        return given
    stored = market.setting("study_params")
    return tuple(stored.split(",")) if stored else STUDY_PARAMS


def _completion_link(market: Market, completion_url: str | None) -> str | None:
    """Where a study participant goes at the end, the completion code in it; None: the code is only shown."""
    url = completion_url or market.setting("completion_url")
    if not url:
        return None
    code = quote(market.completion_code, safe="")
    return url.replace("{code}", code) if "{code}" in url else url


def _requester_ok(market: Market, secret: str | None, token: str) -> bool:
    """Is ``token`` the requester's: the app's ``secret`` when it was given one, else the market's token?"""
    if secret is not None:
        return hmac.compare_digest(token.encode(), secret.encode())
    return market.requester_ok(token)  # the market keeps only the token's SHA-256


def _posted(market: Market, hit_id: str) -> tuple[dict, Markup]:
    """A HIT as posted and its items' HTML as a fresh form shows them (cached per app by ``create_app``)."""
    hit = market.hit(hit_id)
    return hit, Markup(_env.get_template("hit_items.html").render(hit=hit, problems={}, given={}))


# -- the worker's pages ------------------------------------------------------------------------------------------------


def _form_page(market: Market, posted: Posted, token: str, assignment: dict, status: int = 200,
               problems: dict[int, str] | None = None, given: dict[int, str] | None = None) -> HTMLResponse:
    """The assignment's form; with ``problems``, shown again with the answers ``given`` (not the cached items)."""
    hit, items_html = posted(assignment["hit_id"])
    worker = market.worker(token)
    return _render("hit.html", status, token=token, assignment=assignment, hit=hit, worker=worker,
                   problems=problems or {}, given=given or {},
                   items_html=None if problems or given else items_html)


def _done_page(market: Market, completion_url: str | None, token: str) -> HTMLResponse:
    """The "No HIT available" page, with the completion code once a study participant has submitted an assignment."""
    worker = market.worker(token)
    code = market.completion_code if worker["participant_id"] and worker["submitted"] else None
    return _render("nohit.html", token=token, worker=worker, code=code,
                   completion=_completion_link(market, completion_url))


async def worker_get(request: Request) -> Response:
    """GET /w/{token}: the worker's current or next assignment as a form, or "No HIT available"."""
    state = request.app.state
    return await run_in_threadpool(_worker_page, state.market, state.posted, state.completion_url,
                                   request.path_params["token"])


def _worker_page(market: Market, posted: Posted, completion_url: str | None, token: str) -> Response:
    """What ``worker_get`` shows (takes an assignment: blocking, run in the thread pool)."""
    try:
        assignment = market.take(token)
    except UnknownToken:
        return _error(404, "This page does not exist.")
    if assignment is None:
        return _done_page(market, completion_url, token)
    return _form_page(market, posted, token, assignment)


async def worker_post(request: Request) -> Response:
    """POST /w/{token}/a/{assignment_id}: store the answers and go to the thanks page, or show why not."""
    if not _same_origin(request):
        return _error(403, "This form was sent from another site.")
    token, assignment_id = request.path_params["token"], request.path_params["assignment_id"]
    async with request.form(max_files=0, max_fields=5000) as form:
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
    state = request.app.state
    return await run_in_threadpool(_submit, state.market, state.posted, token, assignment_id, fields)


def _submit(market: Market, posted: Posted, token: str, assignment_id: str, form: dict[str, str]) -> Response:
    """What ``worker_post`` answers: 303 to the thanks page, the form again with the problems (400), a refusal."""
    csrf = form.get("csrf", "")
    answers: dict[int, str] = {}
    for key, value in form.items():
        if key.startswith("answer-") and key[7:].isdigit():
            answers[int(key[7:])] = value
    try:
        market.submit(token, assignment_id, csrf, answers)
    except InvalidAnswers as problem:
        assignment = market.assignment(token, assignment_id)
        given = {k: v.strip() for k, v in answers.items()}
        return _form_page(market, posted, token, assignment, 400, problem.problems, given)
    except MarketError as refused:
        return _refused(refused, token)
    return RedirectResponse(f"/w/{token}/thanks/{quote(assignment_id, safe='')}", status_code=303)


async def thanks_get(request: Request) -> Response:
    """GET /w/{token}/thanks/{assignment_id}: what was earned; a study participant's completion code."""
    state = request.app.state
    return await run_in_threadpool(_thanks_page, state.market, state.completion_url, request.path_params["token"],
                                   request.path_params["assignment_id"])


def _thanks_page(market: Market, completion_url: str | None, token: str, assignment_id: str) -> Response:
    """What ``thanks_get`` shows (back to the form while the assignment is not submitted)."""
    try:
        assignment = market.assignment(token, assignment_id)
        worker = market.worker(token)
    except MarketError as refused:
        return _refused(refused, token)
    if assignment["submitted_at"] is None:
        return RedirectResponse(f"/w/{token}", status_code=303)
    hit = market.hit(assignment["hit_id"])
    more = market.available(token)
    study = bool(worker["participant_id"])
    link = _completion_link(market, completion_url) if study else None
    return _render("thanks.html", token=token, earned=hit["reward"], worker=worker, more=more,
                   code=market.completion_code if study else None, completion=link,
                   refresh=link if (study and link and not more) else None)


async def study_get(request: Request) -> Response:
    """GET /study?PROLIFIC_PID=..&STUDY_ID=..&SESSION_ID=..: 303 to the participant's worker link."""
    state = request.app.state
    return await run_in_threadpool(_study, state.market, state.study_params, dict(request.query_params))


def _study(market: Market, study_params: tuple[str, ...] | None, query: dict[str, str]) -> Response:
    """What ``study_get`` answers (makes the participant's worker on the first visit)."""
    pid_name, study_name, session_name = _study_params(market, study_params)
    pid = (query.get(pid_name) or "").strip()
    if not pid or len(pid) > 200:
        return _error(400, f"This link needs your participant id (the URL parameter {pid_name}).")
    _, token = market.worker_for_participant(pid, query.get(study_name), query.get(session_name))
    return RedirectResponse(f"/w/{token}", status_code=303)


# -- the requester's pages ---------------------------------------------------------------------------------------------


async def requester_get(request: Request) -> Response:
    """GET /r/{requester_token}: progress, money, plots and the worker links."""
    state = request.app.state
    return await run_in_threadpool(_requester_page, state.market, state.secret, state.extra_panels,
                                   request.path_params["token"])


def _requester_page(market: Market, secret: str | None, extra_panels: Callable[[], Iterable[str]] | None,
                    token: str) -> Response:
    """What ``requester_get`` shows (an unknown token: the same 404 as a page that does not exist)."""
    if not _requester_ok(market, secret, token):
        return _error(404, "This page does not exist.")
    runs = report.runs(market)
    for run in runs:
        run["workers"] = report.run_workers(market, run["run_id"])
    times = report.answer_times(market)
    agreement = report.agreement(market)
    quality = report.worker_quality(market).rename(columns={"quality": "agreement"})
    tradeoff = report.saved_tradeoff(market)
    panels = [Markup(p) for p in (extra_panels() if extra_panels else [])]
    return _render("requester.html", token=token, runs=runs, arrivals=Markup(report.arrivals_svg(times)),
                   agreement=Markup(report.agreement_svg(agreement)),
                   quality=Markup(report.agreement_svg(quality, "Worker quality (Dawid-Skene weight, "
                                                                "TRUTH_DISCOVER's sources)")),
                   tradeoff=Markup(report.tradeoff_svg(tradeoff)) if tradeoff else None, panels=panels,
                   links=market.tokens())


async def payments_get(request: Request) -> Response:
    """GET /r/{requester_token}/payments.csv?run=N: what each worker earned (in run N, or all runs), as CSV."""
    state = request.app.state
    return await run_in_threadpool(_payments, state.market, state.secret, request.path_params["token"],
                                   request.query_params.get("run"))


def _payments(market: Market, secret: str | None, token: str, run: str | None) -> Response:
    """What ``payments_get`` answers."""
    if not _requester_ok(market, secret, token):
        return _error(404, "This page does not exist.")
    try:
        run_id = int(run) if run not in (None, "") else None
    except ValueError:
        return _error(400, "run must be a number")
    return PlainTextResponse(report.payments_csv(market, run_id), media_type="text/csv",
                             headers={"content-disposition": "attachment; filename=payments.csv"})


async def healthz(request: Request) -> Response:
    """GET /healthz: "ok", and whose market this is (a platform checks it before serving the market itself)."""
    return PlainTextResponse("ok", headers={"x-market-id": request.app.state.market_id})


async def not_found(request: Request, exc) -> Response:
    """No such route (404) or method (405): the same page as an unknown token."""
    return _error(getattr(exc, "status_code", 404), "This page does not exist.")


async def market_error(request: Request, exc: MarketError) -> Response:
    """A refusal of the market that no page caught: its status and message."""
    return _error(exc.status, str(exc))


# -- the app -----------------------------------------------------------------------------------------------------------


def create_app(market: Market, *, secret: str | None = None, study_params: Iterable[str] | None = None,
               completion_url: str | None = None, extra_panels: Callable[[], Iterable[str]] | None = None
               ) -> Starlette:
    """The ASGI app over ``market``.

    ``secret``: the requester token the requester page accepts (default: the market's own). ``study_params``: the
    names of the participant id, study id and session id URL parameters (default Prolific's; else the market's
    setting 'study_params'). ``completion_url``: where a study participant goes at the end, ``{code}`` replaced by
    the completion code (default: the market's setting 'completion_url'; none: the code is only shown).
    ``extra_panels``: a callable returning HTML-safe SVG/HTML strings shown on the requester page."""
    routes = [
        Route("/healthz", healthz),
        Route("/w/{token}", worker_get, methods=["GET"]),
        Route("/w/{token}/a/{assignment_id}", worker_post, methods=["POST"]),
        Route("/w/{token}/thanks/{assignment_id}", thanks_get, methods=["GET"]),
        Route("/study", study_get, methods=["GET"]),
        Route("/r/{token}", requester_get, methods=["GET"]),
        Route("/r/{token}/payments.csv", payments_get, methods=["GET"]),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(_SecurityHeaders)],
                    exception_handlers={404: not_found, 405: not_found, MarketError: market_error})
    app.state.market = market
    app.state.market_id = market.market_id
    app.state.secret = secret
    app.state.study_params = None if study_params is None else tuple(study_params)
    app.state.completion_url = completion_url  # None: the market's setting, read on each request
    app.state.extra_panels = extra_panels
    # a HIT never changes once posted, so each is read and rendered once per app (rendering the items is most of a
    # page's cost; bench/web.py)
    app.state.posted = functools.lru_cache(maxsize=512)(functools.partial(_posted, market))
    return app
