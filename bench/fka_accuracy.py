"""Rerun the paper's §5 sweep on Adult through the engine: accuracy ratio r of FKA, Mondrian, Datafly and Incognito,
and the crowd cost of FKA's sampling (kanon-crowd-db Figs. 9-20, Table 7).

Run: python bench/fka_accuracy.py [--rows 10000] [--seeds 1] [--only k,cells] [--plot out_dir]

Every answer comes from ``crowddb.connect()`` with the embedded ``SimulatedCrowd`` (workers of Beta(8,2) quality who
imagine a person uniformly inside the published ranges and answer the job of the nearest real record, §4.1), through
``SELECT id, getposition(*, k := K, anonymizer := ..., sample_ratio := ..., cell_limit := ...) FROM adult``: FKA's
synthetic samples are paid HITs of that query like any other.

Ground truth: Adult's occupation mapped to the five categories of the paper's Table 6, rows restricted to the first
``results`` categories (the result number, i.e. the answer domain size). Published tuple: the five core attributes
age, education_num, sex, workclass, hours_per_week; the first ``attrs`` of them are declared quasi-identifiers and
anonymized, the rest are published raw. r = share of rows whose answer after anonymization equals the answer the
crowd gave to the raw tuple (the same table declared without quasi-identifiers, anonymizer 'none'), §5.1. Column
'none' re-asks the raw tuples of another crowd: the crowd's own disagreement, the ceiling for r.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
import pandas as pd

import crowddb
from crowddb.crowd import SimulatedCrowd
from crowddb.datasets import OCCUPATION_CATEGORY, load_adult

CORE = ["age", "education_num", "sex", "workclass", "hours_per_week"]
DEFAULTS = {"k": 100, "cells": 400, "ratio": 0.10, "attrs": 3, "results": 5}  # Table 7 bold values
SWEEPS = {"k": [50, 100, 150, 200, 300], "cells": [100, 200, 300, 400], "ratio": [0.05, 0.10, 0.15, 0.20, 0.30],
          "attrs": [2, 3, 4, 5], "results": [2, 3, 4, 5]}
TUPLES_PER_HIT, ASSIGNMENTS, COST_PER_ASSIGNMENT = 100, 5, 0.20 * 1.30  # §5.4, the getposition definition


def prepare(adult: pd.DataFrame, rows: int, results: int, seed: int) -> pd.DataFrame:
    """Rows whose Table 6 category is among the first ``results``, subsampled to ``rows`` (the paper used 10,000)."""
    cat = adult["occupation"].map(OCCUPATION_CATEGORY)
    df = adult.assign(job="CAT" + cat.astype("Int64").astype(str))[cat < results]
    if rows and len(df) > rows:
        df = df.iloc[np.sort(np.random.default_rng(seed).choice(len(df), rows, replace=False))]
    return df[["id", *CORE, "job"]].reset_index(drop=True)


def ask(df: pd.DataFrame, crowd_seed: int, qis: list[str], **options) -> tuple[pd.Series, dict]:
    """One getposition run over ``df`` on a fresh database and crowd; answers by id, and the run's HITs and cost."""
    with crowddb.connect(platform=SimulatedCrowd(n_workers=100, seed=crowd_seed), seed=crowd_seed,
                         progress=False) as db:
        db.load_frame("adult", df, quasi_identifiers=qis, core=CORE, ground_truth="job", key="id")
        args = "".join(f", {name} := {value!r}" for name, value in options.items())
        got = db.sql(f"SELECT id, getposition(*{args}) AS answer FROM adult").df()
        hits, cost = db.sql("SELECT sum(hits), sum(cost) FROM crowddb_runs").fetchall()[0]
        note = db.last_plan.operators[0].note
    fka = [int(w) for w, nxt in zip(note.split(), note.split()[1:]) if nxt == "synthetic" and w.isdigit()]
    return got.set_index("id")["answer"], {"hits": int(hits), "cost": float(cost), "fka_tuples": sum(fka)}


