"""Models built locally with ``onnx.helper`` and seeded weights (opset 17).

* :func:`bert_encoder`: a BERT-style encoder from standard opset-17 ops (``zoo:bert-tiny``,
  ``zoo:bert-small``).
* :func:`tiny_branchy`: an 8-op model with a fork/join, for fast tests (``zoo:tiny``).
* :func:`model_with_op_tvm_rejects`: a 6-op conv net with ``LpNormalization`` (no TVM converter;
  ``zoo:lpnorm``).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from placer.errors import GraphError
from placer.graph import proto as P

__all__ = ["bert_encoder", "model_with_op_tvm_rejects", "tiny_branchy"]

_IR_VERSION = 8  # matches opset 17 (onnx IR 8 covers opsets 15-18)


def _init(name: str, arr: np.ndarray) -> TensorProto:
    return P.tensor_from_array(np.asarray(arr), name)


def bert_encoder(
    layers: int = 2,
    hidden: int = 128,
    heads: int = 4,
    seq: int = 64,
    ffn: int | None = None,
    batch: int = 1,
    seed: int = 0,
) -> onnx.ModelProto:
    """A BERT-style encoder (post-LayerNorm) from standard opset-17 ops.

    Per layer: Q/K/V projections (MatMul + Add), Reshape/Transpose into heads, scaled dot-product
    attention (MatMul, Mul, Softmax, MatMul), output projection, residual Add, LayerNormalization,
    feed-forward MatMul + Add, Erf-based GELU (Div, Erf, Add, Mul, Mul), MatMul + Add, residual Add,
    LayerNormalization. Input ``"input"`` float32 ``[batch, seq, hidden]``, output ``"output"``
    of the same shape. Weights ~ N(0, 1/fan_in), so the output depends on the input.
    """
    ffn = 4 * hidden if ffn is None else ffn
    if hidden % heads:
        raise GraphError(f"bert_encoder: hidden={hidden} is not a multiple of heads={heads}")
    dh = hidden // heads
    rng = np.random.default_rng(seed)
    f32 = np.float32
    nodes: list[onnx.NodeProto] = []
    inits: list[TensorProto] = [
        _init("shape_heads", np.array([batch, seq, heads, dh], np.int64)),
        _init("shape_hidden", np.array([batch, seq, hidden], np.int64)),
        _init("attn_scale", np.array(1.0 / math.sqrt(dh), f32)),
        _init("sqrt2", np.array(math.sqrt(2.0), f32)),
        _init("one", np.array(1.0, f32)),
        _init("half", np.array(0.5, f32)),
    ]

    def weight(name: str, shape: tuple[int, ...], std: float) -> str:
        inits.append(_init(name, (rng.standard_normal(shape, dtype=f32) * f32(std)).astype(f32)))
        return name

    def node(op: str, ins: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(x: str, prefix: str, d_in: int, d_out: int) -> str:
        w = weight(f"{prefix}_w", (d_in, d_out), 1.0 / math.sqrt(d_in))
        b = weight(f"{prefix}_b", (d_out,), 0.02)
        return node("Add", [node("MatMul", [x, w], f"{prefix}_mm"), b], f"{prefix}_add")

    def layer_norm(x: str, prefix: str) -> str:
        gamma = f"{prefix}_gamma"
        inits.append(_init(gamma, (1.0 + 0.05 * rng.standard_normal(hidden)).astype(f32)))
        beta = weight(f"{prefix}_beta", (hidden,), 0.02)
        return node("LayerNormalization", [x, gamma, beta], f"{prefix}", axis=-1, epsilon=1e-5)

    x = "input"
    for i in range(layers):
        p = f"l{i}"
        q = linear(x, f"{p}_q", hidden, hidden)
        k = linear(x, f"{p}_k", hidden, hidden)
        v = linear(x, f"{p}_v", hidden, hidden)
        qh = node("Transpose", [node("Reshape", [q, "shape_heads"], f"{p}_q_split")], f"{p}_q_heads",
                  perm=[0, 2, 1, 3])
        kh = node("Transpose", [node("Reshape", [k, "shape_heads"], f"{p}_k_split")], f"{p}_k_heads",
                  perm=[0, 2, 3, 1])
        vh = node("Transpose", [node("Reshape", [v, "shape_heads"], f"{p}_v_split")], f"{p}_v_heads",
                  perm=[0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [qh, kh], f"{p}_scores"), "attn_scale"], f"{p}_scaled")
        probs = node("Softmax", [scores], f"{p}_probs", axis=-1)
        ctx = node("MatMul", [probs, vh], f"{p}_ctx")
        ctx = node("Reshape", [node("Transpose", [ctx], f"{p}_ctx_t", perm=[0, 2, 1, 3]), "shape_hidden"],
                   f"{p}_ctx_merge")
        attn = linear(ctx, f"{p}_o", hidden, hidden)
        x1 = layer_norm(node("Add", [x, attn], f"{p}_res1"), f"{p}_ln1")
        h = linear(x1, f"{p}_ffn1", hidden, ffn)
        erf = node("Erf", [node("Div", [h, "sqrt2"], f"{p}_gelu_div")], f"{p}_gelu_erf")
        gelu = node("Mul", [node("Mul", [h, node("Add", [erf, "one"], f"{p}_gelu_add")], f"{p}_gelu_mul"),
                            "half"], f"{p}_gelu")
        h2 = linear(gelu, f"{p}_ffn2", ffn, hidden)
        x = layer_norm(node("Add", [x1, h2], f"{p}_res2"), f"{p}_ln2")
    nodes.append(helper.make_node("Identity", [x], ["output"], name="output"))
    graph = helper.make_graph(
        nodes,
        f"bert_l{layers}_h{hidden}_a{heads}_s{seq}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, seq, hidden])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, seq, hidden])],
        inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=_IR_VERSION, producer_name="placer.zoo"
    )


def tiny_branchy(seed: int = 0) -> onnx.ModelProto:
    """8 ops with a fork/join, input ``"x"`` float32 [1, 3, 8, 8], output ``"y"`` float32 [1, 4].

    ``conv0`` (3->8, 3x3, bias) -> ``relu0`` -> { ``conv_a`` (8->8, 3x3, group 2, bias) |
    ``pool_b`` (MaxPool 3x3, stride 1) } -> ``add`` -> ``gap`` (GlobalAveragePool) -> ``flatten``
    -> ``fc`` (MatMul 8x4).
    """
    rng = np.random.default_rng(seed)
    f32 = np.float32

    def w(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=f32) * f32(math.sqrt(2.0 / fan_in))).astype(f32)

    inits = [
        _init("conv0_w", w((8, 3, 3, 3), 27)),
        _init("conv0_b", (0.1 * rng.standard_normal(8)).astype(f32)),
        _init("conv_a_w", w((8, 4, 3, 3), 36)),
        _init("conv_a_b", (0.1 * rng.standard_normal(8)).astype(f32)),
        _init("fc_w", w((8, 4), 8)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv0_w", "conv0_b"], ["t0"], name="conv0", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["t0"], ["t1"], name="relu0"),
        helper.make_node("Conv", ["t1", "conv_a_w", "conv_a_b"], ["ta"], name="conv_a", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], group=2),
        helper.make_node("MaxPool", ["t1"], ["tb"], name="pool_b", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[1, 1]),
        helper.make_node("Add", ["ta", "tb"], ["t2"], name="add"),
        helper.make_node("GlobalAveragePool", ["t2"], ["t3"], name="gap"),
        helper.make_node("Flatten", ["t3"], ["t4"], name="flatten", axis=1),
        helper.make_node("MatMul", ["t4", "fc_w"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_branchy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=_IR_VERSION, producer_name="placer.zoo"
    )


def model_with_op_tvm_rejects(seed: int = 0, hw: int = 16) -> onnx.ModelProto:
    """A 6-op conv net with ``LpNormalization`` in the middle: TVM 0.27's Relax ONNX frontend has
    no converter for it (not in its op map), ONNX Runtime and OpenVINO run it. For the
    "run unsupported ops in the native runtime" path.

    ``conv1`` -> ``relu1`` -> ``lpnorm`` -> ``conv2`` -> ``add`` (residual from relu1) -> ``relu2``;
    input ``"x"`` float32 [1, 3, hw, hw], output ``"y"`` float32 [1, 8, hw, hw].
    """
    rng = np.random.default_rng(seed)
    f32 = np.float32
    inits = [
        _init("w1", (rng.standard_normal((8, 3, 3, 3)) * math.sqrt(2 / 27)).astype(f32)),
        _init("b1", (0.1 * rng.standard_normal(8)).astype(f32)),
        _init("w2", (rng.standard_normal((8, 8, 3, 3)) * math.sqrt(2 / 72)).astype(f32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("LpNormalization", ["r1"], ["n1"], name="lpnorm", axis=1, p=2),
        helper.make_node("Conv", ["n1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu2"),
    ]
    graph = helper.make_graph(
        nodes,
        "lpnorm_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, hw, hw])],
        inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=_IR_VERSION, producer_name="placer.zoo"
    )
