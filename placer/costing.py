"""From an OpGraph and measured (or predicted) costs to a :class:`PlacementProblem`.

This is the "problem" step of the design: ``graph + costs -> PlacementProblem``. Costs come from
the profile store (exact measurements of each op signature) and, for what was never measured,
from a learned cost model (``costmodels.CostModel``) when one is given.

Partition-aware pricing (issue 9)
---------------------------------
Isolated single-op timings do not add up to a runtime's whole-model latency: runtimes fuse ops
inside a partition, and isolated ops run with cold buffers. When the whole model was measured on
a target (``profile_whole_model``), every op cost on that target is scaled by

    fusion_scale[d] = (whole_ms[d] - overhead_ms[d]) / sum_i net_cost[i, d]

so that the all-on-``d`` plan is predicted at exactly its measured whole-model latency, and a
plan that splits the model pays each boundary through the link model (hand-off + the receiving
runtime's call cost). The single-target plans are therefore always among the solver's
candidates at their measured cost, and the optimum is never predicted worse than the best single
target. The scale is recorded per target in the problem's provenance.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from placer.devices.base import TargetSpec
from placer.devices.cores import core_sets
from placer.errors import ProfileError
from placer.problem import PlacementProblem, ProblemError, Tensor, resolve_target_name
from placer.profile import model_key, segment_key


@dataclass(frozen=True)
class CostTable:
    """Per-op costs on each target (ms; inf = unsupported) and where each number came from."""

    ops: tuple[str, ...]
    targets: tuple[str, ...]
    cost_ms: np.ndarray
    source: np.ndarray  # "measured" | "predicted" | "proxy" | "simulated" | "unsupported", shape of cost_ms
    overhead_ms: Mapping[str, float] = field(default_factory=dict)
    whole_model_ms: Mapping[str, float] = field(default_factory=dict)
    #: measured net cost of fusion segments kept whole: {(op ids...): {target: ms}}
    segments: Mapping[tuple[str, ...], Mapping[str, float]] = field(default_factory=dict)

    def column(self, target: str) -> np.ndarray:
        return self.cost_ms[:, self.targets.index(target)]


def cost_table_from_store(graph, targets: Sequence, store, cost_model=None,
                          segments: Iterable[Sequence[str]] = ()) -> CostTable:
    """Costs of every op of ``graph`` on every target: measured where the store has them,
    else predicted by ``cost_model`` (if given), else a ProfileError naming the op.
    """
    names = tuple(t.name for t in targets)
    n, m = len(graph.ops), len(names)
    cost = np.full((n, m), math.inf)
    source = np.full((n, m), "unsupported", dtype=object)
    measured = store.op_costs(graph, [t for t in targets if not _is_simulated(t)], missing="skip")
    for j, (t, name) in enumerate(zip(targets, names)):
        if _is_simulated(t):  # known only by a spec (issue 6): roofline costs, never profiled
            _fill_simulated_column(graph, t, cost[:, j], source[:, j])
            continue
        for i, op in enumerate(graph.ops):
            if (op.id, name) in measured:
                c = measured[(op.id, name)]
                cost[i, j] = c
                source[i, j] = "measured" if math.isfinite(c) else "unsupported"
            elif cost_model is not None:
                c = float(cost_model.predict_op_ms(op, name))
                cost[i, j] = c
                source[i, j] = "predicted" if math.isfinite(c) else "unsupported"
            else:
                raise ProfileError(
                    f"op {op.id!r} ({op.op_type}) of {graph.name!r} is not profiled on {name} and no cost model "
                    "was given: run `placer profile` or pass a cost model"
                )
    overhead = {name: 0.0 if _is_simulated(t) else float(store.overhead_ms(t, default=0.0))
                for t, name in zip(targets, names)}
    whole = {}
    for t, name in zip(targets, names):
        if _is_simulated(t):
            continue
        meas = store.get(model_key(graph), t)
        if meas is not None and meas.ok:  # at the target's usual pace, where a one-thread row carries one
            whole[name] = float(meas.median_ms) / store.pace_factors(t).get(meas.key, 1.0)
    _fill_context_supported(cost, source, names, whole)
    seg_costs = _segment_costs_from_store(graph, targets, store, segments)
    return CostTable(tuple(op.id for op in graph.ops), names, cost, source, overhead, whole, seg_costs)


def _segment_costs_from_store(graph, targets: Sequence, store, segments: Iterable[Sequence[str]]):
    """``{(op ids): {target: net ms}}`` for every segment measured ok on at least one target."""
    out: dict[tuple[str, ...], dict[str, float]] = {}
    segments = [tuple(seg) for seg in segments]
    cost = {t.name: store.paced_cost(t) for t in targets if segments and not _is_simulated(t)}
    for seg in segments:
        key = segment_key(graph, seg)
        for t in targets:
            if _is_simulated(t):
                continue
            m = store.get(key, t)
            if m is not None and m.ok:  # at the target's usual pace, as the ops are read
                out.setdefault(seg, {})[t.name] = float(cost[t.name](m))
    return out


def apply_segment_costs(table: CostTable) -> tuple[np.ndarray, np.ndarray, list[tuple[str, ...]]]:
    """Op costs with each measured segment's cost spread over its ops (in proportion to their
    isolated costs), so that a segment kept whole costs what it measured as one partition.

    Returns ``(cost_ms, source, groups)``; ``groups`` are the segments substituted on at least one
    target: they must be kept whole (colocated) for these costs to hold.
    """
    cost = np.array(table.cost_ms, dtype=float)
    source = np.array(table.source, dtype=object)
    idx = {o: i for i, o in enumerate(table.ops)}
    groups = []
    for seg, per_target in table.segments.items():
        rows = [idx[o] for o in seg]
        used = False
        for name, seg_ms in per_target.items():
            j = table.targets.index(name)
            iso = cost[rows, j]
            if not np.all(np.isfinite(iso)):
                continue
            total = float(iso.sum())
            share = iso / total if total > 0 else np.full(len(rows), 1.0 / len(rows))
            cost[rows, j] = seg_ms * share
            source[rows, j] = "segment"
            used = True
        if used:
            groups.append(seg)
    return cost, source, groups


def segment_ratios(table: CostTable) -> dict[str, list[float]]:
    """Per target: measured cost of each fusion segment run whole over the sum of its ops' isolated
    net costs (< 1: the runtime fused them; issue 9's per-target statistic)."""
    idx = {o: i for i, o in enumerate(table.ops)}
    out: dict[str, list[float]] = {t: [] for t in table.targets}
    for seg, per_target in table.segments.items():
        rows = [idx[o] for o in seg]
        for name, seg_ms in per_target.items():
            iso = np.asarray(table.cost_ms, dtype=float)[rows, table.targets.index(name)]
            total = float(iso.sum())
            if np.all(np.isfinite(iso)) and total > 0 and math.isfinite(seg_ms):
                out[name].append(float(seg_ms) / total)
    return out


def segment_ratio_stats(table: CostTable) -> dict[str, dict[str, float]]:
    """Per target: count, median, p10 and p90 of :func:`segment_ratios` (targets with none left out)."""
    stats = {}
    for name, r in segment_ratios(table).items():
        if r:
            a = np.asarray(r)
            stats[name] = {"n": int(a.size), "median": float(np.median(a)), "p10": float(np.percentile(a, 10)),
                           "p90": float(np.percentile(a, 90))}
    return stats


def _is_simulated(target) -> bool:
    return bool(getattr(target, "simulated", False))


def _fill_simulated_column(graph, target, cost_col: np.ndarray, source_col: np.ndarray) -> None:
    """Costs of a simulated target (``placer.devices.sim``): its roofline estimate of each op, which
    already includes the spec's per-op overhead; flagged ``"simulated"`` (inf: ``"unsupported"``)."""
    for i, op in enumerate(graph.ops):
        c = float(target.estimate_op_ms(op))
        cost_col[i] = c
        source_col[i] = "simulated" if math.isfinite(c) else "unsupported"


def _fill_context_supported(cost: np.ndarray, source: np.ndarray, names: Sequence[str], whole: Mapping[str, float]) -> None:
    """An op that failed alone on a target whose whole-model run succeeded is supported there in
    context (e.g. OpenVINO rejects a lone Dropout whose output is its input). Give it the cheapest
    finite cost any target measured for it (flagged ``"proxy"``); the whole-model calibration then
    absorbs the error. Ops that no target ran alone keep ``inf``.
    """
    for j, name in enumerate(names):
        if name not in whole:
            continue
        for i in np.flatnonzero(~np.isfinite(cost[:, j])):
            finite = cost[i][np.isfinite(cost[i])]
            if finite.size:
                cost[i, j] = float(finite.min())
                source[i, j] = "proxy"


def fusion_scales(table: CostTable) -> dict[str, float]:
    """Per target, measured whole-model time (less one call's overhead) over the sum of its ops' net
    costs; 1.0 where that is unknown, and where the whole model measured no more than one call's
    overhead (a tiny model: the two cannot be told apart, and a scale of 0 would price it free)."""
    scales = {}
    for j, name in enumerate(table.targets):
        col = table.cost_ms[:, j]
        whole = table.whole_model_ms.get(name)
        total = float(col.sum())
        net_whole = None if whole is None else whole - table.overhead_ms.get(name, 0.0)
        if net_whole is None or net_whole <= 0 or not np.all(np.isfinite(col)) or total <= 0:
            scales[name] = 1.0
            continue
        scales[name] = net_whole / total
    return scales


def graph_tensors(graph) -> list[Tensor]:
    """Every non-constant tensor as a problem Tensor (producer None = model input)."""
    tensors = []
    for name, info in graph.tensors.items():
        if info.is_constant:
            continue
        producer = graph.producer.get(name)
        consumers = tuple(graph.consumers.get(name, ()))
        if producer is None and not consumers:
            continue
        tensors.append(Tensor(name, producer, consumers, int(info.nbytes)))
    return tensors


def target_cores_of(names) -> dict[str, tuple[int, ...]]:
    """The CPU cores each named target occupies (:func:`placer.devices.cores.core_sets`), for
    ``PlacementProblem.target_cores``: targets that share a core never run at the same time.
    Targets off this machine's cores (simulated, remote) are left out (each its own resource).
    Keys are the names as given (``onnxruntime`` stays ``onnxruntime``, not its full spec name)."""
    specs = {n: TargetSpec.parse(n) for n in names}
    sets = core_sets(list(specs.values()))
    return {n: sets[s.name] for n, s in specs.items() if sets.get(s.name) is not None}


def _caps_by_target(memory_cap_bytes: Mapping[str, Any], names: list[str]) -> list[float]:
    """Each target's memory cap (bytes; inf where none), from caps named by target (a name without its
    resources means the one target of that kind, as ``pinned`` does); ProblemError for a name that is
    no target of the problem or a cap that is not a number >= 0 (None: no cap)."""
    caps = [math.inf] * len(names)
    for name, cap in memory_cap_bytes.items():
        d = names.index(resolve_target_name(str(name), names, "memory_cap_bytes: "))
        if cap is None:
            continue
        try:
            v = float(cap)
        except (TypeError, ValueError):
            raise ProblemError(f"memory_cap_bytes: {name!r}: {str(cap)[:40]!r} is not a number of bytes") from None
        if math.isnan(v) or v < 0:
            raise ProblemError(f"memory_cap_bytes: {name!r}: {v} is not a number of bytes >= 0")
        caps[d] = v
    return caps


def build_problem(
    graph,
    table: CostTable,
    links=None,
    *,
    calibrate: bool = True,
    use_segments: bool = True,
    memory_cap_bytes: Mapping[str, float] | None = None,
    pinned: Mapping[str, str] | None = None,
    colocate: Iterable[Iterable[str]] = (),
    provenance: Mapping[str, Any] | None = None,
) -> PlacementProblem:
    """A PlacementProblem for ``graph`` with the costs of ``table`` and the link model ``links``.

    ``links`` is a :class:`placer.devices.links.LinkModel` (or None: free transfers).
    ``use_segments`` prices the measured segments of ``table`` as wholes and colocates them
    (:func:`apply_segment_costs`); ``calibrate`` then applies the whole-model fusion scale
    (module docstring) on top.
    """

    names = list(table.targets)
    seg_groups: list[tuple[str, ...]] = []
    if use_segments and table.segments:
        seg_cost, seg_source, seg_groups = apply_segment_costs(table)
        table = dataclasses.replace(table, cost_ms=seg_cost, source=seg_source)
    colocate = [tuple(g) for g in colocate] + seg_groups
    cost = np.array(table.cost_ms, dtype=float)
    scales = fusion_scales(table) if calibrate else {n: 1.0 for n in names}
    for j, name in enumerate(names):
        cost[:, j] = np.where(np.isfinite(cost[:, j]), cost[:, j] * scales[name], np.inf)
    m = len(names)
    lat = np.zeros((m, m))
    per_byte = np.zeros((m, m))
    if links is not None:
        for a, src in enumerate(names):
            for b, dst in enumerate(names):
                if a != b:
                    fit = links.fits.get((src, dst))
                    if fit is not None:
                        lat[a, b], per_byte[a, b] = fit.latency_ms, fit.ms_per_byte
    caps = _caps_by_target(memory_cap_bytes, names) if memory_cap_bytes else None
    prov = {
        "model": graph.name,
        "model_hash": graph.model_hash,
        "targets": names,
        "fusion_scale": scales,
        "whole_model_ms": dict(table.whole_model_ms),
        "overhead_ms": dict(table.overhead_ms),
        "cost_sources": {str(s): int((table.source == s).sum())
                         for s in ("measured", "segment", "predicted", "proxy", "simulated", "unsupported")},
    }
    prov.update(provenance or {})
    return PlacementProblem(
        ops=[op.id for op in graph.ops],
        targets=names,
        target_cores=target_cores_of(names),
        cost_ms=cost,
        tensors=graph_tensors(graph),
        link_latency_ms=lat,
        link_ms_per_byte=per_byte,
        memory_cap_bytes=caps,
        weight_bytes=[op.weight_bytes for op in graph.ops],
        pinned=dict(pinned or {}),
        colocate=[tuple(g) for g in colocate],
        provenance=prov,
    )


#: ops whose single-consumer successors a runtime fuses into them
_FUSION_HEADS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "BatchNormalization"}
#: ops fused into their producer when they are its only consumer
_FUSED_TAILS = {
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus",
    "Gelu", "Erf", "BatchNormalization", "Add", "Mul", "PRelu",
}


