"""Fixtures of the reliability tests: the good base inputs and the corpus built from them (once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rel_support import HERE, ROOT  # noqa: F401


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
