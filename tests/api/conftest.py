"""Reuse tests/materialize's helpers (mz_models), as tests/run does."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "materialize"))
