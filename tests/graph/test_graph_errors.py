"""Bad input: every user error is a GraphError that names the file / node / tensor / input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from placer import zoo
from placer.errors import GraphError, PlacerError
from placer.graph import load_graph, load_model


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "bad", inputs, outputs, initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8)


def _vi(name, shape, dtype=TP.FLOAT):
    return h.make_tensor_value_info(name, dtype, shape)


def test_missing_path(tmp_path):
    p = tmp_path / "nope.onnx"
    with pytest.raises(GraphError, match="nope.onnx.*not found"):
        load_model(p)


def test_directory(tmp_path):
    with pytest.raises(GraphError, match="is a directory") as e:
        load_graph(str(tmp_path))
    assert str(tmp_path) in str(e.value)


def test_random_bytes(tmp_path):
    p = tmp_path / "noise.onnx"
    p.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(GraphError) as e:
        load_model(p)
    assert "noise.onnx" in str(e.value) and "ONNX" in str(e.value)


def test_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(GraphError, match="empty.onnx: empty file"):
        load_model(p)


@pytest.mark.parametrize("fraction", [0.5, 0.9, 0.999])
def test_truncated_onnx(tmp_path, fraction):
    data = zoo.tiny_branchy().SerializeToString()
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(GraphError) as e:
        load_model(p)
    assert "cut.onnx" in str(e.value)


def test_graph_error_is_a_placer_error():
    assert issubclass(GraphError, PlacerError)


def test_cycle_names_the_nodes():
    nodes = [
        h.make_node("Add", ["x", "t2"], ["t1"], name="first"),
        h.make_node("Relu", ["t1"], ["t2"], name="second"),
        h.make_node("Identity", ["t1"], ["y"], name="out"),
    ]
    m = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    with pytest.raises(GraphError, match="cycle") as e:
        load_model(m)
    assert "'first'" in str(e.value) and "'second'" in str(e.value) and "'out'" not in str(e.value)


def test_dangling_input_names_node_and_tensor():
    nodes = [h.make_node("Relu", ["x"], ["t"], name="ok"), h.make_node("Add", ["t", "ghost"], ["y"], name="adder")]
    m = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    with pytest.raises(GraphError, match="dangling") as e:
        load_model(m)
    assert "'adder'" in str(e.value) and "'ghost'" in str(e.value)


def test_symbolic_input_without_shapes_names_the_input():
    m = zoo.tiny_branchy()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(GraphError, match="'x'.*shapes=") as e:
        load_model(m)
    assert "batch" in str(e.value)


def test_unknown_rank_input_without_shapes():
    nodes = [h.make_node("Relu", ["x"], ["y"], name="r")]
    m = _model(nodes, [_vi("x", None)], [_vi("y", None)])
    with pytest.raises(GraphError, match="'x'"):
        load_model(m)
    g = load_graph(m, shapes={"x": (4, 5)})
    assert g.tensors["y"].shape == (4, 5)


def test_a_dim_declared_minus_one_is_unknown_and_can_be_bound():
    """-1 (hand-built models' "dynamic") conflicted with every binding, the hint proposed binding -1,
    and an output declared so failed strict shape inference."""
    nodes = [h.make_node("Relu", ["x"], ["y"], name="r")]
    m = _model(nodes, [_vi("x", [-1, 3])], [_vi("y", [-1, 3])])
    with pytest.raises(GraphError, match=r"'x' has a non-static shape \[\?, 3\]; bind it with shapes=\{'x': \(\?, 3\)\}"):
        load_model(m)
    assert load_graph(m, shapes={"x": (2, 3)}).tensors["y"].shape == (2, 3)


@pytest.mark.parametrize("shape", [4, "23", (1.9, 3), (None, 3), (True, 3)])
def test_a_shape_that_is_not_a_tuple_of_ints_is_refused_not_truncated(shape):
    nodes = [h.make_node("Relu", ["x"], ["y"], name="r")]
    m = _model(nodes, [_vi("x", [-1, 3])], [_vi("y", None)])
    with pytest.raises(GraphError, match="shape for input 'x' must be a tuple of ints"):
        load_model(m, shapes={"x": shape})
    with pytest.raises(GraphError, match="shape for input 'x' must be a tuple of ints"):
        zoo.load_graph(m, shapes={"x": shape})


def test_shapes_key_that_is_not_an_input():
    with pytest.raises(GraphError, match="'nope'.*not a graph input") as e:
        load_model(zoo.tiny_branchy(), shapes={"nope": (1, 3, 8, 8)})
    assert "'x'" in str(e.value) or "x" in str(e.value)
    with pytest.raises(GraphError, match="'conv0_w'.*constant"):
        load_model(zoo.tiny_branchy(), shapes={"conv0_w": (8, 3, 3, 3)})


def test_shapes_that_conflict_with_the_model():
    with pytest.raises(GraphError, match="'x'.*conflicts.*dim 1"):
        load_model(zoo.tiny_branchy(), shapes={"x": (1, 4, 8, 8)})
    with pytest.raises(GraphError, match="'x'.*rank 3"):
        load_model(zoo.tiny_branchy(), shapes={"x": (1, 3, 8)})


def test_checker_failure_names_the_file(tmp_path):
    nodes = [h.make_node("Relu", ["x", "x"], ["y"], name="two_inputs")]
    m = _model(nodes, [_vi("x", [2])], [_vi("y", [2])])
    p = tmp_path / "bad_relu.onnx"
    onnx.save(m, str(p))
    with pytest.raises(GraphError, match="bad_relu.onnx: invalid ONNX model"):
        load_model(p)


def test_shape_inference_failure_names_the_node():
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    w = onnx.numpy_helper.from_array(np.ones((4, 5), np.float32), "w")
    m = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 5])], [w])
    with pytest.raises(GraphError, match="shape inference") as e:
        load_model(m)
    assert "mm" in str(e.value) or "MatMul" in str(e.value)


def test_data_dependent_shape_names_tensor_and_node():
    nodes = [h.make_node("NonZero", ["x"], ["nz"], name="where_nonzero"),
             h.make_node("Cast", ["nz"], ["y"], name="cast", to=TP.FLOAT)]
    m = _model(nodes, [_vi("x", [4])], [_vi("y", None)])
    # the NonZero region would be contracted into an opaque op (test_graph_opaque.py), but its
    # data-dependent shape reaches the graph output
    with pytest.raises(GraphError, match="graph output 'y' produced by node 'cast'.*data-dependent shape"):
        load_model(m)


def test_tensor_produced_twice():
    nodes = [h.make_node("Relu", ["x"], ["y"], name="a"), h.make_node("Neg", ["x"], ["y"], name="b")]
    m = _model(nodes, [_vi("x", [2])], [_vi("y", [2])])
    with pytest.raises(GraphError, match="'y'.*'a'.*'b'"):
        load_model(m)


def test_unknown_op_id_and_empty_subgraph():
    g = load_graph(zoo.tiny_branchy())
    with pytest.raises(GraphError, match="unknown op 'nope'"):
        g.op("nope")
    with pytest.raises(GraphError, match="unknown op 'nope'"):
        g.subgraph_model(["conv0", "nope"])
    with pytest.raises(GraphError, match="empty"):
        g.subgraph_model([])


def test_unknown_zoo_name_lists_the_available_ones():
    with pytest.raises(GraphError, match="zoo:resnet50"):
        zoo.load_graph("zoo:resnet51")
    with pytest.raises(GraphError, match="unknown light model"):
        zoo.light_model_path("alexnet_v9")


def test_external_data_loads_and_missing_external_data_is_named(tmp_path):
    w = onnx.numpy_helper.from_array(np.ones((300, 20), np.float32), "w")
    m = _model([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [_vi("x", [2, 300])], [_vi("y", [2, 20])], [w])
    p = tmp_path / "ext.onnx"
    onnx.save(m, str(p), save_as_external_data=True, location="ext.data", size_threshold=0)
    g = load_graph(p)
    assert g.op("mm").weight_bytes == 300 * 20 * 4
    (tmp_path / "ext.data").unlink()
    with pytest.raises(GraphError, match="ext.onnx: cannot load the model's external data"):
        load_model(p)
