"""Tiny models with control flow and data-dependent shapes, built with onnx.helper.

Each has static convolution / matmul parts around a dynamic region placer keeps as one opaque
op (docs/design.md, "Opaque regions"). Importable from every test folder (tests/ is on sys.path
through tests/conftest.py).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

OPSET = 17


def _w(name: str, shape: tuple[int, ...], seed: int) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, name: str) -> onnx.ModelProto:
    g = h.make_graph(nodes, name, inputs, outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], producer_name="placer-tests")
    m.ir_version = 8
    return m


def if_model() -> onnx.ModelProto:
    """Conv -> Relu -> If(sum > 0: *2 + bias, else: -x) -> Conv -> Flatten -> MatMul.

    The condition is computed from the activations, so nothing folds it; both branches read the
    outer tensor ``r`` (an implicit input of the If)."""
    then_g = h.make_graph(
        [h.make_node("Mul", ["r", "two"], ["t0"], name="then_mul"),
         h.make_node("Add", ["t0", "bias"], ["t_out"], name="then_add")],
        "then", [], [h.make_tensor_value_info("t_out", TP.FLOAT, [1, 4, 6, 6])])
    else_g = h.make_graph(
        [h.make_node("Neg", ["r"], ["e_out"], name="else_neg")],
        "else", [], [h.make_tensor_value_info("e_out", TP.FLOAT, [1, 4, 6, 6])])
    nodes = [
        h.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
        h.make_node("Relu", ["c1"], ["r"], name="relu1"),
        h.make_node("ReduceSum", ["r"], ["s"], name="sum", keepdims=0),
        h.make_node("Greater", ["s", "thr"], ["cond"], name="gt"),
        h.make_node("If", ["cond"], ["b"], name="branch", then_branch=then_g, else_branch=else_g),
        h.make_node("Conv", ["b", "w2"], ["c2"], name="conv2"),
        h.make_node("Flatten", ["c2"], ["f"], name="flat"),
        h.make_node("MatMul", ["f", "w3"], ["y"], name="fc"),
    ]
    inits = [
        _w("w1", (4, 3, 3, 3), 1), _w("w2", (4, 4, 3, 3), 2), _w("w3", (64, 8), 3),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(10.0, np.float32), "thr"),
        _w("bias", (1, 4, 1, 1), 4),
    ]
    return _model(nodes, [h.make_tensor_value_info("x", TP.FLOAT, [1, 3, 8, 8])],
                  [h.make_tensor_value_info("y", TP.FLOAT, [1, 8])], inits, "if_model")


def loop_model() -> onnx.ModelProto:
    """MatMul -> Loop(3 iterations: v = tanh(v @ w) + h; scan output v) -> ReduceSum over the
    iterations -> Add h -> Relu -> MatMul.

    The scan output ``scan`` has an unknown first dim (ONNX shape inference does not count the
    trips), so the ReduceSum that reads it joins the Loop's region; the carried value ``v_final``
    is unused outside it."""
    body = h.make_graph(
        [h.make_node("MatMul", ["v_in", "wl"], ["mm"], name="body_mm"),
         h.make_node("Tanh", ["mm"], ["th"], name="body_tanh"),
         h.make_node("Add", ["th", "h"], ["v_out"], name="body_add"),
         h.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
         h.make_node("Identity", ["v_out"], ["scan_out"], name="body_scan")],
        "body",
        [h.make_tensor_value_info("i", TP.INT64, []), h.make_tensor_value_info("cond_in", TP.BOOL, []),
         h.make_tensor_value_info("v_in", TP.FLOAT, [1, 16])],
        [h.make_tensor_value_info("cond_out", TP.BOOL, []), h.make_tensor_value_info("v_out", TP.FLOAT, [1, 16]),
         h.make_tensor_value_info("scan_out", TP.FLOAT, [1, 16])])
    nodes = [
        h.make_node("MatMul", ["x", "w0"], ["h"], name="fc0"),
        h.make_node("Loop", ["trips", "true", "h"], ["v_final", "scan"], name="loop", body=body),
        h.make_node("ReduceSum", ["scan", "axis0"], ["acc"], name="acc_sum", keepdims=0),
        h.make_node("Add", ["acc", "h"], ["z"], name="join"),
        h.make_node("Relu", ["z"], ["zr"], name="relu"),
        h.make_node("MatMul", ["zr", "w1"], ["y"], name="fc1"),
    ]
    inits = [
        _w("w0", (8, 16), 5), _w("wl", (16, 16), 6), _w("w1", (16, 4), 7),
        numpy_helper.from_array(np.array(3, np.int64), "trips"),
        numpy_helper.from_array(np.array(True), "true"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
    ]
    return _model(nodes, [h.make_tensor_value_info("x", TP.FLOAT, [1, 8])],
                  [h.make_tensor_value_info("y", TP.FLOAT, [1, 4])], inits, "loop_model")


def nonzero_model() -> onnx.ModelProto:
    """MatMul -> Relu -> NonZero -> Transpose -> GatherND -> ReduceSum (a data-dependent count of
    positive activations, summed), then Mul with the static Relu output and a MatMul tail."""
    nodes = [
        h.make_node("MatMul", ["x", "w0"], ["a"], name="fc0"),
        h.make_node("Relu", ["a"], ["r"], name="relu"),
        h.make_node("NonZero", ["r"], ["nz"], name="nonzero"),
        h.make_node("Transpose", ["nz"], ["idx"], name="transpose", perm=[1, 0]),
        h.make_node("GatherND", ["r", "idx"], ["vals"], name="gather"),
        h.make_node("ReduceSum", ["vals"], ["total"], name="total", keepdims=0),
        h.make_node("Mul", ["r", "total"], ["scaled"], name="scale"),
        h.make_node("MatMul", ["scaled", "w1"], ["y"], name="fc1"),
    ]
    inits = [_w("w0", (8, 16), 8), _w("w1", (16, 4), 9)]
    return _model(nodes, [h.make_tensor_value_info("x", TP.FLOAT, [2, 8])],
                  [h.make_tensor_value_info("y", TP.FLOAT, [2, 4])], inits, "nonzero_model")


MODELS = {"if": if_model, "loop": loop_model, "nonzero": nonzero_model}
