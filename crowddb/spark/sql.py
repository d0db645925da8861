"""crowddb SQL on Spark (issue 27): a statement given to ``db.sql(...)`` that names a Spark table, written
``spark.<name>`` (a table or temp view of the SparkSession passed to ``crowddb.connect(..., spark=session)``), runs
on Spark, with the same privacy promise as locally.

One statement's way (every refusal is a crowddb error raised before anything runs or is recorded):

1. Found by parsing (sqlglot, DuckDB's dialect): an ``exp.Table`` whose schema part is ``spark``, or a table
   function whose input is one. Only one statement, a query (SELECT, WITH ... SELECT, set operations), runs on
   Spark; any other statement naming ``spark.`` is refused (the statement gate), as is any other table in it (Spark
   cannot read DuckDB's tables, and an unprefixed name would reach Spark's catalog unchecked).
2. ``ANONYMIZE(spark.t, k := 10 [, keep_key, method := 'mondrian', strict := true | false, sensitive, l,
   hierarchies, quasi_identifiers := [the declared ones]])`` becomes the ledger's recorded release of the declared
   table (``crowddb.spark.ledger.release``; ``strict := false``: relaxed cuts, rows taken in the key's order);
   ``TRUTH_DISCOVER(spark.answers, object :=, source :=, value := [, method, output, tol, max_iter, perturb,
   epsilon, delta, seed, options])`` becomes ``crowddb.spark.truth.truth_discover``'s objects or sources (with
   ``perturb :=``, local DP on Spark: an integer ``seed :=`` is required, the output gains the epsilon and delta
   columns, and the budget ``db.set_privacy_budget('spark:<name>', ...)`` sets is charged as locally, see
   ``_truth_charge``). ``PRIVATE_SYNTH(spark.claims, object :=, source :=, value := [, the local arguments])``
   becomes ``crowddb.spark.synth.private_synth``'s rows (object, value), its charge the local one (the per-source
   sums computed in Spark), checked against ``spark:<name>``'s budget before anything runs and recorded with the
   release (crowddb/spark/synth.py: ``sql_charge``, ``record_sql``). Each is a temp view with a fresh name in the
   statement.
3. The guard: a column of a Spark table with declared roles that is a quasi-identifier, a sensitive column or the
   key may not be read anywhere outside ANONYMIZE (select list, WHERE, JOIN, GROUP BY, ORDER BY, HAVING, windows,
   subqueries, CTEs; ``*`` and a whole-row reference read every column), since rows chosen by a protected column
   give it away as much as showing it. Columns are found by sqlglot's own ``qualify`` (with a schema of the Spark
   tables' columns: stars expanded, USING and NATURAL joins written out) and scope analysis; a column it cannot
   resolve, a call that is not one of DuckDB's own side-effect-free built-ins (``crowddb.privacy.functions``, the
   local allow list), a call of a function the Spark session defines (a UDF may shadow a built-in, and a SQL UDF may
   read a table) and DuckDB's ``COLUMNS(...)`` are refused: unknown means refused.
4. The checked statement, table functions replaced by their views and ``spark.<name>`` by ``<name>``, is transpiled
   by sqlglot (``dialect='spark'``) and analysed by Spark with the releases' exact (empty) schemas before any release
   is made, so a statement Spark rejects records nothing; then the release is made and recorded, and
   ``spark.sql(...)`` runs the statement. ``db.sql`` returns its Spark DataFrame.
5. A human operator (``SELECT c, getposition(*, k := 10) AS job FROM spark.t WHERE ...``, crowddb/spark/crowd.py)
   is guarded with a literal in its place; the WHERE's rows are then released in the table's Spark ledger, the crowd
   is asked about the release from the driver as about a local table, and the answers, a temp view, are joined to
   the statement's rows by the key before Spark runs it.

Fail closed on names the roles do not cover: an undeclared Spark table that reads what a declared one reads (a view
over it, a DataFrame derived from it, the same files read again: found by the semantic hashes of their plans'
leaves) is refused until its roles are declared. A documented limit: at most one ANONYMIZE per statement (two
releases are two ledger records, which one statement could not undo together).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import uuid
from typing import Any

import duckdb
import pandas as pd
import sqlglot
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.tokens import TokenType

from crowddb._sql import DIALECT, identifier
from crowddb.arguments import NUMBER, REQUIRED, SEED, Param, bind
from crowddb.errors import ArgumentError, CrowdDBError, PrivacyBudgetError, PrivacyError, StatementRefusedError
from crowddb.operators.table_functions.truth_discover import (
    check_privacy_arguments,
    perturbation_charge,
    truth_release,
)
from crowddb.privacy import identity
from crowddb.privacy.functions import Functions
from crowddb.query import params as query_params
from crowddb.query.plan import split_arguments
from crowddb.query.text import SPARK, is_table_function, spark_name, spark_tables, table_parts
from crowddb.spark import crowd, ledger, synth
from crowddb.spark.mondrian import CLASS
from crowddb.spark.truth import truth_discover
from crowddb.store import Store, privacy

__all__ = ["check_session", "declare_roles", "roles", "run_on_spark"]

_VIEW_PREFIX = "__crowd_spark_"  # the temp views of a statement's table functions (a fresh name each)
#: ANONYMIZE's and TRUTH_DISCOVER's SQL arguments, as the local specs declare them
#: (crowddb/operators/table_functions/anonymize.py, truth_discover.py)
_ANONYMIZE = {"k": Param(int, 10), "method": Param(str, "mondrian"), "quasi_identifiers": Param(list, None),
              "strict": Param(bool, True), "sensitive": Param(str, None), "l": Param(int, None), "seed": SEED,
              "hierarchies": Param(dict, None), "keep_key": Param(bool, False)}
_TRUTH = {"object": Param(str, REQUIRED), "source": Param(str, REQUIRED), "value": Param(str, REQUIRED),
          "method": Param(str, "auto"), "output": Param(str, "objects"), "perturb": Param(str, None),
          "epsilon": Param(NUMBER, None), "delta": Param(NUMBER, None), "seed": SEED, "tol": Param(NUMBER, 1e-6),
          "max_iter": Param(int, 100)}
_TRUTH_COLUMNS = {"objects": ["object", "truth", "confidence"], "sources": ["source", "weight"]}
_WORKS = ("what runs on Spark today: SELECT queries over spark.<name> tables, ANONYMIZE(spark.<name>, k := ...) of a "
          "table whose roles are declared, a human operator over one (SELECT c, getposition(*, k := 10) AS job FROM "
          "spark.<name> WHERE ...), and TRUTH_DISCOVER(spark.<name>, object := ..., source := ..., value := "
          "... [, perturb := ..., epsilon := ..., seed := <an integer>]) and PRIVATE_SYNTH(spark.<name>, object := "
          "..., source := ..., value := ...), charged to db.set_privacy_budget('spark:<name>', ...)")


# ------------------------------------------------------------------------------------------ roles of Spark tables
def check_session(spark: Any) -> SparkSession:
    """``crowddb.connect(..., spark=session)``'s session, checked."""
    if not isinstance(spark, SparkSession):
        raise ArgumentError(f"spark must be a pyspark.sql.SparkSession (SparkSession.builder.getOrCreate()), got "
                            f"{type(spark).__name__}")
    return spark


