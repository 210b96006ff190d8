r"""CP-SAT model for latency mode (minimum makespan of one inference).

Notation (all times in integer units, see :mod:`placer.solve.cpsat_util`): ops ``v``, targets
``d``, ``A(v)`` the allowed targets of ``v`` (support, pin, colocation, memory), ``c[v,d]`` costs,
``delta[u,v,a,b] = max_k (link[k,a,b] + entry[b])`` over the tensors ``k`` of edge ``(u,v)``
(``a != b``), ``w[v]`` weight bytes, ``cap[d]`` memory caps, ``head[v]`` / ``tail[v]`` the bounds
of :mod:`placer.solve.bounds`, ``UB`` the hint's makespan, ``LB`` the best lower bound.

Variables
    ``x[v,d] in {0,1}`` for ``d in A(v)`` (one literal per colocation group and target, shared by
    its members); ``s[v] in [head[v], UB - tail[v]]``; ``e[v] = s[v] + sum_d c[v,d] x[v,d]``;
    ``M in [LB, UB]``; an optional interval ``I[v,d] = [s[v], s[v] + c[v,d])`` present iff
    ``x[v,d]``.
Constraints
    * ``sum_d x[v,d] = 1``
    * ``NoOverlap({I[v,d] : d uses r, v, c[v,d] > 0})`` for every resource ``r``
      (``problem.resource_sets``: one per target when no core is shared, so one NoOverlap per
      target; a core shared by targets gets one NoOverlap over the intervals of all of them). An
      op of cost 0 is instantaneous and occupies no time on its target, as in :mod:`placer.plan`;
      CP-SAT would otherwise forbid a zero-length interval strictly inside another one
    * every edge ``(u,v)``: ``s[v] >= e[u]``, and for ``a != b``:
      ``x[u,a] and x[v,b] => s[v] >= e[u] + delta[u,v,a,b]`` (encoded with one constraint per
      ``b`` enforced by ``x[v,b] and not x[u,b]`` at the smallest delay into ``b``, plus one per
      pair whose delay is larger). A tensor read by several consumers on one target crosses once;
      copies occupy no target and overlap freely, so per-consumer readiness is exact.
    * memory: ``sum_v w[v] x[v,d] <= cap[d]``
    * ``M >= e[v]`` for every sink ``v``
    * redundant: ``M >= sum_{d uses r} sum_v c[v,d] x[v,d]`` per resource; ``Cumulative`` of the
      intervals ``[s[v], e[v])`` with capacity = the most targets that can run at once (number of
      targets when no core is shared) (option ``redundant``)
    * symmetry breaking between interchangeable targets (option ``symmetry_breaking``)
    * pooling (option ``pool_identical``): a class of interchangeable targets sharing no core,
      without memory caps or partition overhead, with free copies between its members, in a problem without
      colocation groups, is modelled as *one* resource of capacity ``m`` = its size
      (``Cumulative`` of unit demands instead of ``m`` NoOverlaps). Exact: intervals that overlap
      at most ``m`` at a time can be given ``m`` machines (interval graph colouring), which is done
      after solving (greedy by start time). This is the classic ``P|prec|Cmax`` model.
Objective
    ``minimize M`` (+ ``transfer_weight * sum_{k,a,b} z[k,a,b] (link[k,a,b] + entry[b])`` where
    ``z[k,a,b] >= x[prod(k),a] + need[k,b] - 1``, ``need[k,b] >= x[v,b]`` for consumers ``v``:
    one term per (tensor, destination) copy).
Lower bound
    ``LB`` = the best of the critical path, the communication-aware path bound of
    :mod:`placer.solve.bounds_comm` (option ``comm_bound``), the load LP and the window load LP
    (:func:`~placer.solve.bounds.window_load_bound`, option ``window_bound``; it gets at most a
    tenth of the time left; fed the communication-aware heads and tails), then, with option
    ``shave_fraction`` > 0, shaved and probed (:func:`~placer.solve.bounds_comm.shaved_bound`,
    options ``probe_pairs`` and ``probe_steps``; below the best heuristic plan, in a thread while
    the critical-path search runs, on the other core: both compiled loops release the GIL; waited
    for at most that share of the time left once the hint is known; on the float costs, the
    model's ``LB`` taking it less the rounding slack), the rest on the rounded costs. With ``comm_bound``
    the per-target heads ``H`` and tails ``Q`` also enter the model: ``x[v,d] => s[v] >= H[v,d]`` and
    ``x[v,d] => e[v] + Q[v,d] <= M``, and ``x[v,d] = 0`` when ``H + c + Q`` exceeds ``UB``.
Hint and fallback
    The best of HEFT, HEFT looking ahead at the per-target tails ``Q`` (PEFT-like, option
    ``comm_bound``), LP-rounding + list scheduling, greedy and every single-target plan, and the
    price-guided dynamic list scheduling search (:class:`~placer.solve.heuristics.DynamicListSearch`,
    option ``dynamic``; it runs last, until a deterministic effort of 80 % of the heuristic time) —
    by the rounded objective; computed within ``heuristic_fraction`` of the time limit, plus the
    best of them (float makespan) improved by the critical-path search of
    :mod:`placer.solve.latency_search` (option ``local_search``: its share of the time left) — is
    the hint and sets ``UB``; the returned plan is the best (float-evaluated) of CP-SAT's
    solution, re-timed (and improved by that search when CP-SAT stops early with time left), and
    those heuristic plans, so it is never worse than HEFT.
Search
    Two CP-SAT runs on the same model (option ``lns_share``): the full portfolio (it proves small
    models and the STG optima), then, unless it proved the optimum, the LNS workers alone,
    hinted with the full run's best solution; the better solution and the larger bound are kept.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from placer.errors import ProblemError
from placer.plan import Plan, SolverStats
from placer.problem import PlacementProblem
from placer.solve.base import SolveContext
from placer.solve.bounds import critical_path_bound, edge_delays, heads_tails, load_bound, window_load_bound
from placer.solve.bounds_comm import comm_heads_tails, path_bound, shaved_bound
from placer.solve.cpsat_util import (
    add_first_use_order,
    add_memory_caps,
    canonical_assign,
    choose_resolution,
    first_use_values,
    interchangeable_classes,
    make_solver,
    plan_if_no_time_to_build,
    read_assign,
    reported_bound,
    rounding_slack,
    status_name,
    to_int,
)
from placer.solve.evaluate import (
    Costs,
    latency_schedule,
    make_latency_plan,
    needed_transfers,
    order_by_start,
    plan_arrays,
)
from placer.solve.heuristics import DynamicListSearch, HeuristicError, heft, lp_list, priority_assign
from placer.solve.latency_search import polish

__all__ = ["LNS_LARGE_OPS", "LatencyModel", "latency_candidates", "lns_share", "solve_latency"]

#: from this many ops the ``"auto"`` LNS share is 0.95 (below it 0.7): see option ``lns_share``
LNS_LARGE_OPS = 300
#: the critical-path search after CP-SAT (:meth:`LatencyModel.polish`) gets this share of the time
#: limit as its deterministic budget, and the LNS phase leaves it that much time
POLISH_SHARE = 0.1


def lns_share(option: Any, n_ops: int) -> float:
    """The share of CP-SAT's time its LNS workers get (option ``lns_share``: a float, or
    ``"auto"``: 0.7 below :data:`LNS_LARGE_OPS` ops, where the full portfolio proves small models
    and the STG optima, and 0.95 from there on, where it neither proves nor improves a 500-op hint)."""
    if option == "auto":
        return 0.7 if n_ops < LNS_LARGE_OPS else 0.95
    return float(option or 0.0)


def _transfer_total(problem: PlacementProblem, assign: np.ndarray, costs: Costs) -> float:
    return sum(ms + en for _, _, _, ms, en in needed_transfers(problem, assign, costs))


def latency_candidates(problem: PlacementProblem, deadline: float | None = None,
                       info: dict | None = None, search: DynamicListSearch | None = None,
                       search_dtime: float | None = None,
                       tails: np.ndarray | None = None, lookahead: bool = True
                       ) -> list[tuple[str, np.ndarray, Any]]:
    """Heuristic ``(name, assign, order)`` candidates: HEFT, HEFT looking ahead at the per-target
    tails (``tails``, default :func:`~placer.solve.bounds_comm.comm_heads_tails`'s ``Q``, in full
    and at half weight: PEFT-like), LP-rounding + list scheduling (iterated with idle
    compensation), single-target and greedy assignments for every target, then the best plan of
    ``search`` (a :class:`~placer.solve.heuristics.DynamicListSearch`, run until its deterministic
    effort reaches ``search_dtime``), each while time remains before ``deadline`` (HEFT always
    runs, and the search at least one pass). ``info`` receives ``load_bound``. ``lookahead=False``
    leaves out the HEFT variants looking ahead."""
    p = problem
    out: list[tuple[str, np.ndarray, Any]] = []

    def late() -> bool:
        return deadline is not None and time.monotonic() > deadline

    try:
        a, _, order = heft(p)
        out.append(("heft", a, order))
    except HeuristicError:
        pass
    if lookahead and p.n_targets > 1 and not late():
        q = tails if tails is not None else comm_heads_tails(p, Costs.of(p))[1]
        for name, wgt in (("heft-tails", 1.0), ("heft-tails/2", 0.5)):
            if late():
                break
            try:
                a, _, order = heft(p, lookahead=wgt * q)
                out.append((name, a, order))
            except HeuristicError:
                pass
    if not late():
        try:
            a, order = lp_list(p, deadline=deadline, info=info)
            out.append(("lp-list", a, order))
        except HeuristicError:
            pass
    for d in range(p.n_targets):
        pref = [d] + [x for x in range(p.n_targets) if x != d]
        for name, fast in ((f"single:{p.targets[d]}", False), (f"greedy:{p.targets[d]}", True)):
            if late():
                break
            try:
                out.append((name, priority_assign(p, pref, fastest_fallback=fast), None))
            except HeuristicError:
                pass
    if search is not None:
        best = search.run(deadline, search_dtime)
        if best is not None:
            out.append(("dynamic", best[1], best[2]))
    return out


def solve_latency(problem: PlacementProblem, ctx: SolveContext, options: dict[str, Any]) -> Plan:
    """Solve latency mode with CP-SAT (see the module docstring): a short driver of the phases of
    :class:`LatencyModel`."""
    m = LatencyModel(problem, ctx, options)
    try:
        m.lower_bound()
        m.run_heuristics()
        late = plan_if_no_time_to_build(m, problem, ctx, "latency")
        if late is None:
            m.upper_bound()
    finally:
        m.stop_shaving()
    m.raise_shaving_error()  # a failure of the bound's thread is a bug: not dropped with an early plan
    if late is not None:
        return late
    m.symmetry()
    m.add_variables()
    m.add_constraints()
    m.add_objective()
    m.add_hints()
    m.solve()
    m.polish()
    plan, source = m.final_plan()
    return _replace_stats(plan, m.stats(plan, source), ctx)


class LatencyModel:
    """The latency-mode CP-SAT model of the module docstring, built and solved in named phases that
    must run in this order: :meth:`lower_bound`, :meth:`run_heuristics` (hint and fallback; the
    local search stops at the bound),
    :meth:`upper_bound` (and the horizon), :meth:`symmetry` (interchangeable targets and pools),
    :meth:`add_variables`, :meth:`add_constraints`, :meth:`add_objective`, :meth:`add_hints`,
    :meth:`solve`, :meth:`final_plan` and :meth:`stats`. CP-SAT's search depends on the order in
    which variables and constraints are created, so each phase creates them in a fixed order.
    Times are in the integer units of ``ci`` (see :mod:`placer.solve.cpsat_util`)."""

    def __init__(self, problem: PlacementProblem, ctx: SolveContext, options: dict[str, Any]) -> None:
        p = self.p = problem
        self.ctx, self.options = ctx, options
        self.t0 = time.monotonic()
        self.n, self.t = p.n_ops, p.n_targets
        self.tw = float(options.get("transfer_weight", 0.0) or 0.0)
        self.r = choose_resolution(p, options.get("time_resolution_ms", "auto"))
        self.ci = Costs.rounded(p, self.r)
        self.fc = Costs.of(p)
        self.model = cp_model.CpModel()
        # the shaved bound's thread (:meth:`_start_shaving`): the thread while it runs, its value, its error
        self._shaving: threading.Thread | None = None
        self._shaved: list[float] = []
        self._shave_error: list[Exception] = []
        self._stop = threading.Event()

    def objective_ms(self, plan: Plan) -> float:
        """The float objective of ``plan``: makespan + ``transfer_weight`` * transfer ms."""
        return plan.makespan_ms + self.tw * sum(x.ms + x.entry_ms for x in plan.transfers)

    # ---------------------------------------------------------------- heuristics: hint and fallback
    def run_heuristics(self) -> None:
        """The heuristic candidates: the best by the float objective is the fallback
        (``best_plan``), the best by the rounded one the hint (``hint`` = assign, starts, ends)."""
        p, ctx, options, t0, tw, ci, fc = self.p, self.ctx, self.options, self.t0, self.tw, self.ci, self.fc
        share = float(options.get("heuristic_fraction", 0.3))
        cands = []
        if options.get("hint", True):
            # the effort (search_dtime) is a share of the time limit, the same on any machine; the
            # wall-clock backstops count from now (the lower bound ran first), within the deadline
            span = share * max(0.0, ctx.deadline - t0)
            start = time.monotonic()
            search = (DynamicListSearch(p, fc, deadline=min(start + 0.5 * span, ctx.deadline))
                      if options.get("dynamic", True) and self.t > 1 else None)
            cands = latency_candidates(p, min(start + span, ctx.deadline), search=search,
                                       search_dtime=0.8 * span,
                                       tails=None if self.ht_f is None else self.ht_f[1])
            if cands:  # the best candidate by its float makespan: the search's start, the bound's upper end
                spans = [float(latency_schedule(p, a, o, fc)[1].max()) for _, a, o in cands]
                best = int(np.argmin(spans))
                self._start_shaving(spans[best])
                cands += self._local_search(cands[best])
        self.best_plan: Plan | None = None
        self.best_name = ""
        best_val = math.inf
        self.hint: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        hint_obj = math.inf
        for name, assign, order in cands:
            _, f_end = latency_schedule(p, assign, order, fc)
            val = float(f_end.max()) + tw * _transfer_total(p, assign, fc)
            if val < best_val - 1e-12:
                best_val, self.best_name = val, name
                self.best_plan = make_latency_plan(p, assign, ctx.name, order=order,
                                                   options=ctx.plan_options())
            s_i, e_i = latency_schedule(p, assign, order, ci)
            obj_i = float(e_i.max()) + tw * _transfer_total(p, assign, ci)
            if obj_i < hint_obj:
                hint_obj, self.hint = obj_i, (assign, s_i, e_i)

    def _shave_args(self, upper: float) -> dict[str, Any] | None:
        """Arguments of :func:`~placer.solve.bounds_comm.shaved_bound` below ``upper``, or None when the
        shaved bound is off (option ``shave_fraction``) or cannot rise."""
        if not self.comm or float(self.options.get("shave_fraction", 0.0) or 0.0) <= 0 or upper <= self.lb_ms:
            return None
        return {"lower": self.lb_ms, "upper": upper, "steps": 6,
                "probes": int(self.options.get("probe_pairs", 0) or 0),
                "probe_steps": int(self.options.get("probe_steps", 3) or 0)}

    def _start_shaving(self, upper: float) -> None:
        """The shaved bound below the best candidate, in a thread while the critical-path search runs:
        the search keeps one core busy in its own loop, the bound's compiled loop releases the GIL and
        takes the other. :meth:`upper_bound` waits for it (at most its share of the time left), then
        stops it; :meth:`stop_shaving` stops it on every way out."""
        if float(self.options.get("local_search", 0.0) or 0.0) <= 0:
            return
        args = self._shave_args(upper)
        if args is None:
            return

        def run() -> None:
            try:
                self._shaved.append(shaved_bound(self.p, self.fc, **args, deadline=self.ctx.deadline,
                                                 stop=self._stop))
            except Exception as exc:  # noqa: BLE001 - re-raised in the solver's thread
                self._shave_error.append(exc)

        self._shaving = threading.Thread(target=run, name="placer-shaved-bound", daemon=True)
        self._shaving.start()

    def stop_shaving(self) -> None:
        """Stop the shaved bound's thread, if one runs, and wait for it (one compiled call)."""
        if self._shaving is not None:
            self._stop.set()
            self._shaving.join()
            self._shaving = None

    def raise_shaving_error(self) -> None:
        """Raise what the shaved bound's thread raised, if it did (once the thread is stopped)."""
        if self._shave_error:
            raise self._shave_error[0]

    def _local_search(self, best: tuple[str, np.ndarray, Any]) -> list[tuple[str, np.ndarray, Any]]:
        """The best candidate (float makespan) improved by :func:`~placer.solve.latency_search.polish`
        (options ``local_search``, ``local_search_rate``), as one more candidate."""
        # deterministic budget: the share of what the heuristics' span leaves of the time limit
        # (the heuristics usually end earlier: the share of the time actually left is the backstop)
        share = float(self.options.get("local_search", 0.0) or 0.0)
        heuristic = float(self.options.get("heuristic_fraction", 0.3))
        budget = share * (1.0 - heuristic) * max(0.0, self.ctx.deadline - self.t0)
        # a plan that meets the lower bound is optimal: the search stops there
        out = polish(self.p, *best, self.options, self.ctx.deadline, self.ctx.seed, budget_s=budget,
                     floor=self.lb_ms)
        return [out] if out[0] != best[0] else []

    # ---------------------------------------------------------------- bounds
    def lower_bound(self) -> None:
        """Heads and tails, ``lb`` (rounded units) and ``lb_ms`` (valid for the float objective)."""
        p, ctx, ci, t0 = self.p, self.ctx, self.ci, self.t0
        self.comm = bool(self.options.get("comm_bound", True)) and self.t > 1
        # float ms: HEFT's lookahead (run_heuristics) and the float bound
        self.ht_f = comm_heads_tails(p, self.fc) if self.comm else None
        head, tail = heads_tails(p, ci)
        self.minc = np.where(p.allowed, ci.cost, np.inf).min(axis=1)
        h_dt = q_dt = None  # per-target heads / tails with communication (rounded units)
        if self.comm:
            h_dt, q_dt = comm_heads_tails(p, ci)
            head = np.maximum(head, h_dt.min(axis=1))
        # s[v] + c[v,d] + Q[v,d] <= makespan on the target d of v: s[v] <= UB - s_tail[v]
        s_tail = tail
        if h_dt is not None:
            s_tail = np.maximum(tail, (q_dt + np.where(p.allowed, ci.cost, np.inf)).min(axis=1))
        self.head, self.tail, self.s_tail, self.h_dt, self.q_dt = head, tail, s_tail, h_dt, q_dt
        # the load bound's iterations stop at 60 % of the limit (many targets: milliseconds each)
        lb = max(float((head + s_tail).max()), math.ceil(load_bound(p, ci, deadline=t0 + 0.6 * ctx.time_limit)
                                                         - 1e-6))
        if self.options.get("window_bound", True) and self.t > 1:
            window = window_load_bound(p, ci, lb, deadline=time.monotonic() + 0.1 * ctx.remaining(),
                                       heads_tails=None if h_dt is None else (h_dt, q_dt))
            lb = max(lb, math.ceil(window - 1e-6))
        self.lb = round(lb)
        # lb (rounded units) bounds the rounded makespan; for the floats: lb * r - slack, or the
        # critical path on the float numbers (cheap)
        self.chain_slack = rounding_slack(p, ci, "latency")
        self.lb_ms = max(self.lb * self.r - self.chain_slack, critical_path_bound(p, self.fc),
                         path_bound(p, self.fc, *self.ht_f) if self.ht_f else 0.0)

    def _serial_horizon(self) -> int:
        """Every op on its slowest allowed target and every tensor copied at its slowest, in turn."""
        p, ci = self.p, self.ci
        return int(np.where(p.allowed, ci.cost, 0).max(axis=1).sum()
                   + sum(float(ci.link[k].max()) + float(ci.entry.max()) for k in range(len(p.tensors))))

    def upper_bound(self) -> None:
        """``ub`` (the hint's makespan), the optional shaved lower bound, and the ``horizon`` of the
        time variables."""
        if self.hint is not None:
            ub = round(float(self.hint[2].max()))
        else:
            ub = self._serial_horizon()
        frac = float(self.options.get("shave_fraction", 0.0) or 0.0)
        # bisection over "no schedule below L"
        # on the float costs (the rounded ones would lose the rounding slack, often more than
        # shaving gains): a bound on every plan's float makespan, hence on the rounded model's
        # optimum once the slack is taken off
        best = self.best_plan
        shaved = None
        if self._shaving is not None:  # started beside the search: its share, then stopped
            self._shaving.join(timeout=frac * self.ctx.remaining())
            self.stop_shaving()
            self.raise_shaving_error()
            shaved = self._shaved[0] if self._shaved else None
        elif best is not None and (args := self._shave_args(best.makespan_ms)) is not None:
            shaved = shaved_bound(self.p, self.fc, **args, deadline=time.monotonic() + frac * self.ctx.remaining())
        if shaved is not None:
            self.lb_ms = max(self.lb_ms, shaved)
            self.lb = max(self.lb, math.ceil((shaved - self.chain_slack) / self.r - 1e-6))
        self.ub = ub = max(ub, self.lb)
        horizon = ub if self.tw == 0 else self._serial_horizon()
        self.horizon = max(horizon, ub)

    def symmetry(self) -> None:
        """Classes of interchangeable targets (symmetry breaking) and pools (one resource each);
        ``rep[d]`` is the pool representative of ``d``, ``capacity[d]`` its pool size."""
        p, options = self.p, self.options
        classes = interchangeable_classes(p) if options.get("symmetry_breaking", True) else []
        self.pools = _pools(p, classes) if options.get("pool_identical", True) else []
        self.classes = [cl for cl in classes if cl not in self.pools]
        self.rep = list(range(self.t))  # representative target of each target's pool
        self.capacity = [1] * self.t
        for cl in self.pools:
            for d in cl:
                self.rep[d] = cl[0]
            self.capacity[cl[0]] = len(cl)

    # ---------------------------------------------------------------- variables
    def add_variables(self) -> None:
        """``x`` (one literal dict per colocation unit, shared by its members), ``s``, ``e``, ``dur``
        and ``makespan``."""
        p, model, ci, n, horizon = self.p, self.model, self.ci, self.n, self.horizon
        head, tail, s_tail, minc = self.head, self.tail, self.s_tail, self.minc
        self.unit_lits: list[dict[int, Any]] = []
        x: list[dict[int, Any]] = [{} for _ in range(n)]
        for unit in p.units:
            lits = {}
            for d in np.flatnonzero(p.allowed[unit[0]]):
                if self.rep[d] == d:
                    lits[int(d)] = model.new_bool_var(f"x{unit[0]}_{d}")
            self.unit_lits.append(lits)
            for v in unit:
                x[v] = lits
        self.x = x
        self.s = [model.new_int_var(int(head[v]), max(int(head[v]), int(horizon - s_tail[v])), f"s{v}")
                  for v in range(n)]
        self.e, self.dur = [], []
        for v in range(n):
            lo = int(head[v] + minc[v])
            e_v = model.new_int_var(lo, max(lo, int(horizon - tail[v] + minc[v])), f"e{v}")
            cs_v = [to_int(ci.cost[v, d]) for d in x[v]]
            d_v = model.new_int_var(min(cs_v), max(cs_v), f"dur{v}")
            model.add(d_v == sum(c_ * lit for c_, lit in zip(cs_v, x[v].values())))
            model.add(e_v == self.s[v] + d_v)
            self.e.append(e_v)
            self.dur.append(d_v)
        self.makespan = model.new_int_var(self.lb, horizon, "makespan")

    # ---------------------------------------------------------------- constraints
    def add_constraints(self) -> None:
        """Every constraint of the module docstring, in a fixed order."""
        for lits in self.unit_lits:
            self.model.add_exactly_one(lits.values())
        self._add_resources()
        self._add_precedences()
        add_memory_caps(self.model, self.p, self.unit_lits)
        for v in range(self.n):
            if not self.p.succs[v]:
                self.model.add(self.makespan >= self.e[v])
        if self.h_dt is not None:
            self._add_target_heads_tails()
        if self.options.get("redundant", True):
            self._add_redundant()
        self.y = add_first_use_order(self.model, self.p, self.unit_lits, self.classes) if self.classes else {}

    def _add_resources(self) -> None:
        """Intervals, and one NoOverlap (or a Cumulative for a pool) per resource."""
        p, model, x, s = self.p, self.model, self.x, self.s
        per_target: list[list[Any]] = [[] for _ in range(self.t)]
        for v in range(self.n):
            for d, lit in x[v].items():
                size = to_int(self.ci.cost[v, d])
                if len(x[v]) == 1:
                    model.add(lit == 1)
                if size == 0:  # instantaneous: occupies no time on its target (see placer.plan)
                    continue
                if len(x[v]) == 1:
                    iv = model.new_fixed_size_interval_var(s[v], size, f"I{v}_{d}")
                else:
                    iv = model.new_optional_fixed_size_interval_var(s[v], size, lit, f"I{v}_{d}")
                per_target[d].append(iv)
        capacity = self.capacity
        for users in p.resource_users:  # one per target unless targets share cores
            if len(users) > 1:  # a shared core (pools never share one): ops of all its targets in turn
                ivs = [iv for d in users for iv in per_target[d]]
                if len(ivs) > 1:
                    model.add_no_overlap(ivs)
                continue
            d = users[0]
            if capacity[d] > 1 and len(per_target[d]) > capacity[d]:
                model.add_cumulative(per_target[d], [1] * len(per_target[d]), capacity[d])
            elif capacity[d] == 1 and len(per_target[d]) > 1:
                model.add_no_overlap(per_target[d])

    def _add_precedences(self) -> None:
        """Every edge: ``s[v] >= e[u]``, plus the copy delays between distinct targets."""
        model, x, s, e = self.model, self.x, self.s, self.e
        # edge delays: max over the edge's tensors of link + entry, per target pair (a != b used below)
        delays = edge_delays(self.p, self.ci)
        for (u, v), dm in sorted(delays.items()):
            model.add(s[v] >= e[u])
            if x[u] is x[v]:  # same colocation group: never a transfer
                continue
            au, av = list(x[u]), list(x[v])
            for b in av:
                ds = {a: to_int(dm[a, b]) for a in au if a != b}
                if not ds:
                    continue
                m = min(ds.values())
                if m > 0:
                    enf = [x[v][b]] + ([x[u][b].Not()] if b in x[u] else [])
                    model.add(s[v] >= e[u] + m).only_enforce_if(enf)
                for a, dl in ds.items():
                    if dl > m:
                        model.add(s[v] >= e[u] + dl).only_enforce_if([x[u][a], x[v][b]])

    def _add_target_heads_tails(self) -> None:
        """Per target: ``x[v,d] => s[v] >= H[v,d]`` and ``e[v] + Q[v,d] <= makespan``; a pair that
        cannot beat the horizon is out."""
        model, ci, h_dt, q_dt = self.model, self.ci, self.h_dt, self.q_dt
        for v in range(self.n):
            if len(self.x[v]) < 2:
                continue
            for d, lit in self.x[v].items():
                if h_dt[v, d] + ci.cost[v, d] + q_dt[v, d] > self.horizon:
                    model.add(lit == 0)
                    continue
                if h_dt[v, d] > self.head[v]:
                    model.add(self.s[v] >= int(h_dt[v, d])).only_enforce_if(lit)
                if q_dt[v, d] + ci.cost[v, d] > self.s_tail[v]:
                    model.add(self.makespan >= self.e[v] + int(q_dt[v, d])).only_enforce_if(lit)

    def _add_redundant(self) -> None:
        """Load per resource below capacity * makespan; one Cumulative of all ops (option
        ``cumulative_max_ops``)."""
        p, model, x, n = self.p, self.model, self.x, self.n
        for users in p.resource_users:
            terms = [(to_int(self.ci.cost[v, d]), x[v][d]) for d in users for v in range(n) if d in x[v]]
            terms = [(c_, lit) for c_, lit in terms if c_ > 0]
            if terms:
                model.add(self.capacity[users[0]] * self.makespan >= sum(c_ * lit for c_, lit in terms))
        width = _max_parallel(p)
        if width > 1 and n <= int(self.options.get("cumulative_max_ops", 3000)):
            mains = [model.new_interval_var(self.s[v], self.dur[v], self.e[v], f"J{v}") for v in range(n)]
            model.add_cumulative(mains, [1] * n, width)

    # ---------------------------------------------------------------- objective
    def add_objective(self) -> None:
        """``minimize makespan``; with ``transfer_weight`` > 0 also the copy literals ``need`` and
        ``z``, and the objective scaled by 1000 to keep the weight integral."""
        p, model, x, tw = self.p, self.model, self.x, self.tw
        transfer_terms: list[tuple[int, Any]] = []
        self.need: dict[tuple[int, int], Any] = {}
        self.zvars: dict[tuple[int, int, int], Any] = {}
        if tw > 0:
            for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)):
                if u < 0 or not cs:
                    continue
                for b in range(self.t):
                    readers = [x[v][b] for v in cs if b in x[v] and x[v] is not x[u]]
                    if not readers:
                        continue
                    nk = model.new_bool_var(f"need{k}_{b}")
                    for lit in readers:
                        model.add_implication(lit, nk)
                    self.need[(k, b)] = nk
                    for a, xa in x[u].items():
                        if a == b:
                            continue
                        c_ = to_int(self.ci.link[k, a, b] + self.ci.entry[b])
                        if c_ <= 0:
                            continue
                        z = model.new_bool_var(f"z{k}_{a}_{b}")
                        model.add_bool_or([xa.Not(), nk.Not(), z])
                        self.zvars[(k, a, b)] = z
                        transfer_terms.append((c_, z))
            self.scale = 1000
            self.wt = round(tw * self.scale)
            model.minimize(self.scale * self.makespan + self.wt * sum(c_ * z for c_, z in transfer_terms))
        else:
            self.scale, self.wt = 1, 0
            model.minimize(self.makespan)

    # ---------------------------------------------------------------- hint
    def add_hints(self) -> None:
        """Hint every variable with the heuristic hint, re-timed on the rounded costs after the
        symmetry relabelling and pooling."""
        if self.hint is None:
            return
        p, model, hint, classes = self.p, self.model, self.hint, self.classes
        h_assign = canonical_assign(p, hint[0], classes) if classes else hint[0]
        hs, he = latency_schedule(p, h_assign, order_by_start(p, hint[1]), self.ci)
        h_assign = np.array([self.rep[d] for d in h_assign])
        for v in range(self.n):
            model.add_hint(self.s[v], round(hs[v]))
            model.add_hint(self.e[v], round(he[v]))
            model.add_hint(self.dur[v], round(he[v] - hs[v]))
        for lits, unit in zip(self.unit_lits, p.units):
            for d, lit in lits.items():
                model.add_hint(lit, int(h_assign[unit[0]] == d))
        model.add_hint(self.makespan, round(float(he.max())))
        for key, val in first_use_values(p, h_assign, classes).items():
            if key in self.y:
                model.add_hint(self.y[key], val)
        if self.tw > 0:
            for (k, b), nk in self.need.items():
                model.add_hint(nk, int(any(h_assign[v] == b for v in p.tensor_consumers[k])))
            for (k, a, b), z in self.zvars.items():
                u = p.tensor_producer[k]
                read = any(h_assign[v] == b for v in p.tensor_consumers[k])
                model.add_hint(z, int(h_assign[u] == a and read))

    # ---------------------------------------------------------------- solve
    def solve(self) -> None:
        """Run CP-SAT on the time left; ``plan`` is its solution re-timed in floats (pools
        coloured), or None. Two phases (option ``lns_share``): the full portfolio, then, unless it
        proved the optimum, CP-SAT's LNS workers alone from its best solution (:meth:`_lns_phase`)."""
        p, ctx, model, n = self.p, self.ctx, self.model, self.n
        margin = 0.1 + 5e-5 * n  # model hand-over, CP-SAT overrunning on a loaded machine, re-timing
        size = int(p.allowed.sum())
        share = min(max(lns_share(self.options.get("lns_share", 0.0), n), 0.0), 0.95)
        span_s = ctx.remaining() - margin
        full_s = (1.0 - share) * span_s
        #: the LNS phase's span, set before the full phase runs (deterministic search: how long that
        #: phase took on a loaded host must not decide whether the LNS phase runs)
        self._lns_span_s = share * span_s
        solver = self.solver = make_solver(self.options, full_s, ctx.seed, size)
        status = self.status = solver.solve(model)
        solved = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        self.bound_units = solver.best_objective_bound if solved else None
        self.lns: dict[str, Any] = {}  # the LNS phase's wall time, deterministic time, whether it improved
        self.name = status_name(status)
        if status == cp_model.INFEASIBLE:
            # cannot happen with a correct model; keep the heuristic rather than fail
            if self.best_plan is not None:
                self.name = "FEASIBLE"
            else:
                raise ProblemError("cpsat: the problem is infeasible (memory caps, colocation, pins)")
        if status == cp_model.MODEL_INVALID:  # pragma: no cover - a bug, not a user error
            raise RuntimeError(f"cpsat: invalid model: {model.validate()}")
        if share > 0 and status != cp_model.OPTIMAL:
            solver = self._lns_phase(solver, status, margin, size)
        self.plan: Plan | None = None
        if self.status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            assign = read_assign(p, self.unit_lits, solver.boolean_value)
            starts = np.array([solver.value(self.s[v]) for v in range(n)], dtype=float)
            ends = np.array([solver.value(self.e[v]) for v in range(n)], dtype=float)
            for cl in self.pools:
                _color_pool(assign, starts, ends, cl)
            self.plan = make_latency_plan(p, assign, ctx.name, order=order_by_start(p, starts),
                                          options=ctx.plan_options())

    def _lns_phase(self, full: cp_model.CpSolver, status: int, margin: float, size: int) -> cp_model.CpSolver:
        """CP-SAT's large-neighbourhood workers alone (``use_lns_only``), hinted with the full
        portfolio's best solution (else the heuristic hint), for the time left, on
        ``lns_dtime_per_s`` deterministic units per second of it; returns the solver whose
        solution is the better one (``status`` and ``bound_units`` updated). On random layered
        graphs x 8 targets the full portfolio spends its deterministic time without improving a
        500-op hint; LNS from the same hint does (see the option's note in :mod:`placer.solve.cpsat`)."""
        ctx, model = self.ctx, self.model
        if self.options.get("deterministic", True):  # deterministic time: a span fixed beforehand
            left = self._lns_span_s - self._polish_reserve()
        else:
            left = ctx.remaining() - margin - self._polish_reserve()
        if left < 0.2 or (status not in (cp_model.FEASIBLE, cp_model.UNKNOWN)):
            return full
        if status == cp_model.FEASIBLE:  # the full phase's best solution, complete, as the hint
            model.clear_hints()
            hint = model.proto.solution_hint
            hint.vars.extend(range(len(model.proto.variables)))
            hint.values.extend(full.response_proto.solution)
        elif self.hint is None:
            return full
        params = dict(self.options.get("cpsat_params") or {})
        params["use_lns_only"] = True
        opts = {**self.options, "cpsat_params": params,
                "dtime_per_s": float(self.options.get("lns_dtime_per_s", 0.1))}
        lns = make_solver(opts, left, ctx.seed, size)
        got = lns.solve(model)
        self.lns = {"wall_s": lns.wall_time, "dtime": lns.deterministic_time, "improved": False}
        if got not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return full
        if status == cp_model.FEASIBLE and lns.objective_value >= full.objective_value:
            self.bound_units = max(self.bound_units, lns.best_objective_bound)
            return full  # nothing better (a complete hint is its first solution)
        self.lns["improved"] = True
        self.status = got
        self.name = status_name(got)
        self.bound_units = max(b for b in (self.bound_units, lns.best_objective_bound) if b is not None)
        return lns

    def _polish_enabled(self) -> bool:
        """Whether :meth:`polish` may run, whatever CP-SAT finds: makespan only, two targets or more,
        the critical-path search on."""
        return self.tw <= 0 and self.t >= 2 and float(self.options.get("local_search", 0.0) or 0.0) > 0

    def _polish_reserve(self) -> float:
        """Seconds the LNS phase leaves to :meth:`polish` (its budget, :data:`POLISH_SHARE` of the
        time limit): at 500 x 8 the critical-path search after CP-SAT improved on CP-SAT's plan where
        an LNS phase to the end of the limit had not (seed 2: 9.592 against 9.675 ms)."""
        return POLISH_SHARE * self.ctx.time_limit if self._polish_enabled() else 0.0

    def polish(self) -> None:
        """When CP-SAT stopped with time left (on its deterministic time): the better of its plan
        and the heuristics' improved by :func:`~placer.solve.latency_search.polish` in that time,
        with the deterministic budget of a tenth of the time limit (makespan only)."""
        self.polished = False
        p, plan, best = self.p, self.plan, self.best_plan
        if not self._polish_enabled() or self.name == "OPTIMAL" or (plan is None and best is None):
            return
        left = self.ctx.remaining() - (0.1 + 1e-4 * self.n)  # building and returning the plan
        if left < 0.2:
            return
        from_cpsat = best is None or (plan is not None and self.objective_ms(plan) < self.objective_ms(best) - 1e-9)
        base = plan if from_cpsat else best
        assign, order = plan_arrays(p, base)
        # deterministic budget: POLISH_SHARE of the time limit's worth, within the time left
        name, a, o = polish(p, "", assign, order, {**self.options, "local_search": 1.0},
                            time.monotonic() + left, self.ctx.seed,
                            budget_s=POLISH_SHARE * self.ctx.time_limit, floor=self.lb_ms)
        if not name:
            return
        new = make_latency_plan(p, a, self.ctx.name, order=o, options=self.ctx.plan_options())
        if from_cpsat:
            self.plan, self.polished = new, True
        else:
            self.best_plan, self.best_name = new, self.best_name + " + critical-path"

    def final_plan(self) -> tuple[Plan, str]:
        """The better (float objective) of CP-SAT's plan and the heuristic fallback, and its source;
        a heuristic win takes back an ``OPTIMAL`` status."""
        plan, best_plan = self.plan, self.best_plan
        if plan is None or (best_plan is not None
                            and self.objective_ms(best_plan) < self.objective_ms(plan) - 1e-9):
            if best_plan is None:
                raise ProblemError(f"cpsat: no solution within the time limit (status {self.name})")
            # the rounded optimum re-timed in floats lost to a heuristic: no proof
            if self.name == "OPTIMAL" or self.name == "UNKNOWN":
                self.name = "FEASIBLE"
            return best_plan, self.best_name
        return plan, "cpsat + critical-path" if getattr(self, "polished", False) else "cpsat"

    # ---------------------------------------------------------------- stats
    def stats(self, plan: Plan, source: str) -> SolverStats:
        """The returned plan's stats: the best bound valid for the float objective, and the status
        (``OPTIMAL`` only when that bound proves it)."""
        p, r = self.p, self.r
        bound_units = self.bound_units
        cp_bound = 0.0
        if bound_units is not None and math.isfinite(bound_units):
            cp_bound = _float_objective_bound(p, self.ci, bound_units / self.scale * r, self.tw,
                                              self.wt / self.scale)
        objective = self.objective_ms(plan)
        bound_ms, proven = reported_bound(objective, [self.lb_ms, cp_bound])
        name = self.name
        if name == "OPTIMAL" and not proven:
            name = "FEASIBLE"  # optimal for the rounded numbers only
        gap = 0.0 if objective <= 0 else max(0.0, (objective - bound_ms) / objective)
        best_plan = self.best_plan
        return SolverStats(status=name, objective=objective, best_bound=bound_ms, gap=gap,
                           wall_s=time.monotonic() - self.t0,
                           extra={"resolution_ms": r, "source": source, "hint": self.best_name,
                                  "hint_objective": self.objective_ms(best_plan) if best_plan else None,
                                  "cpsat_wall_s": self.solver.wall_time,
                                  "lns": self.lns, "lower_bound_ms": self.lb_ms,
                                  "rounding_slack_ms": self.chain_slack,
                                  "interchangeable_targets": [[p.targets[d] for d in cl]
                                                              for cl in self.classes],
                                  "pooled_targets": [[p.targets[d] for d in cl] for cl in self.pools]})


