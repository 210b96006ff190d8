"""Fixtures of the cost-model tests (helpers in _cmdata.py)."""

from __future__ import annotations

import pytest
from _cmdata import make_data

from costmodels.data import TrainingData


@pytest.fixture(scope="session")
def synthetic_data() -> TrainingData:
    return make_data()


@pytest.fixture(scope="session")
def fitted_model(synthetic_data):
    from costmodels.train import fit_cost_model

    return fit_cost_model(synthetic_data, op_params={"n_estimators": 150}, cv_metrics=False)
