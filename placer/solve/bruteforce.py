"""``bruteforce``: exact enumeration for tiny problems (the reference the tests hold CP-SAT to).

Latency mode
    A depth-first search over (next op, its target): at each step any op whose predecessors are
    all scheduled may be appended on any allowed target (pins, colocation and memory respected),
    starting at ``max(target free, inputs arrived)``; a target is free once the last op on it and
    on every target sharing a core with it (``problem.conflicts``) has ended. This enumerates
    every topological order and every assignment, hence every per-resource op sequence; for fixed
    sequences appending in such an order gives the earliest (semi-active) schedule, and some
    semi-active schedule is optimal (sorting an optimal schedule by start time gives a
    topological order that reproduces it or better: ops of conflicting targets never overlap, so
    the earlier-started one ended first). So the minimum found is the exact optimum, in float
    arithmetic. Identical partial states (same set of scheduled ops, target free times, memory use, group
    targets, and (target, end) of every scheduled op that still feeds an unscheduled one) are
    memoized.
Pipeline mode
    Stage times and latency depend only on the assignment (the stage order only has to exist), so
    every assignment is enumerated (numpy, vectorized): kept if memory fits, at most
    ``num_stages`` targets are used, the target quotient graph is acyclic (a monotone stage order
    exists) and, if ``contiguous``, each target's ops form one run of the op order; the best
    (bottleneck, latency) wins. With ``link_broadcast`` a tensor costs its sender once (its
    slowest sender-charged destination). The bottleneck is the largest per-resource sum of stage times
    (targets sharing a core add up on it).

Refuses problems beyond ``max_ops`` ops (latency: 10) or ``max_assignments`` assignments
(pipeline: 2,000,000).
"""

from __future__ import annotations

import itertools
import time
from typing import Any, ClassVar

import numpy as np

from placer.errors import ProblemError
from placer.plan import Plan
from placer.problem import PlacementProblem
from placer.solve.base import SolveContext, Solver, register_solver
from placer.solve.evaluate import Costs, float_noise, make_latency_plan, make_pipeline_plan, stage_order

__all__ = ["BruteForce", "exact_latency", "exact_pipeline"]


def exact_latency(problem: PlacementProblem, deadline: float | None = None) -> tuple[float, np.ndarray, list[int]]:
    """Exact minimum makespan. Returns ``(makespan, assign, order)``."""
    search = _LatencySearch(problem, deadline)
    best = search.best()
    if not np.isfinite(best):
        raise ProblemError("bruteforce: no feasible assignment (memory caps / colocation)")
    assign, order = search.replay()
    return float(best), assign, order


