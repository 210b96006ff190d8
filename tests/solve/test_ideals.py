"""The ``ideals`` solver (DP over the downsets of the unit DAG) against brute force, its pricing
against the evaluator, its work limit, and its use as CP-SAT's warm start.

Work is bounded by counts (``max_work``, hypothesis example counts), never by the wall clock.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from solve_testlib import permuted, problems

from placer.errors import ProblemError
from placer.problem import PlacementProblem
from placer.solve import solve
from placer.solve.bruteforce import exact_pipeline
from placer.solve.evaluate import pipeline_eval
from placer.solve.ideals import ideals_search, stage_prices
from placer.solve.instances import training_graph

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}


def _separable(p: PlacementProblem, lat: float, charge: str, broadcast: bool) -> PlacementProblem:
    """``p`` with uniform links and entry costs: prices the DP computes exactly (with broadcast, or
    when senders pay nothing)."""
    if not broadcast and charge != "receiver":
        charge = "receiver"
    return dataclasses.replace(p, link_latency_ms=lat, link_ms_per_byte=0.001, link_charge=charge,
                               partition_overhead_ms=1.0, link_broadcast=broadcast)


def _brute(p: PlacementProblem, k: int) -> tuple[float, float] | None:
    try:
        b, lat, _ = exact_pipeline(p, k, contiguous=False)
    except ProblemError:
        return None
    return b, lat


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


@settings(max_examples=80, **SETTINGS)
@given(problems(max_ops=7, min_targets=1, max_targets=3), st.floats(0, 3),
       st.sampled_from(["receiver", "both", "sender"]), st.booleans(), st.integers(1, 3))
def test_equals_bruteforce_when_prices_are_separable(p, lat, charge, broadcast, k):
    p = _separable(p, lat, charge, broadcast)
    k = min(k, p.n_targets)
    assert stage_prices(p)[2]
    ref = _brute(p, k)
    if ref is None:
        with pytest.raises(ProblemError):
            solve(p, "pipeline", "ideals", num_stages=k)
        return
    plan = solve(p, "pipeline", "ideals", num_stages=k)
    plan.validate(p)
    assert _close(plan.bottleneck_ms, ref[0]) and _close(plan.makespan_ms, ref[1])
    assert plan.stats.status == "OPTIMAL"
    assert plan.stats.best_bound <= plan.bottleneck_ms
    # the DP's own objective is the evaluator's on its plan
    assert _close(plan.stats.extra["dp_bottleneck"], plan.bottleneck_ms)
    assert _close(plan.stats.extra["dp_latency"], plan.makespan_ms)


@settings(max_examples=80, **SETTINGS)
@given(problems(max_ops=7, max_targets=3), st.booleans())
def test_any_pricing_bounds_the_optimum(p, broadcast):
    """Asymmetric links and charges: the DP's prices are optimistic, its optimum a lower bound with
    communication; the plan it returns is valid and evaluated exactly."""
    p = dataclasses.replace(p, link_broadcast=broadcast)
    ref = _brute(p, p.n_targets)
    if ref is None:
        return
    plan = solve(p, "pipeline", "ideals")
    plan.validate(p)
    r = ideals_search(p.canonical(), p.n_targets)
    assert r.complete and r.value <= ref[0] + 1e-9 * max(1.0, ref[0])
    tol = 1e-9 * max(1.0, ref[0])
    assert plan.stats.best_bound <= ref[0] + tol <= plan.bottleneck_ms + 2 * tol
    if r.exact_pricing or plan.stats.status == "OPTIMAL":
        assert _close(plan.bottleneck_ms, ref[0]) and _close(plan.makespan_ms, ref[1])


@settings(max_examples=30, **SETTINGS)
@given(problems(min_ops=3, max_ops=7, max_targets=3), st.integers(1, 400))
def test_work_limit_returns_a_valid_plan_and_bound(p, max_work):
    ref = _brute(p, p.n_targets)
    if ref is None:
        return
    try:
        plan = solve(p, "pipeline", "ideals", max_work=max_work)
    except ProblemError as exc:  # stopped, and no heuristic found a pipeline either
        assert "no heuristic" in str(exc)
        return
    plan.validate(p)
    tol = 1e-9 * max(1.0, ref[0])
    assert plan.stats.best_bound <= ref[0] + tol <= plan.bottleneck_ms + 2 * tol
    again = solve(p, "pipeline", "ideals", max_work=max_work)
    assert again.assignment == plan.assignment and again.stats.status == plan.stats.status


@settings(max_examples=25, **SETTINGS)
@given(problems(max_ops=8, max_targets=3), st.booleans(), st.integers(0, 2**32 - 1))
def test_listing_order_does_not_matter(p, broadcast, seed):
    p = dataclasses.replace(p, link_broadcast=broadcast)
    try:
        a = solve(p, "pipeline", "ideals")
    except ProblemError:
        return
    b = solve(permuted(p, np.random.default_rng(seed)), "pipeline", "ideals")
    assert a.assignment == b.assignment and a.stage_targets == b.stage_targets


def test_work_limit_stops_the_first_pass_deterministically():
    p = training_graph("transformer", 120, 3, seed=1)
    full = ideals_search(p.canonical(), 4)
    assert full.complete and full.latency_complete and full.exact_pricing
    cut = ideals_search(p.canonical(), 4, max_work=full.work // 4)
    assert not cut.complete and cut.assign is None and cut.work >= full.work // 4
    plan = solve(p, "pipeline", "ideals", max_work=full.work // 4)
    plan.validate(p)
    assert plan.stats.status == "FEASIBLE" and plan.stats.best_bound <= full.value
    assert plan.bottleneck_ms >= full.value - 1e-9


def test_a_passed_deadline_stops_it():
    import time

    p = training_graph("cnn", 100, 3, seed=0)
    r = ideals_search(p.canonical(), 4, deadline=time.monotonic() - 1.0)
    assert not r.complete and r.assign is None


def test_max_ideals_is_a_clear_error():
    p = training_graph("cnn", 100, 3, seed=0)
    with pytest.raises(ProblemError, match="more than 10 ideals"):
        solve(p, "pipeline", "ideals", max_ideals=10)


def test_refuses_contiguous_and_shared_cores():
    p = training_graph("cnn", 60, 3, seed=0)
    with pytest.raises(ProblemError, match="contiguous"):
        solve(p, "pipeline", "ideals", contiguous=True)
    shared = dataclasses.replace(p, target_cores={"acc0": [0], "acc1": [0]})
    with pytest.raises(ProblemError, match="sharing cores"):
        solve(shared, "pipeline", "ideals")


def test_training_graph_generator():
    for kind in ("transformer", "cnn"):
        p = training_graph(kind, 300, 4, seed=2)
        assert 250 <= p.n_ops <= 300 and p.n_targets == 5
        assert len(p.colocate) == p.n_ops // 2 and len(p.pipeline_units) == p.n_ops // 2
        assert p.link_broadcast and stage_prices(p)[2]  # the CPU pays no communication, links uniform
        assert np.isfinite(p.memory_cap_bytes[:4]).all() and not np.isfinite(p.memory_cap_bytes[4])


def test_cpsat_warm_start_and_bound():
    p = training_graph("transformer", 140, 3, seed=3)
    dp = solve(p, "pipeline", "ideals")
    assert dp.stats.status == "OPTIMAL"
    cp = solve(p, "pipeline", "cpsat", time_limit=30)
    cp.validate(p)
    assert cp.stats.extra["source"] == "ideals" and cp.stats.status == "OPTIMAL"
    assert _close(cp.bottleneck_ms, dp.bottleneck_ms)
    # without its prices being exact the DP still hints and bounds CP-SAT
    lat = np.full((4, 4), 0.02)
    lat[0, 1] = 0.5  # one slow link: a receiver's price depends on its sender
    lopsided = dataclasses.replace(p, link_latency_ms=lat)
    r = ideals_search(lopsided.canonical(), 4)
    assert r.complete and not r.exact_pricing
    plan = solve(lopsided, "pipeline", "cpsat", time_limit=30, num_workers=1, dtime_per_s=0.02)
    plan.validate(lopsided)
    tol = 1e-9 * plan.bottleneck_ms  # the plan is re-priced on the problem as listed (float order)
    assert r.value - 1e-6 <= plan.stats.best_bound <= plan.bottleneck_ms + tol
    assert plan.stats.extra["lower_bound_ms"] >= r.value - 1e-6


# ---------------------------------------------------------------------- broadcast links
def test_broadcast_charges_the_sender_once():
    from placer.problem import Tensor

    p = PlacementProblem(ops=["a", "b", "c"], targets=["x", "y", "z"], cost_ms=np.ones((3, 3)),
                         tensors=[Tensor("t", "a", ("b", "c"), 1000)],
                         link_latency_ms=[[0, 2, 3], [2, 0, 2], [3, 2, 0]],
                         link_charge="both", link_broadcast=True)
    ev = pipeline_eval(p, np.array([0, 1, 2]), [0, 1, 2])
    assert ev.send[0] == 3.0 and ev.recv[1] == 2.0 and ev.recv[2] == 3.0  # the slowest destination, once
    off = pipeline_eval(dataclasses.replace(p, link_broadcast=False), np.array([0, 1, 2]), [0, 1, 2])
    assert off.send[0] == 5.0
    again = PlacementProblem.from_json(p.to_json())
    assert again.link_broadcast and again == p
    assert "broadcast" not in dataclasses.replace(p, link_broadcast=False).to_json()["links"]
    with pytest.raises(ProblemError, match="broadcast"):
        PlacementProblem.from_json({**p.to_json(), "links": {"broadcast": "yes"}})
    with pytest.raises(ProblemError, match="broadcast"):
        solve(p, "pipeline", "dp")


@settings(max_examples=15, **SETTINGS)
@given(problems(max_ops=6, max_targets=3))
def test_cpsat_honours_broadcast(p):
    p = dataclasses.replace(p, link_broadcast=True)
    ref = _brute(p, p.n_targets)
    if ref is None:
        return
    plan = solve(p, "pipeline", "cpsat", time_limit=30, num_workers=1, dtime_per_s=0.05, ideals=False)
    plan.validate(p)
    assert _close(plan.bottleneck_ms, ref[0])
