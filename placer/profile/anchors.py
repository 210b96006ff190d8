"""Anchor ops: a fixed set of small ops that every campaign with probes measures again.

A store fills over many sessions (days apart, on a shared host), and a machine of this kind ran
the same ops 2-5 % slower one day than the day before (issue 15, session 16: the six evaluation
models re-profiled a day later, median ratio 1.03-1.045 per target). Rows of different sessions
then disagree by that much, and a cost model trained on a bank measured on a slow day predicts the
models measured on a fast day too slow. Each session measuring the same anchors gives
:mod:`placer.profile.drift` the overlap it needs to put every session on one scale, whatever
graph the session profiled.

The anchors cover the kinds of kernel whose speed moves: a dense, a pointwise and a depthwise
convolution, a matmul, element-wise, movement, pooling and a softmax; each runs in 10-300 us.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from placer.graph import build_graph

__all__ = ["anchor_graph", "anchor_model"]

#: (name, op type, input shapes (graph inputs), constant shapes, attributes)
_ANCHORS = (
    ("conv3x3", "Conv", [[1, 64, 28, 28]], [[64, 64, 3, 3], [64]],
     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("conv1x1", "Conv", [[1, 128, 14, 14]], [[256, 128, 1, 1], [256]], {"kernel_shape": [1, 1]}),
    ("dwconv", "Conv", [[1, 128, 28, 28]], [[128, 1, 3, 3]],
     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 128}),
    ("matmul", "MatMul", [[1, 64, 256]], [[256, 256]], {}),
    ("relu", "Relu", [[1, 64, 56, 56]], [], {}),
    ("add", "Add", [[1, 128, 28, 28], [1, 128, 28, 28]], [], {}),
    ("transpose", "Transpose", [[1, 128, 8, 64]], [], {"perm": [0, 2, 1, 3]}),
    ("maxpool", "MaxPool", [[1, 64, 56, 56]], [],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("softmax", "Softmax", [[1, 4, 64, 64]], [], {"axis": -1}),
)


def anchor_model() -> onnx.ModelProto:
    """One ONNX model holding every anchor as an independent op (its own inputs and output)."""
    rng = np.random.default_rng(0)
    nodes, inputs, inits, outputs = [], [], [], []
    for name, op, in_shapes, const_shapes, attrs in _ANCHORS:
        names = [f"{name}_x{i}" for i in range(len(in_shapes))]
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(names, in_shapes)]
        for i, shape in enumerate(const_shapes):
            inits.append(numpy_helper.from_array((0.1 * rng.standard_normal(shape)).astype(np.float32),
                                                 f"{name}_c{i}"))
            names.append(f"{name}_c{i}")
        nodes.append(helper.make_node(op, names, [f"{name}_y"], name=f"anchor_{name}", **attrs))
        outputs.append(helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "placer_anchors", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@functools.lru_cache(maxsize=1)
def anchor_graph():
    """The anchors as an :class:`~placer.graph.OpGraph` (built once per process; do not modify it)."""
    return build_graph(anchor_model(), source="<placer anchors>")
