"""Fixtures of the reliability tests: the good base inputs and the corpus built from them (once)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="session")
def corpus_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("reliability")


@pytest.fixture(scope="session")
def base(corpus_root):
    from corpus import build_base

    return build_base(corpus_root)


@pytest.fixture(scope="session")
def cases(corpus_root, base):
    from corpus import build_corpus

    return build_corpus(corpus_root, base)


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child ``python``: this checkout and this folder first on PYTHONPATH."""
    env = dict(os.environ)
    parts = [str(ROOT), str(HERE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.update(extra)
    return env


def python() -> str:
    return sys.executable
