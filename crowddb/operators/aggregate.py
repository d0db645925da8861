"""From workers' answers to the operator's answers: truth inference per item, knock-out rounds for group operators,
and the accuracy bounds explain() shows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from ..errors import CrowdDBError
from ..udf import HumanOperator
from .columns import GROUP_ID, ROW_ID, TRUTH


def aggregate(answers: pd.DataFrame, op: HumanOperator, signature: str) -> pd.DataFrame:
    """One answer per item from its assignments (item_id, worker_id, answer), with the operator's truth-inference
    method: returns item_id, answer."""
    from ..truth import discover

    # seeded by the operator's signature, not the run: the same answers always aggregate to the same result
    try:
        result = discover(answers, object="item_id", source="worker_id", value="answer",
                          method=op.aggregation, seed=int(signature[:8], 16))
    except CrowdDBError as err:  # the truth layer names the method; the user called the operator
        raise type(err)(f"{op.name}: aggregating the answers: {err}") from None
    out = result.objects.rename(columns={"object": "item_id", "truth": "answer"})
    return out[["item_id", "answer"]]


def tournament(items: pd.DataFrame, group_of: np.ndarray, key: np.ndarray,
               play: Callable[[pd.DataFrame, int], pd.DataFrame],
               next_items: Callable[[np.ndarray, np.ndarray, int], pd.DataFrame]) -> pd.DataFrame:
    """Group operators: knock-out rounds until each group has one winner; returns GROUP_ID, answer (key).

    ``group_of``/``key``: each input row's group and returned value; ``play(items, round_no)``: one round's answers
    (item_id, answer = the chosen row_no); ``next_items(groups, rows, first_id)``: the items of the next round."""
    decided, round_no = [], 1
    while True:
        winners = play(items, round_no)
        chosen = items.merge(winners, on="item_id")
        chosen = chosen[chosen["row_no"].astype(str) == chosen["answer"].astype(str)]
        rows = chosen[ROW_ID].to_numpy()
        groups = group_of[rows]
        counts = pd.Series(groups).value_counts()
        final = np.isin(groups, counts.index[counts == 1].to_numpy())
        decided.append(pd.DataFrame({GROUP_ID: groups[final], "answer": key[rows[final]]}))
        if final.all():
            return pd.concat(decided, ignore_index=True)
        round_no += 1
        items = next_items(groups[~final], rows[~final], int(items["item_id"].max()) + 1)


def accuracy_range(frame: pd.DataFrame, domain: tuple[str, ...] | None) -> tuple[float | None, float | None]:
    """Eq. 3 / Eq. 4 bounds of crowd accuracy under any k-anonymous release, from the answer distribution:
    the ground truth's distribution over the input when declared, else uniform over the answer domain."""
    if domain is None:
        return None, None
    from ..anonymize import accuracy_bounds

    shares = np.array([])
    if TRUTH in frame:  # a NULL ground truth is unknown, not a class ('nan' after astype(str), pandas 2)
        shares = frame[TRUTH].dropna().astype(str).value_counts(normalize=True).to_numpy()
    if not len(shares):  # no ground truth declared, or none known (all NULL): uniform over the answer domain
        shares = np.full(len(domain), 1.0 / len(domain))
    return accuracy_bounds(shares)
