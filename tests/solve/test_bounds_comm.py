"""Communication-aware heads, tails and bounds (``placer.solve.bounds_comm``).

Property tests against exact enumeration on random tiny problems (``solve_testlib``), also with
transfers that dominate the op costs (link latencies x8): the per-target heads and tails hold in
every schedule (the optimal one and HEFT's), and the path bound, the shaved bound, the window LP
fed with these heads / tails and the bound CP-SAT reports never exceed the brute-force optimum.
Plus a hand-made instance where sharing the fast target is what the older bounds miss.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from solve_testlib import problems

from placer.errors import ProblemError
from placer.problem import PlacementProblem, Tensor
from placer.solve import solve
from placer.solve.bounds import critical_path_bound, latency_bound, target_heads_tails, window_load_bound
from placer.solve.bounds_comm import HeadsTails, comm_heads_tails, path_bound, shaved_bound
from placer.solve.evaluate import Costs, assignment_indices, make_latency_plan
from placer.solve.heuristics import HeuristicError, heft
from placer.solve.instances import random_layered

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}


def _optimum(problem):
    try:
        return solve(problem, "latency", "bruteforce", time_limit=30)
    except ProblemError as exc:
        if "no feasible" in str(exc):
            return None
        raise


def _heft(problem):
    try:
        return solve(problem, "latency", "heft")
    except (HeuristicError, ProblemError):  # memory caps HEFT's greedy placement cannot meet
        return None


def _heavy(problem: PlacementProblem, factor: float) -> PlacementProblem:
    """The problem with every link latency multiplied (transfers dominate for big factors)."""
    if factor == 1:
        return problem
    return dataclasses.replace(problem, link_latency_ms=problem.link_latency_ms * factor + 1.0)


def _holds_in(problem, plan, head, tail):
    a = assignment_indices(problem, plan.assignment)
    for i, op in enumerate(problem.ops):
        d = a[i]
        assert plan.start_ms[op] >= head[i, d] - 1e-9
        assert plan.end_ms[op] + tail[i, d] <= plan.makespan_ms + 1e-9


@settings(max_examples=60, **SETTINGS)
@given(problems(max_ops=8), st.sampled_from([1, 8]))
def test_heads_tails_hold_in_every_schedule(problem, factor):
    problem = _heavy(problem, factor)
    opt = _optimum(problem)
    if opt is None:
        return
    c = Costs.of(problem)
    head, tail = comm_heads_tails(problem, c)
    old_h, old_q = target_heads_tails(problem, c)
    ok = problem.allowed
    assert (head[ok] >= old_h[ok] - 1e-9).all() and (tail[ok] >= old_q[ok] - 1e-9).all()
    _holds_in(problem, opt, head, tail)
    heft = _heft(problem)
    if heft is not None:
        _holds_in(problem, heft, head, tail)


@settings(max_examples=60, **SETTINGS)
@given(problems(max_ops=8), st.sampled_from([1, 8]))
def test_bounds_never_exceed_the_optimum(problem, factor):
    problem = _heavy(problem, factor)
    opt = _optimum(problem)
    if opt is None:
        return
    best = opt.makespan_ms
    c = Costs.of(problem)
    ht = comm_heads_tails(problem, c)
    pb = path_bound(problem, c, *ht)
    assert pb <= best + 1e-9
    base = latency_bound(problem, c, heads_tails=ht)
    assert pb <= base + 1e-12 and base <= best + 1e-9
    assert window_load_bound(problem, c, base, heads_tails=ht) <= best + 1e-6
    heft = _heft(problem)
    upper = heft.makespan_ms if heft is not None else 2 * best
    shaved = shaved_bound(problem, c, base, upper, steps=6)
    assert base <= shaved <= best + 1e-6
    probed = shaved_bound(problem, c, base, upper, steps=6, probes=50, probe_steps=4)
    assert shaved <= probed <= best + 1e-6


@settings(max_examples=40, **SETTINGS)
@given(problems(max_ops=7), st.sampled_from([1, 8]), st.sampled_from([0.5, 0.7, "perturb"]))
def test_cpsat_bound_with_comm_heads_stays_valid(problem, factor, resolution):
    # the CP-SAT model uses the heads / tails on rounded costs, in its bound and as constraints,
    # and here the shaved bound too (off by default)
    problem = _heavy(problem, factor)
    opts = {"num_workers": 1, "shave_fraction": 0.5}
    if resolution == "perturb":
        rng = np.random.default_rng(problem.n_ops)
        scale = 1 + 0.01 * rng.random(problem.cost_ms.shape)
        problem = dataclasses.replace(problem, cost_ms=problem.cost_ms * scale)
    else:
        opts["time_resolution_ms"] = resolution
    opt = _optimum(problem)
    if opt is None:
        return
    got = solve(problem, "latency", "cpsat", time_limit=30, **opts)
    got.validate(problem)
    assert got.stats.best_bound <= opt.makespan_ms + 1e-9
    assert got.makespan_ms >= opt.makespan_ms - 1e-9
    if got.stats.status == "OPTIMAL":
        assert got.makespan_ms <= opt.makespan_ms + 1e-6


def _shared_fast_target() -> PlacementProblem:
    # a and b are 10x faster on "fast"; v runs only there and reads both: either they share "fast"
    # one after the other (2 + 2) or one of them is far slower and pays a transfer
    cost = np.array([[2.0, 20.0], [2.0, 20.0], [1.0, np.inf]])
    return PlacementProblem(ops=["a", "b", "v"], targets=["fast", "slow"], cost_ms=cost,
                            tensors=[Tensor("ta", "a", ("v",)), Tensor("tb", "b", ("v",))],
                            link_latency_ms=5.0)


def test_sharing_the_fast_target_is_counted():
    p = _shared_fast_target()
    c = Costs.of(p)
    assert critical_path_bound(p, c) == pytest.approx(3.0)  # both predecessors on "fast" at once
    h, q = target_heads_tails(p, c)
    assert float(np.where(p.allowed, h + c.cost + q, np.inf).min(axis=1).max()) == pytest.approx(3.0)
    assert path_bound(p, c) == pytest.approx(5.0)
    assert solve(p, "latency", "bruteforce").makespan_ms == pytest.approx(5.0)
    plan = solve(p, "latency", "cpsat", time_limit=10, num_workers=1)
    assert plan.makespan_ms == pytest.approx(5.0) and plan.stats.best_bound == pytest.approx(5.0)
    assert plan.stats.status == "OPTIMAL"


def test_tails_share_the_target_of_successors():
    # the mirror image: v feeds a and b, both fast only on "fast" (or slow and far away)
    cost = np.array([[1.0, np.inf], [2.0, 20.0], [2.0, 20.0]])
    p = PlacementProblem(ops=["v", "a", "b"], targets=["fast", "slow"], cost_ms=cost,
                         tensors=[Tensor("t", "v", ("a", "b"))], link_latency_ms=5.0)
    c = Costs.of(p)
    _, q = comm_heads_tails(p, c)
    assert q[0, 0] == pytest.approx(4.0)
    assert path_bound(p, c) == pytest.approx(5.0)
    assert critical_path_bound(p, c) == pytest.approx(3.0)
    assert solve(p, "latency", "bruteforce").makespan_ms == pytest.approx(5.0)


def test_neighbours_that_share_another_target_run_one_at_a_time_there(monkeypatch):
    # a and b are fast only on "fast", v runs only on "own": both outputs travel to v, and if both
    # producers sit on "fast" they run there one after the other (the shared-target rule); the
    # threshold rule lets each take "fast" alone (2 + 0.5 + 1). The mirror image for the tails.
    from placer.solve import bounds_comm

    inf = np.inf
    heads = PlacementProblem(ops=["a", "b", "v"], targets=["fast", "other", "own"],
                             cost_ms=np.array([[2.0, 20.0, inf], [2.0, 20.0, inf], [inf, inf, 1.0]]),
                             tensors=[Tensor("ta", "a", ("v",)), Tensor("tb", "b", ("v",))],
                             link_latency_ms=0.5)
    tails = PlacementProblem(ops=["v", "a", "b"], targets=["fast", "other", "own"],
                             cost_ms=np.array([[inf, inf, 1.0], [2.0, 20.0, inf], [2.0, 20.0, inf]]),
                             tensors=[Tensor("t", "v", ("a", "b"))], link_latency_ms=0.5)
    for p, v in ((heads, 2), (tails, 0)):
        c = Costs.of(p)
        opt = solve(p, "latency", "bruteforce").makespan_ms
        assert opt == pytest.approx(5.5)  # 2 + 2 + 0.5 + 1
        h, q = comm_heads_tails(p, c)
        assert (h if v == 2 else q)[v, 2] == pytest.approx(4.5)
        assert path_bound(p, c) == pytest.approx(opt)
        with monkeypatch.context() as m:  # the threshold rule alone
            m.setattr(bounds_comm, "SHARED_MAX_NEIGHBOURS", 0)
            assert path_bound(p, c) == pytest.approx(3.5)


def test_an_instantaneous_neighbour_neither_waits_for_nor_holds_its_target():
    """An op of cost 0 occupies no time on its target (placer.plan, the evaluator, CP-SAT): on one
    machine it counts for its own release + tail, not after the busy item before it. The problem is
    the one hypothesis found in session 36 (``test_shared_cores``): op0 on t1 feeds op1 (cost 0 on
    t0, its input 5 ms away), op3 (7 ms on t0) and op5 (5 ms on t0); the optimum, 16, runs op1 at
    9 inside op3's [4, 11). Sequencing op1 after op3 had put op0's tail on t1 at 13 and the path
    bound, and with it CP-SAT's proven optimum, at 17."""
    from placer.solve.heads_tails_kernel import one_machine

    r, q = np.array([0.0, 5.0, 0.0]), np.array([5.0, 6.0, 0.0])
    assert one_machine(r, np.array([7.0, 0.0, 5.0]), q, 3) == pytest.approx(12.0)  # was 13
    assert one_machine(r, np.array([7.0, 1.0, 5.0]), q, 3) == pytest.approx(14.0)  # 1 ms: it waits
    inf = np.inf
    p = PlacementProblem(
        ops=[f"op{i}" for i in range(6)], targets=["t0", "t1", "t2"],
        cost_ms=np.array([[inf, 4, 3], [0, inf, 3], [5, 4, 8], [7, 9, inf], [8, 0, 9], [5, inf, inf]], float),
        tensors=[Tensor("x0_0", "op0", ("op2", "op3", "op5"), 0), Tensor("x0_1", "op0", ("op1",), 5000),
                 Tensor("x1_0", "op1", ("op2", "op5"), 2000), Tensor("x3_0", "op3", ("op4", "op5"), 5000),
                 Tensor("x3_1", "op3", ("op5",), 2000), Tensor("input", None, ("op0", "op1", "op4"), 4000)],
        link_latency_ms=np.array([[0, 2, 3], [0, 0, 2], [2, 0, 0]], float),
        link_ms_per_byte=np.array([[0, 0, 0.001], [0.001, 0, 0.001], [0, 0, 0]]),
        link_charge=[["sender", "receiver", "sender"], ["both", "receiver", "sender"],
                     ["both", "receiver", "sender"]],
        memory_cap_bytes=np.array([inf, 8.0, inf]), weight_bytes=np.array([2, 1, 0, 3, 1, 2], float))
    for shared in ({}, {"t1": [0], "t2": [0]}):
        q = dataclasses.replace(p, target_cores=shared)
        opt = solve(q, "latency", "bruteforce").makespan_ms
        assert opt == pytest.approx(16.0)
        assert path_bound(q, Costs.of(q)) <= opt + 1e-9 and latency_bound(q) <= opt + 1e-9
        plan = solve(q, "latency", "cpsat", time_limit=10, num_workers=1)
        assert plan.stats.status == "OPTIMAL" and plan.makespan_ms == pytest.approx(opt)


