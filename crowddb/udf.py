"""Human-operator definitions: what a crowd UDF asks, what it publishes, what it costs (TOML files in ``udfs/``)."""

from __future__ import annotations

import dataclasses
import math
import numbers
import string
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ._resources import shipped_dir
from .arguments import NUMBER, SEED, Param, bind
from .errors import ArgumentError, UnknownOperatorError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

KINDS = ("tuple", "group")
ANONYMIZERS = ("mondrian", "fka", "datafly", "incognito", "none")

def _domain_problem(value: list) -> str | None:
    if len({str(v) for v in value}) < 2 or any(v is None for v in value):
        return "domain must list at least two distinct answers, e.g. ['yes', 'no']"
    return None


# Query-level overrides a call may pass as named arguments (name := value), declared as data; ``method`` is the
# definition's ``aggregation``. None is no value here: an override is given to be used.
OVERRIDES: dict[str, Param] = {
    "k": Param(int, minimum=2, nullable=False), "assignments": Param(int, minimum=1, nullable=False),
    "tuples_per_hit": Param(int, minimum=1, nullable=False), "budget": Param(NUMBER, minimum=0, nullable=False),
    "reward": Param(NUMBER, minimum=0, nullable=False),
    "fee": Param(NUMBER, minimum=0, nullable=False,
                 check=lambda v: "fee is a share of the reward (e.g. 0.3)" if v >= 10 else None),
    "method": Param(str, nullable=False, check=lambda v: aggregation_problem(v)),
    "anonymizer": Param(str, choices=ANONYMIZERS, nullable=False),
    "domain": Param(list, nullable=False, check=_domain_problem),
    "seed": dataclasses.replace(SEED, nullable=False),
    "sample_ratio": Param(NUMBER, nullable=False,
                          check=lambda v: None if 0 < v <= 1 else "sample_ratio must be in (0, 1]"),
    "cell_limit": Param(int, minimum=1, nullable=False),
    "gold": Param(NUMBER, nullable=False,
                  check=lambda v: None if 0 <= v <= 0.5 else "gold is the share of each HIT's items that are gold "
                  "questions, in [0, 0.5] (e.g. 0.1; 0 turns them off)"),
    "gold_drop": Param(bool, nullable=False),
    "gold_table": Param(str, nullable=False),
    # issue 28: buy answers in rounds until each item's posterior reaches the target (CDAS's early termination)
    "accuracy": Param(NUMBER, nullable=False,
                      check=lambda v: None if 0 < v < 1 else "accuracy is the result's target accuracy (each "
                      "item's with each_item := true), strictly between 0 and 1 (e.g. 0.95)"),
    "max_assignments": Param(int, minimum=1, nullable=False, hint=" (the most assignments one item may get)"),
    "each_item": Param(bool, nullable=False),
    # issue 28 (ours): the result's target also holds as a one-sided lower confidence bound at bound_level on its
    # measured accuracy, reaching accuracy - tolerance (crowddb.truth.adaptive.BOUND_LEVEL, TOLERANCE by default)
    "bound_level": Param(NUMBER, nullable=False,
                         check=lambda v: None if 0.5 <= v < 1 else "bound_level is the confidence level of the lower "
                         "bound on the result's accuracy, in [0.5, 1) (e.g. 0.99)"),
    "tolerance": Param(NUMBER, nullable=False,
                       check=lambda v: None if 0 <= v < 1 else "tolerance is how far below the accuracy target the "
                       "lower bound may be, in [0, 1) (e.g. 0.01)"),
}
#: max_assignments of an accuracy target that does not name one (the issue's example)
DEFAULT_MAX_ASSIGNMENTS = 9
#: the overrides that turn a call into an accuracy-target (adaptive) call; ``assignments :=`` conflicts with them
ADAPTIVE_OVERRIDES = ("accuracy", "max_assignments", "each_item", "bound_level", "tolerance")
#: the value of a definition's ``domain`` that means "the distinct values of the input's ground-truth column"
GROUND_TRUTH_DOMAIN = "ground_truth"


def aggregation_methods() -> list[str]:
    """The truth-inference methods a human operator may aggregate its answers with (answers are labels: the
    categorical methods of ``crowddb.truth``, 'crh' (its 0-1 loss form on labels) and 'auto')."""
    from .truth import METHODS
    from .truth.base import CategoricalMethod

    return sorted({n for n, cls in METHODS.items() if issubclass(cls, CategoricalMethod)} | {"crh", "auto"})


