"""Targets sharing CPU cores (``PlacementProblem.target_cores``): every solver, the evaluator and
the bounds against brute force, on random tiny problems, plus small explicit examples.

Random problems: <= 7 ops x 2-4 targets from ``solve_testlib.random_problem`` (integer costs,
link charges, overheads, groups, pins, memory caps), each target private or on a random set of
cores among {0, 1, 2}, so draws mix shared and disjoint cores. Conflicts are re-derived here from
the raw core lists (not from ``resource_sets``), as an independent check of the canonicalization.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from solve_testlib import random_problem

from placer.errors import PlanError, ProblemError
from placer.problem import PlacementProblem, Tensor
from placer.solve import solve
from placer.solve.bound_utils import unit_costs
from placer.solve.bounds import (
    critical_path_bound,
    dual_load_bound,
    latency_bound,
    load_bound,
    pipeline_bound,
    window_load_bound,
)
from placer.solve.dp import dp_contiguous
from placer.solve.evaluate import Costs, latency_schedule, make_latency_plan, pipeline_eval
from placer.solve.heuristics import HeuristicError, dynamic_list, heft, lp_list, schedule_fixed
from placer.solve.lns import LatencyLNS

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}


@st.composite
def shared_problems(draw, max_ops: int = 7, min_targets: int = 2, max_targets: int = 4) -> PlacementProblem:
    seed = draw(st.integers(0, 2**32 - 1))
    n = draw(st.sampled_from(range(1, max_ops + 1)))
    t = draw(st.sampled_from(range(min_targets, max_targets + 1)))
    n_cores = draw(st.sampled_from([2, 3]))  # few cores: most draws share one, some keep them apart
    core_sets = st.frozensets(st.integers(0, n_cores - 1), min_size=1, max_size=2)
    cores = draw(st.lists(st.one_of(st.none(), core_sets, core_sets), min_size=t, max_size=t))
    p = random_problem(np.random.default_rng(seed), n, t)
    assume(p is not None)
    tc = {p.targets[d]: sorted(c) for d, c in enumerate(cores) if c is not None}
    return dataclasses.replace(p, target_cores=tc)


def raw_conflict(p: PlacementProblem, a: int, b: int) -> bool:
    """Do targets a and b conflict, straight from the problem's core lists."""
    if a == b:
        return True
    ca, cb = p.target_cores.get(p.targets[a]), p.target_cores.get(p.targets[b])
    return ca is not None and cb is not None and bool(set(ca) & set(cb))


def assert_no_conflicting_overlap(p: PlacementProblem, assign, start, end, tol: float = 1e-9) -> None:
    """No two ops of positive duration on conflicting targets overlap in time."""
    for u, v in itertools.combinations(range(p.n_ops), 2):
        if end[u] <= start[u] or end[v] <= start[v]:
            continue  # instantaneous ops occupy nothing
        if raw_conflict(p, int(assign[u]), int(assign[v])):
            assert end[u] <= start[v] + tol or end[v] <= start[u] + tol, (
                f"{p.ops[u]} on {p.targets[assign[u]]} [{start[u]}, {end[u]}) overlaps "
                f"{p.ops[v]} on {p.targets[assign[v]]} [{start[v]}, {end[v]})")


def check_latency_plan(p: PlacementProblem, plan) -> None:
    plan.validate(p)
    assign = np.array([p.target_index[plan.assignment[o]] for o in p.ops])
    start = np.array([plan.start_ms[o] for o in p.ops])
    end = np.array([plan.end_ms[o] for o in p.ops])
    assert_no_conflicting_overlap(p, assign, start, end)


def raw_pipeline_bottleneck(p: PlacementProblem, plan) -> float:
    """Largest total stage time on one core (private targets: their own stage time)."""
    totals = {s.target: s.total_ms for s in plan.stages}
    per_core: dict[object, float] = {}
    for tgt, total in totals.items():
        for core in p.target_cores.get(tgt) or [("private", tgt)]:
            per_core[core] = per_core.get(core, 0.0) + total
    return max(per_core.values())


