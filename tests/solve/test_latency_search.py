"""Critical-path local search for latency mode (:mod:`placer.solve.latency_search`).

Against exact enumeration on random tiny problems (pins, colocation, memory caps, shared link
charges): the plan it returns is valid, never worse than the plan it started from, never better
than the brute-force optimum, and its reported makespan is the evaluator's. Its incremental
schedules equal the evaluator's; on a random layered DAG it improves HEFT within a fixed,
deterministic budget (ops re-timed), and the same budget gives the same plan; a swap of targets
gets out of a local optimum of the single moves.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from solve_testlib import problems

from placer.errors import ProblemError
from placer.problem import PlacementProblem, Tensor
from placer.solve import solve
from placer.solve.evaluate import check_assignment, latency_schedule, make_latency_plan
from placer.solve.heuristics import HeuristicError, heft, priority_assign
from placer.solve.instances import random_layered
from placer.solve.latency_search import CriticalPathSearch, improve_plan, polish

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}


def _start(problem):
    """HEFT's plan, else every unit on its first allowed target; None if memory caps defeat both."""
    try:
        a, _, order = heft(problem)
        return a, order
    except HeuristicError:
        pass
    try:
        a = priority_assign(problem)
        check_assignment(problem, a)
    except ProblemError:
        return None
    return a, list(range(problem.n_ops))


@settings(max_examples=60, **SETTINGS)
@given(problems(max_ops=8), st.integers(0, 3))
def test_search_is_valid_never_worse_and_never_beats_the_optimum(problem, seed):
    start = _start(problem)
    if start is None:
        return
    a, order = start
    try:
        opt = solve(problem, "latency", "bruteforce", time_limit=30).makespan_ms
    except ProblemError:
        return
    before = float(latency_schedule(problem, a, order)[1].max())
    mk, a2, o2 = improve_plan(problem, a, order, max_evals=3000, seed=seed)
    plan = make_latency_plan(problem, a2, "test", order=o2)
    plan.validate(problem)
    assert mk == plan.makespan_ms
    assert opt - 1e-9 <= mk <= before + 1e-9


@settings(max_examples=40, **SETTINGS)
@given(problems(max_ops=9, max_targets=4), st.integers(0, 2**16))
def test_incremental_schedules_match_the_evaluator(problem, seed):
    start = _start(problem)
    if start is None:
        return
    a, order = start
    s = CriticalPathSearch(problem, a, order, seed=seed)
    start, end = latency_schedule(problem, np.asarray(s.assign), s.order)
    assert np.allclose(s.start, start) and np.allclose(s.end, end)
    s.run(max_evals=500)
    # after moves (prefix states reused) the kept state is still the evaluator's schedule
    start, end = latency_schedule(problem, np.asarray(s.assign), s.order)
    assert np.allclose(s.start, start) and np.allclose(s.end, end)
    chain = s.chain()
    assert chain[0][0] == int(np.argmax(end)) or end[chain[0][0]] == end.max()
    for (v, cause), (w, _) in zip(chain, chain[1:]):
        assert cause == w and end[w] <= start[v] + 1e-9


def test_improves_heft_on_a_layered_dag_deterministically():
    p = random_layered(150, 4, seed=3).canonical()
    a, _, order = heft(p)
    heft_ms = float(latency_schedule(p, a, order)[1].max())
    runs = [improve_plan(p, a, order, max_evals=400_000, seed=1) for _ in range(2)]
    (mk, a2, o2), (mk_b, a2_b, o2_b) = runs
    assert mk < 0.995 * heft_ms
    assert mk == mk_b and (a2 == a2_b).all() and o2 == o2_b
    make_latency_plan(p, a2, "test", order=o2).validate(p)


@settings(max_examples=40, **SETTINGS)
@given(problems(max_ops=9, max_targets=4), st.integers(0, 2**16))
def test_lightening_never_lengthens_the_plan_and_only_ever_sheds_work(problem, seed):
    start = _start(problem)
    if start is None:
        return
    s = CriticalPathSearch(problem, *start, seed=seed)
    work = lambda: sum(s.cost[v][s.assign[v]] for v in range(s.n))  # noqa: E731
    chain = {v for v, _ in s.chain()}
    mk, w, before = s.makespan, work(), list(s.assign)
    kept = s.lighten(np.inf)
    assert s.makespan <= mk + 1e-9 * max(1.0, mk)
    assert (work() < w) if kept else (list(s.assign) == before)
    for v in range(s.n):  # only ops off the chain, each to a cheaper target
        if s.assign[v] != before[v]:
            assert v not in chain and s.cost[v][s.assign[v]] < s.cost[v][before[v]]
    _, end = latency_schedule(problem, np.asarray(s.assign), s.order)
    assert np.allclose(s.end, end)  # the kept state is the evaluator's schedule


