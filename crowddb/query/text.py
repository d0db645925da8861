"""A query's text: which statements call a crowd operator, which move roles, and the statements parsed.

Which statements are crowd statements, and which move data or names whose roles must follow, is decided on the tokens
of the text (sqlglot's DuckDB tokenizer), never by a pattern over the text: a name is one token however it is spelt
(quotes, semicolons, comments, ``--``, ``'`` inside a quoted identifier), and a literal or a comment is one token or
none. Only a text that calls an operator is parsed (``read``); any other goes to DuckDB as it is."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import threading

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

from .._sql import DIALECT
from ..errors import ArgumentError, SQLParseError
from ..operators import table_functions
from ..udf import Registry

# token or none.
_DIALECT = Dialect.get_or_raise(DIALECT)
_TOKENIZERS = threading.local()  # a tokenizer keeps state while it runs: one per thread
#: tokens that are values, never names: an operator name inside one is text, not a call
_LITERAL_TOKENS = frozenset({TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.RAW_STRING,
                             TokenType.NATIONAL_RAW_STRING, TokenType.HEREDOC_STRING, TokenType.BYTE_STRING,
                             TokenType.BIT_STRING, TokenType.HEX_STRING, TokenType.UNICODE_STRING, TokenType.NUMBER})
#: cheap and conservative: a statement that fills a table from a query or renames one holds these keywords in this
#: order, so text without them needs no tokens (a token's text is always a piece of the query's text, in order)
_TRACKED_WORDS = (("create", "table", "as"), ("insert", "select"), ("insert", "from"), ("insert", "table"),
                  ("insert", "by", "name"), ("alter", "rename"), ("update", "set"))
_SCAN_CACHE_CHARS = 20_000  # texts up to this long are remembered with their scan (plain SQL is often repeated)


@dataclasses.dataclass(frozen=True)
class Scan:
    """What the tokens of a query's text say (before anything is parsed)."""

    crowd: bool            # a registered operator or table function is called: NAME (
    tracked: bool          # a statement may fill a table from a query or rename one (its roles must follow)
    tokenized: bool = True  # False: sqlglot's tokenizer could not read the text (then ``crowd``/``tracked`` are
    #                         what the raw text could hold)
    mentioned: tuple[str, ...] = ()  # registered names that appear in the raw text at all


_COMMANDS = frozenset(_DIALECT.tokenizer_class.COMMANDS)


def _tokenize(sql: str, depth: int = 0) -> list[Token]:
    """The tokens of ``sql``. sqlglot keeps the rest of a statement that starts with a command it does not parse
    (EXPLAIN, PREPARE, EXECUTE, ...) as one string token: that text is SQL DuckDB runs, so it is tokenized too."""
    tokenizer = getattr(_TOKENIZERS, "tokenizer", None)
    if tokenizer is None:
        tokenizer = _TOKENIZERS.tokenizer = _DIALECT.tokenizer_class(dialect=_DIALECT)
    tokens = tokenizer.tokenize(sql)
    if not any(t.token_type in _COMMANDS for t in tokens):
        return tokens
    out: list[Token] = []
    for before, token in zip([None, *tokens], tokens):
        if (depth < 8 and token.token_type == TokenType.STRING and before is not None
                and before.token_type in _COMMANDS):  # (a real literal there only reads as more tokens: fail closed)
            with contextlib.suppress(Exception):  # untokenizable: the rest of the command stays one token
                out.extend(_tokenize(token.text, depth + 1))
                continue
        out.append(token)
    return out


def _statements(tokens: list[Token]) -> list[list[Token]]:
    """Tokens split into statements at semicolons."""
    return [list(group) for semicolon, group in itertools.groupby(tokens, lambda t: t.token_type == TokenType.SEMICOLON)
            if not semicolon]


def _calls(tokens: list[Token], names: frozenset[str]) -> bool:
    """Is one of ``names`` called: a name token (quoted or not; not a literal) right before ``(``?"""
    return any(t.token_type not in _LITERAL_TOKENS and t.text.lower() in names and nxt.token_type == TokenType.L_PAREN
               for t, nxt in itertools.pairwise(tokens))