def _solve(p, mode, solver, **kw):
    try:
        plan = solve(p, mode, solver, time_limit=30, **kw)
    except HeuristicError:
        return None  # a heuristic defeated by memory caps
    except ProblemError as exc:
        if any(x in str(exc) for x in ("too large", "time limit reached", "more than its limit", "max_ops")):
            raise
        return None  # infeasible
    return plan


# ---------------------------------------------------------------------- latency mode
@settings(max_examples=50, **SETTINGS)
@given(shared_problems())
def test_latency_solvers_against_bruteforce(p):
    ref = _solve(p, "latency", "bruteforce")
    got = _solve(p, "latency", "cpsat")
    assert (ref is None) == (got is None)
    if ref is None:
        return
    opt = ref.makespan_ms
    check_latency_plan(p, ref)
    check_latency_plan(p, got)
    assert got.stats.status == "OPTIMAL"
    assert got.makespan_ms == pytest.approx(opt, abs=1e-6)
    assert got.stats.best_bound <= opt + 1e-6

    # heuristics (registered solvers and the building blocks) never beat the optimum
    for name in ["heft", "greedy"] + [f"single:{d}" for d in p.targets]:
        plan = _solve(p, "latency", name)
        if plan is not None:
            check_latency_plan(p, plan)
            assert plan.makespan_ms >= opt - 1e-6, name
    c = Costs.of(p)
    ref_assign = np.array([p.target_index[ref.assignment[o]] for o in p.ops])
    builders = {
        "heft": lambda: heft(p)[::2],
        "lp-list": lambda: lp_list(p),
        "dynamic": lambda: dynamic_list(p, max_passes=6),
        "schedule_fixed(opt)": lambda: (ref_assign, schedule_fixed(p, ref_assign)[1]),
    }
    for name, build in builders.items():
        try:
            assign, order = build()
        except HeuristicError:
            continue
        start, end = latency_schedule(p, assign, order, c)
        assert_no_conflicting_overlap(p, assign, start, end)
        assert float(end.max()) >= opt - 1e-6, name
        check_latency_plan(p, make_latency_plan(p, assign, name, order=order))

    # bounds stay below the optimum
    lb = latency_bound(p)
    assert critical_path_bound(p, c) <= opt + 1e-6
    assert load_bound(p, c) <= opt + 1e-6
    assert load_bound(p, c, lp_max_size=0) <= opt + 1e-6  # the Lagrangian path
    assert dual_load_bound(unit_costs(p, c), resources=p.resource_sets) <= opt + 1e-6
    assert lb <= opt + 1e-6
    assert window_load_bound(p, c, lb) <= opt + 1e-6

    # a window LNS over the whole plan is the exact model: never worse than the optimum, and
    # equal to it when CP-SAT proves the window optimal
    try:
        heft_assign, _, heft_order = heft(p)
    except HeuristicError:
        return
    if p.n_ops >= 2:
        lns = LatencyLNS(p, heft_assign, heft_order, {"num_workers": 1})
        lns.step(-1.0, np.inf, 5.0)
        start, end = latency_schedule(p, lns.assign, lns.order, c)
        assert_no_conflicting_overlap(p, lns.assign, start, end)
        assert lns.makespan >= opt - 1e-6
        if lns.last_status == "OPTIMAL":
            assert lns.makespan == pytest.approx(opt, abs=1e-6)


# ---------------------------------------------------------------------- pipeline mode
@settings(max_examples=50, **SETTINGS)
@given(shared_problems(), st.booleans(), st.integers(0, 4))
def test_pipeline_solvers_against_bruteforce(p, contiguous, k):
    kw = {"contiguous": contiguous, "num_stages": min(k, p.n_targets) or None}
    ref = _solve(p, "pipeline", "bruteforce", **kw)
    got = _solve(p, "pipeline", "cpsat", **kw)
    assert (ref is None) == (got is None)
    if ref is None:
        return
    for plan in (ref, got):
        plan.validate(p)
        assert plan.bottleneck_ms == pytest.approx(raw_pipeline_bottleneck(p, plan), abs=1e-9)
    assert got.stats.status == "OPTIMAL"
    assert got.bottleneck_ms == pytest.approx(ref.bottleneck_ms, abs=1e-6)
    assert got.makespan_ms == pytest.approx(ref.makespan_ms, abs=1e-6)  # latency, lexicographic
    opt = ref.bottleneck_ms
    for name in ["heft", "greedy"] + [f"single:{d}" for d in p.targets]:
        plan = _solve(p, "pipeline", name, **kw)
        if plan is not None:
            plan.validate(p)
            assert plan.bottleneck_ms == pytest.approx(raw_pipeline_bottleneck(p, plan), abs=1e-9)
            assert plan.bottleneck_ms >= opt - 1e-6, name
    kk = kw["num_stages"] or p.n_targets
    c = Costs.of(p)
    assert pipeline_bound(p, num_stages=kk) <= opt + 1e-6
    assert load_bound(p, c, kk, lp_max_size=0) <= opt + 1e-6
    if contiguous:  # the DP searches exactly the contiguous space
        dp = _solve(p, "pipeline", "dp", **kw)
        assert dp is not None
        dp.validate(p)
        assert dp.bottleneck_ms == pytest.approx(opt, abs=1e-6)
        assert dp.makespan_ms == pytest.approx(ref.makespan_ms, abs=1e-6)


