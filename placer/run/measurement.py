"""Measurement: what one executor run of a plan measured (latency, throughput, per-partition times)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class PartitionTime:
    """Median time of one partition per request (the cost model's partition correction uses these)."""

    partition: str
    target: str
    ops: tuple[str, ...]
    median_ms: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ops"] = list(self.ops)
        return d


@dataclass(frozen=True)
class Measurement:
    """Latency percentiles (ms), throughput (req/s), per-partition medians, wall time, request count.

    ``latency_*_ms`` are per request: from its submission to its outputs (for the pipeline
    executor, submission = entering the first stage's queue). ``throughput_rps`` = requests /
    ``wall_s``, ``wall_s`` from the first submission to the last result (warm-up excluded).
    """

    executor: str
    n_requests: int
    wall_s: float
    latency_p50_ms: float
    latency_p90_ms: float
    latency_mean_ms: float
    latency_min_ms: float
    throughput_rps: float
    partitions: tuple[PartitionTime, ...] = ()
    n_failed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["partitions"] = [p.to_dict() for p in self.partitions]
        d["format"] = "placer.measurement"
        d["version"] = 1
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Measurement":
        parts = tuple(
            PartitionTime(p["partition"], p["target"], tuple(p["ops"]), float(p["median_ms"]), int(p["n"]))
            for p in d.get("partitions", ())
        )
        keys = {f for f in Measurement.__dataclass_fields__} - {"partitions"}
        return Measurement(partitions=parts, **{k: d[k] for k in keys if k in d})

    @staticmethod
    def from_json(text: str) -> "Measurement":
        return Measurement.from_dict(json.loads(text))

    def summary(self) -> str:
        lines = [
            f"{self.executor}: {self.n_requests} requests in {self.wall_s:.3f} s, "
            f"latency p50 {self.latency_p50_ms:.3f} ms p90 {self.latency_p90_ms:.3f} ms, "
            f"throughput {self.throughput_rps:.1f} req/s"
            + (f", {self.n_failed} failed" if self.n_failed else "")
        ]
        for p in self.partitions:
            lines.append(
                f"  {p.partition:>4} {p.target:<24} {len(p.ops):>4} ops  median {p.median_ms:8.3f} ms")
        return "\n".join(lines)


def summarize(
    executor: str,
    latencies_ms: Sequence[float],
    wall_s: float,
    partitions: Sequence[Any] = (),
    partition_times_ms: Mapping[str, Sequence[float]] | None = None,
    n_failed: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> Measurement:
    """Build a Measurement from raw per-request latencies and per-partition samples."""
    lat = np.asarray(list(latencies_ms), dtype=np.float64)
    n = int(len(lat)) + int(n_failed)
    pts = []
    partition_times_ms = partition_times_ms or {}
    for p in partitions:
        samples = partition_times_ms.get(p.id, ())
        if len(samples):
            pts.append(PartitionTime(p.id, p.target, tuple(p.ops), float(np.median(samples)), len(samples)))
    return Measurement(
        executor=executor,
        n_requests=n,
        wall_s=float(wall_s),
        latency_p50_ms=float(np.percentile(lat, 50)) if len(lat) else float("nan"),
        latency_p90_ms=float(np.percentile(lat, 90)) if len(lat) else float("nan"),
        latency_mean_ms=float(lat.mean()) if len(lat) else float("nan"),
        latency_min_ms=float(lat.min()) if len(lat) else float("nan"),
        throughput_rps=float(len(lat) / wall_s) if wall_s > 0 else float("nan"),
        partitions=tuple(pts),
        n_failed=int(n_failed),
        extra=dict(extra or {}),
    )
