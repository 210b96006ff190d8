"""The one place placer touches scikit-learn's private API (checked against :data:`CHECKED_WITH`):
its gradient boosting with the Huber loss, the leaf updates computed without overhead.

With ``loss="huber"``, :class:`~sklearn.ensemble.GradientBoostingRegressor` sets every leaf of every
tree to a weighted median of the leaf's residuals plus a clipped mean
(``HuberLoss.fit_intercept_only``); the median comes from sklearn's array-API
``_weighted_percentile``, whose dispatch and checks cost far more than the sort itself on a leaf
of a few dozen rows. Once per leaf (up to 64 leaves x 200 trees x 12 regressors per target), that
was a third of an op model's fit on the session-7 store and half of it on the few rows of one
model that ``placer tune`` fits.

:class:`HuberGradientBoosting` is that regressor with :class:`LeanHuberLoss`, whose
``fit_intercept_only`` does the same arithmetic on numpy directly: the same sort, the same
cumulative sum, the same search and the same weighted mean, so every leaf, and every prediction, is
bit for bit the stock regressor's; it falls back to sklearn's function for inputs it does not handle
(NaN, 2-D, other dtypes). Its ``_fit_stages`` also skips each tree's parameter checks (``fit``
checked the parameters the trees are built from). The private names:
``GradientBoostingRegressor._get_loss`` and ``._fit_stages``, ``sklearn._loss.loss.HuberLoss`` (its
``closs.delta``) and ``sklearn.utils.stats._weighted_percentile``.
``tests/costmodels/test_cm_sklearn_shim.py`` compares leaves and predictions with the stock regressor
and fails when the installed scikit-learn is not :data:`CHECKED_WITH` (re-check this module, then
update it; pyproject.toml pins the version).

Examples
--------
>>> import numpy as np
>>> X = np.arange(40, dtype=float).reshape(20, 2); y = X[:, 0] ** 0.5
>>> reg = HuberGradientBoosting(n_estimators=5, loss="huber", alpha=0.8, random_state=0).fit(X, y)
>>> reg.predict(X[:2]).shape
(2,)
"""

from __future__ import annotations

import numpy as np
from sklearn import config_context
from sklearn._loss.loss import HuberLoss
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.utils.stats import _weighted_percentile

__all__ = ["CHECKED_WITH", "HuberGradientBoosting", "LeanHuberLoss", "weighted_percentile"]

#: the scikit-learn version this module was checked against (pyproject.toml pins it)
CHECKED_WITH = "1.9.1"


def weighted_percentile(values: np.ndarray, weights: np.ndarray, rank: float) -> float:
    """sklearn's ``_weighted_percentile(values, weights, rank)`` ("inverted_cdf") for a 1-D float
    array without NaN, computed the same way (the same sort, cumulative sum and search); any other
    input goes to sklearn's function."""
    a = np.asarray(values)
    w = np.asarray(weights)
    if a.ndim != 1 or w.shape != a.shape or not a.dtype == w.dtype == np.float64 or np.isnan(a).any():
        return _weighted_percentile(a, w, rank)
    if not w.any():
        return np.nan
    order = np.argsort(a)  # numpy's default kind, as sklearn's argsort(stable=False)
    cdf = np.cumsum(w[order])
    target = np.float64(rank) / 100 * cdf[-1]
    if target == 0:
        target = np.nextafter(target, target + 1)
    i = min(int(np.searchsorted(cdf, target)), len(a) - 1)
    return a[order[i]]


class LeanHuberLoss(HuberLoss):
    """:class:`~sklearn._loss.loss.HuberLoss` whose intercept (a tree leaf's value) is computed as
    sklearn does, without its generic percentile's overhead."""

    def fit_intercept_only(self, y_true, sample_weight=None):
        if sample_weight is None:
            return super().fit_intercept_only(y_true, sample_weight)
        y_true = np.asarray(y_true)
        w = np.asarray(sample_weight)
        median = weighted_percentile(y_true, w, 50)
        diff = y_true - median
        term = np.sign(diff) * np.minimum(self.closs.delta, np.abs(diff))
        total = w.sum()
        plain = term.ndim == 1 and w.shape == term.shape and term.dtype == w.dtype == np.float64
        if not plain or total == 0:
            return median + np.average(term, weights=w)  # (weights summing to 0: its ZeroDivisionError)
        # np.average's own arithmetic for 1-D float64: sum(term * w) / sum(w)
        return median + np.multiply(term, w).sum() / total


class HuberGradientBoosting(GradientBoostingRegressor):
    """:class:`~sklearn.ensemble.GradientBoostingRegressor` that uses :class:`LeanHuberLoss` for
    ``loss="huber"`` (every other loss as it is): the same trees and predictions, fitted faster."""

    def _get_loss(self, sample_weight):
        if self.loss == "huber":
            return LeanHuberLoss(sample_weight=sample_weight, quantile=self.alpha)
        return super()._get_loss(sample_weight)

    def _fit_stages(self, *args, **kwargs):
        # ``fit`` validated this regressor's parameters; each stage's tree, built from them, would be
        # validated again (``get_params`` and the constraints, once per tree): skipped, as the public
        # ``config_context`` allows. The trees are the same.
        with config_context(skip_parameter_validation=True):
            return super()._fit_stages(*args, **kwargs)
