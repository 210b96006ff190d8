"""Golden cases for the shared cost semantics (placer.solve.evaluate / Plan)."""

from __future__ import annotations

import numpy as np
import pytest

from placer.errors import ProblemError
from placer.problem import PlacementProblem, Tensor
from placer.solve.evaluate import (
    latency_schedule,
    make_latency_plan,
    make_pipeline_plan,
    pipeline_eval,
    stage_order,
)

CPU, GPU = 0, 1


def fanout(charge="both", overhead=None) -> PlacementProblem:
    """a (cpu) -> t (1000 B) -> b, c (gpu); b, c -> d (cpu)."""
    return PlacementProblem(
        ops=["a", "b", "c", "d"], targets=["cpu", "gpu"],
        cost_ms=np.array([[1.0, 9.0], [9.0, 2.0], [9.0, 3.0], [1.0, 9.0]]),
        tensors=[Tensor("t", "a", ("b", "c"), 1000), Tensor("u", "b", ("d",), 0), Tensor("v", "c", ("d",), 0)],
        link_latency_ms=[[0.0, 0.5], [0.25, 0.0]], link_ms_per_byte=0.001, link_charge=charge,
        partition_overhead_ms=overhead)


ASSIGN = np.array([CPU, GPU, GPU, CPU])


def test_multi_consumer_tensor_crosses_once_latency():
    p = fanout()
    plan = make_latency_plan(p, ASSIGN, "test")
    plan.validate(p)
    crossings = [(t.tensor, t.src, t.dst) for t in plan.transfers]
    assert crossings == [("t", "cpu", "gpu"), ("u", "gpu", "cpu"), ("v", "gpu", "cpu")]
    # t arrives on gpu at 1 + 0.5 + 1.0 = 2.5; b [2.5, 4.5], c [4.5, 7.5] (one at a time on gpu)
    assert plan.start_ms == {"a": 0.0, "b": 2.5, "c": 4.5, "d": 7.75}
    assert plan.makespan_ms == pytest.approx(8.75)
    assert plan.bottleneck_ms == pytest.approx(5.0)  # gpu busy 2 + 3


@pytest.mark.parametrize("charge, send_cpu, recv_gpu, send_gpu, recv_cpu", [
    ("both", 1.5, 1.5, 0.5, 0.5),
    ("sender", 1.5, 0.0, 0.5, 0.0),
    ("receiver", 0.0, 1.5, 0.0, 0.5),
])
def test_pipeline_charges_once_per_tensor_and_destination(charge, send_cpu, recv_gpu, send_gpu, recv_cpu):
    # pipeline needs a monotone split: a (cpu) -> b, c (gpu) -> d on gpu
    p = fanout(charge)
    assign = np.array([CPU, GPU, GPU, GPU])
    ev = pipeline_eval(p, assign, [CPU, GPU])
    assert ev.send[CPU] == pytest.approx(send_cpu)  # t crosses once although read by b and c
    assert ev.recv[GPU] == pytest.approx(recv_gpu)
    assert ev.compute.tolist() == [1.0, 2.0 + 3.0 + 9.0]
    assert ev.bottleneck == pytest.approx(max(1.0 + send_cpu, 14.0 + recv_gpu))
    assert ev.latency == pytest.approx(15.0 + send_cpu + recv_gpu)
    plan = make_pipeline_plan(p, assign, "test")
    plan.validate(p)
    assert plan.stage_targets == ("cpu", "gpu")
    _ = (send_gpu, recv_cpu)


def test_asymmetric_charge_matrix():
    # cpu -> gpu charged to the receiver only, gpu -> cpu to the sender only
    p = fanout([["both", "receiver"], ["sender", "both"]])
    assign = np.array([CPU, CPU, GPU, GPU])  # t to gpu (c), u: b cpu -> d gpu, v: gpu -> gpu
    ev = pipeline_eval(p, assign, [CPU, GPU])
    assert ev.send.tolist() == [0.0, 0.0]
    assert ev.recv[GPU] == pytest.approx(1.5 + 0.5)  # t (0.5 + 1.0) and u (0.5 + 0)


def test_partition_overhead_is_charged_per_received_tensor():
    p = fanout("receiver", overhead=[0.125, 0.25])
    plan = make_latency_plan(p, ASSIGN, "test")
    plan.validate(p)
    assert plan.start_ms["b"] == pytest.approx(1.0 + 1.5 + 0.25)
    ev = pipeline_eval(p, np.array([CPU, GPU, GPU, GPU]), [CPU, GPU])
    assert ev.recv[GPU] == pytest.approx(1.5 + 0.25)


def test_zero_cost_op_is_instantaneous():
    p = PlacementProblem(ops=["a", "z", "b"], targets=["x"], cost_ms=[[2.0], [0.0], [1.0]],
                         tensors=[Tensor("t", "a", ("b",))])
    # z (cost 0, no inputs) starts at 0 even though a occupies x, and does not delay b
    start, _ = latency_schedule(p, np.array([0, 0, 0]), [0, 1, 2])
    assert start.tolist() == [0.0, 0.0, 2.0]
    make_latency_plan(p, np.array([0, 0, 0]), "t", order=[0, 1, 2]).validate(p)


def test_priority_order_must_be_topological():
    p = fanout()
    with pytest.raises(ProblemError, match="not topological"):
        latency_schedule(p, ASSIGN, [1, 0, 2, 3])


def test_stage_order_detects_cycles():
    p = fanout()
    assert stage_order(p, np.array([CPU, GPU, GPU, GPU])) == [CPU, GPU]
    assert stage_order(p, ASSIGN) is None  # cpu -> gpu -> cpu
    with pytest.raises(ProblemError, match="no monotone stage order"):
        make_pipeline_plan(p, ASSIGN, "t")


def test_stats_priced_another_way_never_bound_above_the_plan():
    # a solver that priced the plan in another summation order (the canonical listing, a DP) hands
    # figures a few ulps off the plan's own: the bound is capped at the plan, the objective is the plan's
    from placer.plan import SolverStats
    from placer.solve.evaluate import make_pipeline_plan

    p = fanout()
    assign = np.zeros(p.n_ops, dtype=int)
    plain = make_pipeline_plan(p, assign, "test")
    off = plain.bottleneck_ms * (1 + 1e-15) + 1e-15
    for stats in ({"status": "OPTIMAL", "objective": off, "best_bound": off, "gap": 0.0},
                  SolverStats(status="OPTIMAL", objective=off, best_bound=off, gap=0.0)):
        plan = make_pipeline_plan(p, assign, "test", stats=stats)
        assert plan.stats.best_bound <= plan.bottleneck_ms == plan.stats.objective
    # a bound above the plan by more than float noise is not hidden
    far = plain.bottleneck_ms + 1.0
    plan = make_pipeline_plan(p, assign, "test", stats={"status": "FEASIBLE", "best_bound": far})
    assert plan.stats.best_bound == far
