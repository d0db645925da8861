"""The attack suite's harness (issue 24): the recording crowd, the attacked database and the verdicts; see conftest.py."""


from __future__ import annotations

import json
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

import crowddb
from crowddb.crowd import KnowledgeBase, SimulatedCrowd
from crowddb.errors import CrowdDBError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import composition_checker as cc
import privacy_scanner as ps

K = 5
OP = "getposition(*, k := 5, assignments := 1)"
QIS = ["age", "sex", "education_num"]
CORE = ["age", "sex", "education_num", "workclass", "hours_per_week"]
ADULT_ROLES = {"quasi_identifiers": QIS, "sensitive": ["occupation"], "ground_truth": "occupation", "key": "id", "core": CORE}
CANARY_ROLES = {"quasi_identifiers": QIS, "sensitive": ["occupation", "secret"], "ground_truth": "job", "key": "pid",
                    "core": CORE}
MARK = "canary-"  # case-folded marker prefix
NONCORE_TEXT = ["education", "marital_status", "relationship", "native_country"]  # Adult columns never core
_META = {"hit_id", "item_no", "row_no"}
MARKER_KIND = {"occ": "the sensitive column occupation", "sec": "the sensitive column secret",
               "key": "the key column pid", "note": "the column note (never declared core)"}



def _letters(n: int) -> str:
    """A unique token of letters only (no digit run the scanner could mistake for a key)."""
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(97 + r) + out
    return "tk" + out


# --------------------------------------------------------------------------------------------------- the crowd

class RecordingCrowd(SimulatedCrowd):
    """The default simulated crowd (seeded), keeping every batch exactly as handed to the platform.

    Like a real marketplace it does not need a ground-truth column: over an input without one (an attacker who passes
    ``domain := [...]``) its workers answer from nothing (uniform guesses), so such a run is not refused for a reason
    that has nothing to do with privacy."""

    needs_knowledge = False

    def __init__(self, **kw):
        super().__init__(**kw)
        self.batches: list[dict] = []

    def publish(self, batch, *, knowledge=None):
        self.batches.append({
            "items": batch.items.copy(), "hits": batch.hits.copy(), "columns": list(batch.published_columns),
            "truth": None if knowledge is None else [None if pd.isna(t) else str(t) for t in knowledge.truth]})
        if knowledge is None:
            cols = [c for c in batch.items.columns if c not in _META] or ["item_no"]
            frame = batch.items[cols].astype(str).reset_index(drop=True)
            knowledge = KnowledgeBase(frame, np.array(["<nobody knows>"] * len(frame), dtype=object))
        super().publish(batch, knowledge=knowledge)


def _domain_values(domain) -> list[str] | None:
    if domain is None or (isinstance(domain, float) and np.isnan(domain)):
        return None
    if isinstance(domain, str):
        try:
            domain = json.loads(domain)
        except ValueError:
            return [domain]
    return [str(d) for d in domain]


# ------------------------------------------------------------------------------------- plain DuckDB validity

_CALL = re.compile(r"\b(getposition|getcandidate)\s*\(", re.IGNORECASE)


def neutralize(sql: str) -> str:
    """The statement with every human-operator call replaced by a constant (for the plain DuckDB validity run)."""
    out, pos = [], 0
    for m in _CALL.finditer(sql):
        if m.start() < pos:
            continue
        depth, i, quote = 1, m.end(), None
        while i < len(sql) and depth:
            c = sql[i]
            if quote:
                if c == quote:
                    quote = None
            elif c in "'\"":
                quote = c
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            i += 1
        out.append(sql[pos:m.start()])
        out.append("'x'" if m.group(1).lower() == "getposition" else "any_value('x')")
        pos = i
    out.append(sql[pos:])
    return "".join(out)


_TABLE_FUNCS = re.compile(r"\b(TRUTH_DISCOVER|PRIVATE_SYNTH|ANONYMIZE|PRIVACY_BUDGET|crowddb_)\b", re.IGNORECASE)


# ----------------------------------------------------------------------------------------------------- the env

class _Qualified:
    """A read-only view of a raw DuckDB connection whose crowddb_* names are qualified with the catalog."""

    def __init__(self, con: duckdb.DuckDBPyConnection, catalog: str):
        self._con, self._catalog = con, catalog

    def _q(self, query: str) -> str:
        return re.sub(r"\b(crowddb_[a-z_]+)\b", lambda m: f'"{self._catalog}".main.{m.group(1)}', query)

    def sql(self, query: str):
        return self._con.execute(self._q(query))

    execute = sql