def fusion_groups(graph) -> list[list[str]]:
    """Chains a runtime would fuse: a head op followed by single-consumer elementwise tails.

    Example: ``Conv -> Add(bias) -> Relu`` where each tensor has one consumer is one group.
    """
    groups: list[list[str]] = []
    in_group: set[str] = set()
    for op in graph.ops:
        if op.op_type not in _FUSION_HEADS or op.id in in_group:
            continue
        chain = [op.id]
        cur = op
        while len(cur.outputs) == 1:
            consumers = graph.consumers.get(cur.outputs[0], ())
            if len(consumers) != 1 or cur.outputs[0] in graph.outputs:
                break
            nxt = graph.op(consumers[0])
            if nxt.op_type not in _FUSED_TAILS or nxt.id in in_group:
                break
            chain.append(nxt.id)
            cur = nxt
        if len(chain) > 1:
            groups.append(chain)
            in_group.update(chain)
    return groups


#: a partition whose ops cost at least this much (ms) and several times its entry estimate tells the
#: cut scale apart from the entry cost
_SCALE_ROW_MIN_MS = 0.25
#: the cut scale is kept within [1, this]: beyond it a few rows measured in a busy moment decide
MAX_CUT_SCALE = 3.0
#: alternations of the entry and scale estimates (they settle in a few)
_PRICING_ROUNDS = 20
#: alternations of a pair's scale (its large pieces) and entry (its other pieces) in :func:`pair_pricing`
_PAIR_ROUNDS = 4
#: a pair's scale (entry) needs at least this many large (small) pieces; else the target's own price
#: stands (one piece decides nothing: squeezenet's probe had an ONNX Runtime-t2 piece at 3.4x its price
#: after OpenVINO t2 that the 2-partition plan did not see: 3.93 ms measured, 7.33 priced with it)
_PAIR_MIN_ROWS = 2
#: alternations of the entry estimate and the redistribution along the model (:func:`region_calibrated`)
_REGION_ROUNDS = 3