def _session(db: Any) -> SparkSession:
    spark = getattr(db, "spark", None)
    if spark is None:
        raise ArgumentError("this crowddb database has no Spark session: connect with crowddb.connect(path, "
                            "spark=SparkSession.builder.getOrCreate()) to name Spark tables (spark:<name>, "
                            "spark.<name>)")
    return spark


def _catalog_table(spark: SparkSession, name: str) -> DataFrame:
    """The Spark catalog's table or temp view ``name``, as a DataFrame (its plan only: nothing runs)."""
    try:
        return spark.table(f"`{name.replace('`', '``')}`")
    except (AnalysisException, ParseException):
        raise ArgumentError(f"spark.{name}: no such table or temp view in the Spark session's catalog; register "
                            f"one first (df.createOrReplaceTempView({name!r}) or df.write.saveAsTable({name!r}))"
                            ) from None


def _ledger_name(db: Any, name: str) -> str | None:
    """The ledger's name of the Spark catalog table ``name``: Spark's catalog compares names case-insensitively, so
    does this (a table declared as 'Census' is spark.census); None when none is declared. Two declared names that
    differ only in case are refused: which ledger holds the rows' history could not be told."""
    found = [n for n in ledger.declared(db) if n.lower() == name.lower()]
    if len(found) > 1:
        raise PrivacyError(f"spark.{name}: roles are declared under {sorted(found)}, which Spark's catalog reads as "
                           "one table; crowddb cannot tell which ledger holds its rows")
    return found[0] if found else None


def _leaves(table: DataFrame) -> set[int]:
    """What ``table`` reads, whatever view, query or DataFrame names it: the semantic hashes of its analysed plan's
    leaves (Spark's canonical form of each relation it scans: the same rows read under another name hash alike)."""
    leaves = table._jdf.queryExecution().analyzed().collectLeaves()
    return {int(leaves.apply(i).semanticHash()) for i in range(leaves.size())}


def _refuse_copies_of_declared(db: Any, spark: SparkSession, undeclared: dict[str, DataFrame]) -> None:
    """Fail closed on names the roles do not cover: an undeclared Spark table that reads what a declared one reads (a
    view over it, a DataFrame derived from it, its files read again) would carry its protected columns past the
    guard, so it is refused until its own roles are declared. A declared table that is not in the session's catalog
    cannot be compared and is passed over (nothing here reads it by that name)."""
    if not undeclared:
        return
    protected: dict[int, str] = {}
    for name in ledger.declared(db):
        try:
            table = spark.table(f"`{name.replace('`', '``')}`")
        except (AnalysisException, ParseException):
            continue
        for leaf in _leaves(table):
            protected.setdefault(leaf, name)
    for name, table in undeclared.items():
        source = next((protected[leaf] for leaf in sorted(_leaves(table)) if leaf in protected), None)
        if source is not None:
            raise PrivacyError(f"spark.{name} reads the rows of spark.{source}, whose roles are declared, and has no "
                               f"roles of its own, so crowddb cannot tell which of its columns are protected; declare "
                               f"them (db.declare_roles('spark:{name}', ...)) or read spark.{source} itself. Nothing "
                               "ran or was recorded")


