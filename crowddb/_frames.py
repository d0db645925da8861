"""The one way the algorithm layers accept a table: pandas, a dict of columns, Arrow, Polars or a DuckDB relation."""

from __future__ import annotations

from typing import Any

import pandas as pd

from .errors import ArgumentError


def as_frame(data: Any, who: str, also: str = "") -> pd.DataFrame:
    """``data`` as a pandas DataFrame; ``who`` names the caller in the error for anything else, ``also`` the other
    forms the caller accepts itself."""
    if isinstance(data, pd.DataFrame):
        return data
    if isinstance(data, dict):
        return pd.DataFrame(data)
    if hasattr(data, "to_pandas"):  # pyarrow Table, Polars DataFrame
        return data.to_pandas()
    if hasattr(data, "df") and callable(data.df):  # DuckDB relation (duck-typed: this layer imports no DuckDB)
        return data.df()
    raise ArgumentError(f"{who} needs a pandas DataFrame, a dict of columns, an Arrow table, a Polars DataFrame or a "
                        f"DuckDB relation{also}, got {type(data).__name__}")