class Env:
    """One attacked database: the crowd, what ran, what workers saw, and the verdicts."""

    def __init__(self, request, tmp_path, tables: dict[str, tuple[pd.DataFrame, dict]], *, path=None, seed=7,
                 frames: dict | None = None):
        self.request, self.tmp_path = request, tmp_path
        self.crowd = RecordingCrowd(seed=seed)
        self.path, self.seed = path, seed
        self.db = crowddb.connect(str(path) if path else ":memory:", platform=self.crowd, seed=seed,
                                  progress=False, config={"threads": 1})
        self.tables = tables
        for name, (frame, roles) in tables.items():
            self.db.load_frame(name, frame, **roles)
        self.catalog = self.db.con.execute("SELECT current_database()").fetchall()[0][0]
        self.log: list[tuple[str, str, str | None]] = []
        self.late_refusals: list[str] = []
        self.released: list[tuple[str, pd.DataFrame, int]] = []  # ANONYMIZE-like results handed back: (name, frame, k)
        self._plain: duckdb.DuckDBPyConnection | None = None

    # -- running -------------------------------------------------------------------------------------------------

    def plain(self) -> duckdb.DuckDBPyConnection:
        if self._plain is None:
            con = duckdb.connect(config={"threads": 1})
            for name, (frame, _roles) in self.tables.items():
                con.register("__f", frame)
                con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM __f')
                con.unregister("__f")
            self._plain = con
        return self._plain

    def validate(self, *statements: str) -> None:
        """The attack's statements are valid DuckDB SQL over the same tables (operators replaced by a constant)."""
        con = self.plain()
        for s in statements:
            if _TABLE_FUNCS.search(s):
                continue
            text = neutralize(s).replace("{tmp}", str(self.tmp_path))
            try:
                res = con.execute(text)
                if res.description:
                    res.fetchall()
            except duckdb.Error as err:
                pytest.fail(f"ATTACK INVALID (plain DuckDB refuses it, fix the test): {text!r}: {err}")

    def run(self, *statements: str, validate: bool = True) -> list[str]:
        """Run each statement through db.sql (a relation is fetched); returns 'ok' or 'refused' per statement."""
        statements = tuple(s.replace("{tmp}", str(self.tmp_path)) for s in statements)
        if validate:
            self.validate(*statements)
        out = []
        for s in statements:
            out.append(self._one(s, lambda s=s: self._fetch(self.db.sql(s))))
        return out

    @staticmethod
    def _fetch(rel):
        return rel.df() if rel is not None else None

    def call(self, what: str, fn):
        """Run a Python API call the same way (refusal fine, anything else a crash); returns its value or None."""
        box = {}

        def go():
            box["v"] = fn()
        status = self._one(what, go)
        return box.get("v") if status == "ok" else None

    def release(self, sql: str, k: int, name: str | None = None) -> pd.DataFrame | None:
        """Run a statement whose returned rows are a release (ANONYMIZE): kept for the scanner and the checker."""
        sql = sql.replace("{tmp}", str(self.tmp_path))
        box = {}

        def go():
            box["v"] = self.db.sql(sql).df()
        if self._one(sql, go) == "ok":
            self.released.append((name or f"release {len(self.released) + 1}", box["v"], k))
            return box["v"]
        return None

    def _one(self, label: str, fn) -> str:
        before = len(self.crowd.batches)
        try:
            fn()
        except (CrowdDBError, duckdb.Error) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            self.log.append((label, "refused", f"{type(err).__name__}: {first[:300]}"))
            if len(self.crowd.batches) > before:  # docs/python.md: errors are raised before anything is published
                n = sum(len(b["items"]) for b in self.crowd.batches[before:])
                self.late_refusals.append(f"the statement was refused ({type(err).__name__}: {first[:160]}) AFTER "
                                          f"{n} items were published to workers")
            return "refused"
        except Exception as err:  # noqa: BLE001  a crash
            self.request.node.user_properties.append(("attack_outcome", "crash"))
            pytest.fail(f"CRASH: {type(err).__name__}: {err} (statement: {label[:300]!r})", pytrace=True)
        self.log.append((label, "ok", None))
        return "ok"

    @property
    def refused(self) -> bool:
        return any(status == "refused" for _, status, _ in self.log)

    def refusals(self) -> str:
        return "; ".join(f"{why}" for _, status, why in self.log if status == "refused") or "none"

    # -- what workers saw -------------------------------------------------------------------------------------------

    def batch_records(self) -> pd.DataFrame:
        """Every published record of every batch handed to the platform, as privacy_scanner items."""
        rows = []
        for b, batch in enumerate(self.crowd.batches):
            items = batch["items"]
            cols = [c for c in items.columns if c not in _META]
            for rec in items.to_dict("records"):
                fields = {str(c): (None if rec[c] is None or (isinstance(rec[c], float) and np.isnan(rec[c]))
                                   else ps._cell_text(rec[c])) for c in cols}
                rows.append({"hit_id": rec.get("hit_id"), "run_id": b, "operator": "batch", "item_no": rec.get("item_no"),
                             "item_key": None, "occurrence": 0, "content": json.dumps(fields),
                             "row_no": rec.get("row_no"), "is_group": False, "fields": fields})
        return pd.DataFrame(rows, columns=["hit_id", "run_id", "operator", "item_no", "item_key", "occurrence",
                                           "content", "row_no", "is_group", "fields"])

    def catalog_reader(self) -> _Qualified:
        """Reads crowddb's own tables by their full name in the database's catalog, whatever the attack did to the
        session's search path, default catalog or temp objects."""
        return _Qualified(self.db.con, self.catalog)

    def stored_records(self) -> pd.DataFrame:
        return ps.published_items(self.catalog_reader())

    def records(self) -> pd.DataFrame:
        """What the platform was handed and what crowddb_hit_items says was shown, each record once."""
        parts = [p for p in (self.stored_records(), self.batch_records()) if len(p)]
        if not parts:
            return self.batch_records()
        both = pd.concat(parts, ignore_index=True)
        key = [f"{h}|{i}|{json.dumps(f, sort_keys=True)}" for h, i, f in zip(both["hit_id"], both["item_no"],
                                                                             both["fields"])]
        return both[~pd.Series(key).duplicated().to_numpy()].reset_index(drop=True)

    def shown_text(self) -> list[tuple[str, str, str]]:
        """(channel, field, text) of everything a worker reads: published values and column names, questions,
        answer domains (as handed to the platform), and the content crowddb_hit_items says was shown."""
        out = []
        for batch in self.crowd.batches:
            items = batch["items"]
            for c in items.columns:
                if c in _META:
                    continue
                out.append(("a published column name", str(c), str(c)))
                for v in items[c].dropna().astype(str):
                    out.append(("published items", str(c), v))
            for _, h in batch["hits"].iterrows():
                out.append(("the HIT question", "question", str(h.get("question"))))
                for d in _domain_values(h.get("domain")) or []:
                    out.append(("the answer domain", "domain", d))
        for fields in self.stored_records()["fields"]:
            for name, value in fields.items():
                out.append(("crowddb_hit_items", name, "" if value is None else value))
                out.append(("crowddb_hit_items", name, name))
        return out

    def domains(self) -> list[dict]:
        """Per HIT: the domain shown and the ground truths of the rows its batch asked about (the platform's
        knowledge: what the input held)."""
        out = []
        for b, batch in enumerate(self.crowd.batches):
            for _, h in batch["hits"].iterrows():
                out.append({"batch": b, "hit_id": h["hit_id"], "domain": _domain_values(h.get("domain")),
                            "truth": batch["truth"], "n_items": int((batch["items"]["hit_id"] == h["hit_id"]).sum())})
        return out

    @property
    def published_anything(self) -> bool:
        return bool(self.crowd.batches) or bool(self.released)

    # -- verdicts ------------------------------------------------------------------------------------------------

    def canary_findings(self, include_released: bool = True,
                        released_allowed: tuple = ("canary-occ-", "canary-sec-", "canary-note-")) -> list[str]:
        """Every canary marker a worker could read, by the column it comes from: 'values of the sensitive column
        occupation shown to workers: 169 of 169 rows (published items, field workclass; e.g. ...)'."""
        rows = len(next((f for f, _r in self.tables.values() if "pid" in f), pd.DataFrame()))
        found: dict = defaultdict(lambda: {"markers": set(), "where": set(), "example": None})
        places = list(self.shown_text())
        if include_released:  # ANONYMIZE keeps sensitive and other columns by design; never the key
            for name, frame, _k in self.released:
                for c in frame.columns:
                    places.append((f"the released rows of {name}", str(c), str(c)))
                    for v in frame[c].dropna().astype(str):
                        places.append((f"the released rows of {name}", str(c), v))
        for channel, field, text in places:
            for m in re.finditer(r"canary-([a-z]+)-\d+", text.casefold()):
                if channel.startswith("the released rows") and m.group(0).startswith(released_allowed):
                    continue
                entry = found[m.group(1)]
                entry["markers"].add(m.group(0))
                entry["where"].add(f"{channel}: {field}")
                entry["example"] = entry["example"] or f"{field}={text[:80]!r}"
        out = []
        for kind, e in found.items():
            what = MARKER_KIND.get(kind, f"canary column {kind}")
            out.append(f"values of {what} shown to workers: {len(e['markers'])} of {rows} rows "
                       f"(in {'; '.join(sorted(e['where']))[:200]}; e.g. {e['example']})")
        return out

    def protected_findings(self, frame: pd.DataFrame, protected: list[str], key: str | None,
                           noncore: list[str] = ()) -> list[str]:
        items = self.records()
        out = []
        if len(items):
            found = ps.leaked_protected(items, frame, protected, key)
            if found:
                rows = len({f["index"] for f in found if f["index"] is not None})
                out.append(f"values of the protected columns {', '.join(protected) or '-'} (or of the key {key}) "
                           f"shown to workers in {rows} of {len(items)} published records: {ps.describe(found)}")
            if noncore:
                nc = ps.leaked_protected(items, frame, list(noncore), None, min_len=4)
                if nc:
                    out.append(f"values of columns never declared core ({', '.join(noncore)}) shown to workers: "
                               f"{ps.describe(nc)}")
        for name, rel, _k in self.released:
            if key and key in rel.columns:
                out.append(f"{name}: the key column {key!r} is in the release")
        return out

    @staticmethod
    def _small_text(where: str, small: pd.DataFrame, total: int, k: int, aliases) -> str:
        shown = set(QIS) | set((aliases or {}).keys())
        examples = "; ".join(
            f"{c} people <- {json.dumps({n: v for n, v in f.items() if n in shown or any(q in n for q in QIS)})}"
            for c, f in zip(small["count"].head(3), small["fields"].head(3)))
        return (f"{where}: {len(small)} of {total} records fall in a class of fewer than k={k} people over the "
                f"quasi-identifiers {', '.join(QIS)} (smallest {int(small['count'].min())}); e.g. {examples}")

    def class_findings(self, population: pd.DataFrame, k: int = K, aliases: dict | None = None) -> list[str]:
        """Records whose class (people of ``population`` consistent with every quasi-identifier field shown, by the
        independent scanner) holds 1..k-1 people."""
        out = []
        items = self.records()
        if len(items):
            small = ps.small_classes(items, population, QIS, k, aliases=aliases)
            if len(small):
                out.append(self._small_text("published items", small, len(items), k, aliases))
        for name, rel, rk in self.released:
            rel_items = ps.items_from_frame(rel)
            small = ps.small_classes(rel_items, population, QIS, rk, aliases=aliases)
            if len(small):
                out.append(self._small_text(f"the rows {name} returned", small, len(rel_items), rk, aliases))
        return out

    def domain_findings(self, column_values: set[str] | None = None) -> list[str]:
        """A HIT whose answer domain has one value, or equals the few (<= 3) ground truths of the rows it asks about."""
        out = []
        for d in self.domains():
            dom = d["domain"]
            if dom is None:
                continue
            truth = {t for t in (d["truth"] or []) if t is not None}
            if len(set(dom)) == 1:
                out.append(f"HIT {d['hit_id']}: the answer domain shown to workers is one value {dom} "
                           f"({d['n_items']} items): every row asked about has it")
            elif truth and set(dom) == truth and len(truth) <= 3 and (column_values is None
                                                                        or set(dom) != set(column_values)):
                out.append(f"HIT {d['hit_id']}: the answer domain shown to workers {sorted(dom)} is exactly the "
                           f"ground truths of the {len(d['truth'])} rows asked about")
        return out

    def findings(self, population: pd.DataFrame, *, aliases: dict | None = None, k: int = K,
                 domain: bool = True) -> list[str]:
        """Everything "no leak" forbids in what workers saw: canary markers, protected values (sensitive, ground
        truth, key, columns never declared core), QI classes below k, and an answer domain that gives the rows away."""
        out = self.canary_findings() + self.late_refusals
        seen = set()
        for (frame, roles) in self.tables.values():
            if id(frame) in seen:
                continue
            seen.add(id(frame))
            cols = [c for c in (*roles.get("sensitive", ()), roles.get("ground_truth")) if c and c in frame]
            protected = [c for c in dict.fromkeys(cols)
                         if not frame[c].astype(str).str.startswith("CANARY-").all()]  # markers: canary_findings
            key = roles.get("key")
            if key and not pd.api.types.is_numeric_dtype(frame[key]):
                key = None  # a canary key: its markers are looked for everywhere
            noncore = [c for c in NONCORE_TEXT if c in frame]
            out += self.protected_findings(frame, protected, key, noncore)
        out += self.class_findings(population, k, aliases)
        if domain:
            out += self.domain_findings()
        return out

    def composition(self, table: pd.DataFrame, aliases: dict | None = None) -> cc.Report:
        releases = cc.releases_from_hit_items(self.catalog_reader())
        for name, rel, k in self.released:
            releases.append(cc.release_from_frame(name, rel, k))
        return cc.check(table, QIS, releases, token="token", aliases=aliases)

    # -- outcome -------------------------------------------------------------------------------------------------

    def verdict(self, findings: list[str], context: str = "") -> None:
        """Fail with every finding (a leak), else record whether the attack was refused or ran safely."""
        if findings:
            self.request.node.user_properties.append(("attack_outcome", "leak"))
            ran = "; ".join(f"{status}: {label[:120]!r}" + (f" ({why[:160]})" if why else "")
                            for label, status, why in self.log)
            pytest.fail("LEAK: " + " | ".join(findings) + (f" [{context}]" if context else "") +
                        f"\n  statements: {ran}", pytrace=False)
        self.request.node.user_properties.append(("attack_outcome", "refused" if self.refused else "safe"))
        if os.environ.get("ATTACK_VERBOSE"):
            print(f"\n[{self.request.node.name}] " + ("refused: " + self.refusals() if self.refused else
                                                      f"ran safely ({len(self.crowd.batches)} batches published, columns "
                                                      f"{[b['columns'] for b in self.crowd.batches]}; "
                                                      f"{len(self.released)} releases returned)"))

    def reopen(self) -> None:
        """Close the database and open the same file again (same crowd, same seed)."""
        self.db.close()
        self.db = crowddb.connect(str(self.path), platform=self.crowd, seed=self.seed, progress=False,
                                  config={"threads": 1})

    def close(self):
        if self._plain is not None:
            self._plain.close()
        self.db.close()




