"""Truth inference on the real crowd data sets in ../shared/data/crowd (skipped when the folder is absent)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import shared_data

from crowddb.truth import discover, get_method

DATA = shared_data.CROWD
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="real crowd data sets not available")


def load_d_product() -> tuple[pd.DataFrame, pd.Series]:
    a = pd.read_csv(DATA / "d_product" / "answer.csv")
    t = pd.read_csv(DATA / "d_product" / "truth.csv").set_index("question")["truth"]
    return a, t


def load_adult() -> tuple[pd.DataFrame, pd.Series]:
    lab = pd.read_csv(DATA / "adultcontent2" / "labels.txt", sep="\t", header=None, names=["worker", "url", "label"])
    lab = lab.drop_duplicates(["worker", "url"], keep="last")  # README: same worker + url, keep the last
    gold = pd.read_csv(DATA / "adultcontent2" / "gold.txt", sep="\t", header=None, names=["url", "label"])
    gold = gold.set_index("url")["label"]
    return lab, gold[gold.index.isin(lab.url)]


def load_emotion() -> tuple[pd.DataFrame, pd.Series]:
    a = pd.read_csv(DATA / "emotion" / "answer.csv")
    t = pd.read_csv(DATA / "emotion" / "truth.csv").set_index("question")["truth"]
    return a, t


def accuracy(truths: pd.Series, gold: pd.Series) -> float:
    return float((truths.reindex(gold.index) == gold).mean())


def test_d_product_accuracy() -> None:
    a, t = load_d_product()
    acc = {m: accuracy(get_method(m)().fit_frame(a, "question", "worker", "answer").truths_, t)
           for m in ("mv", "ds", "one_coin", "zencrowd", "crh_categorical")}
    print("d_product accuracy", {k: round(v, 4) for k, v in acc.items()})
    # reference (README, crowd-kit 1.4.2): MV .897, DS .940 (crowd-kit's own converged value is 0.9397)
    assert acc["mv"] >= 0.896
    assert acc["ds"] >= 0.9395
    assert acc["ds"] > acc["mv"] + 0.03
    assert acc["zencrowd"] >= 0.92 and acc["one_coin"] >= 0.90


def test_d_product_glad() -> None:
    a, t = load_d_product()
    acc = accuracy(get_method("glad")(tol=1e-5).fit_frame(a, "question", "worker", "answer").truths_, t)
    print("d_product GLAD", round(acc, 4))
    assert acc >= 0.925  # README: GLAD .928


def test_adultcontent2_gold() -> None:
    lab, gold = load_adult()
    assert len(gold) == 333
    acc = {m: accuracy(get_method(m)().fit_frame(lab, "url", "worker", "label").truths_, gold)
           for m in ("mv", "ds", "zencrowd", "crh_categorical")}
    ds2 = accuracy(get_method("ds")(max_iter=2).fit_frame(lab, "url", "worker", "label").truths_, gold)
    print("adultcontent2 accuracy", {k: round(v, 4) for k, v in acc.items()}, "ds after 2 iterations", round(ds2, 4))
    assert acc["mv"] >= 0.759  # README: MV .760
    # README: DS .769. Converged DS on keep-last data reaches .748 (crowd-kit converged: same); crowd-kit reports .766
    # because its ELBO test stops after 2 EM iterations, which ours reproduces exactly. .769 is not reached.
    assert acc["ds"] >= 0.745
    assert ds2 >= 0.765


def test_emotion_mae() -> None:
    a, t = load_emotion()
    mae = {}
    for m in ("mean", "median", "crh", "catd", "gtm", "ti"):
        tr = discover(a, "question", "worker", "answer", method=m).objects.set_index("object").truth
        mae[m] = float((tr.reindex(t.index) - t).abs().mean())
    print("emotion MAE", {k: round(v, 3) for k, v in mae.items()})
    assert mae["mean"] == pytest.approx(12.02, abs=0.01)
    assert mae["median"] == pytest.approx(13.53, abs=0.01)
    # the benchmark's recorded CRH 17.25 / CATD 17.72; ours must at least stay within 5% of the mean baseline
    for m in ("crh", "catd", "gtm"):
        assert mae[m] <= mae["mean"] * 1.05, (m, mae)


def test_population_runs() -> None:
    p = pd.read_csv(DATA / "population" / "population-new-new.txt", sep="\t", header=None, encoding="latin-1",
                    names=["object", "source", "value", "year"], on_bad_lines="skip")
    p = p[pd.to_numeric(p.value, errors="coerce").notna()].assign(value=lambda d: pd.to_numeric(d.value))
    for m in ("mean", "median", "crh", "catd", "gtm"):
        res = discover(p, "object", "source", "value", method=m)
        assert np.isfinite(res.objects.truth).all()
