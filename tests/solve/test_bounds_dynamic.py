"""The window LP bound, per-target heads / tails and the price-guided dynamic list scheduling.

Property tests against exact enumeration on random tiny problems (``solve_testlib``): the bounds
never exceed the brute-force optimum and the heads / tails hold in every schedule; the dynamic
heuristic's plans validate and are never better than the optimum. Plus small hand-made instances
where the window bound must be strictly stronger than the plain load / critical-path bounds, and a
larger random layered DAG where the dynamic search must beat HEFT.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from solve_testlib import problems

from placer.errors import ProblemError
from placer.problem import PlacementProblem, Tensor
from placer.solve import solve
from placer.solve.bounds import latency_bound, target_heads_tails, window_load_bound
from placer.solve.evaluate import Costs, assignment_indices, latency_schedule, make_latency_plan
from placer.solve.heuristics import DynamicList, DynamicListSearch, HeuristicError, dynamic_list, heft
from placer.solve.instances import random_layered

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}


def _optimum(problem):
    try:
        return solve(problem, "latency", "bruteforce", time_limit=30)
    except ProblemError as exc:
        if "no feasible" in str(exc):
            return None
        raise


@settings(max_examples=80, **SETTINGS)
@given(problems(max_ops=9))
def test_window_bound_never_exceeds_the_optimum(problem):
    opt = _optimum(problem)
    if opt is None:
        return
    c = Costs.of(problem)
    base = latency_bound(problem, c)
    w = window_load_bound(problem, c, base)
    assert base - 1e-9 <= w <= opt.makespan_ms + 1e-6


@settings(max_examples=60, **SETTINGS)
@given(problems(max_ops=9, min_targets=3))
def test_window_bound_rounded_costs_never_exceed_the_optimum(problem):
    # what the CP-SAT model uses: integer units of a (here exact) resolution
    opt = _optimum(problem)
    if opt is None:
        return
    c = Costs.rounded(problem, 0.5)
    base = latency_bound(problem, c)
    assert window_load_bound(problem, c, base) * 0.5 <= opt.makespan_ms + 1e-6


@settings(max_examples=60, **SETTINGS)
@given(problems(max_ops=9))
def test_target_heads_and_tails_hold_in_every_schedule(problem):
    c = Costs.of(problem)
    head, after = target_heads_tails(problem, c)
    plans = []
    opt = _optimum(problem)
    if opt is not None:
        plans.append(opt)
    try:
        a, _, order = heft(problem)
        plans.append(make_latency_plan(problem, a, "heft", order=order))
    except HeuristicError:
        pass
    for plan in plans:
        a = assignment_indices(problem, plan.assignment)
        for i, op in enumerate(problem.ops):
            d = a[i]
            assert np.isfinite(head[i, d]) and np.isfinite(after[i, d])
            assert plan.start_ms[op] >= head[i, d] - 1e-9
            assert plan.makespan_ms - plan.end_ms[op] >= after[i, d] - 1e-9
    # and the per-target values are at least the classic ones on some allowed target
    assert (np.where(problem.allowed, head, np.inf).min(axis=1) >= -1e-12).all()


@settings(max_examples=60, **SETTINGS)
@given(problems(max_ops=9))
def test_dynamic_plans_validate_and_never_beat_the_optimum(problem):
    opt = _optimum(problem)
    try:
        assign, order = dynamic_list(problem, max_passes=8)
    except HeuristicError:
        return  # memory caps can defeat a greedy placement
    plan = make_latency_plan(problem, assign, "dynamic", order=order)
    plan.validate(problem)
    assert opt is not None
    assert plan.makespan_ms >= opt.makespan_ms - 1e-6


def _fan(width: int, targets: int, cost: float = 3.0) -> PlacementProblem:
    """One source op then ``width`` independent ops reading it, identical targets, free copies."""
    ops = ["src"] + [f"b{i}" for i in range(width)]
    return PlacementProblem(ops=ops, targets=[f"t{j}" for j in range(targets)],
                            cost_ms=np.full((len(ops), targets), cost),
                            tensors=[Tensor("x", "src", tuple(ops[1:]))])


def test_window_bound_sees_the_ramp_up():
    # 3 targets, a source of 3 ms then 6 ops of 3 ms: load 7, critical path 6, optimum 9 (two
    # targets idle while the source runs)
    p = _fan(6, 3)
    c = Costs.of(p)
    base = latency_bound(p, c, comm=False)
    assert base == pytest.approx(7.0)
    # the communication-aware tails see it too: the six successors share the three targets
    assert latency_bound(p, c) == pytest.approx(9.0)
    w = window_load_bound(p, c, base)
    assert 8.5 < w <= 9.0 + 1e-9
    plan = solve(p, "latency", "cpsat", time_limit=10)
    assert plan.makespan_ms == pytest.approx(9.0)
    assert plan.stats.status == "OPTIMAL"


def test_window_bound_sees_the_ramp_down():
    # mirrored: 6 independent ops of 3 ms, then one sink reading all of them
    ops = [f"a{i}" for i in range(6)] + ["sink"]
    p = PlacementProblem(ops=ops, targets=["t0", "t1", "t2"], cost_ms=np.full((7, 3), 3.0),
                         tensors=[Tensor(f"x{i}", f"a{i}", ("sink",)) for i in range(6)])
    c = Costs.of(p)
    base = latency_bound(p, c)
    assert 8.5 < window_load_bound(p, c, base) <= 9.0 + 1e-9


def test_window_bound_respects_its_inputs():
    p = _fan(6, 3)
    c = Costs.of(p)
    assert window_load_bound(p, c, 0.0) == 0.0  # no proven bound to size the windows: nothing
    assert window_load_bound(p, c, 7.0, max_pairs=3) == 7.0  # too big: the input bound back


def test_dynamic_list_respects_colocation_pins_and_memory():
    rng = np.random.default_rng(5)
    n, t = 12, 3
    ops = [f"o{i}" for i in range(n)]
    cost = rng.integers(1, 6, size=(n, t)).astype(float)
    tensors = [Tensor(f"x{i}", ops[i], (ops[i + 1], ops[min(i + 3, n - 1)]) if i + 3 < n else (ops[i + 1],))
               for i in range(n - 1)]
    p = PlacementProblem(ops=ops, targets=["a", "b", "c"], cost_ms=cost, tensors=tensors,
                         link_latency_ms=0.5, colocate=[["o1", "o7"]], pinned={"o4": "c"},
                         weight_bytes=np.ones(n), memory_cap_bytes=np.array([4.0, np.inf, 5.0]))
    for lam in (np.ones(t) / t, np.array([0.8, 0.1, 0.1]), np.array([0.05, 0.05, 0.9])):
        assign, start, end = DynamicList(p).schedule(lam)
        plan = make_latency_plan(p, assign, "dynamic", order=sorted(range(n), key=lambda i: (start[i], i)))
        plan.validate(p)
        assert plan.assignment["o1"] == plan.assignment["o7"]
        assert plan.assignment["o4"] == "c"
        # the pass's own times are a feasible schedule: re-timing never makes it later
        assert plan.makespan_ms <= float(end.max()) + 1e-9


def test_dynamic_list_zero_cost_ops_and_memory_failure():
    ops = ["a", "free", "b"]
    p = PlacementProblem(ops=ops, targets=["x", "y"], cost_ms=np.array([[1.0, 2.0], [0.0, 0.0], [2.0, 1.0]]),
                         tensors=[Tensor("t0", "a", ("free",)), Tensor("t1", "free", ("b",))],
                         link_latency_ms=1.0)
    assign, order = dynamic_list(p)
    make_latency_plan(p, assign, "dynamic", order=order).validate(p)
    tight = PlacementProblem(ops=ops, targets=["x", "y"], cost_ms=np.ones((3, 2)),
                             tensors=[Tensor("t0", "a", ("free",)), Tensor("t1", "free", ("b",))],
                             weight_bytes=np.array([2.0, 2.0, 2.0]), memory_cap_bytes=np.array([3.0, 3.0]))
    with pytest.raises(HeuristicError):
        dynamic_list(tight)


def test_dynamic_search_budgets_and_layered_dag():
    p = random_layered(800, 4, seed=1)  # wide enough for load balance to dominate
    s = DynamicListSearch(p, max_passes=10)
    s.run(max_passes=3)
    assert s.passes == 3
    s.run(max_dtime=0.0)  # budget already spent: no pass
    assert s.passes == 3
    s.run()
    assert s.passes == 10  # the constructor's cap
    makespan, assign, order = s.best
    plan = make_latency_plan(p, assign, "dynamic", order=order)
    plan.validate(p)
    assert plan.makespan_ms == pytest.approx(makespan)
    a, _, o = heft(p)
    assert makespan < float(latency_schedule(p, a, o)[1].max())
    c = Costs.of(p)
    assert window_load_bound(p, c, latency_bound(p, c)) <= makespan
