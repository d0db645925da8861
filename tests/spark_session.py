"""The ``spark`` fixture of tests/spark/: one local Spark session for every Spark test (starting one takes seconds:
it is shared by the whole run).

Skipped, with the reason in the summary, when PySpark (the ``spark`` extra) or Java is missing; under CI (``CI`` set to
a true value) that fails instead, as the browser tests do: CI installs both and must run these tests. (Not a
conftest.py in tests/spark/: a second module named conftest would shadow tests/conftest.py for later test files.)"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason}; under CI the Spark tests must run, not skip")
    pytest.skip(reason)


def _java() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and (Path(home) / "bin" / "java").exists()))


@pytest.fixture(scope="session")
def spark():
    try:
        import pyspark  # noqa: F401
    except ImportError:
        _missing('PySpark is not installed (pip install -e ".[spark]")')
    if not _java():
        _missing("Java is not installed (PySpark needs Java 17)")
    from pyspark.sql import SparkSession

    # the executors' Python workers must be this interpreter (the one with crowddb and pyarrow installed)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[2]").appName("crowddb-tests")
               .config("spark.driver.memory", "2g")  # (1g: a late broadcast in the whole suite ran out of heap)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
