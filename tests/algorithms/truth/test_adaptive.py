"""The stopping rule, quality-aware assignment and the prediction of crowddb.truth.adaptive (issue 28): posteriors
against hand-computed Bayes' rule, the chooser never repeating a worker on an item, seeds, and refusals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import ndtri

from crowddb.errors import ArgumentError, CrowdDBError, UnknownColumnError
from crowddb.truth.adaptive import (
    WorkerModel,
    assign_round,
    choose_items,
    expected_gain,
    fit_workers,
    item_posteriors,
    predict_assignments,
    result_rule,
    stopping_rule,
)


def mean_rule(*args, **kwargs):
    """result_rule with the expected accuracy alone (bound_level=None): the rule the hand computations below pin; the
    lower bound's are in test_result_rule_holds_the_lower_bound_by_hand and after."""
    return result_rule(*args, bound_level=None, **kwargs)


def frame(rows):
    if isinstance(rows, dict):
        return pd.DataFrame(rows)
    return pd.DataFrame(rows, columns=["object", "worker", "label"])


# one-coin workers a 0.8, b 0.6, c 0.9 over {x, y}, uniform class prior
ONE_COIN = WorkerModel.one_coin({"a": 0.8, "b": 0.6, "c": 0.9}, ["x", "y"])
ANSWERS = frame([(1, "a", "x"), (1, "b", "x"),                  # x: .8 * .6 = .48, y: .2 * .4 = .08 -> x 6/7
                 (2, "a", "x"), (2, "b", "y"), (2, "c", "y"),   # x: .8 * .4 * .1 = .032, y: .2 * .6 * .9 = .108
                 (3, "c", "y"),                                 # y: .9
                 (4, "b", "y")])                                # y: .6


def test_one_coin_posterior_is_bayes_rule_by_hand():
    post = item_posteriors(ANSWERS, ONE_COIN)
    assert post.loc[1, "x"] == pytest.approx(0.48 / 0.56, abs=1e-12)
    assert post.loc[2, "y"] == pytest.approx(0.108 / 0.140, abs=1e-12)
    assert post.loc[3, "y"] == pytest.approx(0.9, abs=1e-12)
    assert post.loc[4, "y"] == pytest.approx(0.6, abs=1e-12)
    assert np.allclose(post.sum(axis=1), 1.0)


@pytest.mark.parametrize("each_item", [True, False])
def test_stopping_rule_statuses_at_the_target(each_item):
    state = stopping_rule(ANSWERS, target=0.85, max_assignments=3, model=ONE_COIN, each_item=each_item)
    # 6/7 = .857 and .9 reach .85; item 2 (.771) has its 3 answers: uncertain; item 4 (.6) needs another
    if each_item:
        assert state.status.to_dict() == {1: "done", 2: "uncertain", 3: "done", 4: "more"}
        assert list(state.need_more) == [4] and list(state.done) == [1, 3]
        assert state.summary() == {"done": 2, "more": 1, "uncertain": 1, "gold": 0, "accepted": 0, "answers": 7}
    else:
        # the result's rule: sum (p - .85) = .00714 - .07857 + .05 - .25 = -.27143, and -.02143 with item 4 counted
        # at .85: the capped item 2 leaves the result short, so an item at the target is asked too. The crowd's
        # average worker is right (.8 + .6 + .9) / 3 = 23/30 of the time. Item 1 (2 answers) would reach its cap
        # with a third: QASCA's benefit, (6/7 * 23/30 + 6/7 * 7/30) - 6/7 = 0 (no answer flips it): never bought.
        # Item 3 (one answer, .9 on y) keeps room, so the floor .85 counts: answer y .9 * 23/30 = .69; answer x
        # max(.1 * 23/30, .9 * 7/30) = .21 against .85 * P(x) = .85 * (.07667 + .21) = .24367; gain .69 + .24367 -
        # .9 = .03367, and -.02143 + .03367 >= 0: item 3 is asked again, at .9
        assert state.status.to_dict() == {1: "done", 2: "uncertain", 3: "more", 4: "more"}
        assert list(state.need_more) == [3, 4] and list(state.done) == [1]
        assert state.summary() == {"done": 1, "more": 2, "uncertain": 1, "gold": 0, "accepted": 0, "answers": 7}
    assert list(state.uncertain) == [2]
    assert state.truth.to_dict() == {1: "x", 2: "y", 3: "y", 4: "y"}
    assert state.confidence[2] == pytest.approx(27 / 35, abs=1e-12)
    assert state.expected_accuracy == pytest.approx((6 / 7 + 27 / 35 + 0.9 + 0.6) / 4, abs=1e-12)
    # min_assignments keeps a confident single answer asking
    assert stopping_rule(ANSWERS, target=0.85, max_assignments=3, min_assignments=2, model=ONE_COIN,
                         each_item=each_item).status[3] == "more"


