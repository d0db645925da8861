"""Rerun §5 of PrisCrowd (IJCAI 2019): Table 2 (ISE/SISE), Fig. 4 (vs m), Fig. 5 (run time vs m), optional Fig. 3.

Usage: python bench/synth.py [--quick] [--plot out.png] [--seed 7]

Data: Population claims from ../shared/data/crowd/population/ (latin-1), and two generated sets shaped like the paper's
Stock (55 sources, 5,521 objects, many outlying sources) and Indoor Floorplan (247 users, 129 objects).

Reference density (used for every method): for object i, f_i = N(tau_i, h_i^2), a Gaussian kernel at the object's
true value tau_i with the bandwidth h_i PrisCrowd uses for that object (Silverman's rule on the claims) -- the KDE of
perfectly truthful claims. tau_i is the ground truth where known (all generated objects; 277 Population objects) and
the median of the claims otherwise. A method's density is the KDE of its released values with the same h_i:
(1/r) sum_j N(v_j, h_i^2) (r = rows released; r = n_i noisy claims for Basic). ISE_i = int (f_i - f~_i)^2 is computed
in closed form in units of h_i (x -> (x - tau_i) / h_i) so objects of any scale weigh alike; an object with no rows
has f~_i = 0, i.e. ISE_i = 1 / (2 sqrt(pi)) = 0.282. ISE = sum_i ISE_i, SISE = sum_i ISE_i^2 (as in §5).

Fig. 4 is read off one m = 30 release per method: Algorithm 1 releases candidates in draw order, so its first m'
rows are a release with m = m' (same distribution; not the same random stream as a separate m' run).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from crowddb.synth import synthesize

POP = Path(__file__).resolve().parents[2] / "shared" / "data" / "crowd" / "population"
G0 = 1.0 / (2.0 * math.sqrt(math.pi))  # int N(0,1)^2


def load_population() -> tuple[pd.DataFrame, pd.Series]:
    """Population claims (object, source, value) and ground truth by object key 'city, state_year'."""
    c = pd.read_csv(POP / "population-new-new.txt", sep="\t", header=None, encoding="latin-1", quoting=3,
                    names=["object", "source", "value", "year"])
    g = pd.read_csv(POP / "population-gd.txt", header=None, encoding="latin-1", skipinitialspace=True,
                    names=["city", "state", "year", "pop"])
    key = g["city"].str.strip() + ", " + g["state"].str.strip() + "_" + g["year"].astype(str)
    truth = pd.Series(g["pop"].astype(float).to_numpy(), index=key)
    truth = truth[~truth.index.duplicated()]
    return c[["object", "source", "value"]], truth[truth.index.isin(c["object"])]


def stock_like(seed: int = 0) -> tuple[pd.DataFrame, pd.Series]:
    """55 sources x 5,521 objects: 25 accurate, 15 noisy, 15 outlying sources (stale, scaled or wild values)."""
    rng = np.random.default_rng(seed)
    n_obj, n_src = 5521, 55
    truth = np.round(np.exp(rng.uniform(np.log(2), np.log(800), n_obj)), 2)
    kind = np.r_[np.zeros(25, int), np.ones(15, int), np.full(15, 2)]
    cover = rng.uniform(0.5, 1.0, n_src)
    o, s = np.nonzero(rng.random((n_obj, n_src)) < cover[None, :])
    tau = truth[o]
    x = tau * (1 + rng.normal(0, np.array([0.002, 0.01, 0.01])[kind[s]]))
    bad = (kind[s] == 2) & (rng.random(o.size) < 0.6)  # outlying sources are wrong on 60% of their claims
    how = rng.integers(0, 3, o.size)
    x = np.where(bad & (how == 0), tau * (1 + rng.normal(0, 0.15, o.size)), x)  # stale quote
    x = np.where(bad & (how == 1), tau * rng.choice([0.01, 100.0, 1000.0], o.size), x)  # unit / scale error
    x = np.where(bad & (how == 2), tau * rng.uniform(0.2, 3.0, o.size), x)  # wild value
    df = pd.DataFrame({"object": o, "source": s, "value": np.round(np.maximum(x, 0.01), 2)})
    return df, pd.Series(truth, index=np.arange(n_obj))


def indoor_like(seed: int = 0) -> tuple[pd.DataFrame, pd.Series]:
    """247 users x 129 hallway lengths (m): step-length bias per user, 12% careless users, 10-90 users per object."""
    rng = np.random.default_rng(seed)
    n_obj, n_usr = 129, 247
    truth = np.round(rng.uniform(3, 60, n_obj), 2)
    bias = rng.normal(1.0, 0.05, n_usr)
    noise = rng.uniform(0.02, 0.08, n_usr)
    careless = rng.random(n_usr) < 0.12
    rows = []
    for i in range(n_obj):
        users = rng.choice(n_usr, rng.integers(10, 91), replace=False)
        x = truth[i] * bias[users] * (1 + rng.normal(0, noise[users]))
        wild = careless[users] & (rng.random(users.size) < 0.5)
        x = np.where(wild, truth[i] * rng.uniform(0.3, 2.5, users.size), x)
        rows.append(pd.DataFrame({"object": i, "source": users, "value": np.round(x, 2)}))
    return pd.concat(rows, ignore_index=True), pd.Series(truth, index=np.arange(n_obj))


def padded_z(rows: pd.DataFrame, objects: pd.Index, tau: pd.Series, h: pd.Series, width: int) -> np.ndarray:
    """Released values per object in h-units around tau, padded with NaN: (n_objects, width)."""
    r = rows[rows["object"].isin(objects)]
    pos = r.groupby("object", sort=False).cumcount().to_numpy()
    keep = pos < width
    r, pos = r[keep], pos[keep]
    idx = pd.Index(objects).get_indexer(r["object"])
    Z = np.full((len(objects), width), np.nan)
    Z[idx, pos] = (r["value"].to_numpy() - tau.reindex(r["object"]).to_numpy()) / h.reindex(r["object"]).to_numpy()
    return Z


def ise_rows(Z: np.ndarray) -> np.ndarray:
    """Closed-form ISE per object between N(0,1) and the KDE (bandwidth 1) of each row's non-NaN values."""
    M = ~np.isnan(Z)
    n = M.sum(axis=1)
    Zf = np.where(M, Z, 0.0)
    D = Zf[:, :, None] - Zf[:, None, :]
    g = np.exp(-D * D / 4.0) * G0 * (M[:, :, None] & M[:, None, :])
    cross = (np.exp(-Zf * Zf / 4.0) * G0 * M).sum(axis=1)
    nn = np.maximum(n, 1)
    ise = g.sum(axis=(1, 2)) / nn**2 - 2.0 * cross / nn + G0
    return np.where(n > 0, ise, G0)


