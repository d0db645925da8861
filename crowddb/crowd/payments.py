"""What workers earned, as the one CSV both ``crowddb payments --run N`` prints and the requester page serves
(``/r/{token}/payments.csv?run=N``).

The format: a header line, then one line per worker, ordered by worker_id::

    participant_id,amount,worker_id,assignments
    5f1a,0.60,W0001,3
    ,0.40,W0004,2

- ``participant_id``: the worker's id on the marketplace that recruited them (a Prolific participant id); empty for a
  worker who came on a direct link (a lab's own annotator), to be paid another way.
- ``amount``: the rewards the worker earned, in US$ with 2 decimals (the marketplace's fee is its own, not included).
- ``worker_id``: crowddb's id of the worker (``crowddb_workers``); ``assignments``: how many they submitted.

The first two columns are Prolific's bulk bonus form (``participant_id,amount``): its lines with a participant id,
without the header and the last two columns, are what the form takes.

It lives in the crowd layer, outside ``crowd.web`` (whose package needs the optional 'web' extra), so the CLI (over
the database's ``crowddb_payouts``) and the web page (over its market's earnings) write it with the same function.
"""

from __future__ import annotations

import csv
import io
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pandas as pd

__all__ = ["HEADER", "payments_csv"]

HEADER = ("participant_id", "amount", "worker_id", "assignments")


def payments_csv(earnings: Any) -> str:
    """The payments CSV (module docstring) of ``earnings``: a DataFrame with columns worker_id, participant_id
    (None or NaN: no marketplace id), assignments and reward (US$, a number or a Decimal)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    rows = earnings[["worker_id", "participant_id", "assignments", "reward"]].sort_values("worker_id", kind="stable")
    for worker_id, participant_id, assignments, reward in rows.itertuples(index=False):
        writer.writerow([_text(participant_id), _amount(reward), worker_id, int(assignments)])
    return out.getvalue()


def _text(value: Any) -> str:
    """A missing id (None, NaN, pandas NA) is an empty field."""
    return "" if pd.isna(value) else str(value)


def _amount(value: Any) -> str:
    """US$ with 2 decimals, half cents rounded up (a float sum such as 0.4000000000000001 is 0.40)."""
    return str(Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))
