"""Locate files shipped beside the package: ``udfs/`` and ``sql/`` (in a wheel under crowddb/_shipped/)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def shipped_dir(name: str) -> Path:
    """The shipped folder ``name`` ('udfs' or 'sql'): inside an installed wheel, or the repository root when editable."""
    for candidate in (_PACKAGE_DIR / "_shipped" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"crowddb is installed without its {name!r} folder")


def catalog_ddl() -> str:
    """The catalog DDL (sql/catalog.sql)."""
    return (shipped_dir("sql") / "catalog.sql").read_text(encoding="utf-8")
