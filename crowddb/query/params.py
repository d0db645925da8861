"""A statement's parameters bound into its tree as literals: crowd queries are planned with their values."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sqlglot import exp

from ..errors import ArgumentError


def bind(statement: exp.Expression, params: Any) -> exp.Expression:
    """``statement`` with ``params`` (a sequence for ``?``/``$1``, a mapping for ``$name``) substituted as literals
    (a copy; the statement itself when there are none)."""
    if params is None:
        return statement
    statement = statement.copy()
    placeholders = list(statement.find_all(exp.Placeholder, exp.Parameter))
    if isinstance(params, Mapping):
        for node in placeholders:
            name = node.name
            if name not in params:
                raise ArgumentError(f"no value given for parameter ${name}")
            node.replace(_literal(params[name]))
        return statement
    values = list(params)
    positional = [n for n in placeholders if not n.name or n.name == "?"]
    numbered = [n for n in placeholders if n not in positional]
    if len(positional) > len(values) or (positional and not numbered and len(positional) < len(values)):
        raise ArgumentError(f"the query has {len(positional)} parameters but {len(values)} values were given")
    for node, value in zip(positional, values):
        node.replace(_literal(value))
    for node in numbered:
        try:
            node.replace(_literal(values[int(node.name) - 1]))
        except (ValueError, IndexError):
            raise ArgumentError(f"no value given for parameter ${node.name}") from None
    return statement


def _literal(value: Any) -> exp.Expression:
    """A query parameter as a literal node; NaN stays NaN (exp.convert makes it NULL, which reads as 'not given')."""
    if isinstance(value, float) and math.isnan(value):
        return exp.cast(exp.Literal.string("NaN"), exp.DataType.build("DOUBLE"))
    return exp.convert(value)
