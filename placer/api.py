"""The Python plan API: profile what is missing, build the problem, solve.

>>> import placer                                                      # doctest: +SKIP
>>> plan = placer.plan("zoo:squeezenet", targets=["onnxruntime", "openvino"], db="profiles.db")
>>> print(plan.summary())
>>> placer.explain(plan, problem)      # why each op went where it went

Everything here is a thin composition of the layers (graph -> profile -> costing -> solve); the
CLI commands call these functions and nothing else. The planning context (:func:`prepare`,
:func:`load`, :func:`recalibrate`, :func:`check_store`, :class:`PlanningContext`) lives in
:mod:`placer.context`, below the tuner, and is re-exported here.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from placer.context import (
    STORE_DISAGREES,
    PlanningContext,
    check_store,
    load,
    open_store,
    prepare,
    recalibrate,
)
from placer.devices import make_targets
from placer.errors import PlacerError, first_line
from placer.materialize import materialize
from placer.materialize.in_context import priced_as_run
from placer.report.explain import Explanation
from placer.run.api import run_plan
from placer.run.bench import PlanBench
from placer.run.numerics import check_against_reference, load_inputs
from placer.run.spells import quiet_choice, spell_watches, unread_spell
from placer.solve import check_request, solve

__all__ = ["CUT_MARGIN", "STORE_DISAGREES", "PlannedModel", "PlanningContext", "check_store", "explain",
           "honest", "load", "open_store", "plan", "prepare", "recalibrate"]

class PlannedModel:
    """What ``placer.plan(...)`` returns: the solver's :class:`~placer.plan.Plan` with its model and
    problem, so that it can be run, explained and saved. Unknown attributes read through to the
    Plan (``pm.makespan_ms``, ``pm.assignment``, ``pm.summary()`` ...).
    """

    def __init__(self, plan, ctx: PlanningContext, note: str = ""):
        self.plan = plan
        self.ctx = ctx
        #: why the plan differs from the solver's, if it does (:func:`honest`)
        self.note = note

    def __getattr__(self, name: str):
        # copy and pickle look up special names on an instance not yet initialised: no plan to forward to
        if name == "plan" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.plan, name)

    def __repr__(self) -> str:
        return f"<PlannedModel {self.ctx.graph.name}: {self.plan.summary().splitlines()[0]}>"

    def materialize(self, out_dir: str | os.PathLike | None = None):
        return materialize(self.ctx.graph, self.plan, out_dir)

    def run(self, inputs="seed:0", *, check: bool = True, requests: int | None = None, pipeline: bool = False):
        """Run the plan (hybrid executor, or the pipeline executor) and check it against ONNX Runtime."""
        return run_plan(self.materialize(), inputs, check=check, requests=requests,
                        pipeline=pipeline or self.plan.mode == "pipeline")

    def explain(self):
        """Per op: its cost on every target, where it went and why (:func:`explain`); print it for a table."""
        return explain(self.plan, self.ctx.problem, graph=self.ctx.graph)

    def save(self, out_dir: str | os.PathLike):
        """Write the PLAN_DIR (plan.json, stage_config.json, Relax module, partitions)."""
        return self.materialize(out_dir)


def plan(
    model,
    *,
    targets: Sequence[str] | None = None,
    mode: str = "latency",
    solver: str = "cpsat",
    db: str | os.PathLike | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    time_limit: float = 10.0,
    num_stages: int | None = None,
    seed: int = 0,
    cost_model=None,
    say: Callable[[str], None] | None = None,
    measure: bool = False,
    **options: Any,
):
    """Plan ``model`` on ``targets`` (profiling what is missing): a :class:`PlannedModel`.

    In latency mode a plan that cuts the model must be predicted clearly faster than the best
    single target, and with ``measure`` must measure faster too, or the single target is returned
    (:func:`honest`; ``PlannedModel.note`` says why).

    >>> pm = placer.plan("zoo:squeezenet", targets=["onnxruntime", "openvino"])   # doctest: +SKIP
    >>> pm.makespan_ms, pm.explain()[0], pm.run("seed:0").measurement.latency_p50_ms  # doctest: +SKIP
    """
    # cheap checks first: a misspelled solver or target is refused before any profiling
    check_request(mode, solver, time_limit, [t.name for t in make_targets(targets)], options,
                  num_stages=num_stages)
    ctx = prepare(model, targets=targets, db=db, shapes=shapes, cost_model=cost_model, say=say)
    solved = solve(ctx.problem, mode, solver, time_limit=time_limit, num_stages=num_stages, seed=seed, **options)
    planned = PlannedModel(solved, ctx)
    if mode == "latency" and not solver.startswith("single:"):
        planned.plan, planned.note = honest(ctx, solved, measure=measure, say=say or (lambda msg: None))
    return planned


#: a plan that cuts the model is kept only if its predicted gain over the best single target exceeds
#: this: cut plans measured a median 1.5x their per-op prediction (docs/design.md), so a smaller
#: predicted gain is within the pricing's error
CUT_MARGIN = 0.10
#: with ``measure``, single-target plans priced within this factor of the best one are measured too: a
#: 2-thread target profiled in one of the machine's slow spells is priced up to 1.5x its time
#: (docs/design.md, "Slow spells the core probe does not see")
RIVALS_WITHIN = 1.6
#: with ``measure``, the plans are compared over this many interleaved rounds ...
MEASURE_ROUNDS = 5
#: ... and this many more when the two fastest are within TIE_BAND of each other, round by round: in a
#: slow spell over five rounds, two single targets 5% apart measured 7% apart the other way (session 17)
EXTRA_ROUNDS = 10
TIE_BAND = 1.10


def honest(ctx: PlanningContext, solved, *, measure: bool = False, say: Callable[[str], None] = lambda m: None):
    """The plan to return instead of ``solved``, and why: ``(plan, note)``.

    A plan on several targets is first priced as its partitions will run
    (:func:`placer.materialize.in_context.priced_as_run`); it must then be predicted at least
    :data:`CUT_MARGIN` faster than the best single-target plan, else the single target is returned.
    With ``measure``, the plan chosen so is run against every single-target plan priced within
    :data:`RIVALS_WITHIN` of the best one (interleaved rounds, outputs checked, compared round by
    round) and the fastest kept; rounds in which a runtime on all cores ran at its 1-thread pace
    count as slowed, and where such a spell of the host lasts through the rounds a 1-thread target
    that won by a little gives way to the same runtime on all cores (:mod:`placer.run.spells`).
    With ``measure`` the chosen plan's outputs are checked even when no rival is priced near it; a
    plan that fails the check (a bf16 target on a model that does not take bf16) gives way to the
    fastest-priced single-target plan that passes, and the note says so.
    """
    singles = []
    for t in ctx.problem.targets:
        p = solve(ctx.problem, "latency", f"single:{t}")
        if set(p.assignment.values()) == {t}:  # a target that runs no op puts it all on another
            singles.append(p)
    chosen, note = _priced_choice(ctx, solved, singles, say)
    if not measure or not singles:
        return chosen, note
    return _measured_choice(ctx, chosen, note, singles, say)


def _priced_choice(ctx: PlanningContext, solved, singles: Sequence, say: Callable[[str], None]):
    """``solved``, or the best single-target plan where the prices cannot support a cut (see
    :func:`honest`)."""
    if len(set(solved.assignment.values())) <= 1 or not singles:
        return solved, ""
    # each partition priced by the target that runs before it
    solved = priced_as_run(ctx.problem, getattr(ctx, "graph", None), solved)
    best = min(singles, key=lambda p: p.makespan_ms)
    if best.makespan_ms <= 0:  # every op below the target's call overhead (a tiny model): nothing beats it
        note = f"{best.solver} is priced at 0 ms (every op below its call overhead): kept the single target"
        say(note)
        return best, note
    gain = 1.0 - solved.makespan_ms / best.makespan_ms
    if gain < CUT_MARGIN:
        note = (f"the {solved.solver} plan cuts the model across {len(set(solved.assignment.values()))} targets for a "
                f"predicted gain of {gain:.0%} over {best.solver} ({solved.makespan_ms:.3f} vs "
                f"{best.makespan_ms:.3f} ms), within the pricing's error ({CUT_MARGIN:.0%}): kept the single target")
        say(note)
        return best, note
    return solved, ""


def _measured_choice(ctx: PlanningContext, chosen, note: str, singles: Sequence, say: Callable[[str], None]):
    """``chosen`` against the single-target plans priced within :data:`RIVALS_WITHIN` of the best one,
    measured interleaved; the fastest (round by round) and a note that gives the figures.

    The outputs of ``chosen`` are checked even when no rival is near it: a plan on a target that
    computes in bf16 can fail the check on a model that does not take bf16 (resnet50 did, session 50).
    Such a plan is left out, said so, and the fastest-priced single-target plan on another target
    stands in for it, checked and measured the same way; with none left, a PlacerError."""
    best = min(singles, key=lambda p: p.makespan_ms)
    rivals = [p for p in singles if dict(p.assignment) != dict(chosen.assignment)
              and p.makespan_ms <= RIVALS_WITHIN * max(best.makespan_ms, 1e-9)]
    plans = {"chosen": chosen, **{f"rival {i}": p for i, p in enumerate(rivals)}}
    feeds = load_inputs("seed:0", ctx.graph, 4)
    targets = getattr(ctx, "targets", None) or []
    stored = dict(getattr(getattr(ctx, "table", None), "whole_model_ms", None) or {})
    dropped: list[str] = []
    wrong = ""  # why the chosen plan cannot be returned
    with PlanBench(feeds, rounds=MEASURE_ROUNDS, per_round=5) as bench:
        for key, p in list(plans.items()):
            why = _cannot_stand(ctx, bench, feeds, key, p)
            if not why:
                continue
            if key == "chosen":  # the plan itself is wrong: another must stand in for it
                wrong = why
                break
            dropped.append(f"{p.solver} ({why})")  # a rival that cannot stand in for it is no rival
            del plans[key]
        if not wrong:
            if dropped:
                say(f"--measure: left out {'; '.join(dropped)}")
            if len(plans) == 1:
                if not dropped:
                    return chosen, note
                note_dropped = f"measured nothing: its rivals left out: {'; '.join(dropped)}"
                return chosen, (f"{note}; {note_dropped}" if note else note_dropped)
            keep, measured = _fastest(bench, plans, targets, stored)
    if wrong:
        return _stand_in(ctx, chosen, note, wrong, singles, say)
    if dropped:
        measured += f" (left out: {'; '.join(dropped)})"
    say(measured)
    return plans[keep], (f"{note}; {measured}" if note else measured)


def _cannot_stand(ctx: PlanningContext, bench, feeds, key: str, plan) -> str:
    """Why ``plan`` (added to ``bench`` as ``key``) cannot be returned: it does not compile or run, or its
    outputs fail the check at the context's tolerance; "" when it can."""
    try:
        bench.add(key, materialize(ctx.graph, plan))
        report = check_against_reference(ctx.graph.model, feeds, bench.outputs(key), **ctx.tolerance)
        return "" if report.passed else f"its outputs differ from the reference: {report.failures()[0].name}"
    except PlacerError as exc:
        return first_line(exc)