# ---------------------------------------------------------------------- explicit examples
def two_branches(cores: dict | None) -> PlacementProblem:
    """Two independent chains a1 -> a2 and b1 -> b2 (2 + 3 ms each on either target)."""
    return PlacementProblem(
        ops=["a1", "a2", "b1", "b2"], targets=["a@cpu0", "b@cpu1"],
        cost_ms=np.array([[2.0, 2.0], [3.0, 3.0], [2.0, 2.0], [3.0, 3.0]]),
        tensors=[Tensor("ta", "a1", ("a2",), 100), Tensor("tb", "b1", ("b2",), 100)],
        link_latency_ms=1.0, target_cores=cores)


@pytest.mark.parametrize("solver", ["cpsat", "bruteforce", "heft"])
def test_disjoint_cores_run_branches_concurrently(solver):
    p = two_branches({"a@cpu0": [0], "b@cpu1": [1]})
    assert not p.shares_resources and p.resource_sets == ((0,), (1,))
    plan = solve(p, "latency", solver, time_limit=10)
    check_latency_plan(p, plan)
    assert plan.makespan_ms == pytest.approx(5.0)  # one branch per core, side by side


@pytest.mark.parametrize("solver", ["cpsat", "bruteforce", "heft"])
@pytest.mark.parametrize("cores", [{"a@cpu0": [0], "b@cpu1": [0]}, {"a@cpu0": [0, 1], "b@cpu1": [0]}])
def test_targets_sharing_a_core_serialize(solver, cores):
    p = two_branches(cores)
    assert p.shares_resources and p.conflicts == ((0, 1), (0, 1))
    plan = solve(p, "latency", solver, time_limit=10)
    check_latency_plan(p, plan)
    assert plan.makespan_ms == pytest.approx(10.0)  # sum of the four ops


def test_evaluator_serializes_a_fixed_split_on_shared_cores():
    assign = np.array([0, 0, 1, 1])  # branch a on a@cpu0, branch b on b@cpu1
    free = two_branches({"a@cpu0": [0], "b@cpu1": [1]})
    shared = two_branches({"a@cpu0": [0, 1], "b@cpu1": [1]})
    assert latency_schedule(free, assign)[1].max() == pytest.approx(5.0)
    start, end = latency_schedule(shared, assign)
    assert end.max() == pytest.approx(10.0)
    assert_no_conflicting_overlap(shared, assign, start, end)
    # latency bottleneck: the shared core carries all 10 ms
    assert make_latency_plan(shared, assign, "x").bottleneck_ms == pytest.approx(10.0)
    assert make_latency_plan(free, assign, "x").bottleneck_ms == pytest.approx(5.0)
    # pipeline: two stages that share a core add up on it
    ev_free = pipeline_eval(free, assign, [0, 1])
    ev_shared = pipeline_eval(shared, assign, [0, 1])
    assert ev_free.bottleneck == pytest.approx(5.0)
    assert ev_shared.bottleneck == pytest.approx(10.0)
    assert ev_shared.latency == ev_free.latency


