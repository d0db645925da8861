"""Columns a query equates share the strictest verdict among them: written once, for the allow list
(``crowddb.lineage``) and for the roles a crowd call's sources carry (``crowddb.planner``).

A join partner's copy of a zip is the person's zip, of a key is the key: ``JOIN ... ON o.zip = p.zip`` (or USING,
or a WHERE equality; transitively along chains) makes ``o.zip`` as protected as ``p.zip``."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

Column = TypeVar("Column", bound=Hashable)
Verdict = TypeVar("Verdict")


def stricter(pairs: Iterable[tuple[Column, Column]], verdict: Callable[[Column], Verdict],
             level: Callable[[Verdict], int]) -> dict[Column, Verdict]:
    """For every column of ``pairs`` (equalities, in the query's order) whose class of equated columns holds a
    stricter verdict than its own: that class's strictest verdict (the higher ``level``; on a tie, the verdict of
    the column met first in ``pairs``). Columns whose own verdict is already the strictest are left out."""
    parent: dict[Column, Column] = {}

    def find(x: Column) -> Column:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]  # path halving
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra
    classes: dict[Column, list[Column]] = {}
    for x in parent:  # insertion order: the order the columns were met
        classes.setdefault(find(x), []).append(x)
    out: dict[Column, Verdict] = {}
    for members in classes.values():
        if len(members) < 2:
            continue
        verdicts = [verdict(m) for m in members]
        worst = max(verdicts, key=level)  # max keeps the first of equal levels
        for member, own in zip(members, verdicts):
            if level(worst) > level(own):
                out[member] = worst
    return out
