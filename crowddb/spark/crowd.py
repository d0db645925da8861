"""Human operators over a Spark table (issue 27): ``SELECT c, getposition(*, k := 10) AS job FROM spark.t WHERE ...``.

The rows the statement asks about stay in Spark until they are released: the WHERE's rows are anonymized on Spark as
a release of the table in its Spark ledger (crowddb/spark/ledger.py: Mondrian on Spark over the declared
quasi-identifiers, checked against the table's earlier releases and on record before anything is published). Only
that release reaches the driver, without the sensitive columns: each row's generalized labels and other columns,
its key and its ground truth (never published; the simulated crowd answers from it). The driver asks the crowd about
it as about any local table (the local operator's packing, HITs, payments, cache and budget, through the same
``Platform``), with nothing left to generalize: the labels a HIT shows are the release's. The answers go back to
Spark as a small table, joined to the statement's rows by the key, and the rest of the statement runs on Spark.

A group operator (``SELECT c.workclass, getcandidate(*, 'teacher') AS pick FROM spark.t c WHERE ... GROUP BY
c.workclass``) is asked the same way: Spark numbers each row's group (the GROUP BY's values, compared by Spark, as
its GROUP BY compares them), the number travels with the release to the driver, the local operator picks one row per
numbered group (knock-out rounds included), and each row of a group gets its group's pick, joined back by the key; the
statement's GROUP BY then reads it once per group. The GROUP BY reads only what the guard lets a statement read (no
protected column), so the numbers carry nothing a HIT may not show, and no HIT shows them.

One human operator per statement, a select item of the outermost SELECT over one declared Spark table (filtered by
WHERE, grouped by GROUP BY for a group operator). What else the statement asks for is refused, naming what runs.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from crowddb import _sql
from crowddb._duck import registered
from crowddb._sql import DIALECT, identifier
from crowddb.errors import ArgumentError, PrivacyError
from crowddb.query.plan import bind, split_arguments
from crowddb.query.text import SPARK, spark_name
from crowddb.spark import ledger
from crowddb.spark.mondrian import CLASS

__all__ = ["MAX_ROWS", "HumanCall", "ask", "find"]

#: the most rows one statement on Spark asks the crowd about: they are released to the driver and paid for
MAX_ROWS = 1_000_000
#: the most answers a question read from a ground-truth column offers
MAX_ANSWERS = 1_000
_KEY = "__crowd_key"  # the key's name in the table of answers (one the user's columns cannot clash with)
_GROUP = "__crowd_group"  # each row's group number, numbered by Spark (group operators)
_SHAPE = ("a human operator on Spark is a select item of the outermost SELECT over one Spark table, its rows chosen "
          "by WHERE: SELECT c, getposition(*, k := 10) AS job FROM spark.t WHERE ..., or SELECT g, "
          "getcandidate(*, 'teacher') AS pick FROM spark.t WHERE ... GROUP BY g")


@dataclasses.dataclass
class HumanCall:
    """The statement's human operator call: its node, its table, the name its answer takes, its definition and
    ``k``."""

    node: exp.Anonymous
    table: str                # the Spark table it asks about, as the statement names it
    alias: str
    op: Any                   # the operator's definition (crowddb.udf.HumanOperator)
    k: int
    sentinel: str             # the literal standing in for the call while the statement is guarded
    group: bool = False       # a group operator: one answer per GROUP BY group

    def placeholder(self, statement: exp.Expression) -> exp.Expression:
        """The statement with the call replaced by a string literal (``sentinel``): what the rest of it reads is
        guarded as any statement on Spark, and the answers take the literal's place afterwards."""
        out = statement.copy()
        for node in out.find_all(exp.Anonymous):
            if node == self.node:
                node.replace(exp.Literal.string(self.sentinel))
                break
        return out


