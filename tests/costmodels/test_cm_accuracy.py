"""Accuracy on a held-out model, from real measurements (a committed fixture, no profiling here).

``data/measured_rows.json.gz`` holds real rows of the profile store that
``experiments/eval_costmodel.py profile`` wrote on this project's machine (2 shared cores, AMD
EPYC, 1 thread per target, load average ~4 during profiling): the single-op medians of six zoo
models (squeezenet, resnet50, inception_v1, shufflenet, BERT encoders h128/s64 and h256/s128) and
of the op variants sampled around each of them plus random ones, on ONNX Runtime, OpenVINO and
TVM (untuned), with their chain segments and whole-model runs. It was exported with::

    python experiments/eval_costmodel.py export --db runs/costmodel/profiles.db \\
        --models squeezenet,resnet50,inception_v1,shufflenet,bert-tiny,bert-h256 \\
        --out tests/costmodels/data/measured_rows.json.gz

The floors below are what the default model reached on this fixture when it was committed
(seeded, so the fit is deterministic for one scikit-learn version), minus a small slack for
floating-point differences across platforms. They guard against regressions; they are far from
the issue's target (>= 95 % of ops within +-10 %), which the measurements themselves do not meet:
the same ops profiled twice agree within +-10 % for only 68-85 % of them (see the report).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from costmodels.data import TrainingData
from costmodels.evaluate import leave_one_model_out

FIXTURE = Path(__file__).parent / "data" / "measured_rows.json.gz"
HELD_OUT = "inception_v1"
# Measured when committed (inception_v1 held out, seed 0, scikit-learn 1.9.1):
#   target               n   MAPE %  within 10 %  within 25 %   segments (ops profiled) MAPE %
#   onnxruntime@cpu:t1   97    7.3      77.3         97.9        6.9
#   openvino@cpu:t1      97   10.7      66.0         90.7       16.7
#   tvm-llvm@cpu:t1      97   22.0      34.0         71.1       27.1
# target -> (min share within +-10 %, min share within +-25 %, max MAPE %): measured -/+ slack
OP_FLOORS = {
    "onnxruntime@cpu:t1": (0.70, 0.93, 10.0),
    "openvino@cpu:t1": (0.60, 0.85, 14.0),
    "tvm-llvm@cpu:t1": (0.28, 0.65, 26.0),
}
# target -> max MAPE % of the held-out model's segments when its single ops were profiled
SEGMENT_CEILINGS = {
    "onnxruntime@cpu:t1": 10.0,
    "openvino@cpu:t1": 20.0,
    "tvm-llvm@cpu:t1": 31.0,
}


@pytest.fixture(scope="module")
def held_out_result():
    data = TrainingData.from_json(FIXTURE)
    assert HELD_OUT in data.model_names()
    return leave_one_model_out(data, [HELD_OUT], fit_kw={"seed": 0})


@pytest.mark.parametrize("target", sorted(OP_FLOORS))
def test_held_out_ops_meet_the_measured_floor(held_out_result, target):
    s = held_out_result.op_summary(("target",))[(target,)]
    min_within10, min_within25, max_mape = OP_FLOORS[target]
    assert s["n"] >= 90  # inception_v1 has ~97 signatures of its own
    assert s["within10"] >= min_within10, s
    assert s["within25"] >= min_within25, s
    assert s["mape_pct"] <= max_mape, s


@pytest.mark.parametrize("target", sorted(SEGMENT_CEILINGS))
def test_held_out_segments_with_profiled_ops(held_out_result, target):
    s = held_out_result.partition_summary()[("ops-profiled", "segment", target)]
    assert s["n"] >= 30
    assert s["mape_pct"] <= SEGMENT_CEILINGS[target], s


def test_the_noise_floor_compares_two_profiles_after_one_common_scale():
    # a second session 5 % slower as a whole: held-out rows are put on one scale, so the floor
    # measures the scatter of single ops, not the sessions' difference in speed
    from costmodels.data import OpRow
    from costmodels.evaluate import repeatability

    rng = np.random.default_rng(0)
    first, second = TrainingData(), TrainingData()
    for i in range(200):
        ms = float(rng.uniform(0.01, 2.0))
        first.ops.append(OpRow("t", f"k{i}", ms, ("m",)))
        scatter = 1.0 + (0.2 if i % 10 == 0 else 0.02) * (1 if i % 2 else -1)  # one op in ten 20 % off
        second.ops.append(OpRow("t", f"k{i}", ms * 1.05 * scatter, ("m",)))
    second.ops.append(OpRow("t", "only-in-second", 1.0, ("m",)))
    floor = repeatability(first, second)["t"]
    assert floor["n"] == 200 and floor["scale"] == pytest.approx(1.05)
    assert floor["within10"] == pytest.approx(0.9)
    as_stored = repeatability(first, second, common_scale=False)["t"]
    assert as_stored["scale"] == 1.0 and as_stored["within10"] == pytest.approx(0.9)
    slower = TrainingData(ops=[OpRow(r.target, r.key, r.latency_ms * 1.5, r.models) for r in second.ops])
    assert repeatability(first, slower)["t"]["within10"] == pytest.approx(0.9)
    assert repeatability(first, slower, common_scale=False)["t"]["within10"] == 0.0


def test_held_out_predictions_are_scored_against_the_second_profile_on_the_first_s_scale():
    from costmodels.data import OpRow
    from costmodels.evaluate import EvalResult, held_out_against, repeatability, report_markdown

    res = EvalResult(settings={"targets": ["t"], "models": ["m"]})
    first, second = TrainingData(), TrainingData()
    for i in range(20):
        ms = 0.1 * (i + 1)
        pred = ms * (1.3 if i < 4 else 1.02)  # four predictions 30 % off the first profile
        res.op_rows.append({"model": "m", "target": "t", "key": f"k{i}", "op_type": "Relu", "measured_ms": ms,
                            "predicted_ms": pred, "ape": abs(pred / ms - 1), "flops": 0.0})
        first.ops.append(OpRow("t", f"k{i}", ms, ("m",)))
        # the second session 1.2x slower as a whole; it agrees with the predictions on two of the four
        second.ops.append(OpRow("t", f"k{i}", 1.2 * (ms * 1.3 if i < 2 else ms), ("m",)))
    rep = repeatability(first, second)
    assert rep["t"]["scale"] == pytest.approx(1.2)
    on_scale = held_out_against(res, second, {"t": rep["t"]["scale"]})["t"]
    assert on_scale["n"] == 20 and on_scale["within10"] == pytest.approx(18 / 20)
    # as stored, every row 1.2x slower: only the two predictions 30 % over the first land near it
    assert held_out_against(res, second)["t"]["within10"] == pytest.approx(2 / 20)
    res.settings.update(repeatability=rep, held_out_vs_second={"t": on_scale})
    text = report_markdown(res)
    assert "against the second profile" in text and "| t | 80.0 | 90.0 | 20 |" in text


def test_the_gap_to_the_noise_floor_comes_with_a_sampling_interval_that_narrows_with_more_ops():
    # two shares of about 270 ops each: a standard error near 3 points, a 90% interval near +-5.5
    from costmodels.evaluate import Z90, gap_interval

    lo, hi = gap_interval(0.767, 270, 0.851, 288)
    assert lo < 0.767 - 0.851 < hi and (lo + hi) / 2 == pytest.approx(0.767 - 0.851)
    se = np.sqrt(0.767 * 0.233 / 270 + 0.851 * 0.149 / 288)
    assert hi - lo == pytest.approx(2 * Z90 * se) and 0.05 < Z90 * se < 0.06
    lo4, hi4 = gap_interval(0.767, 4 * 270, 0.851, 4 * 288)
    assert hi4 - lo4 == pytest.approx((hi - lo) / 2)
    assert gap_interval(1.0, 10, 0.0, 10) == (1.0, 1.0)  # shares of 0 or 1 vary by nothing