def _stand_in(ctx: PlanningContext, chosen, note: str, wrong: str, singles: Sequence, say: Callable[[str], None]):
    """The plan to return instead of ``chosen``, which cannot stand (``wrong`` says why): the
    fastest-priced single-target plan on another assignment, itself checked and measured against its
    own rivals (:func:`_measured_choice`); a PlacerError when no single-target plan is left."""
    rest = [p for p in singles if dict(p.assignment) != dict(chosen.assignment)]
    if not rest:
        raise PlacerError(f"--measure: the {chosen.solver} plan: {wrong}; no single-target plan is left to "
                          "stand in for it")
    nxt = min(rest, key=lambda p: p.makespan_ms)
    left = f"left out the {chosen.solver} plan ({wrong})"
    say(f"--measure: {left}; {nxt.solver} stands in for it")
    kept, after = _measured_choice(ctx, nxt, "", rest, say)
    return kept, "; ".join(x for x in (note, left, after or f"kept {kept.solver}") if x)


def _fastest(bench, plans: dict, targets, stored) -> tuple[str, str]:
    """Measure ``plans`` (all in ``bench``) interleaved: the key of the fastest round by round, and the
    note that gives the figures (see :func:`honest`)."""
    # the single-target plans measured, by target: a runtime measured at 1 thread and on all cores
    # reads the host's spells the probes miss, against the store's whole-model times (placer.run.spells)
    keys_of = {next(iter(set(p.assignment.values()))): k for k, p in plans.items()
               if len(set(p.assignment.values())) == 1}
    bench.watches = spell_watches(targets, keys_of, stored)
    # a spell of slowed cores over most rounds: up to EXTRA_ROUNDS more, each after waiting for
    # quiet cores (within the bench's QUIET_WINDOW_S)
    stats = bench.measure(list(plans), until_quiet=EXTRA_ROUNDS)
    ratio = _ratios_to_chosen(bench, stats, plans)
    rounds = MEASURE_ROUNDS + bench.extra_rounds
    if close_call(ratio):  # the rounds so far cannot tell them apart: more of them, counted with these
        stats = bench.measure(list(plans), rounds=EXTRA_ROUNDS)
        ratio = _ratios_to_chosen(bench, stats, plans)
        rounds += EXTRA_ROUNDS
    keep = min(plans, key=lambda k: ratio[k])
    gave = ""
    spell = unread_spell(targets, keys_of, stored, ratio.get)
    swap = quiet_choice(keep, spell, ratio.get) if spell else None
    if swap is not None:  # a spell that lasted: the all-core target the store has faster when quiet
        gave = (f" instead of {plans[keep].solver}: a spell of the host (all cores at their 1-thread pace, "
                f"{swap.measured_ratio:.2f}x its time against the store's {swap.stored_ratio:.2f}x) lasted "
                "through the rounds, and the store has it the faster on quiet cores")
        keep = swap.all_key
    figures = ", ".join(f"{plans[k].solver} {stats[k].median_ms:.3f} ms (predicted {plans[k].makespan_ms:.3f}"
                        + (f", {ratio[k]:.3f}x its time round by round" if k != "chosen" else "") + ")"
                        for k in plans)
    return keep, f"measured in {rounds} rounds: {figures}: kept {plans[keep].solver}{gave}"


