"""The store is the one home of what crowddb stores: no module outside ``crowddb/store`` names a crowddb_* table in
its code (docstrings and comments aside), so every read and write of the catalog goes through one place.

The demo is the one exception: it shows a user the catalog with the SQL a user would write."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import crowddb

PACKAGE = Path(crowddb.__file__).resolve().parent
USERS_OF_SQL = {"demo.py"}  # prints crowddb_* tables as a user would query them


def _strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_only_the_store_names_catalog_tables():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "store" or str(relative) in USERS_OF_SQL:
            continue
        for line, text in _strings(path):
            if re.search(r"(?<![_\w.])crowddb_[a-z]", text):  # (.crowddb_history is a file)
                offenders.append(f"{relative}:{line}: {text[:70]!r}")
    assert offenders == []


def test_the_check_sees_a_catalog_table_in_code(tmp_path):
    """The scan itself: a SQL string naming crowddb_hits is found, a docstring naming it is not."""
    sample = tmp_path / "sample.py"
    sample.write_text('"""Reads crowddb_hits."""\nQ = "SELECT * FROM crowddb_hits"\nP = "__crowddb_method"\n')
    found = [(line, text) for line, text in _strings(sample) if re.search(r"(?<![_\w])crowddb_[a-z]", text)]
    assert found == [(2, "SELECT * FROM crowddb_hits")]
