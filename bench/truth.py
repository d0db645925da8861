"""Benchmark truth inference: time and accuracy per method and data set, beside crowd-kit's in the same run.

    python bench/truth.py [--data DIR] [--no-crowdkit] [--repeat N] [--skip-slow]

Categorical sets report accuracy on the gold tasks, numeric sets MAE. Dawid-Skene also runs through SQL
(TRUTH_DISCOVER(..., method := 'ds')) on d_product and on 100,000 synthetic answers, beside crowd-kit's (issue 14:
at least 10x faster, same labels within +-0.005). crowd-kit (pip install crowd-kit==1.4.2
"scikit-learn<1.8") is optional; without it its columns stay empty. Goals (issue 4): Dawid-Skene at least 10x faster
than crowd-kit's at equal accuracy (+-0.005); CRH on 1,000,000 synthetic claims from 10,000 sources under 1 s.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import crowddb
from crowddb.truth import discover, get_method

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "crowd"


def load(data: Path) -> dict[str, tuple[pd.DataFrame, pd.Series, str]]:
    """Data sets as (answers with columns task/worker/label, truth indexed by task, kind)."""
    out = {}
    a = pd.read_csv(data / "d_product" / "answer.csv").rename(columns={"question": "task", "answer": "label"})
    t = pd.read_csv(data / "d_product" / "truth.csv").set_index("question")["truth"]
    out["d_product"] = (a, t, "categorical")
    lab = pd.read_csv(data / "adultcontent2" / "labels.txt", sep="\t", header=None, names=["worker", "task", "label"])
    lab = lab.drop_duplicates(["worker", "task"], keep="last")[["task", "worker", "label"]]
    gold = pd.read_csv(data / "adultcontent2" / "gold.txt", sep="\t", header=None, names=["task", "label"])
    gold = gold.set_index("task")["label"]
    out["adultcontent2"] = (lab, gold[gold.index.isin(lab.task)], "categorical")
    e = pd.read_csv(data / "emotion" / "answer.csv").rename(columns={"question": "task", "answer": "label"})
    et = pd.read_csv(data / "emotion" / "truth.csv").set_index("question")["truth"]
    out["emotion"] = (e, et, "numeric")
    return out


def timed(fn, repeat: int) -> tuple[object, float]:
    best, res = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = fn()
        best = min(best, time.perf_counter() - t0)
    return res, best


def score(pred: pd.Series, truth: pd.Series, kind: str) -> float:
    if kind == "categorical":
        return float((pred.reindex(truth.index) == truth).mean())
    return float((pred.reindex(truth.index).astype(float) - truth).abs().mean())


CK_EQUIV = {"mv": "MajorityVote", "ds": "DawidSkene", "one_coin": "OneCoinDawidSkene", "glad": "GLAD",
            "zencrowd": "ZeroBasedSkill"}


def run_crowdkit(name: str, df: pd.DataFrame, repeat: int):
    import crowdkit.aggregation as ck

    cls = getattr(ck, CK_EQUIV[name])
    kw = {"n_iter": 100} if name in ("ds", "one_coin", "glad") else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = cls(**kw)
        pred, t = timed(lambda: model.fit_predict(df), repeat)
    n_iter = len(getattr(model, "loss_history_", []) or []) or None
    return pred, t, n_iter


def synthetic_labels(n_tasks: int = 10_000, per_task: int = 10, n_workers: int = 500, classes: int = 4,
                     seed: int = 0) -> tuple[pd.DataFrame, pd.Series]:
    """n_tasks x per_task answers; a worker answers right with probability in [0.4, 0.95], else uniformly wrong."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, classes, n_tasks)
    task = np.repeat(np.arange(n_tasks), per_task)
    worker = rng.integers(0, n_workers, len(task))
    right = rng.random(len(task)) < rng.uniform(0.4, 0.95, n_workers)[worker]
    wrong = (truth[task] + rng.integers(1, classes, len(task))) % classes
    label = np.where(right, truth[task], wrong)
    frame = pd.DataFrame({"task": task, "worker": worker, "label": [f"c{v}" for v in label]})
    return frame, pd.Series([f"c{v}" for v in truth], index=np.arange(n_tasks))


SQL_DS = ("SELECT object, truth FROM TRUTH_DISCOVER(answers, object := 'task', source := 'worker', value := 'label', "
          "method := 'ds')")


