"""Communication-aware lower bounds on the makespan (latency mode).

The bounds of :mod:`placer.solve.bounds` let every predecessor of an op sit on the op's own target
(no transfer) *at the same time*. Here an op's direct neighbours on its target must share that
target (they run one after the other), and those elsewhere pay the transfer:

* **Per-target heads** ``H[v, d]`` (earliest start of ``v`` on ``d``). Each predecessor ``u``
  either runs on ``d`` (not before ``H[u, d]``, for ``c[u, d]``; those on ``d`` run one at a time,
  and ``v`` waits for all of them: a one-machine schedule with release dates, whose least makespan
  is Jackson's: by release date, as early as possible) or elsewhere, its output arriving at ``d``
  at least ``off[u, d] = min_{a != d} H[u, a] + c[u, a] + delay_uv[a, d]`` after the start.
  ``H[v, d] = min over the set S of predecessors on d of max(J(S), max_{u not in S} off[u, d])``.
  For a fixed largest ``off`` outside ``S`` the best ``S`` holds exactly the predecessors with a
  larger ``off`` (``J`` grows with ``S``), so trying every threshold finds the minimum. A
  predecessor that cannot run on ``d`` is always off it, one colocated with ``v`` always on it.
* **Per-target tails** ``Q[v, d]`` (least time from the end of ``v`` on ``d`` to the makespan),
  the mirror image over successors: those on ``d`` run one at a time after ``v``, each followed by
  its own ``Q`` (one machine with delivery times: by decreasing ``Q``), the others need
  ``min_{b != d} delay_vw[d, b] + c[w, b] + Q[w, b]``.
* **Path bound** ``max_v min_d H[v, d] + c[v, d] + Q[v, d]``: ``v`` runs on some target.
* **Shaving** (:func:`shaved_bound`): to refute "the optimum is below ``L``", drop every pair
  ``(v, d)`` with ``H[v, d] + c[v, d] + Q[v, d] >= L`` (it cannot be in such a schedule), recompute
  ``H`` and ``Q`` with the smaller target sets (a predecessor forced off ``d`` pays its transfer),
  and repeat; if an op loses every target, or the load LP over what is left reaches ``L``, no
  schedule is shorter than ``L``. A bisection over ``L`` gives the bound.

Every step only uses facts true of every schedule of makespan below ``L`` (or of every schedule),
so the bounds never exceed the optimum; ``tests/solve/test_bounds_comm.py`` checks them against
exact enumeration, including instances where transfers dominate.
"""

from __future__ import annotations

import time

import numpy as np

from placer.problem import PlacementProblem
from placer.solve.bound_utils import edge_delays, minmax_load_lp, shave
from placer.solve.evaluate import Costs

__all__ = ["COMM_MAX_PAIRS", "comm_heads_tails", "path_bound", "shaved_bound"]

#: Above this many allowed (op, target) pairs the coarsened latency path leaves these heads and tails
#: out of its fine bound (pure Python, about 25 us a pair: 0.9 s at 5,000 ops x 8 targets).
COMM_MAX_PAIRS = 20000


def _jackson_release(rel: list[float], proc: list[float]) -> float:
    """Least makespan of one machine with release dates (1|r_j|Cmax): by release date, ASAP."""
    t = -np.inf
    for r, c in sorted(zip(rel, proc)):
        t = max(t, r) + c
    return t


def _jackson_delivery(proc: list[float], tail: list[float]) -> float:
    """Least ``max_j completion_j + tail_j`` on one machine starting at 0 (1||Lmax with delivery
    times): by decreasing tail."""
    t, best = 0.0, -np.inf
    for q, c in sorted(zip(tail, proc), reverse=True):
        t += c
        best = max(best, t + q)
    return best


def _best_split(forced_on: list[tuple[float, float]], optional: list[tuple[float, float, float]],
                off_floor: float, machine) -> float:
    """``min over S`` of ``max(machine(forced_on + S), max off outside S)``; ``optional`` items are
    ``(off, a, b)`` (``a, b``: the item's numbers for ``machine`` when on the target)."""
    optional = sorted(optional, key=lambda x: -x[0])
    best = np.inf
    on = list(forced_on)
    for j in range(len(optional) + 1):
        theta = max(off_floor, optional[j][0] if j < len(optional) else -np.inf)
        if on:
            val = max(machine([x for x, _ in on], [y for _, y in on]), theta)
        else:
            val = theta
        best = min(best, val)
        if j < len(optional):
            on.append((optional[j][1], optional[j][2]))
    return best


