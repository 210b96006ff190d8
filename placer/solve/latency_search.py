r"""Critical-path local search for latency mode: better plans from a good one, fast.

A plan is an assignment plus a topological *priority order*; its schedule is the list schedule of
:func:`~placer.solve.evaluate.latency_schedule` (the evaluator's semantics: each op in turn starts
when its inputs have arrived and its target, and every target sharing a core with it, is free;
ops of cost 0 are instantaneous). :class:`CriticalPathSearch` keeps such a plan and improves its
makespan with moves on its *critical chain*, the ops whose start times, followed back from the op
that ends last, each set the next one's start (through a copy or the target being busy):

* **move**: an op of the chain goes to another allowed target (its colocation group with it), at
  the same place in the order;
* **join**: an op of the chain goes to the target of the producer it waits for (no copy), or that
  producer goes to the op's target;
* **ahead of the holder**: an op of the chain that waited for its target goes just before the op
  that held it, in the order (where its predecessors allow): the least reordering that gives it the
  target first;
* **hoist**: an op of the chain goes earlier in the order, just after its last predecessor (it may
  then pass ops that held its target);
* **swap** (once the search has reached a local optimum of the moves above): an op of the chain
  and an op running on another target at the same time trade targets (alone, the chain op would
  wait there for the op holding that target). Tried during the first descent too, it costs
  trials that the plain moves spend better: random layered x 8, 2,000 ops, 6e7 ops re-timed
  from the dynamic list plan, 39.38 -> 39.70 ms (seed 0), 33.10 -> 33.34 (seed 1); from the first
  local optimum on, 500 ops, 5e7 ops re-timed, four kick seeds, seed 0: 10.150 / 10.234 / 10.122 /
  10.244 -> 10.117 / 10.211 / 10.108 / 10.235 ms, seed 1: 11.273 / 11.215 / 11.328 / 11.249 ->
  11.187 / 11.134 / 11.209 / 11.193 (the 2,000-op searches never reach a local optimum in their
  budget: unchanged).

Apart from the moves, :meth:`CriticalPathSearch.lighten` sheds work: ops off the critical chain go
to cheaper allowed targets, most excess work first, wherever the makespan stays (a plan searched for
makespan alone does ~7% more work than the load bound's assignment at 2,000 ops x 8 targets). From
the window LNS's final plan, lightening then searching again with 3e7 ops re-timed gave 37.822 ->
37.445 ms, the same search without it 37.814 (random layered 2,000 x 8, seed 0); the solver runs it
after the window LNS (:mod:`placer.solve.coarsened`, option ``lighten_share``). Lightening at every
local optimum of the search (``run(lighten=True)``) was mixed at 500 ops (60 s: gap 6.88 -> 6.44 %
seed 0, 7.68 -> 8.93 % seed 1) and every 25-400 moves of the 2,000-op descent worse (39.54 ->
39.54-39.81 ms at 4e7 ops re-timed): off by default.

Ahead of the holder was added in session 32 (tried before hoist; hoist, the larger reordering, is
kept after it). A small gain, but a steady one: from HEFT's plan with 6e7 ops re-timed, random
layered 500 x 8, four kick seeds each, the median makespan 0.5% lower (geomean 0.9953 on instances
4-9, lower on 5 of 6; 0.9955 on instances 10-21, lower on 11 of 12), at 2,000 x 8 (instances 4-6,
two kick seeds; there the budget ends the search, not a local optimum) unchanged (geomean 1.0000);
in the whole 60-s solver, whose later phases start from what the search found, the gain is about
the size of a run's spread (``experiments/bench_solver.py random``, 60 s): 500 x 8 seeds 0-3
9.811 / 11.079 / 9.528 / 9.315 -> 9.839 / 10.952 / 9.630 / 9.234 ms, 2,000 x 8 seeds 0 / 1 / 3
37.567 / 31.938 / 43.469 -> 37.364 / 32.108 / 42.861 (geomean 0.997 over the seven).

A move is kept when the makespan drops, or stays equal while the sum of the targets' finishing
times drops (this lets the search cross plateaus; it cannot cycle). When no move of the chain
improves, the search *kicks*: a few random ops of the chain move to random allowed targets, and
it goes on from there while remembering the best plan seen; the kicked plan is given up for the
best one after ``patience`` kicks without progress, and the search stops after ``max_stale_kicks``
kicks without a better plan (200: on the 100-task STG instances 1,000 took 5x the time and found a
better plan once in four), or when it reaches a lower bound it was given (``floor``). Memory caps
are respected (a move that breaks one is skipped).
Schedules are recomputed from the first op whose place changed (the target states before every
position are kept), and a trial stops as soon as an op ends after the current makespan, so a
move costs a fraction of a full evaluation. The re-timing is compiled (:mod:`placer.solve.retime`,
numba; the plan's state in numpy arrays): 7-8x the Python loop's speed, the same plans.

Every budget is deterministic (``max_evals`` schedule evaluations, counted in ops re-timed); a
``deadline`` (``time.monotonic()``) is a wall-clock backstop for benchmarks. The best plan is
re-checked with :func:`~placer.solve.evaluate.latency_schedule`, whose makespan is the one
reported.
"""

