"""Partition-aware pricing (issue 9): calibration, entry costs, fusion groups, single-target choice."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from placer.costing import CostTable, build_problem, fusion_scales, graph_tensors
from placer.graph import load_graph
from placer.problem import PlacementProblem, Tensor
from placer.solve import solve
from placer.costing import fusion_groups


def _table(graph, costs: dict[str, list[float]], whole=None, overhead=None) -> CostTable:
    names = tuple(costs)
    cost = np.array([costs[t] for t in names], dtype=float).T
    source = np.where(np.isfinite(cost), "measured", "unsupported").astype(object)
    return CostTable(tuple(op.id for op in graph.ops), names, cost, source, overhead or {}, whole or {})


@pytest.fixture
def tiny_graph(tiny_model):
    return load_graph(tiny_model)


def test_calibration_makes_single_target_plan_predict_the_measured_whole_model(tiny_graph):
    n = len(tiny_graph.ops)
    table = _table(tiny_graph, {"a": [1.0] * n, "b": [2.0] * n}, whole={"a": 4.0 + 0.5, "b": 30.0},
                   overhead={"a": 0.5, "b": 0.0})
    scales = fusion_scales(table)
    assert scales["a"] == pytest.approx(4.0 / n)
    assert scales["b"] == pytest.approx(30.0 / (2.0 * n))
    problem = build_problem(tiny_graph, table)
    for t, whole_net in (("a", 4.0), ("b", 30.0)):
        plan = solve(problem, "latency", f"single:{t}")
        assert plan.makespan_ms == pytest.approx(whole_net)  # ops run one after another on one target
    # the optimum is never predicted worse than the best single target (it is a candidate / the hint)
    best = solve(problem, "latency", "cpsat", time_limit=5)
    assert best.makespan_ms <= 4.0 + 1e-6


def test_uncalibrated_when_whole_model_unknown_or_some_op_unsupported(tiny_graph):
    n = len(tiny_graph.ops)
    costs = {"a": [1.0] * n, "b": [math.inf] + [1.0] * (n - 1)}
    table = _table(tiny_graph, costs, whole={"a": 2.0 * n})
    assert fusion_scales(table) == {"a": pytest.approx(2.0), "b": 1.0}


def test_a_whole_model_no_slower_than_one_call_leaves_the_op_costs_as_they_are(tiny_graph):
    # zoo:tiny on OpenVINO t1 once measured within its call overhead: a scale of 0 priced every plan
    # at 0 ms
    n = len(tiny_graph.ops)
    table = _table(tiny_graph, {"a": [0.01] * n, "b": [0.01] * n}, whole={"a": 0.05, "b": 0.2},
                   overhead={"a": 0.06, "b": 0.1})
    assert fusion_scales(table) == {"a": 1.0, "b": pytest.approx(0.1 / (0.01 * n))}


def test_entry_cost_discourages_a_one_op_partition_whose_gain_is_smaller():
    # a -> b -> c, all cheap on "x"; b is 0.3 ms cheaper on "y", each hand-off costs 0.1 + entry.
    tensors = [Tensor("t0", None, ("a",), 4), Tensor("t1", "a", ("b",), 4), Tensor("t2", "b", ("c",), 4),
               Tensor("t3", "c", (), 4)]
    cost = np.array([[1.0, 5.0], [1.0, 0.7], [1.0, 5.0]])
    base = dict(ops=["a", "b", "c"], targets=["x", "y"], cost_ms=cost, tensors=tensors, link_latency_ms=0.1)
    cheap_entry = PlacementProblem(**base, partition_overhead_ms=0.0)
    dear_entry = PlacementProblem(**base, partition_overhead_ms=0.2)
    assert solve(cheap_entry, "latency", "cpsat").assignment["b"] == "y"   # 0.3 gain > 0.2 of links
    plan = solve(dear_entry, "latency", "cpsat")
    assert set(plan.assignment.values()) == {"x"}                        # 0.3 gain < 0.6 of links+entry
    assert plan.makespan_ms == pytest.approx(3.0)


def test_segment_cheaper_than_its_ops_is_kept_whole_by_fusion_groups(squeezenet_model):
    graph = load_graph(squeezenet_model)
    groups = fusion_groups(graph)
    conv_relu = [g for g in groups if [graph.op(o).op_type for o in g] == ["Conv", "Relu"]]
    assert len(conv_relu) == 26  # every Conv of squeezenet feeds exactly one Relu
    n = len(graph.ops)
    idx = {op.id: i for i, op in enumerate(graph.ops)}
    # Relu is cheaper alone on "y"; Conv cheaper on "x": per-op pricing splits every pair...
    cost = np.array([[1.0, 2.0] if graph.ops[i].op_type != "Relu" else [0.5, 0.01] for i in range(n)])
    table = CostTable(tuple(idx), ("x", "y"), cost, np.full(cost.shape, "measured", dtype=object))
    split = solve(build_problem(graph, table), "latency", "heft")
    assert len({split.assignment[g[0]] for g in conv_relu} | {split.assignment[g[1]] for g in conv_relu}) == 2
    # ...while the fused segment (colocation) keeps every Conv+Relu on one target
    fused = build_problem(graph, table, colocate=conv_relu)
    for name in ("cpsat", "heft", "greedy"):
        plan = solve(fused, "latency", name, time_limit=5)
        assert all(plan.assignment[a] == plan.assignment[b] for a, b in conv_relu), name


def test_single_target_plan_chosen_when_costs_say_so(tiny_graph):
    import dataclasses

    n = len(tiny_graph.ops)
    table = _table(tiny_graph, {"a": [1.0] * n, "b": [1.2] * n}, whole={"a": 0.5 * n, "b": 1.5 * n})
    # after calibration every op costs 0.5 on "a" and 1.5 on "b"; a hand-off costs 1 ms
    problem = dataclasses.replace(build_problem(tiny_graph, table), link_latency_ms=1.0)
    for name in ("cpsat", "heft"):
        plan = solve(problem, "latency", name, time_limit=5)
        assert set(plan.assignment.values()) == {"a"}, name
        assert plan.makespan_ms == pytest.approx(0.5 * n)
        assert plan.transfers == ()


def test_graph_tensors_cover_every_edge(tiny_graph):
    tensors = {t.name: t for t in graph_tensors(tiny_graph)}
    for e in tiny_graph.edges:
        assert e.dst in tensors[e.tensor].consumers and tensors[e.tensor].producer == e.src


def test_measured_segment_cost_is_used_when_the_segment_is_kept_whole(squeezenet_model):
    import dataclasses

    from placer.costing import apply_segment_costs, fusion_groups

    graph = load_graph(squeezenet_model)
    n = len(graph.ops)
    conv_relu = [tuple(g) for g in fusion_groups(graph)]
    base = _table(graph, {"x": [1.0] * n, "y": [1.0] * n})
    # each Conv+Relu measured as one partition: 0.5 ms on x (fused: cheaper than its ops' 2 ms), 3 ms on y
    table = dataclasses.replace(base, segments={g: {"x": 0.5, "y": 3.0} for g in conv_relu})
    cost, source, groups = apply_segment_costs(table)
    assert set(groups) == set(conv_relu)
    idx = {op.id: i for i, op in enumerate(graph.ops)}
    for g in conv_relu:
        assert cost[[idx[o] for o in g], 0].sum() == pytest.approx(0.5)
        assert all(source[idx[o], 0] == "segment" for o in g)
    problem = build_problem(graph, table, calibrate=False)
    assert {tuple(c) for c in problem.colocate} == set(conv_relu)  # kept whole, else the price is wrong
    n_rest = n - 2 * len(conv_relu)
    plan = solve(problem, "latency", "single:x")
    assert plan.makespan_ms == pytest.approx(0.5 * len(conv_relu) + n_rest)
    # without segments the same plan is priced from the isolated ops
    assert solve(build_problem(graph, table, calibrate=False, use_segments=False), "latency",
                 "single:x").makespan_ms == pytest.approx(n)


def test_segment_ratio_statistic_per_target(squeezenet_model):
    """The per-target ratio of a segment measured whole to the sum of its ops' isolated costs."""
    import dataclasses

    from placer.costing import segment_ratio_stats, segment_ratios

    graph = load_graph(squeezenet_model)
    n = len(graph.ops)
    groups = [tuple(g) for g in fusion_groups(graph)]
    base = _table(graph, {"x": [1.0] * n, "y": [2.0] * n, "z": [1.0] * n})
    segs = {g: {"x": 0.5 * len(g), "y": 3.0 * len(g)} for g in groups}  # x fuses (0.5), y does not (1.5)
    segs[groups[0]] = {"x": 0.25 * len(groups[0])}
    table = dataclasses.replace(base, segments=segs)
    ratios = segment_ratios(table)
    assert sorted(ratios["x"]) == pytest.approx(sorted([0.25] + [0.5] * (len(groups) - 1)))
    assert ratios["y"] == pytest.approx([1.5] * (len(groups) - 1)) and ratios["z"] == []
    stats = segment_ratio_stats(table)
    assert set(stats) == {"x", "y"}  # z measured no segment
    assert stats["x"]["n"] == len(groups) and stats["x"]["median"] == pytest.approx(0.5)
    assert stats["y"]["p10"] == pytest.approx(1.5) and stats["y"]["p90"] == pytest.approx(1.5)


