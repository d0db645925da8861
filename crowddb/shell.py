"""The crowddb shell: ``crowddb`` with no command, with the DuckDB CLI's habits.

    crowddb                                   a shell on a transient in-memory database
    crowddb jobs.duckdb                       ... on a database file (created if missing)
    crowddb jobs.duckdb -c "SELECT 42;"       run the statements (or one dot command) and exit
    echo "SELECT 42;" | crowddb jobs.duckdb   statements from a pipe: run and printed, no prompt

A statement ends with ``;`` (outside strings and comments) and may span lines; Up and Down recall whole statements
from the history file (``~/.crowddb_history``, or the file ``$CROWDDB_HISTORY`` names); Tab completes table and
column names, human operators, table functions, SQL keywords and dot commands. ``.help`` lists the dot commands.

Results print as DuckDB prints relations (``.mode box``; also csv, line, markdown, table). A crowd statement (one that
calls a human operator) shows its plan first and, estimated above the spend threshold ($1.00; ``.budget N``), asks
``Spend $6.50 on 5 HITs? [y/N]``: anything but y runs nothing. ``--yes`` skips the question; input from a pipe cannot
answer it, so there a statement above the threshold is refused unless ``--yes`` is given. Without a prompt (-c, a
pipe) plans go to stderr, so that stdout holds only results.

An error prints one line and the shell goes on; with ``-c`` or a pipe the exit code is 1 if a statement failed.
Ctrl-C at the prompt clears the line; during a statement it stops the statement (a crowd statement says what it bought
and what stays published, for a rerun to collect without paying again). Ctrl-D or ``.quit`` leaves.
"""

from __future__ import annotations

import itertools
import math
import os
import shlex
import shutil
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import duckdb
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from . import __version__, connect
from .errors import CrowdDBError
from .operators import table_functions
from .session import CrowdDB
from .store import Store

__all__ = ["HISTORY_ENV", "MODES", "Shell", "ends_statement", "error_line", "interrupted", "interrupted_line",
           "last_run", "render", "split_statements"]

HISTORY_ENV = "CROWDDB_HISTORY"  # the history file's path (default ~/.crowddb_history)
MODES = ("box", "csv", "line", "markdown", "table")
DEFAULT_THRESHOLD = 1.00  # US$: a crowd statement estimated above this asks before it spends
PROMPT, CONTINUATION = "crowddb> ", "     ..> "
DOT_COMMANDS = {
    ".budget": ".budget [N]          ask before a crowd statement estimated above $N (default 1.00); no N: show it",
    ".exit": ".exit                leave the shell (also .quit, Ctrl-D)",
    ".explain": ".explain on|off      print every statement's plan (what it would publish and cost) before it runs",
    ".help": ".help                this list",
    ".mode": ".mode MODE           how results print: " + ", ".join(MODES) + " (box: as DuckDB prints them)",
    ".open": ".open [FILE]         close this database and open FILE (none: a new in-memory database)",
    ".quit": ".quit                leave the shell",
    ".roles": ".roles TABLE         the roles declared for TABLE's columns (what crowd operators may publish)",
    ".tables": ".tables [all]        the tables and views (all: with crowddb's own crowddb_* tables)",
}
_INTERNAL = ("crowddb_", "__crowd")  # crowddb's catalog and a crowd query's temp tables
_DIALECT = Dialect.get_or_raise("duckdb")
_LITERALS = frozenset({TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.RAW_STRING, TokenType.HEREDOC_STRING,
                       TokenType.BYTE_STRING, TokenType.BIT_STRING, TokenType.HEX_STRING, TokenType.NUMBER})
# the statements whose result is rows to show; DuckDB answers the others (CREATE, DROP, SET, ...) with a Count table
_QUERIES = frozenset({TokenType.SELECT, TokenType.WITH, TokenType.FROM, TokenType.VALUES, TokenType.TABLE,
                      TokenType.SHOW, TokenType.DESCRIBE, TokenType.SUMMARIZE, TokenType.PRAGMA, TokenType.PIVOT,
                      TokenType.UNPIVOT, TokenType.L_PAREN})


# ------------------------------------------------------------------------------------------------ reading SQL
def _tokens(text: str) -> list[Token] | None:
    """sqlglot's DuckDB tokens of ``text``; None when it cannot be read (an unterminated string or comment)."""
    try:
        return _DIALECT.tokenize(text)
    except TokenError:
        return None


