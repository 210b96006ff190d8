"""Fitting a :class:`~costmodels.cost_model.CostModel` from :class:`~costmodels.data.TrainingData`.

Per target: an :class:`~costmodels.op_model.OpLatencyModel` on the target's op rows
(hyperparameters searched with Optuna when ``tune_trials > 0``), the exact measurements, and the
call overhead. A multi-thread target whose one-thread sibling has rows in the data
(:func:`costmodels.sibling.sibling_target`) is fitted with the sibling's op model as a third prior;
the sibling is fitted first (also when it is not among the targets asked for: it is then a prior
only). Across targets: a :class:`~costmodels.transfer.TransferModel` from the link
points (the store's fits as prior) and a :class:`~costmodels.partition.PartitionCorrection` from
the measured segments/models, whose isolated op costs are the exact measurements where present.

Examples
--------
>>> from costmodels.data import TrainingData, OpRow
>>> data = TrainingData()
>>> for c in (8, 16, 32, 64, 128):
...     key = f"relu{c}"
...     data.add_signature(key, {"op_type": "Relu", "inputs": [[(1, c, 28, 28), "float32"]],
...                              "outputs": [[(1, c, 28, 28), "float32"]]})
...     data.ops.append(OpRow("onnxruntime@cpu:t1", key, 0.003 + 1e-4 * c, ("m",)))
>>> cm = fit_cost_model(data, op_params={"n_estimators": 20}, cv_metrics=False)
>>> cm.targets
['onnxruntime@cpu:t1']
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Mapping, Sequence

import numpy as np
from sklearn.base import clone

from costmodels.cost_model import CostModel
from costmodels.data import TrainingData
from costmodels.errors import CostModelError
from costmodels.features import FEATURE_NAMES, feature_matrix
from costmodels.op_model import OpLatencyModel
from costmodels.partition import FUSION_FEATURES, PartitionCorrection
from costmodels.persistence import check_overwritable, versions
from costmodels.roofline import RooflineModel
from costmodels.sibling import sibling_target
from costmodels.store import training_data_from_store
from costmodels.transfer import TransferModel
from costmodels.tuning import SiblingRows, cv_log_mae, tune_op_model
from placer.devices.base import TargetSpec


def _groups(data: TrainingData, rows) -> np.ndarray:
    return np.array([r.models[0] if r.models else r.key for r in rows], dtype=object)


def _xy(data: TrainingData, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feature matrix, latencies (ms) and CV groups of one target's op ``rows``."""
    return (feature_matrix([data.signatures[r.key] for r in rows]), np.array([r.latency_ms for r in rows]),
            _groups(data, rows))


def partition_training_records(data: TrainingData, measured: Mapping[str, Mapping[str, float]],
                               op_models: Mapping[str, OpLatencyModel],
                               overheads_ms: Mapping[str, float]) -> tuple[list[dict], list[float]]:
    """Partition records of ``data`` (isolated costs: measured, else predicted); unsupported ones skipped."""
    X, y = [], []
    for p in data.partitions:
        t = p.target
        if t not in op_models and t not in measured:
            continue
        iso = []
        for k in p.op_keys:
            v = measured.get(t, {}).get(k)
            if v is None:
                v = float(op_models[t].predict([data.signatures[k]])[0]) if t in op_models else math.inf
            iso.append(v)
        if not all(math.isfinite(v) for v in iso) or not math.isfinite(p.measured_ms):
            continue
        X.append({"target": t, "op_types": [data.signatures[k]["op_type"] for k in p.op_keys],
                  "isolated_ms": iso, "overhead_ms": float(overheads_ms.get(t, 0.0)),
                  "boundary_bytes": p.boundary_bytes, "kind": p.kind, "model": p.model})
        y.append(p.measured_ms)
    return X, y