def _tracks(statement: list[Token]) -> bool:
    """Could this statement fill a table from a query (CREATE ... TABLE ... AS, INSERT ... SELECT / FROM / TABLE /
    BY NAME, UPDATE ... SET) or rename a table or column (ALTER ... RENAME)? By token types: keywords, not names that
    spell them."""
    types = [t.token_type for t in statement]

    def after(first: TokenType, *then: TokenType) -> bool:
        if first not in types:
            return False
        rest = types[types.index(first) + 1:]
        for want in then:
            if want not in rest:
                return False
            rest = rest[rest.index(want) + 1:]
        return True

    by_name = any(a.text.upper() == "BY" and b.text.upper() == "NAME" for a, b in itertools.pairwise(statement)
                  if a.token_type not in _LITERAL_TOKENS and a.token_type != TokenType.IDENTIFIER)
    return (after(TokenType.CREATE, TokenType.TABLE, TokenType.ALIAS)
            or (TokenType.INSERT in types and (by_name or any(after(TokenType.INSERT, t) for t in (
                TokenType.SELECT, TokenType.FROM, TokenType.TABLE))))
            or after(TokenType.ALTER, TokenType.RENAME) or after(TokenType.UPDATE, TokenType.SET))


def _in_order(text: str, words: tuple[str, ...]) -> bool:
    at = 0
    for word in words:
        at = text.find(word, at)
        if at < 0:
            return False
        at += len(word)
    return True


def _scan_text(query: str, names: frozenset[str]) -> Scan:
    lower = query.lower()
    mentioned = tuple(sorted(n for n in names if n in lower))
    maybe_tracked = any(_in_order(lower, words) for words in _TRACKED_WORDS)
    if not mentioned and not maybe_tracked:
        return Scan(False, False)
    try:
        tokens = _tokenize(query)
    except Exception:  # noqa: BLE001 - sqlglot's TokenError and whatever else its tokenizer trips on
        return Scan(bool(mentioned), maybe_tracked, tokenized=False, mentioned=mentioned)
    crowd = bool(mentioned) and _calls(tokens, names)
    tracked = maybe_tracked and any(_tracks(s) for s in _statements(tokens))
    return Scan(crowd, tracked, mentioned=mentioned)


_scan_cached = functools.lru_cache(maxsize=512)(_scan_text)


def scan(query: str, names: frozenset[str]) -> Scan:
    """The scan of ``query``'s text for crowd calls and role-carrying statements (remembered for short texts)."""
    return _scan_cached(query, names) if len(query) <= _SCAN_CACHE_CHARS else _scan_text(query, names)


def tracked_command(statement: exp.Expression) -> bool:
    """A statement sqlglot could only keep as text (exp.Command) that may fill a table or rename one."""
    if not isinstance(statement, exp.Command):
        return False
    try:
        return any(_tracks(s) for s in _statements(_tokenize(statement.sql(DIALECT))))
    except Exception:  # noqa: BLE001
        return True



class Reader:
    """Reads the texts of one connection's queries against its operators and the table functions (the names a
    text is scanned for change only when one is registered; the last text's scan is remembered)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._names: tuple[frozenset[str] | None, frozenset[str] | None, frozenset[str]] = (None, None, frozenset())
        self._last: tuple[str, frozenset[str], Scan] | None = None

    def scan(self, query: str) -> Scan:
        """What the tokens of ``query`` say: does it call a crowd operator, may it carry roles."""
        registered, functions = self.registry.name_set(), table_functions.names()
        if self._names[0] is not registered or self._names[1] is not functions:  # one was registered since
            self._names = (registered, functions, registered | functions)
        names = self._names[2]
        last = self._last
        if last is not None and last[0] is query and last[1] == names:
            return last[2]
        found = scan(query, names)
        self._last = (query, names, found)
        return found

    def crowd_statements(self, query: str) -> list[exp.Expression] | None:
        """The parsed statements if ``query`` calls a crowd operator or table function, else None (DuckDB gets the
        text untouched)."""
        if not isinstance(query, str):
            raise ArgumentError(f"SQL must be a string, got {type(query).__name__}")
        found = self.scan(query)
        if not found.tokenized:  # sqlglot's tokenizer cannot read the text: the parser is the last chance
            try:
                statements = parse(query)
            except SQLParseError as err:
                if found.mentioned:  # fail closed: it might call a crowd operator DuckDB would not plan
                    raise SQLParseError(f"crowddb cannot read this SQL ({err}), and it mentions "
                                        f"{', '.join(found.mentioned)}: it is not run, so no crowd operator or table "
                                        "function in it can run unplanned") from None
                return None
        elif not found.crowd:
            return None
        else:
            statements = parse(query)
        return statements if any(self.calls_crowd(s) for s in statements) else None

    def calls_crowd(self, statement: exp.Expression) -> bool:
        """Does ``statement`` call a human operator or a table function (in the tree, not only in its text)?"""
        return bool(crowd_nodes(statement, self.registry))

    def asks_humans(self, statement: exp.Expression) -> bool:
        return asks_humans(statement, self.registry)


def crowd_nodes(root: exp.Expression, registry: Registry) -> list[exp.Expression]:
    """The human operator calls and table functions in ``root``, in walk order."""
    return [n for n in root.walk() if is_human(n, registry) or is_table_function(n)]


def asks_humans(statement: exp.Expression, registry: Registry) -> bool:
    """Does ``statement`` call a human operator (not only table functions)?"""
    return any(is_human(n, registry) for n in statement.walk())


def is_human(node: exp.Expression, registry: Registry) -> bool:
    """Is ``node`` a call of a registered human operator?"""
    return isinstance(node, exp.Anonymous) and node.name in registry


def is_table_function(node: exp.Expression) -> bool:
    """Is ``node`` a table function in FROM (``FROM NAME(...)``)?"""
    return (isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous)
            and node.this.name.lower() in table_functions.TABLE_FUNCTIONS)


def parse(sql: str) -> list[exp.Expression]:
    """Parse SQL text into statements, with a crowddb error that names the problem."""
    try:
        return [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except sqlglot.errors.SqlglotError as err:
        try:  # DuckDB's own words for a typo, as plain SQL would get them ("syntax error at or near ...")
            duckdb.extract_statements(sql)
        except duckdb.ParserException as duck:
            raise SQLParseError(str(duck)) from None
        except duckdb.Error:
            pass
        first = (getattr(err, "errors", None) or [{}])[0]  # a TokenError carries no positions
        where = f" at line {first.get('line')}, column {first.get('col')}" if first else ""
        raise SQLParseError(f"malformed SQL{where}: {first.get('description', err)}") from None


#: the schema part that names a Spark table in crowddb SQL (``spark.census``): such a statement runs on Spark
#: (crowddb/spark/sql.py), found here so the local path never imports PySpark
SPARK = "spark"


# ------------------------------------------------------------------------------ statements naming Spark tables
def table_parts(node: exp.Expression) -> list[exp.Expression]:
    """A table reference's name parts, outermost first (catalog, schema, table), those present."""
    keys = ("catalog", "db", "this") if isinstance(node, exp.Table) else ("catalog", "db", "table", "this")
    return [node.args[k] for k in keys if node.args.get(k) is not None]