def test_the_entry_cost_is_the_median_excess_per_input_beyond_the_charged_link():
    from placer.costing import partition_pricing

    def entry_from_partitions(problem, rows):
        return partition_pricing(problem, rows).entry_ms

    tensors = [Tensor("t0", None, ("a",), 4), Tensor("t1", "a", ("b",), 4), Tensor("t2", "b", ("c",), 4),
               Tensor("t3", "c", (), 4)]
    cost = np.array([[1.0, 2.0], [1.0, 0.5], [1.0, 2.0]])
    p = PlacementProblem(ops=["a", "b", "c"], targets=["x", "y"], cost_ms=cost, tensors=tensors,
                         link_latency_ms=0.1)
    rows = [
        {"target": "y", "prev": "x", "ops": ["b"], "n_inputs": 1, "median_ms": 0.9},       # excess 0.4
        {"target": "y", "prev": "x", "ops": ["b", "c"], "n_inputs": 2, "median_ms": 3.5},  # (3.5 - 2.5) / 2
        {"target": "y", "prev": "x", "ops": ["b"], "n_inputs": 1, "median_ms": 1.5},       # excess 1.0
        {"target": "y", "prev": None, "ops": ["b"], "n_inputs": 1, "median_ms": 9.0},      # first: not a boundary
        {"target": "y", "prev": "x", "ops": ["zz"], "n_inputs": 1, "median_ms": 9.0},      # another graph's op
        {"target": "x", "prev": "y", "ops": ["c"], "n_inputs": 1, "median_ms": 0.95},      # faster than priced
    ]
    entry = entry_from_partitions(p, rows)
    assert entry[1] == pytest.approx(0.5 - 0.1)  # median of 0.4, 0.5, 1.0, minus the link latency into y
    assert entry[0] == 0.0                       # clipped at 0
    assert not entry_from_partitions(p, []).any()