def aggregation_problem(name: object) -> str | None:
    """What is wrong with ``name`` as the method that aggregates a human operator's (label) answers, or None."""
    from .truth import ALIASES

    allowed = aggregation_methods()
    key = name.strip().lower() if isinstance(name, str) else None
    if key is not None:
        key = ALIASES.get(key, key)
    if key not in allowed:
        return (f"aggregation method {name!r} is not one that aggregates crowd answers (labels); use one of "
                f"{allowed} (aggregation = ... in the definition, method := ... in a call)")
    return None


def check_aggregation(name: object, where: str) -> None:
    """ArgumentError unless ``name`` is a method that aggregates a human operator's (label) answers."""
    problem = aggregation_problem(name)
    if problem:
        raise ArgumentError(f"{where}: {problem}")


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_override(name: str, value: Any, where: str = "override") -> None:
    """Refuse an out-of-range or mistyped query-level override (``getposition(*, name := value)``) with an
    ArgumentError naming it, before anything is published or paid (``OVERRIDES`` declares them)."""
    bind(where, {name: value}, {name: OVERRIDES[name]} if name in OVERRIDES else OVERRIDES)


def _question_fields(question: str, where: str) -> list[str]:
    """The argument names a question template uses (``{job}``); a malformed template is an error."""
    try:
        parsed = list(string.Formatter().parse(question))
    except ValueError as err:
        raise ArgumentError(f"{where}: question {question!r} is not a valid template ({err}); write literal braces "
                            "as {{ and }}") from None
    fields = []
    for _, field, spec, _ in parsed:
        if field is None:
            continue
        if spec and "{" in spec:  # a nested placeholder in the format spec: {job:>{width}}
            fields.extend(_question_fields(spec, where))
        if not field.isidentifier():  # no positional {}, {0}, attribute {job.x} or index {job[0]} placeholders
            raise ArgumentError(f"{where}: question {question!r} uses {{{field}}}; a placeholder must name one of the "
                                "operator's arguments, e.g. {job} (write literal braces as {{ and }})")
        fields.append(field)
    return fields


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
    cell_limit: int = 400  # FKA: cells of the feedback histogram (Algorithm 1; kanon-crowd-db Table 7)
    # gold questions (ours): this share of each HIT's items are copies of items with a known answer (the
    # ground-truth column), shown like the others; the platform scores its workers on them and may stop a worker
    # who fails them; gold_drop: answers of workers the platform stopped are left out of the aggregation
    gold: float = 0.0
    gold_drop: bool = False
    gold_table: str | None = None  # known answers (the input's key, answer) instead of the ground-truth column
    # issue 28: an accuracy target makes the call buy its answers in rounds, one assignment per item and round, up to
    # max_assignments per item (None: fixed ``assignments``); the target is the result's expected accuracy (the mean
    # posterior of its answers), or with each_item every item's posterior (None: false, with a target)
    accuracy: float | None = None
    max_assignments: int | None = None
    each_item: bool | None = None
    # the lower bound on the result's accuracy (ours; None: crowddb.truth.adaptive's BOUND_LEVEL and TOLERANCE)
    bound_level: float | None = None
    tolerance: float | None = None
    source: str = "<python>"

    def __post_init__(self) -> None:
        where = f"human operator {self.name!r} ({self.source})"
        for field in ("arguments", "domain", "publishes"):  # lists (from Python) are kept as tuples, like TOML's
            value = getattr(self, field)
            if isinstance(value, list):
                object.__setattr__(self, field, tuple(tuple(v) if isinstance(v, list) else v for v in value)
                                   if field == "arguments" else tuple(value))
        for field in ("name", "kind", "question", "aggregation", "anonymizer"):
            if not isinstance(getattr(self, field), str):
                raise ArgumentError(f"{where}: {field} must be a string, got {getattr(self, field)!r}")
        if not self.name.isidentifier():
            raise ArgumentError(f"{where}: name must be an SQL identifier")
        if self.kind not in KINDS:
            raise ArgumentError(f"{where}: kind must be one of {KINDS}, got {self.kind!r}")
        self._check_arguments(where)
        self._check_domain(where)
        for field in ("tuples_per_hit", "assignments", "k", "cell_limit"):
            value = getattr(self, field)
            if not _is_int(value):
                raise ArgumentError(f"{where}: {field} must be an integer, got {value!r}")
        for field in ("reward", "fee", "sample_ratio"):
            value = getattr(self, field)
            if not _is_number(value) or not math.isfinite(value):
                raise ArgumentError(f"{where}: {field} must be a finite number, got {value!r}")
        for field in ("tuples_per_hit", "assignments"):
            if int(getattr(self, field)) < 1:
                raise ArgumentError(f"{where}: {field} must be at least 1, got {getattr(self, field)!r}")
        if int(self.k) < 2:
            raise ArgumentError(f"{where}: k must be at least 2, got {self.k!r}")
        if self.reward < 0 or not 0 <= self.fee < 10:
            raise ArgumentError(f"{where}: reward must be >= 0 and fee a share of it (e.g. 0.3)")
        if not 0 < float(self.sample_ratio) <= 1:
            raise ArgumentError(f"{where}: sample_ratio must be in (0, 1], got {self.sample_ratio!r}")
        if int(self.cell_limit) < 1:
            raise ArgumentError(f"{where}: cell_limit must be at least 1, got {self.cell_limit!r}")
        if not _is_number(self.gold) or not 0 <= float(self.gold) <= 0.5:
            raise ArgumentError(f"{where}: gold must be a share in [0, 0.5] of each HIT's items, got {self.gold!r}")
        if float(self.gold) > 0 and self.kind != "tuple":
            raise ArgumentError(f"{where}: gold questions are for tuple operators (a pick-a-row item has no single "
                                "known answer); leave gold at 0")
        if self.gold_table is not None and not isinstance(self.gold_table, str):
            raise ArgumentError(f"{where}: gold_table must be a table name, got {self.gold_table!r}")
        if not isinstance(self.gold_drop, bool):
            raise ArgumentError(f"{where}: gold_drop must be true or false, got {self.gold_drop!r}")
        if self.anonymizer not in ANONYMIZERS:
            raise ArgumentError(f"{where}: anonymizer must be one of {ANONYMIZERS}, got {self.anonymizer!r}")
        check_aggregation(self.aggregation, where)
        self._check_adaptive(where)

    def _check_adaptive(self, where: str) -> None:
        """An accuracy target (issue 28): a probability, with a positive integer cap on the assignments per item."""
        if self.accuracy is None:
            for field, what in (("max_assignments", "caps an accuracy target's rounds"),
                                ("each_item", "says whether an accuracy target holds for each item"),
                                ("bound_level", "is the confidence of an accuracy target's lower bound"),
                                ("tolerance", "is how far below an accuracy target its lower bound may be")):
                if getattr(self, field) is not None:
                    raise ArgumentError(f"{where}: {field} {what}; add accuracy := 0.95 (with {field}), or ask a "
                                        "fixed number with assignments := N instead")
            return
        if self.max_assignments is None:  # a target without a cap: the documented default
            object.__setattr__(self, "max_assignments", DEFAULT_MAX_ASSIGNMENTS)
        if self.each_item is None:  # the result's accuracy, the documented default
            object.__setattr__(self, "each_item", False)
        if not isinstance(self.each_item, bool):
            raise ArgumentError(f"{where}: each_item must be true or false, got {self.each_item!r}")
        if not _is_number(self.accuracy) or not 0 < float(self.accuracy) < 1:
            raise ArgumentError(f"{where}: accuracy must be a probability strictly between 0 and 1 (e.g. 0.95), "
                                f"got {self.accuracy!r}")
        if not _is_int(self.max_assignments) or int(self.max_assignments) < 1:
            raise ArgumentError(f"{where}: max_assignments must be a positive integer (e.g. 9), "
                                f"got {self.max_assignments!r}")
        if self.bound_level is not None and not (_is_number(self.bound_level) and 0.5 <= self.bound_level < 1):
            raise ArgumentError(f"{where}: bound_level must be a confidence level in [0.5, 1) (e.g. 0.99), "
                                f"got {self.bound_level!r}")
        if self.tolerance is not None and not (_is_number(self.tolerance) and 0 <= self.tolerance < 1):
            raise ArgumentError(f"{where}: tolerance must be an accuracy difference in [0, 1) (e.g. 0.01), "
                                f"got {self.tolerance!r}")
        if self.kind != "tuple":
            raise ArgumentError(f"{where}: accuracy := is for tuple operators (one answer per row); a pick-a-row "
                                "operator's knock-out rounds take assignments := N")
        if float(self.gold) > 0:
            raise ArgumentError(f"{where}: accuracy := does not combine with gold questions (gold := share): a gold "
                                "copy would be a second question on the same item; leave gold at 0, and name a table "
                                "of known answers with gold_table := '...' to anchor the workers' model on them")

    @property
    def adaptive(self) -> bool:
        """Does the call buy in rounds up to an accuracy target (issue 28) rather than a fixed ``assignments``?"""
        return self.accuracy is not None

    def _check_arguments(self, where: str) -> None:
        """The operator's own arguments are (name, SQL type) pairs; the question names only them."""
        arguments = self.arguments
        if not isinstance(arguments, tuple) or not all(
                isinstance(a, tuple) and len(a) == 2 and all(isinstance(x, str) for x in a) for a in arguments):
            raise ArgumentError(f"{where}: arguments must be a list of {{ name = '...', type = 'VARCHAR' }} tables, "
                                f"got {arguments!r}")
        names = [a for a, _ in arguments]
        for name in names:
            if not name.isidentifier():
                raise ArgumentError(f"{where}: argument name {name!r} must be an identifier")
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ArgumentError(f"{where}: argument(s) {repeated} named twice")
        missing = [f for f in dict.fromkeys(_question_fields(self.question, where)) if f not in names]
        if missing:
            raise ArgumentError(f"{where}: the question names {', '.join('{' + m + '}' for m in missing)}, which "
                                f"{'is not an argument' if len(missing) == 1 else 'are not arguments'} of the "
                                f"operator (arguments: {names or 'none'}); declare it in arguments = [...] or fix "
                                "the question")

    def _check_domain(self, where: str) -> None:
        for field in ("domain", "publishes"):
            value = getattr(self, field)
            if isinstance(value, tuple):
                if not all(isinstance(v, str) for v in value):
                    raise ArgumentError(f"{where}: {field} must be a list of strings, got {list(value)!r}")
            elif not isinstance(value, str):
                raise ArgumentError(f"{where}: {field} must be a string or a list of strings, got {value!r}")
        if isinstance(self.domain, str) and self.domain != GROUND_TRUTH_DOMAIN:
            raise ArgumentError(f"{where}: domain must be {GROUND_TRUTH_DOMAIN!r} (the distinct values of the input's "
                                f"ground-truth column) or a list of answers, got {self.domain!r}")
        if isinstance(self.domain, tuple) and len(set(self.domain)) < 2:
            raise ArgumentError(f"{where}: the answer domain needs at least two distinct answers, got "
                                f"{list(self.domain)!r}")

    @property
    def cost_per_assignment(self) -> float:
        """Reward plus the platform fee for one assignment (§5.4)."""
        return self.reward * (1.0 + self.fee)

    def with_overrides(self, overrides: Mapping[str, Any]) -> HumanOperator:
        """A copy with query-level overrides applied (only fields of the definition; others stay with the caller)."""
        for key, value in overrides.items():
            check_override(key, value, f"{self.name}(...)")
        adaptive = [key for key in ADAPTIVE_OVERRIDES if key in overrides]
        if adaptive and "assignments" in overrides:
            asked = " := and ".join(adaptive)
            raise ArgumentError(f"{self.name}(...): assignments := asks a fixed number of answers per item and "
                                f"{asked} := ask{'s' if len(adaptive) == 1 else ''} for answers until an accuracy "
                                "target is reached; pass one or the other (e.g. accuracy := 0.95, max_assignments := 9)")
        fields = {f.name for f in dataclasses.fields(self)}
        changes = {("aggregation" if key == "method" else key): value for key, value in overrides.items()}
        changes = {key: value for key, value in changes.items() if key in fields}
        if "domain" in changes:
            changes["domain"] = tuple(str(v) for v in changes["domain"])
        if "assignments" in changes:  # a fixed number asked in the call wins over a definition's accuracy target
            changes.update(accuracy=None, max_assignments=None, each_item=None, bound_level=None, tolerance=None)
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
        values["arguments"] = _arguments(data.get("arguments", ()), source)
        for key in ("domain", "publishes"):
            if isinstance(values.get(key), (list, tuple)):
                if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in values[key]):
                    raise ArgumentError(f"{source}: {key} must be a list of strings, got {values[key]!r}")
                values[key] = tuple(str(v) for v in values[key])
        return cls(**values, source=source)


