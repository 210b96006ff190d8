"""Pipeline heuristics stay feasible when colocation groups span the graph.

A forward op colocated with its backward op far later forces every op on the paths between them
into their stage (``PlacementProblem.pipeline_units``); the heuristics place such units whole, so
``single:*``, ``greedy`` and ``heft`` return valid pipelines, and CP-SAT never falls back to one
slow target when a split exists.
"""

from __future__ import annotations

import numpy as np
import pytest
from solve_testlib import training_like

from placer.problem import PlacementProblem, Tensor
from placer.solve import solve
from placer.solve.heuristics import repair_pipeline


def chain_with_spanning_group(n: int) -> PlacementProblem:
    """A chain ``v0 -> ... -> v(n-1)`` plus a side branch; ``v1`` colocated with ``v(n-2)``."""
    ops = [f"v{i}" for i in range(n)] + ["side"]
    tensors = [Tensor(f"t{i}", f"v{i}", (f"v{i + 1}",), 1000) for i in range(n - 1)]
    tensors.append(Tensor("s", "v0", ("side",), 1000))
    cost = np.tile([3.0, 1.0, 1.0], (n + 1, 1))
    return PlacementProblem(ops=ops, targets=["cpu", "gpu0", "gpu1"], cost_ms=cost, tensors=tensors,
                            link_latency_ms=0.1, colocate=[["v1", f"v{n - 2}"]])


@pytest.mark.parametrize("contiguous", [False, True])
def test_heuristics_place_spanning_groups(contiguous):
    p = training_like(40, seed=3)
    for name in ["heft", "greedy", "single:host", "single:acc0", "single:acc1"]:
        plan = solve(p, "pipeline", name, contiguous=contiguous)
        plan.validate(p)


def test_repair_keeps_units_whole_even_from_the_worst_assignment():
    p = chain_with_spanning_group(12)
    alternating = np.array([i % 3 for i in range(p.n_ops)])
    for k in (1, 2, 3):
        assign, stages = repair_pipeline(p.canonical(), alternating, k, contiguous=False)
        assert len(stages) <= k
        c = p.canonical()
        unit = next(u for u in c.pipeline_units if len(u) > 1)
        assert len({int(assign[i]) for i in unit}) == 1


def test_cpsat_splits_when_a_split_exists():
    p = training_like(40, seed=3)
    plan = solve(p, "pipeline", "cpsat", time_limit=60, num_workers=1, dtime_per_s=0.02)
    plan.validate(p)
    host_only = solve(p, "pipeline", "single:host")
    assert len(plan.stage_targets) >= 2
    assert plan.bottleneck_ms < 0.5 * host_only.bottleneck_ms
    dp = solve(p, "pipeline", "dp", time_limit=60, max_work=300_000)  # contiguous splits, bounded work
    dp.validate(p)
    if dp.stats.status == "EXACT":
        assert plan.bottleneck_ms <= dp.bottleneck_ms + 1e-9
