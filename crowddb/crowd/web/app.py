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
"""

from __future__ import annotations

import functools
import hmac
import html
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import quote, urlsplit

import jinja2
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from .. import payments
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

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).with_name("templates"))),
                          autoescape=True, undefined=jinja2.StrictUndefined)
_env.filters["money"] = lambda v: f"${float(v):,.2f}"


def _render(name: str, status: int = 200, **context) -> HTMLResponse:
    return HTMLResponse(_env.get_template(name).render(**context), status_code=status)


def _error(status: int, message: str) -> HTMLResponse:
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


def create_app(market: Market, *, secret: str | None = None, study_params: Iterable[str] | None = None,
               completion_url: str | None = None, extra_panels: Callable[[], Iterable[str]] | None = None
               ) -> Starlette:
    """The ASGI app over ``market``.

    ``secret``: the requester token the requester page accepts (default: the market's own). ``study_params``: the
    names of the participant id, study id and session id URL parameters (default Prolific's; else the market's
    setting 'study_params'). ``completion_url``: where a study participant goes at the end, ``{code}`` replaced by
    the completion code (default: the market's setting 'completion_url'; none: the code is only shown).
    ``extra_panels``: a callable returning HTML-safe SVG/HTML strings shown on the requester page."""

    def params() -> tuple[str, str, str]:
        if study_params is not None:
            return tuple(study_params)
        stored = market.setting("study_params")
        return tuple(stored.split(",")) if stored else STUDY_PARAMS

    def completion_link() -> str | None:
        url = completion_url or market.setting("completion_url")
        if not url:
            return None
        code = quote(market.completion_code, safe="")
        return url.replace("{code}", code) if "{code}" in url else url

    def requester_ok(token: str) -> bool:
        if secret is not None:
            return hmac.compare_digest(token.encode(), secret.encode())
        return market.requester_ok(token)  # the market keeps only the token's SHA-256

    @functools.lru_cache(maxsize=512)
    def posted(hit_id: str) -> tuple[dict, Markup]:
        """A HIT as posted and its items' HTML as a fresh form shows them: a HIT never changes once posted, so
        each is read and rendered once (rendering the items is most of a page's cost; bench/web.py)."""
        hit = market.hit(hit_id)
        return hit, Markup(_env.get_template("hit_items.html").render(hit=hit, problems={}, given={}))

    def form_page(token: str, assignment: dict, status: int = 200, problems: dict[int, str] | None = None,
                  given: dict[int, str] | None = None) -> HTMLResponse:
        hit, items_html = posted(assignment["hit_id"])
        worker = market.worker(token)
        return _render("hit.html", status, token=token, assignment=assignment, hit=hit, worker=worker,
                       problems=problems or {}, given=given or {},
                       items_html=None if problems or given else items_html)

    def done_page(token: str) -> HTMLResponse:
        worker = market.worker(token)
        code = market.completion_code if worker["participant_id"] and worker["submitted"] else None
        return _render("nohit.html", token=token, worker=worker, code=code, completion=completion_link())

    def worker_page(token: str) -> Response:
        try:
            assignment = market.take(token)
        except UnknownToken:
            return _error(404, "This page does not exist.")
        if assignment is None:
            return done_page(token)
        return form_page(token, assignment)

    async def worker_get(request: Request) -> Response:
        return await run_in_threadpool(worker_page, request.path_params["token"])

    def submit(token: str, assignment_id: str, form: dict[str, str]) -> Response:
        csrf = form.get("csrf", "")
        answers: dict[int, str] = {}
        for key, value in form.items():
            if key.startswith("answer-") and key[7:].isdigit():
                answers[int(key[7:])] = value
        try:
            market.submit(token, assignment_id, csrf, answers)
        except InvalidAnswers as problem:
            assignment = market.assignment(token, assignment_id)
            return form_page(token, assignment, 400, problem.problems, {k: v.strip() for k, v in answers.items()})
        except MarketError as refused:
            return _refused(refused, token)
        return RedirectResponse(f"/w/{token}/thanks/{quote(assignment_id, safe='')}", status_code=303)

    async def worker_post(request: Request) -> Response:
        if not _same_origin(request):
            return _error(403, "This form was sent from another site.")
        token, assignment_id = request.path_params["token"], request.path_params["assignment_id"]
        async with request.form(max_files=0, max_fields=5000) as form:
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
        return await run_in_threadpool(submit, token, assignment_id, fields)

    def thanks(token: str, assignment_id: str) -> Response:
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
        link = completion_link() if study else None
        return _render("thanks.html", token=token, earned=hit["reward"], worker=worker, more=more,
                       code=market.completion_code if study else None, completion=link,
                       refresh=link if (study and link and not more) else None)

    async def thanks_get(request: Request) -> Response:
        return await run_in_threadpool(thanks, request.path_params["token"], request.path_params["assignment_id"])

    def study(query: dict[str, str]) -> Response:
        pid_name, study_name, session_name = params()
        pid = (query.get(pid_name) or "").strip()
        if not pid or len(pid) > 200:
            return _error(400, f"This link needs your participant id (the URL parameter {pid_name}).")
        _, token = market.worker_for_participant(pid, query.get(study_name), query.get(session_name))
        return RedirectResponse(f"/w/{token}", status_code=303)

    async def study_get(request: Request) -> Response:
        return await run_in_threadpool(study, dict(request.query_params))

    def requester(token: str) -> Response:
        if not requester_ok(token):
            return _error(404, "This page does not exist.")
        runs = market.runs()
        for run in runs:
            run["workers"] = market.run_workers(run["run_id"])
        times = market.answer_times()
        agreement = market.agreement()
        quality = market.worker_quality().rename(columns={"quality": "agreement"})
        tradeoff = market.setting("tradeoff")
        panels = [Markup(p) for p in (extra_panels() if extra_panels else [])]
        return _render("requester.html", token=token, runs=runs, arrivals=Markup(arrivals_svg(times)),
                       agreement=Markup(agreement_svg(agreement)),
                       quality=Markup(agreement_svg(quality, "Worker quality (Dawid-Skene weight, TRUTH_DISCOVER's "
                                                              "sources)")),
                       tradeoff=Markup(tradeoff_svg(json.loads(tradeoff))) if tradeoff else None, panels=panels,
                       links=market.tokens())

    async def requester_get(request: Request) -> Response:
        return await run_in_threadpool(requester, request.path_params["token"])

    def payments(token: str, run: str | None) -> Response:
        if not requester_ok(token):
            return _error(404, "This page does not exist.")
        try:
            run_id = int(run) if run not in (None, "") else None
        except ValueError:
            return _error(400, "run must be a number")
        return PlainTextResponse(payments_csv(market, run_id), media_type="text/csv",
                                 headers={"content-disposition": "attachment; filename=payments.csv"})

    async def payments_get(request: Request) -> Response:
        return await run_in_threadpool(payments, request.path_params["token"], request.query_params.get("run"))

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok", headers={"x-market-id": market_id})

    market_id = market.market_id
    routes = [
        Route("/healthz", healthz),
        Route("/w/{token}", worker_get, methods=["GET"]),
        Route("/w/{token}/a/{assignment_id}", worker_post, methods=["POST"]),
        Route("/w/{token}/thanks/{assignment_id}", thanks_get, methods=["GET"]),
        Route("/study", study_get, methods=["GET"]),
        Route("/r/{token}", requester_get, methods=["GET"]),
        Route("/r/{token}/payments.csv", payments_get, methods=["GET"]),
    ]

    async def not_found(request: Request, exc) -> Response:
        return _error(getattr(exc, "status_code", 404), "This page does not exist.")

    async def market_error(request: Request, exc: MarketError) -> Response:
        return _error(exc.status, str(exc))

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found, MarketError: market_error})
    app.add_middleware(_SecurityHeaders)
    app.state.market = market
    return app


def payments_csv(market: Market, run_id: int | None) -> str:
    """What each worker earned on this page (in run ``run_id``, or all runs) as the payments CSV `crowddb payments`
    prints too (``crowddb.crowd.payments``: participant_id,amount,worker_id,assignments)."""
    return payments.payments_csv(market.earnings(run_id))


def arrivals_svg(times: list[float], width: int = 560, height: int = 200) -> str:
    """Answers arriving over time: the cumulative count of submitted assignments, as an inline SVG line."""
    title = "Submitted assignments over time"
    if not times:
        return _empty_svg(title, "no answers yet", width)
    left, bottom, top, right = 48, 30, 24, 12
    t0, t1 = times[0], times[-1]
    span = max(t1 - t0, 1e-9)
    n = len(times)
    xs = [left + (t - t0) / span * (width - left - right) if t1 > t0 else left for t in times]
    ys = [height - bottom - (i + 1) / n * (height - bottom - top) for i in range(n)]
    points = f"{left},{height - bottom} " + " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))
    seconds = t1 - t0
    span_text = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="{title}: {n} in {span_text}"><title>{title}</title>'
            f'<text x="{left}" y="16" font-size="13">{title}</text>'
            f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#444"/>'
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#444"/>'
            f'<polyline fill="none" stroke="#1f5fa8" stroke-width="2" points="{points}"/>'
            f'<text x="{left - 6}" y="{top + 4}" font-size="11" text-anchor="end">{n}</text>'
            f'<text x="{left - 6}" y="{height - bottom}" font-size="11" text-anchor="end">0</text>'
            f'<text x="{left}" y="{height - 10}" font-size="11">0</text>'
            f'<text x="{width - right}" y="{height - 10}" font-size="11" text-anchor="end">{span_text}</text>'
            '</svg>')


