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
* **Shared targets** (session 33): the neighbours placed elsewhere are not independent either;
  those that go to one same target run one at a time there too. ``H`` and ``Q`` are the larger of
  the rule above and the least, over one target for each neighbour, of the largest one-machine
  value over the targets (:mod:`placer.solve.heads_tails_kernel`: compiled, a depth-first search
  over the neighbours' targets, the threshold rule alone for neighbourhoods of more than
  ``SHARED_MAX_NEIGHBOURS`` ops or searches past ``SHARED_MAX_NODES`` choices). On random
  layered graphs of 500 ops x 8 targets it raises the shaved bound by 0.25-0.9%.
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
from placer.solve.heads_tails_kernel import neighbour_bounds
from placer.solve.retime import COMPILED

__all__ = ["COMM_MAX_PAIRS", "SHARED_MAX_NEIGHBOURS", "SHARED_MAX_NODES", "comm_heads_tails", "path_bound",
           "shaved_bound"]

#: Above this many allowed (op, target) pairs the coarsened latency path leaves these heads and tails
#: out of its fine bound (set when they were computed in pure Python, about 25 us a pair).
COMM_MAX_PAIRS = 20000


#: the shared-target rule's limits (:mod:`placer.solve.heads_tails_kernel`): neighbourhoods of at
#: most this many ops, searches of at most this many choices (500 x 8 random layered graphs: fan-outs
#: up to 38, 0.02-0.04 s for all heads and tails)
SHARED_MAX_NEIGHBOURS = 64
SHARED_MAX_NODES = 200_000


def _csr(n: int, edges: list[tuple[int, int]], by_head: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each op's predecessors (``by_head``) or successors as ``(ptr, op, edge index)`` arrays."""
    lists: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for e, (u, v) in enumerate(edges):
        if by_head:
            lists[v].append((u, e))
        else:
            lists[u].append((v, e))
    ptr = np.zeros(n + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(x) for x in lists])
    flat = [x for xs in lists for x in xs]
    ops = np.array([u for u, _ in flat], dtype=np.int64)
    idx = np.array([e for _, e in flat], dtype=np.int64)
    return ptr, ops, idx


def comm_heads_tails(problem: PlacementProblem, costs: Costs, allowed: np.ndarray | None = None,
                     delays: dict[tuple[int, int], np.ndarray] | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``(H, Q)`` of the module docstring, ``(n_ops, T)`` arrays, ``inf`` where an op may not go
    (``allowed``: default ``problem.allowed``; a smaller set when shaving)."""
    p = problem
    n, t = p.n_ops, p.n_targets
    # a writable copy: the kernel is compiled for writable arrays, and a read-only one (problem.allowed)
    # would compile it a second time (seconds, in every process until numba's cache holds both)
    ok = np.array(p.allowed if allowed is None else allowed, dtype=np.bool_, order="C")
    cost = np.ascontiguousarray(np.where(ok, costs.cost, np.inf), dtype=float)
    dl = delays if delays is not None else edge_delays(p, costs)
    unit = np.empty(n, dtype=np.int64)
    for i, members in enumerate(p.units):
        unit[list(members)] = i
    edges = list(dl)
    mats = np.stack([dl[e] for e in edges]).astype(float) if edges else np.zeros((1, t, t))
    kmax = SHARED_MAX_NEIGHBOURS if COMPILED else 0  # uncompiled: the threshold rule alone
    out = []
    for by_head in (True, False):
        ptr, ops, idx = _csr(n, edges, by_head)
        out.append(neighbour_bounds(t, cost, ok, unit, ptr, ops, idx, mats, by_head, kmax, SHARED_MAX_NODES))
    head, after = out
    return np.where(ok, head, np.inf), np.where(ok, after, np.inf)


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