def test_result_rule_buys_the_lowest_posteriors_until_the_mean_can_meet_the_target():
    lead = np.array([0.99, 0.99, 0.99, 0.8, 0.6])
    open_ = lead < 0.9
    # sum (p - .9) = .27 - .1 - .3 = -.13; item 4 (.6) counted at .9 makes it +.17: it alone is asked again
    assert mean_rule(lead, open_, np.ones(5, bool), 0.9).tolist() == [False, False, False, False, True]
    # the mean already meets .75: nobody is asked
    assert not mean_rule(lead, open_, np.ones(5, bool), 0.75).any()
    # .99 items left out of the count (gold, say): -.1 - .3, and -.1 + 0 with both at the target: both are asked
    assert mean_rule(lead, open_, open_, 0.9).tolist() == [False, False, False, True, True]
    # ties between equal posteriors: the item listed first
    tied = np.array([0.7, 0.7, 0.99, 0.99, 0.99, 0.99])
    # sum (p - .9) = -.4 + .36 = -.04; one .7 at .9 gives +.16: the first .7 only
    assert mean_rule(tied, tied < 0.9, np.ones(6, bool), 0.9).tolist() == [True, False, False, False, False, False]


def test_the_result_rule_accepts_items_below_the_target():
    # items 1 (6/7) and 3 (.9) reach .78, item 4 (.6) does not; the mean (6/7 + .9 + .6) / 3 = .7857 meets .78, so
    # item 4 is accepted as it is; at .8 the mean (.7857) falls short and item 4 is asked; each_item=True asks it
    answers = ANSWERS[ANSWERS["object"] != 2]
    state = stopping_rule(answers, target=0.78, max_assignments=3, model=ONE_COIN, bound_level=None)
    assert state.status.to_dict() == {1: "done", 3: "done", 4: "accepted"}
    assert state.summary()["accepted"] == 1 and len(state.need_more) == 0
    assert state.expected_accuracy == pytest.approx((6 / 7 + 0.9 + 0.6) / 3, abs=1e-12)
    assert stopping_rule(answers, target=0.8, max_assignments=3, model=ONE_COIN, bound_level=None).status[4] == "more"
    assert stopping_rule(answers, target=0.78, max_assignments=3, model=ONE_COIN, each_item=True).status[4] == "more"
    # min_assignments=2: items 3 and 4 have one answer each, so both are asked, though the mean meets .78
    assert stopping_rule(answers, target=0.78, max_assignments=3, model=ONE_COIN, min_assignments=2,
                         bound_level=None).status.to_dict() == {1: "done", 3: "more", 4: "more"}


def test_result_rule_asks_the_items_it_must_and_counts_them_at_the_target():
    lead = np.array([0.99, 0.99, 0.99, 0.8, 0.6])
    # item 3 (.8) must be asked: -.13 + .1 = -.03, so the lowest other open item (.6) is asked too
    assert mean_rule(lead, lead < 0.9, np.ones(5, bool), 0.9, must=np.array([0, 0, 0, 1, 0], bool)).tolist() == [
        False, False, False, True, True]
    # at .75 the mean is met: only the item that must is asked; a must that is not open is not
    assert mean_rule(lead, lead < 0.9, np.ones(5, bool), 0.75, must=np.array([1, 0, 0, 1, 0], bool)).tolist() == [
        False, False, False, True, False]