class _LatencySearch:
    """The memoized depth-first search of :func:`exact_latency` (see the module docstring).

    A state is ``(mask of scheduled ops, target free times, op targets, op ends, memory used per
    target, group targets)``; :attr:`memo` maps its key to ``(best makespan of the rest, (op,
    target) appended next)``."""

    def __init__(self, p: PlacementProblem, deadline: float | None) -> None:
        c = Costs.of(p)
        n, t = p.n_ops, p.n_targets
        self.p, self.n, self.t, self.deadline = p, n, t, deadline
        self.allowed = [[d for d in range(t) if p.allowed[v, d]] for v in range(n)]
        self.pred_mask = [sum(1 << u for u in p.preds[v]) for v in range(n)]
        self.succ_mask = [sum(1 << w for w in p.succs[v]) for v in range(n)]
        self.ins = [[(k, p.tensor_producer[k]) for k in p.in_tensors[v]] for v in range(n)]
        self.group = [int(g) for g in p.group_of]
        self.caps = [float(x) for x in p.memory_cap_bytes]
        self.has_caps = any(np.isfinite(self.caps))
        self.w = [float(x) for x in p.weight_bytes]
        self.cost, self.link, self.entry = c.cost, c.link, c.entry
        self.conf = p.conflicts  # (d,) each when no core is shared
        self.full = (1 << n) - 1
        self.memo: dict[tuple, tuple[float, tuple[int, int]]] = {}
        self.counter = 0
        self.tgt0 = [-1] * n
        self.end0 = [0.0] * n

    def occupy(self, avail: tuple, d: int, e: float) -> tuple:
        """``avail`` after an op on ``d`` ending at ``e``: d and the targets sharing a core wait."""
        conf = self.conf
        if len(conf[d]) == 1:
            return avail[:d] + (e,) + avail[d + 1:]
        out = list(avail)
        for d2 in conf[d]:
            out[d2] = max(out[d2], e)
        return tuple(out)

    def ready(self, v: int, d: int, tgt: list, end: list) -> float:
        """When the inputs of ``v`` are all on ``d``."""
        link, entry = self.link, self.entry
        s = 0.0
        for k, u in self.ins[v]:
            a = tgt[u]
            r = end[u] if a == d else end[u] + link[k, a, d] + entry[d]
            s = max(s, r)
        return s

    def key(self, mask: int, avail: tuple, tgt: list, end: list, mem: tuple, gt: tuple) -> tuple:
        """The memo key: the (target, end) of the scheduled ops that still feed an unscheduled one
        stand for all of ``tgt`` and ``end``."""
        succ_mask = self.succ_mask
        frontier = tuple((u, tgt[u], end[u]) for u in range(self.n) if mask >> u & 1 and succ_mask[u] & ~mask)
        return (mask, avail, frontier, mem, gt)

    def best(self) -> float:
        """The least makespan (inf if nothing is feasible); fills :attr:`memo`."""
        t = self.t
        return self.rec(0, (0.0,) * t, self.tgt0, self.end0, (0.0,) * t, (-1,) * len(self.p.colocate))

    def rec(self, mask: int, avail: tuple, tgt: list, end: list, mem: tuple, gt: tuple) -> float:
        """Least makespan of the rest from this state (``tgt`` and ``end`` are restored on return)."""
        if mask == self.full:
            return 0.0
        key = self.key(mask, avail, tgt, end, mem, gt)
        hit = self.memo.get(key)
        if hit is not None:
            return hit[0]
        self.counter += 1
        if self.deadline is not None and self.counter % 4096 == 0 and time.monotonic() > self.deadline:
            raise ProblemError("bruteforce: time limit reached (the problem is too large for it)")
        cost, w, caps, has_caps = self.cost, self.w, self.caps, self.has_caps
        best, choice = np.inf, (-1, -1)
        for v in range(self.n):
            if mask >> v & 1 or self.pred_mask[v] & ~mask:
                continue
            g = self.group[v]
            targets = self.allowed[v] if g < 0 or gt[g] < 0 else [gt[g]]
            for d in targets:
                if has_caps and mem[d] + w[v] > caps[d]:
                    continue
                s = self.ready(v, d, tgt, end)
                if cost[v, d] > 0:  # an instantaneous op neither waits for nor occupies its target
                    s = max(s, avail[d])
                e = s + cost[v, d]
                if e >= best:
                    continue
                tgt[v], end[v] = d, e
                av2 = self.occupy(avail, d, e) if cost[v, d] > 0 else avail
                mem2 = mem[:d] + (mem[d] + w[v],) + mem[d + 1:] if has_caps else mem
                gt2 = gt[:g] + (d,) + gt[g + 1:] if g >= 0 else gt
                val = max(e, self.rec(mask | 1 << v, av2, tgt, end, mem2, gt2))
                tgt[v], end[v] = -1, 0.0
                if val < best:
                    best, choice = val, (v, d)
        self.memo[key] = (best, choice)
        return best

    def replay(self) -> tuple[np.ndarray, list[int]]:
        """Follow the memoized choices from the empty state: ``(assign, order)``."""
        t, cost, w, group = self.t, self.cost, self.w, self.group
        mask, avail, tgt, end = 0, (0.0,) * t, self.tgt0, self.end0
        mem, gt = (0.0,) * t, (-1,) * len(self.p.colocate)
        order: list[int] = []
        while mask != self.full:
            _, (v, d) = self.memo[self.key(mask, avail, tgt, end, mem, gt)]
            s = self.ready(v, d, tgt, end)
            if cost[v, d] > 0:
                s = max(s, avail[d])
            tgt[v], end[v] = d, s + cost[v, d]
            if cost[v, d] > 0:
                avail = self.occupy(avail, d, end[v])
            if self.has_caps:
                mem = mem[:d] + (mem[d] + w[v],) + mem[d + 1:]
            if group[v] >= 0:
                gt = gt[:group[v]] + (d,) + gt[group[v] + 1:]
            mask |= 1 << v
            order.append(v)
        return np.array(tgt, dtype=int), order


def _all_assignments(problem: PlacementProblem, limit: int) -> np.ndarray:
    p = problem
    units = p.units
    choices = [np.flatnonzero(p.allowed[u[0]]) for u in units]
    total = int(np.prod([len(ch) for ch in choices], dtype=float))
    if total > limit:
        raise ProblemError(f"bruteforce: {total} assignments, more than its limit {limit}")
    combos = np.array(list(itertools.product(*choices)), dtype=np.int64).reshape(total, len(units))
    out = np.empty((total, p.n_ops), dtype=np.int64)
    for j, unit in enumerate(units):
        for i in unit:
            out[:, i] = combos[:, j]
    return out


