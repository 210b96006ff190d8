"""Links: what handing a tensor from one target to another costs, as a model.

A :class:`LinkFit` prices one ordered pair of targets, ``transfer_ms(n) = latency_ms + n *
ms_per_byte``; a :class:`LinkModel` holds the fits of a set of targets (same target: 0) and
prices a partition boundary (:meth:`LinkModel.boundary_ms`: the latency once, the bytes of every
tensor crossing it). :func:`fit_link` is the non-negative weighted least squares both the
profiler and the cost models fit them with.

Where the numbers come from: real targets are measured by the profiler
(:mod:`placer.profile.links`: the hand-off between two runtimes and what a cut costs one runtime,
stored in the profile store, :meth:`placer.profile.store.ProfileStore.link_model`); simulated
targets take theirs from their spec (:func:`placer.devices.sim.spec_link_fits`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placer.devices.base import TargetSpec
from placer.errors import ProfileError


@dataclass(frozen=True)
class LinkFit:
    """``transfer_ms(n) = latency_ms + n * ms_per_byte`` from ``src`` to ``dst`` (target names)."""

    src: str
    dst: str
    latency_ms: float
    ms_per_byte: float
    points: tuple = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    def transfer_ms(self, nbytes: float) -> float:
        return self.latency_ms + max(float(nbytes), 0.0) * self.ms_per_byte

    @property
    def gb_per_s(self) -> float:
        return math.inf if self.ms_per_byte <= 0 else 1.0 / (self.ms_per_byte * 1e6)

    def to_dict(self) -> dict:
        return {"src": self.src, "dst": self.dst, "latency_ms": self.latency_ms, "ms_per_byte": self.ms_per_byte,
                "points": list(self.points), "meta": dict(self.meta)}

    @staticmethod
    def from_dict(d: Mapping) -> LinkFit:
        return LinkFit(d["src"], d["dst"], float(d["latency_ms"]), float(d["ms_per_byte"]),
                       tuple(d.get("points", ())), dict(d.get("meta", {})))


class LinkModel:
    """Transfer costs between targets (by canonical target name); same target = 0."""

    def __init__(self, fits: Mapping[tuple[str, str], LinkFit] | Iterable[LinkFit], overhead_ms: Mapping[str, float] | None = None):
        if isinstance(fits, Mapping):
            self.fits = dict(fits)
        else:
            self.fits = {(f.src, f.dst): f for f in fits}
        self.overhead_ms = dict(overhead_ms or {})

    @staticmethod
    def _name(t) -> str:
        if hasattr(t, "name"):
            return t.name
        try:
            return TargetSpec.parse(str(t)).name
        except Exception:
            return str(t)

    def fit(self, src, dst) -> LinkFit | None:
        return self.fits.get((self._name(src), self._name(dst)))

    def transfer_ms(self, nbytes: float, src, dst) -> float:
        """Cost (ms) of handing ``nbytes`` from ``src`` to ``dst`` at a partition boundary."""
        s, d = self._name(src), self._name(dst)
        if s == d:
            return 0.0
        f = self.fits.get((s, d))
        if f is None:
            raise ProfileError(f"no link measured from {s} to {d} (have: {', '.join(f'{a}->{b}' for a, b in self.fits) or 'none'})")
        return f.transfer_ms(nbytes)

    def boundary_ms(self, sizes: Sequence[float], src, dst) -> float:
        """One boundary carrying several tensors: latency once, bytes for each tensor."""
        s, d = self._name(src), self._name(dst)
        if s == d or not sizes:
            return 0.0
        f = self.fits.get((s, d))
        if f is None:
            raise ProfileError(f"no link measured from {s} to {d}")
        return f.latency_ms + sum(max(float(n), 0.0) for n in sizes) * f.ms_per_byte

    def pairs(self) -> list[tuple[str, str]]:
        return sorted(self.fits)

    def to_dict(self) -> dict:
        return {"fits": [f.to_dict() for f in self.fits.values()], "overhead_ms": dict(self.overhead_ms)}

    @staticmethod
    def from_dict(d: Mapping) -> LinkModel:
        return LinkModel([LinkFit.from_dict(f) for f in d.get("fits", [])], d.get("overhead_ms", {}))

    def __repr__(self) -> str:
        body = ", ".join(f"{a}->{b}: {f.latency_ms * 1e3:.1f}us+{f.ms_per_byte * 1e9:.2f}us/MB" for (a, b), f in self.fits.items())
        return f"LinkModel({body})"


# ---- fitting ------------------------------------------------------------------------------------
def fit_link(nbytes: Sequence[float], ms: Sequence[float], sigma_ms: Sequence[float] | None = None) -> tuple[float, float]:
    """Non-negative weighted least squares of ``ms ~ latency + nbytes * slope`` -> (latency, slope).

    ``sigma_ms``: the noise scale of each point (weights 1/sigma); default max(|ms|, 1 us), a
    relative fit. The hand-off is a difference of timings, so its noise grows with the size of
    what was timed: :func:`placer.profile.links.fit_points` passes 2% of the chain time + 2 us. Both coefficients
    are >= 0: the unconstrained solution if feasible, else the best one-coefficient model.
    """
    x = np.asarray(nbytes, dtype=np.float64)
    y = np.asarray(ms, dtype=np.float64)
    if x.size == 0:
        raise ProfileError("cannot fit a link without points")
    if sigma_ms is None:
        w = 1.0 / np.maximum(np.abs(y), 1e-3)
    else:
        w = 1.0 / np.maximum(np.asarray(sigma_ms, dtype=np.float64), 1e-6)
    xs = x / max(float(x.max()), 1.0)  # scale the byte column for conditioning

    def sse(a, b):
        return float(np.sum((w * (a + b * xs - y)) ** 2))

    candidates = []
    if x.size >= 2 and np.ptp(x) > 0:
        A = np.stack([np.ones_like(xs), xs], axis=1) * w[:, None]
        (a, b), *_ = np.linalg.lstsq(A, w * y, rcond=None)
        if a >= 0 and b >= 0:
            candidates.append((sse(a, b), a, b))
        # slope only
        b1 = max(float(np.sum(w * w * xs * y) / max(np.sum(w * w * xs * xs), 1e-30)), 0.0)
        candidates.append((sse(0.0, b1), 0.0, b1))
    a0 = max(float(np.sum(w * w * y) / np.sum(w * w)), 0.0)
    candidates.append((sse(a0, 0.0), a0, 0.0))
    _, a, b = min(candidates, key=lambda c: c[0])
    return float(a), float(b) / max(float(x.max()), 1.0)
