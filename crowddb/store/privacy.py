"""The epsilon budget (issue 15, point 3): what differentially private releases spent, per table and protected unit,
and the check that refuses a release which would overspend, before any noise is drawn.

The ledger is ``crowddb_privacy_ledger`` (sql/catalog.sql), append-only and hash-chained: 'budget' rows (a limit per
table and unit, ``set_budget``), 'reset' rows (``reset``: what was spent before is forgotten, and that is on record)
and 'charge' rows (one per release, table and unit id: e.g. one source's (epsilon, delta, rho)), written by
``record`` in the same transaction as the release's row of crowddb_releases (``Store.log_charged_release``).

Composition (per unit id, over the charges since the last reset):
- 'sequential' (default): epsilon and delta add up (basic composition, Dwork & Roth 2014, Theorem 3.16).
- 'zcdp': rho adds up (Bun & Steinke 2016, Lemma 2.3), converted to (epsilon, delta) at the budget's delta by
  OpenDP's accountant (``make_zCDP_to_approxDP``, the conversion of Canonne, Kamath & Steinke 2020, Proposition 12).
  Only releases with a rho may be charged under it (pure epsilon-DP: rho = epsilon^2 / 2, Bun & Steinke Proposition
  1.4; Gaussian: ``gaussian_rho``).
The report shows both totals whatever the budget's composition.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd

from .._duck import registered
from ..errors import ArgumentError, PrivacyBudgetError
from ..truth.noise import opendp_available

LEDGER = "crowddb_privacy_ledger"
SPENT_VIEW = "crowddb_privacy_spent"
UNITS = ("source",)  # the protected unit a charge is declared in: one source (worker) of the claims
COMPOSITIONS = ("sequential", "zcdp")
ZCDP_DELTA = 1e-6  # the delta at which a zCDP total is shown when the budget names none
_GENESIS = "0" * 64
_COLUMNS = ["seq", "act", "table_name", "unit", "unit_id", "release_id", "epsilon", "delta", "rho", "composition",
            "prev_hash", "hash"]

#: test hook (the SIGKILL test): called inside the release's transaction between its release row and its charges
AFTER_RELEASE_HOOK: Callable[[], None] | None = None


@dataclasses.dataclass
class Charge:
    """What a release will spend, declared from its arguments and frozen input before any noise is drawn: per unit
    id (``per_unit``: unit_id, epsilon, delta, rho; rho NaN where the release has none), and how it was computed."""

    operator: str
    unit: str
    per_unit: pd.DataFrame
    basis: str

    def summary(self) -> dict[str, float | int | None]:
        p = self.per_unit
        rho = p["rho"].to_numpy(float)
        return {"units": len(p), "epsilon_max": float(p["epsilon"].max()) if len(p) else 0.0,
                "delta_max": float(p["delta"].max()) if len(p) else 0.0,
                "rho_max": None if not len(p) or np.isnan(rho).any() else float(rho.max())}


# --------------------------------------------------------------------------------------------------- accounting
def gaussian_rho(epsilon: float, delta: float) -> float:
    """rho of a Gaussian mechanism calibrated to (epsilon, delta) by the classic rule sigma = Delta sqrt(2 ln(1.25 /
    delta)) / epsilon (Dwork & Roth 2014, Theorem A.1): rho = Delta^2 / (2 sigma^2) (Bun & Steinke 2016, Proposition
    1.6) = epsilon^2 / (4 ln(1.25 / delta))."""
    return epsilon * epsilon / (4.0 * math.log(1.25 / delta))


def pure_rho(epsilon: float) -> float:
    """rho of a pure epsilon-DP mechanism, by OpenDP's ``make_pureDP_to_zCDP`` (= epsilon^2 / 2, Bun & Steinke 2016,
    Proposition 1.4); without the ``dp`` extra, the same figure by the same outward rounding (``_pure_to_zcdp``)."""
    epsilon = float(epsilon)
    return float(_opendp_pure_to_zcdp(epsilon) if opendp_available() else _pure_to_zcdp(epsilon))


@functools.lru_cache(maxsize=1024)
def _opendp_pure_to_zcdp(epsilon: float) -> float:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    # a Laplace mechanism of scale 1/epsilon on a sensitivity-1 input is epsilon-DP; its zCDP image is the conversion
    meas = dp.m.make_laplace(dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale=1.0 / epsilon)
    return float(dp.c.make_pureDP_to_zCDP(meas).map(1.0))


def _round_up(value: Fraction) -> float:
    """The smallest float not below the exact rational ``value`` (an accountant rounds toward spending more)."""
    x = float(value)
    return x if Fraction(x) >= value else math.nextafter(x, math.inf)


def _pure_to_zcdp(epsilon: float) -> float:
    """OpenDP's conversion without OpenDP, bit for bit (tested against it): the Laplace scale 1/epsilon rounded to
    nearest, its epsilon 1/scale rounded up, rho = epsilon^2 / 2 (Bun & Steinke Proposition 1.4) rounded up."""
    eps = _round_up(1 / Fraction(1.0 / epsilon))
    return _round_up(Fraction(eps) ** 2) / 2


@functools.lru_cache(maxsize=1024)
def zcdp_epsilon(rho: float, delta: float) -> float:
    """The epsilon of a rho-zCDP total at ``delta``, by OpenDP's ``make_zCDP_to_approxDP`` (Canonne, Kamath & Steinke
    2020, Proposition 12: inf over alpha > 1 of rho alpha + (ln(1/delta) + (alpha-1) ln(1-1/alpha) - ln alpha) /
    (alpha-1)); without the ``dp`` extra, ``_cks_epsilon``. rho = 0 spends nothing."""
    if rho <= 0:
        return 0.0
    if not opendp_available():
        return _cks_epsilon(float(rho), float(delta))
    import opendp.prelude as dp

    dp.enable_features("contrib")
    # a Gaussian mechanism of scale 1/sqrt(2 rho) on a sensitivity-1 input is exactly rho-zCDP
    meas = dp.m.make_gaussian(dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float),
                              scale=1.0 / math.sqrt(2.0 * rho))
    return float(dp.c.make_zCDP_to_approxDP(meas).map(1.0).epsilon(delta))


def _cks_epsilon(rho: float, delta: float) -> float:
    """Canonne, Kamath & Steinke 2020, Proposition 12, minimized over alpha = 1 + e^t by scipy's bounded Brent search,
    then raised by one part in 1e9 (ours: a numerical minimum may sit a few ulps below OpenDP's, and an accountant
    must not report less than was spent; tested to lie within that margin above OpenDP's figure)."""
    from scipy.optimize import minimize_scalar

    log_inv_delta = math.log(1.0 / delta)

    def bound(t: float) -> float:
        alpha = 1.0 + math.exp(t)
        return rho * alpha + (log_inv_delta + (alpha - 1.0) * math.log1p(-1.0 / alpha) - math.log(alpha)) / (alpha - 1.0)

    best = minimize_scalar(bound, bounds=(-30.0, 30.0), method="bounded", options={"xatol": 1e-12})
    return float(best.fun) * (1.0 + 1e-9)


# ------------------------------------------------------------------------------------------------- the ledger
def _content(row: Sequence) -> str:
    """A ledger row's content as hashed: every column but created_at and the hashes, NULLs as empty, floats by repr
    (DuckDB keeps a DOUBLE exactly, so the text is the same when read back)."""
    def text(v: object) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        if isinstance(v, (float, np.floating)):
            return repr(float(v))
        if isinstance(v, (int, np.integer)):
            return str(int(v))
        return str(v)
    return "|".join(text(v) for v in row)


def _chain(prev: str, content: str) -> str:
    return hashlib.sha256(f"{prev}|{content}".encode()).hexdigest()


def _append(con: duckdb.DuckDBPyConnection, rows: list[list]) -> None:
    """Append ``rows`` (act, table, unit, unit_id, release_id, epsilon, delta, rho, composition) with their seq and
    hash chain; the caller holds the transaction (the last row's seq and hash are read inside it)."""
    last = con.execute(f"SELECT seq, hash FROM {LEDGER} ORDER BY seq DESC LIMIT 1").fetchall()
    seq, prev = (int(last[0][0]), str(last[0][1])) if last else (0, _GENESIS)
    out = []
    for row in rows:
        seq += 1
        full = [seq, *row]
        h = _chain(prev, _content(full))
        out.append([*full, prev, h])
        prev = h
    frame = pd.DataFrame(out, columns=_COLUMNS, dtype=object)  # object: a None stays NULL (not NaN) in DuckDB
    with registered(con, __crowd_privacy_rows=frame):
        con.execute(f"INSERT INTO {LEDGER} ({', '.join(_COLUMNS)}) SELECT {', '.join(_COLUMNS)} "
                    "FROM __crowd_privacy_rows").fetchall()


def verify(con: duckdb.DuckDBPyConnection) -> None:
    """Recompute the hash chain; raise PrivacyBudgetError at the first row that does not match (an edit, insert or
    delete made around the API)."""
    rows = con.execute(f"SELECT {', '.join(_COLUMNS)} FROM {LEDGER} ORDER BY seq").fetchall()
    prev = _GENESIS
    for i, row in enumerate(rows, 1):
        if row[0] != i or row[-2] != prev or _chain(prev, _content(row[:-2])) != row[-1]:
            raise PrivacyBudgetError(
                f"the privacy ledger ({LEDGER}) was changed outside crowddb at seq {row[0]} (row {i}): its hash "
                "chain does not match, so what was spent cannot be trusted; restore the database file from a backup")
        prev = row[-1]


def _check_unit(unit: str) -> str:
    if unit not in UNITS:
        raise ArgumentError(f"unknown protected unit {unit!r}; valid: {list(UNITS)} (a charge is declared per source, "
                            "the worker whose answers a release reads)")
    return unit


def set_budget(con: duckdb.DuckDBPyConnection, table: str, *, epsilon: float, delta: float = 0.0,
               unit: str = "source", composition: str = "sequential") -> None:
    """Append a 'budget' act (the caller's transaction)."""
    _check_unit(unit)
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ArgumentError(f"the budget's epsilon must be a finite number > 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        raise ArgumentError(f"the budget's delta must be in [0, 1), got {delta!r}")
    if composition not in COMPOSITIONS:
        raise ArgumentError(f"composition must be one of {list(COMPOSITIONS)}, got {composition!r}")
    if composition == "zcdp" and delta <= 0:
        raise ArgumentError("composition := 'zcdp' converts rho to epsilon at the budget's delta: pass delta > 0 "
                            "(e.g. delta := 1e-6)")
    _append(con, [["budget", table.lower(), unit, None, None, float(epsilon), float(delta), None, composition]])


def reset(con: duckdb.DuckDBPyConnection, table: str, unit: str = "source") -> None:
    """Append a 'reset' act: charges before it no longer count (they stay on record)."""
    _check_unit(unit)
    _append(con, [["reset", table.lower(), unit, None, None, None, None, None, None]])


def budget_of(con: duckdb.DuckDBPyConnection, table: str, unit: str) -> tuple[float, float, str] | None:
    rows = con.execute(f"SELECT epsilon, delta, composition FROM {LEDGER} WHERE act = 'budget' AND table_name = ? "
                       "AND unit = ? ORDER BY seq DESC LIMIT 1", [table.lower(), unit]).fetchall()
    return (float(rows[0][0]), float(rows[0][1]), str(rows[0][2])) if rows else None


def _spent(con: duckdb.DuckDBPyConnection, table: str, unit: str, ids: pd.DataFrame) -> pd.DataFrame:
    """Per unit id of ``ids``: epsilon, delta, rho (NaN if a charge had none) spent since the last reset."""
    with registered(con, __crowd_privacy_ids=ids[["unit_id"]]):
        return con.execute(
            f"SELECT i.unit_id, coalesce(sum(l.epsilon), 0) AS epsilon, coalesce(sum(l.delta), 0) AS delta, "
            f"CASE WHEN bool_and(l.rho IS NOT NULL) OR count(l.seq) = 0 THEN coalesce(sum(l.rho), 0) END AS rho "
            f"FROM __crowd_privacy_ids i LEFT JOIN {LEDGER} l ON l.unit_id = i.unit_id AND l.act = 'charge' "
            f"AND l.table_name = ? AND l.unit = ? AND l.seq > (SELECT coalesce(max(seq), 0) FROM {LEDGER} "
            f"WHERE act = 'reset' AND table_name = ? AND unit = ?) GROUP BY i.unit_id",
            [table.lower(), unit, table.lower(), unit]).df()


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def check(con: duckdb.DuckDBPyConnection, tables: Sequence[str], charge: Charge) -> list[dict]:
    """Refuse ``charge`` (PrivacyBudgetError naming spent, asked and left) if it would overspend the budget of any
    of ``tables`` for its unit; else return, per table, what it asks and what is left after it. Reads only."""
    out = []
    asked = charge.per_unit.reset_index(drop=True)
    for table in tables:
        budget = budget_of(con, table, charge.unit)
        spent = _spent(con, table, charge.unit, asked).set_index("unit_id").loc[asked["unit_id"]].reset_index()
        total_eps = spent["epsilon"].to_numpy(float) + asked["epsilon"].to_numpy(float)
        total_dl = spent["delta"].to_numpy(float) + asked["delta"].to_numpy(float)
        total_rho = spent["rho"].to_numpy(float) + asked["rho"].to_numpy(float)  # NaN where a charge has none
        entry = {"table": table.lower(), "unit": charge.unit, "operator": charge.operator, "basis": charge.basis,
                 **charge.summary(), "budget_epsilon": None, "budget_delta": None, "composition": None,
                 "epsilon_left": None, "delta_left": None}
        if budget is not None and len(asked):
            b_eps, b_dl, composition = budget
            if composition == "zcdp":
                if np.isnan(total_rho).any():
                    raise PrivacyBudgetError(
                        f"{charge.operator}: the budget of {table!r} per {charge.unit} composes in zCDP, but this "
                        f"release has no rho ({charge.basis}); nothing was released or charged. Set the budget with "
                        "composition := 'sequential' to charge it")
                used = np.array([zcdp_epsilon(float(r), b_dl) for r in total_rho])
                before = np.array([zcdp_epsilon(float(r), b_dl) for r in spent["rho"].to_numpy(float)])
                over = used > b_eps * (1 + 1e-12)
                left_eps, left_dl = b_eps - used, np.full(len(used), b_dl)
                worst = int(np.argmax(used - b_eps))
                spent_text = (f"rho={_fmt(spent['rho'].iloc[worst])} (epsilon={_fmt(before[worst])} at "
                              f"delta={_fmt(b_dl)})")
                asked_text = f"rho={_fmt(asked['rho'].iloc[worst])}"
                left_text = f"epsilon={_fmt(b_eps - before[worst])} at delta={_fmt(b_dl)}"
            else:
                over = (total_eps > b_eps * (1 + 1e-12)) | (total_dl > b_dl * (1 + 1e-12) + 1e-300)
                left_eps, left_dl = b_eps - total_eps, b_dl - total_dl
                worst = int(np.argmax(np.maximum(total_eps / b_eps, np.where(b_dl > 0, total_dl / max(b_dl, 1e-300),
                                                                            np.where(total_dl > 0, np.inf, 0)))))
                spent_text = f"epsilon={_fmt(spent['epsilon'].iloc[worst])}, delta={_fmt(spent['delta'].iloc[worst])}"
                asked_text = f"epsilon={_fmt(asked['epsilon'].iloc[worst])}, delta={_fmt(asked['delta'].iloc[worst])}"
                left_text = (f"epsilon={_fmt(b_eps - spent['epsilon'].iloc[worst])}, "
                             f"delta={_fmt(b_dl - spent['delta'].iloc[worst])}")
            if over.any():
                raise PrivacyBudgetError(
                    f"{charge.operator} would overspend the privacy budget of {table!r} (epsilon={_fmt(b_eps)}, "
                    f"delta={_fmt(b_dl)} per {charge.unit}, {composition} composition): {charge.unit} "
                    f"{asked['unit_id'].iloc[worst]!r} has spent {spent_text}, this release asks {asked_text}, "
                    f"{left_text} is left ({int(over.sum())} of {len(asked)} {charge.unit}s would overspend). "
                    f"Nothing was released or charged. Ask for less (a smaller epsilon, fewer answers per "
                    f"{charge.unit}), or reset the budget with db.reset_privacy_budget({table!r}) (a logged act)")
            entry.update(budget_epsilon=b_eps, budget_delta=b_dl, composition=composition,
                         epsilon_left=float(np.min(left_eps)), delta_left=float(np.min(left_dl)))
        out.append(entry)
    return out


def record(con: duckdb.DuckDBPyConnection, tables: Sequence[str], charge: Charge, release_id: int) -> None:
    """The charge's rows for ``release_id``, one per table and unit id (the caller's transaction, the release's)."""
    p = charge.per_unit
    rows = [["charge", t.lower(), charge.unit, str(u), int(release_id), float(e), float(d),
             None if np.isnan(r) else float(r), None]
            for t in tables for u, e, d, r in zip(p["unit_id"], p["epsilon"], p["delta"], p["rho"].astype(float))]
    if rows:
        _append(con, rows)


# ------------------------------------------------------------------------------------------------- the report
REPORT_COLUMNS = ["release_id", "kind", "method", "created_at", "unit", "units", "epsilon", "delta", "rho",
                  "epsilon_spent", "delta_spent", "rho_spent", "epsilon_zcdp", "zcdp_delta", "budget_epsilon",
                  "budget_delta", "composition", "epsilon_left", "delta_left", "after_reset", "smallest_joint_class",
                  "ledger_release", "k", "rows", "repeats"]


def report(con: duckdb.DuckDBPyConnection, table: str) -> pd.DataFrame:
    """Every charged release of ``table``, in order: its largest charge to one unit (epsilon, delta, rho), and after
    it, over the units, the most any one unit has spent (sequentially: epsilon_spent, delta_spent; in zCDP:
    rho_spent and epsilon_zcdp, its epsilon at zcdp_delta) and the least left of the budget as it is now.
    ``after_reset``: the release counts (no reset since). ``smallest_joint_class``: the k-anonymity side's hook (the
    smallest joint class across the table's k-anonymous releases), None here. Verifies the hash chain first."""
    verify(con)
    t = table.lower()
    charges = con.execute(
        f"SELECT l.seq, l.unit, l.unit_id, l.release_id, l.epsilon, l.delta, l.rho, r.kind, r.method, r.created_at, "
        f"(SELECT count(*) FROM {LEDGER} x WHERE x.act = 'reset' AND x.table_name = l.table_name "
        f"AND x.unit = l.unit AND x.seq < l.seq) AS epoch "
        f"FROM {LEDGER} l LEFT JOIN crowddb_releases r ON r.release_id = l.release_id "
        f"WHERE l.act = 'charge' AND l.table_name = ? ORDER BY l.seq", [t]).df()
    if not len(charges):
        return pd.DataFrame(columns=REPORT_COLUMNS)
    out = []
    for unit, of_unit in charges.groupby("unit", sort=False):
        budget = budget_of(con, t, str(unit))
        resets = con.execute(f"SELECT count(*) FROM {LEDGER} WHERE act = 'reset' AND table_name = ? AND unit = ?",
                             [t, unit]).fetchall()[0][0]
        zdelta = budget[1] if budget is not None and budget[1] > 0 else ZCDP_DELTA
        for _epoch, of_epoch in of_unit.groupby("epoch", sort=True):
            running: dict[str, list[float]] = {}  # unit id -> [epsilon, delta, rho (NaN once a charge has none)]
            for release_id, rel in of_epoch.groupby("release_id", sort=False):
                for u, e, d, r in zip(rel["unit_id"], rel["epsilon"], rel["delta"], rel["rho"]):
                    acc = running.setdefault(u, [0.0, 0.0, 0.0])
                    acc[0] += float(e)
                    acc[1] += float(d)
                    acc[2] += float(r) if r is not None and not pd.isna(r) else math.nan
                totals = np.array(list(running.values()))
                eps_spent, dl_spent = float(totals[:, 0].max()), float(totals[:, 1].max())
                rho_spent = None if np.isnan(totals[:, 2]).any() else float(totals[:, 2].max())
                rho = rel["rho"].astype(float)
                first = rel.iloc[0]
                out.append({
                    "release_id": int(release_id), "kind": first["kind"], "method": first["method"],
                    "created_at": first["created_at"], "unit": unit, "units": len(rel),
                    "epsilon": float(rel["epsilon"].max()), "delta": float(rel["delta"].max()),
                    "rho": None if rho.isna().any() else float(rho.max()),
                    "epsilon_spent": eps_spent, "delta_spent": dl_spent, "rho_spent": rho_spent,
                    "epsilon_zcdp": None if rho_spent is None else zcdp_epsilon(rho_spent, zdelta),
                    "zcdp_delta": zdelta,
                    "budget_epsilon": None if budget is None else budget[0],
                    "budget_delta": None if budget is None else budget[1],
                    "composition": None if budget is None else budget[2],
                    "epsilon_left": None if budget is None else budget[0] - (
                        eps_spent if budget[2] == "sequential" or rho_spent is None
                        else zcdp_epsilon(rho_spent, zdelta)),
                    "delta_left": None if budget is None else budget[1] - dl_spent,
                    "after_reset": int(_epoch) == int(resets), "smallest_joint_class": None})
    return pd.DataFrame(out, columns=REPORT_COLUMNS).sort_values("release_id", kind="stable").reset_index(drop=True)
