"""A statement's plan, pure (nothing runs, nothing is read from the database): its crowd operators as ordered steps,
innermost first, each human call bound to its definition. A misplaced or nested operator, a bad argument or an
unknown override is refused here, before the first step publishes anything."""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.scope import TRAVERSABLES, Scope, traverse_scope

from .._sql import DIALECT
from ..errors import ArgumentError, SQLParseError
from ..operators import table_functions
from ..replacement import table_function_inputs
from ..udf import Registry
from .text import crowd_nodes, is_human, is_table_function


def literal_value(node: exp.Expression, what: str) -> Any:
    """A Python value from a literal argument (string, number, boolean, NULL, list, struct); anything else is an
    error."""
    if isinstance(node, exp.Neg):
        return -literal_value(node.this, what)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        try:
            return int(text)
        except ValueError:
            return float(text)
    if (isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string
            and node.to.is_type(*exp.DataType.REAL_TYPES)):
        return float(node.this.this)  # a NaN or inf parameter ('NaN'::DOUBLE), refused by the argument's binder
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Array):
        return [literal_value(e, what) for e in node.expressions]
    if isinstance(node, exp.Struct) and all(isinstance(e, exp.PropertyEQ) for e in node.expressions):
        return {e.this.name: literal_value(e.expression, what) for e in node.expressions}  # {'key': value, ...}
    if isinstance(node, (exp.Column, exp.Identifier)) and what.endswith("column"):
        return node.name
    raise ArgumentError(f"{what} must be a literal value, got {node.sql(DIALECT)!r}")


def split_arguments(call: exp.Func, what: str) -> tuple[list[exp.Expression], dict[str, Any]]:
    """Positional argument nodes, and named arguments (name := literal) as Python values."""
    positional, named = [], {}
    for arg in call.expressions:
        if isinstance(arg, (exp.PropertyEQ, exp.Kwarg, exp.EQ)) and isinstance(arg.this, (exp.Identifier, exp.Column)):
            name = arg.this.name.lower()
            if name in named:
                raise ArgumentError(f"{what}: argument {name!r} given twice")
            named[name] = literal_value(arg.expression, f"{what}: argument {name!r}")
        else:
            if named:
                raise ArgumentError(f"{what}: positional argument after named arguments")
            positional.append(arg)
    return positional, named


@dataclasses.dataclass
class Step:
    """One step of a statement's plan: a table function (``node`` is its FROM item), or a SELECT (``node``) whose
    human ``calls`` run together on its rows."""

    node: exp.Expression
    name: str
    calls: list[exp.Anonymous]


@dataclasses.dataclass
class BoundCall:
    """A human operator call bound to its definition (``bind``)."""

    op: Any                         # the registered HumanOperator
    definition: Any                 # the same with the call's overrides applied
    what: str                       # how errors name the call
    columns: list[exp.Expression]   # the column arguments (or *)
    args: dict[str, Any]            # the operator's own arguments (e.g. job)
    named: dict[str, Any]           # the named overrides (method folded into the definition)


def bind(call: exp.Anonymous, registry: Registry) -> BoundCall:
    """A human operator call checked against its definition: named overrides, the operator's own arguments, the
    question they fill in."""
    op = registry.get(call.name)
    what = f"{op.name}(...)"
    positional, named = split_arguments(call, what)
    n_own = len(op.arguments)
    if len(positional) <= n_own:  # at least one column (or *), then the operator's own arguments
        own = f", then its argument(s) {[a for a, _ in op.arguments]}" if n_own else ""
        raise ArgumentError(f"{what}: name the columns to publish, or * for the published columns{own}")
    columns_args, own_args = positional[: len(positional) - n_own], positional[len(positional) - n_own:]
    args = {}
    for (arg_name, arg_type), node in zip(op.arguments, own_args):
        value = literal_value(node, f"{what}: argument {arg_name!r}")
        if arg_type == "VARCHAR" and not isinstance(value, str):
            raise ArgumentError(f"{what}: argument {arg_name!r} must be a string, got {value!r}")
        args[arg_name] = value
    method = named.pop("method", None)  # every override is checked (udf.check_override) as it is applied
    definition = op.with_overrides({**named, **({"method": method} if method else {})})
    try:
        definition.question.format(**args)
    except (KeyError, IndexError, ValueError) as err:
        raise ArgumentError(f"{what}: its question {definition.question!r} cannot be filled in with the "
                            f"arguments {args}: {type(err).__name__} {err}") from None
    return BoundCall(op, definition, what, columns_args, args, named)