def spark_name(node: exp.Expression) -> str | None:
    """The Spark table ``node`` names (``spark.census`` -> 'census'), None when it names none. A longer name under
    ``spark`` is refused: only ``spark.<name>`` is a Spark table in crowddb SQL."""
    parts = table_parts(node)
    if len(parts) < 2 or not all(isinstance(p, exp.Identifier) for p in parts):
        return None
    if parts[0].name.lower() != SPARK:  # DuckDB compares names case-insensitively, quoted or not
        return None
    if len(parts) != 2:
        raise ArgumentError(f"{node.sql(DIALECT)}: a Spark table is written spark.<name> (a table or temp view of the "
                            "session's current database); create a temp view of it and name that")
    return parts[1].name.lower()  # Spark's catalog, as DuckDB, reads names case-insensitively


def function_input(call: exp.Anonymous) -> exp.Expression | None:
    """A table function's first positional argument (its input), if any."""
    first = call.expressions[0] if call.expressions else None
    return None if isinstance(first, (exp.PropertyEQ, exp.Kwarg, exp.EQ)) else first


def spark_tables(statement: exp.Expression) -> list[str]:
    """The Spark tables a statement names: in FROM / JOIN, or as a table function's input."""
    found = []
    for node in statement.find_all(exp.Table):
        if is_table_function(node):
            arg = function_input(node.this)
            name = spark_name(arg) if isinstance(arg, (exp.Column, exp.Table)) else None
        else:
            name = spark_name(node)
        if name is not None:
            found.append(name)
    return found


def names_spark(query: object) -> list[exp.Expression] | None:
    """The parsed statements of ``query`` when one of them names a Spark table (``spark.<name>``), else None (the
    text goes the local way, untouched). A text that cannot be parsed but holds the tokens ``spark .`` is refused:
    crowddb cannot tell whether it reads a Spark table."""
    if not isinstance(query, str) or SPARK not in query.lower():  # (no statement names spark without the word)
        return None
    try:
        statements = parse(query)
    except SQLParseError:
        if _spark_tokens(query):
            raise
        return None
    for statement in statements:
        if spark_tables(statement) or (isinstance(statement, exp.Command) and _spark_tokens(statement.sql(DIALECT))):
            return statements
    return None


def _spark_tokens(text: str) -> bool:
    """Do the text's tokens hold a name ``spark`` followed by a dot (a text sqlglot could not parse or kept as a
    command)? A text that cannot be tokenized might: yes."""
    try:
        tokens = _tokenize(text)
    except Exception:  # noqa: BLE001 - sqlglot's TokenError and whatever else its tokenizer trips on
        return True
    return any(a.text.lower() == SPARK and a.token_type in (TokenType.VAR, TokenType.IDENTIFIER)
               and b.token_type == TokenType.DOT for a, b in itertools.pairwise(tokens))
