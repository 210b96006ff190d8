"""CP-SAT window LNS for latency mode (:mod:`placer.solve.lns`).

A window covering every op is the whole latency model: from any start plan it must reach the
brute-force optimum. Partial windows must keep plans valid (pins, colocation groups reaching
outside the window, memory caps) and never make them worse, and the window model's makespan is
the re-timed makespan of the plan it returns (exact with integer data).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from solve_testlib import problems, random_problem

from placer.errors import ProblemError
from placer.solve import solve
from placer.solve.evaluate import latency_schedule, make_latency_plan
from placer.solve.heuristics import HeuristicError, heft, priority_assign
from placer.solve.instances import random_layered
from placer.solve.lns import LatencyLNS, improve_latency

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}


def _start(problem):
    try:
        a, _, order = heft(problem)
        return a, order
    except HeuristicError:
        a = priority_assign(problem)  # may still break memory caps: callers check
        return a, list(range(problem.n_ops))


@settings(max_examples=50, **SETTINGS)
@given(problems(max_ops=8))
def test_full_window_reaches_the_optimum(problem):
    try:
        opt = solve(problem, "latency", "bruteforce", time_limit=30)
    except ProblemError:
        return  # infeasible
    try:
        a, order = _start(problem)
        make_latency_plan(problem, a, "start", order=order)
    except ProblemError:
        return  # no feasible start plan from the heuristics
    lns = LatencyLNS(problem, a, order, {"num_workers": 1})
    lns.step(-1.0, math.inf, 20.0)
    if problem.n_ops >= 2:
        assert lns.last_status == "OPTIMAL"
    assert lns.makespan == pytest.approx(opt.makespan_ms, abs=1e-6)
    make_latency_plan(problem, lns.assign, "lns", order=lns.order).validate(problem)


@pytest.mark.parametrize("seed", range(6))
def test_windows_keep_plans_valid_and_never_worse(seed):
    rng = np.random.default_rng(seed)
    p = None
    while p is None:
        p = random_problem(rng, 40, 3, p_edge=0.08)
    try:
        a, order = _start(p)
        make_latency_plan(p, a, "start", order=order)
    except ProblemError:
        pytest.skip("no feasible start plan")
    lns = LatencyLNS(p, a, order, {"num_workers": 1}, seed=seed)
    before = lns.makespan
    start = latency_schedule(p, a, order)[0]
    cuts = np.quantile(start, [0.0, 0.3, 0.6, 1.0])
    for t1, t2 in [(-1.0, cuts[1]), (cuts[1], cuts[2]), (cuts[2], math.inf), (cuts[1], math.inf)]:
        old = lns.makespan
        improved = lns.step(float(t1), float(t2), 5.0)
        assert lns.makespan <= old + 1e-9
        assert improved == (lns.makespan < old - 1e-9)
        if lns.last_status in ("OPTIMAL", "FEASIBLE"):
            # integer data, exact resolution: the window model's makespan is never below the plan's
            assert lns.last_objective_ms >= lns.makespan - 1e-6
        plan = make_latency_plan(p, lns.assign, "lns", order=lns.order)
        plan.validate(p)
        assert plan.makespan_ms == pytest.approx(lns.makespan)
    assert lns.makespan <= before + 1e-9


def test_lns_improves_a_wide_layered_dag():
    p = random_layered(400, 4, seed=3)
    a, _, order = heft(p)
    before = float(latency_schedule(p, a, order)[1].max())
    # bounded by work only: 4 windows, each stopped by CP-SAT's deterministic time (interleaved
    # search, 0.3 units per window = dtime_per_s x step_s); no deadline, and a per-window wall limit
    # (step_s seconds) that deterministic time always reaches first
    opts = {"num_workers": 2, "dtime_per_s": 0.3 / 1e6}
    a2, o2, after = improve_latency(p, a, order, math.inf, opts, window_ops=60, step_s=1e6, max_windows=4)
    assert after < before
    plan = make_latency_plan(p, a2, "lns", order=o2)
    plan.validate(p)
    assert plan.makespan_ms == pytest.approx(after)


def test_coarsened_latency_path_reports_a_valid_bound():
    p = random_layered(1200, 4, seed=2)
    plan = solve(p, "latency", "cpsat", time_limit=6)
    plan.validate(p)
    hplan = solve(p, "latency", "heft")
    assert plan.makespan_ms <= hplan.makespan_ms + 1e-9
    assert 0 < plan.stats.best_bound <= plan.makespan_ms
    assert plan.stats.extra["source"].startswith("fine heuristic")
    # by default (lns_skip_coarse_gap = 1) the coarse solve's time goes to the window LNS
    assert plan.stats.extra["coarse_status"] == "SKIPPED"


def test_a_sweep_asked_to_pay_stops_once_it_does_not():
    """``run(stop_at=..., paying=...)``: from ``stop_at`` on, the sweep stops while under ``paying``
    of its windows improved the plan (the solver then gives the time left to the lightened search)."""
    import time

    p = random_layered(120, 4, seed=3)
    a, _, order = heft(p)
    opts = {"num_workers": 1, "dtime_per_s": 0.05 / 1e6}
    past = time.monotonic() - 1.0
    lns = LatencyLNS(p, a, order, opts)
    lns.run(math.inf, window_ops=30, step_s=1e6, max_windows=3, stop_at=past, paying=1.0)
    assert lns.steps == 0  # no window yet: 0 of 0 improved is under any share
    lns.run(math.inf, window_ops=30, step_s=1e6, max_windows=3, stop_at=past, paying=0.0)
    assert lns.steps == 3  # paying nothing: never stopped, the window count bounds it
    more = LatencyLNS(p, a, order, opts)
    more.run(math.inf, window_ops=30, step_s=1e6, max_windows=3, stop_at=math.inf, paying=1.0)
    assert more.steps == 3  # before stop_at: the sweep runs on