def declare_roles(db: Any, name: str, *, quasi_identifiers=(), sensitive=(), core=(), ground_truth=None,
                  key: str | None = None, kinds=None) -> dict[str, Any]:
    """``db.declare_roles('spark:<name>', ...)``: the roles of the Spark catalog table ``name``, declared through
    ``crowddb.spark.ledger.declare_roles`` (the name already declared under another case is kept)."""
    spark = _session(db)
    df = _catalog_table(spark, name)
    return ledger.declare_roles(db, _ledger_name(db, name) or name, df, quasi_identifiers=quasi_identifiers,
                                sensitive=sensitive, key=key, kinds=kinds, ground_truth=ground_truth, core=core)


def roles(db: Any, name: str) -> dict[str, Any]:
    """``db.roles('spark:<name>')``: the declared roles of the Spark table ``name``."""
    _session(db)
    return ledger.roles(db, _ledger_name(db, name) or name)


# ------------------------------------------------------------------------------------------ table functions
@dataclasses.dataclass
class _Call:
    """One table function of the statement, to become a temp view of the name ``view``."""

    kind: str                 # 'anonymize' | 'truth_discover'
    table: str                # the Spark table it reads
    args: dict[str, Any]
    options: dict[str, Any]   # TRUTH_DISCOVER's method options
    view: str
    columns: list[str]        # the view's columns


def _bind_call(node: exp.Table, tables: dict[str, DataFrame], declared: dict[str, dict | None]) -> _Call:
    call = node.this
    kind = call.name.lower()
    what = call.name.upper()
    positional, named = split_arguments(call, what)
    name = spark_name(positional[0]) if len(positional) == 1 and isinstance(
        positional[0], (exp.Column, exp.Table)) else None
    if name is None:
        raise ArgumentError(f"{what} on Spark takes one input, a Spark table spark.<name>, then named arguments; "
                            f"got {call.sql(DIALECT)}")
    columns = tables[name].columns
    view = f"{_VIEW_PREFIX}{uuid.uuid4().hex[:12]}"
    if kind == "anonymize":
        args = bind(what, named, _ANONYMIZE)
        roles_of = declared[name]
        if roles_of is None:
            raise ArgumentError(f"ANONYMIZE(spark.{name}): its roles are not declared; declare them first: "
                                f"db.declare_roles('spark:{name}', quasi_identifiers=[...], sensitive=[...], "
                                "key='id')")
        unsupported = {"method": args["method"] != "mondrian", "seed": args["seed"] is not None}
        refused = [a for a, bad in unsupported.items() if bad]
        if refused:
            raise ArgumentError(f"ANONYMIZE(spark.{name}): {', '.join(refused)} := ... is not available on Spark "
                                "(it runs Mondrian, unshuffled, over the declared quasi-identifiers: k, keep_key, "
                                "strict (relaxed cuts take rows in the key's order), sensitive and l, hierarchies, "
                                "method := 'mondrian', quasi_identifiers := the declared ones); run the rest locally")
        hierarchies = args["hierarchies"]
        if hierarchies is not None and not all(isinstance(v, str) for v in hierarchies.values()):
            raise ArgumentError("ANONYMIZE: hierarchies := {'column': 'path/to/arx.csv', ...} takes ARX CSV paths")
        qis = roles_of["quasi_identifiers"]
        if args["quasi_identifiers"] is not None and sorted(map(str.lower, args["quasi_identifiers"])) != sorted(
                map(str.lower, qis)):
            raise ArgumentError(f"ANONYMIZE(spark.{name}): quasi_identifiers := {args['quasi_identifiers']} differs "
                                f"from the declared {qis}; the ledger checks releases over the declared ones: "
                                f"declare them with db.declare_roles('spark:{name}', ...) or leave the argument out")
        key = roles_of["key"]
        if not args["strict"] and key in columns:
            ledger.integer_key(tables[name], key, f"ANONYMIZE(spark.{name}, strict := false)",
                               "declare an integer key or use strict := true")
        out = [c for c in columns if args["keep_key"] or c != key] + [CLASS]
        return _Call(kind, name, args, {}, view, out)
    if kind == "truth_discover":
        spec_named = {k: v for k, v in named.items() if k in _TRUTH}
        options = {k: v for k, v in named.items() if k not in _TRUTH}
        args = bind(what, spec_named, _TRUTH)
        if args["output"] not in _TRUTH_COLUMNS:
            raise ArgumentError(f"TRUTH_DISCOVER: output must be 'objects' or 'sources', got {args['output']!r}")
        check_privacy_arguments(args)
        if args["perturb"] is not None and args["seed"] is None:
            raise ArgumentError(f"TRUTH_DISCOVER(spark.{name}): perturb := ... on Spark needs seed := <a non-negative "
                                "integer>: Spark draws its noise from a seeded hash stream (reproducible, for "
                                "experiments only). For a production release (secure noise, no seed) run it locally "
                                "(TRUTH_DISCOVER over a DuckDB table)")
        privacy_columns = ["epsilon", "delta"] if args["perturb"] is not None else []
        return _Call(kind, name, args, options, view, [*_TRUTH_COLUMNS[args["output"]], *privacy_columns])
    if kind == "private_synth":  # crowddb/spark/synth.py: the local arguments, checked before anything runs
        return _Call(kind, name, synth.bind_sql(named), {}, view, ["object", "value"])
    raise ArgumentError(f"{what}(spark.{name}) does not run on Spark yet; {_WORKS}")


