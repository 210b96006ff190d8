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
  and repeat until no pair is dropped; if an op loses every target, or the load LP over what is
  left reaches ``L``, no schedule is shorter than ``L``. A bisection over ``L`` gives the bound.
  :class:`HeadsTails` computes ``H`` and ``Q`` again only downstream (upstream) of the ops whose
  targets changed, and only while values move.
* **Probing** (session 53): fix one op on one of its targets (a unit: all its members) and shave
  a round; if that refutes ``L``, the pair is in no schedule shorter than ``L`` and is dropped.
  Tried on the pairs nearest ``L`` first, a bounded number per level, then shaving to a fixed point
  again. A pair dropped at a level not refuted stays dropped at every lower level tested later.
  On 500 x 8 random layered graphs it raises the shaved bound by 0.1-1.3%.

Every step only uses facts true of every schedule of makespan below ``L`` (or of every schedule),
so the bounds never exceed the optimum; ``tests/solve/test_bounds_comm.py`` checks them against
exact enumeration, including instances where transfers dominate.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from placer.problem import PlacementProblem
from placer.solve.bound_utils import edge_delays, minmax_load_lp, shave
from placer.solve.evaluate import Costs
from placer.solve.heads_tails_kernel import neighbour_bounds
from placer.solve.retime import COMPILED

__all__ = [
    "COMM_MAX_PAIRS",
    "SHARED_MAX_NEIGHBOURS",
    "SHARED_MAX_NODES",
    "HeadsTails",
    "comm_heads_tails",
    "path_bound",
    "shaved_bound",
]

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