def run_set(name: str, df: pd.DataFrame, tau: pd.Series, seed: int, small: str = "withhold",
            subsets: dict[str, pd.Index] | None = None) -> dict[str, dict]:
    """Table 2 and Fig. 4 numbers for one data set: PrisCrowd, Global, Uniform, Basic(eps)."""
    args = {"m": 30, "k": 5, "gamma": 4.0, "epsilon0": 1.0, "seed": seed, "small_objects": small}
    out: dict[str, dict] = {}
    res = {w: synthesize(df["object"], df["source"], df["value"], weights=w, **args)
           for w in ("combined", "global", "uniform")}
    rep = res["combined"].report.set_index("object")
    h = rep["bandwidth"]
    ran = rep.index[rep["tried"] > 0]
    subsets = subsets or {"": ran}
    basic = {e: synthesize(df["object"], df["source"], df["value"], method="basic", epsilon=e, seed=seed)
             for e in (0.1, 1.0, 10.0)}
    for sub, objs in subsets.items():
        objs = pd.Index(objs).intersection(ran)
        key = f"{name}{sub} ({len(objs)} obj)"
        table, curves = {}, {}
        for label, w in (("PrisCrowd", "combined"), ("Global", "global"), ("Uniform", "uniform")):
            Z = padded_z(res[w].rows, objs, tau, h, 30)
            ise = ise_rows(Z)
            table[label] = (ise.sum(), (ise**2).sum())
            curves[label] = [(ise_rows(Z[:, :mm]).sum(), (ise_rows(Z[:, :mm]) ** 2).sum()) for mm in range(1, 31)]
        rng = np.random.default_rng(seed)  # floor: 30 draws from the reference itself (no claims, no privacy)
        ise = ise_rows(rng.standard_normal((len(objs), 30)))
        table["Oracle(ref draws)"] = (ise.sum(), (ise**2).sum())
        for e, b in basic.items():
            width = int(b.report["rows"].max())
            ise = ise_rows(padded_z(b.rows, objs, tau, h, width))
            table[f"Basic(eps={e:g})"] = (ise.sum(), (ise**2).sum())
        s = res["combined"].summary
        out[key] = {"table": table, "curves": curves, "seconds": s["seconds"], "epsilon": s["epsilon"],
                    "delta": s["delta"], "short": s["objects_short_of_m"], "uniform_eps": res["uniform"].summary["epsilon"]}
    return out


def timing(name: str, df: pd.DataFrame, seed: int, ms: list[int]) -> pd.DataFrame:
    """Fig. 5: sampling-phase seconds vs m, with and without the privacy test (all objects released)."""
    rec = []
    for mm in ms:
        for test in (True, False):
            r = synthesize(df["object"], df["source"], df["value"], m=mm, seed=seed, small_objects="release",
                           privacy_test=test)
            rec.append({"set": name, "m": mm, "test": test, "sampling_s": r.summary["seconds"]["sampling"],
                        "total_s": r.summary["seconds"]["total"]})
    return pd.DataFrame(rec)