from __future__ import annotations

import time

import numpy as np

from placer.problem import PlacementProblem
from placer.solve.evaluate import Costs, float_noise, latency_schedule
from placer.solve import retime
from placer.solve.retime import SEARCH_RATE

__all__ = ["CriticalPathSearch", "improve_plan"]


class CriticalPathSearch:
    """Local search on the critical chain of a latency plan (see the module docstring).

    Parameters
    ----------
    problem, assign, order
        The problem and a feasible plan (``order``: a topological order of all ops).
    costs
        Default: the problem's float costs (the evaluator's).
    seed
        Seed of the kicks (the search is deterministic for a seed and a budget).
    """

    def __init__(self, problem: PlacementProblem, assign: np.ndarray, order: list[int],
                 costs: Costs | None = None, seed: int = 0) -> None:
        p = problem
        self.p = p
        self.c = costs or Costs.of(p)
        n, t = p.n_ops, p.n_targets
        self.n, self.t = n, t
        cost = np.where(p.allowed, self.c.cost, np.inf)
        self.cost = cost.tolist()
        # inputs of each op, flat for the compiled re-timing (placer.solve.retime): op v reads
        # in_prod[in_ptr[v]:in_ptr[v + 1]], each with its targets x targets copy delay plus v's entry cost
        ptr_a, ks = p.in_tensor_arrays
        ks = np.asarray(ks, dtype=np.int64)
        prod = np.asarray(p.tensor_producer, dtype=np.int64)[ks]
        reads = prod >= 0  # the model's inputs have no producer
        reader = np.repeat(np.arange(n), np.diff(ptr_a))
        per_op = np.bincount(reader[reads], minlength=n)
        self.in_ptr = np.concatenate([[0], np.cumsum(per_op)]).astype(np.int64)
        self.in_prod = prod[reads]
        self.in_delay = np.ascontiguousarray(np.asarray(self.c.link)[ks[reads]]
                                             + np.asarray(self.c.entry)[None, None, :], dtype=np.float64)
        self.preds = [sorted(set(self.in_prod[self.in_ptr[v]:self.in_ptr[v + 1]].tolist())) for v in range(n)]
        self.allowed = [[int(d) for d in np.flatnonzero(p.allowed[v])] for v in range(n)]
        self.group = [list(u) for u in p.units]
        self.unit_of = [0] * n
        for i, unit in enumerate(p.units):
            for v in unit:
                self.unit_of[v] = i
        self.conf = [list(x) for x in p.conflicts] if p.shares_resources else None
        # the costs and shared cores, flat, for the compiled re-timing
        self.cost_a = np.ascontiguousarray(cost, dtype=np.float64)
        conf = self.conf or [[] for _ in range(t)]
        self.conf_ptr = np.cumsum([0] + [len(x) for x in conf]).astype(np.int64)
        self.conf_idx = np.asarray([d for x in conf for d in x], dtype=np.int64)
        self.allowed_mask = np.asarray(p.allowed, dtype=bool)
        self.single = np.asarray([len(self.group[self.unit_of[v]]) == 1 for v in range(n)], dtype=bool)
        self._no_snaps = np.zeros((1, t))  # what the compiled loop is handed when no states are kept
        self.caps = np.asarray(p.memory_cap_bytes, dtype=float)
        self.capped = bool(np.isfinite(self.caps).any() and np.asarray(p.weight_bytes).any())
        self.w = np.asarray(p.weight_bytes, dtype=float)
        self.rng = np.random.default_rng(seed)
        self.assign = np.asarray(assign, dtype=np.int64).copy()
        self.order = np.asarray(order, dtype=np.int64).copy()
        self.evals = 0  # ops re-timed so far (the deterministic effort)
        self.moves = 0  # moves kept
        self.stuck = False  # reached a local optimum once (swaps are tried from then on)
        self._full()
        self.best = (self.makespan, self.score, self.assign.copy(), self.order.copy())

    # ------------------------------------------------------------------ schedule
    def _simulate(self, assign: np.ndarray, order: np.ndarray, start_pos: int, avail0: np.ndarray,
                  start: np.ndarray, end: np.ndarray, snaps: np.ndarray | None,
                  cutoff: float = np.inf) -> bool:
        """List-schedule ``order[start_pos:]`` from the target state ``avail0`` (times of earlier
        ops in ``start`` / ``end``, updated in place; :func:`placer.solve.retime.simulate`); False as
        soon as an op ends after ``cutoff``. ``snaps`` (if given) receives the state before each
        position."""
        # through the module: numba's dispatcher once compiled, not the Kernel (155 ns a call, 51k a second)
        took = retime.simulate(assign, order, start_pos, avail0, start, end,
                        self._no_snaps if snaps is None else snaps, snaps is not None, cutoff,
                        self.cost_a, self.in_ptr, self.in_prod, self.in_delay, self.conf_ptr, self.conf_idx,
                        self.conf is not None)
        self.evals += abs(took)
        return took >= 0

    def _full(self) -> None:
        n = self.n
        self.start = np.zeros(n)
        self.end = np.zeros(n)
        self.snaps = np.zeros((n + 1, self.t))
        self._simulate(self.assign, self.order, 0, np.zeros(self.t), self.start, self.end, self.snaps)
        self.pos = [0] * n
        for i, v in enumerate(self.order.tolist()):
            self.pos[v] = i
        self.makespan = float(self.end.max()) if n else 0.0
        self.score = self._score(self.end, self.assign)

    def _score(self, end: np.ndarray, assign: np.ndarray) -> float:
        return float(retime.finish_sum(end, assign, self.t))

    def _try(self, assign: np.ndarray, order: np.ndarray,
             from_pos: int) -> tuple[float, float, np.ndarray, np.ndarray]:
        """Makespan and score of a changed plan equal to the current one before ``from_pos``."""
        start = self.start.copy()
        end = self.end.copy()
        cutoff = self.makespan + 1e-12 * max(1.0, self.makespan)  # a later end cannot win
        if not self._simulate(assign, order, from_pos, self.snaps[from_pos], start, end, None, cutoff):
            return np.inf, np.inf, start, end
        return float(end.max()), self._score(end, assign), start, end

    def _accept(self, assign: list[int], order: list[int]) -> None:
        self.assign, self.order = assign, order
        self._full()
        self.moves += 1

    def _memory_ok(self, assign: list[int]) -> bool:
        if not self.capped:
            return True
        load = np.zeros(self.t)
        np.add.at(load, np.asarray(assign), self.w)
        return bool((load <= self.caps).all())

    # ------------------------------------------------------------------ critical chain
    def chain(self) -> list[tuple[int, int]]:
        """The critical chain, last op first: ``(op, cause)`` with ``cause`` the op whose end (plus
        a copy) or whose hold on the target set the op's start, or -1 (starts at 0 / its inputs)."""
        assign, start, end = self.assign.tolist(), self.start.tolist(), self.end.tolist()
        order, pos = self.order.tolist(), self.pos
        v = max(range(self.n), key=lambda i: (end[i], -i))
        out: list[tuple[int, int]] = []
        seen = set()
        while v >= 0 and v not in seen:
            seen.add(v)
            d = assign[v]
            s_v = start[v]
            cause = -1
            for j in range(int(self.in_ptr[v]), int(self.in_ptr[v + 1])):
                u = int(self.in_prod[j])
                a = assign[u]
                r = end[u] if a == d else end[u] + float(self.in_delay[j, a, d])
                if abs(r - s_v) <= 1e-12 * max(1.0, s_v):
                    cause = u
                    break
            if cause < 0 and s_v > 0:  # the target was busy: the op before it on the target
                for i in range(pos[v] - 1, -1, -1):
                    w = order[i]
                    dw = assign[w]
                    if (dw == d or (self.conf is not None and dw in self.conf[d])) and end[w] > start[w]:
                        if abs(end[w] - s_v) <= 1e-12 * max(1.0, s_v):
                            cause = w
                        break
            out.append((v, cause))
            v = cause
        return out

    # ------------------------------------------------------------------ moves
    def _placed_at(self, v: int, i: int) -> np.ndarray:
        """The priority order with ``v`` taken out and put back at position ``i`` (before its op)."""
        order = self.order.tolist()
        order.pop(self.pos[v])
        order.insert(i, v)
        return np.asarray(order, dtype=np.int64)

    def _moved(self, v: int, d: int) -> np.ndarray | None:
        unit = self.group[self.unit_of[v]]
        if any(d not in self.allowed[w] for w in unit):
            return None
        assign = self.assign.copy()
        assign[unit] = d
        return assign if self._memory_ok(assign) else None

    def _better(self, mk: float, sc: float) -> bool:
        tol = 1e-12 * max(1.0, self.makespan)
        return mk < self.makespan - tol or (mk <= self.makespan + tol and sc < self.score - tol)

    def _improve_once(self, max_evals: float) -> bool:
        """Try the moves of the chain, first improvement; True if one was kept."""
        chain = self.chain()
        for v, cause in chain:
            if self.evals >= max_evals:
                return False
            unit = self.group[self.unit_of[v]]
            first = min(self.pos[w] for w in unit)
            cands: list[tuple[np.ndarray, np.ndarray, int]] = []
            # join: to the producer's target, or the producer to v's target
            if cause >= 0 and cause in self.preds[v] and self.assign[cause] != self.assign[v]:
                a = self._moved(v, int(self.assign[cause]))
                if a is not None:
                    cands.append((a, self.order, first))
                a = self._moved(cause, int(self.assign[v]))
                if a is not None:
                    cands.append((a, self.order, min(self.pos[w] for w in self.group[self.unit_of[cause]])))
            # ahead of the holder (the op that held v's target), then hoist: just after the last predecessor
            if cause >= 0 and cause not in self.preds[v]:
                lo = max([self.pos[u] for u in self.preds[v]] + [-1]) + 1
                at = self.pos[cause]
                if lo <= at < self.pos[v]:
                    cands.append((self.assign, self._placed_at(v, at), at))
                if lo < self.pos[v] and lo != at:
                    cands.append((self.assign, self._placed_at(v, lo), lo))
            # move: every other allowed target
            for d in self.allowed[v]:
                if d != int(self.assign[v]):
                    a = self._moved(v, d)
                    if a is not None:
                        cands.append((a, self.order, first))
            if self.stuck:
                cands += self._swaps(v)
            for assign, order, from_pos in cands:
                mk, sc, _, _ = self._try(assign, order, from_pos)
                if self._better(mk, sc):
                    self._accept(assign, order)
                    return True
        return False

    def _swaps(self, v: int) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """Swap candidates of ``v``: ``v`` to the target of an op ``w`` that runs there while ``v``
        runs (their intervals overlap), ``w`` to ``v``'s target (single ops, not colocation groups)."""
        if not self.single[v]:
            return []
        assign, start, end = self.assign, self.start, self.end
        d0, s_v, e_v = int(assign[v]), start[v], end[v]
        ok = ((assign != d0) & (end > s_v) & (start < e_v) & (end > start) & self.allowed_mask[v][assign]
              & self.allowed_mask[:, d0] & self.single)
        out = []
        for w in np.flatnonzero(ok).tolist():
            a = assign.copy()
            a[v], a[w] = assign[w], d0
            if self._memory_ok(a):
                out.append((a, self.order, min(self.pos[v], self.pos[w])))
        return out

    def lighten(self, max_evals: float, deadline: float | None = None) -> int:
        """Move ops off the critical chain to cheaper allowed targets (most excess work first, the
        cheapest target that keeps the makespan) while the makespan does not grow, until ``max_evals``
        ops re-timed (cumulative) or the ``deadline`` (``time.monotonic()``); the number kept. Less
        work where the chain does not wait leaves the targets free earlier for what follows."""
        chain = {v for v, _ in self.chain()}
        cost, allowed = self.cost, self.allowed
        assign = self.assign.tolist()
        excess = [(cost[v][assign[v]] - min(cost[v][d] for d in allowed[v]), v) for v in range(self.n)]
        kept = 0
        for ex, v in sorted(excess, reverse=True):
            if ex <= 0 or self.evals >= max_evals or (deadline is not None and time.monotonic() >= deadline):
                break
            if v in chain or not self.single[v]:
                continue
            cur = cost[v][int(self.assign[v])]
            for d in sorted(allowed[v], key=lambda d: cost[v][d]):
                if cost[v][d] >= cur:
                    break
                a = self._moved(v, d)
                if a is None:
                    continue
                mk, _, _, _ = self._try(a, self.order, self.pos[v])
                if mk <= self.makespan + 1e-12 * max(1.0, self.makespan):
                    self._accept(a, self.order)
                    kept += 1
                    break
        return kept

    def _kick(self, strength: int) -> None:
        """Move ``strength`` random ops of the chain to random allowed targets that are not much
        slower than their cheapest (at most twice its cost)."""
        chain = [v for v, _ in self.chain()]
        picks = self.rng.choice(len(chain), size=min(strength, len(chain)), replace=False)
        assign = self.assign.copy()
        for i in sorted(int(i) for i in picks):
            v = chain[i]
            cv = self.cost[v]
            best = min(cv[d] for d in self.allowed[v])
            ds = [d for d in self.allowed[v] if d != int(assign[v]) and cv[d] <= 2 * best]
            if not ds:
                continue
            d = ds[int(self.rng.integers(len(ds)))]
            unit = self.group[self.unit_of[v]]
            if all(d in self.allowed[w] for w in unit):
                assign[unit] = d
        if self._memory_ok(assign):
            self._accept(assign, self.order)

    def _record(self) -> None:
        b = self.best
        tol = 1e-12 * max(1.0, b[0])
        if self.makespan < b[0] - tol or (self.makespan <= b[0] + tol and self.score < b[1] - tol):
            self.best = (self.makespan, self.score, self.assign.copy(), self.order.copy())

    def run(self, max_evals: float = np.inf, deadline: float | None = None, kick: int = 2,
            patience: int = 4, max_stale_kicks: int = 200, floor: float = 0.0,
            lighten: bool = False) -> tuple[float, np.ndarray, list[int]]:
        """Improve until ``max_evals`` ops have been re-timed (cumulative over calls), the
        ``deadline``, ``max_stale_kicks`` kicks in a row without a better plan (small problems
        run out of moves long before their budget), or the best makespan reaches ``floor`` (a
        lower bound: nothing better exists); returns the best ``(makespan, assign, order)`` seen,
        the makespan from :func:`~placer.solve.evaluate.latency_schedule`. ``lighten``: at each
        local optimum, :meth:`lighten` first, and kick only when it moves nothing."""
        stale = 0
        since_best = 0
        if max_evals == np.inf and deadline is None:
            raise ValueError("CriticalPathSearch.run needs max_evals or a deadline")
        at_floor = floor + float_noise(floor)
        while (self.evals < max_evals and (deadline is None or time.monotonic() < deadline)
               and self.best[0] > at_floor):
            if self._improve_once(max_evals):
                self._record()
                continue
            self.stuck = True  # a local optimum of the moves above: swaps from now on
            if lighten and self.lighten(max_evals, deadline):
                continue
            before = self.best[0]
            self._record()
            stale = stale + 1 if self.best[0] >= before else 0
            since_best = since_best + 1 if self.best[0] >= before else 0
            if since_best > max_stale_kicks:
                break
            if stale >= patience:  # back to the best plan
                _, _, a, o = self.best
                self.assign, self.order = a.copy(), o.copy()
                self._full()
                stale = 0
            self._kick(kick)
        self._record()
        mk, _, a, o = self.best
        a_np = np.asarray(a, dtype=int)
        o_list = o.tolist()
        return float(latency_schedule(self.p, a_np, o_list, self.c)[1].max()), a_np, o_list