@dataclass(frozen=True)
class PartitionPricing:
    """What partitions timed as they ran say about a target's price in a plan that cuts the model
    (:func:`partition_pricing`): ``entry_ms`` per tensor received (``partition_overhead_ms``) and
    ``cut_scale`` on its ops' costs (``PlacementProblem.cut_scale``), each per target of the problem."""

    entry_ms: np.ndarray
    cut_scale: np.ndarray
    rows_used: dict[str, int]


def partition_pricing(problem: PlacementProblem, rows: Iterable[Mapping[str, Any]]) -> PartitionPricing:
    """Per target of ``problem``: the price of a partition of a cut plan, learned from partitions
    timed as they ran (:mod:`placer.run.partition_probe`'s probe plans, the tuner's measured plans).

    A row is ``measured = entry x inputs + cut_scale x price`` with ``price`` the sum of its ops'
    costs in ``problem`` and ``inputs`` the tensors it received (none for the first partition,
    which reads the model's inputs). Both are medians, not a least-squares fit: a partition timed
    while something else ran must not decide. First ``entry`` with scale 1 (the median excess per
    input), then ``cut_scale`` as the median of ``(measured - entry x inputs) / price`` over the rows
    whose price is at least ``_SCALE_ROW_MIN_MS`` and 3x their entry (at least two such rows, else 1;
    kept in ``[1, MAX_CUT_SCALE]``), then ``entry`` again net of the scale, and so on until they
    settle. The entry charged is net of the mean link latency the problem already charges into the
    target, clipped at 0.
    Rows whose ops the problem does not know (another graph) or cannot run there, and rows that
    cover the whole model (one-partition plans: not cut), are skipped; a target without rows keeps
    entry 0 and scale 1.
    """
    return _pricing_of(problem, _timed_partitions(problem, rows))


