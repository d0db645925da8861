"""Human-operator definitions: what a crowd UDF asks, what it publishes, what it costs (TOML files in ``udfs/``)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ._resources import shipped_dir
from .errors import ArgumentError, UnknownOperatorError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

KINDS = ("tuple", "group")
ANONYMIZERS = ("mondrian", "fka", "datafly", "incognito", "none")

# Query-level overrides a call may pass as named arguments, with their types (name := value).
OVERRIDES: dict[str, type | tuple[type, ...]] = {
    "k": int, "assignments": int, "tuples_per_hit": int, "budget": (int, float), "reward": (int, float),
    "fee": (int, float), "method": str, "anonymizer": str, "domain": list, "seed": int,
    "sample_ratio": (int, float), "cell_limit": int,
}


@dataclasses.dataclass(frozen=True)
class HumanOperator:
    """One human operator OP_h : (T × q) → A (paper §2.1) with its HIT layout and price (§5.4)."""

    name: str
    kind: str
    question: str
    arguments: tuple[tuple[str, str], ...] = ()
    domain: str | tuple[str, ...] = "ground_truth"
    publishes: str | tuple[str, ...] = "core"
    tuples_per_hit: int = 100
    assignments: int = 5
    reward: float = 0.20
    fee: float = 0.30
    aggregation: str = "mv"
    k: int = 10
    anonymizer: str = "mondrian"
    sample_ratio: float = 0.10  # FKA: synthetic samples as a share of the input rows (kanon-crowd-db Table 7)
    cell_limit: int = 200  # FKA: cells of the feedback histogram (Algorithm 1)
    source: str = "<python>"

    def __post_init__(self) -> None:
        where = f"human operator {self.name!r} ({self.source})"
        if not self.name.isidentifier():
            raise ArgumentError(f"{where}: name must be an SQL identifier")
        if self.kind not in KINDS:
            raise ArgumentError(f"{where}: kind must be one of {KINDS}, got {self.kind!r}")
        for field in ("tuples_per_hit", "assignments"):
            if int(getattr(self, field)) < 1:
                raise ArgumentError(f"{where}: {field} must be at least 1")
        if self.reward < 0 or not 0 <= self.fee < 10:
            raise ArgumentError(f"{where}: reward must be >= 0 and fee a share of it (e.g. 0.3)")
        if not 0 < float(self.sample_ratio) <= 1:
            raise ArgumentError(f"{where}: sample_ratio must be in (0, 1], got {self.sample_ratio!r}")
        if int(self.cell_limit) < 1:
            raise ArgumentError(f"{where}: cell_limit must be at least 1, got {self.cell_limit!r}")
        if self.anonymizer not in ANONYMIZERS:
            raise ArgumentError(f"{where}: anonymizer must be one of {ANONYMIZERS}, got {self.anonymizer!r}")

    @property
    def cost_per_assignment(self) -> float:
        """Reward plus the platform fee for one assignment (§5.4)."""
        return self.reward * (1.0 + self.fee)

    def with_overrides(self, overrides: Mapping[str, Any]) -> HumanOperator:
        """A copy with query-level overrides applied (only fields of the definition; others stay with the caller)."""
        fields = {f.name for f in dataclasses.fields(self)}
        changes = {key: value for key, value in overrides.items() if key in fields}
        if "domain" in changes:
            changes["domain"] = tuple(str(v) for v in changes["domain"])
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "<python>") -> HumanOperator:
        """Build a definition from a parsed TOML table; unknown keys are an error (a typo must not pass silently)."""
        fields = {f.name for f in dataclasses.fields(cls)} - {"source"}
        unknown = set(data) - fields
        if unknown:
            raise ArgumentError(f"{source}: unknown keys {sorted(unknown)}; allowed: {sorted(fields)}")
        if "name" not in data or "kind" not in data or "question" not in data:
            raise ArgumentError(f"{source}: a human operator needs name, kind and question")
        values = dict(data)
        values["arguments"] = tuple((str(a["name"]), str(a.get("type", "VARCHAR")).upper())
                                    for a in data.get("arguments", ()))
        for key in ("domain", "publishes"):
            if isinstance(values.get(key), list):
                values[key] = tuple(str(v) for v in values[key])
        return cls(**values, source=source)


def load_file(path: str | Path) -> HumanOperator:
    """Load one TOML definition."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ArgumentError(f"cannot read human operator definition {path}: {err}") from None
    return HumanOperator.from_mapping(data, source=str(path))


class Registry:
    """Human operators by (case-insensitive) name: the shipped ones, plus user folders and objects."""

    def __init__(self, paths: Iterable[str | Path] = ()) -> None:
        self._ops: dict[str, HumanOperator] = {}
        for path in (shipped_dir("udfs"), *paths):
            self.add_path(path)

    def add_path(self, path: str | Path) -> None:
        """Register every ``*.toml`` of a folder, or one file."""
        path = Path(path)
        if not path.exists():
            raise ArgumentError(f"no human operator definitions at {path}")
        files = sorted(path.glob("*.toml")) if path.is_dir() else [path]
        for file in files:
            self.add(load_file(file))

    def add(self, op: HumanOperator) -> None:
        """Register (or replace) one operator."""
        self._ops[op.name.lower()] = op

    def get(self, name: str) -> HumanOperator:
        try:
            return self._ops[name.lower()]
        except KeyError:
            raise UnknownOperatorError(f"unknown human operator {name!r}; known: {sorted(self._ops)}") from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._ops

    def names(self) -> list[str]:
        return sorted(self._ops)
