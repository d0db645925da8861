"""The ``crowddb`` command: a shell on a crowd database (``crowddb [FILE]``, see ``crowddb.shell``), or a command: run
SQL against it, explain it, serve its HIT pages, list what workers earned, or run the demo.

A first argument naming a command (``COMMANDS``) runs that command; anything else is the shell's: an optional
database file and its options (``-c``, ``--yes``, ...). So a database file named like a command is opened as
``./sql``."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import duckdb

from . import __version__, connect
from .crowd.payments import payments_csv
from .errors import ArgumentError, CrowdDBError
from .shell import MODES, Shell, interrupted, interrupted_line, last_run

COMMANDS = ("sql", "explain", "serve", "payments", "demo")


def _print_result(result) -> None:
    if result is None:
        return
    frame = result.df()
    import pandas as pd

    with pd.option_context("display.max_rows", 60, "display.max_columns", 30, "display.width", 160):
        print(frame.to_string(index=False, max_rows=60))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        return _command(argv)
    return _shell(argv)


def _shell(argv: list[str]) -> int:
    """``crowddb [FILE] [-c SQL] [--yes] ...``: the interactive shell, or SQL from -c or a pipe."""
    parser = argparse.ArgumentParser(
        prog="crowddb", description="A crowd database on DuckDB: a SQL shell on FILE (default: in memory).",
        epilog=f"commands: {', '.join(COMMANDS)} (crowddb COMMAND -h). In the shell, .help lists the dot commands.")
    parser.add_argument("database", nargs="?", default=":memory:", metavar="FILE",
                        help="database file (created if missing)")
    parser.add_argument("-c", dest="command", metavar="SQL", help="run the SQL (or one dot command) and exit")
    parser.add_argument("-y", "--yes", action="store_true",
                        help="run crowd statements without asking, whatever they are estimated to cost")
    parser.add_argument("--seed", type=int, default=None, help="seed for the simulated crowd and anonymization")
    parser.add_argument("--mode", choices=MODES, default="box", help="how results print (default: box)")
    parser.add_argument("--version", action="version", version=f"crowddb {__version__} (DuckDB {duckdb.__version__})")
    args = parser.parse_args(argv)
    interactive = args.command is None and sys.stdin.isatty() and sys.stdout.isatty()
    try:
        shell = Shell(args.database, seed=args.seed, yes=args.yes, mode=args.mode,
                      can_ask=sys.stdin.isatty() and args.command is not None)
    except CrowdDBError as err:
        print(f"crowddb: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    with contextlib.closing(shell):
        if interactive:
            return shell.interactive()
        if args.command is not None:
            return shell.command(args.command)
        return shell.script(sys.stdin)


def _command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="crowddb", description="A crowd database on DuckDB.",
                                     epilog="crowddb [FILE] without a command opens the SQL shell.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("sql", "run SQL (crowd operators included)"), ("explain", "show what SQL would post")):
        p = sub.add_parser(name, help=text)
        p.add_argument("query", help="the SQL text (-: read it from standard input)")
        p.add_argument("--db", default=":memory:", help="database file (default: in memory)")
        p.add_argument("--seed", type=int, default=None, help="seed for the simulated crowd and anonymization")
        p.add_argument("--budget", type=float, default=None, help="refuse queries estimated above this many US$")
        p.add_argument("--web", action="store_true", help="real people answer on crowddb's HIT page (WebCrowd) "
                                                          "instead of the simulated crowd")
        p.add_argument("--host", default="127.0.0.1", help="--web: the address the HIT page binds to")
        p.add_argument("--port", type=int, default=8040, help="--web: the HIT page's port")
        p.add_argument("--workers", type=int, default=5, help="--web: worker links to hand out (a HIT needs as "
                       "many different people as its assignments: 5 by default)")
        p.add_argument("--timeout", type=float, default=None,
                       help="--web: seconds to wait for the answers; a rerun later collects the rest")
    pay = sub.add_parser("payments", help="what each worker earned in a run, as the CSV marketplaces take for bulk "
                                          "bonus payments (participant_id,amount,worker_id,assignments)")
    pay.add_argument("--db", required=True, help="database file")
    pay.add_argument("--run", type=int, required=True, help="the run id (a crowd query's operator run)")
    srv = sub.add_parser("serve", help="keep the HIT page of a database up (no Python session needed; answers "
                                       "are collected by the next run of the query)")
    srv.add_argument("--db", required=True, help="database file (its HIT market is the file beside it, "
                                                 "DB.market.sqlite; the database itself stays free for sessions)")
    srv.add_argument("--create", action="store_true", help="serve even if the database file does not exist yet")
    srv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    srv.add_argument("--port", type=int, default=8040)
    srv.add_argument("--workers", type=int, default=5, help="worker links to have (created when fewer exist)")
    demo = sub.add_parser("demo", help="the job-recommendation scenario on the shipped Adult data")
    demo.add_argument("--db", default=":memory:", help="database file (default: in memory)")
    demo.add_argument("--rows", type=int, default=2000, help="how many people to recommend jobs for")
    demo.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import run_demo

            run_demo(args.db, rows=args.rows, seed=args.seed)
            return 0
        if args.command == "payments":
            with connect(args.db, progress=False) as db:
                _print_payments(db.payouts(args.run), args.run)
            return 0
        if args.command == "serve":
            _serve(args)
            return 0
        return _sql(args)
    except CrowdDBError as err:
        print(f"crowddb: {_kind(err)}: {_one_line(err)}", file=sys.stderr)
        return 2
    except duckdb.Error as err:  # plain SQL reaches DuckDB as written: its errors are DuckDB's, not a traceback
        print(f"crowddb: DuckDB {type(err).__name__}: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before or after the query (opening the database, the page): nothing to report
        print("crowddb: interrupted", file=sys.stderr)
        return 130


def _sql(args) -> int:
    """``crowddb sql`` / ``crowddb explain``. Ctrl-C during a crowd query prints what it bought and what stays
    published (exit code 130), instead of a traceback."""
    query = sys.stdin.read() if args.query == "-" else args.query
    platform = None
    if args.web:
        from .crowd import WebCrowd

        platform = WebCrowd(port=args.port, host=args.host, workers=args.workers, timeout=args.timeout)
    try:
        with connect(args.db, seed=args.seed, budget=args.budget, platform=platform) as db:
            if args.command == "explain":
                print(db.explain(query))
                return 0
            since = last_run(db)
            try:
                _print_result(db.sql(query))
            except BaseException as err:
                if not interrupted(err):
                    raise
                print(f"crowddb: interrupted: {interrupted_line(db, since, closing=True)}", file=sys.stderr)
                return 130
        return 0
    finally:
        if platform is not None:
            platform.close()  # the page goes down with the command: `crowddb serve` keeps it up


def _serve(args) -> None:
    """``crowddb serve``: the HIT page of the database's market in the foreground, until Ctrl-C. It opens the market
    file only, so sessions keep using the database meanwhile and collect what people answered by rerunning their
    queries."""
    from .crowd import WebCrowd
    from .crowd.web.server import serve, url_of

    if str(args.db) in ("", ":memory:"):
        raise ArgumentError("crowddb serve needs a database file (--db jobs.duckdb): an in-memory database's HITs "
                            "live only in the session that published them")
    if not args.create and not Path(args.db).exists():  # a typo would serve an empty market nobody publishes to
        raise ArgumentError(f"no database file {str(args.db)!r}: give the file your crowd queries run on "
                            "(crowddb sql ... --db FILE), or add --create to serve a new one")
    crowd = WebCrowd(port=args.port, host=args.host, workers=args.workers, serve=False, announce=None)
    crowd.bind(str(args.db))
    print(crowd.announcement(url_of(args.host, args.port)), flush=True)
    serve(crowd.app(), args.host, args.port)


def _print_payments(payouts, run: int) -> None:
    """The payments CSV on stdout (``crowddb.crowd.payments``: participant_id,amount,worker_id,assignments, the
    format the requester page's payments.csv has too); what needs a word on stderr: a run that paid nobody, and
    workers without a marketplace id (a lab's own annotators on direct links), to be paid another way."""
    print(payments_csv(payouts.rename(columns={"marketplace_id": "participant_id"})), end="")
    if not len(payouts):
        print(f"crowddb: run {run} paid nobody (no such run, or none of its assignments was collected yet: rerun its "
              "query to collect them)", file=sys.stderr)
        return
    direct = payouts["marketplace_id"].isna()
    if direct.any():
        print(f"crowddb: {int(direct.sum())} of {len(payouts)} workers came without a marketplace id (empty "
              f"participant_id): pay them another way", file=sys.stderr)


def _kind(err: CrowdDBError) -> str:
    """The crowddb class of an error by its public name (an error that is DuckDB's too, such as a QueryError of a
    missing table, is of a class made for the pair)."""
    return next((c.__name__ for c in type(err).__mro__ if c.__module__ == CrowdDBError.__module__
                 and "_" not in c.__name__), type(err).__name__)


def _one_line(err: BaseException) -> str:
    """An error message on one line: DuckDB's carets under the query text are dropped, lines joined."""
    lines = [line.strip() for line in str(err).splitlines()]
    return " ".join(line for line in lines if line and set(line) - {"^", " "})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
