"""The planning context: a model loaded, profiled where the store lacks it, and priced as a problem.

:func:`prepare` composes the layers below it (graph and zoo -> profile -> costing -> problem) into
a :class:`PlanningContext`; :func:`recalibrate` re-prices it from whole-model times measured in a
session and :func:`check_store` flags the store rows those times contradict. The plan API
(:mod:`placer.api`, which re-exports these) and the tuner (:mod:`placer.tune`) both start here, so
the tuner does not import the API above it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from placer import zoo
from placer.costing import (
    build_problem,
    cost_table_from_store,
    fusion_groups,
    pair_pricing,
    partition_pricing,
    region_calibrated,
)
from placer.devices import make_targets
from placer.devices.links import LinkModel
from placer.devices.sim import spec_link_fits
from placer.errors import TargetError
from placer.graph.opaque import describe_members, is_opaque
from placer.profile import profile_graph, profile_links, profile_whole_model
from placer.profile.contention import CONTENDED, CpuWindow, quiet_now
from placer.profile.keys import model_key, partition_key, partition_prefix
from placer.profile.report import drift_line, futile_line, second_window_line
from placer.profile.store import open_store as _open_store
from placer.run.numerics import load_inputs, tolerance_for
from placer.run.partition_probe import measure_probes, probe_pairs

__all__ = ["STORE_DISAGREES", "PlanningContext", "check_store", "load", "open_store", "prepare",
           "recalibrate", "record_partitions", "with_entry"]


@dataclass
class PlanningContext:
    """What planning produced besides the plan: reused by tune, run and the reports."""

    graph: Any
    targets: list
    store: Any
    table: Any
    links: Any
    problem: Any
    #: partitions timed as they ran (probe plans, measured plans): what the problem's per-target
    #: entry cost (``partition_overhead_ms``) and cut scale were learned from
    #: (:func:`placer.costing.partition_pricing`)
    partition_rows: list = dataclasses.field(default_factory=list)

    @property
    def precision(self) -> str:
        """``bf16`` if a target computes in bf16 (``openvino-bf16``), else ``f32``: what the plans'
        outputs are checked at (:data:`placer.run.numerics.TOLERANCES`)."""
        return "bf16" if any(getattr(t, "precision", "f32") == "bf16" for t in self.targets) else "f32"

    @property
    def tolerance(self) -> dict[str, float]:
        """``{"rtol": ..., "atol": ...}`` for numerics checks of this context's plans."""
        rtol, atol = tolerance_for(self.precision)
        return {"rtol": rtol, "atol": atol}


def load(model, shapes: Mapping[str, Sequence[int]] | None = None):
    """An OpGraph from a path, a ModelProto or a zoo reference (``zoo:squeezenet``):
    :func:`placer.zoo.load_graph`."""
    return zoo.load_graph(model, shapes)


def open_store(db: str | os.PathLike | None):
    """The profile store at ``db`` (None: the default store, ``$PLACER_DB`` or
    ``~/.cache/placer/profiles.db``)."""
    return _open_store(db)[0]


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
    probe_partitions: bool = True,
    progress: bool = False,
    timeout_s: float = 60.0,
    memory_cap_bytes: Mapping[str, float] | None = None,
    pinned: Mapping[str, str] | None = None,
    colocate: Sequence[Sequence[str]] = (),
    say: Callable[[str], None] | None = None,
    hurry_after: float | None = None,
) -> PlanningContext:
    """Load, profile what is missing (ops, whole model per target, links), build the problem.

    ``probe_partitions``: with several real targets, time probe plans that alternate them
    (:mod:`placer.run.partition_probe`) unless the store has them, and charge what a partition
    costs beyond its ops' prices as the problem's per-target entry cost.
    ``say``: called with one line per profiling phase (what it does, then how long it took).
    ``hurry_after``: a ``time.monotonic()`` past which profiling measures nothing twice (a caller's
    budget; :func:`~placer.profile.campaign.profile_graph`)."""
    graph = model if hasattr(model, "ops") else load(model, shapes)
    tgts = make_targets(targets)
    real = [t for t in tgts if not getattr(t, "simulated", False)]  # simulated targets are never profiled
    store = open_store(db)
    # runtime fusion groups are profiled as segments and priced whole (issue 9)
    segments = fusion_groups(graph) if segments is True else [list(s) for s in (segments or [])]
    say = say or (lambda msg: None)
    if profile and real:
        # rows flagged as measured on a busy machine are taken again, if the machine is quiet now
        refresh = quiet_now()
        names = ", ".join(t.name for t in real)
        with _phase(say, f"profile ops: {len(graph.unique_signatures())} signatures"
                         f"{f' + {len(segments)} fusion segments' if segments else ''} on {names}"):
            res = profile_graph(graph, real, store, timeout_s=timeout_s, progress=progress, segments=segments,
                                retry_contended=refresh, hurry_after=hurry_after, probes=None)
        if res.probes:  # rows stored an hour or more ago were checked (profile.campaign.auto_probes)
            say(drift_line(store, real, res))
        if res.remeasured or res.contended:
            say(f"measurement conditions: other processes kept the machine busy, or the host slowed a core, "
                f"during {res.remeasured} measurement(s), taken again; {res.contended} stayed disturbed "
                "(flagged; measured again next time)")
        if res.second_windows:
            say(second_window_line(res))
        if res.futile:
            say(futile_line(res))
        if res.hurried:
            say(f"profiling reached its share of the budget: {res.hurried} repeat(s) left out "
                "(disturbed rows kept flagged, to be measured again next time; second windows left for "
                "the next run)")
        if whole_models:
            with _phase(say, f"profile the whole model on {names}"):
                profile_whole_model(graph, real, store, timeout_s=max(timeout_s, 120.0),
                                    retry_contended=refresh, hurry_after=hurry_after)
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
    rows: list[dict] = []
    if probe_partitions and len(real) > 1 and len(real) == len(tgts):
        rows = _partition_rows(graph, problem, real, store, measure=profile, say=say)
    return PlanningContext(graph, tgts, store, table, links, with_entry(problem, rows), rows)