def test_shaved_bound_closes_on_a_chain():
    # chain x -> y -> z: y is fast on "b" (1) but x only runs on "a" and the link costs 4, so y
    # stays on "a" (3); the optimum 1 + 3 + 1 = 5 is proven by the bisection
    cost = np.array([[1.0, np.inf], [3.0, 1.0], [1.0, 1.0]])
    p = PlacementProblem(ops=["x", "y", "z"], targets=["a", "b"], cost_ms=cost,
                         tensors=[Tensor("t", "x", ("y",)), Tensor("u", "y", ("z",))], link_latency_ms=4.0)
    c = Costs.of(p)
    opt = solve(p, "latency", "bruteforce").makespan_ms
    got = shaved_bound(p, c, latency_bound(p, c), 10.0, steps=20)
    assert got <= opt + 1e-9
    assert got >= opt - 1e-3


@settings(max_examples=40, **SETTINGS)
@given(problems(max_ops=8), st.sampled_from([1, 8]), st.sampled_from([0.5, 1.0]))
def test_heft_looking_ahead_at_the_tails_gives_valid_plans(problem, factor, weight):
    problem = _heavy(problem, factor)
    opt = _optimum(problem)
    if opt is None:
        return
    _, q = comm_heads_tails(problem, Costs.of(problem))
    try:
        assign, _, order = heft(problem, lookahead=weight * q)
    except HeuristicError:  # memory caps the greedy placement cannot meet, as plain HEFT
        return
    plan = make_latency_plan(problem, assign, "heft-tails", order=order)
    plan.validate(problem)
    assert plan.makespan_ms >= opt.makespan_ms - 1e-9


