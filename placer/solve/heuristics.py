"""Heuristic building blocks shared by the baselines and by CP-SAT's hints.

* :func:`priority_assign`: each placement unit (op or colocation group) goes to the first target
  of a preference list that supports its first op and has memory room; a group goes where its
  first op goes if every member is supported there, else to the first target (problem order)
  supporting all members.
* :func:`heft`: HEFT (Topcuoglu et al., 2002): upward rank with average costs over the allowed
  targets and average transfer delay over the allowed distinct target pairs; ops in decreasing
  rank; each on the target giving the earliest finish time, inserting into idle gaps; transfers
  are one copy per (tensor, destination target) that delays consumers by link + entry time.
* :func:`lp_assign`: round the LP relaxation of "minimize the largest per-target load" (all but
  a handful of ops are integral in a basic solution; the rest go to their largest fraction, or
  the cheapest target with room); pins, colocation and memory respected.
* :func:`lp_list`: :func:`lp_assign` + :func:`schedule_fixed`, re-solving the LP with each
  target's observed idle time added to its load until the makespan stops improving.
* :func:`schedule_fixed`: for a fixed assignment, insertion list scheduling in decreasing
  upward rank computed with the assigned costs and the actual transfer delays.
* :class:`DynamicList`: time-driven list scheduling that places and orders at once, guided by the
  load LP's prices: the target free first takes the ready op with the best ratio of its LP value
  to the target time it uses (its cost plus part of the wait for its inputs), plus a rank bonus.
  :class:`DynamicListSearch` iterates it over a small portfolio of scoring parameters, re-pricing
  the targets that finish late; :func:`dynamic_list` is the one-call form. On wide graphs where
  load balance decides the makespan it keeps targets busy through the ramp-up where LP rounding
  leaves them idle.
* Targets sharing a core (``PlacementProblem.target_cores``) never run at the same time: the
  insertion schedulers keep one timeline per resource (``problem.resource_sets``) and a slot must
  be free on every resource of the target; the dynamic list scheduler treats a target as free
  when all of them are; the LP prices resources. The pipeline heuristics only build candidates;
  :func:`~placer.solve.evaluate.pipeline_eval` scores them with the shared-core bottleneck.
* :func:`repair_pipeline`: turn any assignment into a monotone pipeline with at most K stages
  (optionally contiguous in op order), greedily, keeping each op on its target when it can. It
  places :attr:`~placer.problem.PlacementProblem.pipeline_units` whole (a colocation group with
  every op on a path between its members), so groups spanning the graph never defeat it.
* :func:`split_pipeline`: a fast pipeline heuristic: for each candidate stage order, cut the op
  order into contiguous stages balancing per-stage compute, then evaluate exactly.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Sequence

import numpy as np

from placer.errors import ProblemError
from placer.problem import PlacementProblem
from placer.solve.bounds import MinMaxLoadLP, _unit_costs, dual_load, edge_delays, shave
from placer.solve.evaluate import Costs, latency_schedule, pipeline_eval, resource_busy_ms, stage_order

__all__ = [
    "DynamicList",
    "DynamicListSearch",
    "HeuristicError",
    "best_pipeline",
    "dynamic_list",
    "fixed_rank",
    "heft",
    "lp_assign",
    "lp_list",
    "priority_assign",
    "repair_pipeline",
    "schedule_fixed",
    "split_pipeline",
]


class HeuristicError(ProblemError):
    """A heuristic found no feasible answer (memory caps, pipeline shape); exact solvers may still."""


def _unit_weight(problem: PlacementProblem, unit: Sequence[int]) -> float:
    return float(problem.weight_bytes[list(unit)].sum())


def _group_target(problem: PlacementProblem, unit: Sequence[int], first_choice: int,
                  mem_free: np.ndarray, who: str) -> int:
    """Where a unit goes given where its first op would go (the baselines' colocation rule)."""
    p = problem
    w = _unit_weight(p, unit)
    if p.allowed[unit[0], first_choice] and mem_free[first_choice] >= w:
        return first_choice
    for d in range(p.n_targets):
        if p.allowed[unit[0], d] and mem_free[d] >= w:
            return d
    names = [p.ops[i] for i in unit]
    raise HeuristicError(f"{who}: no target has memory room for {names if len(unit) > 1 else names[0]!r}")


def priority_assign(problem: PlacementProblem, preference: Sequence[int] | None = None, *,
                    fastest_fallback: bool = False, who: str = "heuristic") -> np.ndarray:
    """Assign units in topological order to the first preferred target with support and memory room.

    Parameters
    ----------
    preference : sequence of target indices
        Preference list (default: problem target order). Targets not listed follow in problem order.
    fastest_fallback : bool
        If True, only ``preference[0]`` is preferred and other ops go to their fastest target.
    """
    p = problem
    pref = list(preference or [])
    pref += [d for d in range(p.n_targets) if d not in pref]
    if np.isinf(p.memory_cap_bytes).all():  # no memory caps: every unit at once, the same choices
        return _priority_assign_uncapped(p, pref, fastest_fallback, who)
    assign = np.full(p.n_ops, -1, dtype=int)
    mem_free = np.array(p.memory_cap_bytes, dtype=float)
    for unit in p.units:
        first = unit[0]
        w = _unit_weight(p, unit)
        cands = pref
        if fastest_fallback:
            rest = sorted(pref[1:], key=lambda d: (p.cost_ms[first, d], d))
            cands = [pref[0]] + rest
        ok = [d for d in cands if np.isfinite(p.cost_ms[first, d]) and mem_free[d] >= w
              and (p.pin_of[first] < 0 or p.pin_of[first] == d)]
        choice = _group_target(p, unit, ok[0] if ok else max(p.pin_of[first], 0),
                               mem_free, who)
        assign[list(unit)] = choice
        mem_free[choice] -= w
    return assign


def _priority_assign_uncapped(p: PlacementProblem, pref: list[int], fastest_fallback: bool, who: str
                              ) -> np.ndarray:
    """:func:`priority_assign` without memory caps (a unit's choice then depends on its first op only),
    vectorized over the units: the loop's choices exactly."""
    units = p.units
    first = np.fromiter((u[0] for u in units), dtype=np.int64, count=len(units))
    rows = np.arange(len(first))
    cost = p.cost_ms[first]
    if fastest_fallback:  # pref[0], then the others by (cost, target index)
        rest = np.array(sorted(pref[1:]), dtype=np.int64)
        ranked = rest[np.argsort(cost[:, rest], axis=1, kind="stable")] if len(rest) else rest[None, :0]
        cands = np.concatenate([np.full((len(first), 1), pref[0], dtype=np.int64),
                                np.broadcast_to(ranked, (len(first), len(rest)))], axis=1)
    else:
        cands = np.broadcast_to(np.asarray(pref, dtype=np.int64), (len(first), len(pref)))
    pin = p.pin_of[first]
    ok = np.isfinite(cost[rows[:, None], cands]) & ((pin < 0)[:, None] | (cands == pin[:, None]))
    choice = np.where(ok.any(axis=1), cands[rows, ok.argmax(axis=1)], np.maximum(pin, 0))
    # the colocation rule (_group_target): that choice if allowed, else the first allowed target
    allowed = p.allowed[first]
    good = allowed[rows, choice]
    choice = np.where(good, choice, allowed.argmax(axis=1))
    stuck = np.flatnonzero(~good & ~allowed.any(axis=1))
    if len(stuck):
        names = [p.ops[i] for i in units[int(stuck[0])]]
        raise HeuristicError(f"{who}: no target has memory room for {names if len(names) > 1 else names[0]!r}")
    assign = np.full(p.n_ops, -1, dtype=int)
    if len(units) == p.n_ops:  # single-op units
        assign[first] = choice
    else:
        for unit, d in zip(units, choice.tolist()):
            assign[list(unit)] = d
    return assign


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


class _Timeline:
    """Idle gaps of one target, for insertion-based scheduling.

    The target is busy from 0 to ``tail`` except in the sorted, disjoint ``gaps`` (``gs[i]``,
    ``ge[i]``); a search only visits the gaps, which stay few when the schedule is dense.
    Zero-length slots never go into the timeline (instantaneous ops occupy nothing).
    """

    def __init__(self) -> None:
        self.gs: list[float] = []
        self.ge: list[float] = []
        self.tail = 0.0

    def earliest(self, ready: float, dur: float) -> float:
        """Earliest start >= ready of a ``dur``-long slot."""
        gs, ge = self.gs, self.ge
        i = bisect.bisect_right(ge, ready)  # first gap ending after ready
        while i < len(gs):
            t = max(ready, gs[i])
            if t + dur <= ge[i]:
                return t
            i += 1
        return max(self.tail, ready)

    def insert(self, start: float, end: float) -> None:
        """Mark ``[start, end)`` busy (it must lie in a gap or after the tail)."""
        if end <= start:
            return
        if start >= self.tail:
            if start > self.tail:
                self.gs.append(self.tail)
                self.ge.append(start)
            self.tail = end
            return
        i = bisect.bisect_right(self.gs, start) - 1
        gs, ge = self.gs[i], self.ge[i]
        new = [(a, b) for a, b in ((gs, start), (end, ge)) if b > a]
        self.gs[i:i + 1] = [a for a, _ in new]
        self.ge[i:i + 1] = [b for _, b in new]


def _earliest(lines: list[_Timeline], rs: tuple[int, ...], ready: float, dur: float) -> float:
    """Earliest start >= ready of a ``dur``-long slot free on every timeline of ``rs``.

    Each timeline's ``earliest`` is monotone and never earlier than its argument, so iterating
    from ``ready`` climbs to the least common start (it never passes one)."""
    if len(rs) == 1:
        return lines[rs[0]].earliest(ready, dur)
    t = ready
    while True:
        t2 = t
        for r in rs:
            t2 = lines[r].earliest(t2, dur)
        if t2 == t:
            return t
        t = t2


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
    lines = [_Timeline() for _ in range(p.n_resources)]  # one per target unless cores are shared
    res = p.resource_sets
    mem_free = np.array(p.memory_cap_bytes, dtype=float)
    group_target: dict[int, int] = {}
    prod, in_t = p.tensor_producer, p.in_tensors

    def eft(v: int, d: int) -> tuple[float, float]:
        ready = 0.0
        for k in in_t[v]:
            u = prod[k]
            a = assign[u]
            r = end[u] if a == d else end[u] + c.link[k, a, d] + c.entry[d]
            ready = max(ready, r)
        s = _earliest(lines, res[d], ready, c.cost[v, d])
        return s, s + c.cost[v, d]

    for v in order:
        g = p.group_of[v]
        if g >= 0 and g in group_target:
            d = group_target[g]
        else:
            unit = (v,) if g < 0 else tuple(p.op_index[o] for o in p.colocate[g])
            w = _unit_weight(p, unit)
            cands = [d for d in range(p.n_targets) if np.isfinite(p.cost_ms[v, d]) and mem_free[d] >= w
                     and (p.pin_of[v] < 0 or p.pin_of[v] == d)]
            best = min(cands, key=lambda d: (eft(v, d)[1] + look[v, d], d)) if cands else 0
            d = _group_target(p, unit, best, mem_free, who)
            mem_free[d] -= w
            if g >= 0:
                group_target[g] = d
        s, e = eft(v, d)
        assign[v], start[v], end[v] = d, s, e
        for r in res[d]:
            lines[r].insert(s, e)
    order_by_start = sorted(range(p.n_ops), key=lambda i: (start[i], i))
    return assign, start, order_by_start


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
        w = _unit_weight(p, unit)
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


def lp_assign(problem: PlacementProblem, costs: Costs | None = None, num_stages: int | None = None,
              who: str = "lp", offset: np.ndarray | None = None, lp: object | None = None,
              info: dict | None = None) -> np.ndarray:
    """Assignment from the rounded LP relaxation of min-max load (see module docstring).

    ``offset[d]`` is added to target ``d``'s load (e.g. its expected idle time); ``lp`` is an
    already built :class:`~placer.solve.bounds.MinMaxLoadLP` (with memory caps) to re-solve;
    ``info["lp_value"]`` receives the LP optimum.
    """
    p = problem
    c = costs or Costs.of(p)
    t = p.n_targets
    units = p.units
    lp = lp or MinMaxLoadLP(p, c, num_stages, memory=True)
    res = lp.solve(offset)  # type: ignore[attr-defined]
    if res is None:
        raise HeuristicError(f"{who}: LP relaxation not solved")
    if info is not None:
        info["lp_value"] = res[0]
    frac = res[1]
    uc = np.array([c.cost[list(u)].sum(axis=0) for u in units])
    uw = np.array([_unit_weight(p, u) for u in units])
    assign = np.full(p.n_ops, -1, dtype=int)
    mem_free = np.array(p.memory_cap_bytes, dtype=float)
    # integral units first (they are feasible together), fractional ones after
    order = sorted(range(len(units)), key=lambda i: (bool(frac[i].max() < 1 - 1e-6), i))
    for i in order:
        allowed = [d for d in range(t) if p.allowed[units[i][0], d]]
        prefs = sorted(allowed, key=lambda d: (-round(frac[i, d], 6), uc[i, d]))
        d = next((d for d in prefs if mem_free[d] >= uw[i]), None)
        if d is None:
            raise HeuristicError(f"{who}: no target has memory room for {p.ops[units[i][0]]!r}")
        assign[list(units[i])] = d
        mem_free[d] -= uw[i]
    return assign


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
    lines = [_Timeline() for _ in range(p.n_resources)]
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
        s0 = _earliest(lines, res[d], ready, dur) if dur > 0 else ready
        start[v], end[v] = s0, s0 + dur
        if dur > 0:
            for r in res[d]:
                lines[r].insert(s0, s0 + dur)
    return start, sorted(range(p.n_ops), key=lambda i: (start[i], i))


def lp_list(problem: PlacementProblem, costs: Costs | None = None, deadline: float | None = None,
            max_iter: int = 8, who: str = "lp-list", info: dict | None = None) -> tuple[np.ndarray, list[int]]:
    """LP-rounding assignment + :func:`schedule_fixed`, iterated with idle compensation.

    Iteration ``i`` solves the min-max-load LP with each resource's load increased by the idle time
    its schedule showed so far (smoothed), so targets that wait a lot get less work; stops after
    ``max_iter`` rounds, two rounds without improvement, or at ``deadline``. Returns the best
    ``(assign, order)`` seen (by makespan); ``info["load_bound"]`` gets the first LP's optimum (a
    lower bound on the makespan).
    """

    p = problem
    c = costs or Costs.of(p)
    t = p.n_targets
    idle = np.zeros(p.n_resources)
    best: tuple[float, np.ndarray, list[int]] | None = None
    stall = 0
    lp = MinMaxLoadLP(p, c, memory=True)
    for it in range(max_iter):
        if it and deadline is not None and time.monotonic() > deadline:
            break
        lp_info: dict = {}
        assign = lp_assign(p, c, who=who, offset=idle, lp=lp, info=lp_info)
        if it == 0 and info is not None:
            info["load_bound"] = shave(lp_info["lp_value"])  # with memory caps: still a relaxation
        _, order = schedule_fixed(p, assign, c)
        _, end = latency_schedule(p, assign, order, c)
        makespan = float(end.max())
        if best is None or makespan < best[0] - 1e-12:
            best, stall = (makespan, assign, order), 0
        else:
            stall += 1
            if stall >= 2:
                break
        finish = np.array([end[assign == d].max() if (assign == d).any() else 0.0 for d in range(t)])
        if p.shares_resources:  # a resource is done when the last target using it is
            finish = np.array([finish[list(u)].max() for u in p.resource_users])
        new_idle = np.maximum(finish - resource_busy_ms(p, assign, c), 0.0)
        idle = new_idle if it == 0 else 0.5 * (idle + new_idle)
    assert best is not None
    return best[1], best[2]


# ---------------------------------------------------------------------- price-guided dynamic list scheduling
class DynamicList:
    """Time-driven list scheduling guided by the load LP's prices (one pass: :meth:`schedule`).

    ``lam[d] >= 0`` prices a millisecond of target ``d`` (the multipliers of the min-max-load LP,
    :func:`~placer.solve.bounds.dual_load`); ``value[v] = min_d lam[d] c[v,d]`` is what op ``v``
    is worth wherever it runs. The target that becomes free first picks, among the ops whose
    predecessors are all scheduled, the one maximizing
    ``(value[v] / (lam[d] (c[v,d] + beta * wait)))**gamma + alpha * rank[v] / max(rank)``
    (``wait``: idle time until its inputs arrive on ``d``; ``rank``: HEFT's upward rank), and
    starts it as early as it can. A target that can run none of them waits for the next decision.
    A target is free when every target sharing a core with it is (``problem.conflicts``).
    An op that costs 0 somewhere runs there the moment its inputs are ready (it occupies nothing).
    Colocation groups follow their first placed member; memory caps are checked when a unit is
    placed (:class:`HeuristicError` if a unit fits nowhere).
    """

    def __init__(self, problem: PlacementProblem, costs: Costs | None = None) -> None:
        p = problem
        c = costs or Costs.of(p)
        self.p, self.c = p, c
        n, t = p.n_ops, p.n_targets
        self.cost = np.where(p.allowed, c.cost, np.inf)
        delays = edge_delays(p, c)
        self.succ: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(n)]
        self.npred = np.zeros(n, dtype=int)
        for (u, v), m in sorted(delays.items()):
            self.succ[u].append((v, m))
            self.npred[v] += 1
        rank = upward_rank(p, c)
        self.rank = rank / rank.max() if rank.max() > 0 else rank
        self.zero = (self.cost == 0).any(axis=1)
        self.finite = np.isfinite(self.cost)
        self.unit_of = np.empty(n, dtype=int)
        for ui, unit in enumerate(p.units):
            self.unit_of[list(unit)] = ui
        self.unit_w = np.array([_unit_weight(p, u) for u in p.units])
        self.capped = bool(np.isfinite(p.memory_cap_bytes).any() and self.unit_w.any())
        self.grouped = any(len(u) > 1 for u in p.units)
        self.t = t
        self.conf = p.conflicts if p.shares_resources else None

    def schedule(self, lam: np.ndarray, alpha: float = 0.05, beta: float = 0.5, gamma: float = 1.0,
                 who: str = "dynamic") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One pass. Returns ``(assign, start, end)`` (float costs of the constructor's ``costs``)."""
        p, cost, t = self.p, self.cost, self.t
        n = p.n_ops
        lam = np.maximum(np.asarray(lam, dtype=float), 1e-9)
        lam = lam / lam.sum()
        value = np.where(np.isfinite(cost), cost * lam[None, :], np.inf).min(axis=1)
        arr = np.zeros((n, t))
        npred = self.npred.copy()
        cand = np.zeros(n, dtype=bool)
        assign = np.full(n, -1, dtype=int)
        start = np.zeros(n)
        end = np.zeros(n)
        avail = [0.0] * t
        unit_target = np.full(len(p.units), -1, dtype=int)
        mem_free = np.array(p.memory_cap_bytes, dtype=float)
        succ, unit_of, unit_w, rank = self.succ, self.unit_of, self.unit_w, self.rank
        todo: list[int] = []
        placed = [0]

        def ok_targets(v: int) -> np.ndarray:
            ok = np.isfinite(cost[v])
            ut = unit_target[unit_of[v]]
            if ut >= 0:
                ok = ok & (np.arange(t) == ut)
            elif self.capped:
                ok = ok & (mem_free >= unit_w[unit_of[v]])
            return ok

        def place(v: int, d: int, s: float) -> None:
            e = s + cost[v, d]
            assign[v], start[v], end[v] = d, s, e
            placed[0] += 1
            ui = unit_of[v]
            if unit_target[ui] < 0:
                unit_target[ui] = d
                mem_free[d] -= unit_w[ui]
            for w, m in succ[v]:
                npred[w] -= 1
                np.maximum(arr[w], e + m[d], out=arr[w])
                if npred[w] == 0:
                    todo.append(w)

        def release() -> None:
            while todo:
                w = todo.pop()
                if self.zero[w]:
                    ok = ok_targets(w) & (cost[w] == 0)
                    if ok.any():
                        d = int(np.flatnonzero(ok)[np.argmin(arr[w][ok])])
                        place(w, d, float(arr[w, d]))
                        continue
                cand[w] = True

        todo.extend(int(v) for v in np.flatnonzero(npred == 0)[::-1])
        release()
        finite = self.finite
        simple = not (self.grouped or self.capped)
        lam_l = lam.tolist()
        scanned = 0
        while placed[0] < n:
            idx = np.flatnonzero(cand)
            scanned += len(idx)
            if not len(idx):  # pragma: no cover - only with a cycle
                raise HeuristicError(f"{who}: no op is ready")
            okm = finite[idx]
            if not simple:
                ut = unit_target[unit_of[idx]]
                okm = okm & ((ut[:, None] < 0) | (ut[:, None] == np.arange(t)[None, :]))
                if self.capped:
                    okm &= (ut[:, None] >= 0) | (unit_w[unit_of[idx]][:, None] <= mem_free[None, :])
            runnable = okm.any(axis=0).tolist()
            d = -1
            for e_ in range(t):
                if runnable[e_] and (d < 0 or avail[e_] < avail[d]):
                    d = e_
            if d < 0:
                raise HeuristicError(f"{who}: no target has memory room for {p.ops[int(idx[0])]!r}")
            tau = avail[d]
            sel = idx[okm[:, d]]
            wait = arr[sel, d] - tau
            np.maximum(wait, 0.0, out=wait)
            wait *= beta
            wait += cost[sel, d]
            score = value[sel] / (wait * lam_l[d] + 1e-300)
            if gamma != 1.0:
                score **= gamma
            if alpha:
                score += alpha * rank[sel]
            v = int(sel[int(np.argmax(score))])
            s = max(tau, float(arr[v, d]))
            cand[v] = False
            place(v, d, s)
            if end[v] > s:
                if self.conf is None:
                    avail[d] = end[v]
                else:  # the targets sharing a core with d wait for it too
                    for d2 in self.conf[d]:
                        avail[d2] = max(avail[d2], float(end[v]))
            release()
        self.work = n + scanned  # deterministic measure of the pass's effort (see DynamicListSearch)
        return assign, start, end


class DynamicListSearch:
    """Iterated :class:`DynamicList` with price re-balancing (resumable: call :meth:`run` again).

    A small portfolio of scoring parameters ``(alpha, beta, gamma)`` takes turns; each keeps its own
    prices, starting from the load LP's multipliers and multiplied after each of its passes by
    ``exp(eta (F_d - mean F) / mean F)`` (``F_d``: when target ``d`` finishes), so targets that
    finish late get dearer. Every pass is re-timed with :func:`~placer.solve.evaluate.latency_schedule`
    and the best ``(makespan, assign, order)`` is kept in :attr:`best`. :attr:`dtime` adds up a
    deterministic estimate of each pass's wall time (per op and per scored candidate), so budgets
    given in it make the search reproducible; see :meth:`run`.
    """

    #: calibration of :attr:`dtime`: wall seconds per op and per scored candidate of a pass
    SECONDS_PER_OP = 2.3e-5
    SECONDS_PER_SCAN = 5.3e-8
    PORTFOLIO = ((0.05, 0.4, 2.0), (0.02, 0.5, 1.0), (0.05, 0.3, 1.0), (0.3, 0.3, 1.0), (0.05, 0.5, 2.0),
                 (0.1, 0.5, 1.0))

    def __init__(self, problem: PlacementProblem, costs: Costs | None = None, lam: np.ndarray | None = None,
                 eta: float = 1.0, who: str = "dynamic", max_passes: int = 96,
                 deadline: float | None = None) -> None:
        p = problem
        self.p = p
        self.c = costs or Costs.of(p)
        self.engine = DynamicList(p, self.c)
        if lam is None:
            lam = (dual_load(_unit_costs(p, self.c), resources=p.resource_sets, deadline=deadline)[1]
                   if p.n_targets > 1
                   else np.ones(1))
        lam = np.maximum(np.asarray(lam, dtype=float), 1e-6)
        self.lams = [lam / lam.sum() for _ in self.PORTFOLIO]
        self.eta = eta
        self.who = who
        self.passes = 0
        self.max_passes = max_passes  # cap over all calls (more passes rarely help: prices settle)
        self.pass_s = 0.0  # slowest pass so far (wall seconds)
        self.dtime = 0.0  # deterministic effort so far (about seconds on a 2-core x86 machine)
        self.best: tuple[float, np.ndarray, list[int]] | None = None
        self.failures = 0  # consecutive failed passes
        self.failed = False

    def step(self) -> float | None:
        """One pass of the next portfolio member; returns its makespan (None if it failed)."""
        p = self.p
        k = self.passes % len(self.PORTFOLIO)
        alpha, beta, gamma = self.PORTFOLIO[k]
        t0 = time.monotonic()
        self.passes += 1
        try:
            assign, start, end = self.engine.schedule(self.lams[k], alpha, beta, gamma, who=self.who)
        except HeuristicError:  # memory caps defeated this pass; give up after a round of failures
            self.dtime += self.SECONDS_PER_OP * p.n_ops
            self.failures += 1
            self.failed = self.failures >= len(self.PORTFOLIO)
            return None
        self.failures = 0
        self.dtime += self.SECONDS_PER_OP * p.n_ops + self.SECONDS_PER_SCAN * (self.engine.work - p.n_ops)
        order = sorted(range(p.n_ops), key=lambda i: (start[i], i))
        makespan = float(latency_schedule(p, assign, order, self.c)[1].max())
        if self.best is None or makespan < self.best[0] - 1e-12:
            self.best = (makespan, assign, order)
        finish = np.zeros(p.n_targets)
        np.maximum.at(finish, assign, end)
        mean = float(finish.mean())
        if mean > 0:
            lam = self.lams[k] * np.exp(np.clip(self.eta * (finish - mean) / mean, -5.0, 5.0))
            lam = np.maximum(lam, 1e-6)
            self.lams[k] = lam / lam.sum()
        self.pass_s = max(self.pass_s, time.monotonic() - t0)
        return makespan

    def run(self, deadline: float | None = None, max_dtime: float | None = None,
            max_passes: int | None = None) -> tuple[float, np.ndarray, list[int]] | None:
        """Passes until :attr:`dtime` reaches ``max_dtime`` or :attr:`passes` reaches ``max_passes``
        (or the constructor's cap) — deterministic budgets, cumulative over calls — or until the
        next pass would end after ``deadline`` (a wall-clock backstop; the first pass always runs).
        Returns :attr:`best`."""
        cap = self.max_passes if max_passes is None else min(max_passes, self.max_passes)
        while not self.failed:
            if self.passes >= cap:
                break
            if max_dtime is not None and self.passes and self.dtime >= max_dtime:
                break
            if deadline is not None and self.passes and time.monotonic() + 1.5 * self.pass_s > deadline:
                break
            self.step()
        return self.best


def dynamic_list(problem: PlacementProblem, costs: Costs | None = None, deadline: float | None = None,
                 max_passes: int = 24) -> tuple[np.ndarray, list[int]]:
    """Best plan ``(assign, order)`` of a :class:`DynamicListSearch` of at most ``max_passes``
    passes; :class:`HeuristicError` if no pass succeeded (memory caps)."""
    best = DynamicListSearch(problem, costs).run(deadline, max_passes=max_passes)
    if best is None:
        raise HeuristicError("dynamic: no feasible placement found (memory caps)")
    return best[1], best[2]