def find(statement: exp.Expression, registry: Any) -> HumanCall | None:
    """The statement's human operator call (None: it calls none); ArgumentError for a shape that does not run on
    Spark."""
    calls = [n for n in statement.find_all(exp.Anonymous) if n.name in registry]
    if not calls:
        return None
    names = sorted({c.name for c in calls})
    if len(calls) > 1:
        raise ArgumentError(f"one human operator per statement on Spark, this one calls {len(calls)} ({names}); "
                            f"{_SHAPE}")
    node = calls[0]
    op = registry.get(node.name)
    group = getattr(op, "kind", "tuple") == "group"
    item = node.parent if isinstance(node.parent, exp.Alias) else node
    select = item.parent
    if not isinstance(statement, exp.Select) or select is not statement or item not in statement.expressions:
        raise ArgumentError(f"{node.sql(DIALECT)}: {_SHAPE}")
    extra = [name.rstrip("_") for name in ("with_", "joins", "laterals", "group", "having", "qualify", "windows",
                                           "limit", "offset", "distinct", "sample", "connect", "prewhere")
             if statement.args.get(name) and not (group and name == "group")]
    by = statement.args.get("group")
    if group and by is not None and (any(by.args.get(a) for a in ("grouping_sets", "cube", "rollup", "all", "totals"))
                                     or any(e.find(exp.Var, exp.Star, exp.Rollup, exp.Cube, exp.GroupingSets)
                                            for e in by.expressions)):
        raise ArgumentError(f"{node.name} on Spark: GROUP BY names its groups' expressions (not ALL, ROLLUP, CUBE or "
                            f"GROUPING SETS): each group is one question; {_SHAPE}")
    if extra:
        raise ArgumentError(f"{node.name} on Spark: the statement's {', '.join(extra)} is not supported with a human "
                            f"operator (the crowd is asked about every row WHERE keeps, and paid for each); {_SHAPE}. "
                            "Release the table with ANONYMIZE for anything else")
    source = statement.args.get("from_")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or spark_name(table) is None:
        raise ArgumentError(f"{node.name} on Spark reads one Spark table, spark.<name>; {_SHAPE}")
    positional = split_arguments(node, node.name)[0]
    if not positional or not isinstance(positional[0], exp.Star):
        raise ArgumentError(f"{node.name}(*, ...) on Spark asks about whole rows (the release of every column a HIT "
                            "may show); name the columns a HIT shows by declaring them core: "
                            "db.declare_roles('spark:<name>', ..., core=[...])")
    # the call's own arguments and overrides (k an integer of at least 2 among them), checked before anything is
    # released, by the rules the local operator binds with
    definition = bind(node, registry).definition
    if definition.anonymizer != "mondrian":  # the call's override or the operator's own definition (its TOML)
        raise ArgumentError(f"{node.name} on Spark generalizes with Mondrian on Spark (the Spark ledger's release); "
                            f"anonymizer {definition.anonymizer!r} runs on local tables only: pass "
                            "anonymizer := 'mondrian'")
    k = definition.k
    alias = item.alias if isinstance(item, exp.Alias) else node.name
    return HumanCall(node, spark_name(table), alias, op, int(k), f"__crowd_human_{uuid.uuid4().hex}", group)


def _groups(human: HumanCall, checked: exp.Select) -> list[exp.Expression]:
    """A group operator's GROUP BY expressions, as the guard qualified them (ordinals and aliases expanded); one
    naming the operator's own answer is refused."""
    by = checked.args.get("group")
    exprs = []
    for e in by.expressions if by is not None else []:
        if isinstance(e, exp.Literal) and e.is_int:  # GROUP BY 2: the second select item, in Spark as in DuckDB
            at = int(e.this) - 1
            if not 0 <= at < len(checked.expressions):
                raise ArgumentError(f"{human.node.name}: GROUP BY {e.this} names no select item; {_SHAPE}")
            e = checked.expressions[at].unalias()
        exprs.append(e.copy())
    for e in exprs:
        if any(lit.is_string and lit.this == human.sentinel for lit in e.find_all(exp.Literal)):
            raise ArgumentError(f"{human.node.name}: GROUP BY names the operator's own answer; group by the table's "
                                f"columns: {_SHAPE}")
    return exprs


def _input(checked: exp.Select, groups: list[exp.Expression] | None = None) -> exp.Select:
    """The rows the crowd is asked about: every column of the statement's table, the rows its WHERE keeps; with
    ``groups`` (a group operator's GROUP BY) each row's group number too, by Spark's own comparison of the values
    (DENSE_RANK over them: one number per distinct GROUP BY tuple, NULLs a group of their own as GROUP BY makes
    them)."""
    columns: list[exp.Expression] = [exp.Star()]
    if groups is not None:
        number = (exp.Window(this=exp.Anonymous(this="DENSE_RANK"), order=exp.Order(expressions=[
            exp.Ordered(this=g, nulls_first=True) for g in groups])) if groups else exp.Literal.number(1))
        columns.append(exp.alias_(number, _GROUP, quoted=True))
    rows = exp.select(*columns).from_(checked.args["from_"].copy())
    where = checked.args.get("where")
    return rows.where(where.this.copy()) if where is not None else rows


