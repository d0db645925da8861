"""Data sets shipped with crowddb, so the demo and tests need no download.

``adult.csv.gz`` is the UCI Adult ("Census Income") training split with every row holding a ``?`` removed
(30,162 rows), an ``id`` column added and column names made SQL-friendly. Source: Kohavi & Becker, UCI Machine
Learning Repository, DOI 10.24432/C5XW20, licensed CC BY 4.0 (see ``ADULT_LICENSE.txt``).

``hierarchies/<column>.csv`` are ARX's generalization hierarchies for Adult's categorical columns and age
(``leaf;level 1;...;*``, Apache-2.0, see ``hierarchies/NOTICE.txt``): ``adult_hierarchy('workclass')``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pandas as pd

__all__ = ["ADULT_HIERARCHIES", "ADULT_QUASI_IDENTIFIERS", "OCCUPATION_CATEGORY", "adult_hierarchy", "adult_path",
           "load_adult"]

#: the Adult columns with a shipped ARX hierarchy
ADULT_HIERARCHIES = ("age", "education", "marital_status", "native_country", "occupation", "race", "sex", "workclass")

# The 8 quasi-identifiers of the Mondrian / NCP literature (qiyuangong/Mondrian), with our column names.
ADULT_QUASI_IDENTIFIERS = [
    "age", "workclass", "education_num", "marital_status", "occupation", "race", "sex", "native_country",
]

# Adult occupation -> the 5 census categories of kanon-crowd-db Table 6 (CAT 0..4). Adult has no farming group of
# its own in Table 6: Farming-fishing joins the labourers (CAT 4); Armed-Forces joins protective service (CAT 2).
OCCUPATION_CATEGORY = {
    "Exec-managerial": 0, "Prof-specialty": 0,
    "Tech-support": 1, "Sales": 1, "Adm-clerical": 1,
    "Other-service": 2, "Protective-serv": 2, "Priv-house-serv": 2, "Armed-Forces": 2,
    "Craft-repair": 3,
    "Machine-op-inspct": 4, "Transport-moving": 4, "Handlers-cleaners": 4, "Farming-fishing": 4,
}


def adult_path() -> Path:
    """Path of the shipped, compressed cleaned Adult CSV (readable by DuckDB's read_csv and by pandas)."""
    return Path(str(resources.files(__name__) / "adult.csv.gz"))


def adult_hierarchy(column: str) -> Path:
    """Path of ARX's generalization hierarchy for an Adult column (``ANONYMIZE(..., hierarchies := {...})``)."""
    if column not in ADULT_HIERARCHIES:
        from crowddb.errors import ArgumentError

        raise ArgumentError(f"no hierarchy ships for Adult's column {column!r}; these do: {list(ADULT_HIERARCHIES)}")
    return Path(str(resources.files(__name__) / "hierarchies" / f"{column}.csv"))


def load_adult() -> pd.DataFrame:
    """The cleaned UCI Adult table: 30,162 rows, an ``id`` column and the 15 original columns."""
    return pd.read_csv(adult_path())
