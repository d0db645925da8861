"""Where the project's shared data sets live: ../shared/data beside the repository (as on CI), or $CROWDDB_SHARED."""

from __future__ import annotations

import os
from pathlib import Path

SHARED = Path(os.environ.get("CROWDDB_SHARED", Path(__file__).resolve().parents[2] / "shared"))
DATA = SHARED / "data"
ADULT = DATA / "adult" / "adult.data"
ADULT_HIERARCHIES = DATA / "adult" / "hierarchies"
CROWD = DATA / "crowd"
