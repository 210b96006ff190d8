"""Fixtures for the profiler tests (real runtimes; a fast timing config keeps the folder short)."""

from __future__ import annotations

import pytest
from _profhelpers import FAST

from placer.profile import TimingConfig


@pytest.fixture(scope="session")
def fast_timing() -> TimingConfig:
    return FAST


@pytest.fixture(scope="session")
def squeezenet():
    from placer.zoo import load_graph

    return load_graph("zoo:squeezenet")


@pytest.fixture(scope="session")
def tiny():
    from placer.zoo import load_graph

    return load_graph("zoo:tiny")
