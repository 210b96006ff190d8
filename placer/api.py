"""The Python plan API: profile what is missing, build the problem, solve.

>>> import placer                                                      # doctest: +SKIP
>>> plan = placer.plan("zoo:squeezenet", targets=["onnxruntime", "openvino"], db="profiles.db")
>>> print(plan.summary())
>>> placer.explain(plan, problem)      # why each op went where it went

Everything here is a thin composition of the layers (graph -> profile -> costing -> solve); the
CLI commands call these functions and nothing else.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from placer.errors import PlacerError
from placer.graph.opaque import describe_members, is_opaque


@dataclass
class PlanningContext:
    """What planning produced besides the plan: reused by tune, run and the reports."""

    graph: Any
    targets: list
    store: Any
    table: Any
    links: Any
    problem: Any

    @property
    def precision(self) -> str:
        """``bf16`` if a target computes in bf16 (``openvino-bf16``), else ``f32``: what the plans'
        outputs are checked at (:data:`placer.run.numerics.TOLERANCES`)."""
        return "bf16" if any(getattr(t, "precision", "f32") == "bf16" for t in self.targets) else "f32"

    @property
    def tolerance(self) -> dict[str, float]:
        """``{"rtol": ..., "atol": ...}`` for numerics checks of this context's plans."""
        from placer.run.numerics import tolerance_for

        rtol, atol = tolerance_for(self.precision)
        return {"rtol": rtol, "atol": atol}


def load(model, shapes: Mapping[str, Sequence[int]] | None = None):
    """An OpGraph from a path, a ModelProto or a zoo reference (``zoo:squeezenet``)."""
    from placer import zoo
    from placer.graph import load_graph

    if isinstance(model, (str, os.PathLike)) and str(model).startswith("zoo:"):
        graph = load_graph(zoo.resolve(str(model)), shapes=shapes)
        graph.source = str(model)
        return graph
    return load_graph(model, shapes=shapes)


def open_store(db: str | os.PathLike | None):
    """The profile store at ``db`` (None: the default store, ``$PLACER_DB`` or
    ``~/.cache/placer/profiles.db``)."""
    from placer.profile.store import open_store as _open

    return _open(db)[0]


def prepare(
    model,
    *,
    targets: Sequence[str] | None = None,
    db: str | os.PathLike | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    cost_model=None,
    profile: bool = True,
    whole_models: bool = True,
    calibrate: bool = True,
    segments: bool | Sequence[Sequence[str]] = True,
    progress: bool = False,
    timeout_s: float = 60.0,
    memory_cap_bytes: Mapping[str, float] | None = None,
    pinned: Mapping[str, str] | None = None,
    colocate: Sequence[Sequence[str]] = (),
    say: Callable[[str], None] | None = None,
) -> PlanningContext:
    """Load, profile what is missing (ops, whole model per target, links), build the problem.

    ``say``: called with one line per profiling phase (what it does, then how long it took)."""
    from placer.costing import build_problem, cost_table_from_store, fusion_groups
    from placer.devices import make_targets
    from placer.profile import profile_graph, profile_links, profile_whole_model

    graph = model if hasattr(model, "ops") else load(model, shapes)
    tgts = make_targets(targets)
    real = [t for t in tgts if not getattr(t, "simulated", False)]  # simulated targets are never profiled
    store = open_store(db)
    # runtime fusion groups are profiled as segments and priced whole (issue 9)
    segments = fusion_groups(graph) if segments is True else [list(s) for s in (segments or [])]
    say = say or (lambda msg: None)
    if profile and real:
        from placer.profile.contention import quiet_now

        # rows flagged as measured on a busy machine are taken again, if the machine is quiet now
        refresh = quiet_now()
        names = ", ".join(t.name for t in real)
        with _phase(say, f"profile ops: {len(graph.unique_signatures())} signatures"
                         f"{f' + {len(segments)} fusion segments' if segments else ''} on {names}"):
            res = profile_graph(graph, real, store, timeout_s=timeout_s, progress=progress, segments=segments,
                                retry_contended=refresh)
        if res.remeasured or res.contended:
            say(f"measurement conditions: other processes kept the machine busy during {res.remeasured} "
                f"measurement(s), taken again; {res.contended} stayed contended (flagged; measured again next time)")
        if whole_models:
            with _phase(say, f"profile the whole model on {names}"):
                profile_whole_model(graph, real, store, timeout_s=max(timeout_s, 120.0), retry_contended=refresh)
        if len(real) > 1:
            with _phase(say, "profile the links between targets"):
                profile_links(real, store)
    table = cost_table_from_store(graph, tgts, store, cost_model=cost_model, segments=segments)
    _check_runnable(graph, table, store, tgts)
    links = store.link_model(tgts, missing="skip") if len(tgts) > 1 and len(real) == len(tgts) else None
    provenance = {
        "profile_store": store.store_id,
        "cost_model": getattr(cost_model, "model_id", None) if cost_model is not None else "measured",
        "target_fingerprints": {t.name: t.fingerprint_hash() for t in tgts},
    }
    if len(real) < len(tgts):
        links, memory_cap_bytes = _with_simulated(tgts, real, store, memory_cap_bytes, provenance)
    problem = build_problem(
        graph, table, links, calibrate=calibrate, memory_cap_bytes=memory_cap_bytes, pinned=pinned,
        colocate=colocate, provenance=provenance,
    )
    return PlanningContext(graph, tgts, store, table, links, problem)


