"""Plans from assignments: what every solver returns, built on the cost semantics.

The semantics themselves (what an assignment costs: :func:`latency_schedule`,
:func:`pipeline_eval`, the transfers, the stage order ...) live in :mod:`placer.semantics`, next to
the problem, so that :meth:`placer.plan.Plan.validate` uses them without importing the solvers;
they are re-exported here, the one module the solvers import them from.

* :func:`make_latency_plan` / :func:`make_pipeline_plan` (:func:`make_plan`) turn an assignment
  into a :class:`~placer.plan.Plan`, scheduled with the problem's float costs;
* :func:`plan_key` / :func:`better` compare plans.
"""

from __future__ import annotations

import dataclasses

from typing import Any

import numpy as np

from placer.errors import ProblemError
from placer.plan import Plan, SolverStats, StageCost, Transfer, latency_transfers
from placer.problem import PlacementProblem
from placer.semantics import (
    Costs,
    PipelineEval,
    arrival_ms,
    assignment_indices,
    check_assignment,
    is_contiguous,
    latency_schedule,
    needed_transfers,
    order_by_start,
    pipeline_eval,
    pipeline_loads,
    resource_busy_ms,
    stage_order,
    target_busy_ms,
)

__all__ = [
    "Costs",
    "PipelineEval",
    "arrival_ms",
    "assignment_indices",
    "better",
    "check_assignment",
    "float_noise",
    "is_contiguous",
    "latency_schedule",
    "make_latency_plan",
    "make_pipeline_plan",
    "make_plan",
    "needed_transfers",
    "order_by_start",
    "pipeline_eval",
    "plan_arrays",
    "pipeline_loads",
    "plan_key",
    "resource_busy_ms",
    "stage_order",
    "target_busy_ms",
]


def float_noise(x: float) -> float:
    """How far two prices of the same plan may differ by float rounding alone (another summation
    order, a DP's running sums): relative 1e-9, at least 1e-9 ms. Every solver compares within it."""
    return 1e-9 * max(1.0, abs(x))


def _stats(stats: SolverStats | dict[str, Any] | None, objective: float) -> SolverStats:
    if isinstance(stats, SolverStats):  # e.g. a plan solved on the canonical listing, re-timed here
        s = {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}
    else:
        s = dict(stats or {})
    s.setdefault("status", "HEURISTIC")
    s.setdefault("objective", objective)
    bound = s.get("best_bound")
    # a solver that priced this plan another way (a DP's sums, another summation order) may hand a
    # bound or objective a few ulps off the plan's own figure: a bound is never above the plan it
    # bounds, and the objective is the plan's
    noise = float_noise(objective)
    if s["objective"] is not None and abs(s["objective"] - objective) <= noise:
        s["objective"] = objective
    if bound is not None and objective < bound <= objective + noise:
        s["best_bound"] = bound = objective
    if "gap" not in s:
        s["gap"] = None if bound is None else _gap(objective, bound)
    return SolverStats(**s)


def _gap(objective: float, bound: float) -> float:
    if objective <= 0:
        return 0.0
    return max(0.0, (objective - bound) / objective)


def plan_arrays(problem: PlacementProblem, plan: Plan) -> tuple[np.ndarray, list[int]]:
    """A latency plan as the searches take it: its targets as indices (:func:`assignment_indices`) and
    its ops in start order (:func:`order_by_start`)."""
    start = [plan.start_ms[o] for o in problem.ops]
    return assignment_indices(problem, plan.assignment), order_by_start(problem, start)


