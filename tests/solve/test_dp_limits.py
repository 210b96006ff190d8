"""The ``dp`` solver stops on its work limit (deterministic) or its deadline (checked inside the
label loops), returning the best complete pipeline found so far with a valid lower bound.

Outcomes depend on counted work only (a deadline already passed stands in for a wall clock).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from solve_testlib import problems

from placer.errors import ProblemError
from placer.problem import PlacementProblem, Tensor
from placer.solve import solve
from placer.solve.dp import CHECK_EVERY, dp_search

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}


def layered(n_ops: int, n_targets: int, seed: int) -> PlacementProblem:
    """A layered DAG (width 4, each op reads 1-2 ops of the previous layer and sometimes one of the
    layer before), target 0 runs everything, the others a random 90 %; integer costs."""
    rng = np.random.default_rng(seed)
    ops = [f"v{i}" for i in range(n_ops)]
    width = 4
    readers: dict[int, list[int]] = {i: [] for i in range(n_ops)}
    for v in range(width, n_ops):
        layer = v // width
        prev = list(range((layer - 1) * width, layer * width))
        for u in rng.choice(prev, size=int(rng.integers(1, 3)), replace=False):
            readers[int(u)].append(v)
        if layer >= 2 and rng.random() < 0.3:
            readers[int(rng.integers((layer - 2) * width, (layer - 1) * width))].append(v)
    cost = rng.integers(1, 20, size=(n_ops, n_targets)).astype(float)
    cost[:, 1:][rng.random((n_ops, n_targets - 1)) < 0.1] = np.inf
    tensors = [Tensor(f"t{u}", ops[u], tuple(ops[v] for v in sorted(set(vs))), int(rng.integers(0, 4)) * 1000)
               for u, vs in readers.items()]
    return PlacementProblem(ops=ops, targets=[f"d{j}" for j in range(n_targets)], cost_ms=cost,
                            tensors=tensors, link_latency_ms=1.0, link_ms_per_byte=0.001)


def test_work_limit_returns_the_best_so_far_with_a_valid_bound():
    p = layered(24, 3, seed=3)
    full = dp_search(p, 3)
    assert full.complete and full.bound == full.bottleneck
    for frac in (0.05, 0.2, 0.5):
        cut = dp_search(p, 3, max_work=max(1, int(frac * full.work)))
        assert not cut.complete
        assert cut.bound <= full.bottleneck + 1e-9 <= cut.bottleneck + 2e-9
        again = dp_search(p, 3, max_work=max(1, int(frac * full.work)))  # deterministic
        assert (again.bottleneck, again.latency, list(again.assign)) == (cut.bottleneck, cut.latency,
                                                                         list(cut.assign))
    plan = solve(p, "pipeline", "dp", time_limit=60, max_work=int(0.2 * full.work))
    plan.validate(p)
    assert plan.stats.status == "FEASIBLE"
    assert plan.stats.best_bound <= full.bottleneck + 1e-9 <= plan.bottleneck_ms + 2e-9
    assert plan.stats.extra["stopped_at_op"] is not None
    exact = solve(p, "pipeline", "dp", time_limit=60)
    assert exact.stats.status == "EXACT" and exact.bottleneck_ms == pytest.approx(full.bottleneck)


def test_stopped_before_any_pipeline_is_a_clear_error():
    p = layered(24, 3, seed=3)
    with pytest.raises(ProblemError, match="work limit reached at op 0 of 24"):
        solve(p, "pipeline", "dp", time_limit=60, max_work=1)
    with pytest.raises(ProblemError, match="max_work"):
        solve(p, "pipeline", "dp", time_limit=60, max_work=0)


@settings(max_examples=60, **SETTINGS)
@given(problems(max_ops=10), st.integers(1, 3), st.floats(0.0, 1.0))
def test_stopped_dp_bound_is_valid(problem, k, frac):
    k = min(k, problem.n_targets)
    try:
        full = dp_search(problem, k)
    except ProblemError:
        return  # no contiguous pipeline
    try:
        cut = dp_search(problem, k, max_work=max(1, int(frac * full.work)))
    except ProblemError as exc:
        assert "work limit reached" in str(exc)
        return
    assert cut.bound <= full.bottleneck + 1e-9
    assert cut.bottleneck >= full.bottleneck - 1e-9
    if cut.complete:
        assert (cut.bottleneck, cut.latency) == pytest.approx((full.bottleneck, full.latency))


def test_time_limit_is_honoured_inside_the_label_loops():
    # the deadline used to be checked once per op only. One already passed is seen at the first check,
    # CHECK_EVERY units of work into the search (inside the label loops, at op 1 of 400), whatever the
    # machine's speed: the same stop as a work limit of CHECK_EVERY, with the same best-so-far result
    p = layered(400, 4, seed=1)
    late = dp_search(p, 4, deadline=time.monotonic() - 1.0)
    assert not late.complete and late.work == CHECK_EVERY and late.stopped_at < p.n_ops
    assert late.bound <= late.bottleneck + 1e-9
    same = dp_search(p, 4, max_work=CHECK_EVERY)
    assert (late.bottleneck, late.latency, list(late.assign)) == (same.bottleneck, same.latency,
                                                                  list(same.assign))