def steps(tree: exp.Expression, registry: Registry) -> list[Step]:
    """The statement's crowd operators as an ordered list of steps, innermost first: a table function, or a SELECT
    with its human calls (tuple operators, then group operators)."""
    out: list[Step] = []
    # the tree does not change while it is planned: its CTE scopes are read once
    scopes = CteScopes(tree) if isinstance(tree, TRAVERSABLES) and tree.find(exp.CTE) is not None else None
    unread = scopes.unread(table_function_inputs(tree, table_functions.names())) if scopes else []
    # DuckDB never runs a CTE nothing reads: neither do its crowd operators (they would publish and pay for rows
    # no result shows)
    done = {id(n) for cte in unread for n in crowd_nodes(cte, registry)}
    while len(out) <= 10_000:
        ready = _next_ready(tree, done, scopes, registry)
        if ready is None:
            return out
        if is_table_function(ready):
            out.append(Step(ready, ready.this.name.upper(), []))
            done.add(id(ready))
            continue
        calls = [n for n in crowd_nodes(ready, registry) if is_human(n, registry) and _scope_of(n) is ready]
        for call in calls:
            if any(crowd_nodes(arg, registry) for arg in call.expressions):
                raise ArgumentError(f"{call.name}: crowd operators cannot be nested inside its arguments")
        calls.sort(key=lambda c: registry.get(c.name).kind == "group")
        out.append(Step(ready, ", ".join(c.name for c in calls), calls))
        done.update(id(c) for c in calls)
    raise ArgumentError("too many crowd operators in one statement")  # pragma: no cover


def _next_ready(tree: exp.Expression, done: set[int], scopes: CteScopes | None,
                registry: Registry) -> exp.Expression | None:
    """A crowd node not ``done`` whose inputs hold no other pending crowd node: a table function, or a SELECT
    with human calls (``scopes``: the tree's CTE scopes)."""
    def pending(root: exp.Expression) -> list[exp.Expression]:
        return [n for n in crowd_nodes(root, registry) if id(n) not in done]

    nodes = pending(tree)
    if not nodes:
        return None
    for node in sorted(nodes, key=lambda n: -n.depth):
        if is_table_function(node):
            inner = [n for n in pending(node.this) if n is not node]
            if not inner and not _pending_ctes(node, done, scopes, registry):
                return node
            continue
        scope = node.find_ancestor(exp.Select)
        if scope is None:
            raise ArgumentError(f"{node.name}: a human operator must be used inside a SELECT")
        for arg in node.expressions:
            if crowd_nodes(arg, registry):
                raise ArgumentError(f"{node.name}: crowd operators cannot be nested inside its arguments")
        others = [n for n in pending(scope) if not (is_human(n, registry) and _scope_of(n) is scope)]
        if not others and not _pending_ctes(scope, done, scopes, registry):
            return scope
    raise ArgumentError("cannot order the crowd operators of this statement (circular dependency)")


def _scope_of(node: exp.Expression) -> exp.Select | None:
    return node.find_ancestor(exp.Select)


def referenced_ctes(node: exp.Expression, also: exp.Expression | None = None,
                    scopes: CteScopes | None = None) -> list[exp.CTE]:
    """CTEs visible from ``node`` that it (or the detached query ``also``) reads, transitively (``scopes``: the
    tree's CTE scopes when the caller has them)."""
    visible = scopes.visible(node) if scopes else visible_ctes(node)
    seen: dict[str, exp.CTE] = {}
    todo = [node] if also is None else [node, also]
    while todo:
        current = todo.pop()
        for table in current.find_all(exp.Table):
            name = table.name.lower()
            if not table.args.get("db") and name in visible and name not in seen:
                seen[name] = visible[name]
                todo.append(visible[name].this)
    return [c for c in visible.values() if c.alias_or_name.lower() in seen]