# ------------------------------------------------------------------------------------------ the guard
@functools.cache
def _functions() -> Functions:
    """The local allow list of calls (crowddb.privacy.functions) over a pristine DuckDB: DuckDB's own built-ins
    without side effects or session state; the statement is written in DuckDB's dialect and transpiled from it."""
    return Functions(duckdb.connect())


def _schema(tables: dict[str, DataFrame], calls: list[_Call]) -> dict[str, dict[str, dict[str, str]]]:
    """``{'spark': {table: {column: type}}}`` for qualify: the Spark tables' columns, and the views' columns."""
    out: dict[str, dict[str, str]] = {}
    for name, df in tables.items():
        out[name] = {f.name: _type(f.dataType.simpleString()) for f in df.schema.fields}
    for call in calls:
        out[call.view] = dict.fromkeys(call.columns, "TEXT")
    return {SPARK: out}


def _type(spark_type: str) -> str:
    try:
        return exp.DataType.build(spark_type, dialect="spark").sql(DIALECT)
    except Exception:  # noqa: BLE001 - a Spark type sqlglot does not know: still a column, of unknown type
        return "UNKNOWN"


def _protected(declared: dict[str, Any] | None) -> dict[str, str]:
    """A declared Spark table's protected columns (lower-cased, as qualify writes them) and each one's role."""
    if declared is None:
        return {}
    roles = {c.lower(): "a quasi-identifier" for c in declared["quasi_identifiers"]}
    roles.update({c.lower(): "a sensitive column" for c in declared["sensitive"]})
    if declared.get("ground_truth"):
        roles[declared["ground_truth"].lower()] = "the ground truth"
    roles[declared["key"].lower()] = "the key"
    return roles


def _source(scope: Scope | None, alias: str) -> exp.Table | Scope | None:
    """The source ``alias`` names, from ``scope`` outwards (a correlated subquery reads its parents' sources)."""
    while scope is not None:
        if alias in scope.sources:
            return scope.sources[alias]
        scope = scope.parent
    return None


def _tables_in_reach(scope: Scope | None) -> list[str]:
    """The stored tables a scope and its parents read (by name)."""
    out = []
    while scope is not None:
        out += [s.name for s in scope.sources.values() if isinstance(s, exp.Table)]
        scope = scope.parent
    return out


def _lambda_parameter(column: exp.Column) -> bool:
    lam = column.find_ancestor(exp.Lambda)
    while lam is not None:
        if column.name in {p.name for p in lam.expressions}:
            return True
        lam = lam.find_ancestor(exp.Lambda)
    return False


def _alias_reference(column: exp.Column) -> bool:
    """An unqualified name of one of its SELECT's own output columns (ORDER BY z, GROUP BY z), which qualify leaves
    as it is: what it reads is read (and checked) in the select list."""
    select = column.find_ancestor(exp.Select)
    return select is not None and column.name in set(select.named_selects)


