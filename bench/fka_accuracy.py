"""Rerun the paper's §5 sweep on Adult: accuracy ratio r of FKA vs Mondrian vs Datafly vs Incognito, and FKA's cost.

Run: python bench/fka_accuracy.py [--rows 10000] [--seeds 1] [--plot out_dir]

Ground truth: Adult's occupation mapped to the five categories of the paper's Table 6. Published tuple: the five core
attributes age, education-num, sex, workclass, hours-per-week; the first ``attrs`` of them are the quasi-identifiers
that get anonymized, the rest are published raw. The crowd is simulated in this file (``NearestRecordCrowd``): each
of 5 workers imagines a person uniformly inside the published box (§4.1), answers with the truth of the nearest real
record, or with probability 1 - quality a random category; the tuple's answer is the majority vote. This is the same
worker model as crowddb.crowd.KnowledgeBase, run directly on the anonymizer's numeric coding. FKA's own crowd calls
(raw and cell-anonymized synthetic samples) see only the quasi-identifiers.
r = share of tuples whose crowd answer after anonymization equals the answer before (§5.1).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anonymize import load_adult  # the bench helper next to this file

from crowddb.anonymize import anonymize
from crowddb.anonymize.encoding import encode

CORE = ["age", "education-num", "sex", "workclass", "hours-per-week"]
TABLE6 = {  # paper Table 6: CAT 0..4
    "Exec-managerial": 0, "Prof-specialty": 0,
    "Tech-support": 1, "Sales": 1, "Adm-clerical": 1,
    "Other-service": 2, "Protective-serv": 2, "Priv-house-serv": 2, "Armed-Forces": 2,
    "Craft-repair": 3,
    "Machine-op-inspct": 4, "Transport-moving": 4, "Handlers-cleaners": 4, "Farming-fishing": 4,
}
DEFAULTS = {"k": 100, "cells": 200, "ratio": 0.10, "attrs": 3, "results": 5}
SWEEPS = {"k": [50, 100, 150, 200, 300], "cells": [100, 200, 300, 400], "ratio": [0.05, 0.10, 0.15, 0.20, 0.30],
          "attrs": [2, 3, 4, 5], "results": [2, 3, 4, 5]}
HIT_SIZE, WORKERS_PER_HIT, PAY, FEE = 100, 5, 0.20, 0.30  # §5.4 / Fig. 17 cost model


class NearestRecordCrowd:
    """Simulated workers over the numeric coding of some columns: imagine a point in the box, answer its truth."""

    def __init__(self, coded: np.ndarray, categorical: np.ndarray, truth: np.ndarray, n_answers: int,
                 workers: int = 5, quality: float = 0.9, seed: int = 0) -> None:
        """``coded``: (n, d) real records in the coding; ``categorical``: which columns are unordered codes."""
        self.cat = categorical
        self.mu, self.sd = coded.mean(axis=0), coded.std(axis=0) + 1e-9
        self.tree = cKDTree(self._points(coded))
        self.truth, self.n_answers = truth, n_answers
        self.workers, self.quality = workers, quality
        self.rng = np.random.default_rng(seed)

    def _points(self, x: np.ndarray) -> np.ndarray:
        z = (x - self.mu) / self.sd
        z[:, self.cat] = x[:, self.cat] * 1e4  # a categorical mismatch outweighs any numeric distance
        return z

    def __call__(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """One majority-vote answer per published box."""
        n, d = lo.shape
        w = self.workers
        u = self.rng.random((n, w, d))
        pt = lo[:, None, :] + u * (hi - lo)[:, None, :]
        pt[:, :, self.cat] = np.floor(lo[:, None, self.cat] + u[:, :, self.cat] * (hi - lo + 1)[:, None, self.cat])
        _, idx = self.tree.query(self._points(pt.reshape(n * w, d)), k=1, workers=1)
        ans = self.truth[idx].reshape(n, w)
        noise = self.rng.random((n, w)) > self.quality
        ans[noise] = self.rng.integers(0, self.n_answers, int(noise.sum()))
        votes = np.zeros((n, self.n_answers), np.int64)
        np.add.at(votes, (np.repeat(np.arange(n), w), ans.ravel()), 1)
        return np.argmax(votes + self.rng.random(votes.shape) * 0.1, axis=1).astype(np.int64)  # ties at random


def prepare(adult: pd.DataFrame, rows: int, results: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Rows whose Table 6 category is among the first ``results``, subsampled to ``rows`` (the paper used 10,000)."""
    cat = adult["occupation"].map(TABLE6).to_numpy()
    df = adult.assign(job=cat)[cat < results].reset_index(drop=True)
    if rows and len(df) > rows:
        df = df.iloc[np.sort(np.random.default_rng(seed).choice(len(df), rows, replace=False))].reset_index(drop=True)
    return df, df["job"].to_numpy()