def agreement_svg(agreement, title: str = "Agreement with the majority, per worker", width: int = 560) -> str:
    """Agreement per worker (share of its answers equal to the item's majority answer; or another share in [0, 1]
    in the ``agreement`` column), as horizontal bars."""
    title = html.escape(title)
    if agreement is None or not len(agreement):
        return _empty_svg(title, "no answers yet", width)
    bar, gap, left, top = 16, 6, 110, 26
    height = top + len(agreement) * (bar + gap) + 10
    scale = width - left - 60
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{title}"><title>{title}</title><text x="4" y="16" font-size="13">{title}</text>')]
    for i, row in enumerate(agreement.itertuples(index=False)):
        y = top + i * (bar + gap)
        share = 0.0 if row.agreement is None or math.isnan(row.agreement) else float(row.agreement)
        name = html.escape(str(row.worker_id))
        parts.append(f'<text x="{left - 6}" y="{y + bar - 4}" font-size="11" text-anchor="end">{name}</text>'
                     f'<rect x="{left}" y="{y}" width="{share * scale:.1f}" height="{bar}" fill="#2e7d4f"/>'
                     f'<text x="{left + share * scale + 4:.1f}" y="{y + bar - 4}" font-size="11">'
                     f'{share:.0%} of {int(row.answers)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def tradeoff_svg(tradeoff: dict, width: int = 560, height: int = 220) -> str:
    """The k-anonymity trade-off of the current query (``CrowdDB.tradeoff``): NCP (information lost) and the crowd
    accuracy bounds across k, as lines over k. ``tradeoff``: {"query": text, "k": [...], "ncp": [...],
    "accuracy_lower": [...], "accuracy_upper": [...], "refused": {k: why}} (NCP in percent, as explain() reports
    it; None where explain() has no figure: a k that cannot be had)."""
    title = "k-anonymity trade-off of the current query"
    ks = [int(k) for k in tradeoff.get("k", [])]
    if not ks:
        return _empty_svg(title, "no crowd query yet", width)
    left, bottom, top, right = 48, 34, 40, 190
    lo_k, hi_k = min(ks), max(ks)
    span = max(hi_k - lo_k, 1)

    def x(k: float) -> float:
        return left + (k - lo_k) / span * (width - left - right)

    def y(v: float) -> float:
        return height - bottom - v * (height - bottom - top)

    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{title}"><title>{title}</title><text x="4" y="16" font-size="13">{title}</text>'
             f'<text x="4" y="30" font-size="11">{html.escape(str(tradeoff.get("query", ""))[:90])}</text>'
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#444"/>'
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#444"/>'
             f'<text x="{left - 6}" y="{top + 4}" font-size="11" text-anchor="end">1</text>'
             f'<text x="{left - 6}" y="{height - bottom}" font-size="11" text-anchor="end">0</text>')]
    for k in ks:
        parts.append(f'<text x="{x(k):.1f}" y="{height - bottom + 14}" font-size="11" text-anchor="middle">{k}</text>')
    parts.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 4}" font-size="11" '
                 'text-anchor="middle">k</text>')
    series = (("ncp", "NCP (share of information lost)", "#b5442a", 100.0),
              ("accuracy_lower", "crowd accuracy, lower bound", "#1f5fa8", 1.0),
              ("accuracy_upper", "crowd accuracy, upper bound", "#6d9ad6", 1.0))
    for i, (key, label, colour, unit) in enumerate(series):
        points = [(x(k), y(float(v) / unit)) for k, v in zip(ks, tradeoff.get(key, [])) if v is not None]
        if points:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                         + " ".join(f"{a:.1f},{b:.1f}" for a, b in points) + '"/>')
            parts.extend(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{colour}"/>' for a, b in points)
        parts.append(f'<rect x="{width - right + 8}" y="{top + i * 18}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{width - right + 22}" y="{top + i * 18 + 9}" font-size="10">{label}</text>')
    refused = sorted(int(k) for k in tradeoff.get("refused", {}))
    if refused:
        parts.append(f'<text x="{width - right + 8}" y="{top + 4 * 18}" font-size="10">not possible at k = '
                     f'{", ".join(map(str, refused))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _empty_svg(title: str, note: str, width: int) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40" role="img" aria-label="{title}">'
            f'<title>{title}</title><text x="4" y="16" font-size="13">{title}: {note}</text></svg>')