#: one partition timed as it ran, as the problem knows it: (target index, op indices, tensors
#: received (0 for the first partition), measured ms, index of the target that ran just before it
#: (-1: none, or one the problem does not have))
_Timed = tuple[int, list[int], int, float, int]


def _timed_partitions(problem: PlacementProblem, rows: Iterable[Mapping[str, Any]]) -> list[_Timed]:
    """The rows of partitions timed as they ran that ``problem`` can price: on one of its targets,
    with a measured time, every op its own, and not the whole model (a one-partition plan is not
    cut)."""
    idx = {o: i for i, o in enumerate(problem.ops)}
    out: list[_Timed] = []
    for r in rows:
        if r.get("target") not in problem.targets or r.get("median_ms") is None:
            continue
        ops = list(r.get("ops") or ())
        measured = float(r["median_ms"])
        if not ops or any(o not in idx for o in ops) or len(set(ops)) >= len(idx) or not math.isfinite(measured):
            continue
        prev = r.get("prev")
        n_in = max(int(r.get("n_inputs") or 1), 1) if prev is not None else 0
        out.append((problem.targets.index(r["target"]), [idx[o] for o in ops], n_in, measured,
                    problem.targets.index(prev) if prev in problem.targets else -1))
    return out


def _tells_scale(price: float, entry: float, n_in: int) -> bool:
    """Whether a partition is large enough for its time to tell the cut scale apart from the entry
    cost: at least ``_SCALE_ROW_MIN_MS`` and 3x what entering it costs."""
    return price >= _SCALE_ROW_MIN_MS and price >= 3 * entry * n_in


