"""The stopping rule, quality-aware assignment and the prediction of crowddb.truth.adaptive (issue 28): posteriors
against hand-computed Bayes' rule, the chooser never repeating a worker on an item, seeds, and refusals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    # 6/7 = .857 and .9 reach .85; item 2 (.771) has its 3 answers: uncertain; item 4 (.6) needs another. The
    # result's rule agrees: sum (p - .85) = .00714 - .07857 + .05 - .25 < 0, and still < 0 with item 4 at .85
    assert state.status.to_dict() == {1: "done", 2: "uncertain", 3: "done", 4: "more"}
    assert list(state.need_more) == [4] and list(state.uncertain) == [2] and list(state.done) == [1, 3]
    assert state.truth.to_dict() == {1: "x", 2: "y", 3: "y", 4: "y"}
    assert state.confidence[2] == pytest.approx(27 / 35, abs=1e-12)
    assert state.summary() == {"done": 2, "more": 1, "uncertain": 1, "gold": 0, "accepted": 0, "answers": 7}
    assert state.expected_accuracy == pytest.approx((6 / 7 + 27 / 35 + 0.9 + 0.6) / 4, abs=1e-12)
    # min_assignments keeps a confident single answer asking
    assert stopping_rule(ANSWERS, target=0.85, max_assignments=3, min_assignments=2, model=ONE_COIN,
                         each_item=each_item).status[3] == "more"


def test_result_rule_buys_the_lowest_posteriors_until_the_mean_can_meet_the_target():
    lead = np.array([0.99, 0.99, 0.99, 0.8, 0.6])
    open_ = lead < 0.9
    # sum (p - .9) = .27 - .1 - .3 = -.13; item 4 (.6) counted at .9 makes it +.17: it alone is asked again
    assert result_rule(lead, open_, np.ones(5, bool), 0.9).tolist() == [False, False, False, False, True]
    # the mean already meets .75: nobody is asked
    assert not result_rule(lead, open_, np.ones(5, bool), 0.75).any()
    # .99 items left out of the count (gold, say): -.1 - .3, and -.1 + 0 with both at the target: both are asked
    assert result_rule(lead, open_, open_, 0.9).tolist() == [False, False, False, True, True]
    # ties between equal posteriors: the item listed first
    tied = np.array([0.7, 0.7, 0.99, 0.99, 0.99, 0.99])
    # sum (p - .9) = -.4 + .36 = -.04; one .7 at .9 gives +.16: the first .7 only
    assert result_rule(tied, tied < 0.9, np.ones(6, bool), 0.9).tolist() == [True, False, False, False, False, False]


def test_the_result_rule_accepts_items_below_the_target():
    # items 1 (6/7) and 3 (.9) reach .78, item 4 (.6) does not; the mean (6/7 + .9 + .6) / 3 = .7857 meets .78, so
    # item 4 is accepted as it is; at .8 the mean (.7857) falls short and item 4 is asked; each_item=True asks it
    answers = ANSWERS[ANSWERS["object"] != 2]
    state = stopping_rule(answers, target=0.78, max_assignments=3, model=ONE_COIN)
    assert state.status.to_dict() == {1: "done", 3: "done", 4: "accepted"}
    assert state.summary()["accepted"] == 1 and len(state.need_more) == 0
    assert state.expected_accuracy == pytest.approx((6 / 7 + 0.9 + 0.6) / 3, abs=1e-12)
    assert stopping_rule(answers, target=0.8, max_assignments=3, model=ONE_COIN).status[4] == "more"
    assert stopping_rule(answers, target=0.78, max_assignments=3, model=ONE_COIN, each_item=True).status[4] == "more"
    # min_assignments=2: items 3 and 4 have one answer each, so both are asked, though the mean meets .78
    assert stopping_rule(answers, target=0.78, max_assignments=3, model=ONE_COIN, min_assignments=2
                         ).status.to_dict() == {1: "done", 3: "more", 4: "more"}


def test_result_rule_asks_the_items_it_must_and_counts_them_at_the_target():
    lead = np.array([0.99, 0.99, 0.99, 0.8, 0.6])
    # item 3 (.8) must be asked: -.13 + .1 = -.03, so the lowest other open item (.6) is asked too
    assert result_rule(lead, lead < 0.9, np.ones(5, bool), 0.9, must=np.array([0, 0, 0, 1, 0], bool)).tolist() == [
        False, False, False, True, True]
    # at .75 the mean is met: only the item that must is asked; a must that is not open is not
    assert result_rule(lead, lead < 0.9, np.ones(5, bool), 0.75, must=np.array([1, 0, 0, 1, 0], bool)).tolist() == [
        False, False, False, True, False]


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
    asked = result_rule(lead, open_, counted, target)
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