def test_result_rule_makes_up_for_capped_items_with_items_at_the_target():
    # item 4 is capped at .5 (neither open nor spare), item 5 open at .8, items 0-3 at the target .95 below their cap
    lead = np.array([0.99, 0.97, 0.96, 0.96, 0.5, 0.8])
    open_ = np.array([0, 0, 0, 0, 0, 1], bool)
    spare = np.array([1, 1, 1, 1, 0, 0], bool)
    every = np.ones(6, bool)
    # sum (p - .95) = .04 + .02 + .01 + .01 - .45 - .15 = -.52; item 5 counted at .95: -.37, short: then the spare
    # items by gain, largest first, each counted at lead + gain (item 4's gain is never read: it is capped)
    gain = np.array([0.0, 0.1, 0.4, 0.4, 0.9, 0.0])
    # -.37 + .4 = .03: item 2 alone; item 3 ties it and is listed later; item 0 (gain 0) is never bought
    assert mean_rule(lead, open_, every, 0.95, spare=spare, gain=gain).tolist() == [
        False, False, True, False, False, True]
    # gains .2, .2, .1: -.37 + .2 + .2 = .03, items 2 and 3
    assert mean_rule(lead, open_, every, 0.95, spare=spare, gain=np.array([0, 0.1, 0.2, 0.2, 0, 0])).tolist() == [
        False, False, True, True, False, True]
    # gains .1 each: -.37 + .3 < 0, out of reach: no item at the target is bought, the open item is
    assert mean_rule(lead, open_, every, 0.95, spare=spare, gain=np.array([0, 0.1, 0.1, 0.1, 0, 0])).tolist() == [
        False, False, False, False, False, True]
    # gains rounded to 1e-12 before ranking: 1e-14 apart is a tie, the item listed first wins
    near = np.array([0, 0, 0.4, 0.4 + 1e-14, 0, 0])
    assert mean_rule(lead, open_, every, 0.95, spare=spare, gain=near).tolist() == [
        False, False, True, False, False, True]
    # a gain that rounds to 0 at 1e-9 buys nothing
    assert not mean_rule(lead, open_, every, 0.95, spare=spare, gain=np.array([4e-10, 0, 0, 0, 0, 0]))[:4].any()
    # an item not counted (gold) is never bought; the function is called with the spare items' positions only
    seen = []

    def by_position(idx):
        seen.append(idx.tolist())
        return np.full(len(idx), 0.4)

    # item 2 is gold: sum (p - .95) over the others -.53, -.38 with item 5 at .95; gains .4 each: item 0 alone
    counted = np.array([1, 1, 0, 1, 1, 1], bool)
    assert mean_rule(lead, open_, counted, 0.95, spare=spare, gain=by_position).tolist() == [
        True, False, False, False, False, True]
    assert seen == [[0, 1, 3]]
    # the open items close the gap: no spare item is looked at
    assert mean_rule(lead, open_, every, 0.8, spare=spare, gain=by_position).tolist() == [False] * 6
    # (.95, .88 capped, .85 open) at .9: .05 - .02 - .05 = -.02, +.03 with item 2 at .9: item 2 alone
    assert mean_rule(np.array([0.95, 0.88, 0.85]), np.array([0, 0, 1], bool), np.ones(3, bool), 0.9,
                       spare=np.array([1, 0, 0], bool), gain=by_position).tolist() == [False, False, True]
    assert seen == [[0, 1, 3]]
    # without spare= the rule is the one before: every open item, nothing else
    assert mean_rule(lead, open_, every, 0.95).tolist() == open_.tolist()


def test_result_rule_rounds_the_sums_before_comparing():
    # capped item 0 at .1, target .9: sum (p - .9) = -.8; items 1-3 at .9 with gains .7, .1 and .05. In floats
    # -.8 + (.7 + .1) is -1.1e-16, short by the last bit: without rounding item 3 would be bought too
    assert -0.8 + np.cumsum([0.7, 0.1])[-1] < 0
    lead = np.array([0.1, 0.9, 0.9, 0.9])
    got = mean_rule(lead, np.zeros(4, bool), np.ones(4, bool), 0.9, spare=np.array([0, 1, 1, 1], bool),
                      gain=np.array([0.0, 0.7, 0.1, 0.05]))
    assert got.tolist() == [False, True, True, False]


def test_expected_gain_with_the_target_as_floor_by_hand():
    # item 3 of test_stopping_rule_statuses_at_the_target: (.1, .9), the crowd's average worker right 23/30
    cm = np.array([[23 / 30, 7 / 30], [7 / 30, 23 / 30]])
    p = np.array([[0.1, 0.9], [6 / 7, 1 / 7]])
    # QASCA: answer y .69, answer x max(.07667, .21) = .21: .9 - .9 = 0; no answer flips either item
    assert expected_gain(p, cm)[0] == pytest.approx([0.0, 0.0], abs=1e-12)
    # floor .85: answer x counts .85 * (.07667 + .21) = .24367 (> .21): .69 + .24367 - .9; item 1 (6/7): answer y
    # max(.2, .10952) = .2 against .85 * .30952 = .2631: 6/7 * 23/30 + .2631 - 6/7
    want = [0.69 + 0.85 * (0.1 * 23 / 30 + 0.9 * 7 / 30) - 0.9,
            0.85 * (6 / 7 * 7 / 30 + 1 / 7 * 23 / 30) - 6 / 7 * 7 / 30]
    assert expected_gain(p, cm, floor=0.85)[0] == pytest.approx(want, abs=1e-12)
    # one floor per row; the information gain does not depend on the floor
    both = expected_gain(p, cm, floor=np.array([0.85, 0.0]))
    assert both[0] == pytest.approx([want[0], 0.0], abs=1e-12)
    assert both[1] == pytest.approx(expected_gain(p, cm)[1], abs=1e-15)
    for bad in (1.0, -0.1, np.array([0.5, 0.5, 0.5]), True, "high"):
        with pytest.raises(ArgumentError, match="floor must be"):
            expected_gain(p, cm, floor=bad)