def _pricing_of(problem: PlacementProblem, timed: Sequence[_Timed]) -> PartitionPricing:
    """:func:`partition_pricing` of rows already read by :func:`_timed_partitions`."""
    cost = np.asarray(problem.cost_ms, dtype=float)
    lat = np.asarray(problem.link_latency_ms, dtype=float)
    per_target: dict[int, list[tuple[float, float, int]]] = {}
    for j, pos, n_in, measured, _ in timed:
        price = float(cost[pos, j].sum())
        if math.isfinite(price):
            per_target.setdefault(j, []).append((measured, price, n_in))
    entry = np.zeros(len(problem.targets))
    scale = np.ones(len(problem.targets))
    used: dict[str, int] = {}
    for j, xs in per_target.items():
        a = _median_entry(xs, 1.0)
        for _ in range(_PRICING_ROUNDS):  # each estimate net of the other, until they settle
            big = [(m - a * n) / p for m, p, n in xs if _tells_scale(p, a, n)]
            if len(big) < 2:
                break
            b = float(np.clip(np.median(big), 1.0, MAX_CUT_SCALE))
            settled = abs(b - scale[j]) <= 1e-9 * b
            scale[j] = b
            a = _median_entry(xs, b)
            if settled:
                break
        entry[j] = max(a - _charged_link_ms(lat, j), 0.0)
        used[problem.targets[j]] = len(xs)
    return PartitionPricing(entry, scale, used)


