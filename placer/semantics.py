"""The one place that defines what an assignment costs (see :mod:`placer.plan` for the semantics).

Every solver, every baseline and :meth:`placer.plan.Plan.validate` go through these functions, so
a plan means the same thing whoever produced it. They sit next to the problem, below the plan and
the solvers (numpy only): :mod:`placer.plan` checks plans with them and
:mod:`placer.solve.evaluate` builds plans with them (and re-exports them for the solvers).

* :func:`latency_schedule` list-schedules an assignment in latency mode: ops are taken in a
  given topological *priority order*; each starts as soon as its target is free (after the
  previous op taken on that target, or on any target sharing a resource with it: see
  ``PlacementProblem.target_cores``) and its inputs have arrived. For a fixed assignment and
  per-resource op sequences this is the earliest (semi-active) schedule, so re-timing any
  feasible schedule by its own start order never makes it later.
* :func:`pipeline_eval` computes stage times, bottleneck (the busiest resource: the stage times
  of targets sharing a core add up on it) and latency of an assignment with a given stage order.
* :func:`placer.solve.evaluate.make_latency_plan` / :func:`~placer.solve.evaluate.make_pipeline_plan`
  wrap both into a :class:`~placer.plan.Plan`.

All functions take op/target *indices* (``assign[i]`` = target index of op ``i``) and optionally a
:class:`Costs` (e.g. the integer-rounded costs a CP-SAT model uses) instead of the problem's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from placer.errors import ProblemError
from placer.problem import PlacementProblem
from placer.toposort import CycleError, topological_order

__all__ = [
    "Costs",
    "PipelineEval",
    "arrival_ms",
    "assignment_indices",
    "check_assignment",
    "is_contiguous",
    "latency_schedule",
    "needed_transfers",
    "order_by_start",
    "pipeline_eval",
    "pipeline_loads",
    "resource_busy_ms",
    "stage_order",
    "target_busy_ms",
]


@dataclass(frozen=True)
class Costs:
    """The numbers a schedule is computed from.

    Attributes
    ----------
    cost : (n_ops, n_targets) float, ``inf`` = unsupported
    link : (n_tensors, n_targets, n_targets) float, link time per tensor and target pair
    entry : (n_targets,) float, partition overhead per tensor received
    scale_ms : float
        ms per unit (1.0 for the problem's own costs; the resolution for rounded costs).
    """

    cost: np.ndarray
    link: np.ndarray
    entry: np.ndarray
    scale_ms: float = 1.0

    @classmethod
    def of(cls, problem: PlacementProblem) -> Costs:
        """The problem's float costs (ms)."""
        return cls(problem.cost_ms, problem.link_ms, problem.partition_overhead_ms, 1.0)

    @classmethod
    def rounded(cls, problem: PlacementProblem, resolution_ms: float) -> Costs:
        """Costs in integer units of ``resolution_ms`` (each number rounded to the nearest unit)."""
        def r(x: np.ndarray) -> np.ndarray:
            out = np.where(np.isfinite(x), np.rint(np.where(np.isfinite(x), x, 0) / resolution_ms), np.inf)
            return out

        return cls(r(problem.cost_ms), r(problem.link_ms), r(problem.partition_overhead_ms), resolution_ms)


def arrival_ms(problem: PlacementProblem, k: int, end_u: float, a: int, b: int,
               costs: Costs | None = None) -> float:
    """When tensor ``k``, produced on target ``a`` at ``end_u``, is usable on target ``b``."""
    if a == b:
        return end_u
    c = costs or Costs.of(problem)
    return end_u + float(c.link[k, a, b]) + float(c.entry[b])


def needed_transfers(problem: PlacementProblem, assign: np.ndarray,
                     costs: Costs | None = None) -> list[tuple[int, int, int, float, float]]:
    """All copies ``(tensor, src, dst, link_ms, entry_ms)``: one per (tensor, destination target),
    sorted by tensor then destination."""
    c = costs or Costs.of(problem)
    assign = np.asarray(assign, dtype=np.int64)
    ks, us, vs = problem.consumer_arrays
    src, dst = assign[us], assign[vs]
    cross = src != dst
    # one copy per (tensor, destination): unique codes, sorted by tensor then target
    t = problem.n_targets
    code = np.unique(ks[cross] * t + dst[cross])
    k, b = code // t, code % t
    a = assign[np.asarray(problem.tensor_producer, dtype=np.int64)[k]] if len(k) else k
    link = np.asarray(c.link)[k, a, b] if len(k) else np.zeros(0)
    entry = np.asarray(c.entry)[b] if len(k) else np.zeros(0)
    return list(zip(k.tolist(), a.tolist(), b.tolist(), link.tolist(), entry.tolist()))


def target_busy_ms(problem: PlacementProblem, assign: np.ndarray, costs: Costs | None = None) -> np.ndarray:
    """Sum of op costs per target."""
    c = costs or Costs.of(problem)
    busy = np.zeros(problem.n_targets)
    np.add.at(busy, assign, c.cost[np.arange(problem.n_ops), assign])
    return busy


def resource_busy_ms(problem: PlacementProblem, assign: np.ndarray, costs: Costs | None = None) -> np.ndarray:
    """Sum of op costs per resource (``problem.resource_sets``): the per-target busy times of the
    targets sharing a resource add up. Equal to :func:`target_busy_ms` when no core is shared."""
    return problem.resource_loads(target_busy_ms(problem, assign, costs))


def check_assignment(problem: PlacementProblem, assign: np.ndarray) -> None:
    """Raise ProblemError if ``assign`` breaks support, pins, colocation or memory caps."""
    p = problem
    bad = np.flatnonzero(~p.allowed[np.arange(p.n_ops), assign])
    if len(bad):
        i = int(bad[0])
        raise ProblemError(f"op {p.ops[i]!r} cannot be placed on {p.targets[assign[i]]!r}")
    for g in p.colocate:
        idx = [p.op_index[o] for o in g]
        if len({int(assign[i]) for i in idx}) > 1:
            raise ProblemError(f"colocation group {list(g)} is split")
    load = np.zeros(p.n_targets)
    np.add.at(load, assign, p.weight_bytes)
    over = np.flatnonzero(load > p.memory_cap_bytes)
    if len(over):
        raise ProblemError(f"memory cap of {p.targets[over[0]]!r} exceeded")


def latency_schedule(problem: PlacementProblem, assign: np.ndarray, order: Any = None,
                     costs: Costs | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Earliest schedule of ``assign`` taking ops in ``order`` (a topological order; default: op order).

    An op of positive cost on target ``d`` starts when its inputs are ready and every resource of
    ``d`` is free: after the last op taken so far on ``d`` or on a target sharing a core with it
    (``problem.conflicts[d]``), and occupies them all until it ends. An op of cost 0 is
    instantaneous: it starts when its inputs are ready, whether or not its target is busy, and
    does not delay the target's next op (CP-SAT's no-overlap semantics for zero-length
    intervals, and the physical meaning of a free op).

    Returns
    -------
    start, end : ndarray (n_ops,)
    """
    p = problem
    c = costs or Costs.of(problem)
    n = p.n_ops
    order = range(n) if order is None else order
    assign = np.asarray(assign).astype(np.int64, copy=False)
    d_of = assign.tolist()
    cost_v = np.asarray(c.cost)[np.arange(n), assign].tolist()  # each op's cost on its target
    # every (op, tensor it reads) pair: producer, and link + entry times when the copy is needed
    ptr_a, ks = p.in_tensor_arrays
    ptr = ptr_a.tolist()
    us = np.asarray(p.tensor_producer, dtype=np.int64)[ks] if len(ks) else ks
    vs = np.repeat(np.arange(n), np.diff(ptr_a))
    a_in, d_in = assign[us], assign[vs]
    link_in = np.asarray(c.link)[ks, a_in, d_in].tolist() if len(ks) else []
    entry_in = np.asarray(c.entry)[d_in].tolist() if len(ks) else []
    local = (a_in == d_in).tolist()
    us_l = us.tolist()
    start = [0.0] * n
    end: list[float | None] = [None] * n
    avail = [0.0] * p.n_targets  # when each target may start its next op
    conf = p.conflicts if p.shares_resources else None
    for v in order:
        d = d_of[v]
        t0 = 0.0  # inputs ready
        for j in range(ptr[v], ptr[v + 1]):
            eu = end[us_l[j]]
            if eu is None:  # producer not scheduled yet
                raise ProblemError(f"priority order is not topological: {p.ops[v]!r} before {p.ops[us_l[j]]!r}")
            t0 = max(t0, eu if local[j] else eu + link_in[j] + entry_in[j])
        c_v = cost_v[v]
        if c_v > 0:
            s_v = start[v] = max(t0, avail[d])
            e_v = end[v] = s_v + c_v
            if conf is None:
                avail[d] = e_v
            else:  # every target sharing a resource with d waits for this op too
                for d2 in conf[d]:
                    avail[d2] = max(avail[d2], e_v)
        else:  # an instantaneous op neither waits for nor occupies its target
            start[v] = end[v] = t0
    if None in end:
        raise ProblemError("priority order does not list every op")
    return np.array(start, dtype=float), np.array(end, dtype=float)


def order_by_start(problem: PlacementProblem, start: np.ndarray) -> list[int]:
    """Ops sorted by start time, ties broken by topological index (a topological order when the
    start times come from a feasible schedule with positive-or-zero durations)."""
    return sorted(range(problem.n_ops), key=lambda i: (start[i], i))


@dataclass(frozen=True)
class PipelineEval:
    """Result of :func:`pipeline_eval` (arrays indexed by *target*; ``bottleneck`` is the largest
    per-resource sum of stage times, the largest stage time when no core is shared)."""

    compute: np.ndarray
    send: np.ndarray
    recv: np.ndarray
    total: np.ndarray
    bottleneck: float
    latency: float
    start: np.ndarray
    end: np.ndarray


def pipeline_loads(problem: PlacementProblem, assign: np.ndarray,
                   costs: Costs | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(compute, send, recv) per target of an assignment (independent of the stage order).

    With ``problem.link_broadcast`` a tensor costs its sender once: the largest of its
    sender-charged link times to the targets that read it."""
    p = problem
    c = costs or Costs.of(problem)
    t = p.n_targets
    compute = np.zeros(t)
    np.add.at(compute, assign, c.cost[np.arange(p.n_ops), assign])
    send = np.zeros(t)
    recv = np.zeros(t)
    code = p.charge_code
    bcast = p.link_broadcast
    for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)):
        if u < 0 or not cs:
            continue
        a = int(assign[u])
        sent = 0.0
        for b in {int(assign[v]) for v in cs}:
            if b == a:
                continue
            ms = c.link[k, a, b]
            if code[a, b] & 1:
                if bcast:  # one send reaches every destination: the slowest link counts
                    sent = max(sent, ms)
                else:
                    send[a] += ms
            if code[a, b] & 2:
                recv[b] += ms
            recv[b] += c.entry[b]
        send[a] += sent
    return compute, send, recv