def test_heft_looking_ahead_beats_heft_on_a_layered_graph():
    # 500 ops x 8 heterogeneous targets: placing an op where its successors need no transfer
    p = random_layered(500, 8, seed=0)
    c = Costs.of(p)
    _, q = comm_heads_tails(p, c)
    plain = _makespan(p, heft(p))
    ahead = _makespan(p, heft(p, lookahead=0.5 * q))
    assert ahead < plain
    assert ahead >= path_bound(p, c, *comm_heads_tails(p, c)) - 1e-9


def _makespan(problem, result):
    assign, _, order = result
    plan = make_latency_plan(problem, assign, "heft", order=order)
    plan.validate(problem)
    return plan.makespan_ms


@settings(max_examples=30, **SETTINGS)
@given(st.integers(0, 10_000), st.integers(1, 6))
def test_heads_tails_computed_again_downstream_of_a_change_equal_the_whole_computation(seed, n_changes):
    problem = random_layered(60, 4, seed=seed)
    ht = HeadsTails(problem, Costs.of(problem))
    rng = np.random.default_rng(seed)
    ok = problem.allowed.copy()
    previous = ht(ok)
    for _ in range(3):
        changed = np.zeros(problem.n_ops, dtype=bool)
        for v in rng.choice(problem.n_ops, n_changes, replace=False):
            left = np.flatnonzero(ok[v])
            if len(left) > 1:
                ok[v, rng.choice(left)] = False
                changed[v] = True
        again = ht(ok, previous, changed)
        whole = ht(ok)
        assert np.array_equal(again[0], whole[0]) and np.array_equal(again[1], whole[1])
        previous = again


