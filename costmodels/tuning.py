"""Hyperparameter search for :class:`~costmodels.op_model.OpLatencyModel` with Optuna.

The objective is the cross-validated mean absolute error of ``log(latency)`` (~ mean relative
error for small errors). Folds group rows by model when groups are given (GroupKFold: a fold's
model is unseen, as in leave-one-model-out evaluation), else shuffled KFold. The sampler is a
seeded TPE, so a search is reproducible for a seed on one machine.

Examples
--------
>>> import numpy as np
>>> from costmodels.features import feature_matrix
>>> sigs = [{"op_type": "Relu", "inputs": [[(1, c, h, h), "float32"]], "outputs": [[(1, c, h, h), "float32"]]}
...         for c in (8, 16, 32, 64) for h in (7, 14, 28)]
>>> y = np.array([1e-3 + 1e-7 * c * h * h for c in (8, 16, 32, 64) for h in (7, 14, 28)])
>>> best, score = tune_op_model(feature_matrix(sigs), y, n_trials=2, seed=0)
>>> sorted(best)[:3]
['learning_rate', 'max_depth', 'min_samples_leaf']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import GroupKFold, KFold

from costmodels.op_model import OpLatencyModel


def cv_log_mae(estimator: OpLatencyModel, F: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None,
               cv: int = 4, seed: int = 0, sibling: "SiblingRows | None" = None) -> float:
    """Cross-validated mean |log(pred) - log(y)| over finite rows.

    ``sibling``: the one-thread sibling's rows (:class:`SiblingRows`); each fold's model is then fitted
    with a sibling fitted on those rows whose group is not among the fold's test groups, or, without
    groups, whose signature is not among the fold's test rows (a sibling fitted on every row would
    have seen the held-out ops' one-thread times); without a sibling where too few rows are left."""
    ok = np.isfinite(y) & (y > 0)
    F, y = F[ok], y[ok]
    g = None if groups is None else np.asarray(groups)[ok]
    grouped = g is not None and len(np.unique(g)) >= 2
    if grouped:
        splits = GroupKFold(n_splits=min(cv, len(np.unique(g)))).split(F, y, g)
    else:
        splits = KFold(n_splits=min(cv, max(len(y), 2)), shuffle=True, random_state=seed).split(F)
    errs = []
    for tr, te in splits:
        fitted_sibling = None
        if sibling is not None:  # grouped folds hold out the fold's models, shuffled ones its signatures
            fitted_sibling = (sibling.fit_without(groups=set(g[te])) if grouped
                              else sibling.fit_without(features=F[te]))
        m = clone(estimator).fit(F[tr], y[tr], sibling=fitted_sibling)
        errs.append(np.abs(np.log(m.predict(F[te])) - np.log(y[te])))
    return float(np.mean(np.concatenate(errs)))


#: a fold's sibling needs this many rows, else the fold's model is fitted without one
MIN_SIBLING_ROWS = 8


@dataclass
class SiblingRows:
    """A sibling target's training rows and its (unfitted) op model, for cross-validation; each fold's
    sibling is fitted once (a search's trials share the folds)."""

    estimator: OpLatencyModel
    F: np.ndarray
    y: np.ndarray
    groups: np.ndarray
    _fitted: dict = field(default_factory=dict, repr=False)

    def fit_without(self, groups: set | None = None, features: np.ndarray | None = None
                    ) -> OpLatencyModel | None:
        """The sibling fitted on its rows outside the ``groups`` and whose feature row is none of
        ``features``'s (the same signature); None when fewer than :data:`MIN_SIBLING_ROWS` are left."""
        held = frozenset(groups or ())
        drop = frozenset() if features is None else frozenset(row.tobytes() for row in np.asarray(features))
        key = (held, drop)
        if key not in self._fitted:
            keep = ~np.isin(self.groups, list(held)) if held else np.ones(len(self.y), dtype=bool)
            if drop:
                keep &= np.array([row.tobytes() not in drop for row in self.F], dtype=bool)
            self._fitted[key] = (clone(self.estimator).fit(self.F[keep], self.y[keep])
                                 if int(keep.sum()) >= MIN_SIBLING_ROWS else None)
        return self._fitted[key]


def tune_op_model(F: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None, *, n_trials: int = 20,
                  seed: int = 0, cv: int = 4, base: OpLatencyModel | None = None,
                  sibling: SiblingRows | None = None) -> tuple[dict[str, Any], float]:
    """Search OpLatencyModel hyperparameters; returns ``(best params, best CV log-MAE)``.

    ``F`` is a feature matrix (:func:`costmodels.features.feature_matrix`), ``y`` latencies in ms;
    ``sibling`` as for :func:`cv_log_mae`.
    """
    import optuna  # only `fit --tune-trials N` needs it (the caller's logging settings apply)

    base = base if base is not None else OpLatencyModel(random_state=seed)

    def objective(trial: "optuna.Trial") -> float:
        params = {
            "regressor": trial.suggest_categorical("regressor", ["gbr", "rf"]),
            "n_estimators": trial.suggest_int("n_estimators", 100, 600, log=True),
            "max_depth": trial.suggest_int("max_depth", 2, 10),
            "min_samples_leaf": trial.suggest_int("min_samples_leaf", 1, 8),
            "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
            "subsample": trial.suggest_float("subsample", 0.5, 1.0),
        }
        return cv_log_mae(clone(base).set_params(**params), F, y, groups, cv=cv, seed=seed, sibling=sibling)

    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.enqueue_trial({k: v for k, v in base.get_params().items()
                         if k in ("regressor", "n_estimators", "max_depth", "min_samples_leaf", "learning_rate",
                                  "subsample")})
    study.optimize(objective, n_trials=n_trials)
    return dict(study.best_params), float(study.best_value)
