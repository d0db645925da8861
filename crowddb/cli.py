"""The ``crowddb`` command: run SQL against a crowd database, explain it, or run the demo."""

from __future__ import annotations

import argparse
import sys

import duckdb

from . import connect
from .errors import CrowdDBError


def _print_result(result) -> None:
    if result is None:
        return
    frame = result.df()
    import pandas as pd

    with pd.option_context("display.max_rows", 60, "display.max_columns", 30, "display.width", 160):
        print(frame.to_string(index=False, max_rows=60))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crowddb", description="A crowd database on DuckDB.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("sql", "run SQL (crowd operators included)"), ("explain", "show what SQL would post")):
        p = sub.add_parser(name, help=text)
        p.add_argument("query", help="the SQL text")
        p.add_argument("--db", default=":memory:", help="database file (default: in memory)")
        p.add_argument("--seed", type=int, default=None, help="seed for the simulated crowd and anonymization")
        p.add_argument("--budget", type=float, default=None, help="refuse queries estimated above this many US$")
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
        with connect(args.db, seed=args.seed, budget=args.budget) as db:
            if args.command == "explain":
                print(db.explain(args.query))
            else:
                _print_result(db.sql(args.query))
        return 0
    except CrowdDBError as err:
        print(f"crowddb: {type(err).__name__}: {_one_line(err)}", file=sys.stderr)
        return 2
    except duckdb.Error as err:  # plain SQL reaches DuckDB as written: its errors are DuckDB's, not a traceback
        print(f"crowddb: DuckDB {type(err).__name__}: {_one_line(err)}", file=sys.stderr)
        return 2


def _one_line(err: BaseException) -> str:
    """An error message on one line: DuckDB's carets under the query text are dropped, lines joined."""
    lines = [line.strip() for line in str(err).splitlines()]
    return " ".join(line for line in lines if line and set(line) - {"^", " "})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
