"""hit_layout's groups (issue 28's quality-aware rounds): each worker's items make HITs of their own, in the groups'
order, at most tuples_per_hit rows each, items without a group last; without groups the layout is as before."""

from __future__ import annotations

import numpy as np
import pandas as pd

from crowddb.operators.packing import hit_layout, pack, pack_groups

NONE = pd.Series([], dtype=np.int64, index=pd.MultiIndex.from_arrays([[], []]))


def items(n: int) -> pd.DataFrame:
    return pd.DataFrame({"item_id": np.arange(n), "row_no": 1, "item_key": [f"k{i}" for i in range(n)],
                         "occurrence": 0})


def test_pack_groups_starts_a_hit_at_every_group():
    assert pack_groups(np.ones(7, np.int64), np.array([0, 0, 0, 1, 1, 2, 2]), 2).tolist() == [0, 0, 1, 2, 2, 3, 3]
    # one group is pack itself
    rows = np.array([1, 3, 2, 1, 4])
    assert pack_groups(rows, np.zeros(5, np.int64), 4).tolist() == pack(rows, 4).tolist() == [0, 0, 1, 1, 2]


def test_hit_layout_groups_items_by_their_worker():
    group = pd.Series({4: 1, 0: 1, 2: 0, 5: 0, 6: 0})  # items 1 and 3 have none
    hits, layout = hit_layout(items(7), NONE, 1, 2, run_id=3, first_hit=10, round_no=2, group=group)
    by_hit = layout.groupby("hit_id")["item_id"].apply(list).to_dict()
    assert by_hit == {"R3-00011": [2, 5], "R3-00012": [6], "R3-00013": [0, 4], "R3-00014": [1, 3]}
    assert hits["round"].tolist() == [2] * 4 and hits["assignments"].tolist() == [1] * 4
    assert layout.groupby("hit_id")["item_no"].apply(list).tolist() == [[1, 2], [1], [1, 2], [1, 2]]


def test_hit_layout_without_groups_is_unchanged():
    hits, layout = hit_layout(items(5), NONE, 1, 2, run_id=1, first_hit=0, round_no=1)
    assert hits["hit_id"].tolist() == ["R1-00001", "R1-00002", "R1-00003"]
    assert layout["hit_id"].tolist() == ["R1-00001", "R1-00001", "R1-00002", "R1-00002", "R1-00003"]
    assert layout["item_id"].tolist() == [0, 1, 2, 3, 4]
