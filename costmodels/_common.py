"""Helpers shared by the estimators: input coercion and the regressor factory."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from costmodels.features import FEATURE_NAMES, feature_matrix
from costmodels.sklearn_shim import HuberGradientBoosting

#: Regressor kinds an estimator's ``regressor`` parameter may name.
REGRESSORS = ("gbr", "rf", "ridge")


def as_features(X: Any) -> np.ndarray:
    """A feature matrix from signatures (Ops, Signatures, dicts) or an already-built matrix."""
    if isinstance(X, np.ndarray) and X.ndim == 2 and X.dtype != object:
        if X.shape[1] != len(FEATURE_NAMES):
            raise ValueError(f"feature matrix has {X.shape[1]} columns, expected {len(FEATURE_NAMES)}")
        return X.astype(np.float64, copy=False)
    return feature_matrix(list(X))


def make_regressor(kind: str, *, n_estimators: int, max_depth: int | None, learning_rate: float,
                   min_samples_leaf: int, subsample: float, random_state: int | None, robust: bool = False):
    """A fresh scikit-learn regressor of ``kind``: "gbr" gradient boosting, "rf" random forest, "ridge"
    standardized ridge regression (``alpha = 200 * learning_rate``: one knob for the strength of
    the fit in every kind). ``robust``: Huber loss for "gbr" (slower; for small noisy targets)."""
    if kind == "gbr":
        # the Huber loss's regressor is sklearn's with leaf updates computed without overhead (the same trees)
        return (HuberGradientBoosting if robust else GradientBoostingRegressor)(
            n_estimators=n_estimators, max_depth=max_depth, learning_rate=learning_rate,
            min_samples_leaf=min_samples_leaf, subsample=subsample,
            **({"loss": "huber", "alpha": 0.8} if robust else {"loss": "squared_error"}),
            random_state=random_state,
        )
    if kind == "rf":
        return RandomForestRegressor(
            n_estimators=n_estimators, max_depth=max_depth, min_samples_leaf=min_samples_leaf,
            max_features=0.5, random_state=random_state, n_jobs=1,
        )
    if kind == "ridge":
        return make_pipeline(StandardScaler(), Ridge(alpha=learning_rate * 200.0))
    raise ValueError(f"unknown regressor {kind!r}; valid: {', '.join(REGRESSORS)}")


def check_xy(X: Sequence, y: Any) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if len(X) != len(y):
        raise ValueError(f"X has {len(X)} rows but y has {len(y)}")
    return y
