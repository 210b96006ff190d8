"""A plan's assignment priced again on another problem of the same model.

A plan keeps its op -> target map; the problem it was priced on can change after it was made: tune's
final rounds and ``experiments.compare`` re-price the problem from the single targets measured in the
same rounds as the plan (their paired figures as each target's whole-model time,
``placer.context.recalibrate``), so that the plan's prediction carries the host's pace of those rounds
(docs/design.md, session 44). :func:`priced_assignment` list-schedules the assignment on the new
problem (:func:`placer.solve.evaluate.make_latency_plan`) and prices each partition by the target that
runs before it (:func:`placer.materialize.in_context.priced_as_run`), as the plan was priced when made;
:func:`priced_at` does so for several plans on a context re-priced from given whole-model times.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from placer.context import recalibrate
from placer.materialize.in_context import priced_as_run
from placer.semantics import assignment_indices
from placer.solve.evaluate import make_latency_plan

__all__ = ["priced_assignment", "priced_at"]


def priced_assignment(problem, graph, assignment: Mapping[str, str], solver: str = "given"):
    """The latency plan that runs each op of ``problem`` where ``assignment`` says, list-scheduled and
    :func:`~placer.materialize.in_context.priced_as_run`. A :class:`KeyError` names an op the assignment
    lacks or a target the problem does not have.

    A colocation group the assignment splits is left out of ``problem`` here: a tune trial's problem
    drops a group no target can hold whole under its knobs and costs
    (:func:`placer.tune.space.latency_problem`), and the trial's plan may then split it; it is priced
    as it was made (session 47: ``placer tune --precision bf16`` stopped at its final rounds,
    "colocation group ['n5', 'n6'] is split")."""
    idx = assignment_indices(problem, assignment)
    split = [g for g in problem.colocate if len({assignment[o] for o in g}) > 1]
    if split:
        problem = dataclasses.replace(problem, colocate=tuple(g for g in problem.colocate if g not in split))
    plan = make_latency_plan(problem, idx, solver)
    return priced_as_run(problem, graph, plan)


def priced_at(ctx, whole_model_ms: Mapping[str, float],
              assignments: Mapping[str, Mapping[str, str]]) -> dict[str, float | None]:
    """``{key: predicted ms}`` of each of ``assignments`` (key -> op -> target map), priced by
    :func:`priced_assignment` on ``ctx``'s problem re-priced from ``whole_model_ms`` (target name ->
    whole-model ms, :func:`placer.context.recalibrate`); None for an assignment that does not cover
    the problem's ops or names a target it lacks."""
    problem = recalibrate(ctx, whole_model_ms).problem
    out: dict[str, float | None] = {}
    for key, assignment in assignments.items():
        try:
            out[key] = priced_assignment(problem, ctx.graph, assignment).makespan_ms
        except KeyError:
            out[key] = None
    return out
