"""Scheduling a fixed assignment: insertion list scheduling in decreasing upward rank computed with
the assigned costs and the actual transfer delays."""

from __future__ import annotations

import numpy as np

from placer.problem import PlacementProblem
from placer.solve.evaluate import Costs
from placer.solve.heuristics.common import Timeline, earliest_slot

__all__ = ["fixed_rank", "schedule_fixed"]


def fixed_rank(problem: PlacementProblem, assign: np.ndarray, costs: Costs | None = None) -> np.ndarray:
    """Upward rank (longest path to a sink) with the assigned costs and actual transfer delays."""
    p = problem
    c = costs or Costs.of(p)
    rank = np.zeros(p.n_ops)
    prod = p.tensor_producer
    delay: dict[tuple[int, int], float] = {}
    for k, (u, cs) in enumerate(zip(prod, p.tensor_consumers)):
        if u < 0:
            continue
        a = assign[u]
        for v in cs:
            b = assign[v]
            dl = 0.0 if a == b else float(c.link[k, a, b] + c.entry[b])
            if dl > delay.get((u, v), -1.0):
                delay[(u, v)] = dl
    for u in range(p.n_ops - 1, -1, -1):
        best = 0.0
        for v in p.succs[u]:
            best = max(best, delay[(u, v)] + rank[v])
        rank[u] = c.cost[u, assign[u]] + best
    return rank


def schedule_fixed(problem: PlacementProblem, assign: np.ndarray, costs: Costs | None = None,
                   rank: np.ndarray | None = None) -> tuple[np.ndarray, list[int]]:
    """Insertion list schedule of a fixed assignment in decreasing rank. Returns ``(start, order)``."""
    p = problem
    c = costs or Costs.of(p)
    if rank is None:
        rank = fixed_rank(p, assign, c)
    order = sorted(range(p.n_ops), key=lambda i: (-rank[i], i))
    lines = [Timeline() for _ in range(p.n_resources)]
    res = p.resource_sets
    start = np.zeros(p.n_ops)
    end = np.zeros(p.n_ops)
    prod, in_t = p.tensor_producer, p.in_tensors
    for v in order:
        d = assign[v]
        ready = 0.0
        for k in in_t[v]:
            u = prod[k]
            a = assign[u]
            r = end[u] if a == d else end[u] + c.link[k, a, d] + c.entry[d]
            ready = max(ready, r)
        dur = c.cost[v, d]
        s0 = earliest_slot(lines, res[d], ready, dur) if dur > 0 else ready
        start[v], end[v] = s0, s0 + dur
        if dur > 0:
            for r in res[d]:
                lines[r].insert(s0, s0 + dur)
    return start, sorted(range(p.n_ops), key=lambda i: (start[i], i))
