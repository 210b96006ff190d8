"""Yardsticks (a runtime in its own process, as a user would load it) on models that trip them up."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from placer.run.yardsticks import YardstickSet


def _renamed_input_model() -> onnx.ModelProto:
    """x -> Reshape (to its own shape) -> Relu: OpenVINO folds the Reshape and its input port then
    carries two tensor names, ``x`` and the Reshape's output (as in GPT-2's exported graph), and
    ``get_any_name()`` returns the internal one."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["/m/Reshape_output_0"]),
             helper.make_node("Relu", ["/m/Reshape_output_0"], ["y"])]
    graph = helper.make_graph(nodes, "renamed_input", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(np.array([1, 4], dtype=np.int64), "s")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_openvino_yardsticks_feed_an_input_port_that_has_several_names():
    model = _renamed_input_model()
    feeds = [{"x": np.array([[-1.0, 2.0, -3.0, 4.0]], dtype=np.float32) * (i + 1)} for i in range(2)]
    with YardstickSet(model, feeds, ("ov-default", "ov-throughput")) as ys:
        assert set(ys.ready) == {"ov-default", "ov-throughput"}, {k: y.error for k, y in ys.all.items()}
        outs = ys["ov-default"].outputs(len(feeds), ys.output_names)
        assert outs is not None
        for f, o in zip(feeds, outs):
            np.testing.assert_allclose(o["y"], np.maximum(f["x"], 0.0), rtol=1e-2)  # bf16 where the CPU has it
        assert len(ys["ov-default"].run_batch(3)) == 3
        assert (ys["ov-throughput"].throughput(8) or 0) > 0
