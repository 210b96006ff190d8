"""The tuner's granularity knob: a coarse trial keeps its coarse plan (fewer cuts), valid on the fine problem."""

from __future__ import annotations

import numpy as np
import pytest

from placer.problem import PlacementProblem, Tensor
from placer.tune import space


def _zigzag_chain(n: int = 30) -> PlacementProblem:
    """A chain whose ops alternate which target is slightly cheaper: per op, switching wins."""
    cost = np.array([[1.0, 1.2] if i % 2 == 0 else [1.2, 1.0] for i in range(n)])
    ops = [f"op{i}" for i in range(n)]
    tensors = [Tensor(f"t{i}", ops[i], (ops[i + 1],), 1000) for i in range(n - 1)]
    return PlacementProblem(ops=ops, targets=["a", "b"], cost_ms=cost, tensors=tensors)


def _switches(plan, ops) -> int:
    return sum(plan.assignment[x] != plan.assignment[y] for x, y in zip(ops, ops[1:]))


@pytest.mark.parametrize("level", [8, 3])
def test_coarse_trial_keeps_fewer_cuts_than_the_fine_optimum(level):
    p = _zigzag_chain()
    knobs = {**space.default_knobs(p.targets), "coarsen": 0}
    fine = space.solve_trial(p, knobs, time_limit=5)
    coarse = space.solve_trial(p, {**knobs, "coarsen": level}, time_limit=5)
    fine.validate(p)
    coarse.validate(p)
    assert _switches(fine, p.ops) == len(p.ops) - 1  # free transfers: every op on its cheaper target
    assert coarse.coarsening["n_coarse_ops"] <= 2 * level
    assert _switches(coarse, p.ops) < coarse.coarsening["n_coarse_ops"]  # cuts only between super-ops
    assert coarse.makespan_ms >= fine.makespan_ms - 1e-9  # a restriction: never predicted faster
    assert coarse.stats.extra["granularity"] == level
    # the coarse proof is not a fine one: the reported bound is a fine bound, below the fine makespan
    assert coarse.stats.best_bound <= coarse.makespan_ms + 1e-9 and coarse.stats.objective == coarse.makespan_ms
    assert coarse.stats.gap == pytest.approx((coarse.makespan_ms - coarse.stats.best_bound) / coarse.makespan_ms)


def test_default_knobs_are_a_point_of_the_search_space():
    import optuna

    targets = ["a", "b"]
    study = optuna.create_study()
    study.enqueue_trial(space.default_knobs(targets))
    trial = study.ask()
    assert space.suggest_latency(trial, targets) == space.default_knobs(targets)


def test_entry_cost_is_learned_from_partition_rows_on_the_trial_cost_variant(tiny_model, tmp_path):
    """The tuner's problem charges what partitions measured beyond this variant's own prices."""
    from placer.context import prepare

    ctx = prepare(tiny_model, targets=["onnxruntime:t1", "openvino:t1"], db=tmp_path / "p.db",
                  probe_partitions=False)
    ops, (a, b) = list(ctx.problem.ops), ctx.problem.targets
    knobs = {**space.default_knobs(ctx.problem.targets), "fuse": False}
    cal = space.latency_problem(ctx, {**knobs, "costs": "calibrated"}, [], None)
    iso = space.latency_problem(ctx, {**knobs, "costs": "isolated"}, [], None)
    j = cal.targets.index(b)
    rows = [{"target": b, "prev": a, "ops": ops[:2], "n_inputs": 1,
             "median_ms": float(iso.cost_ms[:2, j].sum()) + 0.5}]  # 0.5 ms over the isolated price
    got_iso = space.latency_problem(ctx, {**knobs, "costs": "isolated"}, [], None, partition_rows=rows)
    got_cal = space.latency_problem(ctx, {**knobs, "costs": "calibrated"}, [], None, partition_rows=rows)
    lat = float(iso.link_latency_ms[1 - j, j])
    assert got_iso.partition_overhead_ms[j] == pytest.approx(max(0.5 - lat, 0.0))
    excess_cal = float(iso.cost_ms[:2, j].sum() - cal.cost_ms[:2, j].sum()) + 0.5  # priced lower: more excess
    assert got_cal.partition_overhead_ms[j] == pytest.approx(max(excess_cal - lat, 0.0))
    assert got_cal.partition_overhead_ms[1 - j] == 0.0  # no row entered a
    boundary = space.latency_problem(ctx, {**knobs, "costs": "isolated", "boundary_ms": 0.25}, [], None,
                                     partition_rows=rows)
    assert boundary.partition_overhead_ms[j] == pytest.approx(got_iso.partition_overhead_ms[j] + 0.25)
