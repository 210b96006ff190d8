"""Differential tests: CP-SAT against exact enumeration and the DP on random tiny problems.

Random DAGs of <= 9 ops x 2-3 targets with random integer costs (including unsupported pairs),
random tensor sizes, multi-consumer tensors, model inputs, asymmetric link charging, partition
overheads, colocation groups, pins and memory caps (see ``solve_testlib.random_problem``). All
numbers are integral, so CP-SAT's integer model is exact and values are compared to 1e-6.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from solve_testlib import problems

from placer.errors import ProblemError
from placer.solve import solve
from placer.solve.heuristics import HeuristicError

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}


def _solve_or_none(problem, mode, solver, **kw):
    try:
        plan = solve(problem, mode, solver, time_limit=30, **kw)
    except HeuristicError:
        raise
    except ProblemError as exc:
        if any(x in str(exc) for x in ("too large", "time limit reached", "more than its limit", "max_ops")):
            raise
        return None  # infeasible
    plan.validate(problem)
    return plan


@settings(max_examples=60, **SETTINGS)
@given(problems(max_ops=9))
def test_cpsat_equals_bruteforce_latency(problem):
    _check_latency(problem)


@settings(max_examples=25, **SETTINGS)
@given(problems(min_ops=9, max_ops=9, min_targets=3))
def test_cpsat_equals_bruteforce_latency_9x3(problem):
    _check_latency(problem)


def _check_latency(problem):
    ref = _solve_or_none(problem, "latency", "bruteforce")
    got = _solve_or_none(problem, "latency", "cpsat")
    assert (ref is None) == (got is None)
    if ref is not None:
        assert got.stats.status == "OPTIMAL"
        assert got.makespan_ms == pytest.approx(ref.makespan_ms, abs=1e-6)
        assert got.stats.best_bound == pytest.approx(ref.makespan_ms, abs=1e-6)


@settings(max_examples=80, **SETTINGS)
@given(problems(max_ops=9), st.booleans(), st.integers(0, 3))
def test_cpsat_equals_bruteforce_pipeline(problem, contiguous, k):
    kw = {"contiguous": contiguous, "num_stages": min(k, problem.n_targets) or None}
    ref = _solve_or_none(problem, "pipeline", "bruteforce", **kw)
    got = _solve_or_none(problem, "pipeline", "cpsat", **kw)
    assert (ref is None) == (got is None)
    if ref is not None:
        assert got.stats.status == "OPTIMAL"
        assert got.bottleneck_ms == pytest.approx(ref.bottleneck_ms, abs=1e-6)
        assert got.makespan_ms == pytest.approx(ref.makespan_ms, abs=1e-6)  # latency, lexicographic


@settings(max_examples=60, **SETTINGS)
@given(problems(max_ops=12), st.integers(0, 3))
def test_dp_equals_cpsat_contiguous(problem, k):
    kw = {"num_stages": min(k, problem.n_targets) or None}
    ref = _solve_or_none(problem, "pipeline", "dp", **kw)
    got = _solve_or_none(problem, "pipeline", "cpsat", contiguous=True, **kw)
    assert (ref is None) == (got is None)
    if ref is not None:
        assert ref.options["contiguous"] is True
        assert got.bottleneck_ms == pytest.approx(ref.bottleneck_ms, abs=1e-6)
        assert got.makespan_ms == pytest.approx(ref.makespan_ms, abs=1e-6)


@settings(max_examples=40, **SETTINGS)
@given(problems(max_ops=9), st.sampled_from(["latency", "pipeline"]))
def test_baselines_validate_and_never_beat_the_optimum(problem, mode):
    opt = _solve_or_none(problem, mode, "cpsat")
    names = ["heft", "greedy"] + [f"single:{t}" for t in problem.targets]
    for name in names:
        try:
            plan = solve(problem, mode, name)
        except HeuristicError:
            continue
        plan.validate(problem)
        assert opt is not None, f"{name} found a plan for a problem cpsat calls infeasible"
        assert opt.stats.status == "OPTIMAL"
        if mode == "latency":
            assert plan.makespan_ms >= opt.makespan_ms - 1e-6
        else:
            key = (plan.bottleneck_ms, plan.makespan_ms)
            best = (opt.bottleneck_ms, opt.makespan_ms)
            assert key[0] >= best[0] - 1e-6
            if abs(key[0] - best[0]) <= 1e-6:
                assert key[1] >= best[1] - 1e-6