def test_full_confusion_with_class_prior_by_hand():
    model = WorkerModel.from_confusion(
        {"u": [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]],
         "v": [[0.9, 0.05, 0.05], [0.3, 0.6, 0.1], [0.1, 0.1, 0.8]]},
        ["r", "g", "b"], class_prior=[0.5, 0.3, 0.2])
    post = item_posteriors(frame([("i", "u", "g"), ("i", "v", "r")]), model)
    # r: .5 * .2 * .9 = .09; g: .3 * .8 * .3 = .072; b: .2 * .2 * .1 = .004; sum .166
    assert post.loc["i"].to_numpy() == pytest.approx([0.09 / 0.166, 0.072 / 0.166, 0.004 / 0.166], abs=1e-12)


def test_an_unknown_worker_answers_with_the_prior_and_gold_is_known():
    state = stopping_rule(frame([(1, "z", "x"), (2, "a", "y")]), model=ONE_COIN, gold={2: "x"}, items=[1, 2, 3])
    assert state.posterior.loc[1, "x"] == pytest.approx(0.8, abs=1e-12)  # Beta(8, 2): mean accuracy .8
    assert state.posterior.loc[2].tolist() == [1.0, 0.0] and state.status[2] == "gold"
    assert state.posterior.loc[3].tolist() == [0.5, 0.5] and state.status[3] == "more" and state.n_answers[3] == 0


def test_single_answers_leave_the_workers_at_the_prior():
    # EM started from the majority vote would call these workers perfect and stop every item after one answer
    answers = frame([(i, f"w{i % 3}", "x" if i % 2 else "y") for i in range(30)])
    for model in ("ds", "one_coin"):
        state = stopping_rule(answers, model=model, target=0.95)
        assert np.allclose(state.confidence, 0.8) and (state.status == "more").all()
        # nor does an item stop on the prior alone, though 0.8 meets a target of 0.8: nobody was measured yet
        for each_item in (True, False):
            low = stopping_rule(answers, model=model, target=0.8, each_item=each_item)
            assert (low.status == "more").all()
    # once some item has two answers the workers are measured and the rule applies (a given model: at once)
    assert (stopping_rule(answers, model=WorkerModel.one_coin({"w0": 0.8, "w1": 0.8, "w2": 0.8}, ["x", "y"]),
                          target=0.8).status == "done").all()


def test_fitted_models_find_the_good_worker_and_use_gold():
    rng = np.random.default_rng(5)
    truth = rng.integers(0, 2, 300)
    rows = []
    # five workers: with two informative ones only, a disagreement cannot say who is right
    for w, q in (("good", 0.95), ("mid", 0.75), ("mid2", 0.75), ("mid3", 0.7), ("bad", 0.55)):
        said = np.where(rng.random(300) < q, truth, 1 - truth)
        rows += [(i, w, int(s)) for i, s in enumerate(said)]
    answers = frame(rows)
    for model in ("ds", "one_coin"):
        acc = fit_workers(answers, model=model).accuracy
        assert acc["good"] > acc["mid"] > acc["bad"]
    gold = pd.Series(truth[:50], index=range(50))
    state = stopping_rule(answers, model="ds", gold=gold)
    assert (state.status.loc[:49] == "gold").all() and (state.truth.loc[:49].to_numpy() == truth[:50]).all()


def test_expected_gain_by_hand():
    p = np.array([[0.5, 0.5], [0.9, 0.1]])
    cm = np.array([[0.8, 0.2], [0.2, 0.8]])
    acc, info = expected_gain(p, cm)
    # QASCA: sum_l max_k p_k pi[k, l] - max_k p_k = (.4 + .4) - .5; at (.9, .1) one answer cannot flip: 0
    assert acc == pytest.approx([0.3, 0.0], abs=1e-12)
    assert info[0] == pytest.approx(np.log(2) + 0.8 * np.log(0.8) + 0.2 * np.log(0.2), abs=1e-12)
    assert 0 < info[1] < info[0]


def test_the_chooser_never_gives_a_worker_an_item_it_answered():
    state = stopping_rule(ANSWERS, target=0.99, max_assignments=9, model=ONE_COIN)
    assert set(state.need_more) == {1, 2, 3, 4}
    assert set(choose_items(state, "c", n=10)["object"]) == {1, 4}      # c answered 2 and 3
    assert set(choose_items(state, "a", n=10)["object"]) == {3, 4}
    assert list(choose_items(state, "a", n=1, exclude=[4])["object"]) == [3]
    assert list(choose_items(state, "b", n=3)["object"]) == [3]           # b answered 1, 2 and 4
    assert choose_items(state, "b", n=3, exclude=[3]).empty
    picked = assign_round(state, ["a", "b", "c", "a", "c"], per_worker=1)
    assert not picked["object"].duplicated().any()
    on_record = set(map(tuple, state.answered[["object", "worker"]].to_numpy()))
    assert not on_record & set(map(tuple, picked[["object", "worker"]].to_numpy()))
    assert sorted(picked["object"]) == [1, 3, 4]  # a, b and c all answered item 2: nobody may take it