def guard(statement: exp.Expression, tables: dict[str, DataFrame], declared: dict[str, dict | None],
          calls: list[_Call]) -> exp.Expression:
    """The statement qualified (every column with its table, stars expanded), after checking that it reads no
    protected column of a declared Spark table (see the module's docs); PrivacyError naming the column otherwise."""
    odd = statement.find(exp.Pivot, exp.MatchRecognize, exp.Into)
    if odd is not None:  # they read (or write) columns by names that are not column references
        raise PrivacyError(f"{odd.sql(DIALECT)}: crowddb does not follow which columns PIVOT, UNPIVOT, MATCH_RECOGNIZE "
                           "or SELECT ... INTO read on Spark; write it with GROUP BY and CASE")
    try:
        checked = qualify(statement.copy(), schema=_schema(tables, calls), dialect=DIALECT,
                          validate_qualify_columns=True, quote_identifiers=True, identify=True)
    except sqlglot.errors.SqlglotError as err:
        raise PrivacyError(f"crowddb cannot tell which columns this statement reads ({err}); it is not run on Spark. "
                           "Name each column by a column of the Spark tables it reads") from None
    readable = ("read it through ANONYMIZE(spark.{t}, k := ...), or read only its other columns; a row chosen by a "
                "protected column gives that column away as much as showing it")
    found: set[int] = set()
    for scope in traverse_scope(checked):
        opaque = _functions().opaque(scope.expression)
        if opaque:
            raise PrivacyError(f"{opaque}: crowddb cannot tell what this call reads, so it is not run on Spark; "
                               "use DuckDB's built-in functions (sqlglot writes them in Spark's dialect)")
        for node in scope.find_all(exp.Columns, exp.Star):
            if isinstance(node, exp.Columns) or not isinstance(node.parent, exp.Count):
                raise PrivacyError(f"{node.parent.sql(DIALECT) if node.parent else node.sql(DIALECT)}: crowddb "
                                   "cannot tell which columns this reads; name the columns")
        for node in scope.find_all(exp.Column, exp.TableColumn):
            found.add(id(node))
            alias = node.name if isinstance(node, exp.TableColumn) else node.table
            if not alias:
                if isinstance(node, exp.Column) and _lambda_parameter(node):
                    continue
                if isinstance(node, exp.Column) and _alias_reference(node):
                    # the output column, in DuckDB as in Spark; a name also of a protected column is refused all the
                    # same, rather than trusting that both engines read it as the output column
                    shadowed = [t for t in _tables_in_reach(scope) if node.name.lower() in _protected(
                        declared.get(t))]
                    if shadowed:
                        raise PrivacyError(f"{node.sql(DIALECT)} names an output column and the protected "
                                           f"spark.{shadowed[0]}.{node.name}; give the output column another name")
                    continue
                raise PrivacyError(f"{node.sql(DIALECT)}: crowddb cannot tell which table this column is read from; "
                                   "qualify it (table.column)")
            source = _source(scope, alias)
            if isinstance(source, Scope):
                continue  # a derived table's column: what it reads is checked in its own scope
            if not isinstance(source, exp.Table):
                raise PrivacyError(f"{node.sql(DIALECT)}: crowddb cannot tell which table {alias!r} is")
            name = source.name
            protected = _protected(declared.get(name))
            if isinstance(node, exp.TableColumn):
                if protected:
                    raise PrivacyError(f"{node.sql(DIALECT)} reads every column of spark.{name}, whose "
                                       f"{sorted(protected)} are protected; "
                                       + readable.format(t=name))
            elif node.name.lower() in protected:
                raise PrivacyError(f"spark.{name}.{node.name} is protected ({protected[node.name.lower()]} of "
                                   f"spark.{name}) and read outside ANONYMIZE; " + readable.format(t=name))
    unscoped = [n for n in checked.find_all(exp.Column, exp.TableColumn) if id(n) not in found]
    if unscoped:
        raise PrivacyError(f"{unscoped[0].sql(DIALECT)}: crowddb cannot tell where this column is read; "
                           "it is not run on Spark")
    for call in calls:  # a table function's own reads (ANONYMIZE reads its table: that is the release)
        protected = _protected(declared.get(call.table))
        if call.kind in ("truth_discover", "private_synth"):  # both read an object, a source and a value
            bad = [c for c in (call.args[r] for r in ("object", "source", "value")) if c.lower() in protected]
            if bad:
                raise PrivacyError(f"{call.kind.upper()}(spark.{call.table}) reads {bad}, protected columns of "
                                   f"spark.{call.table}; " + readable.format(t=call.table))
    return checked


# ------------------------------------------------------------------------------------------ TRUTH_DISCOVER's charge
def budget_key(db: Any, name: str) -> str:
    """The privacy budget's table key of the Spark table ``name`` (its charges and budget are kept under it, beside
    the DuckDB tables' in the crowddb database): ``spark:<name>``, lower-cased as the ledger keys every table (and as
    Spark's catalog compares names). Fail closed on a DuckDB table whose own key it is (a table named "spark:<name>"
    in main): the two would share one budget."""
    key = f"spark:{name}".lower()
    if identity.of_key(db.con, key) is not None:
        raise PrivacyBudgetError(f"the DuckDB table {key!r} has the budget key of the Spark table spark.{name}; "
                                 "rename the DuckDB table (ALTER TABLE ... RENAME TO ...) so that each keeps its own "
                                 "privacy budget. Nothing was charged")
    return key


def budget_table(db: Any, name: str) -> str:
    """``db.set_privacy_budget('spark:<name>', ...)`` (and its reset and report): the budget key of the Spark catalog
    table ``name``, which must exist (as a DuckDB table's must)."""
    _catalog_table(_session(db), name)
    return budget_key(db, name)


def _source_counts(table: DataFrame, source: str) -> pd.Series | None:
    """The answers per source of a Spark table, keyed by the source's text in order of first appearance: what the
    local charge counts on the same rows (``table_functions.base._source_counts``: every row, duplicates included),
    from one Spark aggregation; only the per-source counts reach the driver, never an answer."""
    if source not in table.columns:
        return None
    t = (table.select(F.col(source).alias("s"), F.monotonically_increasing_id().alias("o")).groupBy("s")
         .agg(F.count(F.lit(1)).alias("n"), F.min("o").alias("o")).orderBy("o").toArrow())
    ids = t.column("s").to_pandas().astype(str).to_numpy()
    return pd.Series(t.column("n").to_numpy(), index=ids).groupby(level=0, sort=False).sum()