# ------------------------------------------------------------------------------------ ledgers and budgets

def ledger_findings(env, table: pd.DataFrame, name: str = "adult") -> list[str]:
    out = []
    report = env.composition(table)
    if report.violations:
        out.append(f"joint classes below k across releases (independent checker): {report.summary()}")
    privacy = env.call("privacy_report", lambda: env.db.privacy_report(name))
    if privacy is not None and "smallest_joint_class" in privacy and report.smallest is not None:
        said = privacy["smallest_joint_class"].dropna()
        said = int(said.min()) if len(said) else None
        if said != report.smallest:
            releases = ", ".join(str(r) for r in privacy.get("ledger_release", pd.Series()).dropna())
            out.append(f"privacy_report({name!r}) says smallest_joint_class={said} (releases on record: {releases}); "
                       f"the independent checker finds {report.smallest} over {len(report.releases)} releases")
    return out



ANSWERS = pd.DataFrame({"task": [1, 2, 3, 1, 2, 1], "worker": ["a", "a", "a", "b", "b", "c"],
                        "label": ["x", "y", "x", "x", "y", "y"]})
DISCOVER = ("SELECT * FROM TRUTH_DISCOVER({src}, object := 'task', source := 'worker', value := 'label', "
            "method := 'mv', perturb := 'rr', epsilon := 0.5, seed := 1)")