def _domain(human: HumanCall, table: DataFrame, truth: str | None) -> list[str] | None:
    """The answers a tuple operator offers when neither its definition nor the call lists them: every value of the
    Spark table's ground-truth column (all its rows, never only those asked about: workers would learn their values
    from the choices), as text, sorted; counted by Spark, only the values reach the driver."""
    if isinstance(human.op.domain, tuple) or any(
            isinstance(a, (exp.PropertyEQ, exp.Kwarg, exp.EQ)) and a.this.name.lower() == "domain"
            for a in human.node.expressions):
        return None
    if truth is None:
        raise ArgumentError(f"{human.node.name}: its answers are the values of the ground-truth column, and "
                            f"spark.{human.table} declares none; declare it (db.declare_roles('spark:{human.table}', "
                            "..., ground_truth='c')) or pass the answers with domain := ['...', '...']")
    values = table.where(F.col(truth).isNotNull()).select(F.col(truth).cast("string").alias("v")).distinct()
    found = sorted(r["v"] for r in values.limit(MAX_ANSWERS + 1).collect())
    if len(found) > MAX_ANSWERS or len(found) < 2:
        raise ArgumentError(f"{human.node.name}: the ground truth spark.{human.table}.{truth} holds "
                            f"{'more than ' + str(MAX_ANSWERS) if len(found) > MAX_ANSWERS else len(found)} distinct "
                            f"value(s); a question offers 2 to {MAX_ANSWERS} answers: pass them with domain := [...]")
    return found


def _local_call(human: HumanCall, table: str, domain: list[str] | None) -> exp.Select:
    """The call over the released rows, in the local database: the same operator and arguments (the release's
    labels are shown as they are: the local table declares no quasi-identifier), each answer by the row's number
    (a tuple operator) or by the group's number (a group operator, grouped by it)."""
    call = human.node.copy()
    if domain is not None:
        call.append("expressions", exp.PropertyEQ(this=exp.Identifier(this="domain"), expression=exp.Array(
            expressions=[exp.Literal.string(v) for v in domain])))
    by = exp.column(_GROUP if human.group else "rowid", table=table, quoted=True)
    select = exp.select(exp.alias_(by, _GROUP if human.group else "__crowd_row", quoted=True),
                        exp.alias_(call, human.alias, quoted=True)).from_(exp.Table(this=identifier(table)))
    return select.group_by(by.copy()) if human.group else select


def ask(db: Any, spark: SparkSession, human: HumanCall, checked: exp.Select, table: DataFrame,
        roles: dict[str, Any], ledger_name: str, to_spark: Callable[[exp.Expression], str]
        ) -> tuple[exp.Select, str]:
    """Release the statement's rows on Spark, ask the crowd about them from the driver and return the checked
    statement with the answers joined in (a temp view of the Spark session, whose name is returned too: the caller
    drops it once the statement is analysed)."""
    key, truth = roles["key"], roles.get("ground_truth")
    rows = spark.sql(to_spark(_input(checked, _groups(human, checked) if human.group else None)))
    counts = ledger.key_counts(rows, key)  # the release's own check of the key reads them again: counted once
    n = counts[0]
    if n > MAX_ROWS:
        raise ArgumentError(f"{human.node.name}: the statement asks the crowd about {n:,} rows of "
                            f"spark.{ledger_name}, more than {MAX_ROWS:,} (each is released to the driver and paid "
                            "for); choose fewer rows with WHERE")
    if n == 0:
        raise ArgumentError(f"{human.node.name}: the statement's WHERE keeps no row of spark.{ledger_name}; nothing "
                            "to ask the crowd")
    domain = _domain(human, table, truth)  # before anything is released
    released = ledger.release(db, rows, human.k, name=ledger_name, keep_key=True, counts=counts)
    # what reaches the driver: the release without its sensitive columns and class, the key under our name
    dropped = set(roles["sensitive"]) - {truth} | {CLASS}
    shown = [c for c in released.columns if c not in dropped]
    # in the key's order: the HITs a seed splits the rows into do not depend on Spark's partitions
    arrow = released.select(*shown).orderBy(key).withColumnRenamed(key, _KEY).toArrow()
    answers = _asked(db, human, arrow, truth, roles.get("core") or [], domain)
    _describe(db, human, ledger_name, roles)
    view = f"__crowd_spark_answers_{uuid.uuid4().hex[:12]}"
    spark.createDataFrame(answers).createOrReplaceTempView(view)
    return _joined(human, checked, view, key, [c for c in answers.column_names if c != _KEY]), view


