"""The order ops, tensors, consumers and colocation members are listed in does not change a plan.

``solve`` runs every solver on ``problem.canonical()``, which depends on the graph, the names and
the groups only; so every solver (deterministic for a seed) returns the same objective, exactly,
for any listing. Checked on random tiny problems for every solver and mode, and on a larger
layered graph with colocation groups spanning it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from solve_testlib import permuted, problems, random_problem, training_like

from placer.errors import ProblemError
from placer.problem import PlacementProblem, Tensor
from placer.solve import solve

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}


def _try(problem, mode, solver, **kw):
    try:
        plan = solve(problem, mode, solver, time_limit=30, **kw)
    except ProblemError:
        return None
    plan.validate(problem)
    return plan


def _same(a, b) -> bool:
    """Same outcome: both None, or same status and objectives (to float noise: sums are taken in op
    order, which differs between listings)."""
    if a is None or b is None:
        return a is b
    return (a.stats.status == b.stats.status and a.makespan_ms == pytest.approx(b.makespan_ms, rel=1e-12)
            and a.bottleneck_ms == pytest.approx(b.bottleneck_ms, rel=1e-12))


def test_canonical_form_ignores_the_listing():
    rng = np.random.default_rng(5)
    done = 0
    while done < 20:
        p = random_problem(rng, int(rng.integers(2, 12)), 3)
        if p is None:
            continue
        q = permuted(p, rng)
        c = p.canonical()
        assert c.to_json() == q.canonical().to_json()
        assert c.canonical() is c
        assert list(c.canonical_order) == list(range(c.n_ops))
        assert [p.ops[i] for i in p.canonical_order] == list(c.ops)
        done += 1


def test_colocation_units_are_blocks_of_the_canonical_order():
    # a -> b -> c -> d with {a, d} colocated: b and c must share their stage, the unit is a block
    p = PlacementProblem(ops=["a", "x", "b", "c", "d"], targets=["t0", "t1"], cost_ms=np.ones((5, 2)),
                         tensors=[Tensor("ta", "a", ("b",)), Tensor("tb", "b", ("c",)),
                                  Tensor("tc", "c", ("d",)), Tensor("tx", "x", ("d",))],
                         colocate=[["d", "a"]])
    assert sorted(map(sorted, ([p.ops[i] for i in u] for u in p.pipeline_units))) == [
        ["a", "b", "c", "d"], ["x"]]
    assert [p.ops[i] for i in p.canonical_order] == ["x", "a", "b", "c", "d"]


@settings(max_examples=25, **SETTINGS)
@given(problems(max_ops=8), st.integers(0, 2**32 - 1), st.sampled_from(["latency", "pipeline"]),
       st.booleans())
def test_every_solver_ignores_the_listing(problem, seed, mode, contiguous):
    other = permuted(problem, np.random.default_rng(seed))
    names = ["cpsat", "heft", "greedy"] + [f"single:{t}" for t in problem.targets]
    kw = {}
    if mode == "pipeline":
        names.append("dp")
        kw["contiguous"] = contiguous
    for name in names:
        opts = {"num_workers": 1} if name == "cpsat" else {}
        a = _try(problem, mode, name, **kw, **opts)
        b = _try(other, mode, name, **kw, **opts)
        assert _same(a, b), name
        if a is not None:
            assert a.assignment == b.assignment, name


@pytest.mark.parametrize("mode", ["pipeline", "latency"])
def test_larger_graph_same_plan_for_any_listing(mode):
    p = training_like(20, seed=2)  # 81 ops: CP-SAT proves both modes in a few seconds
    q = permuted(p, np.random.default_rng(7))
    assert list(p.ops) != list(q.ops)
    names = ["heft", "greedy", "single:acc0", "cpsat"] + (["dp"] if mode == "pipeline" else [])
    for name in names:
        # cpsat: stopped on deterministic time (wall clock only a backstop), one worker
        opts = {"cpsat": {"num_workers": 1, "dtime_per_s": 0.02, "dynamic": False},
                "dp": {"max_work": 300_000}}.get(name, {})
        a = solve(p, mode, name, time_limit=60, **opts)
        b = solve(q, mode, name, time_limit=60, **opts)
        a.validate(p)
        b.validate(q)
        assert _same(a, b), name
        assert a.assignment == b.assignment, name
