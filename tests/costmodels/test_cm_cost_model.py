"""CostModel facade: exact vs predicted, unsupported, transfers, overheads, partitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _cmdata import TARGETS, conv_sig, law_ms, lrn_sig, relu_sig

from costmodels.errors import CostModelError
from costmodels.features import signature_key
from costmodels.train import fit_cost_model


def test_measured_signatures_are_exact_and_flagged(fitted_model, synthetic_data):
    row = next(r for r in synthetic_data.ops if r.target == TARGETS[0])
    sig = synthetic_data.signatures[row.key]
    unseen = conv_sig(20, 20, 20)
    costs, exact = fitted_model.predict_ops([sig, unseen, sig], list(TARGETS), return_measured=True)
    assert costs.shape == exact.shape == (3, 2)
    assert exact[0].all() and exact[2].all() and not exact[1].any()
    ov = fitted_model.overhead_ms(TARGETS[0])
    assert costs[0, 0] == pytest.approx(max(row.latency_ms - ov, 0.0))  # net of the call overhead
    assert fitted_model.predict_op_ms(sig, TARGETS[0], include_overhead=True) == pytest.approx(row.latency_ms)
    # an unseen signature is predicted close to the law it was drawn from
    assert fitted_model.predict_op_ms(unseen, TARGETS[0], include_overhead=True) == pytest.approx(
        law_ms(unseen, TARGETS[0]), rel=0.25)


def test_unsupported_is_inf_exactly_and_by_op_type(fitted_model, synthetic_data):
    measured_lrn = next(r for r in synthetic_data.ops if r.target == TARGETS[1] and math.isinf(r.latency_ms))
    assert math.isinf(fitted_model.predict_op_ms(synthetic_data.signatures[measured_lrn.key], TARGETS[1]))
    unseen_lrn = lrn_sig(33, 33)
    assert math.isinf(fitted_model.predict_op_ms(unseen_lrn, TARGETS[1]))  # LRN never ran there
    assert math.isfinite(fitted_model.predict_op_ms(unseen_lrn, TARGETS[0]))
    assert math.isinf(fitted_model.predict_partition_ms([relu_sig(8, 7), unseen_lrn], TARGETS[1]))


def test_unknown_target_names_the_known_ones(fitted_model):
    with pytest.raises(CostModelError, match="fast@cpu:t1"):
        fitted_model.predict_op_ms(relu_sig(8, 7), "nope@cpu:t1")


def test_transfer_and_overhead(fitted_model):
    assert fitted_model.transfer_ms(1e6, TARGETS[0], TARGETS[1]) == pytest.approx(0.22, rel=0.05)
    assert fitted_model.transfer_ms(1e6, TARGETS[0], TARGETS[0]) == 0.0
    assert fitted_model.overhead_ms(TARGETS[1]) == 0.010


def test_partition_correction_learns_fusion_and_feedback_moves_it(synthetic_data):
    cm = fit_cost_model(synthetic_data, op_params={"n_estimators": 50}, cv_metrics=False)
    ops = [conv_sig(16, 16, 28), relu_sig(16, 28), conv_sig(16, 32, 28, 1)]
    iso = cm.predict_ops(ops, [TARGETS[0]], include_overhead=True)[:, 0]
    ov = cm.overhead_ms(TARGETS[0])
    naive = ov + np.maximum(iso - ov, 0.1 * iso).sum()
    pred = cm.predict_partition_ms(ops, TARGETS[0])
    assert pred == pytest.approx(ov + 0.7 * (naive - ov), rel=0.1)  # the synthetic fusion ratio
    # one op alone is its isolated cost
    assert cm.predict_partition_ms(ops[:1], TARGETS[0]) == pytest.approx(iso[0], rel=1e-6)
    # measured partitions fed back (the tuner) pull the prediction towards them
    n = cm.add_partition_measurements(
        [{"target": TARGETS[0], "ops": ops, "measured_ms": 1.5 * naive} for _ in range(40)])
    assert n == 40
    assert cm.predict_partition_ms(ops, TARGETS[0]) > pred * 1.3


def test_graph_input_and_signature_keys(fitted_model):
    from placer.graph import build_graph, load_model

    from costmodels.sampler import bank_model

    specs = [{"family": "conv", "N": 1, "C": 8, "H": 14, "W": 14, "K": 8, "kernel": 3, "stride": 1, "group": 1,
              "bias": False},
             {"family": "eltwise", "op": "Relu", "shape": [1, 8, 14, 14], "other": None}]
    g = build_graph(load_model(bank_model(specs)))
    costs = fitted_model.predict_ops(g, list(TARGETS))
    assert costs.shape == (2, 2) and np.all(np.isfinite(costs)) and np.all(costs >= 0)
    assert signature_key(g.ops[0]) == g.ops[0].signature.hash


def test_spec_only_target(synthetic_data):
    spec = {"peak_gflops": 50.0, "mem_bandwidth_gbs": 20.0, "call_overhead_ms": 0.002}
    cm = fit_cost_model(synthetic_data, op_params={"n_estimators": 20}, cv_metrics=False, specs={"sim:npu": spec})
    assert "sim:npu" in cm.targets
    assert cm.overhead_ms("sim:npu") == 0.002
    assert cm.predict_op_ms(conv_sig(64, 64, 56), "sim:npu") > 0


def test_tuner_rows_with_op_ids_need_the_graph(synthetic_data):
    from placer.graph import build_graph, load_model

    from costmodels.sampler import bank_model

    cm = fit_cost_model(synthetic_data, op_params={"n_estimators": 20}, cv_metrics=False)
    specs = [{"family": "eltwise", "op": "Relu", "shape": [1, 8, 14, 14], "other": None},
             {"family": "eltwise", "op": "Sigmoid", "shape": [1, 8, 14, 14], "other": None}]
    g = build_graph(load_model(bank_model(specs)))
    row = {"partition": "p0", "target": TARGETS[0], "ops": [op.id for op in g.ops], "n_inputs": 2,
           "predicted_ms": 0.1, "measured_ms": 0.05}  # the shape of placer.tune's feedback rows
    with pytest.warns(UserWarning, match="graph"):
        assert cm.add_partition_measurements([row]) == 0
    assert cm.add_partition_measurements([row], graph=g) == 1
    rec, measured = cm.partition_records[-1]
    assert rec["op_types"] == ["Relu", "Sigmoid"] and rec["boundary_bytes"] > 0 and measured == 0.05
