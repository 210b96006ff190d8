"""Baseline solvers: ``single:<target>``, ``greedy`` and ``heft``.

All three produce an assignment, then a plan with the shared semantics of
:mod:`placer.solve.evaluate`:

* latency mode: list-scheduled in the problem's (topological) op order, except HEFT which keeps
  its own order (ops by HEFT start time, re-timed to the earliest schedule);
* pipeline mode: the assignment's stage order if it is already a valid pipeline (monotone, at most
  ``num_stages`` stages, contiguous if asked), else :func:`~placer.solve.heuristics.repair_pipeline`;
  if the repair gets stuck (an op supported by no target of a stage at or after its inputs'), the
  best balanced contiguous split (:func:`~placer.solve.heuristics.split_pipeline`).

``single:<target>``
    Every op on ``<target>``; an op it does not support (or that does not fit its memory) falls
    back to the next target in the problem's target order.
``greedy``
    What BYOC / execution-provider partitioning does: offload everything the preferred target
    supports (option ``prefer``, default: the first target); every other op goes to its fastest
    supporting target.
``heft``
    HEFT with insertion (:func:`~placer.solve.heuristics.heft`).

Colocation groups go where their first op goes when every member is supported there, else to the
first target supporting all members. When memory caps leave a heuristic no room it raises
:class:`~placer.solve.heuristics.HeuristicError` (a ProblemError).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from placer.plan import Plan
from placer.problem import PlacementProblem
from placer.solve.base import SolveContext, Solver, register_solver
from placer.solve.evaluate import is_contiguous, make_latency_plan, make_pipeline_plan, stage_order
from placer.solve.heuristics import (
    HeuristicError,
    best_pipeline,
    heft,
    priority_assign,
    repair_pipeline,
    split_pipeline,
)

__all__ = ["Greedy", "Heft", "SingleTarget", "finish_heuristic"]


def pipeline_shape(problem: PlacementProblem, assign: np.ndarray, ctx: SolveContext
                   ) -> tuple[np.ndarray, list[int]]:
    """The assignment's own stage order if valid for ``ctx``, else a repaired assignment."""
    k = ctx.max_stages(problem)
    order = stage_order(problem, assign)
    if order is not None and len(order) <= k and (not ctx.contiguous or is_contiguous(assign)):
        return assign, order
    try:
        return repair_pipeline(problem, assign, k, ctx.contiguous, who=ctx.name)
    except HeuristicError:
        best = best_pipeline(problem, split_pipeline(problem, k, deadline=ctx.deadline))
        if best is None:
            raise
        return best


def finish_heuristic(problem: PlacementProblem, ctx: SolveContext, assign: np.ndarray,
                     order: Any = None, extra: dict[str, Any] | None = None) -> Plan:
    """Wrap a heuristic assignment into a Plan of ``ctx.mode``."""
    stats = {"status": "HEURISTIC", "extra": dict(extra or {})}
    if ctx.mode == "latency":
        return make_latency_plan(problem, assign, ctx.name, order=order, stats=stats,
                                 options=ctx.plan_options())
    assign, stages = pipeline_shape(problem, assign, ctx)
    return make_pipeline_plan(problem, assign, ctx.name, order=stages, stats=stats,
                              options=ctx.plan_options())


@register_solver("single")
class SingleTarget(Solver):
    """``single:<target>``: everything on one target, unsupported ops on the next target in order."""

    takes_arg = True

    def solve(self, problem: PlacementProblem, ctx: SolveContext) -> Plan:
        d = problem.target_index[problem.resolve_target(self.arg, f"solver {ctx.name!r}: ")]
        pref = [d] + [x for x in range(problem.n_targets) if x != d]
        return finish_heuristic(problem, ctx, priority_assign(problem, pref, who=ctx.name))


@register_solver("greedy")
class Greedy(Solver):
    """Offload every op the preferred target supports; the rest to their fastest target."""

    options: ClassVar[dict[str, Any]] = {"prefer": None}

    def solve(self, problem: PlacementProblem, ctx: SolveContext) -> Plan:
        prefer = problem.resolve_target(ctx.options.get("prefer") or problem.targets[0], "greedy: preferred ")
        d = problem.target_index[prefer]
        pref = [d] + [x for x in range(problem.n_targets) if x != d]
        assign = priority_assign(problem, pref, fastest_fallback=True, who=ctx.name)
        return finish_heuristic(problem, ctx, assign)


@register_solver("heft")
class Heft(Solver):
    """HEFT (insertion-based, upward rank, transfers included)."""

    def solve(self, problem: PlacementProblem, ctx: SolveContext) -> Plan:
        assign, _, order = heft(problem, who=ctx.name)
        return finish_heuristic(problem, ctx, assign, order=order)
