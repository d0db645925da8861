"""Every snippet of README.md and docs/*.md runs, and prints what the page says it prints.

A page's ```python blocks run in order in one namespace, in a fresh folder (files a snippet makes land there). A
```text block that follows a python block with only prose between them is what that block prints: compared line by
line (trailing blanks ignored); a line holding only ``...`` stands for any number of lines. A ```console block holds
shell commands (``$ crowddb ...``) run in the same folder, each followed by what it prints, compared the same way.
Other blocks (```sql fragments, ```toml) are illustrations and are not run.

To write a page's outputs after changing it: ``python tests/project/test_docs.py docs/sql.md`` (then read the diff)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)


@dataclass
class Block:
    lang: str
    code: str
    start: int  # offset of the code in the page
    end: int
    prose_before: str  # the page's text between the previous block and this one


def blocks(text: str) -> list[Block]:
    out, last = [], 0
    for m in FENCE.finditer(text):
        out.append(Block(m.group(1), m.group(2), m.start(2), m.end(2), text[last:m.start()]))
        last = m.end()
    return out


def matches(expected: str, actual: str) -> bool:
    """Line by line, trailing blanks ignored; a ``...`` line matches any number of lines."""
    want = [line.rstrip() for line in expected.rstrip("\n").splitlines()]
    got = [line.rstrip() for line in actual.rstrip("\n").splitlines()]
    pattern = "".join("(?:[^\n]*\n)*?" if line == "..." else re.escape(line) + "\n" for line in want)
    return re.fullmatch(pattern, "".join(line + "\n" for line in got)) is not None


def run_console(code: str, cwd: Path) -> list[tuple[str, str, str]]:
    """(command, expected, actual) per ``$ `` line of a console block."""
    out, command, expected = [], None, []
    for line in [*code.splitlines(), "$ "]:
        if line.startswith("$ "):
            if command:
                done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=600,
                                      env={**os.environ, "COLUMNS": "120"})
                out.append((command, "\n".join(expected), done.stdout + done.stderr))
            command, expected = line[2:].strip(), []
        else:
            expected.append(line)
    return out


@dataclass
class Check:
    what: str
    block: Block  # the block holding the stated output
    expected: str
    actual: str


def run_page(page: Path, cwd: Path) -> list[Check]:
    """Run a page's snippets in ``cwd``; one Check per output the page states."""
    text = page.read_text()
    checks, namespace, previous = [], {"__name__": "__main__"}, None
    here = os.getcwd()
    os.chdir(cwd)
    try:
        for block in blocks(text):
            line = text[:block.start].count("\n") + 1
            if block.lang == "python":
                stdout = io.StringIO()
                with contextlib.redirect_stdout(stdout):
                    exec(compile(block.code, f"{page.name}:{line}", "exec"), namespace)
                previous = stdout.getvalue()
            elif block.lang == "text" and previous is not None and "```" not in block.prose_before:
                checks.append(Check(f"{page.name}: the block before line {line}", block, block.code, previous))
                previous = None
            elif block.lang == "console":
                ran = run_console(block.code, cwd)
                actual = "".join(f"$ {c}\n{a.rstrip()}\n" for c, _, a in ran)
                checks.append(Check(f"{page.name}: the console block at line {line}", block, block.code, actual))
                previous = None
            else:
                previous = None
    finally:
        os.chdir(here)
    return checks


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_snippets_run_and_print_what_the_page_says(page, tmp_path, monkeypatch):
    monkeypatch.setenv("CROWDDB_HISTORY", str(tmp_path / "history"))
    for check in run_page(page, tmp_path):
        assert matches(check.expected, check.actual), (
            f"{check.what} prints\n{check.actual}\nbut the page says\n{check.expected}")


def test_every_page_has_a_runnable_snippet():
    for page in PAGES:
        langs = {b.lang for b in blocks(page.read_text())}
        assert langs & {"python", "console"}, f"{page.name} shows no snippet that runs"


def test_matches():
    assert matches("a\n...\nd", "a\nb\nc\nd") and matches("a\n...\nd", "a\nd") and not matches("a\nd", "a\nb\nd")
    assert matches("x  \n", "x") and not matches("x", "y")


def _update(page: Path) -> None:  # pragma: no cover - a maintainer's tool
    """Rewrite the page's stated outputs with what its snippets print now (read the diff before committing)."""
    import tempfile

    text = page.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        checks = run_page(page, Path(tmp))
    for check in reversed(checks):
        new = check.actual if check.actual.endswith("\n") else check.actual + "\n"
        text = text[:check.block.start] + new + text[check.block.end:]
    page.write_text(text)
    print(f"{page}: {len(checks)} outputs written")


if __name__ == "__main__":  # pragma: no cover
    for name in sys.argv[1:]:
        _update(Path(name).resolve())