@contextlib.contextmanager
def _phase(say: Callable[[str], None], what: str):
    """Say what a phase does and, when it ends, how long it took."""
    say(f"{what} ...")
    t0 = time.monotonic()
    yield
    say(f"{what}: done in {time.monotonic() - t0:.1f} s")


def _check_runnable(graph, table, store, targets) -> None:
    """An op that no target runs (a custom-domain op, a dtype no runtime has kernels for, ...) is a
    user error: name the op, its type and each target's reason instead of an infeasible problem."""
    from placer.errors import TargetError

    bad = np.flatnonzero(~np.isfinite(np.asarray(table.cost_ms, dtype=float)).any(axis=1))
    if not bad.size:
        return
    op = graph.ops[int(bad[0])]
    reasons = []
    for t in targets:
        m = None if getattr(t, "simulated", False) else store.get(op.signature.hash, t)
        why = ((m.reason or m.status) if m is not None else "not supported").strip().splitlines() or ["?"]
        reasons.append(why[0][:200] if why[0].startswith(t.name) else f"{t.name}: {why[0][:200]}")
    kind = f"{op.domain}::{op.op_type}" if op.domain else op.op_type
    if is_opaque(op.domain):
        kind = f"the opaque region of nodes {describe_members(graph, op)}"
    more = f" (and {bad.size - 1} more op(s))" if bad.size > 1 else ""
    raise TargetError(f"op {op.id!r} ({kind}) of {graph.source or graph.name} runs on no target{more}: "
                      + "; ".join(reasons))


def _with_simulated(tgts, real, store, memory_cap_bytes, provenance: dict):
    """Simulated targets (``placer.devices.sim``, issue 6): links from their specs next to the
    measured ones, their spec memory as the default cap, and the provenance says which costs are
    simulated. Returns ``(links, memory_cap_bytes)``; updates ``provenance`` in place."""
    from placer.devices.links import LinkModel
    from placer.devices.sim import spec_link_fits

    measured = store.link_model(real, missing="skip") if len(real) > 1 else LinkModel({})
    fits = dict(measured.fits)
    fits.update({(f.src, f.dst): f for f in spec_link_fits(tgts)})
    links = LinkModel(fits, measured.overhead_ms) if len(tgts) > 1 else None
    caps = dict(memory_cap_bytes or {})
    for t in tgts:
        if getattr(t, "simulated", False) and t.name not in caps and math.isfinite(t.memory_cap_bytes):
            caps[t.name] = float(t.memory_cap_bytes)
    sims = [t for t in tgts if getattr(t, "simulated", False)]
    provenance["simulated_targets"] = [t.name for t in sims]
    provenance["simulated_specs"] = {t.name: {"spec": t.specfile.path, "sha256": t.specfile.sha} for t in sims}
    return links, (caps or None)


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
        return getattr(self.plan, name)

    def __repr__(self) -> str:
        return f"<PlannedModel {self.ctx.graph.name}: {self.plan.summary().splitlines()[0]}>"

    def materialize(self, out_dir: str | os.PathLike | None = None):
        from placer.materialize import materialize

        return materialize(self.ctx.graph, self.plan, out_dir)

    def run(self, inputs="seed:0", *, check: bool = True, requests: int | None = None, pipeline: bool = False):
        """Run the plan (hybrid executor, or the pipeline executor) and check it against ONNX Runtime."""
        from placer.run.api import run_plan

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
    from placer.devices import make_targets
    from placer.solve import check_request, solve

    # cheap checks first: a misspelled solver or target is refused before any profiling
    check_request(mode, solver, time_limit, [t.name for t in make_targets(targets)], options)
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