def comm_heads_tails(problem: PlacementProblem, costs: Costs, allowed: np.ndarray | None = None,
                     delays: dict[tuple[int, int], np.ndarray] | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``(H, Q)`` of the module docstring, ``(n_ops, T)`` arrays, ``inf`` where an op may not go
    (``allowed``: default ``problem.allowed``; a smaller set when shaving)."""
    p = problem
    n, t = p.n_ops, p.n_targets
    ok = p.allowed if allowed is None else allowed
    cost = np.where(ok, costs.cost, np.inf)
    dl = delays if delays is not None else edge_delays(p, costs)
    unit = np.empty(n, dtype=int)
    for i, members in enumerate(p.units):
        unit[list(members)] = i
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for (u, v) in dl:
        preds[v].append(u)
        succs[u].append(v)
    off_diag = ~np.eye(t, dtype=bool)
    head = np.zeros((n, t))
    for v in range(n):  # ops are stored in a topological order
        if not preds[v]:
            continue
        offs = []
        for u in preds[v]:  # off[u, d]: arrival at d from any other target a
            arr = np.where(off_diag, (head[u] + cost[u])[:, None] + dl[(u, v)], np.inf)
            offs.append(arr.min(axis=0))
        for d in np.flatnonzero(ok[v]):
            forced, opt, floor = [], [], -np.inf
            for u, off in zip(preds[v], offs):
                if unit[u] == unit[v]:
                    forced.append((head[u, d], cost[u, d]))
                elif not ok[u, d]:
                    floor = max(floor, off[d])
                else:
                    opt.append((off[d], head[u, d], cost[u, d]))
            head[v, d] = max(0.0, _best_split(forced, opt, floor, _jackson_release))
    after = np.zeros((n, t))
    for v in range(n - 1, -1, -1):
        if not succs[v]:
            continue
        needs = []
        for w in succs[v]:
            need = np.where(off_diag, dl[(v, w)] + (cost[w] + after[w])[None, :], np.inf)
            needs.append(need.min(axis=1))
        for d in np.flatnonzero(ok[v]):
            forced, opt, floor = [], [], -np.inf
            for w, need in zip(succs[v], needs):
                if unit[w] == unit[v]:
                    forced.append((cost[w, d], after[w, d]))
                elif not ok[w, d]:
                    floor = max(floor, need[d])
                else:
                    opt.append((need[d], cost[w, d], after[w, d]))
            after[v, d] = max(0.0, _best_split(forced, opt, floor, _jackson_delivery))
    head = np.where(ok, head, np.inf)
    after = np.where(ok, after, np.inf)
    return head, after


def path_bound(problem: PlacementProblem, costs: Costs, head: np.ndarray | None = None,
               tail: np.ndarray | None = None) -> float:
    """``max_v min_d H[v, d] + c[v, d] + Q[v, d]`` (``head``/``tail``: precomputed ``H``, ``Q``)."""
    if head is None or tail is None:
        head, tail = comm_heads_tails(problem, costs)
    total = np.where(problem.allowed, head + costs.cost + tail, np.inf)
    return float(total.min(axis=1).max()) if problem.n_ops else 0.0


def _refuted(problem: PlacementProblem, costs: Costs, level: float, delays, deadline: float | None,
             load_lp: bool, max_rounds: int) -> bool:
    """True if no schedule has a makespan below ``level`` (see :func:`shaved_bound`)."""

    p = problem
    ok = p.allowed.copy()
    for _ in range(max_rounds):
        if deadline is not None and time.monotonic() > deadline:
            return False
        head, tail = comm_heads_tails(p, costs, ok, delays)
        total = np.where(ok, head + costs.cost + tail, np.inf)
        keep = total < level
        for members in p.units:  # a unit goes on one target: a pair dropped for one member goes for all
            m = list(members)
            keep[m] = keep[m].all(axis=0)
        if not keep.any(axis=1).all():
            return True
        if (keep == ok).all():
            break
        ok = keep
    if not load_lp:
        return False
    c = Costs(np.where(ok, costs.cost, np.inf), costs.link, costs.entry, costs.scale_ms)
    res = minmax_load_lp(p, c)  # the dropped pairs cost inf: the LP leaves them out
    return res is not None and shave(res[0]) >= level


def shaved_bound(problem: PlacementProblem, costs: Costs, lower: float, upper: float, *,
                 deadline: float | None = None, steps: int = 8, load_lp: bool = True,
                 max_rounds: int = 4) -> float:
    """The largest ``L`` in ``[lower, upper]`` found (by bisection, ``steps`` probes) such that no
    schedule is shorter than ``L`` (see the module docstring); ``lower`` must be a valid bound and
    ``upper`` a makespan reached (or more). Stops at ``deadline`` with the best proven value."""
    delays = edge_delays(problem, costs)
    best = lower
    lo, hi = lower, upper
    for _ in range(steps):
        if hi - lo <= 1e-6 * max(1.0, hi) or (deadline is not None and time.monotonic() > deadline):
            break
        mid = 0.5 * (lo + hi)
        if _refuted(problem, costs, mid, delays, deadline, load_lp, max_rounds):
            best = lo = mid
        else:
            hi = mid
    return best