def plot_fig3(path: str, df: pd.DataFrame, tau: pd.Series, seed: int) -> None:
    """Fig. 3-like PNG: combined, global, uniform and true density of two objects (weights from the whole set)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not installed (pip install crowddb[plot]); skipped")
        return
    from crowddb.synth.kde import mixture_density

    runs = {w: synthesize(df["object"], df["source"], df["value"], m=1, weights=w, seed=seed)
            for w in ("combined", "global", "uniform")}
    h = runs["combined"].report.set_index("object")["bandwidth"]
    # the two objects where combined and uniform weights differ most (outliers present)
    wc, wu = runs["combined"].weights, runs["uniform"].weights
    diff = (wc["c"] - wu["c"]).abs().groupby(wc["object"]).sum().sort_values(ascending=False)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, obj in zip(axes, diff.index[:2]):
        x = df["value"].to_numpy(float)[(df["object"] == obj).to_numpy()]
        lo, hi = tau[obj] - 8 * h[obj], tau[obj] + 8 * h[obj]
        grid = np.linspace(lo, hi, 800)
        for w, col in (("combined", "red"), ("global", "black"), ("uniform", "green")):
            c = runs[w].weights
            ax.plot(grid, mixture_density(grid, x, c[c["object"] == obj]["c"].to_numpy(), h[obj]), color=col,
                    label=w)
        ax.plot(grid, mixture_density(grid, np.array([tau[obj]]), np.array([1.0]), h[obj]), color="blue",
                label="true")
        inside = (x >= lo) & (x <= hi)
        ax.plot(x[inside], np.zeros(inside.sum()), "o", color="magenta", mfc="none", label="claims")
        ax.set_xlim(lo, hi)
        ax.set_title(f"object {obj}: {len(x)} claims, {(~inside).sum()} outside the plot")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    """Run everything and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--plot", metavar="PNG", default=None)
    ap.add_argument("--quick", action="store_true", help="skip the all-objects Population run and thin Fig. 5")
    a = ap.parse_args()
    pd.set_option("display.width", 160)

    pop, pop_truth = load_population()
    tau_pop = pop.groupby("object")["value"].median()
    tau_pop.loc[pop_truth.index] = pop_truth
    stock, stock_truth = stock_like(a.seed)
    indoor, indoor_truth = indoor_like(a.seed)
    print(f"Population {len(pop)} claims / {pop['object'].nunique()} objects / {pop['source'].nunique()} sources; "
          f"Stock-like {len(stock)} / {stock['object'].nunique()} / {stock['source'].nunique()}; "
          f"Indoor-like {len(indoor)} / {indoor['object'].nunique()} / {indoor['source'].nunique()}")

    results = {}
    counts = pop.groupby("object").size()
    results.update(run_set("Population guaranteed", pop, tau_pop, a.seed,
                           subsets={"": counts.index[counts >= 5],
                                    " w/ truth": counts.index[(counts >= 5) & counts.index.isin(pop_truth.index)]}))
    if not a.quick:
        results.update(run_set("Population all", pop, tau_pop, a.seed, small="release",
                               subsets={"": counts.index, " w/ truth": pop_truth.index}))
    results.update(run_set("Stock-like", stock, stock_truth, a.seed))
    results.update(run_set("Indoor-like", indoor, indoor_truth, a.seed))

    print("\nTable 2 -- ISE / SISE (sums over objects, h-units; lower is better); m=30, gamma=4, k=5, epsilon0=1")
    cols = {}
    for key, r in results.items():
        cols[key] = {f"{meth}": f"{ise:9.3f} / {sise:8.3f}" for meth, (ise, sise) in r["table"].items()}
    print(pd.DataFrame(cols).to_string())
    print("\nPrivacy (Theorem 2, t=1) and time of the PrisCrowd m=30 run")
    for key, r in results.items():
        s = r["seconds"]
        print(f"  {key:40s} eps={r['epsilon']:.3f} delta={r['delta']:.3g} (Uniform eps={r['uniform_eps']:.3f}) "
              f"short_of_m={r['short']:4d}  weights {s['weights']:.2f}s sampling {s['sampling']:.2f}s "
              f"total {s['total']:.2f}s")

    print("\nFig. 4 -- ISE (SISE) vs m, PrisCrowd / Uniform")
    ms = [1, 2, 3, 5, 10, 15, 20, 25, 30]
    for key, r in results.items():
        line = "  ".join(f"m={mm}: {r['curves']['PrisCrowd'][mm - 1][0]:.2f}/{r['curves']['Uniform'][mm - 1][0]:.2f}"
                         f" ({r['curves']['PrisCrowd'][mm - 1][1]:.2f}/{r['curves']['Uniform'][mm - 1][1]:.2f})"
                         for mm in ms)
        print(f"  {key}: {line}")

    print("\nFig. 5 -- seconds of the sampling phase vs m (objects with ground truth; all small objects released)")
    tm = [1, 10, 20, 30] if a.quick else [1, 5, 10, 15, 20, 25, 30]
    t1 = timing("Population", pop[pop["object"].isin(pop_truth.index)], a.seed, tm)
    t2 = timing("Indoor-like", indoor, a.seed, tm)
    tab = pd.concat([t1, t2]).pivot_table(index="m", columns=["set", "test"], values="sampling_s")
    print(tab.round(3).to_string())

    if a.plot:
        plot_fig3(a.plot, indoor, indoor_truth, a.seed)


if __name__ == "__main__":
    main()
