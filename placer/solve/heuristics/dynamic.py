"""Price-guided dynamic list scheduling.

:class:`DynamicList`: time-driven list scheduling that places and orders at once, guided by the load
LP's prices: the target free first takes the ready op with the best ratio of its LP value to the
target time it uses (its cost plus part of the wait for its inputs), plus a rank bonus.
:class:`DynamicListSearch` iterates it over a small portfolio of scoring parameters, re-pricing the
targets that finish late; :func:`dynamic_list` is the one-call form. On wide graphs where load
balance decides the makespan it keeps targets busy through the ramp-up where LP rounding leaves
them idle.
"""

from __future__ import annotations

import time

import numpy as np

from placer.problem import PlacementProblem
from placer.solve.bound_utils import unit_costs
from placer.solve.bounds import dual_load, edge_delays
from placer.solve.evaluate import Costs, latency_schedule
from placer.solve.heuristics.common import HeuristicError, no_room, unit_weight
from placer.solve.heuristics.earliest_finish import upward_rank

__all__ = ["DynamicList", "DynamicListSearch", "dynamic_list"]


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
        self.unit_w = np.array([unit_weight(p, u) for u in p.units])
        self.capped = bool(np.isfinite(p.memory_cap_bytes).any() and self.unit_w.any())
        self.grouped = any(len(u) > 1 for u in p.units)
        self.t = t
        self.conf = p.conflicts if p.shares_resources else None

    def schedule(self, lam: np.ndarray, alpha: float = 0.05, beta: float = 0.5, gamma: float = 1.0,
                 who: str = "dynamic") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One pass. Returns ``(assign, start, end)`` (float costs of the constructor's ``costs``)."""
        n = self.p.n_ops
        lam = np.maximum(np.asarray(lam, dtype=float), 1e-9)
        lam = lam / lam.sum()
        value = np.where(np.isfinite(self.cost), self.cost * lam[None, :], np.inf).min(axis=1)
        st = _Pass(self)
        st.todo.extend(int(v) for v in np.flatnonzero(st.npred == 0)[::-1])
        st.release()
        lam_l = lam.tolist()
        while st.placed < n:
            idx = np.flatnonzero(st.cand)
            st.scanned += len(idx)
            if not len(idx):  # pragma: no cover - only with a cycle
                raise HeuristicError(f"{who}: no op is ready")
            okm, d = self._free_target(st, idx, who)
            v = self._best_op(st, idx[okm[:, d]], d, value, lam_l[d], alpha, beta, gamma)
            s = max(st.avail[d], float(st.arr[v, d]))
            st.cand[v] = False
            st.place(v, d, s)
            st.occupy(v, d, s)
            st.release()
        self.work = n + st.scanned  # deterministic measure of the pass's effort (see DynamicListSearch)
        return st.assign, st.start, st.end

    def _free_target(self, st: _Pass, idx: np.ndarray, who: str) -> tuple[np.ndarray, int]:
        """Which of the ready ops ``idx`` each target may run (``(len(idx), T)``), and the target
        free first among those that may run one."""
        t, unit_of, unit_w = self.t, self.unit_of, self.unit_w
        okm = self.finite[idx]
        if self.grouped or self.capped:
            ut = st.unit_target[unit_of[idx]]
            okm = okm & ((ut[:, None] < 0) | (ut[:, None] == np.arange(t)[None, :]))
            if self.capped:
                okm &= (ut[:, None] >= 0) | (unit_w[unit_of[idx]][:, None] <= st.mem_free[None, :])
        runnable = okm.any(axis=0).tolist()
        avail = st.avail
        d = -1
        for e_ in range(t):
            if runnable[e_] and (d < 0 or avail[e_] < avail[d]):
                d = e_
        if d < 0:
            raise no_room(who, [self.p.ops[int(idx[0])]])
        return okm, d

    def _best_op(self, st: _Pass, sel: np.ndarray, d: int, value: np.ndarray, lam_d: float,
                 alpha: float, beta: float, gamma: float) -> int:
        """The op of ``sel`` (ready, runnable on ``d``) with the best score on target ``d``."""
        wait = st.arr[sel, d] - st.avail[d]
        np.maximum(wait, 0.0, out=wait)
        wait *= beta
        wait += self.cost[sel, d]
        score = value[sel] / (wait * lam_d + 1e-300)
        if gamma != 1.0:
            score **= gamma
        if alpha:
            score += alpha * self.rank[sel]
        return int(sel[int(np.argmax(score))])


class _Pass:
    """The state of one :meth:`DynamicList.schedule` pass: input arrival times per target, ready
    ops (``cand``), placements, when each target is free (``avail``), unit targets and memory."""

    def __init__(self, dl: DynamicList) -> None:
        p = dl.p
        n, t = p.n_ops, dl.t
        self.dl = dl
        self.arr = np.zeros((n, t))
        self.npred = dl.npred.copy()
        self.cand = np.zeros(n, dtype=bool)
        self.assign = np.full(n, -1, dtype=int)
        self.start = np.zeros(n)
        self.end = np.zeros(n)
        self.avail = [0.0] * t
        self.unit_target = np.full(len(p.units), -1, dtype=int)
        self.mem_free = np.array(p.memory_cap_bytes, dtype=float)
        self.todo: list[int] = []  # ops whose predecessors are all placed, not yet released
        self.placed = 0
        self.scanned = 0  # ready ops scored, over all decisions

    def ok_targets(self, v: int) -> np.ndarray:
        """The targets ``v`` may go to now (support, its unit's target, memory room)."""
        dl = self.dl
        ok = np.isfinite(dl.cost[v])
        ut = self.unit_target[dl.unit_of[v]]
        if ut >= 0:
            ok = ok & (np.arange(dl.t) == ut)
        elif dl.capped:
            ok = ok & (self.mem_free >= dl.unit_w[dl.unit_of[v]])
        return ok

    def place(self, v: int, d: int, s: float) -> None:
        """Run ``v`` on ``d`` from ``s``; its successors learn when its output arrives."""
        dl = self.dl
        e = s + dl.cost[v, d]
        self.assign[v], self.start[v], self.end[v] = d, s, e
        self.placed += 1
        ui = dl.unit_of[v]
        if self.unit_target[ui] < 0:
            self.unit_target[ui] = d
            self.mem_free[d] -= dl.unit_w[ui]
        npred, arr, todo = self.npred, self.arr, self.todo
        for w, m in dl.succ[v]:
            npred[w] -= 1
            np.maximum(arr[w], e + m[d], out=arr[w])
            if npred[w] == 0:
                todo.append(w)

    def occupy(self, v: int, d: int, s: float) -> None:
        """``d`` (and every target sharing a core with it) is busy until ``v`` ends."""
        end, avail, conf = self.end, self.avail, self.dl.conf
        if end[v] > s:
            if conf is None:
                avail[d] = end[v]
            else:  # the targets sharing a core with d wait for it too
                for d2 in conf[d]:
                    avail[d2] = max(avail[d2], float(end[v]))

    def release(self) -> None:
        """Newly ready ops become candidates; one that costs 0 somewhere runs there at once."""
        dl = self.dl
        cost = dl.cost
        while self.todo:
            w = self.todo.pop()
            if dl.zero[w]:
                ok = self.ok_targets(w) & (cost[w] == 0)
                if ok.any():
                    d = int(np.flatnonzero(ok)[np.argmin(self.arr[w][ok])])
                    self.place(w, d, float(self.arr[w, d]))
                    continue
            self.cand[w] = True


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
            lam = (dual_load(unit_costs(p, self.c), resources=p.resource_sets, deadline=deadline)[1]
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
