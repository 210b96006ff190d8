"""Link model: time to move a tensor from one target to another.

``ms = latency_ms + nbytes * ms_per_byte`` per ordered ``(src, dst)`` pair, fitted on the link
measurement points (``nbytes`` -> ms) by the profiler's own relative non-negative least squares
(:func:`placer.devices.links.fit_link`). A pair without points takes the reverse pair's fit, then a fit given as prior
(``links``, e.g. the profile store's own link fits or a spec), then the defaults. Moving a tensor
within one target costs nothing.

Examples
--------
>>> X = [("onnxruntime@cpu:t1", "openvino@cpu:t1", n) for n in (0, 1_000_000, 4_000_000)]
>>> tm = TransferModel().fit(X, [0.02, 0.22, 0.82])
>>> round(tm.transfer_ms(2_000_000, "onnxruntime@cpu:t1", "openvino@cpu:t1"), 3)
0.42
>>> tm.transfer_ms(10**6, "openvino@cpu:t1", "openvino@cpu:t1")
0.0
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from costmodels._common import check_xy
from placer.devices.links import fit_link


def link_key(src: str, dst: str) -> str:
    """The key of an ordered pair in ``links_``: ``"src->dst"``."""
    return f"{src}->{dst}"


class TransferModel(RegressorMixin, BaseEstimator):
    """Tensor transfer time between targets.

    Parameters
    ----------
    default_latency_ms : float
        Hand-off cost of a pair with no data (ONNX Runtime <-> OpenVINO ~0.02-0.04 ms with numpy
        glue on the development machine: docs/design.md).
    default_bandwidth_gbs : float
        Bandwidth of a pair with no data (a host memory copy).
    links : mapping or None
        Prior fits ``{"src->dst": {"latency_ms": .., "ms_per_byte": ..}}`` used for pairs without
        measurement points.
    """

    def __init__(self, default_latency_ms: float = 0.03, default_bandwidth_gbs: float = 5.0,
                 links: Mapping[str, Mapping[str, float]] | None = None):
        self.default_latency_ms = default_latency_ms
        self.default_bandwidth_gbs = default_bandwidth_gbs
        self.links = links

    def fit(self, X: Sequence[tuple[str, str, float]], y: Any) -> "TransferModel":
        """Fit from points ``X = [(src, dst, nbytes), ...]`` with measured ``y`` in ms."""
        y = check_xy(X, y)
        links: dict[str, dict[str, float]] = {k: {"latency_ms": float(v["latency_ms"]),
                                                  "ms_per_byte": float(v["ms_per_byte"]), "n_points": 0}
                                              for k, v in (self.links or {}).items()}
        groups: dict[str, list[int]] = {}
        for i, (src, dst, _) in enumerate(X):
            groups.setdefault(link_key(src, dst), []).append(i)
        for key, idx in groups.items():
            nb = np.array([float(X[i][2]) for i in idx])
            ms = y[idx]
            ok = np.isfinite(ms)
            if not ok.any():
                continue
            lat, per_byte = fit_link(nb[ok], ms[ok])
            links[key] = {"latency_ms": lat, "ms_per_byte": per_byte, "n_points": int(ok.sum())}
        self.links_ = links
        return self

    def _params(self, src: str, dst: str) -> tuple[float, float]:
        for key in (link_key(src, dst), link_key(dst, src)):
            if key in self.links_:
                p = self.links_[key]
                return p["latency_ms"], p["ms_per_byte"]
        return self.default_latency_ms, 1.0 / (self.default_bandwidth_gbs * 1e6)

    def transfer_ms(self, nbytes: float, src: str, dst: str) -> float:
        """Time (ms) to move ``nbytes`` from ``src`` to ``dst``; 0 within one target."""
        check_is_fitted(self, "links_")
        if src == dst:
            return 0.0
        lat, per_byte = self._params(src, dst)
        return float(lat + max(float(nbytes), 0.0) * per_byte)

    def predict(self, X: Sequence[tuple[str, str, float]]) -> np.ndarray:
        """Transfer time in ms for each ``(src, dst, nbytes)``."""
        check_is_fitted(self, "links_")
        return np.array([self.transfer_ms(nb, s, d) for s, d, nb in X], dtype=np.float64)
