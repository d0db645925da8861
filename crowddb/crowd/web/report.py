"""What the requester page shows of a market: per run its progress and money and each worker's share, the answers
arriving over time, each worker's agreement with the majority and Dawid-Skene weight, the query's k-anonymity
trade-off, the payments CSV, and the inline SVG charts that draw them.

Why apart from ``market.py``: the market holds the rules the page must enforce on every request (HITs, leases,
assignments, submissions, payments); this module only reads the market file for the requester (and keeps there the
trade-off a session leaves for the page), so the rules read without the charts, and a chart cannot change a rule.
Charts are SVG strings written here rather than drawn by a script: the pages allow no script (``script-src 'none'``).
"""

from __future__ import annotations

import html
import json
import math

import pandas as pd

from .. import payments
from .market import Market

# -- the numbers -------------------------------------------------------------------------------------------------------


def runs(market: Market) -> list[dict]:
    """Per run: run_id, hits, asked (assignments), taken, submitted, outstanding, spent and to_come (US$ with
    the fee: submitted and outstanding × reward × (1 + fee_rate))."""
    rows = market.connection().execute("""
        WITH per_hit AS (
            SELECT h.run_id, h.assignments, h.reward, h.fee_rate,
                   count(a.assignment_id) FILTER (WHERE a.submitted_at IS NULL) AS held,
                   count(a.submitted_at) AS submitted
            FROM hits h LEFT JOIN assignments a ON a.hit_id = h.hit_id GROUP BY h.hit_id)
        SELECT run_id, count(*), sum(assignments), sum(held), sum(submitted),
               sum(submitted * reward * (1 + fee_rate)), sum((assignments - submitted) * reward * (1 + fee_rate))
        FROM per_hit GROUP BY run_id ORDER BY run_id""").fetchall()
    return [{"run_id": r[0], "hits": r[1], "asked": r[2], "taken": r[3] + r[4], "held": r[3], "submitted": r[4],
             "outstanding": r[2] - r[4], "spent": round(r[5], 2), "to_come": round(r[6], 2)} for r in rows]


def run_workers(market: Market, run_id: int | None) -> list[dict]:
    """Per worker of a run: worker_id, participant_id, submitted, earned, quality (gold accuracy or None),
    blocked."""
    rows = market.connection().execute(
        "SELECT w.worker_id, w.participant_id, count(a.submitted_at), coalesce(sum(h.reward) FILTER "
        "(WHERE a.submitted_at IS NOT NULL), 0), CASE WHEN w.gold_seen > 0 THEN CAST(w.gold_right AS REAL) / "
        "w.gold_seen END, w.blocked_at IS NOT NULL FROM assignments a JOIN hits h USING (hit_id) "
        "JOIN workers w USING (worker_id) WHERE h.run_id IS :run GROUP BY w.worker_id ORDER BY w.worker_id",
        {"run": run_id}).fetchall()
    return [{"worker_id": r[0], "participant_id": r[1], "submitted": r[2], "earned": round(r[3], 2),
             "quality": r[4], "blocked": bool(r[5])} for r in rows]


def answer_times(market: Market, run_id: int | None = None) -> list[float]:
    """When the submitted assignments came in (seconds since the epoch, ascending)."""
    return [t for (t,) in market.connection().execute(
        "SELECT a.submitted_at FROM assignments a JOIN hits h USING (hit_id) WHERE a.submitted_at IS NOT NULL "
        "AND (:run IS NULL OR h.run_id = :run) ORDER BY a.submitted_at", {"run": run_id})]