def test_partition_pricing_tells_the_cut_scale_from_the_entry_cost():
    from placer.costing import partition_pricing

    ops = [f"o{i}" for i in range(6)]
    tensors = [Tensor("in", None, ("o0",), 4)] + [Tensor(f"t{i}", ops[i], (ops[i + 1],), 4) for i in range(5)]
    cost = np.array([[1.0, 2.0], [0.02, 0.04], [2.0, 1.0], [0.5, 0.5], [3.0, 1.5], [0.01, 0.02]])
    p = PlacementProblem(ops=ops, targets=["x", "y"], cost_ms=cost, tensors=tensors, link_latency_ms=0.05)

    def row(target, prev, members, n_in, entry, scale):
        price = sum(cost[int(o[1:]), p.target_index[target]] for o in members)
        return {"target": target, "prev": prev, "ops": members, "n_inputs": n_in,
                "median_ms": entry * (n_in if prev else 0) + scale * price}

    rows = [  # y: entry 0.3 per input and scale 1.4, in large and small partitions alike
        row("y", None, ["o0", "o1"], 1, 0.3, 1.4),
        row("y", "x", ["o2", "o3"], 1, 0.3, 1.4),
        row("y", "x", ["o4"], 2, 0.3, 1.4),
        row("y", "x", ["o1"], 1, 0.3, 1.4),
        row("y", "x", ["o5"], 1, 0.3, 1.4),
        row("x", "y", ["o1"], 1, 0.2, 1.0),  # x: small partitions only, entry 0.2, no scale to learn
        row("x", "y", ["o5"], 1, 0.2, 1.0),
        row("x", None, ops, 1, 0.0, 5.0),    # the whole model: not a cut plan, ignored
    ]
    pricing = partition_pricing(p, rows)
    assert pricing.cut_scale[1] == pytest.approx(1.4)
    assert pricing.entry_ms[1] == pytest.approx(0.3 - 0.05)  # net of the link latency into y
    assert pricing.cut_scale[0] == 1.0 and pricing.entry_ms[0] == pytest.approx(0.2 - 0.05)
    assert pricing.rows_used == {"y": 5, "x": 2}
    # a scale measured below 1 is kept at 1 (a cut never makes an op faster)
    fast = [dict(r, median_ms=r["median_ms"] * 0.5) for r in rows if r["target"] == "y"]
    assert partition_pricing(p, fast).cut_scale[1] == 1.0