def test_assign_round_never_repeats_a_worker_on_random_input():
    rng = np.random.default_rng(2)
    workers = [f"w{i}" for i in range(8)]
    rows = {(int(i), workers[w]): ("x" if rng.random() < 0.7 else "y")
            for i, w in zip(rng.integers(0, 40, 150), rng.integers(0, 8, 150))}
    answers = frame([(i, w, lab) for (i, w), lab in rows.items()])
    state = stopping_rule(answers, target=0.999, max_assignments=20, model="one_coin", items=range(45))
    for metric in ("accuracy", "information"):
        picked = assign_round(state, list(rng.permutation(workers)) * 3, per_worker=2, metric=metric)
        assert not picked["object"].duplicated().any()
        assert not set(rows) & set(zip(picked["object"], picked["worker"]))
        assert picked.groupby("worker").size().max() <= 6


def test_assign_round_gives_the_uncertain_item_to_the_better_worker():
    model = WorkerModel.one_coin({"good": 0.95, "poor": 0.6, "a": 0.8}, ["x", "y"])
    answers = frame([(1, "a", "x"), (2, "a", "x"), (2, "good", "x")])  # 1 at .8, 2 near-certain
    state = stopping_rule(answers, target=0.999, model=model)
    first = assign_round(state, ["good", "poor"], per_worker=1)
    assert first.set_index("object")["worker"].to_dict() == {1: "good", 2: "poor"}
    only = assign_round(state, ["poor"], per_worker=2, candidates=pd.DataFrame({"object": [2], "worker": ["poor"]}))
    assert only["object"].tolist() == [2]


def test_prediction_is_seeded_and_its_range_holds_the_simulated_total():
    a = predict_assignments(400, 4, target=0.95, max_assignments=9, seed=3)
    assert a == predict_assignments(400, 4, target=0.95, max_assignments=9, seed=3)
    assert a.low <= a.expected <= a.high and 400 <= a.low and a.high <= 3600
    assert "prior Beta(8, 2)" in a.basis
    assert predict_assignments(10, 2, qualities=[1.0]).per_item == 1.0  # a perfect worker settles an item at once
    # the stopping rule run with the true one-coin model on a crowd of those accuracies lands inside the range
    rng = np.random.default_rng(11)
    q = rng.beta(8, 2, 50)
    workers = [f"w{i}" for i in range(50)]
    model = WorkerModel.one_coin(dict(zip(workers, q)), ["c0", "c1", "c2", "c3"])
    pred = predict_assignments(400, 4, target=0.95, max_assignments=9, qualities=q, seed=1)
    order = np.argsort(rng.random((400, 50)), axis=1)
    said = np.where(rng.random((400, 50)) < q[order], 0, rng.integers(1, 4, (400, 50)))
    n = np.zeros(400, int)
    for _ in range(9):
        item, slot = np.nonzero(np.arange(9)[None, :] < n[:, None])
        got = frame({"object": item, "worker": np.asarray(workers)[order[item, slot]],
                     "label": np.char.add("c", said[item, slot].astype(str))})
        need = np.arange(400) if not n.any() else stopping_rule(got, model=model, items=range(400)).need_more
        if len(need) == 0:
            break
        n[np.asarray(need)] += 1
    assert pred.low <= n.sum() <= pred.high


@pytest.mark.parametrize("cap, k, quality", [(4, 3, (8, 2)), (5, 4, (6, 2))])
def test_the_prediction_simulates_items_at_the_target_asked_again(cap, k, quality):
    """At a cap that binds, the rule run with the true one-coin model asks items at the target again (result_rule's
    spare items) and the prediction, which simulates the same rule read again after every round, holds its total
    (measured: 1,167 answers in [705, 1,299] and 1,342 in [829, 1,493]; the simulation that stopped every item the
    rule once accepted or found at the target predicted [698, 1,153] and [815, 1,304], both short of the run)."""
    rng = np.random.default_rng(11)
    q = rng.beta(*quality, 50)
    workers = [f"w{i}" for i in range(50)]
    classes = [f"c{i}" for i in range(k)]
    model = WorkerModel.one_coin(dict(zip(workers, q)), classes)
    pred = predict_assignments(400, k, target=0.95, max_assignments=cap, qualities=q, seed=1)
    order = np.argsort(rng.random((400, 50)), axis=1)
    said = np.where(rng.random((400, 50)) < q[order], 0, rng.integers(1, k, (400, 50)))
    n = np.zeros(400, int)
    again = 0
    for _ in range(400 * cap):  # each round gives every item asked one answer: it ends
        item, slot = np.nonzero(np.arange(cap)[None, :] < n[:, None])
        got = frame({"object": item, "worker": np.asarray(workers)[order[item, slot]],
                     "label": np.char.add("c", said[item, slot].astype(str))})
        if n.any():
            state = stopping_rule(got, model=model, items=range(400), target=0.95, max_assignments=cap,
                                  classes=classes)
            need = state.need_more
            again += int(((state.status == "more") & (state.confidence >= 0.95)).sum())
        else:
            need = np.arange(400)
        if len(need) == 0:
            break
        n[np.asarray(need)] += 1
    assert again > 0 and n.max() <= cap
    assert pred.low <= n.sum() <= pred.high


