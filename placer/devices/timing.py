"""What timing a compiled model takes and gives: :class:`TimingConfig` in, :class:`TimingStats` out.

The data types of a measurement, next to :class:`~placer.devices.base.CompiledModel`: a compiled
model that times itself (``time_run(feeds, config) -> TimingStats``: a remote TVM RPC target, on the
device's clock) returns them, and the profiler's loop (:mod:`placer.profile.timing`, which
re-exports them) produces them. See that module for how a measurement is taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["TimingConfig", "TimingStats", "stats_from_samples"]


@dataclass(frozen=True)
class TimingConfig:
    """How long to sample one measurement (defaults keep resnet50 x 3 targets < 3 minutes)."""

    warmup_runs: int = 1
    warmup_s: float = 0.02
    min_samples: int = 5
    hard_min_samples: int = 3
    max_samples: int = 2000
    batch_s: float = 0.02
    rel_tol: float = 0.025
    min_time_s: float = 0.03
    max_time_s: float = 0.4
    #: a measurement taken while other processes keep the machine busy is taken again up to this many
    #: times in all (profile campaigns; the least contended one is kept and flagged if still contended)
    contended_attempts: int = 3

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: Mapping | None) -> TimingConfig:
        if not d:
            return TimingConfig()
        fields = TimingConfig.__dataclass_fields__
        return TimingConfig(**{k: v for k, v in d.items() if k in fields})


@dataclass(frozen=True)
class TimingStats:
    median_ms: float
    p10_ms: float
    p90_ms: float
    mad_ms: float
    mean_ms: float
    n: int
    warmup_n: int
    sample_s: float
    stable: bool

    def to_dict(self) -> dict:
        return asdict(self)


def stats_from_samples(samples_ns, warmup_n: int = 0, sample_s: float = 0.0, stable: bool = True) -> TimingStats:
    a = np.asarray(samples_ns, dtype=np.float64) / 1e6
    med = float(np.median(a))
    return TimingStats(
        median_ms=med,
        p10_ms=float(np.percentile(a, 10)),
        p90_ms=float(np.percentile(a, 90)),
        mad_ms=float(np.median(np.abs(a - med))),
        mean_ms=float(a.mean()),
        n=int(a.size),
        warmup_n=warmup_n,
        sample_s=sample_s,
        stable=stable,
    )