def _arguments(given: Any, source: str) -> tuple[tuple[str, str], ...]:
    """A definition's ``arguments = [{ name = "job", type = "VARCHAR" }, ...]`` as (name, TYPE) pairs."""
    usage = 'arguments = [{ name = "job", type = "VARCHAR" }, ...]'
    if not isinstance(given, (list, tuple)):
        raise ArgumentError(f"{source}: arguments must be a list of tables, {usage}; got {given!r}")
    out = []
    for a in given:
        if not isinstance(a, Mapping) or not isinstance(a.get("name"), str) or not a["name"]:
            raise ArgumentError(f"{source}: each argument needs a name: {usage}; got {a!r}")
        unknown = sorted(set(a) - {"name", "type"})
        if unknown:
            raise ArgumentError(f"{source}: argument {a['name']!r} has unknown keys {unknown}; allowed: name, type")
        kind = a.get("type", "VARCHAR")
        if not isinstance(kind, str) or not kind:
            raise ArgumentError(f"{source}: argument {a['name']!r}: type must be an SQL type name, got {kind!r}")
        out.append((a["name"], kind.upper()))
    return tuple(out)


def load_file(path: str | Path) -> HumanOperator:
    """Load one TOML definition."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ArgumentError(f"cannot read human operator definition {path}: {err}") from None
    return HumanOperator.from_mapping(data, source=str(path))


class Registry:
    """Human operators by (case-insensitive) name: the shipped ones, plus user folders and objects. ``reserved``
    gives the names no operator may take (the table functions': a definition named so would shadow one)."""

    def __init__(self, paths: Iterable[str | Path] = (), *,
                 reserved: Callable[[], frozenset[str]] = frozenset) -> None:
        self._ops: dict[str, HumanOperator] = {}
        self._names: frozenset[str] = frozenset()
        self._reserved = reserved
        for path in (shipped_dir("udfs"), *paths):
            self.add_path(path)

    def add_path(self, path: str | Path) -> list[HumanOperator]:
        """Register every ``*.toml`` of a folder, or one file (all of them, or none if one is bad); returns them."""
        path = Path(path)
        if not path.exists():
            raise ArgumentError(f"no human operator definitions at {path}")
        files = sorted(path.glob("*.toml")) if path.is_dir() else [path]
        if not files:
            raise ArgumentError(f"no human operator definitions (*.toml files) in the folder {path}")
        ops = [load_file(file) for file in files]
        names = [op.name.lower() for op in ops]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ArgumentError(f"{path}: more than one definition of {repeated}")
        for op in ops:  # all of them, or none
            self._refuse_reserved(op)
        for op in ops:
            self.add(op)
        return ops

    def _refuse_reserved(self, op: HumanOperator) -> None:
        reserved = self._reserved()
        if op.name.lower() in reserved:
            raise ArgumentError(f"human operator {op.name!r} ({op.source}): the name {op.name!r} is taken by the table "
                                f"function {op.name.upper()}(...); name the operator otherwise (reserved: "
                                f"{', '.join(sorted(n.upper() for n in reserved))})")

    def add(self, op: HumanOperator) -> None:
        """Register (or replace) one operator."""
        self._refuse_reserved(op)
        self._ops[op.name.lower()] = op
        self._names = frozenset(self._ops)

    def get(self, name: str) -> HumanOperator:
        try:
            return self._ops[name.lower()]
        except KeyError:
            raise UnknownOperatorError(f"unknown human operator {name!r}; known: {sorted(self._ops)}") from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._ops

    def names(self) -> list[str]:
        return sorted(self._ops)

    def name_set(self) -> frozenset[str]:
        """The registered names (lower case), kept up to date by ``add``: every query's text is checked against it."""
        return self._names