@pytest.mark.parametrize("call, match", [
    (lambda: stopping_rule(ANSWERS, target=1.0, model=ONE_COIN), "strictly between 0 and 1"),
    (lambda: stopping_rule(ANSWERS, max_assignments=0, model=ONE_COIN), "positive integer"),
    (lambda: stopping_rule(ANSWERS, min_assignments=5, max_assignments=3, model=ONE_COIN), "exceeds"),
    (lambda: stopping_rule(ANSWERS, model="glad"), "'auto', 'ds'"),
    (lambda: stopping_rule(frame([(1, "a", "x")])), "pass classes="),
    (lambda: stopping_rule(ANSWERS, classes=["x"]), "at least two"),
    (lambda: stopping_rule(ANSWERS, classes=["x", "z"]), "outside classes"),
    (lambda: stopping_rule(ANSWERS, gold={1: "q"}), "outside classes"),
    (lambda: stopping_rule(ANSWERS, items=[1, 2]), "not in items="),
    (lambda: stopping_rule(ANSWERS, prior=(0, 2)), "positive"),
    (lambda: stopping_rule(ANSWERS.rename(columns={"label": "answer"})), "label column 'label'"),
    (lambda: stopping_rule([1, 2]), "must be a DataFrame"),
    (lambda: WorkerModel.from_confusion({"u": [[0.5, 0.6], [0.5, 0.5]]}, ["x", "y"]), "summing to 1"),
    (lambda: WorkerModel.one_coin({"u": 1.5}, ["x", "y"]), "probability in"),
    (lambda: predict_assignments(10, 1), "at least 2"),
    (lambda: predict_assignments(10, 2, qualities=[]), "non-empty"),
    (lambda: expected_gain(np.ones((2, 2)) / 2, np.eye(3)), "K x K"),
])
def test_bad_input_raises_crowddb_errors_naming_the_fix(call, match):
    with pytest.raises(CrowdDBError, match=match) as err:
        call()
    assert isinstance(err.value, (ArgumentError, UnknownColumnError))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.05, 1.0), st.booleans(), st.booleans()), min_size=1, max_size=40),
       st.floats(0.5, 0.99))
def test_result_rule_asks_the_fewest_lowest_posteriors_that_can_meet_the_target(items, target):
    """Independently of its code: the items asked are open, the lowest posteriors among the open ones, and as few as
    make sum (p - target) >= 0 once each of them counts at the target (all open ones when even that falls short;
    none when the sum is met already)."""
    lead = np.array([p for p, _, _ in items])
    open_ = np.array([o for _, o, _ in items])
    counted = np.array([c for _, _, c in items]) | open_  # an open item always counts (it is not gold)
    asked = mean_rule(lead, open_, counted, target)
    assert not (asked & ~open_).any()

    def slack(chosen):
        return round(float(np.sum(np.where(chosen, target, lead)[counted] - target)), 9)

    if slack(np.zeros(len(lead), bool)) >= 0:
        assert not asked.any()
        return
    if asked.any() and (open_ & ~asked).any():  # the asked ones are the lowest: none left open below them
        assert lead[open_ & ~asked].min() >= lead[asked].max()
    if slack(asked) < 0:
        assert (asked == open_).all()
    else:  # the fewest: without its highest asked item the sum falls short
        cand = np.flatnonzero(asked)  # the last one asked: the highest posterior (ties: the item listed last)
        fewer = asked.copy()
        fewer[cand[np.lexsort((cand, lead[cand]))[-1]]] = False
        assert slack(fewer) < 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.05, 1.0), st.sampled_from(["open", "spare", "capped", "gold"]),
                          st.sampled_from([0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5])), min_size=1, max_size=30),
       st.floats(0.5, 0.99))
