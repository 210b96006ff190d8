r"""Large-neighbourhood search for latency mode: re-optimize one time window of a plan with CP-SAT.

A plan is an assignment plus a priority order (ops by start time); :func:`~placer.solve.evaluate.
latency_schedule` turns it into the earliest schedule that keeps each target's op sequence. One
LNS step takes the ops starting inside a window ``[t1, t2)`` of that schedule (they are closed
under predecessors from ``t1`` on) and lets CP-SAT re-assign and re-time them, everything else
staying as it is:

* ops before the window keep their target, start and end (constants): a window op on ``d`` starts
  after the last of them on ``d`` ends, and after its inputs from them arrive;
* ops after the window keep their target and their order on it. Their schedule is then a longest
  path from the window: with ``L[w]`` = cost of ``w`` plus the longest path after it (next op on
  its target, or a successor plus the delay of the pair of targets), the makespan is exactly
  ``max(F_d + L[first later op on d], end_v + delay(d(v), d(w)) + L[w] for edges v -> w into
  the later ops, ends of sinks)``, ``F_d`` being when target ``d`` is done with the earlier and
  window ops. The window model minimizes that expression: the true makespan of the new plan.

Window ops are optional intervals on their allowed targets (no-overlap per resource, i.e. per
target unless targets share cores, where "target" above reads "resource"; instantaneous ops
occupy nothing), with the edge delays of :mod:`placer.solve.cpsat_latency`; colocation groups
with members outside the window stay where they are, memory caps count the fixed ops' weights.
Times are rounded to the CP-SAT resolution (:func:`~placer.solve.cpsat_util.choose_resolution`);
a step is kept only if the float re-timed makespan improves. :meth:`LatencyLNS.run` sweeps windows
of about ``window_ops`` ops from the start of the schedule (where ramp-up idle time lives), starting
over with another window size when a sweep stops paying, until the deadline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from placer.problem import PlacementProblem
from placer.solve.bounds import edge_delays
from placer.solve.cpsat_util import add_weight_row, choose_resolution, make_solver
from placer.solve.evaluate import Costs, latency_schedule

__all__ = ["LatencyLNS", "improve_latency"]


@dataclass
class _Window:
    """One window of the current plan (integer units): its schedule, the ops in the window
    (``win``, ``in_win``), before it and after it (``later``), the later ops' tails ``L`` and the
    first later op per resource, when each resource is done with the fixed ops (``avail``), and
    what the fixed ops alone force on the makespan (``const``)."""

    start: np.ndarray
    end: np.ndarray
    win: list[int]
    in_win: np.ndarray
    before: np.ndarray
    later: list[int]
    tail: np.ndarray
    first_later: list[int | None]
    avail: np.ndarray
    const: float


@dataclass
class _WindowModel:
    """The CP-SAT model of a window: makespan, horizon, per-resource finish times, the target
    literals ``x[v]`` of the window ops, the free units' literals, and the start variables."""

    model: cp_model.CpModel
    mk: Any
    horizon: int
    fin: list[Any]
    x: list[dict[int, Any]] = field(default_factory=list)
    lits: list[tuple[tuple[int, ...], dict[int, Any]]] = field(default_factory=list)
    free: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    s: dict[int, Any] = field(default_factory=dict)


