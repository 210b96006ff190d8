"""Pipeline heuristics (candidates only: :func:`~placer.solve.evaluate.pipeline_eval` scores them).

* :func:`repair_pipeline`: turn any assignment into a monotone pipeline with at most K stages
  (optionally contiguous in op order), greedily, keeping each op on its target when it can. It
  places :attr:`~placer.problem.PlacementProblem.pipeline_units` whole (a colocation group with
  every op on a path between its members), so groups spanning the graph never defeat it.
* :func:`split_pipeline`: for each candidate stage order, cut the op order into contiguous stages
  balancing per-stage compute; :func:`best_pipeline` picks the best candidate.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

import numpy as np

from placer.errors import ProblemError
from placer.problem import PlacementProblem
from placer.solve.evaluate import pipeline_eval, stage_order
from placer.solve.heuristics.common import HeuristicError, unit_weight

__all__ = ["best_pipeline", "repair_pipeline", "split_pipeline"]


def repair_pipeline(problem: PlacementProblem, assign: np.ndarray, num_stages: int, contiguous: bool,
                    who: str = "heuristic") -> tuple[np.ndarray, list[int]]:
    """Make ``assign`` a monotone pipeline of at most ``num_stages`` stages on distinct targets.

    Works on :attr:`~placer.problem.PlacementProblem.pipeline_units` (each colocation group with
    every op a monotone pipeline must keep in its stage, e.g. everything between a forward op and
    its colocated backward op), in their topological order (op order if ``contiguous``). Each unit
    keeps the target most of its ops have when that target's stage is not before any
    predecessor's stage (and, if ``contiguous``, is the current last stage), else opens a new
    stage on it if the target is unused, else moves to the cheapest allowed existing stage at or
    after its predecessors, else opens a stage on the cheapest unused allowed target.

    Returns
    -------
    assign, order : the repaired assignment and the stage targets in order.

    Raises
    ------
    HeuristicError
        If some unit cannot be placed (stage limit, support or memory), or, with ``contiguous``,
        the units are not runs of the op order (``solve`` hands solvers a canonical listing, where
        they are).
    """
    p = problem
    n = p.n_ops
    out = np.full(n, -1, dtype=int)
    stage_of = np.full(n, -1, dtype=int)
    stages: list[int] = []
    mem_free = np.array(p.memory_cap_bytes, dtype=float)
    units = sorted(p.pipeline_units, key=min) if contiguous else p.pipeline_units
    for unit in units:
        idx = list(unit)
        members = set(unit)
        lb = max((int(stage_of[u]) for v in unit for u in p.preds[v] if u not in members), default=0)
        ok = p.allowed[idx].all(axis=0)
        w = unit_weight(p, unit)
        ucost = np.where(ok, np.where(ok[None, :], p.cost_ms[idx], 0.0).sum(axis=0), np.inf)

        def fits(d: int, ok: np.ndarray = ok, w: float = w) -> bool:
            return bool(ok[d]) and mem_free[d] >= w

        want = int(np.bincount(np.asarray(assign)[idx], minlength=p.n_targets).argmax())
        s = None
        lo = max(lb, len(stages) - 1) if contiguous else lb
        if want in stages and stages.index(want) >= lo and fits(want):
            s = stages.index(want)
        elif want not in stages and len(stages) < num_stages and fits(want):
            stages.append(want)
            s = len(stages) - 1
        else:
            cand = [i for i in range(max(lo, 0), len(stages)) if fits(stages[i])]
            if cand:
                s = min(cand, key=lambda i: (ucost[stages[i]], i))
            elif len(stages) < num_stages:
                free = [d for d in range(p.n_targets) if d not in stages and fits(d)]
                if free:
                    stages.append(min(free, key=lambda d: (ucost[d], d)))
                    s = len(stages) - 1
        if s is None:
            what = repr(p.ops[unit[0]])
            if len(unit) > 1:
                what += f" and the {len(unit) - 1} ops it must share a stage with"
            raise HeuristicError(f"{who}: op {what} fits no pipeline stage (at most {num_stages} stages)")
        d = stages[s]
        mem_free[d] -= w
        out[idx], stage_of[idx] = d, s
    if any(stage_of[u] > stage_of[v] for u, v in p.edges) or (
            contiguous and bool((np.diff(stage_of) < 0).any())):
        raise HeuristicError(f"{who}: the pipeline units are not runs of the op order "
                             "(use the canonical problem)")
    return out, stages


def _contiguous_cuts(prefix: np.ndarray, order: Sequence[int], n: int) -> list[int]:
    """Cut positions splitting ops 0..n-1 into len(order) contiguous stages with balanced compute.

    ``prefix[d]`` is the prefix sum of op costs on target d (inf where unsupported). Greedy: binary
    search the smallest bottleneck B for which walking left to right, each stage takes as many ops
    as fit under B; falls back to equal splits.
    """
    m = len(order)

    def feasible(b: float) -> list[int] | None:
        cuts = [0]
        pos = 0
        for si, d in enumerate(order):
            if si == m - 1:
                if prefix[d][n] - prefix[d][pos] <= b:
                    cuts.append(n)
                    return cuts
                return None
            # largest j with prefix[d][j] - prefix[d][pos] <= b
            j = int(np.searchsorted(prefix[d], prefix[d][pos] + b, side="right")) - 1
            j = max(j, pos)
            cuts.append(j)
            pos = j
        return None

    finite = [prefix[d][n] for d in order if np.isfinite(prefix[d][n])]
    hi = max(finite) if finite else 1.0
    lo = 0.0
    best = feasible(hi)
    if best is None:
        return [round(i * n / m) for i in range(m + 1)]
    for _ in range(40):
        mid = (lo + hi) / 2
        cuts = feasible(mid)
        if cuts is None:
            lo = mid
        else:
            hi, best = mid, cuts
    return best


def split_pipeline(problem: PlacementProblem, num_stages: int, orders: Sequence[Sequence[int]] | None = None,
                   max_orders: int = 32, deadline: float | None = None) -> list[tuple[np.ndarray, list[int]]]:
    """Contiguous pipeline candidates: for each stage order, balanced compute cuts of the op order.

    Unsupported ops inside a stage are repaired with :func:`repair_pipeline` (contiguous). Returns
    the feasible ``(assign, order)`` candidates (not yet compared).
    """
    p = problem
    n, t = p.n_ops, p.n_targets
    cost = np.where(p.allowed, p.cost_ms, np.inf)
    # prefix sums with unsupported ops counted at their cheapest cost (repaired afterwards)
    minc = cost.min(axis=1)
    prefix = {}
    for d in range(t):
        c = np.where(np.isfinite(cost[:, d]), cost[:, d], minc)
        prefix[d] = np.concatenate([[0.0], np.cumsum(c)])
    if orders is None:
        speed = sorted(range(t), key=lambda d: prefix[d][n])
        orders = []
        per_m = max(1, max_orders // num_stages)
        for m in range(1, num_stages + 1):
            perms = itertools.permutations(speed[:min(t, m + 1)], m)
            for perm in itertools.islice(perms, per_m):
                orders.append(list(perm))
    out = []
    for order in orders:
        if deadline is not None and out and time.monotonic() > deadline:
            break
        cuts = _contiguous_cuts(prefix, order, n)
        assign = np.empty(n, dtype=int)
        for si, d in enumerate(order):
            assign[cuts[si]:cuts[si + 1]] = d
        try:
            a2, st = repair_pipeline(p, assign, num_stages, True, who="split")
        except ProblemError:
            continue
        if stage_order(p, a2) is not None:
            out.append((a2, st))
    return out


def best_pipeline(problem: PlacementProblem, candidates: Sequence[tuple[np.ndarray, list[int]]]
                  ) -> tuple[np.ndarray, list[int]] | None:
    """The candidate with the smallest (bottleneck, latency)."""
    best, key = None, None
    for assign, order in candidates:
        ev = pipeline_eval(problem, assign, order)
        k = (ev.bottleneck, ev.latency)
        if key is None or k < key:
            best, key = (assign, order), k
    return best
