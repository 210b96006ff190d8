"""Profiling campaigns: measure what the store lacks, each measurement isolated in a worker.

``profile_graph(graph, targets, store)`` walks the graph's unique signatures x targets (plus
each target's call overhead, the whole model per target and, optionally, segments and links),
skips everything the store already has (a rerun measures nothing), records static
``supports() == False`` as ``unsupported`` without running, and sends the rest to one
long-lived worker process per target (:mod:`placer.profile.worker`), one request at a time:

* the single-op model (``OpGraph.single_op_model``: weights as constants) travels as bytes;
* the worker compiles it, runs it on seeded random inputs, warms up and times
  ``CompiledModel.run`` until the median is stable (:mod:`placer.profile.timing`);
* a compile error or MemoryError -> ``unsupported``; an exception while running -> ``error``;
  the worker dying (segfault, abort, OOM kill) -> ``crash``; no answer within ``timeout_s`` ->
  the worker is killed, ``timeout``. The worker is restarted for the next request and the
  campaign goes on.

Every result is written in its own transaction, so killing the campaign (even SIGKILL) loses at
most the measurement in flight, and two campaigns may share a store (each re-checks the store
right before measuring). Only one worker measures at a time (timings are not disturbed by the
profiler itself); workers of finished targets are stopped.

This module holds the campaigns (which tasks to run, the links, the totals); the tasks are run by
:mod:`placer.profile.engine`, in the worker processes of :mod:`placer.profile.supervisor`, with
the bars of :mod:`placer.profile.progress`, into a :mod:`placer.profile.results` object.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from placer import zoo
from placer.devices import make_target, make_targets
from placer.errors import ProfileError, TargetUnavailable, first_line
from placer.graph import OpGraph
from placer.profile import keys as K
from placer.profile.anchors import anchor_graph
from placer.profile.drift import row_session
from placer.profile.engine import CONTENDED_ATTEMPTS, FAILED, Engine, Task
from placer.profile.links import DEFAULT_LINK_SIZES, LINK_OPS, fit_cut_points, fit_points
from placer.profile.progress import progress_bar
from placer.profile.results import CampaignResult, TargetTotals
from placer.profile.store import OVERHEAD_KEY, Measurement, ProfileStore, open_store
from placer.profile.supervisor import STARTUP_TIMEOUT_S, InProcessWorker, WorkerDied, WorkerProcess
from placer.profile.timing import TimingConfig

#: the campaigns, and (re-exported) what moved to placer.profile.results, .engine and .supervisor
__all__ = [
    "AUTO_PROBES",
    "CONTENDED_ATTEMPTS",
    "DEFAULT_TIMEOUT_S",
    "FAILED",
    "RECHECK_AFTER_S",
    "STARTUP_TIMEOUT_S",
    "CampaignResult",
    "InProcessWorker",
    "TargetTotals",
    "WorkerDied",
    "WorkerProcess",
    "auto_probes",
    "profile_graph",
    "profile_links",
    "profile_model",
    "profile_segment",
    "profile_whole_model",
]

DEFAULT_TIMEOUT_S = 60.0

#: ``profile_graph(probes=None)``: stored op rows this old (s) or older are checked by probes ...
RECHECK_AFTER_S = 3600.0
#: ... this many of them per target, with the anchors (:func:`auto_probes`)
AUTO_PROBES = 8


def _resolve_targets(targets) -> list:
    if targets is None:
        return make_targets(None)
    out = []
    for t in targets:
        out.append(make_target(t) if isinstance(t, str) else t)
    names = [t.name for t in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ProfileError(f"target listed twice: {', '.join(sorted(dup))}")
    return out


def _measurable(tlist: list, res: CampaignResult) -> list:
    """Drop simulated targets (known only by a spec: nothing to run); ProfileError if none is left."""
    sim = [t.name for t in tlist if getattr(t, "simulated", False)]
    if sim and len(sim) == len(tlist):
        raise ProfileError(f"{', '.join(sim)}: simulated targets cannot be profiled (their costs come from the spec)")
    if sim:
        res.problems.append(f"skipped simulated targets {', '.join(sim)} (their costs come from the spec)")
    return [t for t in tlist if not getattr(t, "simulated", False)]


def _min_timeout(target, timeout_s: float) -> float:
    return max(float(timeout_s), float(getattr(target, "profile_timeout_s", 0.0) or 0.0))


def _overhead_task(target, timeout_s) -> Task:
    return Task(OVERHEAD_KEY, "overhead", target, "overhead", K.overhead_model, _min_timeout(target, timeout_s))


def _static_support(target, ops) -> tuple[bool, str]:
    for op in ops:
        ok, why = target.supports(op.op_type, op.domain)
        if not ok:
            return False, f"{target.name}: {op.op_type}: {why}" if why else f"{target.name}: {op.op_type} not supported"
    return True, ""


def _segment_task(graph, op_ids, target, timeout_s) -> tuple[Task, dict]:
    row = K.segment_signature_row(graph, op_ids)
    key = row["key"]
    ops = [graph.op(i) for i in op_ids]
    ids = list(op_ids)
    return (
        Task(key, "segment", target, f"segment[{len(ids)}] {row['op_type']}"[:50],
             lambda: graph.subgraph_model(ids, name=key.replace(":", "_")), _min_timeout(target, timeout_s),
             _static_support(target, ops)),
        row,
    )


def profile_graph(
    graph,
    targets: Iterable | None = None,
    store: ProfileStore | str | os.PathLike | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    model_timeout_s: float | None = None,
    isolate: bool = True,
    progress: bool = True,
    whole_model: bool = True,
    links: bool = True,
    segments: Iterable[Sequence[str]] | None = None,
    timing: TimingConfig | None = None,
    link_sizes: Sequence[int] | None = None,
    retry_failed: bool = False,
    seed: int = 0,
    colocate: bool = True,
    retry_contended: bool = False,
    second_window: bool | str = True,
    hurry_after: float | None = None,
    probes: int | None = 0,
) -> CampaignResult:
    """Profile every unique op signature of ``graph`` on every target; measure only what is missing.

    ``targets``: Target objects or names (None: the defaults). ``store``: a ProfileStore or a path.
    Also measures each target's call overhead (stored apart; op rows carry ``net_ms`` =
    median - overhead), the whole model per target (``whole_model``), the given ``segments``
    (op-id lists, profiled as one unit each) and the hand-off links between every pair of
    targets (``links``). ``timeout_s`` bounds one measurement (compile + timing);
    ``model_timeout_s`` (default 10x) the whole-model ones. ``retry_failed`` re-measures rows
    whose status is error/timeout/crash; ``retry_contended`` rows flagged as measured while other
    processes kept the machine busy (:mod:`placer.profile.contention`). ``colocate``: each worker also imports the other
    targets' runtimes, as the executor's process does (they slow each other's calls). ``second_window``:
    each op, segment and whole model is measured again after the first pass and the links, in a fresh
    worker, and the lower median kept (slow spells of seconds with no other process busy: docs/design.md,
    "A second window for multi-thread measurements"); a one-thread target takes them on probation
    (:data:`~placer.profile.engine.ONE_THREAD_PROBATION`; ``$PLACER_ONE_THREAD_WINDOWS=0``: none) unless
    ``second_window="all"``. ``hurry_after`` (a ``time.monotonic()`` value, a caller's budget): past it
    nothing is measured twice; a disturbed row is kept flagged for a later campaign, and the second
    windows are left out (:meth:`~placer.profile.engine.Engine._hurried`; ``hurried`` counts them), their
    rows marked due: a later campaign takes them (``windows_due`` counts those it took).
    ``probes`` > 0: each target measures again, at the start and the end of its work, the
    :mod:`~placer.profile.anchors` and up to ``probes`` ops of ``graph`` stored by other sessions, so
    that :mod:`placer.profile.drift` can put this session's rows on the scale of the others (every
    row names its session, ``CampaignResult.session``). ``probes=None``: :data:`AUTO_PROBES` when some
    target holds op rows of ``graph`` that another session stored :data:`RECHECK_AFTER_S` or more ago
    (:func:`auto_probes`), else none: rows stored within the hour are trusted as they are.
    """
    if second_window not in (True, False, "all"):
        raise ProfileError(f"second_window must be True, False or 'all', got {second_window!r}")
    t_start = time.perf_counter()
    res = CampaignResult()
    tlist = _measurable(_resolve_targets(targets), res)
    st, owned = open_store(store)
    res.store_path = st.path
    try:
        tlist = _register_reachable(st, tlist, res)
        uniq = graph.unique_signatures()
        res.unique_signatures = len(uniq)
        mto = model_timeout_s if model_timeout_s is not None else 10.0 * timeout_s
        tasks, rows = _graph_tasks(graph, uniq, tlist, timeout_s=timeout_s, model_timeout_s=mto,
                                   whole_model=whole_model, segments=[list(s) for s in (segments or [])])
        st.register_signatures({r["key"]: r for r in rows}.values())
        res.session = uuid.uuid4().hex[:12]
        if probes is None:
            probes = auto_probes(st, uniq, tlist)
        probe_tasks = (_probe_tasks(st, graph, uniq, tlist, probes, res.session, seed, timeout_s)
                       if probes > 0 else {})
        eng = Engine(st, timeout_s=timeout_s, isolate=isolate, progress=progress, timing=timing, seed=seed,
                     retry_failed=retry_failed, result=res, colocate=[t.name for t in tlist] if colocate else (),
                     retry_contended=retry_contended, second_window=second_window, hurry_after=hurry_after,
                     session=res.session, probes=probe_tasks)
        # the links before the second windows: a plan needs them, and the hurry point may cut the others
        eng.run(tasks, second_windows=False)
        if links and len(tlist) > 1:
            _run_links(st, tlist, res, sizes=link_sizes, isolate=isolate, timeout_s=max(timeout_s, 120.0),
                       progress=progress)
        eng.run_second_windows()
        _fill_totals(st, graph, tlist, res, whole_model)
    finally:
        res.wall_s = time.perf_counter() - t_start
        if owned:
            st.close()
    return res


def auto_probes(st: ProfileStore, uniq: Mapping, tlist: list, now: float | None = None) -> int:
    """How many stored ops :func:`profile_graph` probes with ``probes=None``: :data:`AUTO_PROBES` when
    some target in ``tlist`` holds an op row of the signatures ``uniq`` stored :data:`RECHECK_AFTER_S`
    or more before ``now`` (a row of an earlier day may be off by the machine's drift, or have been
    taken in a disturbance), else 0."""
    now = time.time() if now is None else now
    for t in tlist:
        have = st.get_many(sorted(uniq), t)
        if any(m.ok and m.kind == "op" and now - m.timestamp >= RECHECK_AFTER_S for m in have.values()):
            return AUTO_PROBES
    return 0


def _probe_tasks(st: ProfileStore, graph, uniq: Mapping, tlist: list, n: int, session: str, seed: int,
                 timeout_s: float) -> dict[str, list[Task]]:
    """Per target: the anchors, then up to ``n`` ops of ``graph`` whose stored rows other sessions
    measured (a seeded draw), as probe tasks (:mod:`placer.profile.drift`)."""
    anchors = anchor_graph()
    sigs = {h: ids for h, (sig, ids) in uniq.items()}
    out: dict[str, list[Task]] = {}
    for t in tlist:
        tasks = [Task(op.signature.hash, "op", t, f"anchor {op.op_type} {op.id}"[:50],
                      (lambda oid=op.id: anchors.single_op_model(oid)), _min_timeout(t, timeout_s))
                 for op in anchors.ops if t.supports(op.op_type, op.domain)[0]]
        have = st.get_many(sorted(sigs), t)
        old = sorted(k for k, m in have.items() if m.ok and m.kind == "op" and row_session(m.meta) != session)
        rng = random.Random(seed)
        for k in sorted(rng.sample(old, min(n, len(old)))):
            op = graph.op(sigs[k][0])
            tasks.append(Task(k, "op", t, f"probe {op.op_type} {op.id}"[:50],
                              (lambda oid=op.id: graph.single_op_model(oid)), _min_timeout(t, timeout_s),
                              stored_row=True))
        out[t.name] = tasks
    return out


def _register_reachable(st: ProfileStore, tlist: list, res: CampaignResult) -> list:
    """Register each target with the store; those whose device is down now are left out (a problem is
    noted: the others are measured, a later run resumes it)."""
    reachable = []
    for t in tlist:
        try:
            st.register_target(t)
        except TargetUnavailable as exc:  # a device down now: the others are measured, it is resumed later
            res.problems.append(f"{t.name} is unavailable ({first_line(exc)}): not measured; run the campaign "
                                "again once the device is back")
            continue
        reachable.append(t)
    return reachable


def _graph_tasks(graph, uniq: Mapping, tlist: list, *, timeout_s: float, model_timeout_s: float, whole_model: bool,
                 segments: list[list[str]]) -> tuple[list[Task], list[dict]]:
    """The tasks of :func:`profile_graph` per target (overhead, one per unique signature, each segment
    once, the whole model) and the signature rows they need registered (duplicates possible)."""
    rows = [K.overhead_signature_row()]
    first_ops = {}
    for h, (sig, op_ids) in uniq.items():
        op = graph.op(op_ids[0])
        first_ops[h] = op
        rows.append(K.op_signature_row(op))
    if whole_model:
        rows.append(K.model_signature_row(graph))
    seg_rows = []
    tasks: list[Task] = []
    for t in tlist:
        tasks.append(_overhead_task(t, timeout_s))
        for h, op in first_ops.items():
            tasks.append(Task(h, "op", t, f"{op.op_type} {op.id}"[:50],
                              (lambda oid=op.id: graph.single_op_model(oid)), _min_timeout(t, timeout_s),
                              t.supports(op.op_type, op.domain)))
        seen = set()
        for ids in segments:
            task, row = _segment_task(graph, ids, t, timeout_s)
            if task.key in seen:
                continue
            seen.add(task.key)
            tasks.append(task)
            seg_rows.append(row)
        if whole_model:
            tasks.append(Task(K.model_key(graph), "model", t, f"whole model {graph.name}"[:50], lambda: graph.model,
                              _min_timeout(t, model_timeout_s), _static_support(t, graph.ops)))
    return tasks, rows + seg_rows


def _fill_totals(st: ProfileStore, graph, tlist, res: CampaignResult, whole_model: bool) -> None:
    import math

    costs = st.op_costs(graph, tlist, missing="inf")
    for t in tlist:
        tot = res.per_target.setdefault(t.name, TargetTotals(t.name))
        tot.ops_total = res.unique_signatures
        vals = [costs[(op.id, t.name)] for op in graph.ops]
        tot.ops_unsupported = sum(1 for v in vals if math.isinf(v))
        tot.op_ms = float(sum(v for v in vals if not math.isinf(v)))
        tot.overhead_ms = st.overhead_ms(t, default=-1.0)
        if tot.overhead_ms < 0:
            tot.overhead_ms = None
        if whole_model:
            m = st.get(K.model_key(graph), t)
            tot.whole_model_ms = m.median_ms if m is not None and m.ok else None


def _run_links(st: ProfileStore, tlist, res: CampaignResult, *, sizes, isolate: bool, timeout_s: float,
               progress: bool) -> None:
    sizes = list(sizes or DEFAULT_LINK_SIZES)
    # (t, t): the cost of a cut on t itself (placer.profile.links.measure_cut_points), folded into
    # every boundary t takes part in; measured once there is a boundary to price (two targets)
    pairs = [(a, b) for a in tlist for b in tlist if a.name != b.name or len(tlist) > 1]
    todo = [(a, b) for a, b in pairs if not st.has_link(a, b)]
    res.links_cached += len(pairs) - len(todo)
    if not todo:
        return
    overheads = {t.name: st.overhead_ms(t, default=-1.0) for t in tlist}
    overheads = {k: v for k, v in overheads.items() if v >= 0}
    worker = WorkerProcess(tlist) if isolate else InProcessWorker(tlist)
    try:
        with progress_bar(progress, len(todo)) as bar:
            for a, b in todo:
                bar.describe(f"link {a.name} -> {b.name}")
                if st.has_link(a, b):
                    res.links_cached += 1
                    bar.advance()
                    continue
                if a.name == b.name and a.kind.startswith("tvm"):
                    # ten TVM compiles (seconds each) for a target that is never a CPU default: not priced
                    st.put_link(a, a, 0.0, 0.0, [], {"kind": "cut", "skipped": "TVM targets: not measured"})
                    res.links_measured += 1
                    bar.advance()
                    continue
                reply = None
                for k in range(len(LINK_OPS)):  # a side that kills the worker on one op: the next op, anew
                    try:
                        reply = worker.request({"cmd": "link", "src": a.name, "dst": b.name, "sizes": sizes,
                                                "overhead_ms": overheads, "ops": list(LINK_OPS[k:])}, b"",
                                               timeout_s, what=f"while timing link {a.name}->{b.name}")
                        break
                    except WorkerDied as exc:
                        died = exc
                if reply is None and a.name != b.name:
                    res.problems.append(died.reason)
                    bar.advance()
                    continue
                if reply is None:  # the cut cost killed the worker: priced as a cut that cannot be measured
                    reply = {"status": "error", "reason": died.reason}
                if a.name == b.name:  # a cut cost that cannot be measured prices cuts as before: no failure
                    ok = reply.get("status") == "ok"
                    points = reply["points"] if ok else []
                    per_byte = fit_cut_points(points, overheads.get(a.name, 0.0)) if ok else 0.0
                    st.put_link(a, a, 0.0, per_byte, points,
                                {"kind": "cut",
                                 "method": "conv chain whole vs cut per conv, minus the call overhead"}
                                | ({} if ok else {"error": str(reply.get("reason"))}))
                    res.links_measured += 1
                    bar.advance()
                    continue
                if reply.get("status") != "ok":
                    res.problems.append(str(reply.get("reason")))
                    bar.advance()
                    continue
                fit = fit_points(a.name, b.name, reply["points"])
                st.put_link(a, b, fit.latency_ms, fit.ms_per_byte, fit.points, fit.meta)
                res.links_measured += 1
                bar.advance()
    finally:
        worker.stop()


def profile_links(targets: Iterable | None, store: ProfileStore | str | os.PathLike, *, sizes: Sequence[int] | None = None,
                  isolate: bool = True, timeout_s: float = 300.0, progress: bool = True):
    """Measure the hand-off between every ordered pair of ``targets`` that the store lacks.

    Returns the :class:`placer.devices.links.LinkModel`. Overheads are measured first if missing.
    """
    tlist = _measurable(_resolve_targets(targets), CampaignResult())
    st, owned = open_store(store)
    try:
        res = CampaignResult(store_path=st.path)
        st.register_signatures([K.overhead_signature_row()])
        eng = Engine(st, timeout_s=60.0, isolate=isolate, progress=progress, timing=None, seed=0,
                     retry_failed=False, result=res)
        eng.run([_overhead_task(t, 60.0) for t in tlist])
        _run_links(st, tlist, res, sizes=sizes, isolate=isolate, timeout_s=timeout_s, progress=progress)
        if res.problems:
            raise ProfileError("; ".join(res.problems))
        return st.link_model(tlist)
    finally:
        if owned:
            st.close()


def profile_segment(
    graph,
    op_ids: Sequence[str],
    targets: Iterable | None = None,
    store: ProfileStore | str | os.PathLike | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    isolate: bool = True,
    timing: TimingConfig | None = None,
    progress: bool = False,
) -> dict[str, Measurement]:
    """Profile the op set ``op_ids`` as one unit (``OpGraph.subgraph_model``) on each target.

    Keyed by :func:`placer.profile.keys.segment_key`; cached like op rows. Returns
    ``{target_name: Measurement}`` (net of the call overhead, which is measured if missing). A second
    window on each target, as for :func:`profile_whole_model`.
    """
    tlist = _measurable(_resolve_targets(targets), CampaignResult())
    st, owned = open_store(store)
    try:
        res = CampaignResult(store_path=st.path)
        tasks, rows = [], [K.overhead_signature_row()]
        for t in tlist:
            st.register_target(t)
            tasks.append(_overhead_task(t, timeout_s))
            task, row = _segment_task(graph, list(op_ids), t, timeout_s)
            tasks.append(task)
            rows.append(row)
        st.register_signatures({r["key"]: r for r in rows}.values())
        Engine(st, timeout_s=timeout_s, isolate=isolate, progress=progress, timing=timing, seed=0,
               retry_failed=False, result=res).run(tasks)
        key = rows[-1]["key"]
        return _collect(st, key, tlist, res)
    finally:
        if owned:
            st.close()


def profile_whole_model(
    graph,
    targets: Iterable | None = None,
    store: ProfileStore | str | os.PathLike | None = None,
    *,
    timeout_s: float = 10 * DEFAULT_TIMEOUT_S,
    isolate: bool = True,
    timing: TimingConfig | None = None,
    progress: bool = False,
    retry_contended: bool = False,
    hurry_after: float | None = None,
) -> dict[str, Measurement]:
    """Profile the whole model as one partition on each target -> ``{target_name: Measurement}``
    (``retry_contended``: re-measure a stored one flagged as taken on a busy machine; ``hurry_after``:
    as :func:`profile_graph`'s). Each target measures it in a second window too (one row is never
    past a one-thread target's probation; ``$PLACER_ONE_THREAD_WINDOWS=0`` leaves those out)."""
    tlist = _measurable(_resolve_targets(targets), CampaignResult())
    st, owned = open_store(store)
    try:
        res = CampaignResult(store_path=st.path)
        st.register_signatures([K.overhead_signature_row(), K.model_signature_row(graph)])
        tasks = []
        for t in tlist:
            st.register_target(t)
            tasks.append(_overhead_task(t, DEFAULT_TIMEOUT_S))
            tasks.append(Task(K.model_key(graph), "model", t, f"whole model {graph.name}", lambda: graph.model,
                              _min_timeout(t, timeout_s), _static_support(t, graph.ops)))
        Engine(st, timeout_s=timeout_s, isolate=isolate, progress=progress, timing=timing, seed=0,
               retry_failed=False, result=res, retry_contended=retry_contended,
               hurry_after=hurry_after).run(tasks)
        return _collect(st, K.model_key(graph), tlist, res)
    finally:
        if owned:
            st.close()


def _collect(st: ProfileStore, key: str, tlist, res: CampaignResult) -> dict[str, Measurement]:
    out = {}
    for t in tlist:
        m = st.get(key, t)
        if m is None:
            why = "; ".join(res.problems) or "not measured"
            raise ProfileError(f"{key} on {t.name}: {why}")
        out[t.name] = m
    return out


def profile_model(
    source,
    targets: Iterable | None = None,
    store: ProfileStore | str | os.PathLike | None = None,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    segments: bool | int = False,
    **kw,
) -> tuple[Any, CampaignResult]:
    """Load a model (path, ``zoo:NAME``, ModelProto or OpGraph) and :func:`profile_graph` it.

    Returns ``(graph, result)``. ``segments``: False, True (chain windows of 2..3 ops) or the
    max window length.
    """
    graph = source if isinstance(source, OpGraph) else zoo.load_graph(source, dict(shapes) if shapes else None)
    segs = None
    if segments:
        max_len = 3 if segments is True else int(segments)
        segs = K.chain_segments(graph, max_len=max_len)
    return graph, profile_graph(graph, targets, store, segments=segs, **kw)