"""costmodels.sklearn_shim: the same trees and predictions as scikit-learn's Huber gradient boosting.

Fails on a scikit-learn upgrade on purpose: re-check the shim's private names against the new version,
then update ``CHECKED_WITH``.
"""

from __future__ import annotations

import numpy as np
import pytest
import sklearn
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn._loss.loss import HuberLoss
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.utils.stats import _weighted_percentile

from costmodels._common import make_regressor
from costmodels.sklearn_shim import CHECKED_WITH, HuberGradientBoosting, LeanHuberLoss, weighted_percentile


def test_installed_sklearn_is_the_one_the_shim_was_checked_with():
    assert sklearn.__version__ == CHECKED_WITH, (
        f"scikit-learn {sklearn.__version__} is installed; costmodels/sklearn_shim.py was checked with "
        f"{CHECKED_WITH}: re-check its private names against this version, then update CHECKED_WITH")


FIT = {"n_estimators": 40, "max_depth": 4, "min_samples_leaf": 2, "loss": "huber", "alpha": 0.8}


def _data(seed: int, n: int = 120):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    X[:, 1] = np.round(X[:, 1])  # ties in a feature
    y = X[:, 0] * 2 + rng.standard_t(2, size=n)  # heavy tails: the Huber clip bites
    y[: n // 10] = np.round(y[: n // 10])  # ties in the residuals
    return X, y, rng


def _trees(reg) -> list[np.ndarray]:
    return [est.tree_.value.ravel() for est in reg.estimators_[:, 0]]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("weights", ["none", "random", "some zero"])
@pytest.mark.parametrize("subsample", [1.0, 0.8])
def test_every_leaf_and_prediction_is_the_stock_regressors(seed, weights, subsample):
    X, y, rng = _data(seed)
    w = {"none": None, "random": rng.uniform(0.2, 3.0, len(y)),
         "some zero": np.where(rng.uniform(size=len(y)) < 0.2, 0.0, 1.0)}[weights]
    kw = {**FIT, "subsample": subsample, "random_state": seed}
    stock = GradientBoostingRegressor(**kw).fit(X, y, sample_weight=w)
    lean = HuberGradientBoosting(**kw).fit(X, y, sample_weight=w)
    assert isinstance(lean._loss, LeanHuberLoss)
    for a, b in zip(_trees(stock), _trees(lean), strict=True):
        np.testing.assert_array_equal(a, b)
    Xt = np.random.default_rng(seed + 100).normal(size=(50, 5))
    np.testing.assert_array_equal(stock.predict(Xt), lean.predict(Xt))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.5])), min_size=1, max_size=30),
       st.sampled_from([0, 10, 50, 80, 100]))
def test_weighted_percentile_is_sklearns(pairs, rank):
    a = np.array([float(v) for v, _ in pairs])
    w = np.array([x for _, x in pairs])
    ours, theirs = weighted_percentile(a, w, rank), _weighted_percentile(a, w, rank)
    assert (np.isnan(ours) and np.isnan(theirs)) or ours == theirs


def test_the_leaf_value_is_huber_losss_and_weights_summing_to_zero_still_raise():
    rng = np.random.default_rng(0)
    r, w = rng.standard_t(2, size=33), rng.uniform(0.1, 2.0, 33)
    stock, lean = HuberLoss(quantile=0.8), LeanHuberLoss(quantile=0.8)
    stock.closs.delta = lean.closs.delta = 0.7
    assert lean.fit_intercept_only(r, w) == stock.fit_intercept_only(r, w)
    assert lean.fit_intercept_only(r) == stock.fit_intercept_only(r)
    with pytest.raises(ZeroDivisionError):
        stock.fit_intercept_only(r, np.zeros(33))
    with pytest.raises(ZeroDivisionError):
        lean.fit_intercept_only(r, np.zeros(33))


def test_the_factory_gives_the_lean_regressor_for_huber_only():
    kw = {"n_estimators": 3, "max_depth": 2, "learning_rate": 0.1, "min_samples_leaf": 1, "subsample": 1.0,
          "random_state": 0}
    assert type(make_regressor("gbr", robust=True, **kw)) is HuberGradientBoosting
    assert type(make_regressor("gbr", robust=False, **kw)) is GradientBoostingRegressor