def fit_cost_model(data: TrainingData, targets: Sequence[str] | None = None, *, tune_trials: int = 0,
                   seed: int = 0, cv: int = 4, cv_metrics: bool = True, op_params: Mapping[str, Any] | None = None,
                   partition_params: Mapping[str, Any] | None = None,
                   specs: Mapping[str, Mapping[str, Any]] | None = None,
                   reuse: CostModel | None = None) -> CostModel:
    """Fit every piece of a CostModel on ``data``.

    Parameters
    ----------
    targets : target names to fit (default: every target with op rows).
    tune_trials : Optuna trials per target (0 = ``op_params`` / defaults).
    seed : seed of the regressors, the CV folds and the Optuna sampler.
    cv, cv_metrics : folds of the cross-validated metrics recorded in the card (grouped by model).
    op_params, partition_params : fixed hyperparameters of the estimators.
    specs : ``sim:`` targets known only by a roofline spec (:meth:`RooflineModel.from_spec`).
    reuse : a model fitted earlier (``placer tune``'s saved one): a target's op model is taken from it
        instead of fitted again where it was fitted on the same rows (its own and its sibling's: the
        card's ``data_fingerprint``), with the same parameters, seed, features and library versions
        (:func:`_reusable`); without Optuna trials and cross-validated metrics, which it did not
        record. Its card says ``"reused": true``. The regressors are seeded, so the model is the one a
        fit would give; a warm ``placer tune`` on zoo:tiny spent 3.2 s of its 16 s fitting them.
    """
    t0 = time.perf_counter()
    targets = list(targets) if targets is not None else data.target_names()
    if not targets and not specs:
        raise CostModelError("no training data: the profile store has no op measurements (run `placer profile`)")
    op_models: dict[str, OpLatencyModel] = {}
    measured: dict[str, dict[str, float]] = {}
    target_cards: dict[str, dict] = {}
    for t in targets:
        if not data.op_rows(t):
            raise CostModelError(f"no op measurements for target {t!r}; targets with data: {', '.join(data.target_names())}")
    with_rows = [n for n in data.target_names() if any(math.isfinite(r.latency_ms) for r in data.op_rows(n))]
    siblings = {t: s for t in targets if (s := sibling_target(t, with_rows)) is not None}
    fitted_siblings: dict[str, tuple[OpLatencyModel | None, SiblingRows | None]] = {}

    def sibling_of(t: str) -> tuple[OpLatencyModel | None, SiblingRows | None]:
        """The fitted sibling of ``t`` and its rows for cross-validation (None, None without one)."""
        s = siblings.get(t)
        if s is None:
            return None, None
        if s not in fitted_siblings:
            F, y, groups = _xy(data, data.op_rows(s))
            ok = np.isfinite(y) & (y > 0)
            fitted = op_models.get(s)  # fitted already when it is a target itself (tuned, maybe)
            base = fitted if fitted is not None else OpLatencyModel(target=s, random_state=seed,
                                                                     **(op_params or {}))
            if fitted is None and ok.any():
                fitted = clone(base).fit(F, y)
            fitted_siblings[s] = (fitted, SiblingRows(base, F[ok], y[ok], groups[ok]) if ok.any() else None)
        return fitted_siblings[s]

    # siblings first: a multi-thread target's fit reads its sibling's
    for t in sorted(targets, key=lambda t: t in siblings):
        rows = data.op_rows(t)
        F, y, groups = _xy(data, rows)
        sibling, sibling_rows = sibling_of(t)
        params = dict(op_params or {})
        tuned_score = None
        if tune_trials > 0 and np.isfinite(y).sum() >= 8:
            params, tuned_score = tune_op_model(F, y, groups, n_trials=tune_trials, seed=seed, cv=cv,
                                                base=OpLatencyModel(random_state=seed, **(op_params or {})),
                                                sibling=sibling_rows)
        # the fixed settings stay, the searched ones on top (affine_weight, sibling_weight are not searched)
        est = OpLatencyModel(target=t, random_state=seed, **{**(op_params or {}), **params})
        if not np.isfinite(y).any():
            measured[t] = {r.key: r.latency_ms for r in rows}
            target_cards[t] = {"n_rows": len(rows), "n_unsupported": len(rows), "note": "nothing ran"}
            continue
        fp_t = data.fingerprint([t] + ([siblings[t]] if sibling is not None else []))
        reused = (tune_trials == 0 and not cv_metrics
                  and _reusable(reuse, t, fp_t, est, seed, siblings.get(t) if sibling is not None else None))
        if reused:
            est = reuse.op_models[t]
        else:
            est.fit(F, y, sibling=sibling)
        op_models[t] = est
        measured[t] = {r.key: r.latency_ms for r in rows}
        metrics = {"train_log_mae": est.train_log_mae_}
        if tuned_score is not None:
            metrics["tuned_cv_log_mae"] = tuned_score
        if cv_metrics and np.isfinite(y).sum() >= 2 * cv:
            metrics["cv_log_mae"] = cv_log_mae(est, F, y, groups, cv=cv, seed=seed,
                                               sibling=sibling_rows if sibling is not None else None)
        target_cards[t] = {
            "fingerprint": data.targets.get(t),
            "data_fingerprint": fp_t, "reused": reused,
            "n_rows": len(rows), "n_unsupported": int((~np.isfinite(y)).sum()),
            "n_read_at_probe": data.read_at_probe.get(t, 0),
            "unsupported_op_types": est.unsupported_op_types_,
            "params": _card_params(est),
            "metrics": metrics, "overhead_ms": data.overheads_ms.get(t),
            "sibling": siblings.get(t) if sibling is not None else None,
        }
    op_models = dict(sorted(op_models.items()))
    overheads = {t: float(v) for t, v in data.overheads_ms.items() if t in targets}
    links = [r for r in data.links if r.src in targets and r.dst in targets] if targets else list(data.links)
    transfer = TransferModel(links={k: v for k, v in data.link_fits.items()} or None).fit(
        [(r.src, r.dst, r.nbytes) for r in links], [r.ms for r in links])
    X, y = partition_training_records(data, measured, op_models, overheads)
    partition = PartitionCorrection(random_state=seed, **(partition_params or {})).fit(X, y) if X else None
    roofline = {t: RooflineModel.from_spec(s) for t, s in (specs or {}).items()}
    priors_only = {siblings[t] for t in targets if target_cards.get(t, {}).get("sibling")} - set(targets)
    fp = data.fingerprint(list(targets) + sorted(priors_only))  # a sibling's rows shape the model too
    card = {
        "id": f"costmodel-{fp}-s{seed}-t{tune_trials}",
        "training_fingerprint": fp,
        "targets": target_cards,
        "spec_targets": {t: dict(s) for t, s in (specs or {}).items()},
        "feature_names": list(FEATURE_NAMES),
        "fusion_features": list(FUSION_FEATURES),
        "partition": None if partition is None else {
            "n_records": partition.n_records_, "median_ratio": {t: math.exp(v) for t, v in
                                                                partition.median_log_ratio_.items()},
            "strategy": dict(partition.strategy_), "cv_log_mae": partition.cv_log_mae_,
        },
        "links": {k: {kk: vv for kk, vv in v.items()} for k, v in transfer.links_.items()},
        "models": data.model_names(),
        "seed": seed, "tune_trials": tune_trials,
        "fit_seconds": round(time.perf_counter() - t0, 2),
        "versions": versions(),
    }
    return CostModel(op_models=op_models, roofline=roofline, transfer=transfer, partition=partition,
                     overheads_ms=overheads, measured_ms=measured,
                     partition_records=list(zip(X, y)), card=card)