def sql_ds_rows(sets: dict[str, tuple[pd.DataFrame, pd.Series]], repeat: int, have_ck: bool,
                methods: tuple[str, ...] = ("ds",)) -> list[dict]:
    """TRUTH_DISCOVER(..., method := 'ds') (and the other ``methods``) through SQL, timed as a user runs it (query
    to DataFrame), beside discover() alone on the same answers: x_discover is their ratio (issue 26: at most 1.5x
    on 100k answers)."""
    rows = []
    for name, (df, truth) in sets.items():
        for method in methods:
            query = SQL_DS.replace("'ds'", f"'{method}'")
            with crowddb.connect(seed=1, progress=False) as db:
                db.load_frame("answers", df)
                got, t = timed(lambda db=db, query=query: db.sql(query).df(), repeat)
            pred = got.set_index("object")["truth"]
            # the split of the time: discover() alone on the same answers (coding, EM, result frames); the rest of
            # ours_s is the SQL path around it (planning, the input snapshot, the result's way back to DuckDB)
            _, t_py = timed(lambda df=df, method=method: discover(df, "task", "worker", "label", method=method),
                            repeat)
            row = {"data": name, "method": f"{method} via SQL", "ours": score(pred, truth, "categorical"),
                   "ours_s": t, "discover_s": t_py, "x_discover": t / t_py}
            if have_ck:
                ck_pred, tc, it = run_crowdkit(method, df, repeat)
                row.update({"crowdkit": score(ck_pred, truth, "categorical"), "ck_s": tc, "ck_iter": it,
                            "speedup": tc / t})
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--no-crowdkit", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-slow", action="store_true", help="skip crowd-kit's GLAD (several minutes)")
    args = ap.parse_args()
    have_ck = False
    if not args.no_crowdkit:
        try:
            import crowdkit  # noqa: F401

            have_ck = True
        except ImportError:
            print("crowd-kit not installed: its columns stay empty")
    rows = []
    if args.data.is_dir():
        for dname, (df, truth, kind) in load(args.data).items():
            methods = (["mv", "ds", "one_coin", "glad", "zencrowd", "crh_categorical"] if kind == "categorical"
                       else ["mean", "median", "crh", "catd", "gtm", "ti"])
            for m in methods:
                rep = 1 if m == "glad" else args.repeat
                model = get_method(m)()
                _, t = timed(lambda model=model, df=df: model.fit_frame(df, "task", "worker", "label"), rep)
                row = {"data": dname, "method": m, "ours": score(model.truths_, truth, kind), "ours_s": t,
                       "ours_iter": model.n_iter_}
                if have_ck and m in CK_EQUIV and kind == "categorical" and not (args.skip_slow and m == "glad"):
                    pred, tc, it = run_crowdkit(m, df, 1 if m == "glad" else args.repeat)
                    row.update({"crowdkit": score(pred, truth, kind), "ck_s": tc, "ck_iter": it,
                                "speedup": tc / t})
                    if m == "ds" and it and it != model.n_iter_:
                        # same number of EM iterations as crowd-kit ran: isolates speed at equal work
                        m2 = get_method("ds")(max_iter=it, tol=0)
                        _, t2 = timed(lambda m2=m2, df=df: m2.fit_frame(df, "task", "worker", "label"), args.repeat)
                        rows.append(row)
                        row = {"data": dname, "method": f"ds@{it}it", "ours": score(m2.truths_, truth, kind),
                               "ours_s": t2, "ours_iter": m2.n_iter_, "crowdkit": row["crowdkit"], "ck_s": tc,
                               "ck_iter": it, "speedup": tc / t2}
                rows.append(row)
    else:
        print(f"data folder {args.data} not found: only the synthetic runs")
    sql_sets = {"synthetic 100k answers": synthetic_labels()}
    if args.data.is_dir():
        df, truth, _ = load(args.data)["d_product"]
        sql_sets = {"d_product": (df, truth), **sql_sets}
    rows += sql_ds_rows(sql_sets, args.repeat, have_ck, ("mv", "ds"))
    # CRH on 1,000,000 synthetic numeric claims from 10,000 sources
    rng = np.random.default_rng(0)
    n_claims, n_src, n_obj = 1_000_000, 10_000, 100_000
    src = rng.integers(0, n_src, n_claims)
    obj = rng.integers(0, n_obj, n_claims)
    truth = rng.normal(0, 10, n_obj)
    sd = rng.exponential(2.0, n_src)
    val = truth[obj] + rng.normal(0, 1, n_claims) * sd[src]
    from crowddb.truth import encode_answers

    (ans, t_enc) = timed(lambda: encode_answers(obj, src, val, "numeric"), 1)
    for m in ("mean", "crh", "catd", "ti"):
        model = get_method(m)(max_iter=20, tol=1e-4)
        _, t = timed(lambda model=model: model.fit_answers(ans), args.repeat)
        objs = model.truths_.index.to_numpy()
        mae = float(np.abs(model.truths_.to_numpy() - truth[objs]).mean())
        rows.append({"data": "synthetic 1M claims / 10k sources", "method": m, "ours": mae, "ours_s": t,
                     "ours_iter": model.n_iter_})
    tab = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print(tab.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    print(f"(synthetic: encoding 1M claims with pd.factorize took {t_enc:.3f} s, not included in the method times;"
          " 'ours'/'crowdkit' = accuracy on gold for labels, MAE for numbers; times are the best of the repeats)")


if __name__ == "__main__":
    main()