def _refuse_budget_copies(db: Any, spark: SparkSession, name: str, table: DataFrame,
                          operator: str = "TRUTH_DISCOVER") -> None:
    """Fail closed on a second name for the same answers: a charge is kept per Spark table name, so another table
    of the catalog that reads what ``table`` reads (a view over it, a DataFrame derived from it, its files again:
    the semantic hashes of the plans' leaves, as ``_refuse_copies_of_declared``) and has a budget or charges of its
    own would let the same sources spend twice; refused (PrivacyBudgetError) before anything runs."""
    mine = _leaves(table)
    for other in spark.catalog.listTables():
        if other.name.lower() == name.lower() or not privacy.has_acts(db.con, f"spark:{other.name}".lower()):
            continue
        try:
            theirs = spark.table(f"`{other.name.replace('`', '``')}`")
        except (AnalysisException, ParseException):
            continue
        if mine & _leaves(theirs):
            raise PrivacyBudgetError(
                f"{operator}(spark.{name}): spark.{name} reads the rows of spark.{other.name}, whose privacy "
                f"budget ('spark:{other.name.lower()}') has acts on record; charging spark.{name} apart would let "
                f"the same sources spend twice. Read spark.{other.name} itself. Nothing was computed or charged")


def _truth_charge(db: Any, call: _Call, table: DataFrame) -> tuple[str, privacy.Charge] | None:
    """(budget key, charge) of a TRUTH_DISCOVER with ``perturb :=`` on Spark: the local charge (``perturbation_charge``,
    the arithmetic of truth_discover_charge: per source, its answers times (epsilon, delta, rho)) from the Spark
    table's answers per source, charged to ``budget_key`` and checked before anything runs, as the local planner
    checks it (refused inside BEGIN ... COMMIT; PrivacyBudgetError when it would overspend: nothing ran or was
    recorded). None when the arguments ask for no charge (or are bad: truth_discover then says what is wrong)."""
    charge = perturbation_charge(call.args, lambda: _source_counts(table, call.args["source"]))
    return None if charge is None else checked_charge(db, call.table, table, charge, "TRUTH_DISCOVER")


def checked_charge(db: Any, name: str, table: DataFrame, charge: privacy.Charge, operator: str
                   ) -> tuple[str, privacy.Charge]:
    """(budget key, charge) of a DP release of the Spark table ``name`` by ``operator``, checked before anything
    runs as the local planner checks it: refused inside BEGIN ... COMMIT, when a copy of the table has acts of its
    own (``_refuse_budget_copies``), and (PrivacyBudgetError) when it would overspend ``spark:<name>``'s budget."""
    privacy.refuse_in_transaction(db.con, charge.operator)
    _refuse_budget_copies(db, table.sparkSession, name, table, operator)
    key = budget_key(db, name)
    privacy.check(db.con, [key], charge)
    return key, charge


def log_charged(db: Any, charged: tuple[str, privacy.Charge], release: Any) -> None:
    """A DP release of a Spark table (a ``ReleaseEntry``) and its charge, in one transaction that checks the budget
    again, as the local planner writes them (``Store.log_charged_release``)."""
    key, charge = charged
    Store(db.con).log_charged_release(tables=[key], charge=charge, kind=release.kind, method=release.method,
                                      k=release.k, epsilon=release.epsilon, delta=release.delta,
                                      params=release.params, metrics=release.metrics, objects=release.objects)


def _record_charge(db: Any, call: _Call, result: Any, charged: tuple[str, privacy.Charge] | None) -> None:
    """The perturbed TRUTH_DISCOVER's release and its charge, in one transaction that checks the budget again (as the
    local planner writes them: ``Store.log_charged_release``); fail closed on a perturbation without a charge."""
    if not result.privacy:
        return
    if charged is None:
        raise PrivacyError("TRUTH_DISCOVER: internal error: a DP release whose charge could not be declared; "
                           "nothing was recorded")
    _, release = truth_release(call.args, call.options, result.method, result.n_iter, result.objects.count(),
                               result.sources.count(), result.privacy)
    log_charged(db, charged, release)


# ------------------------------------------------------------------------------------------ running it
def _spark_text(checked: exp.Expression) -> str:
    """The checked statement in Spark's dialect: ``spark.<name>`` read as Spark's ``<name>``."""
    out = checked.copy()
    for table in list(out.find_all(exp.Table)):
        if spark_name(table) is not None:
            table.set("db", None)
    return out.sql(dialect="spark")


_PRISTINE: dict[str, Any] = {}  # the SparkContext's session without the caller's functions, and its lookups


def _builtin(spark: SparkSession, name: str) -> tuple[str | None, str] | None:
    """(catalog, class) of ``name`` in a new session of the same Spark (only Spark's built-ins and persistent
    functions: temporary ones belong to the session that made them); None when it is no function there."""
    if _PRISTINE.get("context") is not spark.sparkContext:  # (a context stopped and made again: a new one)
        _PRISTINE.update(context=spark.sparkContext, session=spark.newSession(), seen={})
    pristine, seen = _PRISTINE["session"], _PRISTINE["seen"]
    if name not in seen:
        seen[name] = _lookup(pristine, name)
    return seen[name]