def with_entry(problem, rows: Sequence[Mapping[str, Any]]):
    """``problem`` priced as partitions timed as they ran (``rows``) say a cut plan runs: each
    target's op costs redistributed along the model (:func:`placer.costing.region_calibrated`;
    one-target plans keep their price), then the per-target entry cost per tensor received and the
    cut scale on its ops (:func:`placer.costing.partition_pricing`), and the same by the target that
    runs before a partition in the provenance (:func:`placer.costing.pair_pricing`: what
    :func:`placer.materialize.in_context.priced_as_run` prices a made plan with); unchanged without
    rows."""
    if not rows:
        return problem
    problem = region_calibrated(problem, rows)
    pricing = partition_pricing(problem, rows)
    prov = {**dict(problem.provenance),
            "entry_ms": {t: float(e) for t, e in zip(problem.targets, pricing.entry_ms)},
            "cut_scale": {t: float(c) for t, c in zip(problem.targets, pricing.cut_scale)},
            "entry_rows": len(rows),
            **pair_pricing(problem, rows).to_provenance(problem.targets)}
    return dataclasses.replace(problem, partition_overhead_ms=pricing.entry_ms, cut_scale=pricing.cut_scale,
                               provenance=prov)


def _partition_rows(graph, problem, targets, store, *, measure: bool, say) -> list[dict]:
    """The store's partitions of ``graph`` timed in context on these targets (same fingerprints).
    When ``measure``, probe plans are timed first for the pairs the store lacks, and again for
    pairs timed while other processes kept the machine busy if it is quiet now."""
    hashes = {t.name: store.target_hash(t) for t in targets}

    def stored() -> list[dict]:
        return [r for r in store.partition_runs(partition_prefix(graph)) if hashes.get(r["target"]) == r["target_hash"]]

    rows = stored()
    have = {r.get("probe") for r in rows}
    busy = {r.get("probe") for r in rows if r.get("contended")}
    pairs = probe_pairs(problem, list(hashes))
    missing = [p for p in pairs if f"probe:{p[0]}|{p[1]}" not in have]
    if busy and measure and quiet_now():
        missing += [p for p in pairs if f"probe:{p[0]}|{p[1]}" in busy]
    if not (measure and missing):
        return rows
    with _phase(say, f"time {len(missing)} probe plan(s) cutting the model between targets"), CpuWindow() as window:
        new = measure_probes(graph, problem, load_inputs("seed:0", graph, 2), pairs=missing, say=say)
    contended = window.others is not None and window.others >= CONTENDED
    if contended:
        say(f"measurement conditions: other processes used {window.others:.0%} of the CPU while the probe plans "
            "ran: their partition costs are kept but flagged, and taken again when the machine is quiet")
    record_partitions(store, graph, targets, new, "probe", contention=window.others)
    return stored()


def record_partitions(store, graph, targets, rows: Sequence[Mapping[str, Any]], source: str, *,
                      contention: float | None = None) -> int:
    """Store partitions of ``graph`` timed as they ran (rows of :func:`placer.run.partition_probe.measure_probes`
    or the tuner's measured plans: ``target``, ``prev``, ``ops``, ``n_inputs``, ``median_ms``), keyed by
    their ops and the target before them; ``contention`` (the share of the CPU other processes used
    meanwhile) flags them for re-measuring. Rows on targets not in ``targets`` are skipped. Returns
    how many were stored."""
    hashes = {t.name: store.target_hash(t) for t in targets}
    contended = contention is not None and contention >= CONTENDED
    n = 0
    for r in rows:
        if r.get("target") not in hashes or r.get("median_ms") is None or not math.isfinite(float(r["median_ms"])):
            continue
        ms = float(r["median_ms"])
        store.put(partition_key(graph, r["ops"], r.get("prev")), hashes[r["target"]], kind="partition", status="ok",
                  median_ms=ms, net_ms=ms, p10_ms=r.get("p10_ms", ms), p90_ms=r.get("p90_ms", ms), n=int(r.get("n", 1)),
                  meta={"ops": list(r["ops"]), "prev": r.get("prev"), "n_inputs": int(r.get("n_inputs") or 1),
                        "probe": r.get("probe"), "source": source, "contention": contention,
                        "contended": contended})
        n += 1
    return n


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


#: a stored whole-model time off by more than this factor from one measured in the session is distrusted
STORE_DISAGREES = 1.25


def check_store(ctx: PlanningContext, whole_model_ms: Mapping[str, float],
                say: Callable[[str], None] = lambda m: None) -> list[str]:
    """Compare the store's whole-model times with ones just measured in this session; a stored row off
    by more than :data:`STORE_DISAGREES` either way (taken under other load, or on another day) is
    flagged in the store, so the next campaign measures it again. Returns the targets flagged."""
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
    table = dataclasses.replace(ctx.table, whole_model_ms={**dict(ctx.table.whole_model_ms), **dict(whole_model_ms)})
    old = ctx.problem
    problem = build_problem(ctx.graph, table, ctx.links, memory_cap_bytes=None, pinned=dict(old.pinned),
                            colocate=[tuple(g) for g in old.colocate], provenance=dict(old.provenance))
    problem = dataclasses.replace(problem, memory_cap_bytes=old.memory_cap_bytes)
    return dataclasses.replace(ctx, table=table, problem=with_entry(problem, ctx.partition_rows))