def _charged_link_ms(lat: np.ndarray, j: int) -> float:
    """The link latency the problem charges a tensor received on target ``j``, averaged over the
    targets it may come from (0 with one target)."""
    into = [lat[src, j] for src in range(len(lat)) if src != j]
    return float(np.mean(into)) if into else 0.0


def _median_entry(xs: Sequence[tuple[float, float, int]], scale: float) -> float:
    """Median of ``(measured - scale x price) / inputs`` over the rows that received something."""
    excess = [(m - scale * p) / n for m, p, n in xs if n > 0]
    return float(np.median(excess)) if excess else 0.0


@dataclass(frozen=True)
class PairPricing:
    """The price of a partition by the target that ran just before it (:func:`pair_pricing`):
    ``entry_ms[(a, b)]`` once per partition on target index ``b`` entered when ``a`` ran before it,
    net of the link latency the problem charges for each tensor it receives, and ``scale[(a, b)]``
    on its ops' costs. Pairs without rows take the target's :class:`PartitionPricing` values."""

    entry_ms: dict[tuple[int, int], float]
    scale: dict[tuple[int, int], float]
    rows_used: dict[tuple[int, int], int]

    def to_provenance(self, targets: Sequence[str]) -> dict[str, dict[str, float]]:
        """JSON-ready: ``{"pair_entry_ms": {"a>b": ms}, "pair_scale": {"a>b": x}}`` by target name."""
        key = lambda ab: f"{targets[ab[0]]}>{targets[ab[1]]}"  # noqa: E731
        return {"pair_entry_ms": {key(ab): float(v) for ab, v in sorted(self.entry_ms.items())},
                "pair_scale": {key(ab): float(v) for ab, v in sorted(self.scale.items())}}


def pair_pricing(problem: PlacementProblem, rows: Iterable[Mapping[str, Any]]) -> PairPricing:
    """Per (target that ran before, target): what a partition costs, from partitions timed as they ran.

    The per-target :func:`partition_pricing` mixes every predecessor; measured, they differ: on hf-vit's
    probe plans an OpenVINO-t2 piece of 42-50 ops took 1.21-1.23x its price right after ONNX Runtime t2
    and 1.08-1.12x after a one-thread target, and a 6-op piece +0.75 ms against +0.34-0.41 ms. The entry
    is per partition, not per tensor received: on hf-llama's HEFT plan (session 11) partitions entered
    with 5 tensors measured +0.06 ms over their ops' price, those with one +0.2-0.4 ms (the link model
    prices the copies). A pair has a few rows (a probe plan gives it one small piece and two large ones),
    too few to re-sort them at each step as :func:`partition_pricing` does (the estimates then drift to
    any point of the line through one row), so its rows are sorted once, by the target's own entry, into
    the pieces that tell the scale (:func:`_tells_scale`) and the others; then the scale (median of
    ``(measured - entry - links) / price`` over the first) and the entry (median of ``measured - scale x
    price - links`` over the others) are alternated a few times, ``links`` being the link latency of the
    tensors received. Each needs two pieces of its kind (:data:`_PAIR_MIN_ROWS`); a pair without them
    keeps the target's price for it. Used to price a made plan as it runs
    (:func:`placer.materialize.in_context.priced_as_run`), where each partition's predecessor is known;
    the solvers keep the per-target prices.
    """
    timed = _timed_partitions(problem, rows)
    base = _pricing_of(problem, timed)
    cost = np.asarray(problem.cost_ms, dtype=float)
    lat = np.asarray(problem.link_latency_ms, dtype=float)
    by_pair: dict[tuple[int, int], list[tuple[float, float, int]]] = {}
    for j, pos, n_in, measured, a in timed:
        price = float(cost[pos, j].sum())
        if a >= 0 and a != j and n_in > 0 and math.isfinite(price):
            by_pair.setdefault((a, j), []).append((measured, price, n_in))
    entry: dict[tuple[int, int], float] = {}
    scale: dict[tuple[int, int], float] = {}
    for (a, j), xs in by_pair.items():
        e_t = float(base.entry_ms[j]) + _charged_link_ms(lat, j)
        big = [x for x in xs if _tells_scale(x[1], e_t, x[2])]  # sorted once, by the target's entry
        small = [x for x in xs if not _tells_scale(x[1], e_t, x[2])]
        # per partition, net of the link latency the problem charges for each tensor it receives
        e, b = e_t, float(base.cut_scale[j])
        for _ in range(_PAIR_ROUNDS):  # each net of the other, on fixed rows: settles in a few
            if len(big) >= _PAIR_MIN_ROWS:
                ratios = [(m - e - lat[a, j] * n) / p for m, p, n in big]
                b = float(np.clip(np.median(ratios), 1.0, MAX_CUT_SCALE))
            if len(small) >= _PAIR_MIN_ROWS:
                e = float(np.median([m - b * p - lat[a, j] * n for m, p, n in small]))
        if len(big) >= _PAIR_MIN_ROWS:
            scale[(a, j)] = b
        if len(small) >= _PAIR_MIN_ROWS:
            entry[(a, j)] = max(e, 0.0)
    return PairPricing(entry, scale, {ab: len(xs) for ab, xs in by_pair.items()})