def _lookup(spark: SparkSession, name: str) -> tuple[str | None, str] | None:
    try:
        found = spark.catalog.getFunction(name)
    except (AnalysisException, ParseException):
        return None
    except Exception:  # noqa: BLE001 - a lookup that fails otherwise: unknown, so never taken for a built-in
        return "?", "?"
    return found.catalog, found.className


def _user_functions(spark: SparkSession, text: str) -> None:
    """Refuse a call of a function that is not Spark's own built-in in the Spark text: a Python UDF or a SQL function
    the session registered (either may take a built-in's name, which Spark then resolves to it, and a SQL function
    may read a table) or a persistent one. Every name right before ``(`` is looked up in the session and in a new
    one (keywords and types are no functions in either)."""
    tokens = Dialect.get_or_raise("spark").tokenizer_class().tokenize(text)
    called = sorted({a.text.lower() for a, b in itertools.pairwise(tokens) if b.token_type == TokenType.L_PAREN
                     and a.token_type not in (TokenType.L_PAREN, TokenType.COMMA, TokenType.R_PAREN)})
    for name in called:
        found = _lookup(spark, name)
        if found is None:
            continue  # syntax (IN, OVER, VALUES, a type): nothing the session could resolve as a function
        builtin = _builtin(spark, name)
        if builtin is None or builtin[0] is not None or found != builtin:
            raise PrivacyError(f"{name}(...): the Spark session defines a function of this name, whose reads crowddb "
                               "cannot see; it is not run. Use Spark's built-in functions")


def _placeholder(call: _Call, table: DataFrame, declared: dict[str, Any]) -> DataFrame:
    """An empty DataFrame with the exact schema of the call's release (Spark analyses the statement against it before
    anything is released): the quasi-identifiers become string labels, a long ``class`` is added, the key dropped
    unless kept (crowddb/spark/mondrian.py, ledger.py)."""
    qis = set(declared["quasi_identifiers"])
    cols = [F.lit(None).cast("string").alias(c) if c in qis else F.col(c) for c in table.columns]
    out = table.limit(0).select(*cols, F.lit(None).cast("long").alias(CLASS))
    return out if call.args["keep_key"] else out.drop(declared["key"])


def _analysed(spark: SparkSession, text: str) -> DataFrame:
    try:
        return spark.sql(text)
    except (AnalysisException, ParseException) as err:
        raise CrowdDBError(f"Spark rejected the statement as transpiled to Spark SQL ({text}): "
                           f"{str(err).splitlines()[0]}") from None


def _ask_crowd(db: Any, spark: SparkSession, human: crowd.HumanCall, checked: exp.Expression,
               tables: dict[str, DataFrame], declared: dict[str, dict | None], calls: list[_Call]
               ) -> tuple[exp.Expression, str]:
    """The statement's human operator asked about its rows (crowddb/spark/crowd.py): the checked statement with the
    answers joined in, and the answers' temp view."""
    if calls:
        raise ArgumentError(f"{human.node.name} on Spark: a human operator and a table function in one statement do "
                            "not run on Spark; run each in a statement of its own")
    name = human.table
    if declared.get(name) is None:
        raise ArgumentError(f"human operators over spark.{name} need its roles declared (its key joins the answers "
                            f"back, its quasi-identifiers are generalized before a HIT shows them): "
                            f"db.declare_roles('spark:{name}', quasi_identifiers=[...], key='id', ground_truth=...)")
    _analysed(spark, _spark_text(checked))  # Spark's own refusal (a column GROUP BY lacks) before anything is paid
    return crowd.ask(db, spark, human, checked, tables[name], declared[name], _ledger_name(db, name), _spark_text)