def test_result_rule_buys_items_at_the_target_only_to_close_a_gap_the_open_items_cannot(items, target):
    """Independently of its code: items at the target (spare) are bought only when every open item is asked and the
    result is still short with them counted at the target; those bought have the largest gains (ties: listed first)
    and no zero gain, make the mean reach the target counted at lead + gain, and are the fewest that do; none are
    bought when even all of them cannot."""
    kind = [k for _, k, _ in items]
    lead = np.array([p if k not in ("spare", "gold") else max(p, target) for (p, k, _) in items])
    lead = np.where(np.array(kind) == "open", np.minimum(lead, target - 1e-3), lead)
    open_ = np.array([k == "open" for k in kind])
    spare = np.array([k == "spare" for k in kind])
    counted = np.array([k != "gold" for k in kind])
    gain = np.array([g for _, _, g in items])
    asked = mean_rule(lead, open_, counted, target, spare=spare, gain=gain)
    bought = asked & spare

    def slack(value):
        return round(float(np.sum(value[counted] - target)), 9)

    assert not (asked & ~(open_ | spare)).any()
    all_open = np.where(open_, target, lead)
    if not bought.any():
        if (asked == open_).all() and slack(all_open) < 0:  # short with every open item: out of reach or no gain
            assert slack(np.where(spare & (gain > 0), lead + gain, all_open)) < 0 or not (spare & (gain > 0)).any()
        return
    assert (asked[open_]).all() and slack(all_open) < 0
    assert (gain[bought] > 0).all()
    assert slack(np.where(bought, lead + gain, all_open)) >= 0
    # the last one bought: the smallest gain, ties the item listed last
    last = max(np.flatnonzero(bought), key=lambda i: (-gain[i], i))
    for j in np.flatnonzero(spare & ~bought & (gain > 0)):  # the largest gains, ties to the item listed first
        assert gain[j] < gain[last] or (gain[j] == gain[last] and j > last)
    fewer = bought.copy()  # the fewest: without the last one bought the mean falls short
    fewer[last] = False
    assert slack(np.where(fewer, lead + gain, all_open)) < 0


def test_result_rule_holds_the_lower_bound_by_hand():
    """16 items at .99, 4 open at .6, .7, .8, .85; target .9, tolerance .02, bound_level .95 (z = 1.644854).
    The mean (15.84 + 2.95) / 20 = .9395 meets .9: the mean alone asks nobody. The bound (result_rule's Eq.:
    (mu - z sqrt(V) + (z^2 - 1) k3 / (6 V)) / N, V = sum p (1 - p), k3 = sum p (1 - p) (1 - 2 p)):
    as they are, mu 18.79, V .8959, k3 -.472482: (18.79 - 1.556906 - .149947) / 20 = .854157 < .88;
    .6 counted at .9: mu 19.09, V .7459, k3 -.496482: (19.09 - 1.420605 - .189230) / 20 = .874008 < .88;
    .7 too: mu 19.29, V .6259, k3 -.484482: (19.29 - 1.301311 - .220056) / 20 = .888432 >= .88: two items asked.
    The normal alone (no skewness term) would stop at one: (19.09 - 1.420605) / 20 = .883470."""
    lead = np.array([0.99] * 16 + [0.6, 0.7, 0.8, 0.85])
    open_, every = lead < 0.9, np.ones(20, bool)
    assert not result_rule(lead, open_, every, 0.9, bound_level=None).any()
    asked = result_rule(lead, open_, every, 0.9, bound_level=0.95, tolerance=0.02)
    assert np.flatnonzero(asked).tolist() == [16, 17]
    # a looser tolerance: the bound as they are, .854157 >= .85, asks nobody; .87 asks one (.874008)
    assert not result_rule(lead, open_, every, 0.9, bound_level=0.95, tolerance=0.05).any()
    assert np.flatnonzero(result_rule(lead, open_, every, 0.9, bound_level=0.95, tolerance=0.03)).tolist() == [16]
    # at 0.99 (z = 2.326348) every open item counted at .9 leaves the bound short, so items at the target (spare;
    # gains .009 each, counted at .999) are bought, the fewest that meet it, here 11 at tolerance .03 (>= .87, the
    # sums as above item by item: .869782 with 10, .871142 with 11); at tolerance .01 even all 16 leave it at
    # .878155 < .89, and the mean is met without them: none is bought (the rule is read again after the round)
    z = 2.326348
    spare = lead >= 0.9
    gain = np.where(spare, 0.009, 0.0)

    def bound(q):  # the refined normal quantile, computed here from its formula
        v = q * (1 - q)
        return (q.sum() - z * np.sqrt(v.sum()) + (z * z - 1) * (v * (1 - 2 * q)).sum() / (6 * v.sum())) / len(q)

    q = np.where(open_, 0.9, lead)
    need = next(j for j in range(17) if bound(np.where(np.arange(20) < j, 0.999, q)) >= 0.87)
    assert need == 11
    got = result_rule(lead, open_, every, 0.9, spare=spare, gain=gain, tolerance=0.03)
    assert np.flatnonzero(got).tolist() == list(range(11)) + [16, 17, 18, 19]
    assert bound(np.where(spare, 0.999, q)) < 0.89
    assert np.flatnonzero(result_rule(lead, open_, every, 0.9, spare=spare, gain=gain)).tolist() == [16, 17, 18, 19]


