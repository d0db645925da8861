"""DuckDB says what a statement is: every statement, while anything is protected, is classified by DuckDB's own
parser (``extract_statements``), not by crowddb's reading of the text, and each kind is handled or refused.

- ``RUN``: its effect on roles, row identity and the ledgers is nothing (a query, a transaction, a setting, a DROP,
  an ATTACH, a macro or view definition: a macro is opaque to lineage and a view is read through lineage when
  used).
- ``TRACK``: it creates, fills or changes stored columns (CREATE TABLE, INSERT, UPDATE, ALTER, COPY ... FROM), or
  keeps rows a DELETE chooses: crowddb reads it (sqlglot) and computes where roles go, and whether the rows it keeps
  were chosen by a protected column (``crowddb.lineage``); a statement of this kind that crowddb cannot read is
  refused.
- ``REFUSE``: a kind that writes stored columns through a path crowddb does not compute (MERGE, IMPORT DATABASE, COPY
  FROM DATABASE, a PREPARE'd statement run later, EXPLAIN ANALYZE of a write) or that it does not know, refused with
  the supported way to do it.

Classifying costs nothing extra: the statements DuckDB parsed are the ones that run (``DuckDBPyConnection.execute``
takes a parsed ``Statement``), so a text is parsed once either way.
"""

from __future__ import annotations

import dataclasses

import duckdb
from sqlglot.dialects.dialect import Dialect

RUN, TRACK, REFUSE = "run", "track", "refuse"

_T = duckdb.StatementType
#: kinds that cannot move a protected value into a stored column (or that only read)
_RUN_KINDS = {_T.SELECT, _T.TRANSACTION, _T.SET, _T.VARIABLE_SET, _T.DROP, _T.ATTACH, _T.DETACH,
              _T.LOAD, _T.VACUUM, _T.ANALYZE, _T.EXPORT, _T.CREATE_FUNC}
#: (a DELETE moves no value, but the rows it keeps may be chosen by a protected column: crowddb reads it too)
_TRACK_KINDS = {_T.CREATE, _T.INSERT, _T.UPDATE, _T.ALTER, _T.COPY, _T.DELETE}
#: the reason and the supported way, per refused kind
_REFUSED = {
    _T.MERGE_INTO: "MERGE writes stored columns through paths crowddb does not follow; write the same with UPDATE ... "
                   "FROM and INSERT ... SELECT, whose roles crowddb carries",
    _T.PREPARE: "a prepared statement runs later as text crowddb cannot see; pass parameters to "
                "db.sql(query, params) instead",
    _T.EXECUTE: "a prepared statement runs text crowddb has not classified; pass parameters to db.sql(query, params) "
                "instead",
    _T.COPY_DATABASE: "COPY FROM DATABASE copies tables without their roles; copy each table with CREATE TABLE ... AS "
                      "SELECT, whose roles crowddb carries",
    _T.MULTI: "crowddb cannot tell what this statement writes (PIVOT and other statements DuckDB expands into "
              "several); write it as a plain SELECT, or run it through db.con (plain DuckDB) and then declare the "
              "roles of what it wrote with db.declare_roles(...)",
}
#: PRAGMAs that only read or set a setting; any other (IMPORT DATABASE is one, and full-text indexes copy text)
#: is refused while anything is protected
_READ_PRAGMAS = frozenset({"table_info", "show_tables", "show_tables_expanded", "show", "database_list",
                           "database_size", "storage_info", "version", "platform", "functions", "collations",
                           "metadata_info", "user_agent", "enable_progress_bar", "disable_progress_bar",
                           "enable_profiling", "disable_profiling", "enable_print_progress_bar",
                           "disable_print_progress_bar", "threads", "memory_limit", "explain_output"})


@dataclasses.dataclass(frozen=True)
class Gated:
    """One statement of a text as DuckDB parsed it, and what crowddb does with it."""

    statement: duckdb.Statement
    action: str
    reason: str = ""

    @property
    def kind(self) -> str:
        return self.statement.type.name

    @property
    def text(self) -> str:
        return self.statement.query


def classify(con: duckdb.DuckDBPyConnection, text: str) -> list[Gated]:
    """The statements of ``text`` as DuckDB reads them, each with its action (raises DuckDB's ParserException for
    text DuckDB cannot parse, as running it would)."""
    return [Gated(s, *_action(s)) for s in con.extract_statements(text)]


def _action(statement: duckdb.Statement) -> tuple[str, str]:
    kind = statement.type
    if kind in _RUN_KINDS:  # (most statements: decided by DuckDB's type alone, nothing more is read)
        return RUN, ""
    words = _words(statement.query, 6)
    if kind == _T.CREATE and _created(words) not in ("table", ""):
        return RUN, ""  # a view (read through lineage when used), a macro, a type, a schema, a sequence, an index
    if kind in _TRACK_KINDS:
        if kind == _T.COPY and "database" in words[1:3]:
            return REFUSE, _REFUSED[_T.COPY_DATABASE]
        return TRACK, ""
    if kind == _T.EXPLAIN:
        if len(words) > 2 and words[1] in ("analyze", "analyse") and words[2] not in ("select", "with", "from"):
            return REFUSE, ("EXPLAIN ANALYZE runs its statement, which crowddb would not see classified; run "
                            "EXPLAIN without ANALYZE, or the statement itself")
        return RUN, ""
    if kind == _T.PRAGMA:
        if words and words[0] == "import":
            return REFUSE, ("IMPORT DATABASE creates tables from files, without roles; load each table with "
                            "db.load_csv(...) and declare its roles")
        if words and words[0] == "copy":
            return REFUSE, _REFUSED[_T.COPY_DATABASE]
        name = words[1] if len(words) > 1 else ""
        if name in _READ_PRAGMAS or "=" in statement.query:
            return RUN, ""
        return REFUSE, f"PRAGMA {name} may write tables crowddb cannot follow; it is refused while roles are declared"
    if kind == _T.CALL:
        return RUN, ""  # a table function's rows go to the caller, not into a table
    if kind in _REFUSED:
        return REFUSE, _REFUSED[kind]
    return REFUSE, f"crowddb does not know what a {kind.name} statement does to stored columns"


def _created(words: list[str]) -> str:
    """What a CREATE statement makes: the word after CREATE [OR REPLACE] [TEMP|TEMPORARY|PERSISTENT] [UNIQUE]
    ('' when it cannot tell, which is read as a table)."""
    for word in words[1:]:
        if word not in ("or", "replace", "temp", "temporary", "persistent", "unique", "local", "global"):
            return word
    return ""


def _words(text: str, n: int) -> list[str]:
    """The first ``n`` tokens of a statement, lower-cased, comments skipped (sqlglot's DuckDB tokenizer); a text it
    cannot tokenize gives no words, which no rule above takes for harmless."""
    try:
        tokens = _TOKENIZER.tokenize(text)
    except Exception:  # noqa: BLE001 - sqlglot's TokenError and whatever else its tokenizer trips on
        return []
    # a command sqlglot does not parse (EXPLAIN, PRAGMA, ...) keeps the rest of its text as one token: split it
    return [word for t in tokens[:n] for word in t.text.lower().replace("(", " ").split()][:n]


_TOKENIZER = Dialect.get_or_raise("duckdb").tokenizer_class()