def honest(ctx: PlanningContext, solved, *, measure: bool = False, say: Callable[[str], None] = lambda m: None):
    """The plan to return instead of ``solved``, and why: ``(plan, note)``.

    A plan on several targets must be predicted at least :data:`CUT_MARGIN` faster than the best
    single-target plan, else the single target is returned. With ``measure``, a plan that passes is
    run against the best single target (interleaved rounds, outputs checked) and the faster one kept.
    """
    from placer.run.bench import PlanBench
    from placer.run.numerics import check_against_reference, load_inputs
    from placer.solve import solve

    if len(set(solved.assignment.values())) <= 1:
        return solved, ""
    singles = []
    for t in ctx.problem.targets:
        p = solve(ctx.problem, "latency", f"single:{t}")
        if len(set(p.assignment.values())) == 1:
            singles.append(p)
    if not singles:
        return solved, ""
    best = min(singles, key=lambda p: p.makespan_ms)
    gain = 1.0 - solved.makespan_ms / best.makespan_ms
    if gain < CUT_MARGIN:
        note = (f"the {solved.solver} plan cuts the model across {len(set(solved.assignment.values()))} targets for a "
                f"predicted gain of {gain:.0%} over {best.solver} ({solved.makespan_ms:.3f} vs "
                f"{best.makespan_ms:.3f} ms), within the pricing's error ({CUT_MARGIN:.0%}): kept the single target")
        say(note)
        return best, note
    if not measure:
        return solved, ""
    from placer.materialize import materialize

    feeds = load_inputs("seed:0", ctx.graph, 4)
    with PlanBench(feeds, rounds=5, per_round=5) as bench:
        for key, p in (("cut", solved), ("single", best)):
            bench.add(key, materialize(ctx.graph, p))
            report = check_against_reference(ctx.graph.model, feeds, bench.outputs(key), **ctx.tolerance)
            if not report.passed:
                raise PlacerError(f"--measure: the {key} plan's outputs differ from the reference: "
                                  f"{report.failures()[0].name}")
        stats = bench.measure(["cut", "single"])
    cut, one = stats["cut"].median_ms, stats["single"].median_ms
    keep = solved if cut < one else best
    note = (f"measured: the {solved.solver} plan {cut:.3f} ms (predicted {solved.makespan_ms:.3f}), "
            f"{best.solver} {one:.3f} ms (predicted {best.makespan_ms:.3f}): kept "
            f"{'the cut plan' if keep is solved else 'the single target'}")
    say(note)
    return keep, note


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
    from placer.report.explain import Explanation

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


#: a stored whole-model time off by more than this factor from one measured in the session is distrusted
STORE_DISAGREES = 1.25


def check_store(ctx: PlanningContext, whole_model_ms: Mapping[str, float],
                say: Callable[[str], None] = lambda m: None) -> list[str]:
    """Compare the store's whole-model times with ones just measured in this session; a stored row off
    by more than :data:`STORE_DISAGREES` either way (taken under other load, or on another day) is
    flagged in the store, so the next campaign measures it again. Returns the targets flagged."""
    from placer.profile.keys import model_key

    flagged = []
    for t in ctx.targets:
        stored, now = ctx.table.whole_model_ms.get(t.name), whole_model_ms.get(t.name)
        if not stored or not now or not math.isfinite(stored) or not math.isfinite(now):
            continue
        ratio = stored / now
        if ratio > STORE_DISAGREES or ratio < 1 / STORE_DISAGREES:
            why = f"whole model stored {stored:.3f} ms, measured {now:.3f} ms in a later session"
            if ctx.store.flag_contended(model_key(ctx.graph), t, why):
                flagged.append(t.name)
                say(f"the store's whole-model time on {t.name} ({stored:.3f} ms) disagrees with this session's "
                    f"({now:.3f} ms, {ratio:.2f}x): priced from this session's; the store row is flagged and will "
                    "be measured again")
    return flagged


def recalibrate(ctx: PlanningContext, whole_model_ms: Mapping[str, float]) -> PlanningContext:
    """The same context with its problem re-priced from whole-model times measured in this session.

    A whole-model profile taken earlier (or while the machine was loaded) can be far off; the
    tuner and the experiments measure every single-target plan interleaved with the candidates,
    and those figures are the better yardstick for the whole-model calibration
    (:func:`placer.costing.fusion_scales`).
    """
    import dataclasses

    from placer.costing import build_problem

    table = dataclasses.replace(ctx.table, whole_model_ms={**dict(ctx.table.whole_model_ms), **dict(whole_model_ms)})
    old = ctx.problem
    problem = build_problem(ctx.graph, table, ctx.links, memory_cap_bytes=None, pinned=dict(old.pinned),
                            colocate=[tuple(g) for g in old.colocate], provenance=dict(old.provenance))
    problem = dataclasses.replace(problem, memory_cap_bytes=old.memory_cap_bytes)
    return dataclasses.replace(ctx, table=table, problem=problem)