def region_calibrated(problem: PlacementProblem, rows: Iterable[Mapping[str, Any]]) -> PlacementProblem:
    """``problem`` with each target's op costs redistributed along the model as the partitions timed
    as they ran (``rows``) say, its whole-model sum kept.

    The whole-model calibration (:func:`fusion_scales`) spreads a target's measured whole-model time
    over its ops in proportion to their isolated times. Where a runtime's fused ops cost less or
    more than alone differs along the model (on OpenVINO squeezenet's first convolutions cost more
    alone than fused, its later fire modules less), a partition is mispriced by where it lies
    (squeezenet's probe pieces on OpenVINO t2 measured 0.67x to 3.4x their price by position).
    Here each op's cost on a target is multiplied by the median of ``(measured - entry x inputs) /
    price`` over that target's partitions that contain it (those :func:`partition_pricing` uses for
    its scale: at least ``_SCALE_ROW_MIN_MS`` and 3x their entry), an op no such partition contains
    by the cost-weighted mean of the others' factors; then the target's column is rescaled to its
    former sum, so a plan on one target keeps its price (its measured whole-model time) and only
    the split between parts of the model moves. The entry is the one :func:`partition_pricing`
    learns on the redistributed costs (it depends on them), so the two are alternated a few times.
    Targets without such partitions are unchanged.
    """
    timed = _timed_partitions(problem, rows)
    if not timed:
        return problem
    base = np.asarray(problem.cost_ms, dtype=float)
    current = problem
    for _ in range(_REGION_ROUNDS):
        entry = _pricing_of(current, timed).entry_ms
        cost = np.array(base)
        ratios: dict[int, dict[int, list[float]]] = {}
        for j, pos, n_in, measured, _ in timed:
            price = float(current.cost_ms[pos, j].sum())
            a = float(entry[j])
            if not math.isfinite(price) or not _tells_scale(price, a, n_in):
                continue
            base_price = float(base[pos, j].sum())
            ratio = (measured - a * n_in) / base_price if base_price > 0 else math.nan
            if math.isfinite(ratio) and ratio > 0:
                for i in pos:
                    ratios.setdefault(j, {}).setdefault(i, []).append(ratio)
        for j, by_op in ratios.items():
            col = base[:, j]
            finite = np.isfinite(col)
            total = float(col[finite].sum())
            if total <= 0:
                continue
            factor = np.ones(len(col))
            covered = np.zeros(len(col), dtype=bool)
            for i, xs in by_op.items():
                factor[i], covered[i] = float(np.median(xs)), True
            weight = col[covered & finite]
            if weight.sum() > 0:
                factor[~covered] = float(np.average(factor[covered & finite], weights=weight))
            new = np.where(finite, col * factor, np.inf)
            cost[:, j] = new * (total / float(new[finite].sum()))
        current = dataclasses.replace(problem, cost_ms=cost)
    return current