def pipeline_eval(problem: PlacementProblem, assign: np.ndarray, order: list[int],
                  costs: Costs | None = None) -> PipelineEval:
    """Stage costs and the single-request timeline of ``assign`` with stages on targets ``order``.

    ``order`` lists the target of each stage (each used target exactly once). Monotonicity is not
    checked here (see :func:`stage_order`).
    """
    p = problem
    c = costs or Costs.of(problem)
    compute, send, recv = pipeline_loads(p, assign, c)
    total = compute + send + recv
    start = np.zeros(p.n_ops)
    end = np.zeros(p.n_ops)
    offset = 0.0
    for d in order:
        t0 = offset + recv[d]
        for i in np.flatnonzero(assign == d):
            start[i] = t0
            t0 += c.cost[i, d]
            end[i] = t0
        offset += total[d]
    used = sorted({int(x) for x in assign})
    if sorted(order) != used:
        raise ProblemError(f"stage order {order} does not list each used target {used} once")
    if p.shares_resources:  # stages on targets sharing a core add up on it
        bottleneck = float(p.resource_loads(total).max())
    else:
        bottleneck = float(total[order].max())
    return PipelineEval(compute, send, recv, total, bottleneck, float(total[order].sum()), start, end)


def stage_order(problem: PlacementProblem, assign: np.ndarray) -> list[int] | None:
    """The stage order of an assignment (targets in topological order of the target quotient graph,
    ties broken by first op), or ``None`` if the quotient graph has a cycle (no monotone pipeline)."""
    p = problem
    used = sorted({int(x) for x in assign}, key=lambda d: int(np.argmax(assign == d)))
    first = {d: int(np.argmax(assign == d)) for d in used}
    succ: dict[int, set[int]] = {d: set() for d in used}
    for u, v in p.edges:
        a, b = int(assign[u]), int(assign[v])
        if a != b:
            succ[a].add(b)
    preds: dict[int, list[int]] = {d: [] for d in used}
    for a in used:
        for b in succ[a]:
            preds[b].append(a)
    try:
        return topological_order(used, preds, key=first.__getitem__)
    except CycleError:
        return None


def is_contiguous(assign: np.ndarray) -> bool:
    """True if each target's ops form one contiguous run of the (topological) op order."""
    seen: set[int] = set()
    prev = None
    for d in assign:
        d = int(d)
        if d != prev:
            if d in seen:
                return False
            seen.add(d)
            prev = d
    return True


def assignment_indices(problem: PlacementProblem, assignment: dict[str, str]) -> np.ndarray:
    """Op -> target names to an index array."""
    return np.array([problem.target_index[assignment[o]] for o in problem.ops], dtype=int)
