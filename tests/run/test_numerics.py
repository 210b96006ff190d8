"""Numerics check: tolerances scale with the reference's magnitude; degenerate references warn.

Real ONNX Runtime on tiny onnx.helper models: the reference is the whole model in ORT
(:class:`ReferenceRunner`), the "plan" outputs come from another ORT session.
"""

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.run.numerics import (
    DegenerateReferenceWarning,
    NumericsReport,
    ReferenceRunner,
    check_against_reference,
    compare,
)


def _scale_model(factor: float, shape=(4, 8)) -> onnx.ModelProto:
    """y = x * factor."""
    k = numpy_helper.from_array(np.array(factor, dtype=np.float32), "k")
    node = helper.make_node("Mul", ["x", "k"], ["y"], name="mul")
    g = helper.make_graph([node], "scale", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], initializer=[k])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _mlp_model() -> onnx.ModelProto:
    """softmax(relu(x @ W + b)) and the logits: a normal model with O(1) outputs."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["logits"], name="add"),
             helper.make_node("Relu", ["logits"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["probs"], name="softmax", axis=-1)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 16])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [3, 10]),
                           helper.make_tensor_value_info("probs", TensorProto.FLOAT, [3, 10])],
                          initializer=[w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _ort_outputs(model: onnx.ModelProto, feeds, *, optimize: bool = True) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def _feeds(shape, seed=0):
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def test_tiny_reference_outputs_catch_a_2x_wrong_plan_and_warn():
    model = _scale_model(1e-21)
    feeds = _feeds((4, 8))
    wrong = _ort_outputs(_scale_model(2e-21), feeds)  # a "plan" that computes twice the right answer
    assert 1e-23 < float(np.abs(wrong["y"]).max()) < 1e-19
    with pytest.warns(DegenerateReferenceWarning, match="'y' is near-zero"):
        report = check_against_reference(model, [feeds], [wrong])
    assert isinstance(report, NumericsReport)
    assert not report.passed, report.summary()  # an absolute atol of 1e-4 would have passed it
    (o,) = report.failures()
    assert o.name == "y" and "elements outside tolerance" in o.reason
    assert o.atol_eff < 1e-20 and o.max_rel == pytest.approx(1.0, rel=1e-3)  # |2r - r| / |r|
    assert o.degenerate.startswith("near-zero") and [x.name for x in report.degenerate] == ["y"]
    assert report.to_dict()["degenerate"] == ["y"] and "proves little" in report.summary()

    # the right answer at that scale still passes (the tolerance scales down, it does not vanish)
    with pytest.warns(DegenerateReferenceWarning):
        right = check_against_reference(model, [feeds], [_ort_outputs(model, feeds, optimize=False)])
    assert right.passed, right.summary()


def test_near_constant_reference_warns():
    model = _scale_model(0.0)  # y == 0 everywhere: near-zero
    feeds = _feeds((4, 8))
    with pytest.warns(DegenerateReferenceWarning, match="near-zero"):
        assert check_against_reference(model, [feeds], [_ort_outputs(model, feeds)]).passed
    const = {"x": np.full((4, 8), 3.0, dtype=np.float32)}  # a constant input makes a constant output
    with pytest.warns(DegenerateReferenceWarning, match="near-constant"):
        report = check_against_reference(_scale_model(2.0), [const], [_ort_outputs(_scale_model(2.0), const)])
    assert report.passed and report.outputs[0].degenerate.startswith("near-constant")


@pytest.mark.parametrize("factor", [1.0, 1e-21, 0.0])
def test_atol_zero_never_warns_about_division(factor):
    model = _scale_model(factor)
    feeds = _feeds((4, 8), seed=1)
    got = _ort_outputs(model, feeds, optimize=False)
    ref = ReferenceRunner(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any RuntimeWarning (divide, invalid value) raises
        if factor != 1.0:
            warnings.simplefilter("ignore", DegenerateReferenceWarning)
        report = check_against_reference(model, [feeds], [got], atol=0.0, reference=ref)
        assert report.passed, report.summary()
        # zeros, NaN and infinities against a zero / tiny reference, atol = rtol = 0
        y = got["y"].copy()
        y.flat[0], y.flat[1], y.flat[2] = np.nan, np.inf, 0.0
        bad = compare({"y": y}, ref.run(feeds), rtol=0.0, atol=0.0)
    assert not bad.passed and bad.outputs[0].max_abs == float("inf")
    assert np.isfinite(report.outputs[0].max_rel)


def test_infinities_and_nans_match_themselves_without_warnings():
    ref = {"y": np.array([np.inf, -np.inf, np.nan, 1.0], dtype=np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compare({"y": ref["y"].copy()}, ref, atol=0.0).passed
        flipped = compare({"y": np.array([-np.inf, np.inf, np.nan, 1.0], dtype=np.float32)}, ref, atol=0.0)
    assert not flipped.passed and flipped.outputs[0].reason == "2 of 4 elements outside tolerance"


def test_normal_model_passes_ort_vs_ort_without_degenerate_warning():
    model = _mlp_model()
    reqs = [_feeds((3, 16), seed=s) for s in range(3)]
    outs = [_ort_outputs(model, f, optimize=False) for f in reqs]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DegenerateReferenceWarning, no RuntimeWarning
        report = check_against_reference(model, reqs, outs)
    assert report.passed and report.n_requests == 3 and not report.degenerate
    by = {o.name: o for o in report.outputs}
    assert set(by) == {"logits", "probs"}
    # atol is relative to the output's magnitude: the logits' (max ~ several units) is larger
    assert by["logits"].atol_eff == pytest.approx(1e-4 * by["logits"].ref_max_abs)
    assert by["logits"].atol_eff > by["probs"].atol_eff
    # a perturbation well past the scaled tolerance fails
    off = [dict(o, logits=o["logits"] + 1e-2 * by["logits"].ref_max_abs) for o in outs]
    assert not check_against_reference(model, reqs, off).passed
