"""Coarsening: merged problems keep costs exact, plans expand to valid fine plans."""

from __future__ import annotations

import numpy as np
import pytest
from solve_testlib import random_problem

from placer.solve import solve
from placer.solve.coarsen import coarsen_problem, expand_assignment, expand_order
from placer.solve.evaluate import (
    assignment_indices,
    latency_schedule,
    make_latency_plan,
    make_pipeline_plan,
    pipeline_eval,
)
from placer.solve.instances import random_layered


def _chainy(seed: int, groups: bool = True):
    rng = np.random.default_rng(seed)
    p = None
    while p is None:
        p = random_problem(rng, 40, 3, p_edge=0.06, memory=False, groups=groups, pins=groups,
                           p_inf=0.2 if groups else 0.0)
    return p


@pytest.mark.parametrize("seed", range(5))
def test_coarse_costs_are_exact(seed):
    p = _chainy(seed, groups=False)
    coarse, members = coarsen_problem(p, target_ops=15, max_share=0.5)
    assert coarse.n_ops < p.n_ops
    assert sorted(i for m in members for i in m) == list(range(p.n_ops))
    for m in members:  # each super-op costs the sum of its members
        j = coarse.op_index[p.ops[m[0]]]
        np.testing.assert_allclose(coarse.cost_ms[j], p.cost_ms[m].sum(axis=0))
    # a coarse pipeline plan has exactly the fine stage costs (any plan: no need to prove it optimal, which
    # took 2.6-3.8 s of the 20-26 coarse ops here)
    plan = solve(coarse, "pipeline", "cpsat", time_limit=1, coarsen=False)
    fine_assign = expand_assignment(p, coarse, members, plan.assignment)
    order = [p.target_index[t] for t in plan.stage_targets]
    ev = pipeline_eval(p, fine_assign, order)
    assert ev.bottleneck == pytest.approx(plan.bottleneck_ms)
    assert ev.latency == pytest.approx(plan.makespan_ms)
    make_pipeline_plan(p, fine_assign, "x", order=order).validate(p)
    # a coarse latency schedule is feasible for the fine problem: re-timing never ends later
    plan = solve(coarse, "latency", "cpsat", time_limit=5, coarsen=False)
    fine_assign = expand_assignment(p, coarse, members, plan.assignment)
    fine_order = expand_order(p, coarse, members, plan.start_ms)
    _, end = latency_schedule(p, fine_assign, fine_order)
    assert end.max() <= plan.makespan_ms + 1e-9
    make_latency_plan(p, fine_assign, "x", order=fine_order).validate(p)


def test_contiguous_coarsening_keeps_runs():
    p = _chainy(7)
    _, members = coarsen_problem(p, target_ops=10, contiguous=True, max_share=0.5)
    for m in members:
        assert m == list(range(m[0], m[-1] + 1))


@pytest.mark.parametrize("mode", ["latency", "pipeline"])
def test_solve_with_coarsening_records_merges(mode):
    p = random_layered(300, 3, seed=1)
    plan = solve(p, mode, "cpsat", time_limit=4, coarsen=100)
    plan.validate(p)
    assert plan.coarsening is None or (plan.coarsening["n_ops"] == 300
                                       and plan.coarsening["n_coarse_ops"] < 300)
    if plan.coarsening:
        merged = [o for ops in plan.coarsening["groups"].values() for o in ops]
        assert len(merged) == len(set(merged))
        groups = plan.coarsening["groups"]
        for ops in groups.values():
            assert len({plan.assignment[o] for o in ops}) == 1
    heft = solve(p, mode, "heft")
    key = (lambda x: x.makespan_ms) if mode == "latency" else (lambda x: x.bottleneck_ms)
    assert key(plan) <= key(heft) + 1e-9
    assert plan.stats.best_bound is not None and plan.stats.best_bound <= key(plan) + 1e-9


def test_pins_and_groups_survive_coarsening():
    p = _chainy(3)
    coarse, members = coarsen_problem(p, target_ops=10, max_share=0.5)
    plan = solve(coarse, "latency", "cpsat", time_limit=5, coarsen=False)
    fine = expand_assignment(p, coarse, members, plan.assignment)
    make_latency_plan(p, fine, "x").validate(p)
    assert assignment_indices(p, {o: p.targets[d] for o, d in zip(p.ops, fine)}).tolist() == fine.tolist()