def _asked(db: Any, human: HumanCall, arrow: pa.Table, truth: str | None, core: list[str],
           domain: list[str] | None) -> pa.Table:
    """The crowd's answers about the released rows (a local temp table, its roles declared for the run, dropped
    after): (key, answer[, confidence]) per row."""
    local = f"__crowd_spark_rows_{uuid.uuid4().hex[:12]}"
    con, name = db.con, _sql.table(local).sql(DIALECT)
    with registered(con, **{f"{local}_arrow": arrow}):
        con.execute(f"CREATE TEMP TABLE {name} AS {_sql.select_all(f'{local}_arrow').sql(DIALECT)}").fetchall()
    try:
        if truth is not None and truth not in arrow.column_names:
            raise PrivacyError(f"{human.node.name}: the ground truth {truth!r} is not in the release")
        db.declare_roles(local, key=_KEY, ground_truth=truth, core=[c for c in core if c in arrow.column_names])
        got = db.sql(_local_call(human, local, domain).sql(DIALECT)).to_arrow_table()
    finally:
        db.declare_roles(local)  # no roles: the catalog forgets the temp table
        con.execute(f"DROP TABLE IF EXISTS {name}").fetchall()
    if human.group:  # each row gets its group's answer: the key of the row the crowd picked
        rows = arrow.select([_KEY, _GROUP]).join(got, _GROUP, join_type="left outer")
        return rows.drop_columns([_GROUP])
    keys = arrow.column(_KEY).take(got.column("__crowd_row"))
    return pa.table({_KEY: keys, **{c: got.column(c) for c in got.column_names if c != "__crowd_row"}})


def _describe(db: Any, human: HumanCall, ledger_name: str, roles: dict[str, Any]) -> None:
    """``db.last_plan`` as the user reads it: the local run's operator rows say what the Spark release promised (its
    k, Mondrian on Spark, the release on record) and what was withheld, by the Spark table's names, not the driver's
    temp table's."""
    plan = db.last_plan
    if plan is None:
        return
    number = int(ledger.releases(db, ledger_name)["release_no"].max())
    table = f"spark.{human.table}"
    key, truth = roles["key"], roles.get("ground_truth")
    withheld = {key: f"key {table}.{key}"}
    if truth is not None:
        withheld[truth] = f"ground truth {table}.{truth}"
    withheld.update({c: f"sensitive {table}.{c}; it never left Spark" for c in roles["sensitive"] if c != truth})
    for op in plan.operators:
        op.k, op.anonymizer, op.ncp = human.k, f"mondrian on Spark (release {number} of spark:{ledger_name})", None
        op.withheld = withheld


def _joined(human: HumanCall, checked: exp.Select, view: str, key: str, answers: list[str]) -> exp.Select:
    """The checked statement with the sentinel replaced by the answer (and its confidence, when the run reports
    one, right after it) and the answers' view joined to its table by the key."""
    out = checked.copy()
    table = out.args["from_"].this
    alias = table.alias_or_name
    a = "__crowd_answers"
    sentinel = next(lit for lit in out.find_all(exp.Literal) if lit.is_string and lit.this == human.sentinel)
    item = sentinel.parent if isinstance(sentinel.parent, exp.Alias) else sentinel
    at = out.expressions.index(item)
    # a group operator's answers are one per group, on each of its rows: the statement's GROUP BY reads them once
    columns = [exp.alias_(exp.Max(this=exp.column(c, table=a, quoted=True)) if human.group
                          else exp.column(c, table=a, quoted=True), c, quoted=True) for c in answers]
    out.set("expressions", out.expressions[:at] + columns + out.expressions[at + 1:])
    join = exp.Join(this=exp.Table(this=identifier(view), db=identifier(SPARK), alias=exp.TableAlias(
        this=identifier(a))), kind="LEFT", on=exp.EQ(this=exp.column(key, table=alias, quoted=True),
                                                       expression=exp.column(_KEY, table=a, quoted=True)))
    out.set("joins", [join])
    return out
