"""A release served from the boxes an earlier one showed reports the figures of those boxes (issue 26: its NCP was
missing, so a repeat's report could not be compared with the first)."""

from __future__ import annotations

import pytest

import crowddb
from crowddb.datasets import adult_path


@pytest.mark.parametrize("k", [2, 25])
def test_a_repeat_reports_the_same_ncp_classes_and_discernibility(k):
    with crowddb.connect(seed=1, progress=False) as db:
        db.load_csv("adult", adult_path(), quasi_identifiers=["age", "sex", "education_num"], key="id",
                    kinds={"age": "numeric", "education_num": "numeric"})
        query = f"SELECT count(*) FROM ANONYMIZE((SELECT * FROM adult WHERE age < 40), k := {k})"
        db.sql(query).fetchall()
        first = db.last_report[0]
        db.sql(query).fetchall()
        again = db.last_report[0]
    assert again["method"] == "served" and first["method"] == "mondrian"
    for figure in ("ncp", "n_groups", "min_group_size", "discernibility", "n_rows"):
        assert again[figure] == pytest.approx(first[figure], rel=1e-12), figure
