"""Quality-aware assignment (crowddb.truth.adaptive.assign_round, issue 28) computed once per distinct posterior and
worker, and without an items x workers list when every worker may take every item: the same picks, in the same
order, with the same gains, as the implementation it replaced (copied below as the reference: every pair's gain
computed, all pairs sorted, the greedy walk over the sorted lists), on seeded random states."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy.special import xlogy

from crowddb.errors import UnknownColumnError
from crowddb.truth.adaptive import StopState, WorkerModel, assign_round, stopping_rule

# ---------------------------------------------------------------------------------------------- the reference


def reference_gain(posterior, confusion):
    """expected_gain as it was (unchanged in substance: the new one computes a worker's conditional entropy once)."""
    p = np.asarray(posterior, dtype=float)
    cm = np.asarray(confusion, dtype=float)
    joint = p[:, :, None] * cm
    acc = joint.max(axis=1).sum(axis=1) - p.max(axis=1)
    p_answer = joint.sum(axis=1)
    neg_cond = xlogy(cm, cm).sum(axis=-1)
    info = (p * neg_cond).sum(axis=1) - xlogy(p_answer, p_answer).sum(axis=1)
    return np.maximum(acc, 0.0), np.maximum(info, 0.0)


def reference_rank_keys(acc, info, metric):
    acc_r = np.round(acc, 12)
    return (acc_r, info) if metric == "accuracy" else (info, acc_r)


def reference_assign_round(state: StopState, arrivals: Any, *, per_worker: int = 1,
                           candidates: pd.DataFrame | None = None, metric: str = "accuracy", chunk: int = 50_000
                           ) -> pd.DataFrame:
    """assign_round before commit-time (issue 28's speed-up), validation left out."""
    arrivals = pd.Index(list(arrivals))
    more = state.need_more
    empty = pd.DataFrame({"object": pd.Series([], dtype=object), "worker": pd.Series([], dtype=object),
                          "gain": pd.Series([], dtype=float), "information": pd.Series([], dtype=float)})
    if len(more) == 0 or len(arrivals) == 0:
        return empty
    workers = pd.Index(pd.unique(arrivals))
    if candidates is None:
        io, wo = np.meshgrid(np.arange(len(more)), np.arange(len(workers)), indexing="ij")
        io, wo = io.ravel(), wo.ravel()
    else:
        io = more.get_indexer(candidates["object"])
        wo = workers.get_indexer(candidates["worker"])
        keep = (io >= 0) & (wo >= 0)
        io, wo = io[keep], wo[keep]
    seen_i = more.get_indexer(state.answered["object"])
    seen_w = workers.get_indexer(state.answered["worker"])
    ok = (seen_i >= 0) & (seen_w >= 0)
    seen_key = np.unique(seen_i[ok].astype(np.int64) * len(workers) + seen_w[ok])
    key = io.astype(np.int64) * len(workers) + wo
    fresh = ~np.isin(key, seen_key)
    io, wo = io[fresh], wo[fresh]
    if len(io) == 0:
        return empty
    post = state.posterior.loc[more].to_numpy()
    mats = state.model.matrices(workers)
    by_worker = np.argsort(wo, kind="stable")
    io, wo = io[by_worker], wo[by_worker]
    starts = np.searchsorted(wo, np.arange(len(workers) + 1))
    acc = np.empty(len(io))
    info = np.empty(len(io))
    for w in np.flatnonzero(np.diff(starts)):
        for s in range(starts[w], starts[w + 1], chunk):
            sl = slice(s, min(s + chunk, starts[w + 1]))
            acc[sl], info[sl] = reference_gain(post[io[sl]], mats[w])
    first, second = reference_rank_keys(acc, info, metric)
    order = np.lexsort((io, -second, -first, wo))
    io, wo, acc, info = io[order], wo[order], acc[order], info[order]
    taken = np.zeros(len(more), bool)
    takeable = len(np.unique(io))
    n_taken = 0
    sel: list[np.ndarray] = []
    for w in workers.get_indexer(arrivals):
        lo, hi = starts[w], starts[w + 1]
        free = np.flatnonzero(~taken[io[lo:hi]])[:per_worker] + lo
        if len(free):
            taken[io[free]] = True
            sel.append(free)
            n_taken += len(free)
            if n_taken == takeable:
                break
    if not sel:
        return empty
    idx = np.concatenate(sel)
    return pd.DataFrame({"object": more.take(io[idx]), "worker": workers.take(wo[idx]),
                         "gain": acc[idx], "information": info[idx]}).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------- seeded states


def random_state(seed: int, n_items: int, n_workers: int, k: int, model: str, answers_per_item: tuple[int, int]
                 ) -> StopState:
    """Answers of workers of accuracy Beta(8, 2) (wrong ones uniform) to items whose truth is uniform; each item gets
    a seeded number of answers in ``answers_per_item``, so many items of one answer share their posterior."""
    rng = np.random.default_rng(seed)
    classes = [f"c{i:02d}" for i in range(k)]
    q = rng.beta(8, 2, n_workers)
    truth = rng.integers(0, k, n_items)
    rows = []
    for i in range(n_items):
        who = rng.choice(n_workers, rng.integers(answers_per_item[0], answers_per_item[1] + 1), replace=False)
        for w in who:
            said = truth[i] if rng.random() < q[w] else (truth[i] + rng.integers(1, k)) % k
            rows.append((i, f"w{w:03d}", classes[said]))
    answers = pd.DataFrame(rows, columns=["object", "worker", "label"])
    return stopping_rule(answers, target=0.99, max_assignments=20, classes=classes, items=range(n_items),
                         model=model, each_item=True)  # each item held to 0.99: most need more


CASES = [  # seed, items, workers, classes, model, answers per item
    (0, 60, 8, 2, "ds", (1, 3)),
    (1, 200, 25, 4, "ds", (1, 1)),     # one answer each: the workers are not measured, K distinct posteriors
    (2, 150, 30, 4, "ds", (1, 4)),
    (3, 120, 20, 14, "one_coin", (1, 3)),
    (4, 300, 40, 14, "one_coin", (2, 5)),
    (5, 80, 6, 3, "one_coin", (0, 3)),  # items without an answer
]


def arrivals_of(state: StopState, seed: int, passes: int) -> list:
    """Workers in a seeded order, ``passes`` times over (a worker may come back), with one stranger never seen."""
    rng = np.random.default_rng(seed + 100)
    workers = sorted(pd.unique(state.answered["worker"])) + ["stranger"]
    return [w for _ in range(passes) for w in rng.permutation(workers)]


def candidates_of(state: StopState, seed: int, share: float) -> pd.DataFrame:
    """A seeded share of every (item, worker) pair, shuffled, with pairs of unknown items and workers mixed in."""
    rng = np.random.default_rng(seed + 200)
    items = np.asarray(state.posterior.index)
    workers = np.asarray(sorted(pd.unique(state.answered["worker"])) + ["stranger"], dtype=object)
    o, w = np.meshgrid(np.arange(len(items)), np.arange(len(workers)), indexing="ij")
    keep = rng.random(o.size) < share
    pairs = pd.DataFrame({"object": items[o.ravel()[keep]], "worker": workers[w.ravel()[keep]]})
    extra = pd.DataFrame({"object": [-1, items[0]], "worker": [workers[0], "nobody"]})
    return pd.concat([pairs, extra], ignore_index=True).sample(frac=1.0, random_state=seed).reset_index(drop=True)


@pytest.mark.parametrize("case", CASES, ids=[f"seed{c[0]}-K{c[3]}-{c[4]}" for c in CASES])
@pytest.mark.parametrize("metric", ["accuracy", "information"])
def test_assign_round_picks_exactly_what_the_reference_picks(case, metric):
    seed, n_items, n_workers, k, model, per_item = case
    state = random_state(seed, n_items, n_workers, k, model, per_item)
    assert len(state.need_more) >= 30  # enough open items to rank
    for per_worker, passes in ((1, 1), (3, 2), (7, 3)):
        arrivals = arrivals_of(state, seed, passes)
        for cands in (None, candidates_of(state, seed, 0.3), candidates_of(state, seed, 0.9)):
            got = assign_round(state, arrivals, per_worker=per_worker, candidates=cands, metric=metric)
            want = reference_assign_round(state, arrivals, per_worker=per_worker, candidates=cands, metric=metric)
            assert len(want) > 0
            pd.testing.assert_frame_equal(got, want, check_exact=True)
            # the chunked gains are the same gains
            small = assign_round(state, arrivals, per_worker=per_worker, candidates=cands, metric=metric, chunk=7)
            pd.testing.assert_frame_equal(small, want, check_exact=True)


def test_the_first_runs_round_two_ranks_k_distinct_posteriors():
    # one answer per item from unmeasured workers: every item's posterior is one of K (the prior's matrix, its
    # label), so each worker ranks K classes; the picks are the reference's
    state = random_state(1, 200, 25, 4, "ds", (1, 1))
    assert len(np.unique(state.posterior.to_numpy(), axis=0)) == 4
    arrivals = arrivals_of(state, 1, 4)
    pd.testing.assert_frame_equal(assign_round(state, arrivals, per_worker=5),
                                  reference_assign_round(state, arrivals, per_worker=5), check_exact=True)


def test_a_candidate_pair_listed_twice_counts_once():
    # by hand: items 1 and 2 need more; only worker a may answer them, its pair on item 1 listed twice. The reference
    # (the old implementation) gave item 1 to a twice; now a gets 1 and 2 once each
    model = WorkerModel.one_coin({"a": 0.8, "b": 0.9}, ["x", "y"])
    state = stopping_rule(pd.DataFrame({"object": [1, 2], "worker": ["b", "b"], "label": ["x", "y"]}),
                          target=0.999, model=model)
    cands = pd.DataFrame({"object": [1, 1, 2], "worker": ["a", "a", "a"]})
    got = assign_round(state, ["a"], per_worker=3, candidates=cands)
    assert sorted(got["object"]) == [1, 2] and set(got["worker"]) == {"a"}
    with pytest.raises(UnknownColumnError, match="candidates need columns 'object' and 'worker'"):
        assign_round(state, ["a"], candidates=pd.DataFrame({"item": [1], "worker": ["a"]}))
