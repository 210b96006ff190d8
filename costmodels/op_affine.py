"""A second prior for memory-bound ops: per op type, ``latency = a + b * bytes moved``.

The roofline prior (:mod:`costmodels.roofline`) gives every op one call overhead and each op family
one efficiency. Small memory-bound ops (5-50 us) differ more than that from one op type to the
next: at one thread ONNX Runtime runs a scalar ``Mul`` at 0.17 ns per output element and a bias
``Add`` at 0.38, a ``Softmax`` or a 5-d ``Transpose`` at other rates again, each after its own
fixed cost. This prior fits, for each op type with at least ``min_rows`` rows, the overhead ``a``
and the cost per byte ``b`` (non-negative least squares on the relative error, so a 5 us op counts
as much as a 5 ms one). Compute-bound op types (:data:`ROOFLINE_OP_TYPES`), the pooled "other"
and op types with fewer rows keep the roofline's estimate.

:class:`costmodels.op_model.OpLatencyModel` fits its trees on the residual of each prior and
averages the two in log space (``affine_weight``): either alone is no better, the average is
(docs/design.md, "The learned model, session 25").

Examples
--------
>>> sigs = [{"op_type": "Relu", "inputs": [[(1, c, 28, 28), "float32"]], "outputs": [[(1, c, 28, 28), "float32"]]}
...         for c in (8, 16, 32, 64, 128, 256, 512, 1024, 48, 96, 192, 384)]
>>> y = [0.004 + 2 * 4 * c * 784 * 1e-8 for c in (8, 16, 32, 64, 128, 256, 512, 1024, 48, 96, 192, 384)]
>>> p = OpTypeAffinePrior().fit(sigs, y)
>>> [round(float(v), 4) for v in p.coef_["Relu"]]  # a (ms), b (ms per MB moved)
[0.004, 0.01]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import nnls
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from costmodels._common import as_features, check_xy
from costmodels.features import op_type_of_rows
from costmodels.roofline import RooflineModel, work_of

#: op types whose time is compute, not bytes: they keep the roofline's estimate
ROOFLINE_OP_TYPES = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "other"})


class OpTypeAffinePrior(RegressorMixin, BaseEstimator):
    """Latency (ms) as ``a + b * MB moved`` per op type, the roofline for the rest.

    Parameters
    ----------
    min_rows : int
        Rows an op type needs to get its own ``a`` and ``b``.
    """

    def __init__(self, min_rows: int = 12):
        self.min_rows = min_rows

    @staticmethod
    def _design(F: np.ndarray) -> np.ndarray:
        _, nbytes, _ = work_of(F)
        return np.stack([np.ones(len(F)), nbytes * 1e-6], axis=1)

    def fit(self, X: Any, y: Any, roofline: RooflineModel | None = None) -> "OpTypeAffinePrior":
        """Fit on signatures (or a feature matrix) and latencies in ms (non-finite rows ignored).
        ``roofline``: the roofline already fitted on the same rows (the op model's), else one is."""
        F = as_features(X)
        y = check_xy(F, y)
        self.roofline_ = RooflineModel().fit(F, y) if roofline is None else roofline
        ok = np.isfinite(y) & (y > 0)
        types = op_type_of_rows(F)
        A = self._design(F)
        self.coef_: dict[str, np.ndarray] = {}
        for op in sorted(set(types[ok]) - ROOFLINE_OP_TYPES):
            rows = ok & (types == op)
            if rows.sum() < self.min_rows:
                continue
            coef, _ = nnls(A[rows] / y[rows, None], np.ones(int(rows.sum())))  # relative error
            if coef[1] > 0:  # an op type whose time does not grow with its bytes keeps the roofline
                self.coef_[op] = coef
        self.n_features_in_ = F.shape[1]
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Prior latency in ms per op."""
        check_is_fitted(self, "coef_")
        F = as_features(X)
        out = self.roofline_.predict(F)
        if len(F) and self.coef_:
            types = op_type_of_rows(F)
            A = self._design(F)
            for op, coef in self.coef_.items():
                rows = types == op
                out[rows] = np.maximum(A[rows] @ coef, 1e-6)
        return out