def exact_pipeline(problem: PlacementProblem, num_stages: int, contiguous: bool,
                   limit: int = 2_000_000) -> tuple[float, float, np.ndarray]:
    """Exact best (bottleneck, latency) over all assignments. Returns ``(bottleneck, latency, assign)``."""
    p = problem
    c = Costs.of(p)
    n, t = p.n_ops, p.n_targets
    A = _all_assignments(p, limit)
    N = A.shape[0]
    rows = np.arange(N)
    onehot = A[:, :, None] == np.arange(t)[None, None, :]  # (N, n, T)
    mem = np.einsum("nvd,v->nd", onehot, p.weight_bytes)
    ok = (mem <= p.memory_cap_bytes[None, :]).all(axis=1)
    costv = np.where(np.isfinite(c.cost), c.cost, 0.0)
    compute = np.einsum("nvd,vd->nd", onehot, costv)
    send = np.zeros((N, t))
    recv = np.zeros((N, t))
    code = p.charge_code
    for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)):
        if u < 0 or not cs:
            continue
        a = A[:, u]
        sent = np.zeros(N)
        for b in range(t):
            need = onehot[:, list(cs), b].any(axis=1) & (a != b)
            ms = c.link[k, a, b]
            s_part = np.where(need & (code[a, b] & 1 > 0), ms, 0.0)
            r_part = np.where(code[a, b] & 2, ms, 0.0) + c.entry[b]
            if p.link_broadcast:  # the sender pays its slowest destination once
                sent = np.maximum(sent, s_part)
            else:
                sent += s_part
            recv[:, b] += np.where(need, r_part, 0.0)
        np.add.at(send, (rows, a), sent)
    total = compute + send + recv
    used = onehot.any(axis=1)
    ok &= used.sum(axis=1) <= num_stages
    adj = np.zeros((N, t, t), dtype=bool)
    for u, v in p.edges:
        adj[rows, A[:, u], A[:, v]] = True
    idx = np.arange(t)
    adj[:, idx, idx] = False
    reach = adj.copy()
    for _ in range(t):
        reach = reach | (np.matmul(reach.astype(np.int32), adj.astype(np.int32)) > 0)
    ok &= ~reach[:, idx, idx].any(axis=1)
    if contiguous and n > 1:
        changes = (A[:, 1:] != A[:, :-1]).sum(axis=1)
        ok &= changes == used.sum(axis=1) - 1
    if not ok.any():
        raise ProblemError("bruteforce: no feasible pipeline (memory caps, stage limit, colocation)")
    per_res = total if not p.shares_resources else np.stack(
        [total[:, list(u)].sum(axis=1) for u in p.resource_users], axis=1)  # stages sharing a core add up
    bott = np.where(ok, per_res.max(axis=1), np.inf)
    lat = np.where(ok, total.sum(axis=1), np.inf)
    bmin = bott.min()
    cand = ok & (bott <= bmin + float_noise(bmin))
    i = int(np.argmin(np.where(cand, lat, np.inf)))
    return float(bott[i]), float(lat[i]), A[i].astype(int)


@register_solver("bruteforce")
class BruteForce(Solver):
    """Exact enumeration for tiny problems (reference for tests)."""

    exact = True
    options: ClassVar[dict[str, Any]] = {"max_ops": 10, "max_assignments": 2_000_000}

    def solve(self, problem: PlacementProblem, ctx: SolveContext) -> Plan:
        t0 = time.monotonic()
        if ctx.mode == "latency":
            max_ops = int(ctx.options.get("max_ops", 10))
            if problem.n_ops > max_ops:
                raise ProblemError(f"bruteforce: {problem.n_ops} ops, more than max_ops={max_ops}")
            best, assign, order = exact_latency(problem, ctx.deadline)
            plan = make_latency_plan(problem, assign, ctx.name, order=order, options=ctx.plan_options(),
                                     stats={"status": "EXACT", "objective": best, "best_bound": best,
                                            "gap": 0.0, "wall_s": time.monotonic() - t0})
            return plan
        bott, _, assign = exact_pipeline(problem, ctx.max_stages(problem), ctx.contiguous,
                                           int(ctx.options.get("max_assignments", 2_000_000)))
        order = stage_order(problem, assign)
        return make_pipeline_plan(problem, assign, ctx.name, order=order, options=ctx.plan_options(),
                                  stats={"status": "EXACT", "objective": bott, "best_bound": bott, "gap": 0.0,
                                         "wall_s": time.monotonic() - t0})