def _float_objective_bound(p: PlacementProblem, ci: Costs, beta_ms: float, tw: float,
                           model_tw: float) -> float:
    """A bound on ``makespan + tw * transfers`` (floats) from a bound ``beta_ms`` on the rounded
    model's ``makespan + model_tw * transfers`` (``model_tw``: ``tw`` as the model rounds it).

    For any plan, the rounded model objective is at most ``max(1, model_tw / tw)`` times the float
    one plus :func:`~placer.solve.cpsat_util.rounding_slack` (with ``copy_weight = model_tw``)."""
    slack = rounding_slack(p, ci, "latency", copy_weight=model_tw)
    stretch = 1.0 if tw <= 0 or model_tw <= tw else model_tw / tw
    return (beta_ms - slack) / stretch


def _max_parallel(p: PlacementProblem) -> int:
    """The most targets that can run ops at the same time: the number of targets, or with shared
    cores the largest set of pairwise non-conflicting targets (exhaustive for <= 12 targets)."""
    t = p.n_targets
    if not p.shares_resources or t > 12:
        return t
    conf_mask = [sum(1 << d2 for d2 in p.conflicts[d]) for d in range(t)]
    best = 1
    for mask in range(1, 1 << t):
        members = [d for d in range(t) if mask >> d & 1]
        if len(members) > best and all(conf_mask[d] & mask == 1 << d for d in members):
            best = len(members)
    return best