def test_validate_rejects_overlap_on_a_shared_core():
    free = two_branches(None)
    plan = solve(free, "latency", "cpsat", time_limit=10)
    assert plan.makespan_ms == pytest.approx(5.0)
    shared = two_branches({"a@cpu0": [3], "b@cpu1": [3]})
    with pytest.raises(PlanError, match="share a core"):
        plan.validate(shared)


def test_pipeline_dp_and_cpsat_with_shared_cores():
    # a chain: x is fast for the first half, y for the second; sharing a core makes splitting useless
    ops = [f"o{i}" for i in range(4)]
    cost = np.array([[1.0, 4.0], [1.0, 4.0], [4.0, 1.0], [4.0, 1.0]])
    tensors = [Tensor(f"t{i}", ops[i], (ops[i + 1],)) for i in range(3)]
    for cores, want in ((None, 2.0), ({"x": [0], "y": [0]}, 4.0)):
        p = PlacementProblem(ops=ops, targets=["x", "y"], cost_ms=cost, tensors=tensors, target_cores=cores)
        for solver in ("dp", "cpsat", "bruteforce"):
            plan = solve(p, "pipeline", solver, time_limit=10)
            plan.validate(p)
            assert plan.bottleneck_ms == pytest.approx(want), (cores, solver)
        assert dp_contiguous(p, 2)[0] == pytest.approx(want)


# ---------------------------------------------------------------------- the field itself
def test_default_is_private_and_json_round_trip(tmp_path):
    base = two_branches(None)
    assert base.target_cores == {} and base.resource_sets == ((0,), (1,)) and not base.shares_resources
    assert "target_cores" not in base.to_json()  # canonical JSON of existing problems unchanged
    p = PlacementProblem(ops=["a"], targets=["ort@cpu:t2", "ov@cpu:t2", "ort@cpu0:t1", "ov@cpu1:t1", "gpu"],
                         cost_ms=np.ones((1, 5)),
                         target_cores={"ort@cpu:t2": (1, 0), "ov@cpu:t2": [0, 1, 1], "ort@cpu0:t1": [0],
                                       "ov@cpu1:t1": [1], "gpu": None})
    assert p.target_cores == {"ort@cpu:t2": (0, 1), "ov@cpu:t2": (0, 1), "ort@cpu0:t1": (0,),
                              "ov@cpu1:t1": (1,)}
    assert p.to_json()["target_cores"] == {"ort@cpu:t2": [0, 1], "ov@cpu:t2": [0, 1], "ort@cpu0:t1": [0],
                                           "ov@cpu1:t1": [1]}
    assert p.conflicts == ((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2), (0, 1, 3), (4,))
    assert p.shares_resources and p.n_resources == 3  # core 0, core 1, the private gpu
    assert PlacementProblem.from_json(p.to_json()) == p
    path = tmp_path / "p.json"
    p.save(path)
    back = PlacementProblem.from_json(str(path))
    assert back == p and back.resource_sets == p.resource_sets
    assert dataclasses.replace(p, provenance={"x": 1}).target_cores == p.target_cores
    assert PlacementProblem.from_json({**p.to_json(), "target_cores": {"gpu": None}}).target_cores == {}


@pytest.mark.parametrize("cores, message", [
    ({"nope": [0]}, "unknown target 'nope'"),
    ({"x": [-1]}, "core id -1 is negative"),
    ({"x": [0.5]}, "core id 0.5 is not an integer"),
    ({"x": ["0"]}, "is not an integer"),
    ({"x": [True]}, "is not an integer"),
    ({"x": []}, "empty list of cores"),
    ({"x": 0}, "expected a list of core ids"),
    ({"x": "01"}, "expected a list of core ids"),
    ([0, 1], "expected a mapping"),
])
def test_target_cores_errors(cores, message):
    with pytest.raises(ProblemError, match=message):
        PlacementProblem(ops=["a"], targets=["x", "y"], cost_ms=np.ones((1, 2)), target_cores=cores)


def test_target_cores_json_errors():
    d = two_branches(None).to_json()
    with pytest.raises(ProblemError, match=r"target_cores = \[\[0\]\] is not an object or null"):
        PlacementProblem.from_json({**d, "target_cores": [[0]]})
    with pytest.raises(ProblemError, match="unknown target 'z'"):
        PlacementProblem.from_json({**d, "target_cores": {"z": [0]}})
