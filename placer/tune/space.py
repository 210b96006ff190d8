"""The knobs ``placer tune`` searches, and how each knob changes the placement problem.

Latency objective
-----------------
``boundary_ms``      extra entry cost per tensor a partition receives (0 .. 2 ms, log scale):
                     how strongly the solver avoids cutting the model.
``fuse``             keep runtime fusion groups (conv/matmul + bias/BN/activation chains) on one
                     target (colocation groups): cutting inside them loses the runtime's fusion.
``transfer_weight``  weight of total transfer time in the CP-SAT objective (0 .. 1).
``costs``            cost-model variant, how ops and partitions are priced:
                     ``"calibrated"`` measured op costs, measured fusion segments kept whole,
                     scaled per target to the whole-model time measured in this session;
                     ``"isolated"`` the raw isolated op costs (no segments, no scaling);
                     ``"learned"`` the learned cost model (:mod:`placer.tune.learned`): net op
                     costs times the target's learned partition ratio, the call overhead as
                     the entry cost, refitted on the partitions measured between trials
                     (``"isolated"`` when the tuner has no cost model).
``drop:<target>``    exclude a target from the plan (the target subset knob).
``coarsen``          granularity: 0 places single ops; ``N`` merges chains and single-successor
                     groups into at most about ``N`` super-ops first (:mod:`placer.solve.coarsen`),
                     so the plan can only cut between them (fewer, bigger partitions).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import numpy as np

from placer.costing import build_problem, fusion_groups, pair_pricing, partition_pricing  # noqa: F401  (fusion_groups re-exported)
from placer.errors import ProblemError
from placer.plan import SolverStats
from placer.solve import solve
from placer.solve.bounds import latency_bound
from placer.solve.coarsen import coarsen_problem, expand_assignment, expand_order
from placer.solve.evaluate import make_latency_plan

#: the granularity levels of the ``coarsen`` knob (0: none; else about that many super-ops)
COARSEN_LEVELS = (0, 48, 16)
#: the cost-model variants of the ``costs`` knob (module docstring)
COST_VARIANTS = ("calibrated", "isolated", "learned")


def default_knobs(targets: Sequence[str]) -> dict[str, Any]:
    knobs: dict[str, Any] = {"boundary_ms": 0.0, "fuse": True, "transfer_weight": 0.0, "costs": "calibrated",
                             "coarsen": 0}
    knobs.update({f"drop:{t}": False for t in targets})
    return knobs


def suggest_latency(trial, targets: Sequence[str]) -> dict[str, Any]:
    knobs: dict[str, Any] = {
        "boundary_ms": trial.suggest_categorical("boundary_ms", [0.0, 0.01, 0.03, 0.1, 0.3, 1.0]),
        "fuse": trial.suggest_categorical("fuse", [True, False]),
        "transfer_weight": trial.suggest_categorical("transfer_weight", [0.0, 0.1, 0.5]),
        "costs": trial.suggest_categorical("costs", list(COST_VARIANTS)),
        "coarsen": trial.suggest_categorical("coarsen", list(COARSEN_LEVELS)),
    }
    for t in targets:
        knobs[f"drop:{t}"] = trial.suggest_categorical(f"drop:{t}", [False, True])
    if all(knobs[f"drop:{t}"] for t in targets):  # keep at least one target
        knobs[f"drop:{targets[0]}"] = False
    return knobs


def solve_trial(problem, knobs: dict[str, Any], *, time_limit: float, seed: int = 0):
    """Solve a trial's latency problem with CP-SAT at the trial's granularity (``coarsen`` knob).

    ``coarsen = N > 0``: merge into about ``N`` super-ops (each at most ``2 / N`` of the work),
    solve the coarse problem and expand it, *keeping* the coarse plan: unlike
    ``solve(coarsen=...)``, which falls back to a finer heuristic plan when that predicts faster,
    the knob exists because cuts cost more when measured than predicted.
    """
    tw = float(knobs.get("transfer_weight", 0.0) or 0.0)
    level = int(knobs.get("coarsen", 0) or 0)
    if level <= 0 or level >= problem.n_ops:
        return solve(problem, "latency", "cpsat", time_limit=time_limit, seed=seed, transfer_weight=tw)
    t0 = time.monotonic()
    coarse, members = coarsen_problem(problem, level, max_share=min(1.0, 2.0 / level))
    try:
        cplan = solve(coarse, "latency", "cpsat", time_limit=time_limit, seed=seed, transfer_weight=tw,
                      coarsen=False)
    except ProblemError:  # merging made it infeasible (memory caps, pins): solve it whole
        return solve(problem, "latency", "cpsat", time_limit=max(0.1, time_limit - (time.monotonic() - t0)),
                     seed=seed, transfer_weight=tw)
    assign = expand_assignment(problem, coarse, members, cplan.assignment)
    order = expand_order(problem, coarse, members, cplan.start_ms)
    info = {"n_ops": problem.n_ops, "n_coarse_ops": coarse.n_ops, "level": level,
            "groups": {problem.ops[m[0]]: [problem.ops[i] for i in m] for m in members if len(m) > 1}}
    plan = make_latency_plan(problem, assign, "cpsat", order=order, coarsening=info)
    # the coarse proof says nothing about the fine problem: report the fine makespan against a fine bound
    bound = min(latency_bound(problem), plan.makespan_ms)
    gap = 0.0 if plan.makespan_ms <= 0 else (plan.makespan_ms - bound) / plan.makespan_ms
    extra = {**dict(cplan.stats.extra), "granularity": level, "coarse_status": cplan.stats.status,
             "coarse_objective": cplan.stats.objective, "coarse_best_bound": cplan.stats.best_bound}
    stats = SolverStats(status="OPTIMAL" if gap <= 1e-9 else "FEASIBLE", objective=plan.makespan_ms,
                        best_bound=bound, gap=gap, wall_s=time.monotonic() - t0, extra=extra)
    return dataclasses.replace(plan, stats=stats)


def latency_problem(ctx, knobs: dict[str, Any], fusion: list[list[str]], learned_entry_ms: np.ndarray | None = None,
                    learned: tuple[np.ndarray, np.ndarray] | None = None, *,
                    partition_rows: Sequence[dict] | None = None):
    """The problem of ``ctx`` changed by ``knobs`` and what was learned so far: the per-target entry
    cost and the cut scale from partitions timed as they ran (``partition_rows``: the context's probe
    plans and the plans measured in this session, priced on this variant's costs by
    :func:`placer.costing.partition_pricing`; or a ready ``learned_entry_ms``, with the context's
    cut scale) and, for
    ``costs="learned"``, the cost model's ``(cost_ms, entry_ms)``
    (:func:`placer.tune.learned.learned_costs`)."""
    variant = knobs.get("costs", "calibrated")
    if variant not in COST_VARIANTS:
        raise ValueError(f"costs knob {variant!r}: expected one of {', '.join(COST_VARIANTS)}")
    if variant == "learned" and learned is None:
        variant = "isolated"
    if variant == "calibrated" and knobs.get("fuse", True):
        base = ctx.problem
    else:  # measured segment costs hold only for segments kept whole: without fusion, isolated op costs
        base = build_problem(ctx.graph, ctx.table, ctx.links, calibrate=variant == "calibrated",
                             use_segments=variant == "calibrated" and bool(knobs.get("fuse", True)),
                             provenance=ctx.problem.provenance)
    cost = np.array(base.cost_ms, dtype=float)
    cut_scale = base.cut_scale
    pairs: dict[str, Any] = {}
    if partition_rows is not None:
        pricing = partition_pricing(base, partition_rows)
        learned_entry_ms, cut_scale = pricing.entry_ms, pricing.cut_scale
        pairs = pair_pricing(base, partition_rows).to_provenance(base.targets)
    elif learned_entry_ms is None:
        learned_entry_ms = np.zeros(len(base.targets))
    entry = np.asarray(learned_entry_ms, dtype=float) + float(knobs.get("boundary_ms", 0.0))
    if variant == "learned":
        cost = np.array(learned[0], dtype=float)
        entry = np.asarray(learned[1], dtype=float) + float(knobs.get("boundary_ms", 0.0))
    for j, t in enumerate(base.targets):
        if knobs.get(f"drop:{t}"):
            cost[:, j] = np.inf
    # an op supported nowhere after dropping falls back to its cheapest original target
    for i in np.flatnonzero(~np.isfinite(cost).any(axis=1)):
        j = int(np.argmin(base.cost_ms[i]))
        cost[i, j] = base.cost_ms[i, j]
    groups = list(base.colocate) + ([tuple(g) for g in fusion] if knobs.get("fuse") else [])
    colocate = tuple(dict.fromkeys(tuple(g) for g in groups if co_supported(cost, base.ops, g)))
    prov = {**dict(base.provenance), "costs": variant, **pairs}
    return dataclasses.replace(base, cost_ms=cost, partition_overhead_ms=entry, cut_scale=cut_scale,
                               colocate=colocate, provenance=prov)


def co_supported(cost: np.ndarray, ops: Sequence[str], group: Sequence[str]) -> bool:
    """Whether one target of ``cost``'s columns runs every op of ``group``."""
    idx = {o: i for i, o in enumerate(ops)}
    rows = cost[[idx[o] for o in group]]
    return bool(np.isfinite(rows).all(axis=0).any())