def ends_statement(text: str) -> bool:
    """Whether ``text`` is ready to run: it ends with ``;`` outside strings and comments (a ``;`` inside a string, a
    quoted name or a comment, or after an unterminated quote, does not end it)."""
    tokens = _tokens(text)
    return bool(tokens) and tokens[-1].token_type == TokenType.SEMICOLON


def _pieces(text: str) -> list[tuple[str, list[Token] | None]]:
    """The statements of ``text`` with their tokens, cut at the semicolons the tokenizer sees."""
    tokens = _tokens(text)
    if tokens is None:  # DuckDB will say what is wrong with it
        return [(text.strip(), None)] if text.strip() else []
    pieces, start, current = [], 0, []
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            pieces.append((text[start:token.start].strip(), current))
            start, current = token.end + 1, []
        else:
            current.append(token)
    pieces.append((text[start:].strip(), current))
    return [(sql, toks) for sql, toks in pieces if sql and toks != []]


def split_statements(text: str) -> list[str]:
    """The statements of ``text`` (without their ``;``), in order."""
    return [sql for sql, _ in _pieces(text)]


def _calls(tokens: list[Token], names: Iterable[str]) -> bool:
    """Whether the tokens hold a call of one of ``names`` (a name followed by '(': not in a string or a comment)."""
    names = {n.lower() for n in names}
    return any(t.token_type not in _LITERALS and t.text.lower() in names and nxt.token_type == TokenType.L_PAREN
               for t, nxt in itertools.pairwise(tokens))


# ------------------------------------------------------------------------------------------------- messages
def error_line(err: BaseException) -> str:
    """An error as the shell prints it: ``Error: ...`` on one line (DuckDB's messages name their kind themselves;
    crowddb's and others are prefixed with their class). DuckDB's carets under the query text are dropped."""
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip() and set(line.strip()) - {"^"})
    return f"Error: {text}" if isinstance(err, duckdb.Error) else f"Error: {type(err).__name__}: {text}"


def interrupted(err: BaseException) -> bool:
    """Ctrl-C as it reaches us: a KeyboardInterrupt, or DuckDB's word for a query it stopped (it answers SIGINT during
    a query itself, with InterruptException or a RuntimeError 'Query interrupted')."""
    return isinstance(err, (KeyboardInterrupt, duckdb.InterruptException)) or (
        isinstance(err, RuntimeError) and "interrupted" in str(err).lower())


def last_run(db: CrowdDB) -> int:
    """The id of the database's latest crowd run (0: none): what a statement runs after it is its own."""
    return Store(db.con).last_run()


def interrupted_line(db: CrowdDB, since_run: int, *, closing: bool = False) -> str:
    """What a crowd statement stopped by Ctrl-C left, in one sentence: what its runs (those after ``since_run``)
    bought, and which of their HITs stay published, which a rerun of the query collects without paying for them
    again. ``closing``: the database closes with the command (``crowddb sql``), so say where that does not hold."""
    try:
        bought = Store(db.con).purchases_since(since_run)
    except duckdb.Error as err:  # the database itself cannot be read now: say so rather than guess
        return f"what it bought could not be read ({error_line(err)})"
    runs, hits, assignments, cost = bought["runs"], bought["hits"], bought["assignments"], bought["cost"]
    published, waiting = bought["published"], bought["waiting"]
    if not runs and not published:
        return "nothing was bought or published."
    label = f"run{'s' if len(runs) > 1 else ''} {', '.join(map(str, runs))}" if runs else "the statement"
    line = (f"{label} bought {_n(hits, 'HIT')} ({_n(assignments, 'assignment')}, ${float(cost):,.2f})" if hits
            else f"{label} bought nothing")
    if not published:
        return line + "; nothing stays published."
    line += (f"; {_n(published, 'HIT')} ({_n(int(waiting), 'assignment')}) stay published: running the same "
             "query again collects their answers without paying for them again")
    if closing and db.database == ":memory:":
        line += " (not this in-memory database, which forgets them when the command ends: use a database file)"
    elif closing and getattr(db.platform, "name", None) == "web":
        line += f" (`crowddb serve --db {db.database}` keeps their page up meanwhile)"
    return line + "."


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


