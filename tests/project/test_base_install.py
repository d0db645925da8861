"""The base install (no extras) works: ``tests/smoke_base.py`` in a process where every extra's module is blocked
(``import opendp`` raises ImportError, as on a fresh ``pip install crowddb``). ``.ci/run`` also runs it in a real
virtual environment holding only the base install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SMOKE = Path(__file__).resolve().parents[1] / "smoke_base.py"
BLOCK = ("opendp", "starlette", "uvicorn", "jinja2", "multipart", "python_multipart", "selenium", "httpx", "polars",
         "crowdkit", "sklearn", "matplotlib", "mpmath", "hypothesis")


def test_smoke_without_extras(tmp_path):
    code = (f"import sys, runpy\nfor m in {BLOCK!r}:\n    sys.modules[m] = None\n"
            f"runpy.run_path({str(SMOKE)!r}, run_name='__main__')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "extras importable here: ['pytest']" in lines  # everything else blocked: the base install's modules
    assert lines[-1] == "base install: all checks passed"
    assert [line for line in lines if line.startswith("FAILED")] == []
    assert sum(line.startswith("ok: ") for line in lines) == 7
