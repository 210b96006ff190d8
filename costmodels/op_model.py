"""Per-target op latency regressor: signature features -> latency (ms).

One :class:`OpLatencyModel` per target. A :class:`~costmodels.roofline.RooflineModel` fitted on
the same rows (or given as a spec prior) is the baseline; gradient boosting (or a random forest)
on :mod:`costmodels.features` plus the log roofline estimate learns the residual
``log(latency_ms) - log(roofline_ms)``. Trees cannot extrapolate: learning the residual keeps
ops larger or smaller than any training op on the roofline's scaling instead of clamping them to
the nearest leaf. A second set of trees learns the residual of a per-op-type affine prior
(:mod:`costmodels.op_affine`), and the two are averaged in log space (``affine_weight``). With
``use_prior=False`` the trees learn ``log(latency_ms)`` directly. A multi-thread target fitted with
its one-thread sibling's model (``fit(..., sibling=...)``, :mod:`costmodels.sibling`) fits the same
pair of tree sets once more on the sibling's prediction as the prior, averaged with its own
(``sibling_weight``).

Rows whose latency is not finite are the target's "unsupported" measurements. An op type with
unsupported rows and no supported one is remembered in ``unsupported_op_types_`` and predicted as
``inf``; exact unsupported signatures are remembered by :class:`costmodels.cost_model.CostModel`.

Examples
--------
>>> import numpy as np
>>> sigs = [{"op_type": "Relu", "inputs": [[(1, c, 28, 28), "float32"]], "outputs": [[(1, c, 28, 28), "float32"]]}
...         for c in (8, 16, 32, 64, 128, 256)]
>>> y = [0.003 + 1e-5 * c for c in (8, 16, 32, 64, 128, 256)]
>>> m = OpLatencyModel(target="onnxruntime@cpu:t1", n_estimators=20).fit(sigs, y)
>>> m.predict(sigs[:1]).shape
(1,)
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from costmodels import flat_forest
from costmodels._common import as_features, check_xy, make_regressor
from costmodels.features import op_type_of_rows
from costmodels.op_affine import OpTypeAffinePrior
from costmodels.roofline import RooflineModel
from costmodels.sibling import SiblingPrior
from placer.devices.cores import machine_cores

__all__ = ["FIT_THREADS", "OpLatencyModel", "fit_threads", "op_type_of_rows"]

#: threads that fit one op model's regressors (None: automatic, see :func:`fit_threads`)
FIT_THREADS: int | None = None

#: below this many training rows the regressors are fitted one after the other: the per-tree Python
#: work holds the GIL, and on the main job's store (38 rows a target) two threads fitted 1.3x slower
#: (median of four alternations, 13.8 s against 10.5); on the committed fixture (thousands of rows)
#: 1.6-1.7x faster, on 1,500 synthetic rows 1.6x
THREADS_MIN_ROWS = 500


def fit_threads(jobs: int, rows: int) -> int:
    """Threads for ``jobs`` regressor fits on ``rows`` training rows: :data:`FIT_THREADS` when set;
    else 1 below :data:`THREADS_MIN_ROWS`, and the CPUs this process may use above; at most ``jobs``."""
    if FIT_THREADS is not None:
        cpus = int(FIT_THREADS)
    elif rows < THREADS_MIN_ROWS:
        cpus = 1
    else:
        cpus = len(machine_cores())
    return max(1, min(cpus, jobs))


class OpLatencyModel(RegressorMixin, BaseEstimator):
    """Latency (ms) of one op on one target, from its signature.

    Parameters
    ----------
    target : str or None
        Target name the model is for (informational; data must be that target's).
    regressor : {"gbr", "rf"}
        Gradient boosting (squared error) or random forest on ``log(latency_ms)``.
    n_estimators, max_depth, learning_rate, min_samples_leaf, subsample :
        Passed to the regressor (``learning_rate``/``subsample`` only to "gbr"). The defaults did
        best of the few settings compared leave-one-model-out on real profiles
        (``experiments/eval_costmodel.py``); :mod:`costmodels.tuning` searches them per target.
        200 trees at rate 0.1 (session 15) score within 3 points of 400 at 0.05 per target and fit
        in half the time, which the Huber loss and the seeds below need.
    robust : bool
        Huber loss for "gbr" instead of squared error: a training row measured in a disturbance
        (the same op measured twice disagrees by more than 10% on 5-25% of ops here) pulls a leaf
        less. Leave-one-model-out on the session-15 store, with the convolution GEMM features, it
        gained 2-8 points of held-out ops within 10% per target over squared loss (alone: -1.5 to
        +2.6; docs/design.md, "The learned model, session 15").
    n_models : int
        Regressors fitted with seeds ``random_state + i`` (subsampled rows differ) whose log
        predictions are averaged: one seed's share of held-out ops within 10% moved by up to 5
        points from the next seed's on the same data.
    use_prior : bool
        Add the log roofline estimate as a feature.
    prior : mapping or None
        Roofline spec (see :meth:`RooflineModel.from_spec`); ``None`` = fit it on the data.
    affine_weight : float
        Weight, in a log average, of a second set of regressors that learn the residual of the
        per-op-type affine prior (:class:`~costmodels.op_affine.OpTypeAffinePrior`: memory-bound op
        types priced ``a + b * bytes`` each) instead of the roofline's; 0 = the roofline's alone.
        Used with ``use_prior`` and a prior fitted on the data (not a spec). Half and half gained
        1.8-4.1 points of held-out ops within 10% on ONNX Runtime t1 and 0-3.0 on OpenVINO t1 over
        three stores, where either prior alone did not (docs/design.md, "The learned model, session
        25"); it doubles the fit time.
    sibling_weight : float
        Weight, in a log average, of the branch fitted on the one-thread sibling's prediction, when
        ``fit`` is given a sibling (a prior fitted on the data, as for ``affine_weight``). Half and
        half, leave-one-model-out on ONNX Runtime t2, took the held-out median error from 4.1% to
        3.5% and the ops within 5% from 58% to 63%, within 10% by less than the noise of that share
        (+0.4 points; OpenVINO t2 -0.4, with smaller errors too: docs/design.md, "The learned
        model, session 28"); the sibling's branch alone did worse than the average. It doubles the
        fit time.
    random_state : int or None
        Seed of the regressor.
    """

    def __init__(self, target: str | None = None, regressor: str = "gbr", n_estimators: int = 200,
                 max_depth: int | None = 6, learning_rate: float = 0.1, min_samples_leaf: int = 2,
                 subsample: float = 0.8, robust: bool = True, n_models: int = 3, use_prior: bool = True,
                 prior: Mapping[str, Any] | None = None, affine_weight: float = 0.5,
                 sibling_weight: float = 0.5, random_state: int | None = 0):
        self.target = target
        self.regressor = regressor
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_samples_leaf = min_samples_leaf
        self.subsample = subsample
        self.robust = robust
        self.n_models = n_models
        self.use_prior = use_prior
        self.prior = prior
        self.affine_weight = affine_weight
        self.sibling_weight = sibling_weight
        self.random_state = random_state

    def _design(self, F: np.ndarray, prior: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """(regressor input, log prior): the regressor learns ``log(latency) - log prior`` (``prior``:
        the fitted roofline unless given)."""
        if not self.use_prior:
            return F, np.zeros(len(F))
        log_prior = np.log(np.maximum((self.prior_ if prior is None else prior).predict(F), 1e-6))
        return np.hstack([F, log_prior[:, None]]), log_prior

    def fit(self, X: Any, y: Any, sample_weight: Any = None, sibling: "OpLatencyModel | None" = None
            ) -> "OpLatencyModel":
        """Fit on signatures (or a feature matrix) ``X`` and latencies ``y`` in ms (inf = unsupported).

        ``sibling``: the fitted op model of this runtime at one thread (:mod:`costmodels.sibling`),
        for a multi-thread target; its prediction is a third prior (``sibling_weight``)."""
        F = as_features(X)
        y = check_xy(F, y)
        ok = np.isfinite(y) & (y > 0)
        if not ok.any():
            raise ValueError(f"OpLatencyModel({self.target}): no finite latency to fit")
        types = op_type_of_rows(F)
        supported = set(types[ok])
        # "other" pools many op types: never mark it unsupported as a whole
        self.unsupported_op_types_ = sorted(set(types[~ok]) - supported - {"other"})
        self.op_types_ = sorted(supported)
        F, y = F[ok], y[ok]
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[ok]
        self.prior_ = (RooflineModel.from_spec(self.prior) if self.prior is not None
                       else RooflineModel().fit(F, y))
        if int(self.n_models) < 1:
            raise ValueError(f"OpLatencyModel({self.target}): n_models must be >= 1, got {self.n_models}")
        for name in ("affine_weight", "sibling_weight"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise ValueError(f"OpLatencyModel({self.target}): {name} must be in [0, 1], "
                                 f"got {getattr(self, name)}")
        self.affine_weight_ = (float(self.affine_weight) if self.use_prior and self.prior is None else 0.0)
        self._fit_pair(F, y, w, "")
        self.regressor_ = self.regressors_[0]
        use_sibling = sibling is not None and self.use_prior and self.prior is None
        self.sibling_weight_ = float(self.sibling_weight) if use_sibling else 0.0
        self.sibling_prior_ = SiblingPrior(sibling, self.prior_) if self.sibling_weight_ > 0 else None
        self._fit_pair(F, y, w, "sibling_")
        self.n_features_in_ = F.shape[1]
        self.n_train_ = int(len(y))
        self.train_log_mae_ = float(np.mean(np.abs(self._log_prediction(F) - np.log(y))))
        return self

    #: what :meth:`_fit_pair` sets, each after its pair's prefix ("" or "sibling_")
    PAIR_ATTRIBUTES = ("regressors_", "forest_", "affine_prior_", "affine_regressors_", "affine_forest_")

    def _fit_pair(self, F: np.ndarray, y: np.ndarray, w: np.ndarray | None, prefix: str) -> None:
        """The trees on the residual of ``{prefix}prior_`` (``{prefix}regressors_``, saved as their flat
        ``{prefix}forest_``) and, with an affine weight, those on the residual of an affine prior fitted
        on these rows that falls back to that prior for compute-bound op types (``{prefix}affine_*``);
        None each without the prior (a model fitted without a sibling)."""
        for name in self.PAIR_ATTRIBUTES:
            setattr(self, prefix + name, None)
        prior = getattr(self, f"{prefix}prior_")
        if prior is None:
            return
        designs = [self._design(F, prior)]
        affine = OpTypeAffinePrior().fit(F, y, roofline=prior) if self.affine_weight_ > 0 else None
        if affine is not None:
            designs.append(self._design(F, affine))
        fitted = self._fit_regressors(designs, y, w)
        setattr(self, f"{prefix}regressors_", fitted[0])
        # tree ensembles predict (and are saved) as one flat forest: flat_forest's docstring says why
        setattr(self, f"{prefix}forest_", flat_forest.flatten(fitted[0]))
        if affine is not None:
            setattr(self, f"{prefix}affine_prior_", affine)
            setattr(self, f"{prefix}affine_regressors_", fitted[1])
            setattr(self, f"{prefix}affine_forest_", flat_forest.flatten(fitted[1]))

    def _fit_regressors(self, designs: list[tuple[np.ndarray, np.ndarray]], y: np.ndarray,
                        w: np.ndarray | None) -> list[list]:
        """Per design ``(D, base)``: ``n_models`` regressors of ``log(y) - base`` on ``D``, seeds
        ``random_state + i``; all of them fitted at once on :func:`fit_threads` threads where the rows are
        many (scikit-learn's tree builder releases the GIL; each regressor is seeded, so the result does
        not depend on it)."""
        # seeds only differ where boosting subsamples rows (a forest averages its own trees, ridge has none)
        n = int(self.n_models) if self.regressor == "gbr" and float(self.subsample) < 1.0 else 1
        jobs = [(D, base, None if self.random_state is None else int(self.random_state) + i)
                for D, base in designs for i in range(n)]

        # boosting on a subsample scores the rows left out: with none left out (a model of one or two
        # signatures) scikit-learn divides by their zero weight; all rows then, as with subsample 1
        rows = len(y)
        subsample = float(self.subsample) if rows - max(1, int(float(self.subsample) * rows)) >= 1 else 1.0

        def fit_one(job: tuple[np.ndarray, np.ndarray, int | None]):
            D, base, seed = job
            reg = make_regressor(self.regressor, n_estimators=self.n_estimators, max_depth=self.max_depth,
                                 learning_rate=self.learning_rate, min_samples_leaf=self.min_samples_leaf,
                                 subsample=subsample, random_state=seed,
                                 robust=bool(self.robust) and self.regressor == "gbr")
            # a ridge pipeline takes no sample_weight keyword at all (None included)
            return reg.fit(D, np.log(y) - base, **({} if w is None else {"sample_weight": w}))

        threads = fit_threads(len(jobs), len(y))
        if threads > 1:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                regressors = list(pool.map(fit_one, jobs))
        else:
            regressors = [fit_one(job) for job in jobs]
        return [regressors[k * n:(k + 1) * n] for k in range(len(designs))]

    @staticmethod
    def _residual(forest: dict | None, regressors: list | None, D: np.ndarray) -> np.ndarray:
        if forest is not None:
            return flat_forest.predict(forest, D)
        return np.mean([reg.predict(D) for reg in regressors], axis=0)

    def _branch(self, F: np.ndarray, prefix: str) -> np.ndarray:
        """log latency of one pair (:meth:`_fit_pair`): its prior's trees, averaged with its affine
        prior's."""
        D, base = self._design(F, getattr(self, f"{prefix}prior_"))
        trees = getattr(self, f"{prefix}forest_", None), getattr(self, f"{prefix}regressors_", None)
        out = self._residual(*trees, D) + base
        weight = getattr(self, "affine_weight_", 0.0)  # a model saved before it existed has none
        if weight > 0:
            D, base = self._design(F, getattr(self, f"{prefix}affine_prior_"))
            affine = self._residual(getattr(self, f"{prefix}affine_forest_", None),
                                    getattr(self, f"{prefix}affine_regressors_", None), D) + base
            out = (1.0 - weight) * out + weight * affine
        return out

    def _log_prediction(self, F: np.ndarray) -> np.ndarray:
        """log latency (ms) per row: the roofline's regressors, averaged with the affine prior's, and
        with the sibling's pair where the model has one."""
        out = self._branch(F, "")
        weight = getattr(self, "sibling_weight_", 0.0)
        if weight > 0:
            out = (1.0 - weight) * out + weight * self._branch(F, "sibling_")
        return out

    def __getstate__(self) -> dict:
        """What pickling and skops save: the regressors as their flat forest alone where they have one
        (a few arrays in place of hundreds of tree objects; a model loaded back predicts with it)."""
        state = dict(super().__getstate__())  # a copy: object.__getstate__ hands out the live __dict__
        if state.get("forest_") is not None:
            state.pop("regressors_", None)
            state.pop("regressor_", None)
        for name in ("affine", "sibling", "sibling_affine"):
            if state.get(f"{name}_forest_") is not None:
                state.pop(f"{name}_regressors_", None)
        return state

    def predict(self, X: Any) -> np.ndarray:
        """Predicted latency in ms per op; ``inf`` for op types known unsupported on the target."""
        check_is_fitted(self, "n_train_")
        F = as_features(X)
        if len(F) == 0:
            return np.zeros(0)
        out = np.exp(self._log_prediction(F))
        if self.unsupported_op_types_:
            out[np.isin(op_type_of_rows(F), self.unsupported_op_types_)] = np.inf
        return out

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """R^2 of log latency over the finite rows (higher is better)."""
        from sklearn.metrics import r2_score

        y = np.asarray(y, dtype=np.float64)
        ok = np.isfinite(y) & (y > 0)
        F = as_features(X)[ok]
        return float(r2_score(np.log(y[ok]), np.log(self.predict(F)), sample_weight=sample_weight))