def test_region_calibration_moves_cost_along_the_model_and_keeps_the_whole():
    from placer.costing import partition_pricing, region_calibrated

    ops = [f"o{i}" for i in range(8)]
    tensors = [Tensor("in", None, ("o0",), 4)] + [Tensor(f"t{i}", ops[i], (ops[i + 1],), 4) for i in range(7)]
    p = PlacementProblem(ops=ops, targets=["x", "y"], cost_ms=np.ones((8, 2)), tensors=tensors)
    truth = np.array([0.5] * 4 + [1.5] * 4)  # on y the first half costs half its price, the second 1.5x

    def row(members, prev, n_in):
        return {"target": "y", "prev": prev, "ops": [ops[i] for i in members], "n_inputs": n_in,
                "median_ms": 0.1 * (n_in if prev else 0) + float(truth[members].sum())}

    rows = [row([0, 1, 2, 3], None, 1), row([4, 5, 6, 7], "x", 1), row([1], "x", 1), row([5], "x", 1),
            row([2, 3], "x", 1), row([6, 7], "x", 1)]
    q = region_calibrated(p, rows)
    assert q.cost_ms[:, 1] == pytest.approx(truth, abs=0.01)
    assert q.cost_ms[:, 1].sum() == pytest.approx(8.0)  # a plan on y alone keeps its price
    assert np.array_equal(q.cost_ms[:, 0], p.cost_ms[:, 0])  # x: no partitions, unchanged
    assert partition_pricing(q, rows).entry_ms[1] == pytest.approx(0.1, abs=0.01)
    assert region_calibrated(p, []) is p


