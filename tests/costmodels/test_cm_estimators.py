"""One contract test over every estimator (scikit-learn developer guide conventions)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from costmodels.op_model import OpLatencyModel
from costmodels.partition import PartitionCorrection
from costmodels.roofline import RooflineModel
from costmodels.transfer import TransferModel

from _cmdata import TARGETS, conv_sig, law_ms, lrn_sig, relu_sig


def _op_xy():
    sigs = [s for c in (8, 16, 32) for h in (7, 14, 28) for s in (conv_sig(c, c, h), relu_sig(c, h))]
    return sigs, [law_ms(s, TARGETS[0]) for s in sigs]


def _partition_xy():
    rng = np.random.default_rng(0)
    X = [{"target": TARGETS[0], "op_types": ["Conv", "Relu", "Add"][: int(rng.integers(2, 4))],
          "isolated_ms": list(rng.uniform(0.01, 1.0, 3)), "overhead_ms": 0.004, "boundary_bytes": 1e4}
         for _ in range(30)]
    for x in X:
        x["isolated_ms"] = x["isolated_ms"][: len(x["op_types"])]
    return X, [0.004 + 0.7 * sum(x["isolated_ms"]) for x in X]


def _transfer_xy():
    X = [(TARGETS[0], TARGETS[1], n) for n in (1e3, 1e5, 1e6)]
    return X, [0.02 + n * 2e-7 for _, _, n in X]


CASES = {
    "OpLatencyModel-gbr": (lambda: OpLatencyModel(target=TARGETS[0], n_estimators=30), _op_xy),
    "OpLatencyModel-rf": (lambda: OpLatencyModel(target=TARGETS[0], regressor="rf", n_estimators=20), _op_xy),
    "RooflineModel": (lambda: RooflineModel(), _op_xy),
    "PartitionCorrection": (lambda: PartitionCorrection(min_samples=10, n_estimators=30), _partition_xy),
    "TransferModel": (lambda: TransferModel(), _transfer_xy),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_estimator_contract(name):
    make, data = CASES[name]
    est = make()
    X, y = data()
    params = est.get_params()
    # __init__ stores its parameters and nothing else
    assert set(vars(est)) == set(params), f"{name}: __init__ sets {set(vars(est)) - set(params)}"
    assert not [k for k in vars(est) if k.endswith("_")]
    # clone gives equal parameters, set_params round-trips
    twin = clone(est)
    assert twin.get_params() == params and twin is not est
    assert est.set_params(**params) is est
    # not fitted: predict raises NotFittedError
    with pytest.raises(NotFittedError):
        est.predict(X)
    # fit returns self, sets fitted attributes ending in "_" and changes no parameter
    assert est.fit(X, y) is est
    fitted = [k for k in vars(est) if k not in params]
    assert fitted and all(k.endswith("_") for k in fitted), fitted
    assert est.get_params() == params
    pred = est.predict(X)
    assert pred.shape == (len(X),) and np.all(np.isfinite(pred)) and np.all(pred >= 0)
    # deterministic for a seed: a clone fitted on the same data predicts the same
    np.testing.assert_allclose(clone(est).fit(X, y).predict(X), pred)
    # a clone of a fitted estimator is unfitted
    with pytest.raises(NotFittedError):
        clone(est).predict(X)


def test_op_model_fits_the_law_and_marks_never_supported_types_inf():
    sigs, y = _op_xy()
    extra = [{"op_type": "LRN", "inputs": [[(1, 8, 14, 14), "float32"]], "outputs": [[(1, 8, 14, 14), "float32"]]}]
    m = OpLatencyModel(n_estimators=200).fit(sigs + extra, y + [float("inf")])
    assert m.unsupported_op_types_ == ["LRN"]
    assert np.isinf(m.predict(extra)[0])
    rel = np.abs(m.predict(sigs) - y) / np.asarray(y)
    assert rel.max() < 0.05


@pytest.mark.parametrize("rows", [1, 2, 4])
def test_an_op_model_fits_on_as_few_rows_as_a_one_op_model_gives(rows):
    """Boosting on a subsample scores the rows it leaves out; one or two rows leave none, and scikit-learn
    divided by their zero weight (`placer tune` on a one-op model with a fresh store crashed)."""
    sigs, y = _op_xy()
    m = OpLatencyModel(n_estimators=20, subsample=0.8, robust=True).fit(sigs[:rows], y[:rows])
    assert np.all(np.isfinite(m.predict(sigs[:rows]))) and m.n_train_ == rows


def test_op_model_averages_its_seeds_in_log_space():
    sigs, y = _op_xy()
    three = OpLatencyModel(n_estimators=40, n_models=3, random_state=5).fit(sigs, y)
    assert len(three.regressors_) == 3
    singles = [OpLatencyModel(n_estimators=40, n_models=1, random_state=5 + i).fit(sigs, y) for i in range(3)]
    np.testing.assert_allclose(np.log(three.predict(sigs)), np.mean([np.log(m.predict(sigs)) for m in singles], axis=0))
    assert not np.allclose(singles[0].predict(sigs), singles[1].predict(sigs))  # the seeds do differ
    # without row subsampling every seed would fit the same trees: one regressor
    assert len(OpLatencyModel(n_estimators=20, subsample=1.0).fit(sigs, y).regressors_) == 1
    with pytest.raises(ValueError, match="n_models"):
        OpLatencyModel(n_models=0).fit(sigs, y)


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_threads_fit_the_same_regressors_in_the_same_order(monkeypatch, threads):
    """An op model's regressors (three seeds x roofline and affine priors, and the sibling's pair)
    fitted on several threads are the ones fitted one after the other: the same trees, in the same
    slots, so the same predictions."""
    from costmodels import op_model

    sigs, y = _op_xy()
    monkeypatch.setattr(op_model, "FIT_THREADS", 1)
    one = OpLatencyModel(n_estimators=30).fit(sigs, y)
    sib = OpLatencyModel(n_estimators=30).fit(sigs, [2 * v for v in y])
    one_s = OpLatencyModel(n_estimators=30).fit(sigs, y, sibling=sib)
    monkeypatch.setattr(op_model, "FIT_THREADS", threads)
    assert op_model.fit_threads(6, 10) == min(threads, 6) and op_model.fit_threads(1, 10**6) == 1
    monkeypatch.setattr(op_model, "FIT_THREADS", None)  # automatic: few rows, one thread
    assert op_model.fit_threads(6, op_model.THREADS_MIN_ROWS - 1) == 1
    monkeypatch.setattr(op_model, "FIT_THREADS", threads)
    many = OpLatencyModel(n_estimators=30).fit(sigs, y)
    many_s = OpLatencyModel(n_estimators=30).fit(sigs, y, sibling=sib)
    for a, b in ((one, many), (one_s, many_s)):
        for name in ("regressors_", "affine_regressors_", "sibling_regressors_", "sibling_affine_regressors_"):
            ra, rb = getattr(a, name), getattr(b, name)
            assert (ra is None) == (rb is None)
            for u, v in zip(ra or [], rb or [], strict=True):
                assert u.random_state == v.random_state
                np.testing.assert_array_equal(u.train_score_, v.train_score_)  # stage by stage
        np.testing.assert_array_equal(a.predict(sigs), b.predict(sigs))
    assert one_s.sibling_regressors_ is not None and one.sibling_regressors_ is None


def test_roofline_from_spec_needs_no_data():
    rm = RooflineModel.from_spec({"peak_gflops": 100.0, "mem_bandwidth_gbs": 10.0, "call_overhead_ms": 0.01})
    conv = conv_sig(64, 64, 56)
    ms = rm.predict([conv])[0]
    assert ms > 0.01
    with pytest.raises(ValueError, match="no data"):
        RooflineModel().fit([], [])


def test_optuna_search_is_seeded_and_feeds_the_fit(synthetic_data):
    from costmodels.features import feature_matrix
    from costmodels.train import fit_cost_model
    from costmodels.tuning import tune_op_model

    rows = synthetic_data.op_rows(TARGETS[0])
    F = feature_matrix([synthetic_data.signatures[r.key] for r in rows])
    y = np.array([r.latency_ms for r in rows])
    groups = np.array([r.models[0] for r in rows])
    # one tree set per branch (n_models=1): the search and its seeding are what is tested, at a third of the fits
    base = OpLatencyModel(random_state=1, n_models=1)
    a = tune_op_model(F, y, groups, n_trials=3, seed=1, cv=3, base=base)
    b = tune_op_model(F, y, groups, n_trials=3, seed=1, cv=3, base=base)
    assert a == b and a[1] < 0.5
    cm = fit_cost_model(synthetic_data, [TARGETS[0]], tune_trials=2, seed=1, cv=3, cv_metrics=False,
                        op_params={"n_models": 1})
    card = cm.card["targets"][TARGETS[0]]
    assert "tuned_cv_log_mae" in card["metrics"]
    assert cm.op_models[TARGETS[0]].n_models == 1  # the fixed setting survives the search
    assert card["params"]["regressor"] in ("gbr", "rf")


@pytest.mark.parametrize("kind,robust", [("gbr", True), ("gbr", False), ("rf", False)])
def test_the_flat_forest_predicts_what_its_regressors_predict(kind, robust):
    from costmodels import flat_forest
    from costmodels._common import make_regressor

    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 6))
    X[:, 5] = np.round(X[:, 5])  # a feature of few values, as the one-hot and count features are
    y = X[:, 0] ** 2 + np.sin(X[:, 1]) + X[:, 5] + 0.1 * rng.normal(size=300)
    w = rng.uniform(0.2, 2.0, size=300)
    regs = [make_regressor(kind, n_estimators=30, max_depth=5, learning_rate=0.1, min_samples_leaf=2,
                           subsample=0.8, random_state=seed, robust=robust).fit(X, y, sample_weight=w)
            for seed in (0, 1)]
    forest = flat_forest.flatten(regs)
    # rows far outside the data, and rows whose every feature sits on some node's threshold
    inner = forest["left"] != np.arange(len(forest["left"]))
    on = np.stack([rng.choice(forest["threshold"][inner & (forest["feature"] == f)], 50)
                   for f in range(6)], axis=1)
    rows = np.vstack([X, 3 * rng.normal(size=(100, 6)), on])
    expected = np.mean([r.predict(rows) for r in regs], axis=0)
    np.testing.assert_allclose(flat_forest.predict(forest, rows), expected, rtol=0, atol=1e-12)
    ridge = make_regressor("ridge", n_estimators=1, max_depth=None, learning_rate=0.1, min_samples_leaf=1,
                           subsample=1.0, random_state=0).fit(X, y)
    assert flat_forest.flatten([regs[0], ridge]) is None  # not every regressor a tree ensemble: none


def test_a_saved_op_model_holds_its_trees_as_one_flat_forest_and_predicts_the_same(tmp_path):
    import skops.io as sio

    sigs, y = _op_xy()
    m = OpLatencyModel(n_estimators=40, n_models=3, random_state=5).fit(sigs, y)
    sio.dump(m, tmp_path / "m.skops")
    assert "sklearn.tree._tree.Tree" not in sio.get_untrusted_types(file=tmp_path / "m.skops")
    back = sio.load(tmp_path / "m.skops", trusted=sio.get_untrusted_types(file=tmp_path / "m.skops"))
    assert not hasattr(back, "regressors_")
    assert len(m.regressors_) == 3  # saving left the model itself as it was
    np.testing.assert_array_equal(back.predict(sigs), m.predict(sigs))
    ridge = OpLatencyModel(regressor="ridge").fit(sigs, y)  # no forest: its regressor is saved as it is
    sio.dump(ridge, tmp_path / "r.skops")
    again = sio.load(tmp_path / "r.skops", trusted=sio.get_untrusted_types(file=tmp_path / "r.skops"))
    np.testing.assert_allclose(again.predict(sigs), ridge.predict(sigs))


def test_the_affine_prior_gives_each_memory_bound_op_type_its_own_overhead_and_rate():
    from costmodels.op_affine import OpTypeAffinePrior

    sizes = [(c, h) for c in (8, 16, 32, 64) for h in (7, 14, 28, 56)]  # 16 of each
    relu, lrn = [relu_sig(c, h) for c, h in sizes], [lrn_sig(c, h) for c, h in sizes]
    convs = [conv_sig(c, c, h) for c, h in sizes]

    def mb(sig):  # MB moved: input and output
        c, h = sig["inputs"][0]["shape"][1], sig["inputs"][0]["shape"][2]
        return 2 * 4 * c * h * h * 1e-6

    y = [0.003 + 0.05 * mb(s) for s in relu] + [0.020 + 0.4 * mb(s) for s in lrn]
    y += [law_ms(s, TARGETS[0]) for s in convs]
    prior = OpTypeAffinePrior().fit(relu + lrn + convs, y)
    np.testing.assert_allclose(prior.coef_["Relu"], [0.003, 0.05], rtol=1e-6)
    np.testing.assert_allclose(prior.coef_["LRN"], [0.020, 0.4], rtol=1e-6)
    assert "Conv" not in prior.coef_  # compute-bound: the roofline's estimate
    np.testing.assert_allclose(prior.predict(convs), prior.roofline_.predict(convs))
    few = OpTypeAffinePrior(min_rows=20).fit(relu + lrn, y[:32])
    assert few.coef_ == {}  # 16 rows of each: too few for their own line


def test_affine_weight_averages_the_two_priors_models_in_log_space(tmp_path):
    import skops.io as sio

    sigs, y = _op_xy()
    kw = dict(n_estimators=30, n_models=2, random_state=1)
    roof, both, affine = (OpLatencyModel(affine_weight=a, **kw).fit(sigs, y) for a in (0.0, 0.5, 1.0))
    np.testing.assert_allclose(np.log(both.predict(sigs)),
                               0.5 * np.log(roof.predict(sigs)) + 0.5 * np.log(affine.predict(sigs)))
    assert roof.affine_prior_ is None and both.affine_prior_ is not None
    spec = OpLatencyModel(prior={"peak_gflops": 10.0, "mem_bandwidth_gbs": 5.0}, **kw).fit(sigs, y)
    assert spec.affine_weight_ == 0.0  # a spec prior: no data-fitted second prior
    sio.dump(both, tmp_path / "m.skops")
    types = sio.get_untrusted_types(file=tmp_path / "m.skops")
    assert "costmodels.op_affine.OpTypeAffinePrior" in types and "sklearn.tree._tree.Tree" not in types
    back = sio.load(tmp_path / "m.skops", trusted=types)
    np.testing.assert_array_equal(back.predict(sigs), both.predict(sigs))
    with pytest.raises(ValueError, match="affine_weight"):
        OpLatencyModel(affine_weight=1.5).fit(sigs, y)


def test_a_residual_sum_gets_its_own_op_type_and_so_its_own_line_in_the_affine_prior():
    # ResNet-50 (opset 7) adds its residuals with an n-ary Sum: it was the pooled "other" column,
    # which the second prior leaves to the roofline, and was priced up to 1.2x its time held out
    from costmodels.features import FEATURE_NAMES, feature_matrix, op_type_of_rows
    from costmodels.op_affine import OpTypeAffinePrior
    from costmodels.roofline import work_of

    def sum_sig(c, h, n=2):
        x = [[1, c, h, h], "float32"]
        return {"op_type": "Sum", "attrs": {}, "inputs": [x] * n, "outputs": [x]}

    sums = [sum_sig(c, h, n) for c in (64, 256, 1024, 2048) for h in (7, 14, 28, 56) for n in (2, 3)]
    F = feature_matrix(sums)
    assert "op=Sum" in FEATURE_NAMES and set(op_type_of_rows(F)) == {"Sum"}
    mb = work_of(F)[1] * 1e-6
    y = 0.006 + 0.03 * mb
    prior = OpTypeAffinePrior().fit(F, y)
    np.testing.assert_allclose(prior.coef_["Sum"], [0.006, 0.03], rtol=1e-6)
    np.testing.assert_allclose(prior.predict(F), y, rtol=1e-6)
