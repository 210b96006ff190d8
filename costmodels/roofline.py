"""Roofline latency model: for targets known only by their spec, and as a prior for the others.

An op takes ``call_overhead_ms + max(flops / peak, bytes / bandwidth) / efficiency[family]``: the
slower of compute and memory traffic at the target's peak rates, derated by how well the runtime's
kernels of that op family reach peak, plus the fixed cost of one call.

For a ``sim:`` target every parameter comes from its spec and :meth:`RooflineModel.fit` only
validates them (it accepts empty data). For a measured target the parameters left as ``None`` are
estimated from the measurements: the call overhead from the fastest ops, peak FLOP/s and bandwidth
from the best-performing compute- and memory-bound ops, and one efficiency per family as the
median ratio of ideal to measured time. :class:`costmodels.op_model.OpLatencyModel` uses the
log of this estimate as one of its features.

Examples
--------
>>> rm = RooflineModel(peak_gflops=100.0, mem_bandwidth_gbs=10.0, call_overhead_ms=0.005).fit([], [])
>>> sig = {"op_type": "Relu", "inputs": [[(1, 64, 56, 56), "float32"]], "outputs": [[(1, 64, 56, 56), "float32"]]}
>>> round(float(rm.predict([sig])[0]), 4)  # 2 x 802816 bytes at 10 GB/s / 0.5 + 5 us
0.3261
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from costmodels._common import as_features, check_xy
from costmodels.features import FAMILY_NAMES, FEATURE_NAMES

_COL = {n: i for i, n in enumerate(FEATURE_NAMES)}
_FAM_COLS = [_COL[f"family={f}"] for f in FAMILY_NAMES]


def work_of(F: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flops, bytes moved, family index) per row of a feature matrix."""
    flops = np.expm1(F[:, _COL["log_flops"]])
    nbytes = (np.expm1(F[:, _COL["log_bytes_in"]]) + np.expm1(F[:, _COL["log_bytes_out"]])
              + np.expm1(F[:, _COL["log_weight_bytes"]]))
    fam = np.argmax(F[:, _FAM_COLS], axis=1)
    return flops, nbytes, fam


class RooflineModel(RegressorMixin, BaseEstimator):
    """Roofline latency (ms) of an op from its FLOPs and bytes.

    Parameters
    ----------
    peak_gflops, mem_bandwidth_gbs : float or None
        Peak compute (GFLOP/s) and memory bandwidth (GB/s); ``None`` = estimate in :meth:`fit`.
    efficiency : mapping family -> float or None
        Share of the roofline each op family reaches (0..1]; families missing here are fitted
        (or take ``default_efficiency`` when there is no data).
    call_overhead_ms : float or None
        Fixed cost of one call; ``None`` = estimate in :meth:`fit`.
    default_efficiency : float
        Efficiency of families with neither a given value nor data.
    """

    def __init__(self, peak_gflops: float | None = None, mem_bandwidth_gbs: float | None = None,
                 efficiency: Mapping[str, float] | None = None, call_overhead_ms: float | None = None,
                 default_efficiency: float = 0.5):
        self.peak_gflops = peak_gflops
        self.mem_bandwidth_gbs = mem_bandwidth_gbs
        self.efficiency = efficiency
        self.call_overhead_ms = call_overhead_ms
        self.default_efficiency = default_efficiency

    def fit(self, X: Any, y: Any = None) -> "RooflineModel":
        """Estimate the parameters left as ``None`` from measured latencies ``y`` (ms).

        Rows with a non-finite latency (unsupported) are ignored. With no data, every parameter
        must be given (a spec-only target).
        """
        F = as_features(X) if len(X) else np.zeros((0, len(FEATURE_NAMES)))
        y = check_xy(F, y if y is not None else np.zeros(len(F)))
        ok = np.isfinite(y) & (y > 0)
        F, y = F[ok], y[ok]
        flops, nbytes, fam = work_of(F)
        if self.call_overhead_ms is not None:
            overhead = float(self.call_overhead_ms)
        elif len(y):
            overhead = float(0.8 * np.quantile(y, 0.02))
        else:
            raise ValueError("RooflineModel: call_overhead_ms is None and there is no data to fit it")
        net_s = np.maximum(y - overhead, 0.05 * y) / 1e3
        compute = np.isin(fam, [FAMILY_NAMES.index("conv"), FAMILY_NAMES.index("matmul")]) & (flops > 0)
        if self.peak_gflops is not None:
            peak = float(self.peak_gflops) * 1e9
        elif compute.any():
            peak = float(np.quantile(flops[compute] / net_s[compute], 0.95))
        elif len(y) == 0:
            raise ValueError("RooflineModel: peak_gflops is None and there is no data to fit it")
        else:
            peak = 1e10
        memory = ~compute & (nbytes > 0)
        if self.mem_bandwidth_gbs is not None:
            bw = float(self.mem_bandwidth_gbs) * 1e9
        elif memory.any():
            bw = float(np.quantile(nbytes[memory] / net_s[memory], 0.95))
        elif len(y) == 0:
            raise ValueError("RooflineModel: mem_bandwidth_gbs is None and there is no data to fit it")
        else:
            bw = 1e10
        ideal_s = np.maximum(flops / peak, nbytes / bw)
        given = dict(self.efficiency or {})
        eff = {}
        for i, name in enumerate(FAMILY_NAMES):
            rows = (fam == i) & (ideal_s > 0)
            if name in given:
                eff[name] = float(given[name])
            elif rows.any():
                eff[name] = float(np.clip(np.median(ideal_s[rows] / net_s[rows]), 1e-4, 1.0))
            else:
                eff[name] = float(self.default_efficiency)
        self.peak_gflops_ = peak / 1e9
        self.mem_bandwidth_gbs_ = bw / 1e9
        self.efficiency_ = eff
        self.call_overhead_ms_ = overhead
        self.n_features_in_ = len(FEATURE_NAMES)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Roofline latency in ms per op."""
        check_is_fitted(self, "efficiency_")
        F = as_features(X)
        flops, nbytes, fam = work_of(F)
        ideal_s = np.maximum(flops / (self.peak_gflops_ * 1e9), nbytes / (self.mem_bandwidth_gbs_ * 1e9))
        eff = np.array([self.efficiency_[FAMILY_NAMES[i]] for i in fam]) if len(fam) else np.zeros(0)
        return self.call_overhead_ms_ + ideal_s / np.maximum(eff, 1e-6) * 1e3

    def to_dict(self) -> dict:
        """Fitted parameters as JSON-able values."""
        check_is_fitted(self, "efficiency_")
        return {"peak_gflops": self.peak_gflops_, "mem_bandwidth_gbs": self.mem_bandwidth_gbs_,
                "efficiency": dict(self.efficiency_), "call_overhead_ms": self.call_overhead_ms_}

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "RooflineModel":
        """A fitted model straight from a target spec (keys as in :meth:`to_dict`)."""
        return cls(peak_gflops=spec["peak_gflops"], mem_bandwidth_gbs=spec["mem_bandwidth_gbs"],
                   efficiency=spec.get("efficiency"), call_overhead_ms=spec.get("call_overhead_ms", 0.0),
                   default_efficiency=spec.get("default_efficiency", 0.5)).fit([], [])