def one_config(df: pd.DataFrame, k: int, cells: int, ratio: float, attrs: int, methods: list[str], seed: int
               ) -> dict[str, float]:
    """Accuracy ratio per method, 'none' (raw re-asked of another crowd), and FKA's sampling tuples and cost."""
    before, _ = ask(df, seed, [], anonymizer="none")
    again, _ = ask(df, seed + 1000, [], anonymizer="none")
    out = {"none": float((again == before).mean())}
    for method in methods:
        opts = {"k": k, "anonymizer": method, "seed": seed}
        if method == "fka":
            opts.update(sample_ratio=ratio, cell_limit=cells)
        after, run = ask(df, seed, CORE[:attrs], **opts)
        out[method] = float((after.reindex(before.index) == before).mean())
        if method == "fka":
            main_hits = math.ceil(len(df) / TUPLES_PER_HIT)
            out["fka_tuples"] = run["fka_tuples"]
            out["fka_cost"] = (run["hits"] - main_hits) * ASSIGNMENTS * COST_PER_ASSIGNMENT  # Fig. 17
    return out


def main() -> None:
    """Run every sweep of Table 7 (other parameters at their defaults) and print one table per sweep."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000, help="rows sampled from Adult (0 = all 30,162)")
    ap.add_argument("--seeds", type=int, default=1, help="repetitions averaged per configuration")
    ap.add_argument("--plot", default=None, help="directory for PNG figures (needs matplotlib, the 'plot' extra)")
    ap.add_argument("--only", default=None, help="comma-separated sweeps to run (k,cells,ratio,attrs,results)")
    args = ap.parse_args()
    adult = load_adult()
    tables = {}
    t0 = time.perf_counter()
    for sweep in (args.only.split(",") if args.only else SWEEPS):
        methods = ["fka", "mondrian", "datafly", "incognito"] if sweep == "k" else ["fka", "mondrian"]
        rows = []
        for value in SWEEPS[sweep]:
            p = {**DEFAULTS, sweep: value}
            acc: dict[str, list[float]] = {}
            for s in range(args.seeds):
                df = prepare(adult, args.rows, p["results"], seed=s)
                res = one_config(df, p["k"], p["cells"], p["ratio"], p["attrs"], methods, s)
                for key, v in res.items():
                    acc.setdefault(key, []).append(v)
            rows.append({sweep: value, **{key: float(np.mean(v)) for key, v in acc.items()}})
        tab = pd.DataFrame(rows).set_index(sweep)
        tables[sweep] = tab
        print(f"\n== accuracy ratio r vs {sweep} (defaults {DEFAULTS}; 'none' = raw tuples re-asked) ==")
        print(tab[["none", *methods, "fka_tuples", "fka_cost"]].to_string(float_format=lambda x: f"{x:.3f}"))
    print(f"\n{args.rows or len(adult):,} rows, {args.seeds} seed(s), {time.perf_counter() - t0:.1f} s")
    if args.plot:
        plot(tables, args.plot)


def plot(tables: dict[str, pd.DataFrame], out: str) -> None:
    """One PNG per sweep (Figs. 9, 12, 15, 17, 18, 20 shapes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out, exist_ok=True)
    for sweep, tab in tables.items():
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        for m in ("fka", "mondrian", "datafly", "incognito"):
            if m in tab:
                ax.plot(tab.index, tab[m], marker="o", label=m.upper() if m == "fka" else m.title())
        ax.set_xlabel(sweep)
        ax.set_ylabel("accuracy ratio r")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"fka_{sweep}.png"), dpi=120)
        plt.close(fig)
    if "ratio" in tables:
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        ax.bar([f"{int(r * 100)}%" for r in tables["ratio"].index], tables["ratio"]["fka_cost"])
        ax.set_xlabel("sample ratio")
        ax.set_ylabel("sampling cost ($)")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "fka_cost.png"), dpi=120)
        plt.close(fig)


if __name__ == "__main__":
    main()
