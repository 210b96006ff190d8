"""A multi-thread target's op model fitted with its one-thread sibling's (costmodels.sibling)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodels.data import OpRow, TrainingData
from costmodels.features import feature_matrix, signature_key
from costmodels.op_model import OpLatencyModel
from costmodels.sibling import sibling_target
from costmodels.train import fit_cost_model
from costmodels.tuning import SiblingRows, cv_log_mae

from _cmdata import conv_sig, law_ms, relu_sig

T1, T2 = "ort@cpu:t1", "ort@cpu:t2"
QUICK = {"n_estimators": 30, "n_models": 1}


def test_the_sibling_is_the_same_runtime_at_one_thread_unpinned_first():
    names = ["ort@cpu:t2", "ort@cpu10:t1", "ort@cpu2:t1", "ov@cpu:t1", "ort:x@cpu:t1", "sim:board/dpu"]
    assert sibling_target("ort@cpu:t2", names) == "ort@cpu2:t1"  # the lowest core, by number
    assert sibling_target("ort@cpu:t2", names + ["ort@cpu:t1"]) == "ort@cpu:t1"
    assert sibling_target("ort:x@cpu0,1:t2", names) == "ort:x@cpu:t1"
    assert sibling_target("ov@cpu:t2", ["ov@cpu:t4"]) is None
    assert sibling_target("ort@cpu:t1", names) is None  # one thread already
    assert sibling_target("sim:board/dpu", names) is None


def _one_thread_law(sig: dict) -> float:
    """The roofline law, 1.6x slower where the channels are a multiple of 3 (no feature says so)."""
    return law_ms(sig, "fast") * (1.6 if sig["inputs"][0]["shape"][1] % 3 == 0 else 1.0)


def _two_thread_law(sig: dict) -> float:
    """A pool that splits an op above 20k output elements (0.55x) and pays a hand-off below (1.3x)."""
    n = int(np.prod(sig["outputs"][0]["shape"]))
    return _one_thread_law(sig) * (0.55 if n > 20_000 else 1.3)


def _data(noise_t2: float) -> TrainingData:
    """Convs and relus of four 'models': one-thread rows for all, two-thread rows for half of them."""
    rng = np.random.default_rng(0)
    data = TrainingData()
    for i, chans in enumerate([(8, 24, 72), (12, 36, 96), (16, 48, 128), (20, 60, 160)]):
        for c in chans:
            for h in (5, 7, 14, 28, 56):
                for sig in (conv_sig(c, c, h), conv_sig(c, 2 * c, h, 1), relu_sig(c, h)):
                    key = signature_key(sig)
                    data.add_signature(key, sig)
                    data.ops.append(OpRow(T1, key, _one_thread_law(sig), (f"m{i}",)))
                    if rng.random() < 0.5:
                        noise = float(np.exp(rng.normal(0, noise_t2)))
                        data.ops.append(OpRow(T2, key, _two_thread_law(sig) * noise, (f"m{i}",)))
    return data


def test_two_thread_ops_never_measured_there_are_predicted_closer_to_their_law_with_the_sibling():
    data = _data(noise_t2=0.02)
    measured = {r.key for r in data.op_rows(T2)}
    keys = sorted(k for k in data.signatures if k not in measured)
    F = feature_matrix([data.signatures[k] for k in keys])
    truth = np.array([_two_thread_law(data.signatures[k]) for k in keys])
    with_sibling = fit_cost_model(data, [T2], op_params=QUICK, cv_metrics=False)
    without = fit_cost_model(data, [T2], op_params={**QUICK, "sibling_weight": 0.0}, cv_metrics=False)
    assert with_sibling.card["targets"][T2]["sibling"] == T1
    assert without.targets == with_sibling.targets == [T2]  # the sibling is a prior, not a target
    err = {name: np.mean(np.abs(np.log(cm.op_models[T2].predict(F) / truth)))
           for name, cm in (("with", with_sibling), ("without", without))}
    # the quirk is in the one-thread rows of every signature: the sibling's branch carries it over
    assert err["with"] < 0.8 * err["without"], err


def test_the_sibling_branch_is_a_log_average_and_survives_save_and_load(tmp_path):
    from costmodels.cost_model import CostModel

    data = _data(noise_t2=0.05)
    cm = fit_cost_model(data, [T1, T2], op_params=QUICK, cv_metrics=False)
    m2 = cm.op_models[T2]
    assert m2.sibling_prior_.sibling is cm.op_models[T1] and m2.sibling_weight_ == 0.5
    F = feature_matrix(list(data.signatures.values()))
    both = m2._log_prediction(F)
    m2.sibling_weight_ = 0.0
    own = m2._log_prediction(F)
    m2.sibling_weight_ = 1.0
    sib = m2._log_prediction(F)
    m2.sibling_weight_ = 0.5
    np.testing.assert_allclose(both, 0.5 * own + 0.5 * sib, rtol=1e-12)
    assert np.max(np.abs(own - sib)) > 1e-3  # the two branches are different models
    cm.save(tmp_path / "m")
    back = CostModel.load(tmp_path / "m")
    np.testing.assert_allclose(back.op_models[T2].predict(F), m2.predict(F), rtol=1e-12)


def test_cross_validation_fits_each_folds_sibling_without_the_folds_models():
    data = _data(noise_t2=0.05)
    rows1 = data.op_rows(T1)
    F1 = feature_matrix([data.signatures[r.key] for r in rows1])
    sib = SiblingRows(OpLatencyModel(target=T1, **QUICK), F1, np.array([r.latency_ms for r in rows1]),
                      np.array([r.models[0] for r in rows1], dtype=object))
    fitted = sib.fit_without(groups={"m1", "m2"})
    assert fitted.n_train_ == sum(r.models[0] not in ("m1", "m2") for r in rows1)
    assert sib.fit_without(groups={"m2", "m1"}) is fitted  # once per fold, whatever the trials
    rows2 = data.op_rows(T2)
    F2 = feature_matrix([data.signatures[r.key] for r in rows2])
    y2 = np.array([r.latency_ms for r in rows2])
    groups2 = np.array([r.models[0] for r in rows2], dtype=object)
    score = cv_log_mae(OpLatencyModel(target=T2, **QUICK), F2, y2, groups2, cv=4, sibling=sib)
    assert np.isfinite(score)
    folds = {frozenset({"m1", "m2"})} | {frozenset({f"m{i}"}) for i in range(4)}
    assert {held for held, _ in sib._fitted} == folds
    # without groups (shuffled folds) a fold's sibling leaves out the fold's signatures instead
    score = cv_log_mae(OpLatencyModel(target=T2, **QUICK), F2, y2, None, cv=3, sibling=sib)
    assert np.isfinite(score)
    shuffled = [(held, drop) for held, drop in sib._fitted if drop]
    assert len(shuffled) == 3 and all(not held for held, _ in shuffled)
    (_, drop), = shuffled[:1]
    assert sib._fitted[shuffled[0]].n_train_ == sum(row.tobytes() not in drop for row in F1)


def test_a_fold_that_leaves_the_sibling_too_few_rows_is_fitted_without_one():
    # the one-thread target measured one model of the four: the fold holding it out has no sibling
    data = _data(noise_t2=0.05)
    data.ops = [r for r in data.ops if r.target == T2 or r.models[0] == "m0"]
    cm = fit_cost_model(data, [T2], op_params=QUICK, cv_metrics=True)
    card = cm.card["targets"][T2]
    assert card["sibling"] == T1 and np.isfinite(card["metrics"]["cv_log_mae"])


@pytest.mark.parametrize("weight", [-0.1, 1.5])
def test_a_sibling_weight_outside_zero_to_one_is_refused(weight):
    data = _data(noise_t2=0.05)
    with pytest.raises(ValueError, match="sibling_weight"):
        fit_cost_model(data, [T2], op_params={**QUICK, "sibling_weight": weight}, cv_metrics=False)


@pytest.mark.filterwarnings("ignore:Fixed parameter:UserWarning")  # 30 trees: below the search's range
def test_a_siblings_rows_are_part_of_the_models_identity_and_fixed_settings_survive_a_search():
    data = _data(noise_t2=0.05)
    first = fit_cost_model(data, [T2], op_params=QUICK, cv_metrics=False)
    data.ops = [OpRow(r.target, r.key, r.latency_ms * (1.1 if r.target == T1 else 1.0), r.models)
                for r in data.ops]
    second = fit_cost_model(data, [T2], op_params=QUICK, cv_metrics=False)
    assert first.model_id != second.model_id  # only the sibling's rows changed
    assert first.card["targets"][T2]["data_fingerprint"] != second.card["targets"][T2]["data_fingerprint"]
    searched = fit_cost_model(data, [T2], op_params={**QUICK, "sibling_weight": 0.0}, tune_trials=1,
                              cv_metrics=False)
    assert searched.op_models[T2].sibling_weight == 0.0 and searched.op_models[T2].sibling_weight_ == 0.0


def test_the_evaluation_says_which_sibling_each_target_was_fitted_with():
    from costmodels.evaluate import leave_one_model_out, sibling_line

    res = leave_one_model_out(_data(noise_t2=0.02), ["m0"], [T2], fit_kw={"op_params": QUICK})
    assert res.settings["siblings"] == {T2: [T1]}
    assert sibling_line(res) == f"One-thread sibling of each target's op model: {T2}: {T1}."
    alone = _data(noise_t2=0.02)
    alone.ops = alone.op_rows(T2)  # a store without the one-thread rows
    res = leave_one_model_out(alone, ["m0"], [T2], fit_kw={"op_params": QUICK})
    assert sibling_line(res) == f"One-thread sibling of each target's op model: {T2}: none."