def test_probing_raises_the_shaved_bound_on_a_layered_graph():
    # 150 ops x 6 targets: fixing one op on one target and shaving again refutes levels that shaving
    # alone leaves open; the bound stays below a plan reached
    p = random_layered(150, 6, seed=3)
    c = Costs.of(p)
    plan = solve(p, "latency", "heft")
    base = latency_bound(p, c)
    plain = shaved_bound(p, c, base, plan.makespan_ms, steps=8)
    probed = shaved_bound(p, c, base, plan.makespan_ms, steps=8, probes=400, probe_steps=4)
    assert plain < probed <= plan.makespan_ms


def _bounded_latency_solve() -> tuple[dict, object]:
    """CP-SAT latency options and a context whose work is bounded deterministically: no dynamic list
    search, a critical-path search of a fixed number of ops re-timed (the rate times a share of the
    600-s limit), the bound's probes capped per level. The limit is a hang guard only: nothing waits
    on it in these tests."""
    import time

    from placer.solve.base import SolveContext
    from placer.solve.cpsat import CpSat

    options = {**CpSat.options, "num_workers": 1, "dynamic": False, "local_search_rate": 1000.0}
    ctx = SolveContext(name="cpsat", mode="latency", time_limit=600.0, deadline=time.monotonic() + 600.0)
    return options, ctx


def test_the_shaved_bound_runs_beside_the_search_and_stops_with_it():
    import threading

    from placer.solve.cpsat_latency import LatencyModel

    p = random_layered(120, 6, seed=1)

    def model():
        options, ctx = _bounded_latency_solve()
        m = LatencyModel(p, ctx, options)
        m.lower_bound()
        m.run_heuristics()
        return m

    m = model()
    thread = m._shaving
    assert isinstance(thread, threading.Thread)  # started before the search, below the best heuristic
    before = m.lb_ms
    thread.join()  # its work is bounded: finished here on any machine, not cut by upper_bound's backstop
    m.upper_bound()  # takes its value
    assert not thread.is_alive() and m._shaving is None
    assert m._shaved and m.lb_ms == pytest.approx(max(before, m._shaved[0]))
    assert before <= m.lb_ms <= m.best_plan.makespan_ms + 1e-9
    # a solve that ends before the model is built (or fails) stops it too
    m = model()
    thread = m._shaving
    m.stop_shaving()
    assert not thread.is_alive() and m._shaving is None
    assert not [t for t in threading.enumerate() if t.name == "placer-shaved-bound"]


def test_an_error_in_the_bound_s_thread_is_raised_even_when_the_solve_ends_early(monkeypatch):
    # the heuristic plan returned when no time is left to build the model dropped the thread's error
    from placer.solve import cpsat_latency

    def broken(*args, **kwargs):
        raise RuntimeError("bound thread broke")

    monkeypatch.setattr(cpsat_latency, "shaved_bound", broken)
    # the early way out after the heuristics: "no time left to build the model" taken
    monkeypatch.setattr(cpsat_latency, "plan_if_no_time_to_build", lambda m, *a: m.best_plan)
    p = random_layered(40, 3, seed=2)
    options, ctx = _bounded_latency_solve()
    with pytest.raises(RuntimeError, match="bound thread broke"):
        cpsat_latency.solve_latency(p, ctx, options)