def _card_params(est: OpLatencyModel) -> dict[str, Any]:
    """An op model's parameters as its card records them."""
    return {k: v for k, v in est.get_params().items() if k not in ("prior", "target")}


def _params_json(params: Mapping[str, Any] | None) -> str:
    """Card parameters as JSON (the card is JSON: a loaded card's values compare as they were saved)."""
    return json.dumps(params, sort_keys=True, default=str)


def _reusable(prior: CostModel | None, target: str, fingerprint: str, est: OpLatencyModel, seed: int,
              sibling: str | None) -> bool:
    """Whether ``prior``'s op model of ``target`` is the one fitting ``est`` on the rows of
    ``fingerprint`` would give: fitted on the same rows (the card's ``data_fingerprint``, the sibling's
    rows included) with the same sibling, parameters and seed, the same features, and the same
    numpy / scikit-learn versions (the trees they grow)."""
    if prior is None or target not in prior.op_models:
        return False
    card = prior.card
    tcard = (card.get("targets") or {}).get(target) or {}
    mine = versions()
    return (tcard.get("data_fingerprint") == fingerprint and tcard.get("sibling") == sibling
            and card.get("seed") == seed and card.get("tune_trials") == 0
            and list(card.get("feature_names") or ()) == list(FEATURE_NAMES)
            and all((card.get("versions") or {}).get(k) == mine[k] for k in ("numpy", "scikit-learn"))
            and _params_json(tcard.get("params")) == _params_json(_card_params(est)))


def fit_store(db: Any, out_dir: Any = None, *, targets: Sequence[str] | None = None, tune_trials: int = 0,
              seed: int = 0, graphs: Sequence[Any] = (), cv_folds: int = 4) -> CostModel:
    """Fit a cost model on a profile store (path or ProfileStore) and save it to ``out_dir`` if given.

    ``targets`` are target names as given to placer (``onnxruntime``, ``openvino@cpu1``: made
    canonical); ``graphs`` (OpGraphs) add their whole-model measurements as partitions;
    ``cv_folds``: folds of the card's cross-validated metrics (0: none, the fit alone; the
    hyper-parameter search of ``tune_trials`` > 0 needs at least 2).
    """
    if cv_folds == 1 or cv_folds < 0 or (tune_trials and cv_folds < 2):  # placer fit says it in one line
        raise CostModelError(f"cv_folds {cv_folds} (placer fit --cv-folds): cross-validation takes at least "
                             "2 folds (0: none" + (", which the search of --tune-trials cannot do without: "
                                                   "it scores trials by them)" if tune_trials else ")"))
    if out_dir is not None:  # before the fit: a model there this code cannot read is the user's, not ours
        check_overwritable(out_dir)
    names = None
    if targets:
        names = [TargetSpec.parse(t).name for t in targets]
    data = training_data_from_store(db, graphs=graphs, targets=names)
    cm = fit_cost_model(data, names, tune_trials=tune_trials, seed=seed, cv=max(2, cv_folds),
                        cv_metrics=cv_folds > 0)
    if not cm.op_models:  # every op of every target failed: a model that knows nothing is not a fit
        raise CostModelError(f"profile store {getattr(db, 'path', db)}: no op measurement of any target ran "
                             f"(every row failed, timed out or crashed); nothing to fit")
    cm.card["source"] = {"profile_store": str(getattr(db, "path", db))}
    if out_dir is not None:
        cm.save(out_dir)
    return cm