class HeadsTails:
    """``(H, Q)`` of the module docstring on one problem, for any allowed set: the edges' delay
    matrices, neighbour lists and units built once, so that shaving and probing, which compute
    them hundreds of times, pay only the compiled loop (and only downstream of what changed)."""

    def __init__(self, problem: PlacementProblem, costs: Costs,
                 delays: dict[tuple[int, int], np.ndarray] | None = None) -> None:
        p = problem
        self.n, self.t = p.n_ops, p.n_targets
        self.cost = np.asarray(costs.cost, dtype=float)
        dl = delays if delays is not None else edge_delays(p, costs)
        self.unit = np.empty(self.n, dtype=np.int64)
        for i, members in enumerate(p.units):
            self.unit[list(members)] = i
        edges = list(dl)
        self.mats = (np.stack([dl[e] for e in edges]).astype(float) if edges
                     else np.zeros((1, self.t, self.t)))
        self.csr = [_csr(self.n, edges, by_head) for by_head in (True, False)]
        self.kmax = SHARED_MAX_NEIGHBOURS if COMPILED else 0  # uncompiled: the threshold rule alone
        self.node_max = SHARED_MAX_NODES

    def __call__(self, allowed: np.ndarray, previous: tuple[np.ndarray, np.ndarray] | None = None,
                 changed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(H, Q)`` for ``allowed`` (``inf`` where an op may not go). With ``previous`` (the heads
        and tails of a larger allowed set) and ``changed`` (the ops whose allowed targets differ),
        only the ops downstream (heads) or upstream (tails) of a changed op are computed again."""
        # a writable copy: the kernel is compiled for writable arrays, and a read-only one (problem.allowed)
        # would compile it a second time (seconds, in every process until numba's cache holds both)
        ok = np.array(allowed, dtype=np.bool_, order="C")
        cost = np.ascontiguousarray(np.where(ok, self.cost, np.inf), dtype=float)
        if previous is None or changed is None:
            inits = (np.zeros((self.n, self.t)),) * 2
            changed = np.ones(self.n, dtype=np.bool_)
        else:  # the previous rows, finite where the kernel left them (an op's own pairs, dropped since)
            inits = tuple(np.ascontiguousarray(np.where(np.isfinite(x), x, 0.0)) for x in previous)
            changed = np.array(changed, dtype=np.bool_, order="C")  # writable, as compiled
        out = [neighbour_bounds(self.t, cost, ok, self.unit, ptr, ops, idx, self.mats, by_head, self.kmax,
                                self.node_max, init, changed)
               for (ptr, ops, idx), by_head, init in zip(self.csr, (True, False), inits)]
        return np.where(ok, out[0], np.inf), np.where(ok, out[1], np.inf)


def comm_heads_tails(problem: PlacementProblem, costs: Costs, allowed: np.ndarray | None = None,
                     delays: dict[tuple[int, int], np.ndarray] | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``(H, Q)`` of the module docstring, ``(n_ops, T)`` arrays, ``inf`` where an op may not go
    (``allowed``: default ``problem.allowed``; a smaller set when shaving)."""
    return HeadsTails(problem, costs, delays)(problem.allowed if allowed is None else allowed)


def path_bound(problem: PlacementProblem, costs: Costs, head: np.ndarray | None = None,
               tail: np.ndarray | None = None) -> float:
    """``max_v min_d H[v, d] + c[v, d] + Q[v, d]`` (``head``/``tail``: precomputed ``H``, ``Q``)."""
    if head is None or tail is None:
        head, tail = comm_heads_tails(problem, costs)
    total = np.where(problem.allowed, head + costs.cost + tail, np.inf)
    return float(total.min(axis=1).max()) if problem.n_ops else 0.0


#: shaving stops at a fixed point (no pair dropped in a round) or after this many rounds
SHAVE_ROUNDS = 64
#: probing tries the pairs whose ``H + c + Q`` is within this fraction of the level
PROBE_WINDOW = 0.03
#: shaving rounds after each probe's own pair is fixed (3 refuted no more on 500 x 8, at twice the time)
PROBE_ROUNDS = 1


class _Refuter:
    """Tests "some schedule is shorter than ``level``" on one problem (:func:`shaved_bound`)."""

    def __init__(self, problem: PlacementProblem, costs: Costs, deadline: float | None, load_lp: bool,
                 max_rounds: int, stop: threading.Event | None = None) -> None:
        self.p, self.costs, self.deadline, self.load_lp, self.stop = problem, costs, deadline, load_lp, stop
        self.max_rounds = max_rounds
        self.ht = HeadsTails(problem, costs, edge_delays(problem, costs))
        self.units = [np.asarray(members, dtype=np.int64) for members in problem.units]
        self.groups = [m for m in self.units if len(m) > 1]  # units of several ops
        self.base = self.ht(problem.allowed)
        self.probes_done = 0
        #: level -> the allowed pairs left where a test did not refute it
        self.kept: dict[float, np.ndarray] = {}

    def _late(self) -> bool:
        return ((self.deadline is not None and time.monotonic() > self.deadline)
                or (self.stop is not None and self.stop.is_set()))

    def shave_rounds(self, level: float, ok: np.ndarray, hq: tuple[np.ndarray, np.ndarray],
                     changed: np.ndarray | None, rounds: int):
        """Drop the pairs that cannot end below ``level`` until none is dropped (or ``rounds``):
        ``(ok, (H, Q))``, or None if an op loses every target (refuted). ``hq`` are heads and tails of
        ``ok`` (or of a larger allowed set: valid, weaker) except downstream of the ``changed`` ops
        (None: all of them)."""
        for r in range(rounds):
            if self._late():
                break
            if changed is None or changed.any():
                hq = self.ht(ok, hq, changed)
            elif r > 0:
                break
            keep = (hq[0] + self.costs.cost + hq[1]) < level
            for m in self.groups:  # a unit goes on one target: a pair dropped for one member goes for all
                keep[m] = keep[m].all(axis=0)
            keep &= ok
            if not keep.any(axis=1).all():
                return None
            changed = (keep != ok).any(axis=1)
            ok = keep
        return ok, hq

    def probe(self, level: float, ok: np.ndarray, hq: tuple[np.ndarray, np.ndarray], max_probes: int):
        """Probing: fix one unit on one of its targets, shave ``PROBE_ROUNDS``; if that refutes the level,
        the pair cannot be in a schedule shorter than it and is dropped. Pairs nearest the level first,
        at most ``max_probes`` in all. ``(ok, (H, Q))``, or None if refuted."""
        while self.probes_done < max_probes and not self._late():
            total = hq[0] + self.costs.cost + hq[1]
            cands = []
            for i, m in enumerate(self.units):
                row = ok[m[0]]
                if row.sum() < 2:
                    continue
                worst = total[m].max(axis=0)
                for d in np.flatnonzero(row & (worst >= level * (1 - PROBE_WINDOW))):
                    cands.append((-float(worst[d]), i, int(d)))
            cands.sort()
            changed = np.zeros(self.p.n_ops, dtype=np.bool_)
            for _, i, d in cands:
                if self.probes_done >= max_probes or self._late():
                    break
                m = self.units[i]
                if not ok[m[0], d] or ok[m[0]].sum() < 2:
                    continue
                self.probes_done += 1
                trial = ok.copy()
                trial[m] = False
                trial[m, d] = True
                fixed = np.zeros(self.p.n_ops, dtype=np.bool_)
                fixed[m] = True
                if self.shave_rounds(level, trial, hq, fixed, PROBE_ROUNDS) is None:
                    ok[m, d] = False
                    changed[m] = True
                    hq = self.ht(ok, hq, fixed)  # the next probes see the pair gone
            if not changed.any():
                break
            res = self.shave_rounds(level, ok, hq, changed, self.max_rounds)
            if res is None:
                return None
            ok, hq = res
        return ok, hq

    def refuted(self, level: float, max_probes: int = 0) -> bool:
        """True if no schedule has a makespan below ``level`` (see :func:`shaved_bound`).

        A pair dropped at a level the test then failed to refute is in no schedule shorter than that
        level, so neither in one shorter than a lower level: a test below such a level starts from
        what is left there (:attr:`kept`)."""
        self.probes_done = 0
        start = self.p.allowed.copy()
        for lv, left in self.kept.items():
            if lv >= level:
                start &= left
        # from the base's heads and tails, computed again downstream of the pairs dropped
        changed = (start != self.p.allowed).any(axis=1)
        res = self.shave_rounds(level, start, self.base, changed, self.max_rounds)
        if res is not None and max_probes > 0:
            res = self.probe(level, *res, max_probes)
        if res is None:
            return True
        self.kept[level] = res[0].copy()
        if not self.load_lp or self._late():
            return False
        ok = res[0]
        c = Costs(np.where(ok, self.costs.cost, np.inf), self.costs.link, self.costs.entry, self.costs.scale_ms)
        lp = minmax_load_lp(self.p, c)  # the dropped pairs cost inf: the LP leaves them out
        return lp is not None and shave(lp[0]) >= level


def shaved_bound(problem: PlacementProblem, costs: Costs, lower: float, upper: float, *,
                 deadline: float | None = None, steps: int = 8, load_lp: bool = True,
                 max_rounds: int = SHAVE_ROUNDS, probes: int = 0, probe_steps: int = 3,
                 stop: threading.Event | None = None) -> float:
    """The largest ``L`` in ``[lower, upper]`` found (by bisection, ``steps`` probes) such that no
    schedule is shorter than ``L`` (see the module docstring); ``lower`` must be a valid bound and
    ``upper`` a makespan reached (or more). Stops at ``deadline``, or once ``stop`` is set (from
    another thread: the compiled loop releases the GIL), with the best proven value.

    With ``probes`` > 0, then ``probe_steps`` levels more are tested with probing (at most ``probes``
    pairs each): up from the bound in steps of 0.5% doubling while refuted, then bisected."""
    ref = _Refuter(problem, costs, deadline, load_lp, max_rounds, stop)
    best = lower
    lo, hi = lower, upper
    for _ in range(steps):
        if hi - lo <= 1e-6 * max(1.0, hi) or ref._late():
            break
        mid = 0.5 * (lo + hi)
        if ref.refuted(mid):
            best = lo = mid
        else:
            hi = mid
    if probes <= 0:
        return best
    step, hi = 0.005 * best, upper
    for _ in range(probe_steps):
        level = min(best + step, 0.5 * (best + hi))
        if level <= best * (1 + 1e-6) or ref._late():
            break
        if ref.refuted(level, probes):
            best = level
            step *= 2
        else:
            hi = level
            step = 0.5 * (hi - best)
    return best
