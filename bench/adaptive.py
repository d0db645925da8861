"""Accuracy against answers bought (issue 28): fixed assignments with majority vote or Dawid-Skene, against the
adaptive stopping rule with and without quality-aware assignment, on real answer sets by replay and on simulated
crowds.

    python bench/adaptive.py [--seeds 3] [--quick] [--targets 0.95] [--sim-seeds 42,43] [--calibration loo|none]
                             [--answers a.csv --truth t.csv [--only-given]] [--sets NAME] [--sql] [--ceiling] [--plot DIR]

Data: ../shared/data/crowd/d_product (binary, 3 answers per task: "fixed 5" is all 3 there) and adultcontent2
(4 classes, ~8 answers per task, accuracy on its 333 gold tasks; the gold is not shown to the model), both replayed
by ReplayCrowd; simulated crowds at the algorithm layer: the occupation of 2,000 Adult rows (14 classes), 100
workers of accuracy Beta(8, 2) or Beta(3, 2), a wrong answer uniform over the other 13 classes; every answer of
every worker to every item is drawn up front (seeded) and replayed the same way as the real sets.

Policies (all over the same replayed crowd, a new seeded session each):
- fixed-5 MV / fixed-5 DS: 5 answers per task (all there are when fewer), majority vote / crowddb's Dawid-Skene;
- fixed-3 DS: 3 answers per task (the answers adaptive buys, about), Dawid-Skene;
- adaptive: one answer per item the rule asks again per round, from a worker drawn at random, stopping rule of
  crowddb.truth.adaptive (model='auto': Dawid-Skene for 2 and 4 classes, one-coin for 14, both with Beta(8, 2)
  pseudo-counts, the one-coin's centred on the crowd), max 9, at targets 0.8, 0.9, 0.95 (the issue's) and 0.99; the
  target is the result's expected accuracy (the default); "each item": every item's posterior (each_item=True);
- adaptive+QA: the same rule; each round workers arrive in a seeded random order and each takes up to 5 of the
  uncertain items where its answer helps most (QASCA's accuracy benefit; on a replay, among the items it has a
  recorded answer to).
The stopping rule's posteriors are leave-one-out by default (each item judged with its workers' qualities fitted
without its own answers; --calibration none: the plug-in EM posteriors, as before). Columns: expected, the model's
expected accuracy of the result (mean leading posterior, gold left out); exp_scored, the same mean over the items the
accuracy is measured on (adultcontent2: its 333 gold tasks); exp_true (simulated crowds), what the crowd's own model
(each worker's accuracy over every item, the items' class shares) expects of the same answers: a model as
calibrated as that one differs from the measured accuracy only by the sampling noise of 2,000 items (about 0.005).
--targets picks the targets, --sim-seeds more simulated crowds (their runs pooled under one name).
With --sql, every replayed set also goes through SQL (ReplayCrowd behind crowddb.connect, seed 0): fixed-5 MV and DS
(assignments := 5), and accuracy := 0.95 without and with quality-aware assignment (ReplayCrowd(offers=False) and
the default, which honours crowddb's offers: a HIT built for a worker gets that worker's recorded answers, the seeded
order where the worker has none, and crowddb offers an item only to a worker with a recorded answer to it left,
ReplayCrowd.candidates; offer_kept is the share of the offered HITs' answers that came from the offered worker).
With --ceiling, each replayed set with a truth for every task (d_product) also gets what a subset of its recorded
answers gives at best under a worker model known up front (ceiling()): the bound the goals are read against there.
The goals (issue 28): the accuracy of fixed-5 DS with at most 60% of its answers; with at most its answers, 2 points
above it where it is below 0.95; accuracy 0.95 measuring between 0.94 and 0.97 on the simulated crowds.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

from crowddb.crowd import ReplayCrowd
from crowddb.datasets import adult_path
from crowddb.truth import DawidSkene, MajorityVote
from crowddb.truth.adaptive import (
    WorkerModel,
    assign_round,
    expected_gain,
    item_posteriors,
    predict_assignments,
    stopping_rule,
)

CROWD = ROOT.parent / "shared" / "data" / "crowd"
PER_WORKER = 5  # items a worker takes when it asks for work (one HIT)


def load_d_product() -> tuple[pd.DataFrame, pd.Series]:
    a = pd.read_csv(CROWD / "d_product" / "answer.csv").set_axis(["task", "worker", "answer"], axis=1)
    t = pd.read_csv(CROWD / "d_product" / "truth.csv").set_index("question")["truth"]
    return a, t


def load_adultcontent2() -> tuple[pd.DataFrame, pd.Series]:
    lab = pd.read_csv(CROWD / "adultcontent2" / "labels.txt", sep="\t", header=None,
                      names=["worker", "task", "answer"])
    lab = lab.drop_duplicates(["worker", "task"], keep="last")[["task", "worker", "answer"]]  # README: keep the last
    gold = pd.read_csv(CROWD / "adultcontent2" / "gold.txt", sep="\t", header=None, names=["task", "label"])
    gold = gold.drop_duplicates("task", keep="last").set_index("task")["label"]
    return lab, gold[gold.index.isin(lab["task"])]


def load_csv(answers: Path, truth: Path) -> tuple[pd.DataFrame, pd.Series]:
    """A recorded answer set given on the command line: task, worker, answer; and task, truth (by position)."""
    a = pd.read_csv(answers).iloc[:, :3].set_axis(["task", "worker", "answer"], axis=1)
    a = a.drop_duplicates(["task", "worker"], keep="last")  # a worker's last answer to a task counts
    t = pd.read_csv(truth).iloc[:, :2].set_axis(["task", "truth"], axis=1).drop_duplicates("task", keep="last")
    return a, t.set_index("task")["truth"]


def simulated(quality: tuple[float, float], seed: int, n_items: int = 2000, n_workers: int = 100
              ) -> tuple[pd.DataFrame, pd.Series]:
    """Every worker's answer to every item, drawn up front: right with the worker's accuracy, else uniform."""
    rng = np.random.default_rng(seed)
    occ = pd.read_csv(adult_path(), usecols=["occupation"])["occupation"]
    classes = np.sort(occ.unique())
    truth = occ.sample(n_items, random_state=seed).to_numpy()
    code = pd.Index(classes).get_indexer(truth)
    q = rng.beta(quality[0], quality[1], size=n_workers)
    k = len(classes)
    right = rng.random((n_items, n_workers)) < q[None, :]
    wrong = rng.integers(0, k - 1, size=(n_items, n_workers))
    wrong = np.where(wrong >= code[:, None], wrong + 1, wrong)
    said = np.where(right, code[:, None], wrong)
    tasks = np.repeat(np.arange(n_items), n_workers)
    workers = np.tile(np.array([f"W{i:03d}" for i in range(n_workers)], dtype=object), n_items)
    answers = pd.DataFrame({"task": tasks, "worker": workers, "answer": classes[said.ravel()]})
    return answers, pd.Series(truth, index=np.arange(n_items))


def true_model(crowd: ReplayCrowd, truth: pd.Series, classes: list) -> WorkerModel:
    """A simulated crowd's own one-coin model: each worker's accuracy over every item (``ReplayCrowd.workers``) and
    the items' class shares (ours: half a count added to each class, so a class never drawn keeps some mass). Its
    posteriors are those of a model that knew the crowd: the reference a fitted model's calibration is read against
    (the measured accuracy of 2,000 items still varies by about 0.005 around them)."""
    quality = crowd.workers().set_index("worker_id")["quality"]
    share = truth.value_counts().reindex(classes, fill_value=0).to_numpy(dtype=float) + 0.5
    return WorkerModel.one_coin(quality, classes, class_prior=share / share.sum())


def _frame(served: pd.DataFrame) -> pd.DataFrame:
    return served.rename(columns={"task": "object", "answer": "label"})


def accuracy(pred: pd.Series, truth: pd.Series) -> float:
    common = truth.index.intersection(pred.index)
    return float((pred.loc[common].to_numpy() == truth.loc[common].to_numpy()).mean())


def fixed(crowd: ReplayCrowd, n: int, seed: int) -> pd.DataFrame:
    crowd.reset(seed)
    return _frame(crowd.ask(crowd.tasks, n))


def adaptive(crowd: ReplayCrowd, classes: list, seed: int, *, target: float, max_assignments: int,
             quality_aware: bool, model: str = "auto", each_item: bool = False, calibration: str | None = "loo",
             bound: dict | None = None) -> tuple[pd.DataFrame, object]:
    """Rounds until no item needs more, as the SQL operator's loop runs (not max_assignments rounds: an item the rule
    accepted in one round may be asked again in a later one, and an item at the target bought to make up for items
    capped below it starts late): returns the answers bought and the last StopState. Each round buys at least one
    answer, and no item more than max_assignments, so the bound below is never reached."""
    crowd.reset(seed)
    rng = np.random.default_rng(seed + 1000)
    items = crowd.tasks
    bound = bound or {}  # bound_level, tolerance: the stopping rule's defaults unless given
    bought = pd.DataFrame({"object": pd.Series([], dtype=items.dtype), "worker": pd.Series([], dtype=object),
                           "label": pd.Series([], dtype=object)})
    state = None
    for _ in range(len(items) * max_assignments):
        if len(bought) == 0:
            need = items
        else:
            state = stopping_rule(bought, target=target, max_assignments=max_assignments, classes=classes,
                                  items=items, model=model, each_item=each_item, calibration=calibration, **bound)
            need = state.need_more
        left = crowd.remaining().loc[need]
        need = left.index[left.to_numpy() > 0]  # a replayed task with no recorded answer left stops where it is
        if len(need) == 0:
            break
        if quality_aware and state is not None:
            cand = crowd.available(need).rename(columns={"task": "object"})
            workers = pd.unique(cand["worker"])
            per = cand.groupby("worker").size().reindex(workers).to_numpy()
            passes = int(np.ceil(per.max() / PER_WORKER))
            arrivals = np.concatenate([rng.permutation(workers) for _ in range(passes)])
            # restricted to this round's items: ``need`` may be a subset of state.need_more (exhausted replays)
            picked = assign_round(state, arrivals, per_worker=PER_WORKER, candidates=cand)
            got = crowd.answer(picked["object"], picked["worker"])
        else:
            got = crowd.ask(need, 1)
        if len(got) == 0:  # nothing more to be had (a guard: each round above serves every item it asks)
            break
        bought = pd.concat([bought, _frame(got)], ignore_index=True)
    state = stopping_rule(bought, target=target, max_assignments=max_assignments, classes=classes, items=items,
                          model=model, each_item=each_item, calibration=calibration, **bound)
    return bought, state


def run_dataset(name: str, answers: pd.DataFrame, truth: pd.Series, seeds: list[int], targets: list[float],
                max_assignments: int = 9, calibration: str | None = "loo", simulated_crowd: bool = False,
                result_only: bool = False, bound: dict | None = None) -> list[dict]:
    crowd = ReplayCrowd(answers, truth)
    classes = sorted(pd.unique(answers["answer"]).tolist())
    known = true_model(crowd, truth, classes) if simulated_crowd else None
    rows: list[dict] = []

    def add(policy: str, bought: pd.DataFrame, pred: pd.Series, seconds: float, extra: dict | None = None) -> None:
        rows.append({"dataset": name, "policy": policy, "answers": len(bought),
                     "per_item": len(bought) / len(crowd.tasks), "accuracy": accuracy(pred, truth),
                     "seconds": seconds} | (extra or {}))

    for seed in seeds:
        t0 = time.perf_counter()
        five = fixed(crowd, 5, seed)
        add("fixed-5 MV", five, MajorityVote().fit(five["object"], five["worker"], five["label"]).truths_,
            time.perf_counter() - t0)
        t0 = time.perf_counter()
        add("fixed-5 DS", five, DawidSkene().fit(five["object"], five["worker"], five["label"]).truths_,
            time.perf_counter() - t0)
        three = fixed(crowd, 3, seed)
        add("fixed-3 DS", three, DawidSkene().fit(three["object"], three["worker"], three["label"]).truths_, 0.0)
        for target in targets:
            for each_item in (False,) if result_only else (False, True):
                for qa in (False, True):
                    t0 = time.perf_counter()
                    bought, state = adaptive(crowd, classes, seed, target=target, max_assignments=max_assignments,
                                             quality_aware=qa, each_item=each_item, calibration=calibration,
                                             bound=bound)
                    label = f"{'each item' if each_item else 'adaptive'}{'+QA' if qa else ''} t={target:g}"
                    seconds = time.perf_counter() - t0
                    scored = truth.index.intersection(state.confidence.index)
                    # the model's expected accuracy on the items scored against the truth, and (a simulated crowd)
                    # the one the crowd's own model expects of the same answers
                    true_exp = (np.nan if known is None else float(
                        item_posteriors(bought, known).max(axis=1).reindex(scored).fillna(0.0).mean()))
                    # uncertain: capped below the target, or still asked below it with no recorded answer left
                    short = (state.status == "more") & (state.confidence < target)
                    lead = state.confidence.to_numpy()[state.status.to_numpy() != "gold"]
                    add(label, bought, state.truth, seconds,
                        {"uncertain": int((state.status == "uncertain").sum()) + int(short.sum()),
                         "expected": state.expected_accuracy,
                         # the sd of the result's share of right answers under the model (Poisson-binomial)
                         "model_sd": float(np.sqrt(np.sum(lead * (1 - lead)))) / max(len(lead), 1),
                         "expected_scored": float(state.confidence.loc[scored].mean()), "expected_true": true_exp})
    return rows


def predicted_vs_bought(name: str, answers: pd.DataFrame, truth: pd.Series, quality: tuple[float, float],
                        seed: int, calibration: str | None = "loo") -> dict:
    """explain()'s prediction (prior only, and from the workers' accuracies) beside what the adaptive run bought."""
    crowd = ReplayCrowd(answers, truth)
    classes = sorted(pd.unique(answers["answer"]).tolist())
    bought, state = adaptive(crowd, classes, seed, target=0.95, max_assignments=9, quality_aware=False,
                             calibration=calibration)
    n = len(crowd.tasks)
    prior = predict_assignments(n, len(classes), target=0.95, max_assignments=9, seed=seed)
    fitted = predict_assignments(n, len(classes), target=0.95, max_assignments=9,
                                 qualities=state.model.accuracy.to_numpy(), seed=seed)
    true_q = crowd.workers()["quality"].to_numpy()
    oracle = predict_assignments(n, len(classes), target=0.95, max_assignments=9, qualities=true_q, seed=seed)
    return {"crowd": name, "bought": len(bought), "prior": prior, "estimated": fitted, "true": oracle,
            "accuracy": accuracy(state.truth, truth)}


def ceiling(answers: pd.DataFrame, truth: pd.Series, seed: int = 0,
            taus: Sequence[float] = (0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999)) -> pd.DataFrame | None:
    """What a subset of the recorded answers can give at best, for a set with a truth for every task (ours): each
    item read answer by answer under a worker model known up front, stopping at the first answer whose posterior
    (Dawid-Skene Eq. 2.5 under that model) reaches tau, the item's label that posterior's leader. Two models: Dawid-
    Skene fitted on every recorded answer (what a run could at most learn of its workers), and each worker's
    confusion matrix counted against the truth (add-one, the classes' shares from the truth: a model no run has);
    two orders: the recorded answers in a seeded random order (a platform that cannot choose), and each item's most
    informative worker first (the mutual information of the worker's answer and the truth under the model: an
    assignment that knows every worker, and each item's recorded workers, before round one). tau=1 reads every
    answer: with the truth-counted model, the Bayes rule on every answer, which no aggregation of the same answers
    under this worker model beats. None for a set whose truth misses a task."""
    ds = DawidSkene().fit(answers["task"], answers["worker"], answers["answer"])
    ans = ds.answers_
    code = ans.classes.get_indexer(truth.reindex(ans.objects))
    if (code < 0).any():
        return None
    k, n = ans.n_classes, ans.n_objects
    counts = np.ones((ans.n_sources, k, k))
    np.add.at(counts, (ans.src, code[ans.obj], ans.val), 1.0)
    share = np.bincount(code, minlength=k) + 0.5
    models = {"DS on every answer": (ds.priors_, ds.confusion_),
              "counted against the truth": (share / share.sum(), counts / counts.sum(axis=2, keepdims=True))}
    noise = np.random.default_rng(seed).random(len(ans.obj))
    rows = []
    for model, (prior, cm) in models.items():
        cm = np.clip(cm, 1e-10, None)
        _, mi = expected_gain(np.broadcast_to(prior, (len(cm), k)), cm)  # each worker's, under the class prior
        for order, key in (("seeded random", noise), ("most informative first", -mi[ans.src])):
            at = np.lexsort((noise, key, ans.obj))  # by item, then the order's key (ties: the seeded draw)
            obj = ans.obj[at]
            cum = np.cumsum(np.log(cm[ans.src[at], :, ans.val[at]]), axis=0)
            start = np.r_[0, np.flatnonzero(np.diff(obj)) + 1]
            cum -= np.repeat(np.vstack([np.zeros(k), cum[start[1:] - 1]]), np.diff(np.r_[start, len(obj)]), axis=0)
            logp = cum + np.log(prior)
            post = np.exp(logp - logp.max(axis=1, keepdims=True))
            post /= post.sum(axis=1, keepdims=True)
            lead, label = post.max(axis=1), post.argmax(axis=1)
            last = np.r_[start[1:] - 1, len(obj) - 1]
            for tau in (*taus, 1.0):
                reached = np.flatnonzero(lead >= tau) if tau < 1.0 else np.array([], dtype=np.int64)
                items, at_first = np.unique(obj[reached], return_index=True)  # each item's first answer at tau
                first = np.full(n, -1)
                first[items] = reached[at_first]
                stop = np.where(first >= 0, first, last)
                rows.append({"model": model, "order": order, "tau": tau,
                             "share": float((stop - start + 1).sum()) / len(obj),
                             "accuracy": float((label[stop] == code).mean())})
    return pd.DataFrame(rows)


def table(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    agg = df.groupby(["dataset", "policy"], sort=False).agg(
        answers=("answers", "mean"), per_item=("per_item", "mean"), accuracy=("accuracy", "mean"),
        acc_sd=("accuracy", "std"), expected=("expected", "mean"), exp_scored=("expected_scored", "mean"),
        exp_true=("expected_true", "mean"), seconds=("seconds", "mean")).reset_index()
    base = agg[agg["policy"] == "fixed-5 DS"].set_index("dataset")
    agg["share_of_fixed5"] = agg["answers"] / base["answers"].reindex(agg["dataset"]).to_numpy()
    agg["vs_fixed5_ds"] = agg["accuracy"] - base["accuracy"].reindex(agg["dataset"]).to_numpy()
    return agg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one seed, target 0.95 only")
    ap.add_argument("--targets", default=None, help="the adaptive targets, comma-separated (default 0.8,0.9,0.95,0.99; "
                                                    "--quick: 0.95)")
    ap.add_argument("--sim-seeds", default="42", help="the simulated crowds' seeds, comma-separated (default 42); "
                                                      "the runs of every crowd are pooled under one name")
    ap.add_argument("--calibration", default="loo", choices=["loo", "none"],
                    help="the stopping rule's posteriors: 'loo' (the default, each item judged with its workers' "
                         "qualities fitted without it) or 'none' (the plug-in EM posteriors, as before issue 28's "
                         "calibration)")
    ap.add_argument("--answers", type=Path, action="append", default=[],
                    help="another recorded answer set to replay: a CSV of task, worker, answer (in that order; a "
                         "header row); repeatable, each with its --truth")
    ap.add_argument("--truth", type=Path, action="append", default=[],
                    help="its ground truth: a CSV of task, truth (a header row), for some or all tasks")
    ap.add_argument("--only-given", action="store_true", help="replay only the --answers sets")
    ap.add_argument("--sets", action="append", default=[],
                    help="run only the data sets whose name contains this (e.g. d_product); repeatable")
    ap.add_argument("--sql", action="store_true", help="also run every replayed set through SQL, seed 0: fixed-5 "
                                                       "MV and DS, accuracy := 0.95 without and with quality-aware "
                                                       "assignment")
    ap.add_argument("--result-only", action="store_true",
                    help="adaptive policies for the result's target only (no each_item runs)")
    ap.add_argument("--bound-level", default=None,
                    help="the stopping rule's bound_level (a confidence level, or 'none': the expected accuracy "
                         "alone); default: crowddb.truth.adaptive.BOUND_LEVEL")
    ap.add_argument("--tolerance", type=float, default=None,
                    help="the stopping rule's tolerance; default: crowddb.truth.adaptive.TOLERANCE")
    ap.add_argument("--no-prediction", action="store_true", help="skip explain()'s prediction against the runs")
    ap.add_argument("--ceiling", action="store_true",
                    help="for each replayed set with a truth for every task, what a subset of its recorded answers "
                         "gives at best under a worker model known up front (see ceiling())")
    ap.add_argument("--rows", type=Path, default=None, help="write every run's row (each seed, each crowd) to this CSV")
    ap.add_argument("--plot", default=None, help="directory for PNGs of accuracy against answers bought, one per "
                                                 "data set (needs the plot extra: matplotlib)")
    args = ap.parse_args()
    if len(args.answers) != len(args.truth):
        ap.error("give one --truth for each --answers")
    seeds = [0] if args.quick else list(range(args.seeds))
    targets = ([float(t) for t in args.targets.split(",")] if args.targets
               else [0.95] if args.quick else [0.8, 0.9, 0.95, 0.99])
    calibration = None if args.calibration == "none" else args.calibration
    bound: dict = {}
    if args.bound_level is not None:
        bound["bound_level"] = None if args.bound_level == "none" else float(args.bound_level)
    if args.tolerance is not None:
        bound["tolerance"] = args.tolerance
    sets: list[tuple[str, pd.DataFrame, pd.Series]] = [(f"{a.parent.name}/{a.stem} (replay)", *load_csv(a, t))
                                                       for a, t in zip(args.answers, args.truth)]
    if args.only_given:
        pass
    elif CROWD.is_dir():
        sets += [("d_product (replay)", *load_d_product()), ("adultcontent2 (replay)", *load_adultcontent2())]
    else:
        print(f"real answer sets not found at {CROWD}; simulated crowds only")
    sims = ([] if args.only_given else
            [(f"sim Adult occ. Beta{q}", *simulated(q, seed=int(s)), q) for q in ((8.0, 2.0), (3.0, 2.0))
             for s in args.sim_seeds.split(",")])
    sets += [(n, a, t) for n, a, t, _ in sims]
    if args.sets:
        sets = [s for s in sets if any(part in s[0] for part in args.sets)]
        sims = [s for s in sims if any(part in s[0] for part in args.sets)]
    rows: list[dict] = []
    for i, (name, answers, truth) in enumerate(sets):
        t0 = time.perf_counter()
        rows += [r | {"crowd": i} for r in run_dataset(name, answers, truth, seeds, targets, calibration=calibration,
                                                       simulated_crowd=name.startswith("sim "),
                                                       result_only=args.result_only, bound=bound)]
        print(f"  {name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    if args.rows:
        pd.DataFrame(rows).to_csv(args.rows, index=False)
    out = table(rows)
    recorded = {name: len(answers) for name, answers, _ in sets}  # the crowds of one name hold as many answers
    pd.set_option("display.width", 200)
    print(f"accuracy vs answers bought, mean over seeds {seeds} (share_of_fixed5: answers / fixed-5 DS's answers)")
    print(out.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.plot:
        plot(out, args.plot)
    print()
    print("goals (issue 28): fixed-5 DS's accuracy with <= 60% of its answers; with at most its answers, 2 points "
          "above it where it is below 0.95; accuracy := 0.95 (the result's target) measuring 0.94-0.97")
    for ds, grp in out.groupby("dataset", sort=False):
        five = grp[grp["policy"] == "fixed-5 DS"].iloc[0]
        acc5 = float(five["accuracy"])
        tuned = grp[grp["policy"].str.match(r"(adaptive|each item)")]
        cheap = tuned[tuned["accuracy"] >= acc5 - 1e-9].sort_values("share_of_fixed5")
        if len(cheap):
            r = cheap.iloc[0]
            print(f"  {ds:30s} cheapest at fixed-5 DS's accuracy {acc5:.3f}: {r['policy']} with "
                  f"{r['share_of_fixed5']:.0%} of its answers (accuracy {r['accuracy']:.3f}): "
                  f"{'met' if r['share_of_fixed5'] <= 0.6 else 'NOT met'}")
        else:
            print(f"  {ds:30s} no adaptive setting reached fixed-5 DS's accuracy {acc5:.3f}: NOT met")
        if recorded.get(ds) == five["answers"]:  # every task has 5 answers or fewer on record: fixed-5 reads them all
            print(f"  {ds:30s} (fixed-5 reads every recorded answer, {int(five['answers']):,}: the goal asks its "
                  "accuracy of a subset of the same answers)")
        within = tuned[tuned["answers"] <= five["answers"]].sort_values("accuracy", ascending=False)
        if acc5 < 0.95 and len(within):
            r = within.iloc[0]
            gain = r["accuracy"] - acc5
            print(f"  {ds:30s} best with at most its answers: {r['policy']} {r['accuracy']:.3f} "
                  f"({gain:+.3f} against {acc5:.3f}): {'met' if gain >= 0.02 else 'NOT met'}")
        if ds.startswith("sim "):
            for pol in ("adaptive t=0.95", "adaptive+QA t=0.95"):
                if not (grp["policy"] == pol).any():
                    continue
                r = grp[grp["policy"] == pol].iloc[0]
                each = [x["accuracy"] for x in rows if x["dataset"] == ds and x["policy"] == pol]  # run by run
                inside = all(0.94 <= a <= 0.97 for a in each)
                print(f"  {ds:30s} {pol}: accuracy {r['accuracy']:.3f} (model's expectation "
                      f"{r['expected']:.3f}, the crowd's own model's {r['exp_true']:.3f}; run by run "
                      f"{', '.join(f'{a:.4f}' for a in each)}): "
                      f"{'in' if inside else 'NOT in'} 0.94-0.97{'' if len(each) == 1 else ' on every run'}")
    if args.ceiling:
        print()
        print("ceiling: each item read answer by answer under a worker model known up front, stopping at the first "
              "answer whose posterior reaches tau (tau=1: every answer); seed 0")
        for name, answers, truth in sets:
            if name.startswith("sim "):
                continue
            best = ceiling(answers, truth)
            if best is None:
                print(f"  {name}: its truth misses tasks; no ceiling")
                continue
            five = out[(out["dataset"] == name) & (out["policy"] == "fixed-5 DS")]
            print(best.pivot_table(index="tau", columns=["model", "order"], values=["share", "accuracy"])
                  .to_string(float_format=lambda v: f"{v:.4f}"))
            if len(five):
                acc5 = float(five["accuracy"].iloc[0])
                for (model, order), grp in best.groupby(["model", "order"], sort=False):
                    there = grp[grp["accuracy"] >= acc5 - 1e-9]
                    print(f"  {name}: {model}, {order}: fixed-5 DS's accuracy {acc5:.4f} "
                          + (f"from {there['share'].min():.0%} of the recorded answers" if len(there)
                             else f"not reached (at most {grp['accuracy'].max():.4f})"))
    if args.sql:
        print()
        print("through SQL (ReplayCrowd behind crowddb.connect), seed 0, beside the algorithm layer's mean")
        for name, answers, truth in sets:
            t0 = time.perf_counter()
            sql = pd.DataFrame(through_sql(name, answers, truth, seed=0))
            print(f"  {name} through SQL: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
            print(sql.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep=""))
    print()
    print("prediction (explain()) vs bought, adaptive target 0.95 max 9, seed 0")
    for name, answers, truth, q in [] if args.no_prediction else sims:
        r = predicted_vs_bought(name, answers, truth, q, 0, calibration)
        for basis in ("prior", "estimated", "true"):
            p = r[basis]
            inside = p.low <= r["bought"] <= p.high
            print(f"  {name:28s} {basis:9s} predicted {p.expected:8,.0f} [{p.low:,.0f}, {p.high:,.0f}] "
                  f"acc {p.accuracy:.3f}; bought {r['bought']:,} ({'inside' if inside else 'outside'}), "
                  f"measured acc {r['accuracy']:.3f}")


class _OffersSeen(ReplayCrowd):
    """A replayed crowd that keeps the offers crowddb posted (hit_id, worker_id), to measure how many it kept."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.offers: list[pd.DataFrame] = []

    def publish(self, batch, *, knowledge=None) -> None:
        if batch.offer is not None and len(batch.offer):
            self.offers.append(batch.offer)
        super().publish(batch, knowledge=knowledge)


def through_sql(name: str, answers: pd.DataFrame, truth: pd.Series, seed: int, max_assignments: int = 9
                ) -> list[dict]:
    """The same replayed crowd behind SQL: fixed 5 assignments (majority vote and Dawid-Skene over the same
    answers: the second query is served from the record) and ``getposition(task, accuracy := 0.95)`` (the result's
    target and each item's) on a replay that ignores offers and, "+QA", on one that honours them (quality-aware
    assignment: later rounds built per worker, ``PER_WORKER`` items a HIT as at the algorithm layer)."""
    import crowddb

    classes = sorted(pd.unique(answers["answer"]).astype(str).tolist())
    domain = "[" + ", ".join("'" + c.replace("'", "''") + "'" for c in classes) + "]"
    target = f"accuracy := 0.95, max_assignments := {max_assignments}, tuples_per_hit := {PER_WORKER}"
    calls = [([("SQL fixed-5 MV", "assignments := 5, method := 'mv'"),
               ("SQL fixed-5 DS", "assignments := 5, method := 'ds'")], False),
             ([("SQL adaptive t=0.95", target)], False),
             ([("SQL adaptive+QA t=0.95", target)], True),
             ([("SQL each item t=0.95", f"{target}, each_item := true")], False),
             ([("SQL each item+QA t=0.95", f"{target}, each_item := true")], True)]
    answers = answers.astype({"task": str, "answer": str})  # the published task id is text
    truth = pd.Series(truth.astype(str).to_numpy(), index=truth.index.astype(str))
    tasks = pd.DataFrame({"task": pd.unique(answers["task"])})
    rows = []
    for queries, offers in calls:
        crowd = _OffersSeen(answers, seed=seed, task_column="task", offers=offers)
        with crowddb.connect(platform=crowd, seed=seed, progress=False) as db:
            db.load_frame("tasks", tasks)
            for label, args in queries:  # a later query of the same connection is served from the record
                t0 = time.perf_counter()
                got = db.sql(f"SELECT task, getposition(task, domain := {domain}, {args}) AS label FROM tasks").df()
                seconds = time.perf_counter() - t0
                bought = db.sql("SELECT hit_id, worker_id FROM crowddb_answers").df()
                pred = pd.Series(got["label"].to_numpy(), index=got["task"].to_numpy())
                kept = np.nan
                if crowd.offers:  # the offered HITs' answers that came from the worker each was offered to
                    offered = pd.concat(crowd.offers, ignore_index=True).drop_duplicates("hit_id")
                    on = bought.merge(offered, on="hit_id", suffixes=("", "_offered"))
                    kept = float((on["worker_id"] == on["worker_id_offered"]).mean()) if len(on) else np.nan
                rows.append({"dataset": name, "policy": label, "answers": len(bought),
                             "per_item": len(bought) / len(tasks), "accuracy": accuracy(pred, truth),
                             "offer_kept": kept, "seconds": seconds})
    return rows


def plot(out: pd.DataFrame, folder: str) -> None:
    """One PNG per data set: each policy's accuracy against the answers it bought per item (mean over the seeds);
    the adaptive policies' targets joined by a line, fixed assignments as single points."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no PNGs (pip install -e '.[plot]')")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Path(folder).mkdir(parents=True, exist_ok=True)
    for name, grp in out.groupby("dataset", sort=False):
        fig, ax = plt.subplots(figsize=(5, 3.4))
        for family in ("adaptive t=", "adaptive+QA t=", "each item t=", "each item+QA t="):
            line = grp[grp["policy"].str.startswith(family)].sort_values("per_item")
            if len(line):
                ax.plot(line["per_item"], line["accuracy"], marker="o", label=family.rstrip(" t="))
        fixed = grp[grp["policy"].str.startswith("fixed")]
        ax.scatter(fixed["per_item"], fixed["accuracy"], marker="s", color="black", zorder=3)
        for _, row in fixed.iterrows():  # a handful of labels
            ax.annotate(row["policy"], (row["per_item"], row["accuracy"]), fontsize=7, xytext=(3, -9),
                        textcoords="offset points")
        ax.set_xlabel("answers bought per item")
        ax.set_ylabel("accuracy")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        safe = "".join(c if c.isalnum() else "_" for c in name).strip("_")
        fig.savefig(Path(folder) / f"adaptive_{safe}.png", dpi=120)
        plt.close(fig)
    print(f"PNGs written to {folder}")


if __name__ == "__main__":
    main()