def test_pair_pricing_tells_each_predecessor_apart():
    from placer.costing import pair_pricing, partition_pricing

    ops = [f"o{i}" for i in range(6)]
    tensors = [Tensor("in", None, ("o0",), 4)] + [Tensor(f"t{i}", ops[i], (ops[i + 1],), 4) for i in range(5)]
    cost = np.array([[1.0] * 3, [0.02] * 3, [2.0] * 3, [0.5] * 3, [3.0] * 3, [0.01] * 3])
    p = PlacementProblem(ops=ops, targets=["x", "y", "z"], cost_ms=cost, tensors=tensors, link_latency_ms=0.05)

    def row(prev, members, entry, scale, n_in=1):  # entry once per partition, the link per tensor
        price = sum(cost[int(o[1:]), 1] for o in members)
        return {"target": "y", "prev": prev, "ops": members, "n_inputs": n_in,
                "median_ms": entry + 0.05 * n_in + scale * price}

    # y after x: 0.4 ms per partition and 1.3x; after z: 0.1 ms and 1.05x (two small pieces, one of
    # them receiving three tensors, and two large ones each)
    rows = [row(prev, m, e, s, n) for prev, e, s in (("x", 0.4, 1.3), ("z", 0.1, 1.05))
            for m, n in ((["o1"], 1), (["o5"], 3), (["o2", "o3"], 1), (["o4"], 2))]
    pairs = pair_pricing(p, rows)
    assert pairs.scale[(0, 1)] == pytest.approx(1.3, abs=1e-3) and pairs.scale[(2, 1)] == pytest.approx(1.05, abs=1e-3)
    assert pairs.entry_ms[(0, 1)] == pytest.approx(0.4, abs=1e-3)  # net of the link latency of each tensor
    assert pairs.entry_ms[(2, 1)] == pytest.approx(0.1, abs=1e-3)
    assert pairs.rows_used == {(0, 1): 4, (2, 1): 4}
    # the per-target pricing mixes them: between the two
    mixed = partition_pricing(p, rows)
    assert 1.05 < mixed.cut_scale[1] < 1.3
    prov = pairs.to_provenance(p.targets)
    assert prov["pair_scale"]["x>y"] == pytest.approx(1.3, abs=1e-3) and set(prov["pair_entry_ms"]) == {"x>y", "z>y"}
    assert pair_pricing(p, []).scale == {}
    # one piece decides nothing: a pair with a single large and a single small piece keeps the target's prices
    lone = rows + [{"target": "x", "prev": "y", "ops": ["o2", "o3"], "n_inputs": 1, "median_ms": 2.65},
                   {"target": "x", "prev": "y", "ops": ["o1"], "n_inputs": 1, "median_ms": 0.17}]
    thin = pair_pricing(p, lone)
    assert (1, 0) not in thin.scale and (1, 0) not in thin.entry_ms and thin.rows_used[(1, 0)] == 2


def test_a_cut_plan_is_priced_by_the_target_before_each_partition_and_wraps_around(tiny_graph):
    from placer.costing import graph_tensors
    from placer.materialize.in_context import priced_as_run
    from placer.solve.evaluate import make_latency_plan

    ids = [op.id for op in tiny_graph.ops]
    prov = {"pair_entry_ms": {"x>y": 0.5, "y>x": 0.25}, "pair_scale": {"x>y": 2.0, "y>x": 1.5}}
    p = PlacementProblem(ops=ids, targets=["x", "y"], cost_ms=np.ones((len(ids), 2)),
                         tensors=graph_tensors(tiny_graph), provenance=prov)
    on_y = {"conv_a", "pool_b", "add"}
    # x (conv0, relu0), then y (conv_a, pool_b, add), then x (gap, flatten, fc): the first partition
    # follows the previous request's last one, on x: nothing to pay
    plan = make_latency_plan(p, np.array([int(o in on_y) for o in ids]), "test")
    assert plan.makespan_ms == pytest.approx(8.0)  # the solver's price: 8 ops of 1 ms, free links
    priced = priced_as_run(p, tiny_graph, plan)
    assert priced.makespan_ms == pytest.approx(2.0 + (0.5 + 3 * 2.0) + (0.25 + 3 * 1.5))
    assert priced.assignment == plan.assignment and priced.provenance["solver_makespan_ms"] == pytest.approx(8.0)
    # x then y to the end: the first partition is entered from y (the previous request's end)
    tail = make_latency_plan(p, np.array([int(i >= 2) for i in range(len(ids))]), "test")
    assert priced_as_run(p, tiny_graph, tail).makespan_ms == pytest.approx((0.25 + 2 * 1.5) + (0.5 + 6 * 2.0))
    # one target, or no pair prices: the plan as it is
    single = make_latency_plan(p, np.zeros(len(ids), dtype=int), "test")
    assert priced_as_run(p, tiny_graph, single) is single
    bare = PlacementProblem(ops=ids, targets=["x", "y"], cost_ms=np.ones((len(ids), 2)),
                            tensors=graph_tensors(tiny_graph))
    assert priced_as_run(bare, tiny_graph, plan) is plan