def make_latency_plan(problem: PlacementProblem, assign: np.ndarray, solver: str, *,
                      order: Any = None, stats: SolverStats | dict[str, Any] | None = None,
                      options: dict[str, Any] | None = None, coarsening: dict[str, Any] | None = None) -> Plan:
    """A latency-mode Plan: list-schedule ``assign`` in ``order`` with the problem's float costs."""
    assign = np.asarray(assign, dtype=int)
    check_assignment(problem, assign)
    p = problem.priced_for(assign)  # a plan that cuts the model pays the cut scale
    start, end = latency_schedule(p, assign, order)
    names, targets = p.ops, p.targets
    end_l = end.tolist()
    transfers = latency_transfers(p, assign, end)
    makespan = float(end.max())
    busy = resource_busy_ms(p, assign)
    return Plan(
        mode="latency", solver=solver, targets=tuple(p.targets),
        assignment=dict(zip(names, [targets[d] for d in assign.tolist()])),
        start_ms=dict(zip(names, start.tolist())),
        end_ms=dict(zip(names, end_l)),
        op_cost_ms=dict(zip(names, p.cost_ms[np.arange(p.n_ops), assign].tolist())),
        transfers=transfers, makespan_ms=makespan, bottleneck_ms=float(busy.max()),
        stats=_stats(stats, makespan), provenance=dict(p.provenance), coarsening=coarsening,
        options=dict(options or {}),
    )


def make_pipeline_plan(problem: PlacementProblem, assign: np.ndarray, solver: str, *,
                       order: list[int] | None = None, stats: SolverStats | dict[str, Any] | None = None,
                       options: dict[str, Any] | None = None,
                       coarsening: dict[str, Any] | None = None) -> Plan:
    """A pipeline-mode Plan for ``assign`` with stages on targets ``order`` (default: :func:`~placer.semantics.stage_order`)."""
    assign = np.asarray(assign, dtype=int)
    check_assignment(problem, assign)
    p = problem.priced_for(assign)  # a plan that cuts the model pays the cut scale
    if order is None:
        order = stage_order(p, assign)
        if order is None:
            raise ProblemError("assignment has no monotone stage order (targets form a cycle)")
    ev = pipeline_eval(p, assign, order)
    pos = {d: s for s, d in enumerate(order)}
    names = p.ops
    transfers = tuple(Transfer(p.tensors[k].name, p.targets[a], p.targets[b], ms, en, None, None)
                      for k, a, b, ms, en in needed_transfers(p, assign))
    stages = tuple(StageCost(p.targets[d], float(ev.compute[d]), float(ev.send[d]), float(ev.recv[d]),
                             float(ev.total[d])) for d in order)
    return Plan(
        mode="pipeline", solver=solver, targets=tuple(p.targets),
        assignment=dict(zip(names, [p.targets[d] for d in assign.tolist()])),
        start_ms=dict(zip(names, ev.start.tolist())),
        end_ms=dict(zip(names, ev.end.tolist())),
        op_cost_ms=dict(zip(names, p.cost_ms[np.arange(p.n_ops), assign].tolist())),
        transfers=transfers, makespan_ms=ev.latency, bottleneck_ms=ev.bottleneck,
        stats=_stats(stats, ev.bottleneck), stage=dict(zip(names, [pos[d] for d in assign.tolist()])),
        stage_targets=tuple(p.targets[d] for d in order), stages=stages,
        provenance=dict(p.provenance), coarsening=coarsening, options=dict(options or {}),
    )


def make_plan(problem: PlacementProblem, mode: str, assign: np.ndarray, solver: str, **kw: Any) -> Plan:
    """Dispatch to :func:`make_latency_plan` or :func:`make_pipeline_plan`."""
    if mode == "latency":
        return make_latency_plan(problem, assign, solver, **kw)
    return make_pipeline_plan(problem, assign, solver, **kw)


def plan_key(plan: Plan) -> tuple[float, float]:
    """Lexicographic quality of a plan, smaller is better: (makespan, bottleneck) in latency mode,
    (bottleneck, latency) in pipeline mode."""
    if plan.mode == "latency":
        return (plan.makespan_ms, plan.bottleneck_ms)
    return (plan.bottleneck_ms, plan.makespan_ms)


def better(a: Plan | None, b: Plan | None, rtol: float = 1e-9) -> Plan | None:
    """The better of two plans (``a`` on ties within ``rtol``)."""
    if a is None:
        return b
    if b is None:
        return a
    ka, kb = plan_key(a), plan_key(b)
    for x, y in zip(ka, kb):
        if abs(x - y) > rtol * max(1.0, abs(x), abs(y)):
            return a if x < y else b
    return a