def test_the_bound_of_a_state_by_hand_and_against_the_exact_tail():
    """StopState.accuracy_bound of ANSWERS (posteriors 6/7, 27/35, .9, .6) at .9: computed here from the formula;
    and on seeded posteriors of 300, 1,000 and 2,000 items the exact Poisson-binomial probability (by convolution)
    that the share of right answers falls below the 0.99 bound is at most 0.0115 (about the 0.01 the level
    promises: the count is an integer), where the normal alone gives 0.0113-0.0167 (measured)."""
    state = stopping_rule(ANSWERS, target=0.85, max_assignments=3, model=ONE_COIN, bound_level=0.9)
    p = np.array([6 / 7, 27 / 35, 0.9, 0.6])
    z, v = 1.2815516, p * (1 - p)
    hand = (p.sum() - z * np.sqrt(v.sum()) + (z * z - 1) * (v * (1 - 2 * p)).sum() / (6 * v.sum())) / 4
    assert state.accuracy_bound == pytest.approx(hand, abs=1e-7)
    assert stopping_rule(ANSWERS, target=0.85, max_assignments=3, model=ONE_COIN, bound_level=None
                         ).accuracy_bound == pytest.approx(state.expected_accuracy, abs=1e-12)
    rng = np.random.default_rng(0)
    for n in (300, 1000, 2000):
        lead = np.where(rng.random(n) < 0.7, rng.uniform(0.97, 1.0, n), rng.uniform(0.8, 0.97, n))
        post = pd.DataFrame({"x": lead, "y": 1 - lead})
        st_ = type(state)(post, pd.Series(2, index=post.index), pd.Series("done", index=post.index), ONE_COIN,
                          state.answered.iloc[:0], 0.95, 9)
        dist = np.zeros(n + 1)
        dist[0] = 1.0
        for x in lead:  # the Poisson-binomial by convolution, one item at a time
            dist[1:] = dist[1:] * (1 - x) + dist[:-1] * x
            dist[0] *= 1 - x
        below = dist[: int(np.ceil(st_.accuracy_bound * n))].sum()  # P(right answers < n * bound)
        assert below <= 0.0115, (n, below)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.05, 1.0), st.booleans()), min_size=1, max_size=60),
       st.floats(0.5, 0.99), st.sampled_from([0.0, 0.01, 0.05]), st.sampled_from([0.9, 0.99]))
def test_result_rule_asks_the_fewest_lowest_posteriors_that_meet_the_mean_and_the_bound(items, target, tol, level):
    """Independently of its code: without spare items, the items asked are the fewest lowest open posteriors that
    make both the mean (sum (q - target) >= 0) and the refined normal bound (>= target - tol, recomputed here) hold
    with each asked item counted at the target; all open ones when even that falls short."""
    lead = np.array([p for p, _ in items])
    open_ = np.array([o for _, o in items]) & (lead < target)
    every = np.ones(len(lead), bool)
    asked = result_rule(lead, open_, every, target, bound_level=level, tolerance=tol)
    assert not (asked & ~open_).any()
    z = float(ndtri(level))

    def holds(chosen):
        q = np.where(chosen, target, lead)
        v = q * (1 - q)
        skew = (z * z - 1) * float((v * (1 - 2 * q)).sum()) / (6 * v.sum()) if v.sum() > 0 else 0.0
        return (round(float(np.sum(q - target)), 9) >= 0
                and round(float(q.sum() - len(q) * (target - tol) - z * np.sqrt(v.sum()) + skew), 9) >= 0)

    order = sorted(np.flatnonzero(open_), key=lambda i: (lead[i], i))
    prefix = next((j for j in range(len(order) + 1) if holds(np.isin(np.arange(len(lead)), order[:j]))), None)
    expect = np.isin(np.arange(len(lead)), order if prefix is None else order[:prefix])
    assert asked.tolist() == expect.tolist()


def test_the_prediction_simulates_the_bound_of_its_result():
    """explain()'s simulation reads the bound of ``n_items`` items: a small result needs more answers per item than a
    large one under the bound, the same under the mean alone (its simulated items, and so its answers per item, do
    not depend on n_items then)."""
    kw = {"target": 0.95, "max_assignments": 9, "qualities": np.full(20, 0.8), "seed": 2, "n_sim": 4000}
    assert (predict_assignments(100, 14, bound_level=None, **kw).per_item
            == predict_assignments(5000, 14, bound_level=None, **kw).per_item)
    small, large = predict_assignments(100, 14, **kw), predict_assignments(5000, 14, **kw)
    assert small.per_item > large.per_item >= predict_assignments(5000, 14, bound_level=None, **kw).per_item
    assert small.accuracy > large.accuracy
