"""Solving a coarsened problem: coarsen, solve, expand, re-evaluate on the fine problem, and keep the
best fine heuristic if it is better (:func:`solve_coarsened`, called by :func:`placer.solve.solve`).

For exact solvers the fine heuristics (HEFT, LP + list scheduling, ...) run first, within 30 % of the
time limit; the coarse problem gets the rest (minus a reserve for the expansion). In latency mode
(options ``dynamic``, ``window_bound``, ``lns`` of ``cpsat``) the fine heuristics include
:class:`~placer.solve.heuristics.DynamicListSearch`; the window LP bound follows (at most a tenth of
the time left); the critical-path search of :mod:`placer.solve.latency_search` improves the best
fine plan for the share ``local_search`` of the time left; the coarse solve is skipped when that
plan is within ``lns_skip_coarse_gap`` of the bound (by default always: with ``lns`` the coarse
solve's time goes to the window LNS) and otherwise gets half of the time left; the rest goes to
CP-SAT window LNS (:mod:`placer.solve.lns`) on the best plan so far (after up to half of it lets the
dynamic search finish two passes per portfolio member).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from placer.errors import ProblemError
from placer.plan import Plan, SolverStats
from placer.problem import PlacementProblem
from placer.solve.base import SolveContext, Solver
from placer.solve.bounds import latency_bound, pipeline_bound, target_heads_tails, window_load_bound
from placer.solve.bounds_comm import COMM_MAX_PAIRS, comm_heads_tails
from placer.solve.coarsen import coarsen_problem, expand_assignment, expand_order
from placer.solve.cpsat_latency import latency_candidates
from placer.solve.evaluate import (
    Costs,
    better,
    latency_schedule,
    make_latency_plan,
    make_pipeline_plan,
    pipeline_eval,
    plan_arrays,
)
from placer.solve.heuristics import DynamicListSearch
from placer.solve.ideals import ideals_bound, ideals_plan_stats, ideals_warm_start, proven_bound
from placer.solve.latency_search import CriticalPathSearch, polish
from placer.solve.lns import LatencyLNS
from placer.solve.pipeline_candidates import pipeline_candidates
from placer.solve.retime import SEARCH_RATE

__all__ = ["MIN_COARSE_S", "solve_coarsened"]

#: A coarse solve gets at least this many seconds, or is skipped when a fine plan exists.
MIN_COARSE_S = 0.3
#: the window LNS keeps the time of the lightened search (option ``lighten_share``) while at least
#: this share of its windows improved the plan: on 1,500-op training graphs (3 accelerators, 20 s;
#: 12-13 of 13-15 windows improve) a fixed 30 % for lightening lost (gap 27.45 -> 27.85 %, 24.92 ->
#: 25.50 %; repeated runs there move by 0.3-1.4 points), on random layered 2,000 x 8 (22 of 63, 12
#: of 58) it won (session 21)
LNS_PAYING = 0.5


def solve_coarsened(problem: PlacementProblem, impl: Solver, ctx: SolveContext, target: int) -> Plan:
    """Solve ``problem`` with ``impl`` through a coarsening to about ``target`` super-ops (see the
    module docstring); the plan is of ``problem``, its stats say where it came from."""
    s = _CoarsenedSolve(problem, impl, ctx)
    p = s.p
    if s.pipeline and impl.exact and s.opts_all.get("ideals", False):  # cpsat: the ideals DP, fine problem
        proven = s.ideals_first()
        if proven is not None:
            return proven
    if impl.exact:
        s.fine_heuristics()
    bound = None if s.pipeline else s.latency_lower_bound()
    if s.fine_latency and s.fine_best is not None:  # the critical-path search (option local_search)
        s.fine_best = polish(p, *s.fine_best, s.opts_all, ctx.deadline, ctx.seed)
        s.best_val = float(latency_schedule(p, s.fine_best[1], s.fine_best[2])[1].max())
    use_lns = s.fine_latency and s.opts_all.get("lns", False) and s.fine_best is not None
    gap_ok = float(s.opts_all.get("lns_skip_coarse_gap", 1.0))
    skip_coarse = use_lns and s.best_val - bound <= gap_ok * s.best_val
    sub_deadline = s.coarse_deadline(use_lns)
    if s.fine_best is not None and sub_deadline - time.monotonic() < MIN_COARSE_S:
        skip_coarse = True  # no time left for a coarse solve worth having: keep the fine plan, stay in time
    plan = None
    source = ""
    coarse_stats = None
    if not skip_coarse:
        coarse = s.coarse_solve(target, sub_deadline)
        if coarse is None:  # merging can make a feasible problem infeasible (e.g. a pipeline with pins)
            return impl.solve(p, ctx)
        plan, source, coarse_stats = coarse
    plan, source = s.best_of_fine(plan, source)
    plan, source = s.improve(plan, source, use_lns)
    return s.with_stats(plan, source, bound, coarse_stats)


class _CoarsenedSolve:
    """The state of one :func:`solve_coarsened` call: the best fine heuristic plan so far
    (``fine_best``: ``(name, assign, order)``, ``best_val``: its makespan in latency mode), the
    dynamic list search and the ideals DP result when they run, the latency load bound's info."""

    def __init__(self, problem: PlacementProblem, impl: Solver, ctx: SolveContext) -> None:
        self.t0 = time.monotonic()
        p = self.p = problem
        self.impl, self.ctx = impl, ctx
        self.pipeline = ctx.mode == "pipeline"
        self.opts = ctx.plan_options()
        self.k = ctx.max_stages(p)
        self.opts_all = {**impl.options, **ctx.options}
        self.fine_latency = impl.exact and not self.pipeline and p.n_targets > 1  # the latency extras apply
        # fine heuristics first (they are the fallback and the yardstick)
        self.fine_best: tuple[str, Any, Any] | None = None
        self.best_val = math.inf
        self.lb_info: dict[str, float] = {}
        self.search = (DynamicListSearch(p) if self.fine_latency and self.opts_all.get("dynamic", False)
                       else None)
        self.dp = None

    def ideals_first(self) -> Plan | None:
        """Pipeline mode, cpsat: the ideals DP on the fine problem; its plan if proven optimal."""
        p, ctx = self.p, self.ctx
        self.dp = dp = ideals_warm_start(p, ctx, self.opts_all, self.t0)
        if dp is not None:
            self.fine_best = ("ideals", dp.assign, dp.stage_targets)
            return ideals_plan_stats(p, dp, ctx, self.opts, self.t0)
        return None

    def fine_heuristics(self) -> None:
        """Exact solvers: the fine heuristics, within 30 % of the time limit; keeps the best."""
        p, ctx = self.p, self.ctx
        heuristic_deadline = self.t0 + 0.3 * ctx.time_limit
        if self.pipeline:
            best_key = None
            if self.fine_best is not None:
                ev = pipeline_eval(p, self.fine_best[1], self.fine_best[2])
                best_key = (ev.bottleneck, ev.latency)
            for name, a, o in pipeline_candidates(p, self.k, ctx.contiguous, heuristic_deadline):
                ev = pipeline_eval(p, a, o)
                if best_key is None or (ev.bottleneck, ev.latency) < best_key:
                    best_key, self.fine_best = (ev.bottleneck, ev.latency), (name, a, o)
        else:
            # the coarse solve tries HEFT looking ahead at the tails; here the fine search has the time
            span = heuristic_deadline - time.monotonic()
            for name, a, o in latency_candidates(p, heuristic_deadline, self.lb_info, self.search, 0.8 * span,
                                                 lookahead=False):
                val = float(latency_schedule(p, a, o)[1].max())
                if val < self.best_val:
                    self.best_val, self.fine_best = val, (name, a, o)

    def latency_lower_bound(self) -> float:
        """Latency mode: the lower bound on the makespan (the window LP's when asked for)."""
        p, ctx = self.p, self.ctx
        fcosts = Costs.of(p)
        ht = None  # per-target heads and tails with communication
        if p.n_targets > 1 and int(p.allowed.sum()) <= COMM_MAX_PAIRS:  # pure Python: ~25 us a pair
            ht = comm_heads_tails(p, fcosts)
        bound = latency_bound(p, fcosts, load=self.lb_info.get("load_bound"), heads_tails=ht, comm=False)
        if self.fine_latency and self.opts_all.get("window_bound", False):
            bound = window_load_bound(p, fcosts, bound, deadline=time.monotonic() + 0.1 * ctx.remaining(),
                                      heads_tails=ht if ht is not None else target_heads_tails(p, fcosts))
        return bound

    def coarse_deadline(self, use_lns: bool) -> float:
        """When the coarse solve must end: a reserve is kept for expansion and bounds (linear-ish in
        the number of ops); with LNS it gets half of what is left."""
        p, ctx = self.p, self.ctx
        reserve = min(0.25 * ctx.time_limit, 0.1 + 3e-4 * p.n_ops * max(1, p.n_targets // 2))
        sub_deadline = ctx.deadline - reserve
        if use_lns:  # half of what is left, the LNS gets the rest
            now = time.monotonic()
            sub_deadline = now + 0.5 * max(0.0, sub_deadline - now)
        return sub_deadline

    def coarse_solve(self, target: int, sub_deadline: float) -> tuple[Plan, str, SolverStats] | None:
        """Coarsen, solve until ``sub_deadline``, expand: ``(fine plan, source, coarse stats)``, or
        None if the coarse problem has no solution."""
        p, ctx, impl = self.p, self.ctx, self.impl
        coarse, members = coarsen_problem(p, target, contiguous=self.pipeline and ctx.contiguous)
        info = {"n_ops": p.n_ops, "n_coarse_ops": coarse.n_ops,
                "groups": {p.ops[m[0]]: [p.ops[i] for i in m] for m in members if len(m) > 1}}
        sub = dataclasses.replace(ctx, deadline=sub_deadline)
        try:
            cplan = impl.solve(coarse, sub)
        except ProblemError:
            return None
        assign = expand_assignment(p, coarse, members, cplan.assignment)
        if self.pipeline:
            order = [p.target_index[d] for d in cplan.stage_targets]
            plan = make_pipeline_plan(p, assign, ctx.name, order=order, options=self.opts, coarsening=info)
        else:
            order = expand_order(p, coarse, members, cplan.start_ms)
            plan = make_latency_plan(p, assign, ctx.name, order=order, options=self.opts, coarsening=info)
        return plan, "coarse " + str(cplan.stats.extra.get("source", impl.name)), cplan.stats

    def best_of_fine(self, plan: Plan | None, source: str) -> tuple[Plan, str]:
        """``plan`` or the best fine heuristic plan, whichever is better."""
        p, ctx = self.p, self.ctx
        if self.fine_best is not None:
            name, a, o = self.fine_best
            fb = (make_pipeline_plan(p, a, ctx.name, order=o, options=self.opts) if self.pipeline
                  else make_latency_plan(p, a, ctx.name, order=o, options=self.opts))
            if plan is None or better(plan, fb) is fb:
                plan, source = fb, f"fine heuristic {name}"
        assert plan is not None
        return plan, source

    def improve(self, plan: Plan, source: str, use_lns: bool) -> tuple[Plan, str]:
        """Latency mode, with what time is left: the dynamic search's passes, then window LNS, and
        once the LNS stops paying, the lightened critical-path search (:meth:`lightened_search`)."""
        p, ctx, opts, search = self.p, self.ctx, self.opts, self.search
        margin = 0.1 + 1e-4 * p.n_ops  # building, comparing and returning the plan
        if use_lns and search is not None and search.passes < 2 * len(search.PORTFOLIO):
            # big problems: let every member of the portfolio have two passes first (half the time left)
            now = time.monotonic()
            best = search.run(now + 0.5 * max(0.0, ctx.deadline - margin - now),
                              max_passes=2 * len(search.PORTFOLIO))
            if best is not None and best[0] < plan.makespan_ms - 1e-9:
                plan = make_latency_plan(p, best[1], ctx.name, order=best[2], options=opts)
                source = "fine heuristic dynamic"
        if use_lns:
            lns = LatencyLNS(p, *plan_arrays(p, plan), self.opts_all, ctx.seed)
            # (makespan only: a plan weighing transfers is not the critical-path search's, as in polish)
            weighs = float(self.opts_all.get("transfer_weight", 0.0) or 0.0) > 0
            share = 0.0 if weighs else float(self.opts_all.get("lighten_share", 0.0) or 0.0)
            left = max(0.0, ctx.deadline - margin - time.monotonic())
            # the lightened search gets the end of the LNS's time once the LNS pays less (LNS_PAYING)
            lns.run(ctx.deadline - margin, window_ops=max(30, 280 // p.n_targets),
                    stop_at=ctx.deadline - margin - share * left if share > 0 else None, paying=LNS_PAYING)
            if lns.improved:
                coarsening = plan.coarsening if source.startswith("coarse") else None
                plan = make_latency_plan(p, lns.assign, ctx.name, order=lns.order, options=opts,
                                         coarsening=coarsening)
                source += f" + lns ({lns.improved}/{lns.steps} windows)"
            rest = ctx.deadline - margin - time.monotonic()
            if share > 0 and rest > max(0.5, 0.5 * share * left):  # the LNS stopped paying, not the clock
                plan, source = self.lightened_search(plan, source, rest, margin)
        elif search is not None:  # no LNS: the fine search goes on with what is left
            best = search.run(ctx.deadline - margin, 0.8 * ctx.time_limit)
            if best is not None and best[0] < plan.makespan_ms - 1e-9:
                plan = make_latency_plan(p, best[1], ctx.name, order=best[2], options=opts)
                source = "fine heuristic dynamic"
        return plan, source

    def lightened_search(self, plan: Plan, source: str, secs: float, margin: float) -> tuple[Plan, str]:
        """The window LNS's plan, its off-chain ops moved to cheaper targets where the makespan allows
        (:meth:`~placer.solve.latency_search.CriticalPathSearch.lighten`, at most half the budget),
        then searched again: ``local_search_rate`` ops re-timed per second of ``secs`` in all (the
        deadline a backstop)."""
        p, ctx = self.p, self.ctx
        end = ctx.deadline - 2 * margin  # (setting the search up and re-checking its plan take time)
        search = CriticalPathSearch(p, *plan_arrays(p, plan), seed=ctx.seed)
        budget, e0 = float(self.opts_all.get("local_search_rate", SEARCH_RATE)) * secs, search.evals
        search.lighten(e0 + 0.5 * budget, end)  # at most half the budget
        mk, a2, o2 = search.run(max_evals=e0 + budget, deadline=end)
        if mk < plan.makespan_ms - 1e-9 * max(1.0, plan.makespan_ms):
            plan = make_latency_plan(p, a2, ctx.name, order=o2, options=self.opts)
            source += " + lightened critical-path"
        return plan, source

    def with_stats(self, plan: Plan, source: str, bound: float | None,
                   coarse_stats: SolverStats | None) -> Plan:
        """``plan`` with its bound, gap, status and where it came from."""
        p = self.p
        if self.pipeline:
            bound = pipeline_bound(p, num_stages=self.k)
            if self.dp is not None:  # the DP optimum: a bound with communication
                bound = proven_bound(plan.bottleneck_ms, [bound, ideals_bound(self.dp)])
        objective = plan.bottleneck_ms if self.pipeline else plan.makespan_ms
        gap = 0.0 if objective <= 0 else max(0.0, (objective - bound) / objective)
        heuristic = coarse_stats is not None and coarse_stats.status == "HEURISTIC"
        status = "HEURISTIC" if heuristic else ("OPTIMAL" if gap <= 1e-9 else "FEASIBLE")
        extra: dict[str, Any] = {"source": source}
        if coarse_stats is None:
            extra["coarse_status"] = "SKIPPED"
        else:
            extra.update({"coarse_status": coarse_stats.status, "coarse_objective": coarse_stats.objective,
                          "coarse_best_bound": coarse_stats.best_bound, "coarse_gap": coarse_stats.gap})
        stats = SolverStats(status=status, objective=objective, best_bound=bound, gap=gap,
                            wall_s=time.monotonic() - self.t0, extra=extra)
        return dataclasses.replace(plan, stats=stats)
