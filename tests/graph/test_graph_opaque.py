"""Loading models with control flow / data-dependent shapes: each dynamic region becomes one
opaque op (placer.graph.opaque), the rest stays as it was, and the model computes the same."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from opaque_models import MODELS, _model, _w

from placer import zoo
from placer.devices import make_target
from placer.errors import GraphError
from placer.graph import build_graph, load_model
from placer.graph.opaque import OPAQUE_DOMAIN, describe_regions, function_of


def _ort(model: onnx.ModelProto, feeds, outputs=None):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = outputs or [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


# name -> (nodes of the region, its inputs (non-constant), its outputs, ops left outside it)
EXPECTED = {
    "if": (["branch"], ["cond", "r"], ["b"], ["conv1", "relu1", "sum", "gt", "conv2", "flat", "fc"]),
    "loop": (["loop", "acc_sum"], ["h"], ["acc"], ["fc0", "join", "relu", "fc1"]),
    "nonzero": (["nonzero", "transpose", "gather", "total"], ["r"], ["total"], ["fc0", "relu", "scale", "fc1"]),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dynamic_region_becomes_one_opaque_op(name):
    original = MODELS[name]()
    g = build_graph(original)
    nodes, ins, outs, rest = EXPECTED[name]
    (op,) = [o for o in g.ops if o.domain == OPAQUE_DOMAIN]
    assert op.id == "opaque_0" and op.op_type.startswith("Opaque_")
    assert [o.id for o in g.ops if o is not op] == rest  # the static ops are untouched
    fn = function_of(g.model, op.op_type)
    assert [n.name for n in fn.node] == nodes
    assert [t for t in op.inputs if not g.tensors[t].is_constant] == ins and list(op.outputs) == outs
    for t in op.inputs + op.outputs:  # every boundary tensor has a static shape and real bytes
        assert all(d > 0 for d in g.tensors[t].shape) or g.tensors[t].shape == ()
    assert op.bytes_out == sum(g.tensors[t].nbytes for t in outs)
    assert describe_regions(g) == {op.id: f"{len(nodes)} node{'s' if len(nodes) > 1 else ''}: "
                                          + ", ".join(dict.fromkeys(n.op_type for n in fn.node))}
    # the contracted model, its region alone and the rest alone compute what the original does
    onnx.checker.check_model(g.model, full_check=True)
    for seed in range(3):
        feeds = zoo.random_inputs(original, seed)
        every = [t for t in g.tensors if not g.tensors[t].is_constant and t not in g.inputs]
        want = _ort(_expose(original, every), feeds)
        got = _ort(g.model, feeds)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
        single = g.single_op_model(op.id)
        assert [f.name for f in single.functions] == [op.op_type]
        onnx.checker.check_model(single, full_check=True)
        part = _ort(single, {t: want[t] if t in want else feeds[t] for t in ins})
        for t in outs:
            np.testing.assert_allclose(part[t], want[t], rtol=1e-5, atol=1e-5)
    static = g.subgraph_model([o for o in rest])  # a sub-model without the region has no function
    assert not static.functions and all(o.domain != OPAQUE_DOMAIN for o in static.opset_import)


def _expose(model: onnx.ModelProto, names) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(h.make_empty_tensor_value_info(t) for t in names if t not in have)
    return m


def test_region_is_made_convex():
    """NonZero's indices are read by two GatherNDs; the second gathers from ``scaled``, which is
    computed outside the data-dependent chain from the first gather's (static) sum: the Mul on
    that path joins the region, or the contracted graph would have a cycle."""
    nodes = [
        h.make_node("MatMul", ["x", "w0"], ["r"], name="fc0"),
        h.make_node("NonZero", ["r"], ["nz"], name="nonzero"),
        h.make_node("Transpose", ["nz"], ["idx"], name="transpose", perm=[1, 0]),
        h.make_node("GatherND", ["r", "idx"], ["vals"], name="gather"),
        h.make_node("ReduceSum", ["vals"], ["total"], name="total", keepdims=0),
        h.make_node("Mul", ["r", "total"], ["scaled"], name="scale"),
        h.make_node("GatherND", ["scaled", "idx"], ["vals2"], name="gather2"),
        h.make_node("ReduceMax", ["vals2"], ["peak"], name="peak", keepdims=0),
        h.make_node("Mul", ["scaled", "peak"], ["y"], name="out"),
    ]
    m = _model(nodes, [h.make_tensor_value_info("x", TP.FLOAT, [2, 8])],
               [h.make_tensor_value_info("y", TP.FLOAT, [2, 16])], [_w("w0", (8, 16), 1)], "convex")
    g = build_graph(m)
    assert [o.id for o in g.ops] == ["fc0", "opaque_0", "out"]
    fn = function_of(g.model, g.op("opaque_0").op_type)
    assert [n.name for n in fn.node] == ["nonzero", "transpose", "gather", "total", "scale", "gather2", "peak"]
    assert g.op("opaque_0").outputs == ("scaled", "peak")
    feeds = zoo.random_inputs(m, 0)
    np.testing.assert_allclose(_ort(g.model, feeds)["y"], _ort(m, feeds)["y"], rtol=1e-5, atol=1e-6)


def test_two_independent_regions_stay_two():
    m = MODELS["if"]()
    g0 = m.graph
    second = onnx.NodeProto()
    second.CopyFrom(next(n for n in g0.node if n.op_type == "If"))
    second.name, second.output[0] = "branch2", "b2"
    g0.node.append(second)
    g0.node.append(h.make_node("Add", ["b", "b2"], ["bb"], name="join"))
    conv2 = next(n for n in g0.node if n.name == "conv2")
    conv2.input[0] = "bb"
    g = build_graph(m)
    regions = [o for o in g.ops if o.domain == OPAQUE_DOMAIN]
    assert [o.id for o in regions] == ["opaque_0", "opaque_1"]
    assert [o.outputs for o in regions] == [("b",), ("b2",)]
    assert [[n.name for n in function_of(g.model, o.op_type).node] for o in regions] == [["branch"], ["branch2"]]
    feeds = zoo.random_inputs(m, 1)
    np.testing.assert_allclose(_ort(g.model, feeds)["y"], _ort(m, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_dynamic_graph_output_is_refused_naming_it():
    nodes = [h.make_node("NonZero", ["x"], ["nz"], name="where_nonzero"),
             h.make_node("Cast", ["nz"], ["y"], name="cast", to=TP.FLOAT)]
    m = _model(nodes, [h.make_tensor_value_info("x", TP.FLOAT, [4])], [h.make_tensor_value_info("y", TP.FLOAT, None)],
               [], "dyn_out")
    with pytest.raises(GraphError, match="graph output 'y' produced by node 'cast' .*data-dependent shape"):
        load_model(m)


def test_static_models_are_left_alone(tiny_model):
    g = build_graph(tiny_model)
    assert not g.model.functions and all(o.domain != OPAQUE_DOMAIN for o in g.model.opset_import)
    assert describe_regions(g) == {}


def test_only_framework_runtimes_accept_an_opaque_op():
    assert make_target("onnxruntime").supports("Opaque_x", OPAQUE_DOMAIN)[0]
    assert make_target("openvino").supports("Opaque_x", OPAQUE_DOMAIN)[0]
    ok, why = make_target("tvm-llvm").supports("Opaque_x", OPAQUE_DOMAIN)
    assert not ok and OPAQUE_DOMAIN in why
