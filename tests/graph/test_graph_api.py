"""OpGraph structure, naming, shape binding, signatures, summary; the zoo's built models."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from graph_testlib import run
from onnx import TensorProto as TP
from onnx import helper as h

from placer import zoo
from placer.errors import GraphError
from placer.graph import (
    Edge,
    Signature,
    TensorSpec,
    build_graph,
    is_folded,
    load_graph,
    load_model,
)


def test_tiny_graph_structure(tiny_model):
    g = load_graph(tiny_model)
    assert [op.id for op in g.ops] == ["conv0", "relu0", "conv_a", "pool_b", "add", "gap", "flatten", "fc"]
    assert g.inputs == ["x"] and g.outputs == ["y"] and g.source == "<memory>" and g.name == "tiny_branchy"
    assert g.producer["t1"] == "relu0" and g.consumers["t1"] == ("conv_a", "pool_b")
    assert g.consumers["conv0_w"] == ("conv0",) and g.tensors["conv0_w"].is_constant
    assert g.tensors["t0"] .nbytes == 8 * 8 * 8 * 4 and g.tensors["t0"].dtype == "float32"
    assert Edge("relu0", "conv_a", "t1", 2048) in g.edges and Edge("relu0", "pool_b", "t1", 2048) in g.edges
    assert len(g.edges) == 8 and all(not g.tensors[e.tensor].is_constant for e in g.edges)
    assert [g.index_of(e.src) for e in g.edges] == sorted(g.index_of(e.src) for e in g.edges)
    conv_a = g.op("conv_a")
    assert conv_a.attrs["group"] == 2 and conv_a.attrs["kernel_shape"] == [3, 3]
    assert conv_a.attrs["auto_pad"] == "NOTSET"  # schema default filled in
    assert conv_a.flops == 2 * 8 * 64 * 4 * 9 + 8 * 64
    assert g.op_type_counts() == {"Conv": 2, "Add": 1, "Flatten": 1, "GlobalAveragePool": 1, "MatMul": 1,
                                  "MaxPool": 1, "Relu": 1}
    text = g.summary()
    assert "8 ops" in text and "unique signatures" in text and "GFLOPs" in text and "MB of weights" in text
    assert len(g) == 8 and list(g) == list(g.ops)
    json.dumps([op.attrs for op in g.ops])  # JSON-able


def test_load_graph_from_a_file_records_the_path(tmp_path, tiny_model):
    p = tmp_path / "tiny.onnx"
    onnx.save(tiny_model, str(p))
    g = load_graph(p)
    assert g.source == str(p)
    assert load_graph(str(p)).model_hash == g.model_hash


def test_build_graph_folds_once_and_does_not_touch_the_input(squeezenet_model):
    before = squeezenet_model.SerializeToString()
    g = build_graph(squeezenet_model)
    assert squeezenet_model.SerializeToString() == before
    assert is_folded(g.model) and not is_folded(squeezenet_model)
    assert build_graph(g.model).model is g.model  # already folded: used as is
    again = load_model(g.model)  # folding a folded model changes nothing
    assert again.SerializeToString(deterministic=True) == g.model.SerializeToString(deterministic=True)


def test_node_names_unique_and_stable():
    nodes = [
        h.make_node("Relu", ["x"], ["a"]),  # unnamed -> Relu_0
        h.make_node("Neg", ["a"], ["b"], name="dup"),  # duplicated -> Neg_1
        h.make_node("Abs", ["b"], ["c"], name="dup"),  # -> Abs_2
        h.make_node("Sigmoid", ["c"], ["d"], name="Relu_0"),  # unique: kept (the generated name moves on)
        h.make_node("Tanh", ["d"], ["y"], name="last"),
    ]
    g_ = h.make_graph(nodes, "n", [h.make_tensor_value_info("x", TP.FLOAT, [3])],
                      [h.make_tensor_value_info("y", TP.FLOAT, [3])])
    m = h.make_model(g_, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    ids = [op.id for op in load_graph(m).ops]
    assert ids == ["Relu_0_1", "Neg_1", "Abs_2", "Relu_0", "last"]
    assert ids == [op.id for op in load_graph(m).ops]


def test_nodes_out_of_order_are_sorted_stably():
    nodes = [
        h.make_node("Add", ["a", "b"], ["y"], name="join"),
        h.make_node("Relu", ["x"], ["a"], name="left"),
        h.make_node("Neg", ["x"], ["b"], name="right"),
    ]
    g_ = h.make_graph(nodes, "o", [h.make_tensor_value_info("x", TP.FLOAT, [3])],
                      [h.make_tensor_value_info("y", TP.FLOAT, [3])])
    m = h.make_model(g_, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    g = load_graph(m)
    assert [op.id for op in g.ops] == ["left", "right", "join"]
    x = np.arange(3, dtype=np.float32) - 1
    np.testing.assert_allclose(run(g.model, {"x": x})["y"], np.maximum(x, 0) - x)


def test_symbolic_batch_bound_via_shapes():
    m = zoo.tiny_branchy()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    g = load_graph(m, shapes={"x": (2, 3, 8, 8)})
    assert g.tensors["x"].shape == (2, 3, 8, 8)
    assert g.tensors["t2"].shape == (2, 8, 8, 8) and g.tensors["y"].shape == (2, 4)
    assert g.op("fc").flops == 2 * 2 * 4 * 8
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    y = run(g.model, {"x": x})["y"]
    ref = run(zoo.tiny_branchy(), {"x": x[:1]})["y"]
    assert y.shape == (2, 4)
    np.testing.assert_allclose(y[:1], ref, rtol=1e-5, atol=1e-6)


def test_shape_subgraph_folds_to_constants():
    # y = Reshape(x, Concat(Shape(x)[0:1], [-1])): the shape chain folds away on a static input
    nodes = [
        h.make_node("Shape", ["x"], ["s"], name="shape"),
        h.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        h.make_node("Unsqueeze", ["n", "zero1"], ["n1"], name="unsq"),
        h.make_node("Concat", ["n1", "minus1"], ["target"], name="concat", axis=0),
        h.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
        h.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    inits = [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
             onnx.numpy_helper.from_array(np.array([0], np.int64), "zero1"),
             onnx.numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    g_ = h.make_graph(nodes, "s", [h.make_tensor_value_info("x", TP.FLOAT, ["N", 3, 4])],
                      [h.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    m = h.make_model(g_, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    g = load_graph(m, shapes={"x": (5, 3, 4)})
    assert [op.id for op in g.ops] == ["reshape", "relu"]
    assert g.tensors["target"].is_constant and g.tensors["y"].shape == (5, 12)
    spec = g.op("reshape").signature.inputs[1]
    assert spec.is_constant and spec.value == (5, -1)  # small int constant: part of the signature


def test_signature_roundtrip_and_sharing(zoo_models):
    g = build_graph(zoo_models("resnet50"))
    for op in g.ops[:20]:
        d = op.signature.to_dict()
        back = Signature.from_dict(json.loads(json.dumps(d)))
        assert back == op.signature and back.hash == op.signature.hash
        assert len(op.signature.hash) == 16 and op.signature.version >= 1
    sigs = g.unique_signatures()
    shared = [ids for _, ids in sigs.values() if len(ids) > 1]
    assert shared and all(len({g.op(i).op_type for i in ids}) == 1 for ids in shared)
    # constant *values* are not part of a signature: two convs with different weights share one
    convs = [op for op in g.ops if op.op_type == "Conv"]
    by_sig: dict[str, list] = {}
    for op in convs:
        by_sig.setdefault(op.signature.hash, []).append(op)
    assert any(len(v) > 1 for v in by_sig.values())
    # but small integer constants are
    spec = TensorSpec(shape=(2,), dtype="int64", is_constant=True, value=(1, -1))
    s1 = Signature("Reshape", "", 14, {}, (TensorSpec((4, 4), "float32"), spec), (TensorSpec((1, 16), "float32"),))
    s2 = Signature("Reshape", "", 14, {}, (TensorSpec((4, 4), "float32"),
                                           TensorSpec((2,), "int64", True, (16, 1))), (TensorSpec((1, 16), "float32"),))
    assert s1.hash != s2.hash and hash(s1) != hash(s2) and str(s1).startswith("Reshape-14(")


def test_signature_version_is_the_schema_version():
    g = load_graph(zoo.light_model_path("squeezenet"))  # opset 9
    conv = next(op for op in g.ops if op.op_type == "Conv")
    assert conv.signature.version == 1  # Conv-1 is the Conv of opset 9
    assert next(op for op in g.ops if op.op_type == "Relu").signature.version == 6


def test_bert_encoder_builds_runs_and_depends_on_its_input(bert_model):
    g = build_graph(bert_model)
    counts = g.op_type_counts()
    assert counts["LayerNormalization"] == 4 and counts["Softmax"] == 2 and counts["Erf"] == 2
    assert counts["MatMul"] == 2 * 8
    assert g.tensors["output"].shape == (1, 64, 128) and g.inputs == ["input"]
    assert g.model.opset_import[0].version == 17 and g.model.ir_version <= 10
    sigs = g.unique_signatures()
    assert len(sigs) < len(g.ops) / 2  # the two layers share everything
    outs = [run(g.model, zoo.random_inputs(g.model, seed))["output"] for seed in (0, 1)]
    assert all(np.isfinite(o).all() for o in outs) and np.abs(outs[0] - outs[1]).mean() > 0.1
    big = zoo.bert_encoder(layers=1, hidden=64, heads=2, seq=16, batch=2)
    assert build_graph(big).tensors["output"].shape == (2, 16, 64)
    with pytest.raises(Exception, match="multiple of heads"):
        zoo.bert_encoder(hidden=30, heads=4)


def test_zoo_resolve_available_and_random_inputs(tmp_path):
    names = zoo.available()
    assert {"tiny", "bert-tiny", "squeezenet", "resnet50", "light-vgg19"} <= set(names)
    assert len(zoo.resolve("zoo:tiny").graph.node) == 8
    light = zoo.resolve("zoo:light-squeezenet")
    assert sum(n.op_type == "ConstantOfShape" for n in light.graph.node) == 39
    p = tmp_path / "t.onnx"
    onnx.save(zoo.tiny_branchy(), str(p))
    assert len(zoo.resolve(str(p)).graph.node) == 8
    assert zoo.load_graph("zoo:tiny").source == "zoo:tiny"
    with pytest.raises(GraphError, match="zoo reference.*placer.zoo.load_graph"):  # resolved above graph/
        load_graph("zoo:tiny")
    feeds = zoo.random_inputs(zoo.tiny_branchy(), seed=5)
    assert list(feeds) == ["x"] and feeds["x"].shape == (1, 3, 8, 8) and feeds["x"].dtype == np.float32
    np.testing.assert_array_equal(feeds["x"], zoo.random_inputs(zoo.tiny_branchy(), seed=5)["x"])
    assert {LIGHT for LIGHT in zoo.LIGHT_MODELS} == {
        "squeezenet", "resnet50", "inception_v1", "inception_v2", "densenet121", "shufflenet", "vgg19",
        "bvlc_alexnet", "zfnet512"}
    assert zoo.light_model_path("light_resnet50") == zoo.light_model_path("resnet50")


def test_zoo_dir_fixture_holds_loadable_models(zoo_dir):
    for name in zoo.SMALL_MODELS:
        p = zoo_dir / f"{name}.onnx"
        assert p.is_file()
    g = load_graph(zoo_dir / "squeezenet.onnx")
    assert len(g.ops) == 66 and g.source.endswith("squeezenet.onnx")


def test_model_with_op_tvm_rejects_and_write(tmp_path):
    g = zoo.load_graph("zoo:lpnorm")
    assert [op.op_type for op in g.ops] == ["Conv", "Relu", "LpNormalization", "Conv", "Add", "Relu"]
    y = run(g.model, zoo.random_inputs(g.model))["y"]
    assert y.shape == (1, 8, 16, 16) and np.isfinite(y).all() and y.max() > 0
    paths = zoo.write(tmp_path / "z", ["tiny", "lpnorm"])
    assert sorted(paths) == ["lpnorm", "tiny"] and all(p.is_file() for p in paths.values())
    assert len(load_graph(paths["tiny"]).ops) == 8


def test_high_ir_version_is_capped_for_onnx_runtime():
    nodes = [h.make_node("Relu", ["x"], ["y"], name="r")]
    g_ = h.make_graph(nodes, "ir", [h.make_tensor_value_info("x", TP.FLOAT, [2, 2])],
                      [h.make_tensor_value_info("y", TP.FLOAT, [2, 2])])
    m = h.make_model(g_, opset_imports=[h.make_opsetid("", 17)])  # onnx 1.23 writes its newest IR
    assert m.ir_version > 10
    folded = load_model(m)
    assert folded.ir_version == 10 and folded.opset_import[0].version == 17
    x = np.array([[-1, 2], [3, -4]], np.float32)
    np.testing.assert_array_equal(run(folded, {"x": x})["y"], np.maximum(x, 0))