def _pools(p: PlacementProblem, classes: list[list[int]]) -> list[list[int]]:
    """Classes of interchangeable targets that can be modelled as one resource of capacity |class|:
    no shared cores, no memory caps, no partition overhead, free copies between members, no
    colocation groups."""
    if p.colocate:
        return []
    out = []
    for cl in classes:
        if any(len(p.conflicts[d]) > 1 for d in cl):
            continue
        if any(np.isfinite(p.memory_cap_bytes[d]) or p.partition_overhead_ms[d] != 0 for d in cl):
            continue
        if any(p.link_latency_ms[a, b] != 0 or p.link_ms_per_byte[a, b] != 0 for a in cl for b in cl if a != b):
            continue
        out.append(cl)
    return out


def _color_pool(assign: np.ndarray, start: np.ndarray, end: np.ndarray, pool: list[int]) -> None:
    """Give each op of a pooled resource a concrete member: greedy interval colouring by start time
    (at most |pool| positive-length ops overlap, so a member is always free)."""
    idx = [i for i in np.flatnonzero(assign == pool[0])]
    idx.sort(key=lambda i: (start[i], end[i], i))
    free = {d: -math.inf for d in pool}
    for i in idx:
        if end[i] <= start[i]:  # instantaneous: any member
            assign[i] = pool[0]
            continue
        d = next(d for d in pool if free[d] <= start[i])
        assign[i] = d
        free[d] = end[i]


def _replace_stats(plan: Plan, stats: SolverStats, ctx: SolveContext) -> Plan:
    import dataclasses

    return dataclasses.replace(plan, stats=stats, solver=ctx.name)
