"""``dp``: exact dynamic program over contiguous pipeline splits (pipeline mode only).

Search space (identical to ``cpsat`` with ``contiguous=True``)
    The problem's op order (a topological order) is cut into ``m <= num_stages`` non-empty runs
    ``ops[c_0:c_1], ops[c_1:c_2], ...`` (``0 = c_0 < ... < c_m = n``); run ``s`` is stage ``s``
    on target ``d_s``, the ``d_s`` pairwise distinct; every op allowed on its stage's target,
    colocation groups inside one run, memory caps per stage. Objective: lexicographic (bottleneck,
    latency) with the exact stage costs of :mod:`placer.plan` (per (tensor, destination) copies,
    ``link_charge``, partition overhead).

Why a label-setting DP
    A stage's time is not a function of its run alone: it pays receives that depend on where
    earlier producers sit, and sends that are known only when later consumers are placed. So the
    state after the first ``s`` stages, ending at cut ``i``, is
    ``(i, set of used targets, target of the producer of every tensor open at i)`` (a tensor is
    open at ``i`` if it is produced before ``i`` and read at or after ``i``; the set of open
    tensors depends on ``i`` only). Its labels are Pareto-minimal vectors
    ``(max closed stage time, sum of closed stage times, time so far of each stage that still
    has open tensors)``: the future adds the same amounts to the same components for every label
    of a state, so a dominated label can never end better in (bottleneck, latency), and keeping
    the Pareto set is exact. With targets sharing cores (``problem.target_cores``) the
    bottleneck is the largest per-resource sum of stage times, so a closed stage on a target with
    shared resources adds its time to a per-resource component ``rsum[r]`` of the label instead
    of ``max closed stage time`` (which keeps the targets with a private resource); the final
    bottleneck is ``max(cmax, max rsum)``, still monotone in every component, so the Pareto
    pruning stays exact. Extending a state tries every unused target ``e`` and every end
    ``j > i``, incrementally (stops at the first op ``e`` cannot run, a memory overflow, or a
    colocation group cut at ``i``).

Broadcast links (``problem.link_broadcast``) with sender-charged copies are refused (the
sender's time would depend on which later stages already received a tensor); the ``ideals``
solver handles them.

Cost: states grow with the number of ways open tensors' producers can be placed; fine for a few
targets and graphs of a few hundred ops, exponential in the worst case.

Time limit and work limit
    The search counts its work (label extensions, dominance comparisons, stage steps) and checks
    the deadline every ``CHECK_EVERY`` units of work, inside the extension loops, so it stops
    within a few milliseconds of the deadline whatever the size of the label sets. Option
    ``max_work`` stops it deterministically after that much work (tests, reproducible runs).
    When stopped, it returns the best complete pipeline found so far (status ``FEASIBLE``) with
    a valid lower bound on the contiguous optimum: the least bottleneck of the labels still to be
    extended (bottlenecks never decrease along an extension, and every complete split passes
    through one of them or a label dominating it), or the largest cheapest op cost if higher.
    Without any complete pipeline yet it raises ProblemError.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from placer.errors import ProblemError
from placer.plan import Plan
from placer.problem import PlacementProblem
from placer.solve.base import SolveContext, Solver, register_solver
from placer.solve.evaluate import Costs, float_noise, make_pipeline_plan

__all__ = ["CHECK_EVERY", "ContiguousDP", "DPResult", "dp_contiguous", "dp_search"]

#: Units of work (label extensions, dominance comparisons, stage steps) between two deadline checks.
CHECK_EVERY = 2000


@dataclass
class _Label:
    cmax: float
    csum: float
    open_cost: tuple[float, ...]  # aligned with the state's sorted open targets
    parent: _Label | None
    target: int
    start: int
    end: int
    rsum: tuple[float, ...] = ()  # closed stage time per shared resource (empty without shared cores)

    def vec(self) -> tuple[float, ...]:
        return (self.cmax, self.csum) + self.rsum + self.open_cost

    def bottleneck(self) -> float:
        return max((self.cmax,) + self.rsum)


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y + 1e-12 * max(1.0, abs(y)) for x, y in zip(a, b))


def _open_tensors(p: PlacementProblem) -> list[tuple[int, ...]]:
    """``out[i]``: the tensors open at cut ``i`` (produced before ``i``, read at or after it), sorted.

    One sweep over the cuts: tensor ``k`` opens at ``prod + 1`` and closes after its last reader."""
    n = p.n_ops
    opens: list[list[int]] = [[] for _ in range(n + 2)]
    closes: list[list[int]] = [[] for _ in range(n + 2)]
    for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)):
        if u < 0 or not cs:
            continue
        last = max(cs)
        if last > u:
            opens[u + 1].append(k)
            closes[last + 1].append(k)
    cur: set[int] = set()
    out: list[tuple[int, ...]] = []
    for i in range(n + 1):
        cur.difference_update(closes[i])
        cur.update(opens[i])
        out.append(tuple(sorted(cur)))
    return out


class _Stop(Exception):
    """The deadline or the work limit was reached inside the search."""


@dataclass
class DPResult:
    """Outcome of :func:`dp_search`.

    ``complete``: the search ran to the end, so ``bottleneck`` / ``latency`` are the contiguous
    optimum (lexicographic). Otherwise they belong to the best complete pipeline found before it
    stopped, and ``bound`` (a lower bound on the contiguous optimal bottleneck) may be smaller.
    """

    bottleneck: float
    latency: float
    assign: np.ndarray
    stage_targets: list[int]
    n_labels: int
    work: int
    complete: bool
    bound: float
    stopped_at: int  # the cut being extended when the search stopped (n when complete)


def dp_contiguous(problem: PlacementProblem, num_stages: int, costs: Costs | None = None,
                  deadline: float | None = None, max_work: int | None = None
                  ) -> tuple[float, float, np.ndarray, list[int], int]:
    """Run the DP. Returns ``(bottleneck, latency, assign, stage_targets, n_labels)`` (see
    :func:`dp_search`; the best complete pipeline found if it was stopped)."""
    r = dp_search(problem, num_stages, costs, deadline, max_work)
    return r.bottleneck, r.latency, r.assign, r.stage_targets, r.n_labels


def dp_search(problem: PlacementProblem, num_stages: int, costs: Costs | None = None,
              deadline: float | None = None, max_work: int | None = None) -> DPResult:
    """Run the DP until it ends, ``deadline`` (``time.monotonic()``) or ``max_work`` units of work.

    Raises ProblemError when no contiguous pipeline exists, or when it was stopped before finding one.
    """
    p = problem
    if p.link_broadcast and len(p.tensors) and (p.charge_code & 1).any():
        raise ProblemError("dp: links.broadcast with sender-charged links is not supported (a stage's send "
                           "time would depend on every later stage); use solver 'ideals' or 'cpsat'")
    c = costs or Costs.of(p)
    n = p.n_ops
    search = _Search(p, num_stages, c, deadline, max_work)
    i = 0
    complete = True
    try:
        for i in range(n):
            search.tick(1)
            search.extend(i)
    except _Stop:
        complete = False
    bound = None
    if not complete:  # also: every op runs in some stage, at its cheapest allowed cost at least
        bound = max(min(search.low[i:]), float(np.where(p.allowed, c.cost, np.inf).min(axis=1).max()))
    return _result(p, search.states[n], search.n_labels, search.work, complete, bound, n if complete else i,
                   max_work)


class _Search:
    """The labels of :func:`dp_search` per cut, and the work spent on them.

    ``states[i]``: key -> Pareto labels of the pipelines of ops ``[0, i)``; key = (used targets mask,
    producer targets of the tensors open at cut ``i``). ``low[i]``: least bottleneck of any label
    ever added at cut ``i`` (a lower bound when stopped)."""

    def __init__(self, p: PlacementProblem, num_stages: int, c: Costs, deadline: float | None,
                 max_work: int | None) -> None:
        n = p.n_ops
        self.p, self.c, self.num_stages = p, c, num_stages
        self.deadline, self.max_work = deadline, max_work
        self.open_at = _open_tensors(p)
        self.g_min: dict[int, int] = {}
        self.g_max: dict[int, int] = {}
        for v in range(n):
            g = int(p.group_of[v])
            if g >= 0:
                self.g_min[g] = min(self.g_min.get(g, v), v)
                self.g_max[g] = max(self.g_max.get(g, v), v)
        self.states: list[dict[tuple, list[_Label]]] = [{} for _ in range(n + 1)]
        self.low = [math.inf] * (n + 1)
        # shared resources get a running sum each; a target with a private resource feeds cmax
        shared = [r for r, u in enumerate(p.resource_users) if len(u) > 1]
        slot_of = {r: i for i, r in enumerate(shared)}
        self.shared_slots = [tuple(slot_of[r] for r in rs if r in slot_of) for rs in p.resource_sets]
        self.states[0][(0, ())] = [_Label(0.0, 0.0, (), None, -1, 0, 0, (0.0,) * len(shared))]
        self.low[0] = 0.0
        self.n_labels = 1
        self.work = 0
        self.next_check = CHECK_EVERY if max_work is None else min(CHECK_EVERY, max_work)

    def tick(self, amount: int) -> None:
        """Count work; raise :class:`_Stop` at the work limit or the deadline (checked every
        :data:`CHECK_EVERY` units)."""
        self.work += amount
        if self.work < self.next_check:
            return
        if self.max_work is not None and self.work >= self.max_work:
            raise _Stop
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _Stop
        self.next_check = self.work + CHECK_EVERY
        if self.max_work is not None:
            self.next_check = min(self.next_check, self.max_work)

    def add(self, i: int, key: tuple, lab: _Label) -> None:
        """Keep ``lab`` at cut ``i`` unless a label of its state dominates it (dropping those it
        dominates)."""
        bucket = self.states[i].setdefault(key, [])
        self.tick(len(bucket) + 1)
        v = lab.vec()
        for other in bucket:
            if _dominates(other.vec(), v):
                return
        bucket[:] = [o for o in bucket if not _dominates(v, o.vec())]
        bucket.append(lab)
        self.n_labels += 1
        b = lab.bottleneck()
        self.low[i] = min(self.low[i], b)

    def extend(self, i: int) -> None:
        """Extend every label at cut ``i`` by one stage on each unused target, then drop them."""
        opened = self.open_at[i]
        for (used, ptgt), labels in self.states[i].items():
            if used.bit_count() >= self.num_stages:
                continue
            open_targets = sorted(set(ptgt))
            prod_tgt = dict(zip(opened, ptgt))
            for e in range(self.p.n_targets):
                if used >> e & 1:
                    continue
                self._stages(i, e, used, open_targets, prod_tgt, labels)
        self.states[i].clear()  # free memory: every label at i has been extended

    def _stages(self, i: int, e: int, used: int, open_targets: list[int], prod_tgt: dict[int, int],
                labels: list[_Label]) -> None:
        """The stages ``[i, j)`` on target ``e``, for every ``j`` the support, memory cap and
        colocation groups allow, closed onto ``labels``."""
        p, c = self.p, self.c
        n = p.n_ops
        allowed, cost, w, cap = p.allowed, c.cost, p.weight_bytes, p.memory_cap_bytes
        code, prod = p.charge_code, p.tensor_producer
        slot = {d: s for s, d in enumerate(open_targets)}
        compute = 0.0
        mem = 0.0
        recv = 0.0
        sender_add = [0.0] * len(open_targets)
        received: set[int] = set()
        need_end = i + 1
        for j in range(i + 1, n + 1):
            self.tick(1)
            v = j - 1
            if not allowed[v, e]:
                break
            compute += cost[v, e]
            mem += w[v]
            if mem > cap[e]:
                break
            g = int(p.group_of[v])
            if g >= 0:
                if self.g_min[g] < i:  # the group started in an earlier stage
                    break
                need_end = max(need_end, self.g_max[g] + 1)
            for k in p.in_tensors[v]:
                if prod[k] < i and k not in received:
                    received.add(k)
                    a = prod_tgt[k]
                    ms = c.link[k, a, e]
                    if code[a, e] & 2:
                        recv += ms
                    recv += c.entry[e]
                    if code[a, e] & 1:
                        sender_add[slot[a]] += ms
            if j < need_end:
                continue
            new_ptgt = tuple(prod_tgt[k] if prod[k] < i else e for k in self.open_at[j])
            self._close(i, j, e, used, open_targets, slot, sender_add, compute + recv, new_ptgt, labels)

    def _close(self, i: int, j: int, e: int, used: int, open_targets: list[int], slot: dict[int, int],
               sender_add: list[float], stage_cost: float, new_ptgt: tuple[int, ...],
               labels: list[_Label]) -> None:
        """Add the labels of ``labels`` followed by the stage ``[i, j)`` on ``e`` at cut ``j``: the
        open stages that no tensor open at ``j`` keeps open close (their times count)."""
        new_targets = sorted(set(new_ptgt))
        shared_slots = self.shared_slots
        for lab in labels:
            cur = {d: lab.open_cost[slot[d]] + sender_add[slot[d]] for d in open_targets}
            cur[e] = stage_cost
            cmax, csum = lab.cmax, lab.csum
            rsum = lab.rsum
            for d, val in cur.items():
                if d not in new_targets:
                    if shared_slots[d]:  # its cores are shared: add up on each
                        rs_ = list(rsum)
                        for q in shared_slots[d]:
                            rs_[q] += val
                        rsum = tuple(rs_)
                    else:
                        cmax = max(cmax, val)
                    csum += val
            oc = tuple(cur[d] for d in new_targets)
            self.add(j, (used | 1 << e, new_ptgt), _Label(cmax, csum, oc, lab, e, i, j, rsum))


def _result(p: PlacementProblem, final_states: dict[tuple, list[_Label]], n_labels: int, work: int,
            complete: bool, bound: float | None, stopped_at: int, max_work: int | None) -> DPResult:
    """The best complete label (least bottleneck, then least latency) as a :class:`DPResult`."""
    n = p.n_ops
    finals = [lab for labels in final_states.values() for lab in labels]
    if not finals:
        if complete:
            raise ProblemError("dp: no feasible contiguous pipeline (stage limit, memory caps, colocation)")
        why = "work limit" if max_work is not None and work >= max_work else "time limit"
        raise ProblemError(f"dp: {why} reached at op {stopped_at} of {n} ({n_labels} labels) before any "
                           "complete pipeline; use solver='cpsat'")
    bmin = min(lab.bottleneck() for lab in finals)
    best = min((lab for lab in finals if lab.bottleneck() <= bmin + float_noise(bmin)),
               key=lambda lab: lab.csum)
    assign = np.full(n, -1, dtype=int)
    order: list[int] = []
    lab: _Label | None = best
    while lab is not None and lab.parent is not None:
        assign[lab.start:lab.end] = lab.target
        order.append(lab.target)
        lab = lab.parent
    bott = best.bottleneck()
    lower = bott if bound is None else min(bott, bound)
    return DPResult(bott, best.csum, assign, order[::-1], n_labels, work, complete, lower, stopped_at)


@register_solver("dp")
class ContiguousDP(Solver):
    """Exact DP over contiguous pipeline splits of the op order (see module docstring).

    Options: ``max_work`` (int or None): stop after this much work (deterministic), returning the
    best pipeline found so far (status ``FEASIBLE``)."""

    modes = ("pipeline",)
    exact = True
    contiguous_only = True
    options: ClassVar[dict[str, Any]] = {"max_work": None}

    def solve(self, problem: PlacementProblem, ctx: SolveContext) -> Plan:
        t0 = time.monotonic()
        max_work = ctx.options.get("max_work")
        bad = isinstance(max_work, bool) or not isinstance(max_work, int) or max_work < 1
        if max_work is not None and bad:
            raise ProblemError(f"dp: max_work must be a positive int or None, got {max_work!r}")
        margin = 0.01 + 1e-5 * problem.n_ops  # building and returning the plan
        r = dp_search(problem, ctx.max_stages(problem), deadline=ctx.deadline - margin, max_work=max_work)
        gap = 0.0 if r.bottleneck <= 0 else max(0.0, (r.bottleneck - r.bound) / r.bottleneck)
        status = "EXACT" if r.complete else "FEASIBLE"
        stats = {"status": status, "objective": r.bottleneck, "best_bound": r.bound, "gap": gap,
                 "wall_s": time.monotonic() - t0,
                 "extra": {"labels": r.n_labels, "work": r.work,
                           "stopped_at_op": None if r.complete else r.stopped_at}}
        return make_pipeline_plan(problem, r.assign, ctx.name, order=r.stage_targets,
                                  options=ctx.plan_options(), stats=stats)
