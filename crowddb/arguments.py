"""Named arguments (``name := value``) declared as data, and the one binder that checks them: a human operator's
query-level overrides (``getposition(*, k := 50)``) and a table function's arguments (``ANONYMIZE(t, k := 10)``).

Every refusal is an ArgumentError naming the argument, the value and what it must be, raised before anything runs.

>>> bind("ANONYMIZE", {"k": 5}, {"k": Param(int, 10, minimum=2), "seed": Param(int, None, minimum=0)})
{'k': 5, 'seed': None}
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ArgumentError

#: the default of an argument that must be given
REQUIRED = object()
NUMBER = (int, float)
_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true/false", list: "a list",
          dict: "a struct {'key': value, ...}"}


@dataclasses.dataclass(frozen=True)
class Param:
    """One named argument: the types it takes, its default, and (optional) the values it takes: a minimum, a list
    of choices, or a check returning what is wrong with a value (None when nothing is)."""

    types: type | tuple[type, ...]
    default: Any = None
    minimum: float | None = None
    choices: tuple[Any, ...] | None = None
    check: Callable[[Any], str | None] | None = None
    hint: str = ""  # said after a value below the minimum
    nullable: bool = True  # NULL (None) leaves the argument at its default

    def describe(self) -> str:
        types = self.types if isinstance(self.types, tuple) else (self.types,)
        return " or ".join(dict.fromkeys(_NAMES[t] for t in types))


#: a seed: a non-negative integer (NULL leaves it unset)
SEED = Param(int, None, minimum=0, hint=" (seeds are non-negative integers)")


def _finite(value: Any) -> bool:
    """No NaN or infinity anywhere in a (possibly nested list / struct) value."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _has_type(value: Any, types: type | tuple[type, ...]) -> bool:
    """``value`` is one of ``types``, where an integer is also a number and true/false is neither."""
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool):
        return bool in types
    if int in types and isinstance(value, numbers.Integral):
        return True
    if float in types and isinstance(value, numbers.Real):
        return True
    return isinstance(value, tuple(t for t in types if t not in (int, float)))


def check_finite(where: str, name: str, value: Any) -> None:
    """NaN and infinity are values of no argument (checked for every argument, declared or passed on)."""
    if not _finite(value):
        what = "a finite number" if isinstance(value, float) else "made of finite numbers"
        raise ArgumentError(f"{where}: {name} := {value!r} must be {what} (NaN and infinity are not values of any "
                            "argument); leave the argument out for its default")


def check(where: str, name: str, value: Any, param: Param) -> None:
    """``value`` checked against ``param`` (None, where the argument is nullable, leaves it at its default)."""
    if value is None and param.nullable:
        return
    check_finite(where, name, value)
    if not _has_type(value, param.types):
        raise ArgumentError(f"{where}: {name} := {value!r} must be {param.describe()}")
    if param.minimum is not None and value < param.minimum:
        raise ArgumentError(f"{where}: {name} := {value!r} must be at least {param.minimum}{param.hint}")
    if param.choices is not None and value not in param.choices:
        raise ArgumentError(f"{where}: {name} := {value!r} must be one of {list(param.choices)}")
    problem = param.check(value) if param.check is not None else None
    if problem:
        raise ArgumentError(f"{where}: {name} := {value!r}: {problem}")


def bind(where: str, named: Mapping[str, Any], params: Mapping[str, Param]) -> dict[str, Any]:
    """Every declared argument's value (given, else its default), each given one checked; an unknown or missing
    argument is an error."""
    unknown = sorted(set(named) - set(params))
    if unknown:
        raise ArgumentError(f"{where}: unknown argument{'s' if len(unknown) > 1 else ''} {unknown}; allowed: "
                            f"{sorted(params)}")
    out = {}
    for name, param in params.items():
        if name not in named:
            if param.default is REQUIRED:
                raise ArgumentError(f"{where}: missing argument {name} := ...")
            out[name] = param.default
            continue
        check(where, name, named[name], param)
        out[name] = named[name]
    return out