def test_lightening_sheds_work_from_heft_on_a_layered_dag():
    p = random_layered(300, 8, seed=0, p_unsupported=0.1).canonical()
    a, _, order = heft(p)
    s = CriticalPathSearch(p, a, order)
    work0 = sum(s.cost[v][s.assign[v]] for v in range(s.n))
    mk0 = s.makespan
    assert s.lighten(np.inf) > 0  # HEFT places ops where they finish first, not where they cost least
    assert sum(s.cost[v][s.assign[v]] for v in range(s.n)) < work0 and s.makespan <= mk0 + 1e-9


def test_swap_reaches_what_single_moves_cannot():
    # a (critical, on the slow target) would wait on the fast one for b: only trading targets helps
    p = PlacementProblem(ops=["a", "b"], targets=["fast", "slow"],
                         cost_ms=np.array([[4.0, 10.0], [7.0, 9.0]]), tensors=[])
    s = CriticalPathSearch(p, np.array([1, 0]), [1, 0])
    assert s.makespan == 10.0
    assert not s._improve_once(np.inf)  # a local optimum of the single moves
    s.stuck = True  # what run() records before its first kick: swaps from then on
    assert s._improve_once(np.inf)
    assert s.makespan == 9.0 and list(s.assign) == [0, 1]


def test_polish_keeps_the_plan_when_off_or_weighing_transfers():
    p = random_layered(60, 3, seed=1).canonical()
    a, _, order = heft(p)
    for opts in ({"local_search": 0.0}, {"local_search": 0.5, "transfer_weight": 1.0}):
        name, a2, o2 = polish(p, "heft", a, order, opts, deadline=float("inf"))
        assert name == "heft" and a2 is a and o2 is order


def test_cpsat_plan_with_the_search_is_never_worse_than_without():
    p = random_layered(120, 4, seed=5)
    opts = {"num_workers": 1, "dtime_per_s": 0.05}
    with_ls = solve(p, "latency", "cpsat", time_limit=4, local_search=0.5, local_search_rate=2e5, **opts)
    without = solve(p, "latency", "cpsat", time_limit=4, local_search=0.0, **opts)
    with_ls.validate(p)
    assert with_ls.stats.best_bound <= with_ls.makespan_ms + 1e-9
    assert with_ls.stats.extra["hint_objective"] <= without.stats.extra["hint_objective"] + 1e-9


def test_compiled_retiming_keeps_the_evaluators_schedule_on_targets_sharing_a_core():
    """The re-timing loop (placer.solve.retime, compiled) serializes ops of targets sharing a core,
    as the evaluator does: after a search the kept state is still the evaluator's schedule."""
    import dataclasses

    p = random_layered(80, 4, seed=2).canonical()
    p = dataclasses.replace(p, target_cores={p.targets[0]: [0], p.targets[1]: [0], p.targets[2]: [1]})
    assert p.shares_resources
    a, _, order = heft(p)
    s = CriticalPathSearch(p, a, order, seed=0)
    mk, a2, o2 = s.run(max_evals=200_000)
    start, end = latency_schedule(p, np.asarray(s.assign), list(s.order))
    assert np.allclose(s.start, start) and np.allclose(s.end, end)
    assert mk == float(latency_schedule(p, a2, o2)[1].max()) <= float(latency_schedule(p, a, order)[1].max())
    make_latency_plan(p, a2, "test", order=o2).validate(p)


def test_a_chain_op_that_waited_for_its_target_goes_just_ahead_of_the_op_that_held_it():
    # t0 runs w, x, y in that order; y feeds z (t2), w feeds u (t1). y waited for x: put just ahead of
    # x, u and z both start early; hoisted to the front instead, y would delay w and so u
    inf = np.inf
    p = PlacementProblem(ops=["w", "x", "y", "u", "z"], targets=["t0", "t1", "t2"],
                         cost_ms=np.array([[1.0, inf, inf], [3.0, inf, inf], [1.0, inf, inf],
                                           [inf, 6.0, inf], [inf, inf, 4.0]]),
                         tensors=[Tensor("wu", "w", ("u",)), Tensor("yz", "y", ("z",))])
    assign, order = np.array([0, 0, 0, 1, 2]), [0, 1, 2, 3, 4]
    s = CriticalPathSearch(p, assign, order)
    hoisted = float(latency_schedule(p, assign, [2, 0, 1, 3, 4])[1].max())
    ahead = float(latency_schedule(p, assign, [0, 2, 1, 3, 4])[1].max())
    assert ahead < hoisted < s.makespan  # the smaller reordering is the better one here
    assert s._improve_once(np.inf)
    assert list(s.order) == [0, 2, 1, 3, 4] and s.makespan == ahead