def released_epsilon(env, per_call: list[tuple[str, float]], answers: pd.DataFrame) -> dict[str, float]:
    """Epsilon each original worker's answers were released at (epsilon per answer x the worker's answers), summed
    over every statement of ``per_call`` (text -> epsilon per answer) that returned a noisy result."""
    counts = answers["worker"].value_counts()
    eps_of = dict(per_call)
    total = {w: 0.0 for w in counts.index}
    for label, status, _why in env.log:
        if status == "ok" and label in eps_of:
            for w, n in counts.items():
                total[w] += eps_of[label] * n
    return total


def budget_findings(env, calls: list[tuple[str, float]], budget: float = 2.0, answers=ANSWERS) -> list[str]:
    spent = released_epsilon(env, calls, answers)
    over = {w: e for w, e in spent.items() if e > budget + 1e-9}
    if over:
        return [(f"epsilon released beyond the budget of {budget} per worker: {over} "
                f"({sum(1 for lab, st, _ in env.log if st == 'ok' and lab in dict(calls))} noisy releases returned)")]
    return []


def verdict(request, findings: list[str], refused: bool = False) -> None:
    """The verdict of a case that needs no attacked-database harness (files at rest)."""
    if findings:
        request.node.user_properties.append(("attack_outcome", "leak"))
        pytest.fail("LEAK: " + " | ".join(findings), pytrace=False)
    request.node.user_properties.append(("attack_outcome", "refused" if refused else "safe"))