def one_config(df: pd.DataFrame, truth: np.ndarray, k: int, cells: int, ratio: float, attrs: int, results: int,
               methods: list[str], seed: int, min_samples: int | None = None) -> dict:
    """Accuracy ratio per method (and 'none': re-asking raw tuples, the crowd's own noise) plus FKA's crowd cost."""
    qis, rest = CORE[:attrs], CORE[attrs:]
    enc_all = encode(df, CORE)
    coded = enc_all.values()
    cat = np.array([enc_all.columns[c].kind == "categorical" for c in CORE])
    crowd = NearestRecordCrowd(coded, cat, truth, results, seed=seed)
    before = crowd(coded, coded)
    out = {"none": float((crowd(coded, coded) == before).mean())}
    qi_crowd = NearestRecordCrowd(coded[:, :attrs], cat[:attrs], truth, results, seed=seed + 1)
    for method in methods:
        opts = {"ask": qi_crowd, "sample_ratio": ratio, "cell_limit": cells, "seed": seed,
                "min_samples": min_samples} if method == "fka" else {}
        rel = anonymize(df, qis, k, method=method, **opts)
        lo, hi = coded.copy(), coded.copy()
        lo[:, :attrs], hi[:, :attrs] = rel.lo, rel.hi  # anonymized QIs as boxes, the rest raw
        out[method] = float((crowd(lo, hi) == before).mean())
        out[f"{method}_ncp"] = rel.metrics["ncp"]
        if method == "fka":
            t = rel.metrics["crowd_tuples"]
            out["fka_tuples"] = t
            out["fka_cost"] = math.ceil(t / HIT_SIZE) * WORKERS_PER_HIT * PAY * (1 + FEE)
    del rest
    return out


def main() -> None:
    """Run every sweep of Table 7 (other parameters at their defaults) and print one table per sweep."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000, help="rows sampled from Adult (0 = all 30,162)")
    ap.add_argument("--seeds", type=int, default=1, help="repetitions averaged per configuration")
    ap.add_argument("--plot", default=None, help="directory for PNG figures (needs matplotlib, the 'plot' extra)")
    ap.add_argument("--only", default=None, help="comma-separated sweeps to run (k,cells,ratio,attrs,results)")
    ap.add_argument("--literal-def3", action="store_true",
                    help="histogram cuts need K samples per new slab (Definition 3 read literally) instead of "
                         "the default ceil(K x sample ratio)")
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
                df, truth = prepare(adult, args.rows, p["results"], seed=s)
                res = one_config(df, truth, p["k"], p["cells"], p["ratio"], p["attrs"], p["results"], methods, s,
                                 p["k"] if args.literal_def3 else None)
                for key, v in res.items():
                    acc.setdefault(key, []).append(v)
            rows.append({sweep: value, **{key: float(np.mean(v)) for key, v in acc.items()}})
        tab = pd.DataFrame(rows).set_index(sweep)
        tables[sweep] = tab
        cols = ["none"] + methods + [f"{m}_ncp" for m in methods] + ["fka_tuples", "fka_cost"]
        print(f"\n== accuracy ratio r vs {sweep} (defaults {DEFAULTS}; 'none' = raw re-asked) ==")
        print(tab[cols].to_string(float_format=lambda x: f"{x:.3f}"))
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