def run_on_spark(db: Any, statements: list[exp.Expression], params: Any = None) -> DataFrame:
    """Run a statement that names a Spark table on the db's Spark session; returns its Spark DataFrame."""
    spark = _session(db)
    if db.con is None:
        raise CrowdDBError("the connection is closed")
    if len(statements) != 1:
        raise ArgumentError("a text naming a Spark table runs on Spark one statement at a time; send each "
                            "statement to db.sql(...) on its own")
    statement = query_params.bind(statements[0], params)
    if not isinstance(statement, exp.Query):
        raise StatementRefusedError(f"only SELECT statements (and WITH ... SELECT) run on Spark; this "
                                    f"{type(statement).__name__.upper()} names a Spark table and is not run. Write "
                                    "Spark tables with Spark itself (df.write...)")
    human = crowd.find(statement, db.registry)  # a human operator: guarded with a literal in its place
    if human is not None:
        statement = human.placeholder(statement)
    function_nodes = [n for n in statement.find_all(exp.Table) if is_table_function(n)]
    ctes = {cte.alias_or_name.lower() for cte in statement.find_all(exp.CTE)}
    for node in statement.find_all(exp.Table):
        if is_table_function(node):
            continue
        if not isinstance(node.this, exp.Identifier):
            raise ArgumentError(f"{node.sql(DIALECT)}: a table function that does not run on Spark; {_WORKS}")
        if spark_name(node) is None and (len(table_parts(node)) > 1 or node.name.lower() not in ctes):
            raise ArgumentError(f"{node.sql(DIALECT)}: a statement on Spark reads only Spark tables, written "
                                "spark.<name> (and its own CTEs). Load a local table into Spark first "
                                "(spark.createDataFrame(...).createOrReplaceTempView(...))")
    names = sorted(set(spark_tables(statement)))
    tables = {name: _catalog_table(spark, name) for name in names}
    declared: dict[str, dict | None] = {}
    for name in names:
        ledger_name = _ledger_name(db, name)
        declared[name] = None if ledger_name is None else ledger.roles(db, ledger_name)
    _refuse_copies_of_declared(db, spark, {n: tables[n] for n in names if declared[n] is None})
    calls = [_bind_call(node, tables, declared) for node in function_nodes]
    if sum(c.kind == "anonymize" for c in calls) > 1:
        raise ArgumentError("one ANONYMIZE per statement on Spark: each is a release recorded in the ledger; release "
                            "each table in a statement of its own")
    perturbed = [c for c in calls if c.kind == "truth_discover" and c.args["perturb"] is not None]
    if perturbed and len(perturbed) + sum(c.kind == "anonymize" for c in calls) > 1:
        raise ArgumentError("one release per statement on Spark: a TRUTH_DISCOVER with perturb := ... is a release "
                            "charged to the privacy budget, recorded on its own; run it in a statement of its own")
    synths = [c for c in calls if c.kind == "private_synth"]
    if synths and len(synths) + len(perturbed) + sum(c.kind == "anonymize" for c in calls) > 1:
        raise ArgumentError("one release per statement on Spark: PRIVATE_SYNTH is a release charged to the privacy "
                            "budget, recorded on its own; run it in a statement of its own")
    for node, call in zip(function_nodes, calls):  # each table function becomes its view, under its alias
        view = exp.Table(this=identifier(call.view), db=identifier(SPARK), alias=node.args.get("alias"))
        node.replace(view)
    for scope in traverse_scope(statement):  # every table a Spark table (or a CTE: a scope of its own)
        for alias, source in scope.sources.items():
            if isinstance(source, exp.Table) and spark_name(source) is None:
                raise ArgumentError(f"{source.sql(DIALECT)}: a statement on Spark reads only Spark tables, written "
                                    f"spark.<name> (and its own CTEs); {alias!r} is not one. Load a local table into "
                                    "Spark first (spark.createDataFrame(...).createOrReplaceTempView(...))")
    checked = guard(statement, tables, declared, calls)
    text = _spark_text(checked)
    _user_functions(spark, text)
    # the budget is checked before anything runs; the charge is recorded once Spark has accepted the statement
    charged = _truth_charge(db, perturbed[0], tables[perturbed[0].table]) if perturbed else None
    synth_charged = synth.sql_charge(db, synths[0].table, tables[synths[0].table], synths[0].args) if synths else None
    views, results = [], {}
    if human is not None:  # the crowd is asked first; its answers are a view the statement joins by the key
        checked, view = _ask_crowd(db, spark, human, checked, tables, declared, calls)
        views.append(view)
        text = _spark_text(checked)
    try:
        for call in calls:  # truth discovery records nothing: run first; a release stands in by its empty schema
            table = tables[call.table]
            if call.kind == "truth_discover":
                a = call.args
                result = results[call.view] = truth_discover(
                    table, object=a["object"], source=a["source"], value=a["value"], method=a["method"], tol=a["tol"],
                    max_iter=a["max_iter"], seed=a["seed"], perturb=a["perturb"], epsilon=a["epsilon"],
                    delta=a["delta"], options=call.options)
                out = result.objects if a["output"] == "objects" else result.sources
                if result.privacy:  # the privacy parameters travel next to the result, as locally
                    out = out.withColumns({"epsilon": F.lit(float(result.privacy["epsilon"])),
                                           "delta": F.lit(float(result.privacy["delta"]))})
                out.createOrReplaceTempView(call.view)
            elif call.kind == "private_synth":  # released (and charged) once Spark accepts the statement
                results[call.view] = synth.run_sql(table, call.args)
                results[call.view].rows.select("object", "value").createOrReplaceTempView(call.view)
            else:
                _placeholder(call, table, declared[call.table]).createOrReplaceTempView(call.view)
            views.append(call.view)
        _analysed(spark, text)  # Spark's own refusal comes before anything is released
        for call in perturbed:
            _record_charge(db, call, results[call.view], charged)
        for call in synths:
            synth.record_sql(db, call.args, results[call.view], synth_charged)
        for call in calls:
            if call.kind == "anonymize":
                a = call.args
                released = ledger.release(db, tables[call.table], a["k"], name=_ledger_name(db, call.table),
                                          keep_key=a["keep_key"], strict=a["strict"], sensitive=a["sensitive"],
                                          l=a["l"], hierarchies=a["hierarchies"])
                released.createOrReplaceTempView(call.view)
        return _analysed(spark, text)  # analysed now: the DataFrame keeps its plan once the views are dropped
    finally:
        for view in views:
            spark.catalog.dropTempView(view)
