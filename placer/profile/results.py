"""What a profiling campaign did: outcome counts per target and in all, the rows it stored.

Filled by the task engine (:mod:`placer.profile.engine`) and the campaigns
(:mod:`placer.profile.campaign`, which re-exports both classes).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from placer.profile.store import Measurement

__all__ = ["CampaignResult", "TargetTotals"]


@dataclass
class TargetTotals:
    """Per target: outcome counts by kind and the sums a summary table shows."""

    name: str
    counts: Counter = field(default_factory=Counter)  # (kind, outcome) -> n; outcome in measured/cached/unsupported/failed
    ops_total: int = 0  # unique signatures
    ops_unsupported: int = 0  # ops of the graph (not signatures) that cannot run here
    op_ms: float = 0.0  # sum of net op costs over the graph's supported ops
    overhead_ms: float | None = None
    whole_model_ms: float | None = None
    wall_s: float = 0.0

    def n(self, outcome: str, kind: str | None = "op") -> int:
        return sum(v for (k, o), v in self.counts.items() if o == outcome and (kind is None or k == kind))

    def to_dict(self) -> dict:
        return {
            "name": self.name, "counts": {f"{k}:{o}": v for (k, o), v in sorted(self.counts.items())},
            "ops_total": self.ops_total, "ops_unsupported": self.ops_unsupported, "op_ms": self.op_ms,
            "overhead_ms": self.overhead_ms, "whole_model_ms": self.whole_model_ms, "wall_s": self.wall_s,
        }


@dataclass
class CampaignResult:
    """What a campaign did: counts over (key, target) measurements of every kind, wall time, per target."""

    measured: int = 0
    cached: int = 0
    unsupported: int = 0
    failed: int = 0
    wall_s: float = 0.0
    per_target: dict[str, TargetTotals] = field(default_factory=dict)
    unique_signatures: int = 0
    links_measured: int = 0
    links_cached: int = 0
    store_path: str = ""
    problems: list[str] = field(default_factory=list)  # worker start failures and such (not stored)
    remeasured: int = 0  # measurements taken again because other processes kept the machine busy
    contended: int = 0  # rows stored although every attempt was contended (flagged; re-measured next time)
    second_windows: int = 0  # rows measured again in a second window (the lower median kept)
    slow_first_windows: int = 0  # ... whose first window was over 1.25x the second
    #: one-thread rows left at one window: the second windows the target had taken mostly agreed with
    #: their first ones (:data:`placer.profile.engine.ONE_THREAD_PROBATION`)
    steady: int = 0
    #: repeats left out past the caller's deadline (disturbed rows kept flagged; second windows, whose
    #: rows are marked due: :data:`placer.profile.store.WINDOW_DUE`)
    hurried: int = 0
    #: second windows taken on stored rows whose second window an earlier campaign's hurry point left out
    windows_due: int = 0
    #: disturbed measurements kept at their first attempt once re-takes had stopped escaping the
    #: disturbance (:meth:`placer.profile.engine.Engine._futile`; flagged, measured again next time)
    futile: int = 0
    #: this campaign's session id (in every row it stored) and the probes it recorded (placer.profile.drift)
    session: str = ""
    probes: int = 0
    #: stored rows a probe contradicted beyond noise, measured again and replaced
    refreshed: int = 0
    results: dict[tuple[str, str], Measurement] = field(default_factory=dict)  # (key, target name) -> row

    def to_dict(self) -> dict:
        return {
            "measured": self.measured, "cached": self.cached, "unsupported": self.unsupported, "failed": self.failed,
            "wall_s": self.wall_s, "unique_signatures": self.unique_signatures, "links_measured": self.links_measured,
            "links_cached": self.links_cached, "store": self.store_path, "problems": list(self.problems),
            "remeasured": self.remeasured, "contended": self.contended,
            "second_windows": self.second_windows, "slow_first_windows": self.slow_first_windows,
            "steady": self.steady, "hurried": self.hurried, "windows_due": self.windows_due,
            "futile": self.futile, "session": self.session, "probes": self.probes,
            "refreshed": self.refreshed,
            "per_target": {k: v.to_dict() for k, v in self.per_target.items()},
        }
