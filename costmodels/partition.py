"""Partition correction: a partition's latency is not the sum of its isolated ops.

A runtime fuses the ops of a partition and pays its call overhead once (docs/design.md: "Cost
of a partition is not the sum of its ops"). With ``net_i = max(isolated_i - overhead, 0.1 *
isolated_i)`` the isolated cost of op ``i`` without its call overhead, a partition is predicted as

    ms = overhead + ratio * sum_i net_i,

and :class:`PartitionCorrection` learns ``log(ratio)`` per target from measured partitions
(profiled segments, whole models, partitions measured by the executors during tuning) with a
small regressor on fusion features (:func:`fusion_features`: length, family mix by count and by
isolated time, boundary bytes, the isolated sum, the share of it that is call overhead). Per
target, the regressor is used only if it beats, in cross-validation grouped by model, both the
target's median log-ratio and no correction at all; otherwise the better of those two is used
(``strategy_``, with the scores in ``cv_log_mae_``). A target with fewer than ``min_samples``
records uses its median log-ratio; a target with none the median over all targets; with no data
at all the ratio is 1.

Each record (one row of ``X``) is a mapping::

    {"target": "openvino@cpu:t1", "op_types": ["Conv", "Relu", ...], "isolated_ms": [0.41, 0.02, ...],
     "overhead_ms": 0.008, "boundary_bytes": 802816}

and ``y`` the measured latency in ms.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from costmodels._common import check_xy, make_regressor
from costmodels.features import FAMILY_NAMES, family_of

FUSION_FEATURES: tuple[str, ...] = (
    ("n_ops", "log_n_ops", "log_net_sum_ms", "log_boundary_bytes", "overhead_share", "max_op_share")
    + tuple(f"count_{f}" for f in FAMILY_NAMES)
    + tuple(f"time_{f}" for f in FAMILY_NAMES)
)


def net_isolated_ms(isolated_ms: Sequence[float], overhead_ms: float) -> np.ndarray:
    """Isolated op costs without the per-call overhead (never below 10% of the op's own cost)."""
    iso = np.asarray(isolated_ms, dtype=np.float64)
    return np.maximum(iso - overhead_ms, 0.1 * iso)


def fusion_features(record: Mapping[str, Any]) -> np.ndarray:
    """Fusion feature vector (:data:`FUSION_FEATURES`) of one partition record."""
    types = list(record["op_types"])
    overhead = float(record.get("overhead_ms", 0.0) or 0.0)
    iso = np.asarray(record["isolated_ms"], dtype=np.float64)
    net = net_isolated_ms(iso, overhead)
    total = float(net.sum()) or 1e-9
    fams = [family_of(t) for t in types]
    f = {
        "n_ops": float(len(types)),
        "log_n_ops": math.log(max(len(types), 1)),
        "log_net_sum_ms": math.log(total),
        "log_boundary_bytes": math.log1p(float(record.get("boundary_bytes", 0.0) or 0.0)),
        "overhead_share": float(overhead * len(types) / max(float(iso.sum()), 1e-9)),
        "max_op_share": float(net.max() / total) if len(net) else 0.0,
    }
    for fam in FAMILY_NAMES:
        mask = np.array([x == fam for x in fams], dtype=bool)
        f[f"count_{fam}"] = float(mask.sum())
        f[f"time_{fam}"] = float(net[mask].sum() / total) if mask.any() else 0.0
    return np.array([f[n] for n in FUSION_FEATURES], dtype=np.float64)


class PartitionCorrection(RegressorMixin, BaseEstimator):
    """Measured / isolated-sum correction of partition latency, per target.

    Parameters
    ----------
    min_samples : int
        Records a target needs for its own regressor (fewer: its median log-ratio).
    regressor : {"gbr", "rf", "ridge"}
        Regressor on :data:`FUSION_FEATURES` predicting ``log(ratio)`` (gradient boosting with
        Huber loss by default: partition timings on a shared machine have heavy tails).
    n_estimators, max_depth, learning_rate, min_samples_leaf :
        Passed to the regressor. The defaults are small and shrunk on purpose: in
        leave-one-model-out runs on real segments (``experiments/eval_costmodel.py``) a bigger
        model fitted the noise and did worse than the plain per-target median.
    random_state : int or None
        Seed.
    """

    def __init__(self, min_samples: int = 12, regressor: str = "gbr", n_estimators: int = 60,
                 max_depth: int | None = 2, learning_rate: float = 0.05, min_samples_leaf: int = 10,
                 random_state: int | None = 0):
        self.min_samples = min_samples
        self.regressor = regressor
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state

    @staticmethod
    def log_ratio(record: Mapping[str, Any], measured_ms: float) -> float:
        """``log((measured - overhead) / sum net_i)`` of one record."""
        overhead = float(record.get("overhead_ms", 0.0) or 0.0)
        net = float(net_isolated_ms(record["isolated_ms"], overhead).sum())
        return math.log(max(measured_ms - overhead, 0.05 * measured_ms) / max(net, 1e-9))

    def fit(self, X: Sequence[Mapping[str, Any]], y: Any) -> "PartitionCorrection":
        """Fit from partition records ``X`` and their measured latencies ``y`` (ms)."""
        y = check_xy(X, y)
        rows = [(r, m) for r, m in zip(X, y) if np.isfinite(m) and m > 0 and len(r["op_types"])]
        by_target: dict[str, list[tuple[Mapping, float]]] = {}
        for r, m in rows:
            by_target.setdefault(str(r["target"]), []).append((r, m))
        self.median_log_ratio_: dict[str, float] = {}
        self.regressors_: dict[str, Any] = {}
        self.n_records_: dict[str, int] = {}
        self.strategy_: dict[str, str] = {}
        self.cv_log_mae_: dict[str, dict[str, float]] = {}
        all_lr = []
        for target, recs in sorted(by_target.items()):
            lr = np.array([self.log_ratio(r, m) for r, m in recs])
            all_lr.extend(lr.tolist())
            self.median_log_ratio_[target] = float(np.median(lr))
            self.n_records_[target] = len(recs)
            self.strategy_[target] = "median"
            if len(recs) >= self.min_samples:
                F = np.vstack([fusion_features(r) for r, _ in recs])
                groups = np.array([str(r.get("model", i)) for i, (r, _) in enumerate(recs)])
                scores = self._cv_scores(F, lr, groups)
                self.cv_log_mae_[target] = scores
                self.strategy_[target] = min(scores, key=scores.get)
                if self.strategy_[target] == "regressor":
                    self.regressors_[target] = self._regressor().fit(F, lr)
        self.global_log_ratio_ = float(np.median(all_lr)) if all_lr else 0.0
        self.n_features_in_ = len(FUSION_FEATURES)
        return self

    def _regressor(self):
        return make_regressor(self.regressor, n_estimators=self.n_estimators, max_depth=self.max_depth,
                              learning_rate=self.learning_rate, min_samples_leaf=self.min_samples_leaf,
                              subsample=1.0, random_state=self.random_state, robust=True)

    def _cv_scores(self, F: np.ndarray, lr: np.ndarray, groups: np.ndarray) -> dict[str, float]:
        """Grouped-CV mean |log error| of: no correction, the median ratio, the regressor."""
        from sklearn.model_selection import GroupKFold, KFold

        n_groups = len(np.unique(groups))
        splits = (GroupKFold(n_splits=min(5, n_groups)).split(F, lr, groups) if n_groups >= 3
                  else KFold(n_splits=5, shuffle=True, random_state=self.random_state).split(F))
        err = {"none": [], "median": [], "regressor": []}
        for tr, te in splits:
            err["none"].append(np.abs(lr[te]))
            err["median"].append(np.abs(lr[te] - np.median(lr[tr])))
            err["regressor"].append(np.abs(lr[te] - self._regressor().fit(F[tr], lr[tr]).predict(F[te])))
        return {k: float(np.mean(np.concatenate(v))) for k, v in err.items()}

    def predict_log_ratio(self, X: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Predicted ``log(ratio)`` per record."""
        check_is_fitted(self, "median_log_ratio_")
        out = np.empty(len(X))
        for i, r in enumerate(X):
            target = str(r["target"])
            if len(r["op_types"]) == 1:
                out[i] = 0.0  # one op: its isolated measurement is the partition
            elif target in self.regressors_:
                out[i] = float(self.regressors_[target].predict(fusion_features(r)[None, :])[0])
            elif self.strategy_.get(target) == "none":
                out[i] = 0.0
            else:
                out[i] = self.median_log_ratio_.get(target, self.global_log_ratio_)
        return out

    def predict(self, X: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Predicted partition latency (ms) per record."""
        lr = self.predict_log_ratio(X)
        out = np.empty(len(X))
        for i, r in enumerate(X):
            overhead = float(r.get("overhead_ms", 0.0) or 0.0)
            out[i] = overhead + math.exp(lr[i]) * float(net_isolated_ms(r["isolated_ms"], overhead).sum())
        return out
