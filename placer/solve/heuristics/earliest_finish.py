"""HEFT (Topcuoglu et al., 2002): upward rank with average costs over the allowed targets and
average transfer delay over the allowed distinct target pairs; ops in decreasing rank; each on the
target giving the earliest finish time, inserting into idle gaps; transfers are one copy per
(tensor, destination target) that delays consumers by link + entry time."""

from __future__ import annotations

import numpy as np

from placer.problem import PlacementProblem
from placer.solve.evaluate import Costs
from placer.solve.heuristics.common import Timeline, earliest_slot, group_target, unit_weight

__all__ = ["heft", "upward_rank"]


def upward_rank(problem: PlacementProblem, costs: Costs) -> np.ndarray:
    """HEFT upward rank with averages over allowed targets / allowed distinct target pairs."""
    p = problem
    allowed = p.allowed
    avg = np.array([costs.cost[i, allowed[i]].mean() for i in range(p.n_ops)])
    comm: dict[tuple[int, int], float] = {}
    for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)):
        if u < 0:
            continue
        au = np.flatnonzero(allowed[u])
        for v in cs:
            av = np.flatnonzero(allowed[v])
            # every (a, b) pair with a != b, row-major (as a list over au then av would be): vectorized
            vals = (np.asarray(costs.link[k])[np.ix_(au, av)] + np.asarray(costs.entry)[av][None, :])[
                au[:, None] != av[None, :]]
            c = float(np.mean(vals)) if vals.size else 0.0
            comm[(u, v)] = max(comm.get((u, v), 0.0), c)
    rank = np.zeros(p.n_ops)
    for u in range(p.n_ops - 1, -1, -1):
        best = 0.0
        for v in p.succs[u]:
            best = max(best, comm[(u, v)] + rank[v])
        rank[u] = avg[u] + best
    return rank


def heft(problem: PlacementProblem, costs: Costs | None = None, who: str = "heft",
         lookahead: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """HEFT with insertion. Returns ``(assign, start, order)``; ``order`` = ops by start time.

    ``lookahead`` (``(n_ops, T)``): pick the target minimizing the earliest finish time plus
    ``lookahead[v, d]`` (PEFT's optimistic cost table, Arabnejad and Barbosa 2014: e.g. the
    per-target tails of :func:`~placer.solve.bounds_comm.comm_heads_tails`, so an op does not
    go where its successors would then pay transfers)."""
    p = problem
    c = costs or Costs.of(p)
    rank = upward_rank(p, c)
    look = np.zeros((p.n_ops, p.n_targets))
    if lookahead is not None:
        look = np.where(np.isfinite(lookahead), lookahead, 0.0)
    order = sorted(range(p.n_ops), key=lambda i: (-rank[i], i))
    assign = np.full(p.n_ops, -1, dtype=int)
    start = np.zeros(p.n_ops)
    end = np.zeros(p.n_ops)
    lines = [Timeline() for _ in range(p.n_resources)]  # one per target unless cores are shared
    res = p.resource_sets
    mem_free = np.array(p.memory_cap_bytes, dtype=float)
    target_of_group: dict[int, int] = {}
    prod, in_t = p.tensor_producer, p.in_tensors

    def eft(v: int, d: int) -> tuple[float, float]:
        ready = 0.0
        for k in in_t[v]:
            u = prod[k]
            a = assign[u]
            r = end[u] if a == d else end[u] + c.link[k, a, d] + c.entry[d]
            ready = max(ready, r)
        s = earliest_slot(lines, res[d], ready, c.cost[v, d])
        return s, s + c.cost[v, d]

    for v in order:
        g = p.group_of[v]
        if g >= 0 and g in target_of_group:
            d = target_of_group[g]
        else:
            unit = (v,) if g < 0 else tuple(p.op_index[o] for o in p.colocate[g])
            w = unit_weight(p, unit)
            cands = [d for d in range(p.n_targets) if np.isfinite(p.cost_ms[v, d]) and mem_free[d] >= w
                     and (p.pin_of[v] < 0 or p.pin_of[v] == d)]
            best = min(cands, key=lambda d: (eft(v, d)[1] + look[v, d], d)) if cands else 0
            d = group_target(p, unit, best, mem_free, who)
            mem_free[d] -= w
            if g >= 0:
                target_of_group[g] = d
        s, e = eft(v, d)
        assign[v], start[v], end[v] = d, s, e
        for r in res[d]:
            lines[r].insert(s, e)
    order_by_start = sorted(range(p.n_ops), key=lambda i: (start[i], i))
    return assign, start, order_by_start
