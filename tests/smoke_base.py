"""Smoke test of the base install (``pip install crowddb``, no extras): what a new user tries first works without
OpenDP, the web stack, Polars or the test tools. ``.ci/run`` runs it in a fresh virtual environment holding only the
base install; ``tests/project/test_base_install.py`` runs it with the extras' modules blocked. Prints one line per check."""

from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

import crowddb
from crowddb.datasets import adult_path
from crowddb.demo import ROLES, run_demo

EXTRAS = ("opendp", "starlette", "uvicorn", "jinja2", "multipart", "selenium", "httpx", "polars", "crowdkit",
          "sklearn", "matplotlib", "mpmath", "pytest", "hypothesis")


def importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok' if ok else 'FAILED'}: {name}" + (f" ({detail})" if detail else ""), flush=True)
    if not ok:
        sys.exit(1)


def main() -> None:
    print(f"extras importable here: {[m for m in EXTRAS if importable(m)] or 'none'}")
    with tempfile.TemporaryDirectory() as tmp:
        run_demo(str(Path(tmp) / "demo.duckdb"), rows=300, seed=7)
    check("crowddb demo", True)
    with crowddb.connect(seed=7, progress=False) as db:
        db.load_csv("adult", adult_path(), **ROLES)
        released = db.sql("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age >= 30), k := 10) LIMIT 5").fetchall()
        check("ANONYMIZE", len(released) == 5)
        jobs = db.sql("SELECT id, getposition(*, k := 10) AS job FROM adult WHERE age < 30 LIMIT 200")
        check("getposition", len(jobs.fetchall()) == 200)
        answers = pd.DataFrame({"task": np.repeat(np.arange(30), 3), "worker": np.tile(["a", "b", "c"], 30),
                                "label": np.where(np.arange(90) % 5 == 0, "no", "yes")})
        db.load_frame("answers", answers)
        db.set_privacy_budget("answers", epsilon=100, delta=1e-6, composition="zcdp")
        for seed in ("seed := 1, ", ""):  # without a seed: the fallback sampler on os.urandom
            rows = db.sql(f"SELECT * FROM TRUTH_DISCOVER(answers, object := 'task', source := 'worker', "
                          f"value := 'label', method := 'mv', perturb := 'rr', {seed}epsilon := 1.0)").fetchall()
            check(f"TRUTH_DISCOVER perturb, {'seeded' if seed else 'unseeded'}", len(rows) == 30)
        report = db.privacy_report("answers")
        check("privacy_report", len(report) >= 2)
        claims = pd.DataFrame({"object": np.repeat(["a", "b"], 8), "source": np.tile([f"s{i}" for i in range(8)], 2),
                               "value": np.r_[np.linspace(1, 2, 8), np.linspace(5, 6, 8)]})
        synth = db.sql("SELECT * FROM PRIVATE_SYNTH(claims, object := 'object', source := 'source', value := 'value', "
                       "m := 5, seed := 2)").fetchall()
        check("PRIVATE_SYNTH", len(synth) > 0)
    print("base install: all checks passed")


if __name__ == "__main__":
    main()