def _ratios_to_chosen(bench, stats, plans) -> dict[str, float]:
    """How many times longer each plan's requests took than the chosen plan's, round by round (by the
    medians where no round is shared)."""
    ratio = {k: (bench.paired_ratio(k, "chosen") if k != "chosen" else 1.0) for k in plans}
    return {k: (v if v is not None else stats[k].median_ms / stats["chosen"].median_ms)
            for k, v in ratio.items()}


def close_call(ratio: Mapping[str, float]) -> bool:
    """Whether the two fastest of the measured plans (``ratio``: each plan's time over the chosen
    one's) are within :data:`TIE_BAND` of each other."""
    vals = sorted(ratio.values())
    return len(vals) > 1 and vals[1] <= TIE_BAND * vals[0]


def explain(plan, problem, graph=None):
    """For each op: its cost on every target, where it went and why.

    Returns a :class:`placer.report.explain.Explanation`: a list of one dict per op (``op``,
    ``op_type``, ``target``, ``reason``, ``cheapest``, ``cost_ms`` {target: ms}, ``gain_forgone_ms``)
    that prints as a table (``print(...)``, rich, IPython) and has ``.to_markdown()``. ``graph`` (the
    model's OpGraph) only adds the op types.

    ``reason`` is one of ``"pinned"``, ``"only supported target"``, ``"memory"`` (a cheaper
    target exists but its cap forbade it), ``"cheapest"`` (it went to its cheapest target), or
    ``"transfers"`` (a cheaper target exists; moving the op's tensors there would cost more than
    the gain).
    """
    op_types = {op.id: op.op_type for op in graph.ops} if graph is not None else {}
    rows = []
    caps = np.asarray(problem.memory_cap_bytes, dtype=float)
    used = {t: 0.0 for t in problem.targets}
    wb = np.asarray(problem.weight_bytes, dtype=float)
    for i, op in enumerate(problem.ops):
        used[plan.assignment[op]] += wb[i]
    for i, op in enumerate(problem.ops):
        costs = {t: float(problem.cost_ms[i, j]) for j, t in enumerate(problem.targets)}
        chosen = plan.assignment[op]
        finite = {t: c for t, c in costs.items() if math.isfinite(c)}
        cheapest = min(finite, key=finite.get)
        if op in problem.pinned:
            reason = "pinned"
        elif len(finite) == 1:
            reason = "only supported target"
        elif finite[chosen] <= finite[cheapest] + 1e-12:
            reason = "cheapest"
        elif used[cheapest] + wb[i] > caps[problem.targets.index(cheapest)]:
            reason = "memory"
        else:
            reason = "transfers"
        rows.append({"op": op, "op_type": op_types.get(op), "target": chosen, "reason": reason,
                     "cheapest": cheapest, "cost_ms": costs, "gain_forgone_ms": finite[chosen] - finite[cheapest]})
    return Explanation(rows, problem.targets)
