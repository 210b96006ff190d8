"""single_op_model / subgraph_model reproduce the full model's intermediate tensors in ORT."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from graph_testlib import expose, run, session

from placer import zoo
from placer.graph import build_graph


@pytest.fixture(scope="module")
def squeezenet(zoo_models):
    g = build_graph(zoo_models("squeezenet"))
    feeds = zoo.random_inputs(g.model, seed=3)
    every = [t for t, info in g.tensors.items() if not info.is_constant and t not in g.inputs]
    values = dict(feeds)
    values.update(run(expose(g, every), feeds))
    return g, values


def _check(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> None:
    onnx.checker.check_model(model)
    feeds = {vi.name: values[vi.name] for vi in model.graph.input}
    got = run(model, feeds)
    assert set(got) == {vi.name for vi in model.graph.output}
    for name, arr in got.items():
        np.testing.assert_allclose(arr, values[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_every_single_op_model_reproduces_its_outputs(squeezenet):
    g, values = squeezenet
    for op in g.ops:
        m = g.single_op_model(op.id)
        assert [n.name for n in m.graph.node] == [op.id]
        assert [vi.name for vi in m.graph.output] == [o for o in op.outputs if o]
        assert {vi.name for vi in m.graph.input} == {t for t in op.inputs if t and not g.tensors[t].is_constant}
        consts = {t.name: t for t in m.graph.initializer}
        assert set(consts) == {t for t in op.inputs if t and g.tensors[t].is_constant}
        for name, t in consts.items():  # the real weights
            assert t.raw_data == g._init_by_name[name].raw_data
        _check(m, values)


def test_subgraph_cuts_of_squeezenet(squeezenet):
    g, values = squeezenet
    ids = [op.id for op in g.ops]
    cuts = {
        "head": ids[:10],
        "middle": ids[10:40],
        "tail": ids[40:],
        "disconnected": [ids[3], ids[20], ids[50]],
        "one fire module": [op.id for op in g.ops if 3 <= op.index <= 9],
    }
    for label, cut in cuts.items():
        m = g.subgraph_model(cut, name=label.replace(" ", "_"))
        ins, outs = g.subgraph_io(cut)
        assert [vi.name for vi in m.graph.input] == ins and [vi.name for vi in m.graph.output] == outs
        inside = set(cut)
        produced = {o for i in cut for o in g.op(i).outputs if o}
        for t in ins:  # read by the set, produced outside it (or a model input), never a constant
            assert t not in produced and not g.tensors[t].is_constant
            assert any(c in inside for c in g.consumers[t])
        for t in outs:  # produced inside, needed outside
            assert t in produced
            assert t in g.outputs or any(c not in inside for c in g.consumers.get(t, ()))
        keys = [(g.index_of(g.producer[t]) if t in g.producer else -1, t) for t in ins]
        assert keys == sorted(keys)
        _check(m, values)
    # the whole graph as one subgraph is the model itself
    ins, outs = g.subgraph_io(ids)
    assert ins == g.inputs and outs == g.outputs


def test_residual_crossing_cut_of_resnet50(zoo_models):
    g = build_graph(zoo_models("resnet50"))
    first_sum = next(op for op in g.ops if op.op_type == "Sum")
    # start inside the first bottleneck (after its first conv) and stop after the second block's
    # first conv: the shortcut (maxpool output) and the block output both cross the cut
    start = g.op(g.producer[first_sum.inputs[0]]).index - 5
    cut = [op.id for op in g.ops[start : first_sum.index + 3]]
    ins, outs = g.subgraph_io(cut)
    assert len(ins) == 2 and len(outs) >= 2
    # the residual: a tensor from before the cut feeds ops on both sides of it (shortcut conv inside)
    assert any(
        any(c in cut for c in g.consumers[t]) and any(c not in cut for c in g.consumers[t]) for t in ins
    )
    feeds = zoo.random_inputs(g.model, seed=4)
    values = dict(feeds)
    values.update(run(expose(g, ins + outs), feeds))
    _check(g.subgraph_model(cut), values)


def test_subgraph_model_is_fast_and_does_not_pull_upstream(zoo_models):
    g = build_graph(zoo_models("resnet50"))
    half = [op.id for op in g.ops[60:120]]
    t0 = time.perf_counter()
    m = g.subgraph_model(half)
    assert time.perf_counter() - t0 < 60  # a hang guard (quadratic extraction); the checks below are the test
    assert len(m.graph.node) == 60
    assert {t.name for t in m.graph.initializer} == {
        t for i in half for t in g.op(i).inputs if t and g.tensors[t].is_constant
    }
    session(m)  # valid for ORT


def test_subgraph_io_rules_on_the_tiny_model(tiny_model):
    g = build_graph(tiny_model)
    assert g.subgraph_io(["relu0", "conv_a"]) == (["t0"], ["t1", "ta"])  # t1 also feeds pool_b
    assert g.subgraph_io(["pool_b", "conv_a"]) == (["t1"], ["ta", "tb"])
    assert g.subgraph_io(["fc"]) == (["t4"], ["y"])
    assert g.subgraph_io(["conv0", "fc"]) == (["x", "t4"], ["t0", "y"])  # disconnected
    assert g.subgraph_io("add") == (["ta", "tb"], ["t2"])