def agreement(market: Market, run_id: int | None = None) -> pd.DataFrame:
    """Per worker: the share of its answers equal to the majority answer of the item (a tie counts as
    agreeing with each of the tied answers): worker_id, answers, agreement."""
    rows = market.connection().execute(
        "SELECT a.hit_id, n.item_no, a.worker_id, n.answer FROM assignments a JOIN answers n USING "
        "(assignment_id) JOIN hits h USING (hit_id) WHERE (:run IS NULL OR h.run_id = :run)",
        {"run": run_id}).fetchall()
    frame = pd.DataFrame(rows, columns=["hit_id", "item_no", "worker_id", "answer"])
    if frame.empty:
        return pd.DataFrame({"worker_id": [], "answers": [], "agreement": []})
    counts = frame.groupby(["hit_id", "item_no", "answer"]).size().rename("n").reset_index()
    top = counts.groupby(["hit_id", "item_no"])["n"].transform("max")
    majority = counts[counts["n"] == top][["hit_id", "item_no", "answer"]].assign(agrees=True)
    frame = frame.merge(majority, on=["hit_id", "item_no", "answer"], how="left")
    frame["agrees"] = frame["agrees"].fillna(False).astype(bool)
    out = frame.groupby("worker_id")["agrees"].agg(["size", "mean"]).reset_index()
    return out.rename(columns={"size": "answers", "mean": "agreement"})


def worker_quality(market: Market, run_id: int | None = None) -> pd.DataFrame:
    """Per worker: its weight as Dawid-Skene estimates it from every answer (what ``TRUTH_DISCOVER(...,
    method := 'ds', output := 'sources')`` reports): worker_id, answers, quality. Empty without answers."""
    from ...truth import discover  # the algorithm layer, like this module

    rows = market.connection().execute(
        "SELECT a.hit_id || '/' || n.item_no, a.worker_id, n.answer FROM assignments a JOIN answers n USING "
        "(assignment_id) JOIN hits h USING (hit_id) WHERE (:run IS NULL OR h.run_id = :run) AND NOT EXISTS "
        "(SELECT 1 FROM gold g WHERE g.hit_id = a.hit_id AND g.item_no = n.item_no)", {"run": run_id}).fetchall()
    frame = pd.DataFrame(rows, columns=["object", "source", "value"])
    if frame.empty or frame["value"].nunique() < 2:
        return pd.DataFrame({"worker_id": [], "answers": [], "quality": []})
    weights = discover(frame, method="ds").sources.rename(columns={"source": "worker_id", "weight": "quality"})
    counts = frame.groupby("source").size().rename("answers").reset_index().rename(columns={"source": "worker_id"})
    return counts.merge(weights, on="worker_id")[["worker_id", "answers", "quality"]]


def payments_csv(market: Market, run_id: int | None) -> str:
    """What each worker earned on this page (in run ``run_id``, or all runs) as the payments CSV `crowddb payments`
    prints too (``crowddb.crowd.payments``: participant_id,amount,worker_id,assignments)."""
    return payments.payments_csv(market.earnings(run_id))


# -- the query's k-anonymity trade-off ---------------------------------------------------------------------------------


def save_tradeoff(market: Market, query: str, tradeoff: pd.DataFrame) -> None:
    """Keep the query's k-anonymity trade-off (``CrowdDB.tradeoff``: one row per k) in the market, as
    ``tradeoff_svg`` draws it: kept in the file, so a ``crowddb serve`` process shows it too."""
    first = tradeoff.drop_duplicates("k")  # the query's first human operator at each k
    refused = first[first["refused"].notna()]
    market.set_setting("tradeoff", json.dumps({
        "query": " ".join(query.split()), "k": [int(k) for k in first["k"]], "ncp": _figures(first, "ncp"),
        "accuracy_lower": _figures(first, "accuracy_lower"), "accuracy_upper": _figures(first, "accuracy_upper"),
        "refused": {str(int(k)): str(why) for k, why in zip(refused["k"], refused["refused"])}}))


def saved_tradeoff(market: Market) -> dict | None:
    """The trade-off ``save_tradeoff`` kept (``tradeoff_svg``'s argument); None before any crowd query."""
    stored = market.setting("tradeoff")
    return json.loads(stored) if stored else None


def _figures(frame: pd.DataFrame, column: str) -> list[float | None]:
    """A column's numbers as JSON takes them (None where missing)."""
    return [None if pd.isna(v) else float(v) for v in frame[column]]


# -- the charts --------------------------------------------------------------------------------------------------------


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
    """A chart with nothing to draw yet: its title and why."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40" role="img" aria-label="{title}">'
            f'<title>{title}</title><text x="4" y="16" font-size="13">{title}: {note}</text></svg>')
