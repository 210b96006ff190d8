"""Probe plans: partitions timed as they run between other targets' partitions (issue 15)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from placer.context import prepare
from placer.problem import PlacementProblem, Tensor
from placer.run.numerics import load_inputs
from placer.run.partition_probe import DEFAULT_CHUNKS, measure_probes, probe_assignments, probe_pairs


def _chain(n: int, cost: np.ndarray, **kw) -> PlacementProblem:
    ops = [f"o{i}" for i in range(n)]
    tensors = [Tensor("in", None, ("o0",), 4)] + [
        Tensor(f"t{i}", ops[i], (ops[i + 1],) if i + 1 < n else (), 4) for i in range(n)]
    return PlacementProblem(ops=ops, targets=["a", "b", "c"][:cost.shape[1]], cost_ms=cost, tensors=tensors, **kw)


def test_probe_plans_alternate_equal_work_chunks_and_respect_support_pins_and_groups():
    cost = np.ones((12, 3))
    cost[4, 0] = math.inf  # o4 cannot run on a
    p = _chain(12, cost, pinned={"o0": "c"}, colocate=[("o6", "o7")])
    asg = probe_assignments(p, [("a", "b")], chunks=4)["probe:a|b"]
    # 12 ops of equal work in 4 chunks: o0-o2 a, o3-o5 b, o6-o8 a, o9-o11 b
    want = ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3
    want[0] = "c"  # pinned
    assert [asg[f"o{i}"] for i in range(12)] == want
    cost[7, 0] = math.inf  # the group's first member's target wins; o4 falls back to b whatever its chunk
    cost[4, 1] = math.inf
    p2 = _chain(12, cost, colocate=[("o6", "o8")])
    asg2 = probe_assignments(p2, [("a", "b")], chunks=3)["probe:a|b"]  # o4 in chunk 1 (b): unsupported on both
    assert asg2["o4"] == "c" and asg2["o8"] == asg2["o6"]
    cost3 = np.ones((12, 3))
    cost3[7, 0] = math.inf  # a group whose first member's chunk target (a) cannot run a member: b runs both
    asg3 = probe_assignments(_chain(12, cost3, colocate=[("o6", "o7")]), [("a", "b")], chunks=4)["probe:a|b"]
    assert asg3["o6"] == asg3["o7"] == "b" and asg3["o8"] == "a"
    with pytest.raises(ValueError, match="chunks"):
        probe_assignments(p, [("a", "b")], chunks=1)


def test_default_probe_plans_give_each_target_large_and_small_pieces():
    n = 128
    p = _chain(n, np.ones((n, 2)))
    asg = probe_assignments(p, [("a", "b")])["probe:a|b"]
    runs = [(t, len(list(g))) for t, g in itertools.groupby(asg[f"o{i}"] for i in range(n))]
    assert len(runs) == len(DEFAULT_CHUNKS)
    shares = np.asarray(DEFAULT_CHUNKS) / sum(DEFAULT_CHUNKS)
    assert [size for _, size in runs] == pytest.approx(shares * n, abs=1)
    for target in ("a", "b"):
        sizes = sorted(size for t, size in runs if t == target)
        assert sizes[0] <= 3 and sizes[-1] >= 25  # a small piece (entry cost) and a large one (cut scale)


def test_probe_pairs_leave_out_targets_far_slower_or_running_few_ops():
    cost = np.ones((10, 3))
    cost[:, 2] = 5.0  # c: 5x the fastest single target (50 ms vs 10 ms)
    assert probe_pairs(_chain(10, cost)) == [("a", "b")]
    cost[:, 2] = 1.0
    cost[:6, 1] = math.inf  # b runs 4 of 10 ops
    assert probe_pairs(_chain(10, cost)) == [("a", "c")]
    tiny = np.zeros((10, 3))  # every op priced at 0 (below the call overhead): all probed
    tiny[:, 2] = 0.05
    assert probe_pairs(_chain(10, tiny)) == [("a", "b"), ("a", "c"), ("b", "c")]


@pytest.fixture
def two_target_context(tiny_model, tmp_path):
    return prepare(tiny_model, targets=["onnxruntime:t1", "openvino:t1"], db=tmp_path / "p.db",
                   probe_partitions=False)


def test_measured_probe_rows_follow_the_run_order_and_cover_the_model(two_target_context):
    ctx = two_target_context
    rows = measure_probes(ctx.graph, ctx.problem, load_inputs("seed:0", ctx.graph, 2), chunks=3, rounds=2,
                          per_round=2)
    assert {r["probe"] for r in rows} == {"probe:onnxruntime@cpu:t1|openvino@cpu:t1"}
    assert rows[0]["prev"] is None
    assert all(r["prev"] == q["target"] for q, r in itertools.pairwise(rows))
    assert sorted(o for r in rows for o in r["ops"]) == sorted(op.id for op in ctx.graph.ops)
    # every target the probe plan placed a piece on ran it (the pieces are cut by the profiled costs,
    # which a loaded machine can skew until one op fills the middle piece: then one target runs all)
    planned = probe_assignments(ctx.problem, [("onnxruntime@cpu:t1", "openvino@cpu:t1")], 3)
    assert {r["target"] for r in rows} == set(planned["probe:onnxruntime@cpu:t1|openvino@cpu:t1"].values())
    for r in rows:
        # 2 rounds x 2 requests; a turn the host slowed a core in is left out while half remain
        assert 2 <= r["n"] <= 4 and 0 < r["p10_ms"] <= r["median_ms"] <= r["p90_ms"] < math.inf
        assert r["n_inputs"] >= 1


def test_prepare_stores_probe_rows_once_and_charges_what_they_learned(tiny_model, tmp_path):
    from placer.costing import partition_pricing

    db = tmp_path / "p.db"
    targets = ["onnxruntime:t1", "openvino:t1"]
    ctx = prepare(tiny_model, targets=targets, db=db)
    assert ctx.partition_rows and {r["source"] for r in ctx.partition_rows} == {"probe"}
    keys = sorted(r["key"] for r in ctx.partition_rows)
    pricing = partition_pricing(ctx.problem, ctx.partition_rows)
    assert np.array_equal(np.asarray(ctx.problem.partition_overhead_ms), pricing.entry_ms)
    assert np.array_equal(ctx.problem.cut_scale, pricing.cut_scale)
    assert ctx.problem.provenance["cut_scale"] == dict(zip(ctx.problem.targets, pricing.cut_scale.tolist()))
    assert ctx.problem.provenance["entry_rows"] == len(keys)
    again = prepare(tiny_model, targets=targets, db=db)  # measured again only if flagged busy: same keys
    assert sorted(r["key"] for r in again.partition_rows) == keys
    # probes off: not charged, even from a store that holds probe rows
    none = prepare(tiny_model, targets=targets, db=db, probe_partitions=False)
    assert none.partition_rows == [] and not np.any(np.asarray(none.problem.partition_overhead_ms))
    assert not none.problem.cut_scaled


def test_a_probe_a_target_cannot_run_is_left_out_and_said(tiny_model, tmp_path, monkeypatch):
    from placer.devices.testing import FAULT_ENV, register_test_targets

    register_test_targets()
    monkeypatch.setenv(FAULT_ENV, "Relu")
    ctx = prepare(tiny_model, targets=["onnxruntime:t1", "openvino:t1"], db=tmp_path / "p.db",
                  probe_partitions=False)
    # priced as if test-error ran every op: its probe puts the Relu there, and compiling it fails
    names = list(ctx.problem.targets) + ["test-error"]
    cost = np.concatenate([np.asarray(ctx.problem.cost_ms), np.ones((len(ctx.problem.ops), 1))], axis=1)
    p = PlacementProblem(ops=list(ctx.problem.ops), targets=names, cost_ms=cost, tensors=list(ctx.problem.tensors))
    said = []
    rows = measure_probes(ctx.graph, p, load_inputs("seed:0", ctx.graph, 2), chunks=2, rounds=1, per_round=2,
                          pairs=[("test-error", "onnxruntime@cpu:t1"), ("onnxruntime@cpu:t1", "openvino@cpu:t1")],
                          say=said.append)
    assert [m for m in said if "probe:test-error|onnxruntime@cpu:t1 left out" in m and "Relu" in m], said
    assert rows and {r["probe"] for r in rows} == {"probe:onnxruntime@cpu:t1|openvino@cpu:t1"}


def test_time_between_partitions_is_shared_equally_and_never_negative():
    from placer.run.bench import time_between_partitions

    assert time_between_partitions(10.0, [3.0, 4.0, 1.0]) == pytest.approx(2.0 / 3)
    assert time_between_partitions(5.0, [3.0, 4.0]) == 0.0  # partitions that overlapped
    assert time_between_partitions(None, [1.0]) == 0.0 and time_between_partitions(4.0, []) == 0.0
