"""Plain helpers of the reliability tests (a uniquely named module: ``from conftest import`` would
resolve to whichever folder's conftest comes first on sys.path)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child ``python``: this checkout and this folder first on PYTHONPATH."""
    env = dict(os.environ)
    parts = [str(ROOT), str(HERE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.update(extra)
    return env


def python() -> str:
    return sys.executable
