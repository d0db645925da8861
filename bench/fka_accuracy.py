"""Rerun the paper's §5 sweep through the engine: accuracy ratio r of FKA, Mondrian, Datafly and Incognito, and the
crowd cost of FKA's sampling (kanon-crowd-db Figs. 8-20, Table 7), on Adult and on §5.1's synthetic dataset; with
ablations of FKA that explain why its r is flat in the sample ratio and the histogram cells.

Run: python bench/fka_accuracy.py [--data adult,synthetic] [--rows 10000] [--seeds 1-3] [--only k,cells]
                                  [--values 100,400] [--regions age:6,education_num:4] [--synthetic uniform]
                                  [--variants fka,tagged,noguard] [--moves] [--plot out_dir]

Every answer comes from ``crowddb.connect()`` with the embedded ``SimulatedCrowd`` (workers of Beta(8,2) quality who
imagine a person uniformly inside the published ranges and answer the job of the nearest real record, §4.1), through
``SELECT id, getposition(*, k := K, anonymizer := ..., sample_ratio := ..., cell_limit := ..., domain := [...])``:
FKA's synthetic samples are paid HITs of that query like any other.

Data: 'adult', Adult's occupation mapped to the five categories of the paper's Table 6, rows restricted to the first
``results`` categories (the result number, i.e. the answer domain size), ``--rows`` of them drawn by the seed;
'synthetic', §5.1's synthetic dataset (crowddb/datasets/synthetic.py: Adult rows kept only where their category is
their (age, education_num, sex) region's label), ``--rows`` tuples built by the seed (its result number is not
swept: the paper discards those diagrams). ``--synthetic`` picks its distribution: 'uniform' (the default), tuples
spread evenly over the points of the data space, because the paper says its synthetic data "follow uniform
distribution" (§5.2, why Datafly does well there) and derives it from census data configured to the dense attribute
ranges (§5.1); 'adult', the first rebuild, Adult's own skewed distribution over the regions (kept to compare).
Published tuple: the five core attributes age, education_num, sex, workclass, hours_per_week; the first ``attrs`` of
them are declared quasi-identifiers and anonymized, the rest are published raw. r = share of rows whose answer after
anonymization equals the answer the crowd gave to the raw tuple (the same table declared without quasi-identifiers,
anonymizer 'none'), §5.1. Column 'none' re-asks the raw tuples of another crowd: the crowd's own disagreement, the
ceiling for r. Each cell is the mean over the seeds, '±' the spread (max - min over the seeds).

FKA variants (``--variants``, each a column; the options the SQL operator does not pass are set by wrapping
crowddb.anonymize.fka.fka for the run):
  fka            the shipped FKA
  tagged         the raw samples' ground truth tagged from the data (the nearest real record's category, what a
                 perfect worker answers) instead of asked of the crowd, as the paper's experiments did (§5.1)
  noguard        SampleGuard off (NOT private: issue 11's widening of boxes holding 1..k-1 real rows removed)
  tagged+noguard both
  weighted       Eq. 10 with each Acc weighted by its row share (ours, delta='weighted')
  minfix         the minimum samples per slab fixed at ceil(K * 10%) (the default ratio's), not ceil(K * ratio)
  tagged+minfix  both
  shuffled       the paid feedback (answers on the cell-generalized samples) permuted among the samples by a seeded
                 draw: its answer shares kept, where it came from lost (does the feedback steer anything?)
  fbtruth        the feedback replaced by each sample's own ground truth (perfect feedback at cell resolution)
  cells          Definition 3 as printed: every new histogram cell keeps >= K samples (allowable='cells', the paper)
  tagged+cells   both
  purity         Algorithm 1's cut score Σ v²/n per cell (ours, criterion='purity') instead of var(V) of the counts
  cells+purity   Definition 3 as printed with the purity score; tagged+cells+purity: also tagged
``--moves``: where added samples change FKA (5% vs 30% samples, same seed): histogram cuts moved (cut values in one
run and not the other, per QI), phase-1 partitions moved, the histogram's cells, and the rows whose final group
changed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import time

import numpy as np
import pandas as pd

import crowddb
import crowddb.anonymize.fka as fka_module
from crowddb.crowd import SimulatedCrowd
from crowddb.crowd.knowledge import KnowledgeBase
from crowddb.datasets import OCCUPATION_CATEGORY, load_adult
from crowddb.datasets.synthetic import DISTRIBUTIONS, kanon_synthetic

CORE = ["age", "education_num", "sex", "workclass", "hours_per_week"]
DEFAULTS = {"k": 100, "cells": 400, "ratio": 0.10, "attrs": 3, "results": 5}  # Table 7 bold values
SWEEPS = {"k": [50, 100, 150, 200, 300], "cells": [100, 200, 300, 400], "ratio": [0.05, 0.10, 0.15, 0.20, 0.30],
          "attrs": [2, 3, 4, 5], "results": [2, 3, 4, 5]}
TUPLES_PER_HIT, ASSIGNMENTS, COST_PER_ASSIGNMENT = 100, 5, 0.20 * 1.30  # §5.4, the getposition definition
VARIANTS = {  # name -> (fka options, tagged, guard on)
    "fka": ({}, False, True),
    "tagged": ({}, True, True),
    "noguard": ({}, False, False),
    "tagged+noguard": ({}, True, False),
    "weighted": ({"delta": "weighted"}, False, True),
    "minfix": ({"min_samples": "fixed"}, False, True),
    "tagged+minfix": ({"min_samples": "fixed"}, True, True),
    "shuffled": ({"feedback": "shuffled"}, False, True),
    "fbtruth": ({"feedback": "truth"}, False, True),
    "cells": ({"allowable": "cells"}, False, True),
    "tagged+cells": ({"allowable": "cells"}, True, True),
    "purity": ({"criterion": "purity"}, False, True),
    "cells+purity": ({"allowable": "cells", "criterion": "purity"}, False, True),
    "tagged+cells+purity": ({"allowable": "cells", "criterion": "purity"}, True, True),
}


def prepare(adult: pd.DataFrame, rows: int, results: int, seed: int) -> pd.DataFrame:
    """Rows whose Table 6 category is among the first ``results``, subsampled to ``rows`` (the paper used 10,000)."""
    cat = adult["occupation"].map(OCCUPATION_CATEGORY)
    df = adult.assign(job="CAT" + cat.astype("Int64").astype(str))[cat < results]
    if rows and len(df) > rows:
        df = df.iloc[np.sort(np.random.default_rng(seed).choice(len(df), rows, replace=False))]
    return df[["id", *CORE, "job"]].reset_index(drop=True)


def prepare_data(data: str, adult: pd.DataFrame, rows: int, results: int, seed: int,
                 regions: dict[str, int] | None = None, synthetic: str = "uniform") -> pd.DataFrame:
    """One seed's table of ``data`` ('adult' or 'synthetic', its grid ``regions``: cuts per numeric QI, its
    distribution ``synthetic``)."""
    if data == "synthetic":
        syn = kanon_synthetic(rows or 10_000, seed, cuts=regions, adult=adult, distribution=synthetic)
        return syn.frame[["id", *CORE, "job"]]
    return prepare(adult, rows, results, seed)


class NoGuard:
    """SampleGuard switched off (the ablation only: boxes holding 1..k-1 real rows are published as they are)."""

    def __init__(self, enc, k) -> None:
        self.widened = 0

    def __call__(self, lo, hi):
        return np.asarray(lo, float), np.asarray(hi, float), np.zeros(len(lo), bool)


def tagger(df: pd.DataFrame, qis: list[str], domain: list[str]):
    """The paper's tagging (§5.1): a sample's ground truth is the category of the nearest real record (a perfect
    worker's answer to the raw sample), as an answer code of ``domain``."""
    kb = KnowledgeBase(df[qis], df["job"].to_numpy(dtype=object))
    index = pd.Index(domain)

    def tag(labels: pd.DataFrame) -> np.ndarray:
        return index.get_indexer(kb.sample(labels[qis], 1, np.random.default_rng(0))[:, 0]).astype(np.int64)

    return tag


class Recorder:
    """Records what feedback_histogram and adaptive_partition return during one FKA run."""

    def __init__(self) -> None:
        self.cuts, self.parts = None, None

    @contextlib.contextmanager
    def patched(self):
        hist, part = fka_module.feedback_histogram, fka_module.adaptive_partition

        def rec_hist(*a, **kw):
            self.cuts = hist(*a, **kw)
            return self.cuts

        def rec_part(*a, **kw):
            self.parts = part(*a, **kw)
            return self.parts

        fka_module.feedback_histogram, fka_module.adaptive_partition = rec_hist, rec_part
        try:
            yield self
        finally:
            fka_module.feedback_histogram, fka_module.adaptive_partition = hist, part


@contextlib.contextmanager
def fka_variant(variant: str, df: pd.DataFrame, qis: list[str], domain: list[str], k: int, ratio: float):
    """crowddb.anonymize.fka.fka (and its SampleGuard) replaced by the variant's for the duration."""
    options, tagged, guard = VARIANTS[variant]
    options = dict(options)
    if options.get("min_samples") == "fixed":
        options["min_samples"] = max(2, math.ceil(k * DEFAULTS["ratio"]))
    if tagged:
        options["tag"] = tagger(df, qis, domain)
    feedback = options.pop("feedback", None)
    original, original_guard = fka_module.fka, fka_module.SampleGuard
    fka_module.fka = functools.partial(original, **options)
    if feedback is not None:
        fka_module.fka = functools.partial(with_feedback, original, feedback, options)
    if not guard:
        fka_module.SampleGuard = NoGuard
    try:
        yield
    finally:
        fka_module.fka, fka_module.SampleGuard = original, original_guard


def with_feedback(original, feedback: str, options: dict, frame, enc, k, *, ask, **kw):
    """FKA whose second crowd call (the feedback on cell-generalized samples) is 'shuffled' (permuted among the
    samples, seed 0) or replaced by the first call's answers ('truth', each sample's own ground truth)."""
    answers = []

    def crowd(lo, hi):
        got = ask(lo, hi)
        answers.append(got)
        if len(answers) == 2:
            got = answers[0] if feedback == "truth" else np.random.default_rng(0).permutation(got)
        return got

    return original(frame, enc, k, ask=crowd, **options, **kw)


def ask(df: pd.DataFrame, crowd_seed: int, qis: list[str], **options) -> tuple[pd.Series, dict]:
    """One getposition run over ``df`` on a fresh database and crowd; answers by id, and the run's HITs, cost and
    release metrics."""
    with crowddb.connect(platform=SimulatedCrowd(n_workers=100, seed=crowd_seed), seed=crowd_seed,
                         progress=False) as db:
        db.load_frame("adult", df, quasi_identifiers=qis, core=CORE, ground_truth="job", key="id")
        options.setdefault("domain", sorted(df["job"].unique()))
        args = "".join(f", {name} := {value!r}" for name, value in options.items())
        got = db.sql(f"SELECT id, getposition(*{args}) AS answer FROM adult").df()
        hits, cost = db.sql("SELECT sum(hits), sum(cost) FROM crowddb_runs").fetchall()[0]
        note = db.last_plan.operators[0].note
    fka = [int(w) for w, nxt in zip(note.split(), note.split()[1:]) if nxt == "synthetic" and w.isdigit()]
    return got.set_index("id")["answer"], {"hits": int(hits), "cost": float(cost), "fka_tuples": sum(fka)}


def one_config(df: pd.DataFrame, k: int, cells: int, ratio: float, attrs: int, methods: list[str], seed: int,
               variants: tuple[str, ...] = ("fka",)) -> dict[str, float]:
    """Accuracy ratio per method and FKA variant, 'none' (raw re-asked of another crowd), and FKA's sampling tuples
    and cost."""
    before, _ = ask(df, seed, [], anonymizer="none")
    again, _ = ask(df, seed + 1000, [], anonymizer="none")
    out = {"none": float((again == before).mean())}
    qis, domain = CORE[:attrs], sorted(df["job"].unique())
    for method in methods:
        for variant in (variants if method == "fka" else (method,)):
            opts = {"k": k, "anonymizer": method, "seed": seed}
            with contextlib.ExitStack() as stack:
                if method == "fka":
                    opts.update(sample_ratio=ratio, cell_limit=cells)
                    stack.enter_context(fka_variant(variant, df, qis, domain, k, ratio))
                after, run = ask(df, seed, qis, **opts)
            out[variant] = float((after.reindex(before.index) == before).mean())
            if variant == "fka":
                main_hits = math.ceil(len(df) / TUPLES_PER_HIT)
                out["fka_tuples"] = run["fka_tuples"]
                out["fka_cost"] = (run["hits"] - main_hits) * ASSIGNMENTS * COST_PER_ASSIGNMENT  # Fig. 17
    return out


def moves(df: pd.DataFrame, k: int, cells: int, attrs: int, seed: int, variant: str, ratios=(0.05, 0.30)) -> dict:
    """FKA at two sample ratios, same seed: how many histogram cuts and phase-1 partitions differ, rows regrouped."""
    qis, domain = CORE[:attrs], sorted(df["job"].unique())
    got = []
    for ratio in ratios:
        rec = Recorder()
        with (fka_variant(variant, df, qis, domain, k, ratio), rec.patched(),
              crowddb.connect(platform=SimulatedCrowd(n_workers=100, seed=seed), seed=seed, progress=False) as db):
            db.load_frame("adult", df, quasi_identifiers=qis, core=CORE, ground_truth="job", key="id")
            shown = db.sql(f"SELECT id, getposition(*, k := {k}, anonymizer := 'fka', seed := {seed}, "
                           f"sample_ratio := {ratio}, cell_limit := {cells}, domain := {domain!r}) AS a "
                           "FROM adult").df()
            items = db.sql("SELECT content FROM crowddb_hit_items").df()
        cuts = [set(c.tolist()) for c in rec.cuts]
        edges = [np.r_[-1, c] for c in rec.cuts]
        # a phase-1 partition as code intervals per QI (comparable across histograms)
        parts = {tuple((int(edges[j][lo[j]] + 1), int(np.r_[c, 10**9][hi[j]])) for j, c in enumerate(rec.cuts))
                 for lo, hi in rec.parts}
        got.append((cuts, parts, int(np.prod([len(c) + 1 for c in rec.cuts])), len(shown), items))
    (c1, p1, n1, _, _), (c2, p2, n2, _, _) = got
    moved = [len(a ^ b) for a, b in zip(c1, c2)]
    return {"cuts_5%": sum(len(c) for c in c1), "cuts_30%": sum(len(c) for c in c2), "cuts_moved": sum(moved),
            "moved_per_qi": "/".join(map(str, moved)), "cells_5%": n1, "cells_30%": n2,
            "parts_5%": len(p1), "parts_30%": len(p2), "parts_moved": len(p1 ^ p2)}


def seed_list(text: str) -> list[int]:
    """'3' -> seeds 0, 1, 2 (a count); '1-3' -> 1, 2, 3; '1,4' -> 1, 4."""
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    if "," in text:
        return [int(s) for s in text.split(",")]
    return list(range(int(text)))


def fmt(mean: pd.DataFrame, spread: pd.DataFrame, cols: list[str]) -> str:
    """Each cell 'mean ±spread' (spread omitted for one seed)."""
    out = pd.DataFrame(index=mean.index)
    for c in cols:
        if c in ("fka_tuples", "fka_cost"):
            out[c] = mean[c].map(lambda x: f"{x:.1f}")
        else:
            out[c] = [f"{m:.3f} ±{s:.3f}" for m, s in zip(mean[c], spread[c])]
    return out.to_string()


def main() -> None:
    """Run the chosen sweeps of Table 7 (other parameters at their defaults) per data set; one table per sweep."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="adult", help="comma-separated: adult, synthetic")
    ap.add_argument("--rows", type=int, default=10_000, help="rows (0 = all of Adult; the synthetic set: 10,000)")
    ap.add_argument("--seeds", default="1", help="a count (3: seeds 0-2), a range (1-3) or a list (1,4)")
    ap.add_argument("--plot", default=None, help="directory for PNG figures (needs matplotlib; skipped without)")
    ap.add_argument("--only", default=None, help="comma-separated sweeps to run (k,cells,ratio,attrs,results)")
    ap.add_argument("--variants", default="fka", help=f"comma-separated FKA variants: {','.join(VARIANTS)}")
    ap.add_argument("--values", default=None, help="comma-separated values for the one sweep of --only (e.g. 0.05,1)")
    ap.add_argument("--regions", default=None, help="synthetic set's cuts per numeric QI, e.g. age:6,education_num:4")
    ap.add_argument("--moves", action="store_true", help="count FKA's cuts moved between 5%% and 30%% samples")
    ap.add_argument("--synthetic", default="uniform", choices=DISTRIBUTIONS,
                    help="the synthetic set's distribution: uniform (the paper's, §5.2) or adult (Adult's own)")
    args = ap.parse_args()
    adult = load_adult()
    seeds = seed_list(args.seeds)
    variants = tuple(args.variants.split(","))
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    regions = ({q: int(c) for q, c in (x.split(":") for x in args.regions.split(","))} if args.regions else None)
    if args.values:
        SWEEPS[args.only] = [float(v) if "." in v else int(v) for v in args.values.split(",")]
    tables = {}
    t0 = time.perf_counter()
    for data in args.data.split(","):
        label = f"synthetic-{args.synthetic}" if data == "synthetic" else data
        sweeps = args.only.split(",") if args.only else list(SWEEPS)
        if data == "synthetic":  # §5.5, §5.6: the paper discards the synthetic set's attribute and result diagrams
            sweeps = [s for s in sweeps if s not in ("attrs", "results")]
        for sweep in sweeps:
            methods = ["fka", "mondrian", "datafly", "incognito"] if sweep == "k" else ["fka", "mondrian"]
            rows = []
            for value in SWEEPS[sweep]:
                p = {**DEFAULTS, sweep: value}
                for s in seeds:
                    df = prepare_data(data, adult, args.rows, p["results"], seed=s, regions=regions,
                                      synthetic=args.synthetic)
                    res = one_config(df, p["k"], p["cells"], p["ratio"], p["attrs"], methods, s, variants)
                    rows.append({sweep: value, "seed": s, **res})
            res = pd.DataFrame(rows)
            mean = res.drop(columns="seed").groupby(sweep).mean()
            spread = res.drop(columns="seed").groupby(sweep).agg(lambda v: v.max() - v.min())
            tables[(label, sweep)] = mean
            cols = ["none", *variants, *[m for m in methods if m != "fka"], "fka_tuples", "fka_cost"]
            cols = [c for c in cols if c in mean]
            where = f"{label} {regions or ''}".strip()
            print(f"\n== {where}: accuracy ratio r vs {sweep} (defaults {DEFAULTS}; seeds {seeds}; "
                  "mean ±spread; 'none' = raw tuples re-asked) ==")
            print(fmt(mean, spread, cols))
        if args.moves:
            print(f"\n== {label}: FKA's cuts moved between 5% and 30% samples (k={DEFAULTS['k']}, cells "
                  f"{DEFAULTS['cells']}, {DEFAULTS['attrs']} QIs; per seed) ==")
            rows = []
            for variant in variants:
                for s in seeds:
                    df = prepare_data(data, adult, args.rows, DEFAULTS["results"], seed=s, regions=regions,
                                      synthetic=args.synthetic)
                    rows.append({"variant": variant, "seed": s,
                                 **moves(df, DEFAULTS["k"], DEFAULTS["cells"], DEFAULTS["attrs"], s, variant)})
            print(pd.DataFrame(rows).to_string(index=False))
    print(f"\n{args.rows or len(adult):,} rows, seeds {seeds}, {time.perf_counter() - t0:.1f} s")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("matplotlib is not installed: no PNG figures (pip install matplotlib)")
        else:
            plot(tables, args.plot)


def plot(tables: dict[tuple[str, str], pd.DataFrame], out: str) -> None:
    """One PNG per data set and sweep (the shapes of Figs. 8, 9, 11, 12, 14, 15, 17, 18, 20)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out, exist_ok=True)
    for (data, sweep), tab in tables.items():
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        for m in [c for c in tab.columns if c not in ("none", "fka_tuples", "fka_cost")]:
            ax.plot(tab.index, tab[m], marker="o", label=m.upper() if m == "fka" else m)
        ax.set_xlabel(sweep)
        ax.set_ylabel("accuracy ratio r")
        ax.set_title(data)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"fka_{data}_{sweep}.png"), dpi=120)
        plt.close(fig)
        if sweep == "ratio":
            fig, ax = plt.subplots(figsize=(4.5, 3.2))
            ax.bar([f"{int(r * 100)}%" for r in tab.index], tab["fka_cost"])
            ax.set_xlabel("sample ratio")
            ax.set_ylabel("sampling cost ($)")
            fig.tight_layout()
            fig.savefig(os.path.join(out, f"fka_{data}_cost.png"), dpi=120)
            plt.close(fig)


if __name__ == "__main__":
    main()
