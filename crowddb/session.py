"""``crowddb.connect()``: a DuckDB connection whose SQL also understands crowd operators.

``CrowdDB`` is a facade: each query call is one call into ``crowddb.query.pipeline`` (read it top to bottom);
loading goes to ``crowddb.store.load``, roles to ``crowddb.store``, the budget to the privacy ledger."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from .crowd import Platform, SimulatedCrowd
from .errors import ArgumentError, CrowdDBError
from .operators import table_functions
from .operators.purchase import collect_finished
from .query import pipeline
from .query.estimate import TRADEOFF_KS, QueryPlan
from .query.state import State
from .query.text import names_spark
from .replacement import caller_frame
from .store import (
    Store,
    TableRoles,
    composition,
    declare_roles,
    ensure_catalog,
    load,
    privacy,
    relation_kind,
    resolve_table,
    roles_of,
)
from .store.roles import declared_tables
from .udf import HumanOperator, Registry

__all__ = ["CrowdDB", "QueryPlan", "connect"]


class CrowdDB:
    """A DuckDB connection plus a crowd: plain SQL passes through untouched, crowd operators are planned.

    Everything DuckDB's connection offers is reachable through this object (attribute access is delegated)."""

    def __init__(self, database: str | Path | duckdb.DuckDBPyConnection = ":memory:", *, platform: Platform | None = None,
                 seed: int | None = None, budget: float | None = None, udfs: Iterable[str | Path] = (),
                 progress: bool = True, read_only: bool = False, config: Mapping[str, Any] | None = None,
                 spark: Any = None) -> None:
        seed, budget, udfs = _check_options(database, platform, seed, budget, udfs, progress, read_only, config)
        self.spark = None if spark is None else _on_spark().check_session(spark)  # spark.<name> runs on it
        # a connection the caller opened is wrapped as it is (its attached databases, settings and registered objects)
        # and left open to its owner by close(); otherwise crowddb opens (and closes) its own
        self._owns_connection = not isinstance(database, duckdb.DuckDBPyConnection)
        created = self._owns_connection and not Path(str(database)).exists()  # issue 24: made 0600 below
        if self._owns_connection:
            try:
                con = duckdb.connect(str(database), read_only=read_only, config=dict(config or {}))
            except duckdb.Error as err:  # a missing folder, a file another process holds, a bad setting
                raise CrowdDBError(f"cannot open database {str(database)!r}: {err}") from None
            self.database = str(database)
        else:
            con = database
            self.database = _database_path(database)
        try:
            if not read_only:
                ensure_catalog(con)
                if created:  # issue 24: the new file and its .wal 0600, before any row of the caller's is in them
                    privacy.private_files(self.database)
                Store(con).reap_interrupted()  # runs of dead processes are marked: crowddb_runs says so at once
            registry = Registry(udfs, reserved=table_functions.names)
            platform = platform if platform is not None else SimulatedCrowd(seed=seed)
            # a platform keeping state beside the database (the web crowd's marketplace file) opens it
            platform.bind(None if self.database == ":memory:" else self.database)
            self._state = State(con, platform, registry, seed, budget, progress)
            if not read_only:
                self._record_workers()
                self._collect_finished()
        except BaseException:
            if self._owns_connection:
                con.close()
            raise

    # ------------------------------------------------------------------------------------- what it holds
    @property
    def con(self) -> duckdb.DuckDBPyConnection | None:
        """The DuckDB connection (None once closed)."""
        state = self.__dict__.get("_state")
        return None if state is None else state.con

    @property
    def platform(self) -> Platform:
        return self._state.platform

    @platform.setter
    def platform(self, platform: Platform) -> None:
        if not isinstance(platform, Platform):
            raise ArgumentError(f"platform must be a crowddb.Platform instance, got {type(platform).__name__}")
        self._state.platform = platform

    @property
    def registry(self) -> Registry:
        return self._state.registry

    @property
    def seed(self) -> int | None:
        return self._state.seed

    @property
    def budget(self) -> float | None:
        return self._state.budget

    @property
    def progress(self) -> bool:
        return self._state.progress

    @property
    def last_plan(self) -> QueryPlan | None:
        """The plan of the last crowd query run or explained."""
        return self._state.last_plan

    @property
    def last_report(self) -> list[dict[str, Any]]:
        """Privacy reports of the table functions of the last query (also in ``crowddb_releases``)."""
        return list(self.last_plan.reports) if self.last_plan else []

    # --------------------------------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the DuckDB connection (idempotent). A connection the caller handed to connect() stays open: crowddb
        only drops what it made there for its queries' results (temp tables, registered Python objects)."""
        state = self.__dict__.get("_state")
        if state is None or state.con is None:
            return
        if self.__dict__.get("_owns_connection", True):
            state.con.close()
        else:
            with contextlib.suppress(duckdb.Error):  # the owner may have closed it already
                state.drop_all()
        state.kept = []
        state.con = None

    def __repr__(self) -> str:
        if self.con is None:
            return "<CrowdDB (closed)>"
        tables = sorted(declared_tables(self.con))
        return (f"<CrowdDB {self.database!r} (platform {self.platform.name}, seed {self.seed}, "
                f"{'no budget' if self.budget is None else f'budget ${self.budget:,.2f}'}); "
                f"tables with roles: {', '.join(tables) if tables else 'none'}; "
                f"operators: {', '.join(sorted(self.registry.name_set()))}>")

    def _repr_html_(self) -> str:
        """A notebook's view: the repr and what each crowd run of this database bought (``crowddb_runs``)."""
        import html

        if self.con is None:
            return html.escape(repr(self))
        runs = Store(self.con).bought_per_operator()
        return f"<p>{html.escape(repr(self))}</p>" + (runs.to_html(index=False) if len(runs) else "<p>no crowd run yet</p>")

    def __enter__(self) -> CrowdDB:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        with contextlib.suppress(Exception):  # never raise from a finalizer
            self.close()

    def __getattr__(self, name: str) -> Any:
        con = self.con  # (None on a closed or half-built object)
        if con is None:
            raise AttributeError(name)
        return getattr(con, name)

    def payouts(self, run_id: int) -> pd.DataFrame:
        """What each worker was paid in one run: worker_id, marketplace_id (their id on the marketplace that
        recruited them, if any), assignments, reward; as SQL: ``SELECT * FROM crowddb_payouts WHERE run_id = N``."""
        if isinstance(run_id, bool) or not isinstance(run_id, int):
            raise ArgumentError(f"payouts(): run_id must be an integer, got {run_id!r}")
        return Store(self.con).payouts(run_id)

    def _collect_finished(self) -> None:
        """HITs people finished while no session was open are put on record now (the reruns of their queries would
        collect them too: a failure here only leaves them to the reruns)."""
        try:
            collect_finished(Store(self.con), self.platform)
        except Exception as err:  # noqa: BLE001 - nothing is lost: the HITs stay published, a rerun collects them
            warnings.warn(f"crowddb: HITs people finished could not be collected now ({type(err).__name__}: {err}); "
                          "rerunning their queries collects them", stacklevel=3)

    def _record_workers(self) -> None:
        Store(self.con).record_workers(self.platform.workers(), self.platform.name)

    # ------------------------------------------------------------------------------------------- queries
    def sql(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None, *,
            timeout: float | None = None):
        """Run SQL; returns a DuckDB relation for a query (None for a statement), like ``duckdb.sql``; a query naming
        a Spark table (``spark.<name>``, connected with ``spark=``) runs on Spark and returns a Spark DataFrame.
        ``timeout`` (seconds): how long a crowd query waits for people's answers (see ``AnswersOutstandingError``)."""
        if self.spark is not None and (statements := names_spark(query)) is not None:
            return _on_spark().run_on_spark(self, statements, params)
        return pipeline.run(self._open(), query, params, caller_frame(), "sql", _timeout(timeout))

    query = sql

    def execute(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None, *,
                timeout: float | None = None):
        """Run SQL like ``DuckDBPyConnection.execute``: returns the connection, ready to fetch (``timeout``: as
        ``sql``)."""
        if self.spark is not None and names_spark(query) is not None:
            raise ArgumentError("a statement naming a Spark table runs with db.sql(...): its Spark DataFrame")
        return pipeline.run(self._open(), query, params, caller_frame(), "execute", _timeout(timeout))

    def explain(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> QueryPlan:
        """How many HITs and assignments ``query`` would post, its estimated cost and the privacy parameters that
        apply; nothing is published, paid or written."""
        if self.spark is not None and names_spark(query) is not None:
            raise ArgumentError("explain() plans statements that run locally; it does not plan statements on Spark yet")
        return pipeline.explain(self._open(), query, params, caller_frame())

    def tradeoff(self, query: str, ks: Iterable[int] = TRADEOFF_KS, params: Any = None) -> pd.DataFrame:
        """The k-anonymity trade-off of a crowd query: ``explain()`` of it with every human operator's k set to each
        of ``ks`` (nothing is published, paid or written). One row per (k, operator call): k, operator, ncp (the
        information the generalization loses, kanon-crowd-db's NCP), accuracy_lower / accuracy_upper (the crowd
        accuracy bounds explain() reports), hits, estimated_cost, refused (why this k cannot be had: the guard's
        word, or fewer rows than k; the figures are then missing)."""
        return pipeline.tradeoff(self._open(), query, list(ks), params, caller_frame())

    def _open(self) -> State:
        state = self.__dict__.get("_state")
        if state is None or state.con is None:
            raise CrowdDBError("the connection is closed")
        return state

    # ------------------------------------------------------------------------------------- data and roles
    def load_csv(self, table: str, path: str | Path, *, quasi_identifiers: Iterable[str] = (),
                 sensitive: Iterable[str] = (), core: Iterable[str] = (), ground_truth: str | None = None,
                 key: str | None = None, kinds: Mapping[str, str] | None = None, replace: bool = False,
                 **read_csv_options: Any) -> duckdb.DuckDBPyRelation:
        """Load a CSV file into ``table`` and declare its column roles (one transaction: all or nothing)."""
        relation = load.load_csv(self._open().con, table, path, replace, {
            "quasi_identifiers": quasi_identifiers, "sensitive": sensitive, "core": core,
            "ground_truth": ground_truth, "key": key, "kinds": kinds}, read_csv_options)
        self._state.protected = self._state.protected or None  # roles may have been declared
        return relation

    def load_frame(self, table: str, frame: pd.DataFrame, *, quasi_identifiers: Iterable[str] = (),
                   sensitive: Iterable[str] = (), core: Iterable[str] = (), ground_truth: str | None = None,
                   key: str | None = None, kinds: Mapping[str, str] | None = None,
                   replace: bool = False) -> duckdb.DuckDBPyRelation:
        """Load a pandas DataFrame (or Arrow table or record batch, polars DataFrame, DuckDB relation) into
        ``table`` and declare its column roles."""
        relation = load.load_frame(self._open().con, table, frame, replace, {
            "quasi_identifiers": quasi_identifiers, "sensitive": sensitive, "core": core,
            "ground_truth": ground_truth, "key": key, "kinds": kinds})
        self._state.protected = self._state.protected or None  # roles may have been declared
        return relation

    def declare_roles(self, table: str, *, quasi_identifiers: Iterable[str] = (), sensitive: Iterable[str] = (),
                      core: Iterable[str] = (), ground_truth: str | None = None, key: str | None = None,
                      kinds: Mapping[str, str] | None = None) -> TableRoles:
        """Declare (replace) the column roles of an existing table; persisted in ``crowddb_columns``.
        ``'spark:<name>'``: a table of the connected Spark session (quasi-identifiers, sensitive, key, kinds)."""
        if isinstance(table, str) and table.lower().startswith("spark:"):
            return _on_spark(self).declare_roles(self, table[6:], quasi_identifiers=quasi_identifiers,
                                                  sensitive=sensitive, core=core, ground_truth=ground_truth, key=key,
                                                  kinds=kinds)
        self._state.protected = True
        return declare_roles(self.con, resolve_table(self.con, table), quasi_identifiers=quasi_identifiers,
                             sensitive=sensitive, core=core,
                             ground_truth=ground_truth, key=key, kinds=kinds)

    def roles(self, table: str) -> TableRoles:
        """The declared roles of ``table`` (``'spark:<name>'``: of a Spark table, as a dict)."""
        if isinstance(table, str) and table.lower().startswith("spark:"):
            return _on_spark(self).roles(self, table[6:])
        return roles_of(self.con, resolve_table(self.con, table))

    # ------------------------------------------------------------------------------------------ epsilon budget
    def set_privacy_budget(self, table: str, *, epsilon: float, delta: float = 0.0, unit: str = "source",
                           composition: str = "sequential") -> None:
        """Set ``table``'s differential-privacy budget per protected ``unit`` (each source may spend ``epsilon`` and
        ``delta``; ``composition`` 'sequential' sums them, 'zcdp' sums rho and converts at ``delta``). A logged act
        of the privacy ledger, persisted in the database file; what was spent before still counts (see
        ``reset_privacy_budget``). SQL: ``SELECT * FROM PRIVACY_BUDGET(table, epsilon := ..., ...)``.
        ``'spark:<name>'``: a table of the connected Spark session, charged by ``TRUTH_DISCOVER(spark.<name>, ...,
        perturb := ...)`` (Python only)."""
        self._state.protected = True
        Store(self.con).set_privacy_budget(self._budget_table(table), epsilon=epsilon, delta=delta, unit=unit,
                                           composition=composition)

    def reset_privacy_budget(self, table: str, *, unit: str = "source") -> None:
        """Forget what ``table``'s releases spent (a logged act: the charges stay on record and in the report).
        SQL: ``SELECT * FROM PRIVACY_BUDGET(table, reset := true)``."""
        Store(self.con).reset_privacy_budget(self._budget_table(table), unit)

    def privacy_report(self, table: str) -> pd.DataFrame:
        """Every DP release charged to ``table``: its largest charge to one unit, the most a unit has spent after it
        (epsilon/delta summed; rho summed and its epsilon), the budget and what is left; verifies the ledger's hash
        chain first (PrivacyBudgetError if it was edited). Per unit in SQL: ``SELECT * FROM crowddb_privacy_spent``.
        Then every k-anonymous release of it (``kind`` 'k-anonymity': its ``ledger_release``, ``k``, ``rows``, the
        release it ``repeats``), and on every row ``smallest_joint_class``: the fewest rows a worker who links all of
        the table's releases cannot tell apart (the guard keeps it at least each row's k)."""
        name = self._budget_table(table)
        spent = privacy.report(self.con, name)
        kanon = composition.releases(self.con, name).assign(kind="k-anonymity", method=lambda f: f["ledger_release"])
        frames = [f for f in (spent, kanon.reindex(columns=privacy.REPORT_COLUMNS)) if len(f)]
        out = pd.concat(frames, ignore_index=True) if frames else spent
        out["smallest_joint_class"] = composition.smallest_class(self.con, name)[0]
        return out.reindex(columns=privacy.REPORT_COLUMNS)

    def _budget_table(self, table: str) -> str:
        if not isinstance(table, str):
            raise ArgumentError(f"a privacy budget is per table: pass its name, got {type(table).__name__}")
        if table.lower().startswith("spark:"):  # a Spark table's budget, charged by TRUTH_DISCOVER(spark.<name>)
            return _on_spark(self).budget_table(self, table[6:])
        name = resolve_table(self.con, table)
        if relation_kind(self.con, name) != "table":  # releases are charged to the base tables they read
            raise ArgumentError(f"{table!r} is a view: set the privacy budget on the table(s) it reads")
        return name.lower()

    def register_udf(self, definition: str | Path | HumanOperator | Mapping[str, Any]) -> HumanOperator:
        """Add a human operator from a TOML file or folder, a mapping, or a HumanOperator; returns it (a folder's
        first definition). A bad definition is refused before any of a folder's is registered."""
        import os

        if isinstance(definition, HumanOperator):
            op = definition
        elif isinstance(definition, Mapping):
            op = HumanOperator.from_mapping(definition)
        elif isinstance(definition, (str, os.PathLike)):
            ops = self.registry.add_path(Path(definition))  # every definition of a folder, or none if one is bad
            return ops[0]
        else:
            raise ArgumentError(f"register_udf takes a TOML file or folder path, a mapping or a crowddb.HumanOperator; "
                                f"got {type(definition).__name__} {definition!r}")
        self.registry.add(op)
        return op


#: the options ``connect()`` takes besides database, platform and seed
CONNECT_OPTIONS = ("budget", "udfs", "progress", "read_only", "config", "spark")


def _on_spark(db: CrowdDB | None = None):
    """crowddb/spark/sql.py, imported when first used (crowddb imports without PySpark); ``db``: one that must have
    a Spark session."""
    if db is not None and db.spark is None:
        raise ArgumentError("a spark:<name> table needs a Spark session: crowddb.connect(path, "
                            "spark=SparkSession.builder.getOrCreate())")
    from .spark import sql

    return sql


def _check_options(database: Any, platform: Any, seed: Any, budget: Any, udfs: Any, progress: Any, read_only: Any,
                   config: Any) -> tuple[int | None, float | None, list[str | Path]]:
    """``connect()``'s arguments checked before anything is opened: (seed, budget, udfs) as used."""
    import math
    import numbers
    import os

    if isinstance(database, duckdb.DuckDBPyConnection):
        if read_only or config:
            raise ArgumentError("read_only and config apply when crowddb opens the database; an open DuckDB "
                                "connection was given: set them when you open it (duckdb.connect(path, read_only=..., "
                                "config=...)) and leave them out here")
    elif not isinstance(database, (str, os.PathLike)):
        raise ArgumentError(f"database must be a file path, ':memory:' or an open duckdb connection, got "
                            f"{type(database).__name__} {database!r}")
    if platform is not None and not isinstance(platform, Platform):
        raise ArgumentError(f"platform must be a crowddb.Platform instance (e.g. crowddb.SimulatedCrowd(seed=1), or "
                            f"your subclass of crowddb.Platform for a real marketplace), got {type(platform).__name__} "
                            f"{platform!r}; leave it out for the embedded simulated crowd")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise ArgumentError(f"seed must be a non-negative integer or None, got {seed!r}")
        if seed < 0:
            raise ArgumentError(f"seed must be a non-negative integer or None, got {seed!r}")
        seed = int(seed)
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
            raise ArgumentError(f"budget must be a number of US$ per query (e.g. budget=10.0) or None, got "
                                f"{type(budget).__name__} {budget!r}")
        if not math.isfinite(budget) or budget < 0:
            raise ArgumentError(f"budget must be a finite number >= 0 (US$ per query), got {budget!r}; leave it out "
                                "(None) for no limit")
        budget = float(budget)
    if isinstance(udfs, (str, os.PathLike)):  # one folder (a string is not a list of folders, one per character)
        udfs = [udfs]
    try:
        udfs = list(udfs)
    except TypeError:
        raise ArgumentError(f"udfs must be a list of folders or files of human operator definitions, got "
                            f"{udfs!r}") from None
    bad = [u for u in udfs if not isinstance(u, (str, os.PathLike))]
    if bad:
        raise ArgumentError(f"udfs must be a list of folders or files of human operator definitions, got {bad[0]!r}")
    for name, value in (("progress", progress), ("read_only", read_only)):
        if not isinstance(value, bool):
            raise ArgumentError(f"{name} must be True or False, got {value!r}")
    if config is not None and not isinstance(config, Mapping):
        raise ArgumentError(f"config must be a mapping of DuckDB settings (e.g. {{'threads': 4}}), got {config!r}")
    return seed, budget, udfs


def _database_path(con: duckdb.DuckDBPyConnection) -> str:
    """The file behind a connection's current database (':memory:' for an in-memory one)."""
    try:
        rows = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    except duckdb.Error as err:  # a closed connection
        raise CrowdDBError(f"cannot use the DuckDB connection given to connect(): {err}") from None
    return rows[0][0] if rows and rows[0][0] else ":memory:"


def _timeout(timeout: Any) -> float | None:
    """A query's wait for people's answers, in seconds (None: the platform's own default)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ArgumentError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def connect(database: str | Path | duckdb.DuckDBPyConnection = ":memory:", *, platform: Platform | None = None, seed: int | None = None,
            **options: Any) -> CrowdDB:
    """Open a crowd database (a DuckDB file, or in memory), or wrap an open ``duckdb`` connection (which stays
    open to its owner when crowddb closes). ``platform`` defaults to the embedded simulated crowd;
    ``seed`` makes every random choice (crowd, anonymization, noise) reproducible. Options: budget (US$ per query),
    udfs (extra folders of operator definitions), progress, read_only, config (DuckDB settings), spark (a
    SparkSession: statements naming ``spark.<name>`` run on it, crowddb/spark/sql.py)."""
    unknown = [name for name in options if name not in CONNECT_OPTIONS]
    if unknown:
        raise ArgumentError(f"connect(): unknown option{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(map(repr, unknown))}; accepted: database, platform, seed, "
                            f"{', '.join(CONNECT_OPTIONS)}")
    return CrowdDB(database, platform=platform, seed=seed, **options)
