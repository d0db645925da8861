"""The ``crowddb`` command: run SQL against a crowd database, explain it, serve its HIT pages, list what workers
earned, or run the demo."""

from __future__ import annotations

import argparse
import sys

import duckdb

from . import connect
from .errors import ArgumentError, CrowdDBError


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
        p.add_argument("--web", action="store_true", help="real people answer on crowddb's HIT page (WebCrowd) "
                                                          "instead of the simulated crowd")
        p.add_argument("--host", default="127.0.0.1", help="--web: the address the HIT page binds to")
        p.add_argument("--port", type=int, default=8040, help="--web: the HIT page's port")
        p.add_argument("--workers", type=int, default=5, help="--web: worker links to hand out (a HIT needs as "
                       "many different people as its assignments: 5 by default)")
        p.add_argument("--timeout", type=float, default=None,
                       help="--web: seconds to wait for the answers; a rerun later collects the rest")
    pay = sub.add_parser("payments", help="what each worker earned in a run, as the CSV marketplaces take for bulk "
                                          "bonus payments (participant id, amount)")
    pay.add_argument("--db", required=True, help="database file")
    pay.add_argument("--run", type=int, required=True, help="the run id (a crowd query's operator run)")
    srv = sub.add_parser("serve", help="keep the HIT page of a database up (no Python session needed; answers "
                                       "are collected by the next run of the query)")
    srv.add_argument("--db", required=True, help="database file (its HIT market is the file beside it, "
                                                 "DB.market.sqlite; the database itself stays free for sessions)")
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
        platform = None
        if args.web:
            from .crowd import WebCrowd

            platform = WebCrowd(port=args.port, host=args.host, workers=args.workers, timeout=args.timeout)
        try:
            with connect(args.db, seed=args.seed, budget=args.budget, platform=platform) as db:
                if args.command == "explain":
                    print(db.explain(args.query))
                else:
                    _print_result(db.sql(args.query))
        finally:
            if platform is not None:
                platform.close()  # the page goes down with the command: `crowddb serve` keeps it up
        return 0
    except CrowdDBError as err:
        print(f"crowddb: {type(err).__name__}: {_one_line(err)}", file=sys.stderr)
        return 2
    except duckdb.Error as err:  # plain SQL reaches DuckDB as written: its errors are DuckDB's, not a traceback
        print(f"crowddb: DuckDB {type(err).__name__}: {_one_line(err)}", file=sys.stderr)
        return 2


def _serve(args) -> None:
    """``crowddb serve``: the HIT page of the database's market in the foreground, until Ctrl-C. It opens the market
    file only, so sessions keep using the database meanwhile and collect what people answered by rerunning their
    queries."""
    from .crowd import WebCrowd
    from .crowd.web.server import serve, url_of

    if str(args.db) in ("", ":memory:"):
        raise ArgumentError("crowddb serve needs a database file (--db jobs.duckdb): an in-memory database's HITs "
                            "live only in the session that published them")
    crowd = WebCrowd(port=args.port, host=args.host, workers=args.workers, serve=False, announce=None)
    crowd.bind(str(args.db))
    print(crowd.announcement(url_of(args.host, args.port)), flush=True)
    serve(crowd.app(), args.host, args.port)


def _print_payments(payouts, run: int) -> None:
    """One line per worker with a marketplace id, ``participant_id,amount`` (US$, 2 decimals): the plain form of
    Prolific's bulk bonus payments, which other marketplaces take too. Workers who came without a marketplace id
    (a lab's own annotators on direct links) are listed on stderr, to be paid another way."""
    if not len(payouts):
        print(f"crowddb: run {run} paid nobody (no such run, or none of its assignments was collected yet: rerun its "
              "query to collect them)", file=sys.stderr)
        return
    listed = payouts[payouts["marketplace_id"].notna()]
    for marketplace_id, reward in zip(listed["marketplace_id"], listed["reward"]):
        print(f"{marketplace_id},{float(reward):.2f}")
    direct = payouts[payouts["marketplace_id"].isna()]
    for worker_id, reward, n in zip(direct["worker_id"], direct["reward"], direct["assignments"]):
        print(f"crowddb: worker {worker_id} (no marketplace id) earned ${float(reward):.2f} for {n} assignments",
              file=sys.stderr)


def _one_line(err: BaseException) -> str:
    """An error message on one line: DuckDB's carets under the query text are dropped, lines joined."""
    lines = [line.strip() for line in str(err).splitlines()]
    return " ".join(line for line in lines if line and set(line) - {"^", " "})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