class LatencyLNS:
    """Window re-optimization of one latency plan (see the module docstring)."""

    def __init__(self, problem: PlacementProblem, assign: np.ndarray, order: list[int],
                 options: dict[str, Any] | None = None, seed: int = 0) -> None:
        p = problem
        self.p = p
        self.options = dict(options or {})
        self.seed = seed
        self.fc = Costs.of(p)
        self.r = choose_resolution(p, self.options.get("time_resolution_ms", "auto"))
        self.ci = Costs.rounded(p, self.r)
        self.dly = edge_delays(p, self.ci)  # integer units
        n = p.n_ops
        self.succ: list[list[int]] = [[] for _ in range(n)]
        self.pred: list[list[int]] = [[] for _ in range(n)]
        for (u, v) in sorted(self.dly):
            self.succ[u].append(v)
            self.pred[v].append(u)
        self.assign = np.asarray(assign, dtype=int).copy()
        self.order = list(order)
        self.makespan = float(latency_schedule(p, self.assign, self.order, self.fc)[1].max())
        self.steps = 0
        self.improved = 0
        self.last_status = ""  # CP-SAT status of the last window
        self.last_objective_ms = float("nan")  # its model makespan (rounded units, in ms)

    # ------------------------------------------------------------------ one window
    def step(self, t1: float, t2: float, time_s: float) -> bool:
        """Re-optimize the ops starting in ``[t1, t2)`` (float ms) for at most ``time_s`` seconds;
        returns True if the plan improved."""
        w = self._window(t1, t2)
        if w is None:
            return False
        m = self._model(w)
        solver = make_solver({**self.options, "log": False}, time_s, self.seed, 0)
        status = solver.solve(m.model)
        self.steps += 1
        self.last_status = solver.status_name(status)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return False
        self.last_objective_ms = solver.objective_value * self.r
        return self._apply(w, m, solver)

    def _window(self, t1: float, t2: float) -> _Window | None:
        """The ops starting in ``[t1, t2)`` and what the ops around them force (None: under two ops)."""
        p, ci = self.p, self.ci
        n = p.n_ops
        assign, order = self.assign, self.order
        start, end = latency_schedule(p, assign, order, ci)  # integer units, same sequences
        fstart = latency_schedule(p, assign, order, self.fc)[0]
        cost = ci.cost
        win = [v for v in order if t1 <= fstart[v] < t2]
        if len(win) < 2:
            return None
        in_win = np.zeros(n, dtype=bool)
        in_win[win] = True
        before = np.array([fstart[v] < t1 for v in range(n)])
        later = [v for v in order if not before[v] and not in_win[v]]
        tail, first_later = self._tails(later)
        res, n_r = p.resource_sets, p.n_resources
        avail = np.zeros(n_r)
        for v in range(n):
            if before[v] and cost[v, assign[v]] > 0:
                for r in res[assign[v]]:
                    avail[r] = max(avail[r], end[v])
        const = 0.0  # what the fixed ops alone force on the makespan
        for u in range(n):
            if not before[u]:
                continue
            if not self.succ[u]:
                const = max(const, end[u])
            for x in self.succ[u]:
                if not before[x] and not in_win[x]:
                    const = max(const, end[u] + float(self.dly[(u, x)][assign[u], assign[x]]) + tail[x])
        for r in range(n_r):
            if first_later[r] is not None:
                const = max(const, avail[r] + tail[first_later[r]])
        return _Window(start, end, win, in_win, before, later, tail, first_later, avail, const)

    def _tails(self, later: list[int]) -> tuple[np.ndarray, list[int | None]]:
        """``L`` over the later ops (own cost + longest path after it, in reverse order) and the
        first later op of each resource (per target unless targets share cores)."""
        p, cost, dly, assign = self.p, self.ci.cost, self.dly, self.assign
        res = p.resource_sets
        tail = np.zeros(p.n_ops)
        nxt: list[int | None] = [None] * p.n_resources
        for w in reversed(later):
            d = assign[w]
            cw = float(cost[w, d])
            m = 0.0
            for x in self.succ[w]:
                m = max(m, float(dly[(w, x)][d, assign[x]]) + tail[x])
            if cw > 0:
                for r in res[d]:
                    if nxt[r] is not None:
                        m = max(m, tail[nxt[r]])
                    nxt[r] = w
            tail[w] = cw + m
        return tail, nxt

    def _model(self, w: _Window) -> _WindowModel:
        """The CP-SAT model of the window: minimize the makespan its ops give the plan."""
        p = self.p
        horizon = int(max(w.end.max(), w.const)) + 1
        model = cp_model.CpModel()
        mk = model.new_int_var(int(w.const), horizon, "makespan")
        fin = [model.new_int_var(int(w.avail[r]), horizon, f"F{r}") for r in range(p.n_resources)]
        m = _WindowModel(model, mk, horizon, fin)
        self._unit_literals(w, m)
        self._op_rows(w, m)
        self._precedence_rows(w, m)
        self._memory_rows(w, m)
        model.minimize(mk)
        for v in w.win:
            model.add_hint(m.s[v], int(w.start[v]))
        for unit, u_lits in m.lits:
            for d, lit in u_lits.items():
                model.add_hint(lit, int(self.assign[unit[0]] == d))
        return m

    def _unit_literals(self, w: _Window, m: _WindowModel) -> None:
        """Target literals of the window ops: a unit wholly inside is free over its allowed targets;
        a colocation group reaching outside stays where it is."""
        p, model, in_win = self.p, m.model, w.in_win
        m.free = np.zeros(p.n_ops, dtype=bool)
        m.x = [{} for _ in range(p.n_ops)]
        for unit in p.units:
            members = list(unit)
            if not any(in_win[v] for v in members):
                continue
            if not all(in_win[v] for v in members):  # a colocation group reaching outside: stays
                for v in members:
                    if in_win[v]:
                        lit = model.new_bool_var("")
                        model.add(lit == 1)
                        m.x[v] = {int(self.assign[v]): lit}
                continue
            u_lits = {int(d): model.new_bool_var("") for d in np.flatnonzero(p.allowed[members[0]])}
            model.add_exactly_one(u_lits.values())
            m.lits.append((unit, u_lits))
            m.free[members] = True
            for v in members:
                m.x[v] = u_lits

    def _op_rows(self, w: _Window, m: _WindowModel) -> None:
        """Per window op: its start, its interval on each target, the fixed ops before it, the
        later ops after it, and the no-overlap per resource."""
        p, cost, dly, assign = self.p, self.ci.cost, self.dly, self.assign
        res, n_r = p.resource_sets, p.n_resources
        model, x, mk, fin = m.model, m.x, m.mk, m.fin
        before, in_win, end, avail, tail = w.before, w.in_win, w.end, w.avail, w.tail
        per_res: list[list[Any]] = [[] for _ in range(n_r)]
        for v in w.win:
            lo = 0
            for u in self.pred[v]:
                if before[u]:
                    lo = max(lo, int(end[u] + min(dly[(u, v)][assign[u], d] for d in x[v])))
            m.s[v] = s_v = model.new_int_var(lo, m.horizon, f"s{v}")
            for d, lit in x[v].items():
                c_ = int(cost[v, d])
                e_v = s_v + c_
                if c_ > 0:
                    iv = model.new_optional_fixed_size_interval_var(s_v, c_, lit, f"I{v}_{d}") \
                        if len(x[v]) > 1 else model.new_fixed_size_interval_var(s_v, c_, f"I{v}_{d}")
                    model.add(s_v >= int(max(avail[r] for r in res[d]))).only_enforce_if(lit)
                    for r in res[d]:
                        per_res[r].append(iv)
                        model.add(fin[r] >= e_v).only_enforce_if(lit)
                for u in self.pred[v]:
                    if before[u]:
                        model.add(s_v >= int(end[u] + dly[(u, v)][assign[u], d])).only_enforce_if(lit)
                for x_ in self.succ[v]:
                    if not in_win[x_]:
                        after = int(dly[(v, x_)][d, assign[x_]] + tail[x_])
                        model.add(mk >= e_v + after).only_enforce_if(lit)
                if not self.succ[v]:
                    model.add(mk >= e_v).only_enforce_if(lit)
        for r in range(n_r):
            if len(per_res[r]) > 1:
                model.add_no_overlap(per_res[r])
            if w.first_later[r] is not None:
                model.add(mk >= fin[r] + int(tail[w.first_later[r]]))

    def _precedence_rows(self, w: _Window, m: _WindowModel) -> None:
        """Precedence inside the window, with the delay of the pair of targets."""
        cost, x, s = self.ci.cost, m.x, m.s
        for v in w.win:
            for x_ in self.succ[v]:
                if not w.in_win[x_]:
                    continue
                dm = self.dly[(v, x_)]
                for a, la in x[v].items():
                    for b, lb in x[x_].items():
                        m.model.add(s[x_] >= s[v] + int(cost[v, a] + dm[a, b])).only_enforce_if([la, lb])

    def _memory_rows(self, w: _Window, m: _WindowModel) -> None:
        """Memory caps over the free units, the fixed ops' weights counted."""
        p, assign, model = self.p, self.assign, m.model
        for d in range(p.n_targets):
            cap = p.memory_cap_bytes[d]
            if not np.isfinite(cap):
                continue
            fixed = float(p.weight_bytes[(assign == d) & ~m.free].sum())
            add_weight_row(model, [(float(p.weight_bytes[list(unit)].sum()), u_lits[d])
                                   for unit, u_lits in m.lits if d in u_lits], cap - fixed)

    def _apply(self, w: _Window, m: _WindowModel, solver: cp_model.CpSolver) -> bool:
        """Take the solved window if the float re-timed makespan improves; True if it did."""
        p, x = self.p, m.x
        new_assign = self.assign.copy()
        new_start = {}
        for v in w.win:
            new_assign[v] = next(d for d, lit in x[v].items() if solver.boolean_value(lit))
            new_start[v] = solver.value(m.s[v])
        head = [v for v in self.order if w.before[v]]
        new_order = head + sorted(w.win, key=lambda v: (new_start[v], v)) + w.later
        makespan = float(latency_schedule(p, new_assign, new_order, self.fc)[1].max())
        if makespan < self.makespan - 1e-9:
            self.assign, self.order, self.makespan = new_assign, new_order, makespan
            self.improved += 1
            return True
        return False

    # ------------------------------------------------------------------ sweep
    def run(self, deadline: float, window_ops: int = 70, step_s: float = 0.7, min_step_s: float = 0.25,
            patience: int = 2, max_windows: int | None = None, stop_at: float | None = None,
            paying: float = 0.0) -> float:
        """Sweep windows of about ``window_ops`` ops (half overlapping) from the start of the
        schedule until ``deadline`` (or ``max_windows`` CP-SAT calls); each call gets at most
        ``step_s`` seconds (with the default ``deterministic`` option, ``dtime_per_s * step_s`` of
        deterministic time, so a run bounded by ``max_windows`` is the same on any machine). After
        ``patience`` windows in a row without improvement the sweep starts again from the
        beginning with another window size (x1.5, x0.75, x1). From ``stop_at`` on (``time.monotonic()``)
        the sweep stops as soon as under ``paying`` of its windows have improved the plan. Returns the
        makespan."""
        p = self.p
        n = p.n_ops
        sizes = [window_ops, max(8, int(1.5 * window_ops)), max(8, int(0.75 * window_ops))]
        size_i, pos, misses = 0, 0, 0
        while max_windows is None or self.steps < max_windows:
            now = time.monotonic()
            left = deadline - now
            if left < min_step_s:
                break
            if stop_at is not None and now >= stop_at and self.improved < paying * max(1, self.steps):
                break
            size = sizes[size_i % len(sizes)]
            if pos >= n - 1 or misses >= patience:
                size_i += 1
                size = sizes[size_i % len(sizes)]
                pos, misses = 0, 0
            fstart = latency_schedule(p, self.assign, self.order, self.fc)[0]
            ops = sorted(range(n), key=lambda i: (fstart[i], i))
            hi = min(n - 1, pos + size)
            t1 = float(fstart[ops[pos]]) if pos else -1.0
            t2 = float(fstart[ops[hi]]) if hi < n - 1 else np.inf
            if t2 > t1:
                better = self.step(t1, t2, min(step_s, left - 0.15))
                misses = 0 if better else misses + 1
            pos += max(1, size // 2)
        return self.makespan


def improve_latency(problem: PlacementProblem, assign: np.ndarray, order: list[int], deadline: float,
                    options: dict[str, Any] | None = None, seed: int = 0,
                    **kw: Any) -> tuple[np.ndarray, list[int], float]:
    """Run :class:`LatencyLNS` until ``deadline``; returns ``(assign, order, makespan)``."""
    lns = LatencyLNS(problem, assign, order, options, seed)
    lns.run(deadline, **kw)
    return lns.assign, lns.order, lns.makespan
