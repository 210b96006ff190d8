"""FLOPs and bytes against hand-computed values (a multiply-add is 2 FLOPs)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from placer.graph import load_graph, op_flops


def _graph(nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, "f", inputs, outputs, initializer=list(inits))
    return load_graph(h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8))


def _w(name, shape):
    return onnx.numpy_helper.from_array(np.ones(shape, np.float32), name)


def _vi(name, shape):
    return h.make_tensor_value_info(name, TP.FLOAT, shape)


def test_conv_with_groups_and_bias():
    # x [1,4,8,8], W [6, 4/2, 3, 3], group 2, pad 1 -> y [1,6,8,8]
    # each output element: C_in/group * kh * kw = 2*3*3 = 18 multiply-adds + 1 bias add
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", group=2, pads=[1, 1, 1, 1])]
    g = _graph(nodes, [_vi("x", [1, 4, 8, 8])], [_vi("y", [1, 6, 8, 8])], [_w("w", (6, 2, 3, 3)), _w("b", (6,))])
    op = g.op("conv")
    assert g.tensors["y"].shape == (1, 6, 8, 8)
    assert op.flops == 2 * (6 * 8 * 8) * 18 + 6 * 8 * 8 == 14208
    assert op.bytes_in == 4 * 8 * 8 * 4 and op.bytes_out == 6 * 8 * 8 * 4
    assert op.weight_bytes == (6 * 2 * 3 * 3 + 6) * 4


def test_conv_stride_dilation_no_bias_and_depthwise():
    # stride 2, dilation 2, pad 2 on 8x8 with k=3: out = floor((8 + 4 - 5) / 2) + 1 = 4
    nodes = [h.make_node("Conv", ["x", "w"], ["y"], name="conv", strides=[2, 2], dilations=[2, 2],
                         pads=[2, 2, 2, 2])]
    g = _graph(nodes, [_vi("x", [1, 4, 8, 8])], [_vi("y", None)], [_w("w", (8, 4, 3, 3))])
    assert g.tensors["y"].shape == (1, 8, 4, 4)
    assert g.op("conv").flops == 2 * (8 * 4 * 4) * (4 * 9)  # dilation does not change the work
    nodes = [h.make_node("Conv", ["x", "w"], ["y"], name="dw", group=4, pads=[1, 1, 1, 1])]
    g = _graph(nodes, [_vi("x", [2, 4, 5, 5])], [_vi("y", None)], [_w("w", (4, 1, 3, 3))])
    assert g.op("dw").flops == 2 * (2 * 4 * 5 * 5) * 9


def test_batched_matmul():
    # [2,3,4,5] @ [5,6] -> [2,3,4,6]: 144 outputs, K = 5
    nodes = [h.make_node("MatMul", ["a", "b"], ["y"], name="mm")]
    g = _graph(nodes, [_vi("a", [2, 3, 4, 5])], [_vi("y", None)], [_w("b", (5, 6))])
    assert g.tensors["y"].shape == (2, 3, 4, 6)
    assert g.op("mm").flops == 2 * 144 * 5 == 1440
    # broadcast batch dims on both sides: [3,1,4,5] @ [2,5,7] -> [3,2,4,7]
    nodes = [h.make_node("MatMul", ["a", "b"], ["y"], name="mm")]
    g = _graph(nodes, [_vi("a", [3, 1, 4, 5]), _vi("b", [2, 5, 7])], [_vi("y", None)])
    assert g.op("mm").flops == 2 * (3 * 2 * 4 * 7) * 5
    assert g.op("mm").weight_bytes == 0 and g.op("mm").bytes_in == (60 + 70) * 4


def test_gemm_with_transpose_and_bias():
    # A [3,5], B^T with B [4,5] (transB), C [4]: M=3, N=4, K=5 -> 2*M*N*K + M*N
    nodes = [h.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm", transB=1)]
    g = _graph(nodes, [_vi("a", [3, 5])], [_vi("y", None)], [_w("b", (4, 5)), _w("c", (4,))])
    assert g.tensors["y"].shape == (3, 4)
    assert g.op("gemm").flops == 2 * 3 * 4 * 5 + 3 * 4 == 132
    nodes = [h.make_node("Gemm", ["a", "b"], ["y"], name="gemm", transA=1, alpha=0.5)]
    g = _graph(nodes, [_vi("a", [5, 3])], [_vi("y", None)], [_w("b", (5, 4))])
    assert g.op("gemm").flops == 2 * 3 * 4 * 5 + 3 * 4  # alpha != 1: one scaling per output


def test_other_families():
    s = (1, 8, 6, 6)
    assert op_flops("Relu", {}, [s], [s]) == 288
    assert op_flops("Add", {}, [s, (1, 8, 1, 1)], [s]) == 288
    assert op_flops("Sum", {}, [s, s, s], [s]) == 2 * 288
    assert op_flops("BatchNormalization", {}, [s, (8,), (8,), (8,), (8,)], [s]) == 2 * 288
    assert op_flops("MaxPool", {"kernel_shape": [3, 3]}, [(1, 8, 8, 8)], [s]) == 9 * 288
    assert op_flops("GlobalAveragePool", {}, [s], [(1, 8, 1, 1)]) == 288
    assert op_flops("Softmax", {}, [(1, 1000)], [(1, 1000)]) == 5000
    assert op_flops("LRN", {"size": 5}, [s], [s]) == 288 * 14
    assert op_flops("ReduceMean", {}, [s], [(1, 8, 1, 1)]) == 288
    for op in ("Reshape", "Transpose", "Concat", "Flatten", "Dropout", "Identity", "Unsqueeze"):
        assert op_flops(op, {}, [s], [s]) == 0
    assert op_flops("ConvTranspose", {}, [(1, 4, 5, 5), (4, 3, 2, 2)], [(1, 3, 10, 10)]) == 2 * 100 * 12
    assert op_flops("Einsum", {"equation": "bij,bjk->bik"}, [(2, 3, 4), (2, 4, 5)], [(2, 3, 5)]) == 2 * 120
    assert op_flops("Resize", {"mode": "nearest"}, [s], [(1, 8, 12, 12)]) == 0
    assert op_flops("Resize", {"mode": "linear"}, [s], [(1, 8, 12, 12)]) == 2 * 4 * 8 * 144
    assert op_flops("SomeCustomOp", {}, [s], [s]) == 288


@pytest.mark.parametrize("name,gflops", [("squeezenet", (0.6, 0.8)), ("inception_v1", (2.8, 3.3))])
def test_whole_model_flops_match_published_counts(name, gflops):
    from placer import zoo

    g = load_graph(zoo.light_model_path(name))
    lo, hi = gflops
    assert lo * 1e9 < g.total_flops < hi * 1e9  # squeezenet 1.0: ~0.35 GMACs, GoogLeNet: ~1.5 GMACs