def _pending_ctes(node: exp.Expression, done: set[int], scopes: CteScopes | None, registry: Registry) -> bool:
    """Does ``node`` read a CTE (around it, not holding it) with a crowd operator not ``done`` yet?"""
    return any(id(n) not in done for cte in referenced_ctes(node, scopes=scopes) if not contains(cte, node)
               for n in crowd_nodes(cte.this, registry))


def answer_column(call: exp.Anonymous, value: exp.Expression) -> exp.Expression:
    """What replaces an operator call: ``value``, named after the operator when the call is itself an unaliased
    select item (as Postgres names a function's column), so the name never shows the planner's internals."""
    parent = call.parent
    if isinstance(parent, exp.Select) and any(e is call for e in parent.expressions):
        return exp.alias_(value, call.name.lower(), quoted=True)
    return value


def visible_ctes(node: exp.Expression) -> dict[str, exp.CTE]:
    """The CTEs ``node`` can read (see ``CteScopes``), keyed by lower-case name."""
    top = None
    for ancestor in ancestors(node):
        if isinstance(ancestor, TRAVERSABLES):
            top = ancestor
    if top is None or top.find(exp.CTE) is None:  # (a statement without WITH: no scopes to build)
        return {}
    return CteScopes(top).visible(node)


class CteScopes:
    """Which CTEs each node of a statement can read, by sqlglot's scope analysis (``Scope.cte_sources``: every
    enclosing WITH, the innermost winning; a CTE's body sees only the CTEs before it).

    sqlglot compares names as written and DuckDB ignores their case, so the scopes are built over a copy whose
    identifiers are lower-cased, and its CTEs are mapped back to the tree's own nodes (the copy has the same shape)."""

    def __init__(self, top: exp.Expression) -> None:
        self._top = top
        copy = top.copy()
        pairs = list(zip(top.walk(), copy.walk()))
        self._original = {id(c): o for o, c in pairs}
        self._counterpart = {id(o): c for o, c in pairs}
        for ident in copy.find_all(exp.Identifier):
            ident.set("this", ident.this.lower())
        try:
            self._scopes = {id(s.expression): s for s in traverse_scope(copy)}
        except sqlglot.errors.SqlglotError as err:
            raise SQLParseError(f"cannot tell which WITH names this query reads ({err}); name its CTEs apart from "
                                "its tables") from None

    def visible(self, node: exp.Expression) -> dict[str, exp.CTE]:
        counterpart = self._counterpart.get(id(node))
        scope = None if counterpart is None else next(
            (self._scopes[id(a)] for a in ancestors(counterpart) if id(a) in self._scopes), None)
        if scope is None:
            return {}
        out: dict[str, exp.CTE] = {}
        for name, source in scope.cte_sources.items():
            cte = source.expression.find_ancestor(exp.CTE) if isinstance(source, Scope) else None
            if cte is not None and id(cte) in self._original:
                out[name] = self._original[id(cte)]
        return out

    def unread(self, inputs: list[exp.Column]) -> list[exp.CTE]:
        """The CTEs of the statement that nothing reads: not the statement, nor a CTE it reads (transitively).
        ``inputs``: table-function inputs, which name a CTE as a column argument."""
        refs = [t for t in self._top.find_all(exp.Table) if not t.args.get("db")] + inputs
        ctes = list(self._top.find_all(exp.CTE))
        read: set[int] = set()
        changed = True
        while changed:
            changed = False
            for ref in refs:
                if any(isinstance(a, exp.CTE) and id(a) not in read for a in ancestors(ref.parent)):
                    continue  # inside a CTE not (yet) known to be read
                cte = self.visible(ref).get(ref.name.lower())
                if cte is not None and id(cte) not in read:
                    read.add(id(cte))
                    changed = True
        return [c for c in ctes if id(c) not in read]


def ancestors(node: exp.Expression):
    current = node
    while current is not None:
        yield current
        current = current.parent


def contains(outer: exp.Expression, inner: exp.Expression) -> bool:
    return any(a is outer for a in ancestors(inner))