# --------------------------------------------------------------------------------------------------- rendering
def _cells(relation: Any) -> list[tuple[str | None, ...]]:
    """The rows of ``relation`` as DuckDB writes each value (its VARCHAR cast; None for NULL)."""
    return relation.query("__crowddb_shell", "SELECT COLUMNS(*)::VARCHAR FROM __crowddb_shell").fetchall()


def render(relation: Any, mode: str) -> str:
    """``relation`` printed in ``mode`` (``MODES``); box is DuckDB's own rendering."""
    if mode == "box":
        return str(relation).rstrip("\n")
    names, rows = list(relation.columns), _cells(relation)
    if mode == "csv":
        import csv
        import io

        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([["" if v is None else v for v in row] for row in rows])
        return out.getvalue().rstrip("\n")
    rows = [tuple("NULL" if v is None else v for v in row) for row in rows]
    if mode == "line":
        width = max(map(len, names), default=0)
        return "\n\n".join("\n".join(f"{n:>{width}} = {v}" for n, v in zip(names, row)) for row in rows)
    widths = [max([len(n)] + [len(row[i]) for row in rows]) for i, n in enumerate(names)]

    def line(values: Iterable[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"

    if mode == "markdown":
        rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        return "\n".join([line(names), rule, *map(line, rows)])
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    return "\n".join([rule, line(names), rule, *map(line, rows), rule])


# ------------------------------------------------------------------------------------------------------ shell
class Shell:
    """One database and the state of a session on it (mode, explain, spend threshold); reads input from a terminal
    (``interactive``), a pipe (``script``) or ``-c`` (``command``), and runs each statement or dot command."""

    def __init__(self, database: str = ":memory:", *, seed: int | None = None, yes: bool = False, mode: str = "box",
                 can_ask: bool = False, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.seed, self.yes, self.mode, self.can_ask = seed, yes, mode, can_ask
        self.out, self.err = out or sys.stdout, err or sys.stderr
        self.notes = self.err  # plans shown unasked: on stderr when stdout is for results only (-c, a pipe)
        self.explain_all = False
        self.threshold = DEFAULT_THRESHOLD
        self.failed = self.done = self.stopped = False  # a statement failed; .quit; Ctrl-C ended a script
        self.session: Any = None  # the prompt_toolkit session, in interactive mode
        self._words: list[tuple[str, str]] | None = None  # completion candidates, read again after each statement
        self.db = connect(database, seed=seed)

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------------------------------------- input
    def interactive(self) -> int:
        """Read statements at a prompt until Ctrl-D or .quit; returns the exit code (0)."""
        from prompt_toolkit import PromptSession
        from prompt_toolkit.key_binding import KeyBindings

        keys = KeyBindings()

        @keys.add("enter")
        def _enter(event: Any) -> None:  # Enter runs a finished statement; inside one it starts a new line
            buffer = event.current_buffer
            state = buffer.complete_state
            if state is not None and state.current_completion is not None:
                buffer.apply_completion(state.current_completion)
            elif not buffer.text.strip() or buffer.text.lstrip().startswith(".") or ends_statement(buffer.text):
                buffer.validate_and_handle()
            else:
                buffer.insert_text("\n")

        self.session = PromptSession(history=self._history(), completer=_completer(self), multiline=True,
                                     key_bindings=keys, complete_while_typing=False,
                                     prompt_continuation=lambda width, line, soft: CONTINUATION.rjust(width))
        self.notes = self.out
        self.can_ask = True
        where = ("a transient in-memory database.\nUse \".open FILE\" to reopen on a persistent database"
                 if self.db.database == ":memory:" else self.db.database)
        print(f"crowddb {__version__} (DuckDB {duckdb.__version__})\nEnter \".help\" for usage hints.\n"
              f"Connected to {where}.", file=self.out, flush=True)
        while not self.done:
            try:
                text = self.session.prompt(PROMPT)
            except KeyboardInterrupt:  # Ctrl-C at the prompt: the line is dropped, the shell goes on
                continue
            except EOFError:  # Ctrl-D
                break
            try:
                self.run(text)
            except KeyboardInterrupt:  # outside a statement (a dot command): it stops, the shell goes on
                print("Interrupted.", file=self.err)
        return 0

    def _history(self) -> Any:
        """The history file ($CROWDDB_HISTORY, or ~/.crowddb_history); one that cannot be written (a read-only home)
        would fail at the first Enter: then this session's history is kept in memory, and the shell says so."""
        from prompt_toolkit.history import FileHistory, InMemoryHistory

        path = os.environ.get(HISTORY_ENV) or str(Path.home() / ".crowddb_history")
        try:
            with open(path, "ab"):
                pass
        except OSError as err:
            print(f"crowddb: history not saved ({path}: {err.strerror}); set {HISTORY_ENV} to a writable file",
                  file=self.err)
            return InMemoryHistory()
        return FileHistory(path)

    def script(self, lines: Iterable[str]) -> int:
        """Run what ``lines`` hold (a pipe): each statement once its ``;`` is read, a dot command per line, and what
        is left at the end. Exit code: 1 if anything failed, 130 if interrupted, else 0."""
        pending = ""
        try:
            for line in lines:
                if not pending.strip() and line.lstrip().startswith("."):
                    self.run(line)
                else:
                    pending += line
                    if ends_statement(pending):
                        self.run(pending)
                        pending = ""
                if self.done:
                    return self._exit_code()
            self.run(pending)
        except KeyboardInterrupt:  # Ctrl-C between the statements of a script ends it
            print("Interrupted.", file=self.err)
            return 130
        return self._exit_code()

    def command(self, text: str) -> int:
        """``-c TEXT``: its statements, or one dot command; the exit code as ``script``."""
        return self.script([text])

    def _exit_code(self) -> int:
        return 130 if self.stopped else int(self.failed)

    # ------------------------------------------------------------------------------------------ one input
    def run(self, text: str) -> None:
        """Run a dot command or the statements of ``text``; the statements after one that fails are not run."""
        if not text.strip():
            return
        if text.lstrip().startswith("."):
            self._dot(text.strip())
            return
        for sql, tokens in _pieces(text):
            if not self._statement(sql, tokens):
                self.failed = True
                return
            if self.done:
                return

    def _statement(self, sql: str, tokens: list[Token] | None) -> bool:
        """Run one statement and print its result; False if it failed (or was refused)."""
        db = self.db
        self._words = None  # it may create, drop or alter tables
        # text the tokenizer cannot read may still call an operator: crowddb (explain) decides
        named = tokens is None or _calls(tokens, db.registry.names())
        try:
            plan = db.explain(sql) if named or self.explain_all else None
            human = named and plan is not None and bool(plan.operators)
            if self.explain_all or human:
                print(plan, file=self.out if self.explain_all else self.notes, flush=True)
            if human and plan.estimated_cost > self.threshold + 1e-9 and not self.yes:
                cost, hits = f"${plan.estimated_cost:,.2f}", _n(plan.hits, "HIT")
                if not self.can_ask:
                    print(f"Error: spending {cost} on {hits} is over the ${self.threshold:,.2f} threshold and there is "
                          "no terminal to ask: nothing was run (--yes runs it)", file=self.err)
                    return False
                if not self._confirm(f"Spend {cost} on {hits}? [y/N] "):
                    print("Nothing was run.", file=self.out)
                    return True
            if named or _calls(tokens, table_functions.names()):
                return self._crowd(sql, tokens, last_run(db) if human else None)
            return self._plain(sql, tokens)
        except KeyboardInterrupt:  # while explain() estimated it, or while asking
            print("Interrupted.", file=self.err)
            return self._interrupted()
        except Exception as err:  # noqa: BLE001 - a shell reports and goes on (DuckDB's and crowddb's errors, or a bug)
            print(error_line(err), file=self.err)
            return False

    def _crowd(self, sql: str, tokens: list[Token] | None, since: int | None) -> bool:
        """A statement crowddb plans (a human operator or a table function), run in the main thread so that Ctrl-C
        stops its Python code where it is (purchases are on record as they happen). ``since``: the latest run before
        a statement with human operators, whose runs Ctrl-C then reports on."""
        try:
            result = self.db.sql(sql)
            text = None if result is None or not self._shows(result, tokens) else render(result, self.mode)
        except BaseException as err:
            if not interrupted(err):
                raise
            print("Interrupted: " + (interrupted_line(self.db, since) if since is not None else
                                     "the statement was stopped."), file=self.err)
            return self._interrupted()
        if text is not None:
            print(text, file=self.out, flush=True)
        return True

    def _plain(self, sql: str, tokens: list[Token] | None) -> bool:
        """Plain DuckDB SQL, run in a worker thread: Ctrl-C reaches the main thread, which stops the query with the
        connection's interrupt() (DuckDB checks for it while it runs)."""
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                result = self.db.sql(sql)
                box["text"] = None if result is None or not self._shows(result, tokens) else render(result, self.mode)
            except BaseException as err:  # noqa: BLE001 - handed to the main thread
                box["error"] = err

        worker = threading.Thread(target=work, name="crowddb-shell-query", daemon=True)
        worker.start()
        stopped = False
        while worker.is_alive():
            try:
                worker.join(0.05)
            except KeyboardInterrupt:
                stopped = True
                self.db.con.interrupt()
        error = box.get("error")
        if stopped or (error is not None and interrupted(error)):
            print("Interrupted.", file=self.err)
            return self._interrupted()
        if error is not None:
            raise error
        if box.get("text") is not None:
            print(box["text"], file=self.out, flush=True)
        return True

    def _interrupted(self) -> bool:
        """After Ctrl-C stopped a statement: the shell goes on; a script (-c, a pipe) ends with exit code 130."""
        if self.session is None:
            self.done = self.stopped = True
        return True

    @staticmethod
    def _shows(result: Any, tokens: list[Token] | None) -> bool:
        """Whether to print a statement's result: always for a query; for CREATE, INSERT and the like not DuckDB's
        bare Count (as its CLI), but what they return (INSERT ... RETURNING)."""
        if tokens and tokens[0].token_type in _QUERIES:
            return True
        return list(result.columns) != ["Count"]

    def _confirm(self, question: str) -> bool:
        try:
            if self.session is not None:
                from prompt_toolkit import prompt

                answer = prompt(question)
            else:  # -c at a terminal: the question on stderr, so stdout holds only results
                print(question, end="", file=self.err, flush=True)
                answer = sys.stdin.readline()
        except (KeyboardInterrupt, EOFError):
            return False
        return answer.strip().lower() in ("y", "yes")

    # -------------------------------------------------------------------------------------------- dot commands
    def _dot(self, text: str) -> None:
        try:
            name, *args = shlex.split(text)
        except ValueError as err:
            self._fail(f"Error: cannot read {text!r}: {err}")
            return
        handler = {".help": self._help, ".tables": self._tables, ".roles": self._roles, ".explain": self._explain,
                   ".mode": self._mode, ".budget": self._budget, ".open": self._open, ".quit": self._quit,
                   ".exit": self._quit}.get(name)
        if handler is None:
            self._fail(f'Error: unknown command "{name}": enter ".help" for the list')
            return
        try:
            handler(args)
        except (CrowdDBError, duckdb.Error) as err:
            self._fail(error_line(err))

    def _fail(self, line: str) -> None:
        print(line, file=self.err)
        self.failed = True

    def _help(self, args: list[str]) -> None:
        print("\n".join(DOT_COMMANDS.values()), file=self.out)

    def _tables(self, args: list[str]) -> None:
        if args not in ([], ["all"]):
            self._fail("Error: usage: .tables [all]")
            return
        names = [n for n in self._table_names() if args or not n.lower().startswith(_INTERNAL)]
        if names:
            width = max(map(len, names)) + 2
            per_line = max(1, shutil.get_terminal_size((80, 24)).columns // width)
            lines = [names[i:i + per_line] for i in range(0, len(names), per_line)]
            print("\n".join("".join(n.ljust(width) for n in line).rstrip() for line in lines), file=self.out)

    def _table_names(self) -> list[str]:
        """Tables and views of this database and the temp schema, named as a query would (schema. when not main)."""
        rows = self.db.con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name IN (current_database(), 'temp') "
            "UNION ALL SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal "
            "AND database_name IN (current_database(), 'temp')").fetchall()
        return sorted({name if schema == "main" else f"{schema}.{name}" for schema, name in rows}, key=str.lower)

    def _roles(self, args: list[str]) -> None:
        if len(args) != 1:
            self._fail("Error: usage: .roles TABLE")
            return
        roles = self.db.roles(args[0])
        listed = [("quasi_identifier", [f"{c} ({roles.kinds[c]})" if roles.kinds.get(c) else c
                                        for c in roles.quasi_identifiers]),
                  ("sensitive", list(roles.sensitive)), ("ground_truth", [roles.ground_truth] if roles.ground_truth
                                                         else []),
                  ("key", [roles.key] if roles.key else []), ("core", list(roles.core))]
        listed = [(role, columns) for role, columns in listed if columns]
        if not listed:
            print(f"{roles.table}: no roles declared (crowd operators may publish every column)", file=self.out)
            return
        width = max(len(role) for role, _ in listed)
        print("\n".join(f"{role:<{width}}  {', '.join(columns)}" for role, columns in listed), file=self.out)

    def _explain(self, args: list[str]) -> None:
        if args not in (["on"], ["off"]):
            self._fail(f"Error: usage: .explain on|off (now {'on' if self.explain_all else 'off'})")
            return
        self.explain_all = args == ["on"]

    def _mode(self, args: list[str]) -> None:
        if not args:
            print(self.mode, file=self.out)
        elif len(args) == 1 and args[0] in MODES:
            self.mode = args[0]
        else:
            self._fail(f"Error: usage: .mode {'|'.join(MODES)}")

    def _budget(self, args: list[str]) -> None:
        if not args:
            print(f"${self.threshold:,.2f}: a crowd statement estimated above it asks first", file=self.out)
            return
        try:
            value = float(args[0].lstrip("$"))
        except ValueError:
            value = math.nan
        if len(args) != 1 or not math.isfinite(value) or value < 0:
            self._fail("Error: usage: .budget N (US$, a number of at least 0)")
            return
        self.threshold = value

    def _open(self, args: list[str]) -> None:
        if len(args) > 1:
            self._fail("Error: usage: .open [FILE]")
            return
        db = connect(args[0] if args else ":memory:", seed=self.seed)  # the old one stays open if this fails
        self.db.close()
        self.db, self._words = db, None

    def _quit(self, args: list[str]) -> None:
        self.done = True

    # ---------------------------------------------------------------------------------------------- completion
    def words(self) -> list[tuple[str, str]]:
        """What Tab completes in SQL: (word, kind) for tables, columns, human operators, table functions and SQL
        keywords (read from the database again after each statement)."""
        if self._words is None:
            con = self.db.con
            words = [(n, "table") for n in self._table_names() if not n.startswith("__crowd")]
            words += [(c, "column") for (c,) in con.execute(
                "SELECT DISTINCT column_name FROM duckdb_columns() WHERE database_name IN (current_database(), 'temp') "
                "AND NOT starts_with(table_name, '__crowd') ORDER BY 1").fetchall()]
            words += [(n, "operator") for n in sorted(self.db.registry.names())]
            words += [(n.upper(), "table function") for n in sorted(table_functions.names())]
            words += [(k.upper(), "keyword") for (k,) in con.execute(
                "SELECT keyword_name FROM duckdb_keywords() ORDER BY 1").fetchall()]
            self._words = words
        return self._words


def _completions(shell: Shell, text: str) -> Iterator[tuple[str, int, str]]:
    """(completion, start position, kind) for the text before the cursor: a dot command or its argument, else a SQL
    word (keywords and table functions in the case typed)."""
    if text.lstrip().startswith(".") and "\n" not in text:
        command, space, rest = text.lstrip().partition(" ")
        if not space:
            yield from ((name, -len(command), "command") for name in DOT_COMMANDS if name.startswith(command))
            return
        word = rest.rsplit(" ", 1)[-1]
        choices = {".roles": lambda: [n for n in shell._table_names() if not n.lower().startswith(_INTERNAL)],
                   ".mode": lambda: MODES, ".explain": lambda: ("on", "off"), ".tables": lambda: ("all",)}.get(command)
        for choice in choices() if choices else ():
            if choice.lower().startswith(word.lower()):
                yield choice, -len(word), command[1:]
        return
    word = ""
    while len(word) < len(text) and (text[-len(word) - 1].isalnum() or text[-len(word) - 1] == "_"):
        word = text[-len(word) - 1:]
    if not word:
        return
    lower = word == word.lower()
    seen = set()
    for candidate, kind in shell.words():
        if kind in ("keyword", "table function") and lower:
            candidate = candidate.lower()
        if candidate.lower().startswith(word.lower()) and candidate not in seen:
            seen.add(candidate)
            yield candidate, -len(word), kind


def _completer(shell: Shell) -> Any:
    from prompt_toolkit.completion import Completer, Completion

    class ShellCompleter(Completer):
        def get_completions(self, document: Any, complete_event: Any) -> Iterator[Completion]:
            for text, start, kind in _completions(shell, document.text_before_cursor):
                yield Completion(text, start_position=start, display_meta=kind)

    return ShellCompleter()

