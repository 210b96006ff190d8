"""Partitioning: connected same-target regions, acyclic quotient graph, deterministic, stages respected."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from mz_models import chain_model, diamond_model, graph_of, make_model, vi
from onnx import helper as h

from placer.errors import PlanError
from placer.materialize import group_ops, materialize

ORT, OV, TVM = "onnxruntime@cpu:t1", "openvino@cpu:t1", "tvm-llvm@cpu:t1"


def _check_invariants(graph, groups, assignment, stage_of=None):
    # every op exactly once
    flat = [o for g in groups for o in g]
    assert sorted(flat) == sorted(op.id for op in graph.ops)
    part_of = {o: i for i, g in enumerate(groups) for o in g}
    # one key per partition
    for g in groups:
        assert len({assignment[o] for o in g}) == 1
        if stage_of is not None:
            assert len({stage_of[o] for o in g}) == 1
    # connected (undirected, through edges inside the partition)
    for g in groups:
        members = set(g)
        adj = {o: set() for o in g}
        for o in g:
            for t in graph.op(o).outputs:
                for c in graph.consumers.get(t, ()):
                    if c in members:
                        adj[o].add(c)
                        adj[c].add(o)
        seen, stack = set(), [g[0]]
        while stack:
            x = stack.pop()
            if x not in seen:
                seen.add(x)
                stack.extend(adj[x])
        assert seen == members, f"partition {g} is not connected"
    # quotient edges go forward in the returned order (so: acyclic, and the order is topological)
    for op in graph.ops:
        for t in op.inputs:
            src = graph.producer.get(t)
            if src is not None:
                assert part_of[src] <= part_of[op.id]


def test_one_target_is_one_partition():
    g = graph_of(chain_model(6))
    groups = group_ops(g, {op.id: ORT for op in g.ops})
    assert len(groups) == 1


def test_alternating_chain_splits_at_every_change():
    g = graph_of(chain_model(6))
    asg = {op.id: (ORT if i < 2 else OV if i < 4 else ORT) for i, op in enumerate(g.ops)}
    groups = group_ops(g, asg)
    assert [len(x) for x in groups] == [2, 2, 2]
    _check_invariants(g, groups, asg)


def test_diamond_that_would_depend_on_itself_is_split():
    # a, c, d, e on ORT; b on OV: {a, c, d, e} would read from b while b reads from a
    g = graph_of(diamond_model())
    asg = {"a": ORT, "b": OV, "c": ORT, "d": ORT, "e": ORT, "f": OV}
    groups = group_ops(g, asg)
    _check_invariants(g, groups, asg)
    assert ["a", "c"] in groups and ["d", "e"] in groups
    # b and f (both OV, f reads b) merge into one partition
    assert ["b", "f"] in groups


def test_merge_pass_joins_same_target_partitions_without_a_path_through_another():
    # x -> a (ORT) -> b (OV) ; a -> c (ORT) ; d = Add(b, c) on OV, e = Relu(c) on ORT
    nodes = [
        h.make_node("Relu", ["x"], ["a"], name="a"),
        h.make_node("Sigmoid", ["a"], ["b"], name="b"),
        h.make_node("Tanh", ["a"], ["c"], name="c"),
        h.make_node("Add", ["b", "c"], ["d"], name="d"),
        h.make_node("Relu", ["c"], ["e"], name="e"),
    ]
    g = graph_of(make_model(nodes, [vi("x", (2, 3))], [vi("d", (2, 3)), vi("e", (2, 3))]))
    asg = {"a": ORT, "b": OV, "c": ORT, "d": OV, "e": ORT}
    groups = group_ops(g, asg)
    _check_invariants(g, groups, asg)
    assert groups == [["a", "c", "e"], ["b", "d"]]


def test_deterministic_and_ordered():
    g = graph_of(diamond_model())
    asg = {"a": ORT, "b": OV, "c": TVM, "d": ORT, "e": OV, "f": TVM}
    assert group_ops(g, asg) == group_ops(g, dict(reversed(list(asg.items()))))


def _random_dag_model(rng: np.random.Generator, n: int) -> onnx.ModelProto:
    nodes, avail = [], ["x"]
    for i in range(n):
        if len(avail) > 1 and rng.random() < 0.4:
            a, b = rng.choice(len(avail), size=2, replace=False)
            nodes.append(h.make_node("Add", [avail[a], avail[b]], [f"t{i}"], name=f"op{i}"))
        else:
            a = int(rng.integers(len(avail)))
            kind = ("Relu", "Sigmoid", "Tanh", "Neg")[i % 4]
            nodes.append(h.make_node(kind, [avail[a]], [f"t{i}"], name=f"op{i}"))
        avail.append(f"t{i}")
    used = {t for nd in nodes for t in nd.input}
    outs = [t for t in avail[1:] if t not in used]
    return make_model(nodes, [vi("x", (2, 3))], [vi(t, (2, 3)) for t in outs], name="rand")


@pytest.mark.parametrize("seed", range(25))
def test_random_dags_keep_invariants(seed):
    rng = np.random.default_rng(seed)
    g = graph_of(_random_dag_model(rng, int(rng.integers(5, 40))))
    targets = [ORT, OV, TVM][: int(rng.integers(2, 4))]
    asg = {op.id: targets[int(rng.integers(len(targets)))] for op in g.ops}
    groups = group_ops(g, asg)
    _check_invariants(g, groups, asg)
    assert groups == group_ops(g, asg)
    # pipeline: stages cut along the topological order never share a partition
    k = 3
    stage_of = {op.id: min(k - 1, op.index * k // len(g.ops)) for op in g.ops}
    sgroups = group_ops(g, asg, stage_of)
    _check_invariants(g, sgroups, asg, stage_of)
    stages = [stage_of[x[0]] for x in sgroups]
    assert stages == sorted(stages)


def test_pipeline_stage_order_violation_names_the_edge():
    g = graph_of(chain_model(4))
    asg = {op.id: ORT for op in g.ops}
    stage_of = {op.id: (1 if op.index == 0 else 0) for op in g.ops}
    with pytest.raises(PlanError, match="stages must not decrease"):
        group_ops(g, asg, stage_of)


def test_unassigned_and_unknown_ops_are_plan_errors():
    g = graph_of(chain_model(4))
    asg = {op.id: ORT for op in g.ops}
    missing = dict(asg)
    missing.pop(g.ops[1].id)
    with pytest.raises(PlanError, match="assigns no target"):
        group_ops(g, missing)
    with pytest.raises(PlanError, match="not in model"):
        group_ops(g, {**asg, "nope": ORT})


def test_materialize_reports_partitions_and_boundaries():
    g = graph_of(diamond_model())
    mat = materialize(g, {"a": "onnxruntime", "b": "openvino", "c": "onnxruntime", "d": "onnxruntime",
                          "e": "onnxruntime", "f": "openvino"})
    st = mat.stats
    assert st.n_partitions == 3
    # {a, c} -> {b, f} through a; {a, c} -> {d, e} through c; {b, f} -> {d, e} through b
    assert st.n_boundary_tensors == 3
    assert st.boundary_bytes == 3 * 2 * 4 * 4
    assert st.by_target == {"onnxruntime@cpu:t1": 2, "openvino@cpu:t1": 1}
    # canonical target names in the partitions
    assert {p.target for p in mat.partitions} == {"onnxruntime@cpu:t1", "openvino@cpu:t1"}