def improve_plan(problem: PlacementProblem, assign: np.ndarray, order: list[int], *,
                 max_evals: float = np.inf, deadline: float | None = None, seed: int = 0,
                 costs: Costs | None = None, floor: float = 0.0) -> tuple[float, np.ndarray, list[int]]:
    """One-call :class:`CriticalPathSearch`: ``(makespan, assign, order)`` of the best plan found
    (never worse than the given one; the search stops once it reaches the lower bound ``floor``)."""
    return CriticalPathSearch(problem, assign, order, costs, seed).run(max_evals, deadline, floor=floor)


def polish(problem: PlacementProblem, name: str, assign: np.ndarray, order: list[int] | None,
           options: dict, deadline: float, seed: int = 0,
           budget_s: float | None = None, floor: float = 0.0) -> tuple[str, np.ndarray, list[int] | None]:
    """The plan ``(name, assign, order)`` improved by :class:`CriticalPathSearch` for the share
    ``options["local_search"]`` of the time until ``deadline`` (a wall-clock backstop), with the
    deterministic budget of ``options["local_search_rate"]`` ops re-timed per second of
    ``budget_s`` (default: that share of the time left; callers that want the same plan on any
    machine give a budget computed from the time limit; ``floor``: a lower bound on the makespan,
    the search stops when it reaches it); the plan itself when the search finds nothing better, is
    off (share 0) or the objective weighs transfers (``transfer_weight``)."""
    share = float(options.get("local_search", 0.0) or 0.0)
    if share <= 0 or float(options.get("transfer_weight", 0.0) or 0.0) > 0 or problem.n_targets < 2:
        return name, assign, order
    now = time.monotonic()
    secs = share * max(0.0, deadline - now)
    if secs <= 0:
        return name, assign, order
    o = list(range(problem.n_ops)) if order is None else list(order)
    before = float(latency_schedule(problem, assign, o)[1].max())
    budget = secs if budget_s is None else max(0.0, budget_s)
    rate = float(options.get("local_search_rate", SEARCH_RATE))
    mk, a, o = improve_plan(problem, assign, o, max_evals=rate * budget, deadline=now + secs, seed=seed,
                            floor=floor)
    if mk < before - 1e-12 * max(1.0, before):
        return f"{name} + critical-path", a, o
    return name, assign, order
