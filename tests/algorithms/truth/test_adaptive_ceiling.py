"""bench/adaptive.py's ceiling (issue 28's measured bound on a replayed set): recomputed item by item, answer by
answer, by a loop written apart from its vectorized cumulative sums."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowddb.truth import DawidSkene

_spec = importlib.util.spec_from_file_location("bench_adaptive",
                                               Path(__file__).resolve().parents[3] / "bench" / "adaptive.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _answer_set(seed: int, n_tasks: int = 40, n_workers: int = 6, k: int = 3) -> tuple[pd.DataFrame, pd.Series]:
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, k, n_tasks)
    quality = rng.uniform(0.4, 0.95, n_workers)
    rows = []
    for t in range(n_tasks):
        for w in rng.choice(n_workers, size=int(rng.integers(2, 5)), replace=False):
            right = rng.random() < quality[w]
            said = truth[t] if right else (truth[t] + 1 + int(rng.integers(0, k - 1))) % k
            rows.append((f"t{t:02d}", f"w{w}", f"c{said}"))
    answers = pd.DataFrame(rows, columns=["task", "worker", "answer"])
    return answers, pd.Series([f"c{c}" for c in truth], index=[f"t{t:02d}" for t in range(n_tasks)])


def _by_hand(answers: pd.DataFrame, truth: pd.Series, seed: int, taus: list[float]) -> pd.DataFrame:
    """The same ceiling, one item and one answer at a time (the models from the same fits, the rest apart)."""
    ds = DawidSkene().fit(answers["task"], answers["worker"], answers["answer"])
    ans = ds.answers_
    classes = list(ans.classes)
    k = len(classes)
    code = [classes.index(truth[o]) for o in ans.objects]
    counts = np.ones((ans.n_sources, k, k))
    for o, s, v in zip(ans.obj, ans.src, ans.val):
        counts[s, code[o], v] += 1
    share = np.array([code.count(c) + 0.5 for c in range(k)])
    noise = np.random.default_rng(seed).random(len(ans.obj))
    models = {"DS on every answer": (ds.priors_, ds.confusion_),
              "counted against the truth": (share / share.sum(), counts / counts.sum(axis=2, keepdims=True))}
    rows = []
    for model, (prior, cm) in models.items():
        cm = np.clip(cm, 1e-10, None)
        info = []
        for w in range(ans.n_sources):  # I(answer; truth) = sum p_k pi[k, l] log(pi[k, l] / q_l)
            q = [sum(prior[c] * cm[w, c, l] for c in range(k)) for l in range(k)]
            info.append(sum(prior[c] * cm[w, c, l] * math.log(cm[w, c, l] / q[l]) for c in range(k) for l in range(k)))
        for order in ("seeded random", "most informative first"):
            for tau in [*taus, 1.0]:
                bought = right = 0
                for o in range(ans.n_objects):
                    mine = [i for i in range(len(ans.obj)) if ans.obj[i] == o]
                    mine.sort(key=lambda i: ((-info[ans.src[i]]) if order != "seeded random" else noise[i], noise[i]))
                    logp = [math.log(p) for p in prior]
                    for n, i in enumerate(mine, start=1):
                        logp = [logp[c] + math.log(cm[ans.src[i], c, ans.val[i]]) for c in range(k)]
                        top = max(logp)
                        post = [math.exp(x - top) for x in logp]
                        if (tau < 1.0 and max(post) / sum(post) >= tau) or n == len(mine):  # tau=1: every one
                            break
                    bought += n
                    right += post.index(max(post)) == code[o]
                rows.append({"model": model, "order": order, "tau": tau, "share": bought / len(ans.obj),
                             "accuracy": right / ans.n_objects})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_ceiling_is_the_item_by_item_rule(seed):
    answers, truth = _answer_set(seed)
    taus = [0.6, 0.8, 0.9, 0.99]
    got = bench.ceiling(answers, truth, seed=seed, taus=taus)
    want = _by_hand(answers, truth, seed, taus)
    pd.testing.assert_frame_equal(got.sort_values(["model", "order", "tau"]).reset_index(drop=True),
                                  want.sort_values(["model", "order", "tau"]).reset_index(drop=True))
    # every answer read under Dawid-Skene's own model is Dawid-Skene's answer (its accuracy, computed by it)
    ds = DawidSkene().fit(answers["task"], answers["worker"], answers["answer"]).truths_
    every = got[(got["model"] == "DS on every answer") & (got["tau"] == 1.0)]
    assert set(every["share"]) == {1.0}
    assert set(every["accuracy"]) == {float((ds.reindex(truth.index) == truth).mean())}


def test_a_truth_missing_a_task_has_no_ceiling():
    answers, truth = _answer_set(0)
    assert bench.ceiling(answers, truth.drop(truth.index[3])) is None