def test_a_plans_assignment_is_priced_again_as_run_on_a_problem_repriced_later(tiny_graph):
    from placer.costing import graph_tensors
    from placer.tune.reprice import priced_assignment

    ids = [op.id for op in tiny_graph.ops]
    prov = {"pair_entry_ms": {"x>y": 0.5, "y>x": 0.25}, "pair_scale": {"x>y": 2.0, "y>x": 1.5}}
    on_y = {"conv_a", "pool_b", "add"}
    assignment = {o: "y" if o in on_y else "x" for o in ids}
    for scale in (1.0, 3.0):  # the same plan on a problem whose costs were re-priced 3x
        p = PlacementProblem(ops=ids, targets=["x", "y"], cost_ms=scale * np.ones((len(ids), 2)),
                             tensors=graph_tensors(tiny_graph), provenance=prov)
        priced = priced_assignment(p, tiny_graph, assignment)
        assert priced.assignment == assignment
        # x (2 ops), then y entered from x (3 ops at 2.0x), then x entered from y (3 ops at 1.5x)
        want = 2 * scale + (0.5 + 3 * 2.0 * scale) + (0.25 + 3 * 1.5 * scale)
        assert priced.makespan_ms == pytest.approx(want)
    # a colocation group the plan splits (a trial's problem left it out: no target held it whole under
    # its knobs) is left out of the pricing too: priced as on the problem without it
    grouped = dataclasses.replace(p, colocate=(("conv_a", "fc"),))
    assert grouped.colocate and assignment["conv_a"] != assignment["fc"]
    assert priced_assignment(grouped, tiny_graph, assignment).makespan_ms == pytest.approx(want)
    with pytest.raises(KeyError, match="fc"):  # an op the assignment lacks
        priced_assignment(p, tiny_graph, {o: t for o, t in assignment.items() if o != "fc"})
    with pytest.raises(KeyError, match="z"):  # a target the problem lacks
        priced_assignment(p, tiny_graph, {**assignment, "fc": "z"})


def test_memory_caps_are_named_as_pinned_targets_are_and_a_wrong_name_is_refused(tiny_graph):
    """A cap under a name that is no target was dropped without a word (the plan then ran uncapped),
    and a None cap (no cap, as in problem JSON) raised a TypeError."""
    from placer.errors import ProblemError

    n = len(tiny_graph.ops)
    table = dataclasses.replace(_table(tiny_graph, {"a": [1.0] * n, "b": [2.0] * n}),
                                targets=("onnxruntime@cpu:t1", "openvino@cpu:t1"))
    caps = build_problem(tiny_graph, table, memory_cap_bytes={"openvino": 5e6, "onnxruntime@cpu:t1": None})
    assert list(caps.memory_cap_bytes) == [math.inf, 5e6]
    with pytest.raises(ProblemError, match="memory_cap_bytes: unknown target 'onnxruntim'"):
        build_problem(tiny_graph, table, memory_cap_bytes={"onnxruntim": 5e6})
    with pytest.raises(ProblemError, match="'openvino': 'lots' is not a number of bytes"):
        build_problem(tiny_graph, table, memory_cap_bytes={"openvino": "lots"})
    with pytest.raises(ProblemError, match="-1.0 is not a number of bytes >= 0"):
        build_problem(tiny_graph, table, memory_cap_bytes={"openvino": -1})
