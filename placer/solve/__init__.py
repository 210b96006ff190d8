"""Placement solvers behind one interface: ``solve(problem, mode, solver, ...) -> Plan``.

Registered solvers (``available_solvers()``):

=================== ============================================================================
``cpsat``           exact CP-SAT models, both modes (hinted by the best heuristic, never worse)
``heft``            HEFT with insertion (latency heuristic; repaired into a pipeline if asked)
``greedy``          offload everything the preferred target supports (BYOC / EP partitioning)
``single:<target>`` everything on one target, unsupported ops on the next target in order
``dp``              exact DP over contiguous pipeline splits (pipeline mode)
``ideals``          exact DP over the ideals (downsets) of the graph: every monotone pipeline
``bruteforce``      exact enumeration for tiny problems (test reference)
=================== ============================================================================

New solvers subclass :class:`Solver` and register with :func:`register_solver`.

Examples
--------
>>> import numpy as np
>>> from placer.problem import PlacementProblem, Tensor
>>> from placer.solve import solve
>>> p = PlacementProblem(ops=["a", "b", "c"], targets=["cpu", "gpu"],
...                      cost_ms=np.array([[1.0, 2.0], [4.0, 1.0], [1.0, 3.0]]),
...                      tensors=[Tensor("t0", "a", ("b", "c")), Tensor("t1", "b", ("c",))],
...                      link_latency_ms=0.5)
>>> plan = solve(p, "latency", "cpsat", time_limit=5)
>>> plan.makespan_ms, plan.stats.status
(4.0, 'OPTIMAL')
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Mapping, Sequence

import numpy as np

from placer.errors import ProblemError, TimeLimitError
from placer.plan import Plan, SolverStats
from placer.problem import PlacementProblem, resolve_target_name
from placer.solve import baselines as _baselines  # noqa: F401  (registers single, greedy, heft)
from placer.solve import bruteforce as _bruteforce  # noqa: F401
from placer.solve import cpsat as _cpsat  # noqa: F401
from placer.solve import dp as _dp  # noqa: F401
from placer.solve import ideals as _ideals  # noqa: F401
from placer.solve.base import MODES, SolveContext, Solver, available_solvers, get_solver, register_solver
from placer.solve.bounds import latency_bound, pipeline_bound, target_heads_tails, window_load_bound
from placer.solve.bounds_comm import COMM_MAX_PAIRS, comm_heads_tails
from placer.solve.coarsen import coarsen_problem, expand_assignment, expand_order
from placer.solve.cpsat_latency import latency_candidates
from placer.solve.cpsat_pipeline import pipeline_candidates
from placer.solve.evaluate import (
    Costs,
    assignment_indices,
    better,
    latency_schedule,
    make_latency_plan,
    make_pipeline_plan,
    pipeline_eval,
)
from placer.solve.heuristics import DynamicListSearch
from placer.solve.ideals import ideals_bound, ideals_plan_stats, ideals_warm_start, proven_bound
from placer.solve.lns import LatencyLNS

__all__ = [
    "AUTO_COARSEN_OPS",
    "COARSE_OPS",
    "SolveContext",
    "Solver",
    "TimeLimitError",
    "available_solvers",
    "check_request",
    "register_solver",
    "solve",
]

#: ``coarsen="auto"`` coarsens problems with more ops than this (for solvers that allow it).
AUTO_COARSEN_OPS = 1000
#: Longest solver time limit accepted, seconds (a week: beyond it a deadline is a mistake, and
#: 1e308 overflows the solvers' own clocks).
MAX_TIME_LIMIT_S = 7 * 24 * 3600.0
#: Target number of super-ops when coarsening without an explicit size.
COARSE_OPS = 400
#: A coarse solve gets at least this many seconds, or is skipped when a fine plan exists.
MIN_COARSE_S = 0.3


def check_request(mode: str, solver: str, time_limit: float, targets: Sequence[str] | None = None,
                  options: Mapping[str, Any] | None = None):
    """Check a solve request before any costly work (profiling): the mode, the solver name and its
    options, the time limit, and a ``single:<target>`` argument against ``targets`` when known.
    Returns the solver instance; ProblemError names what is wrong."""
    if mode not in MODES:
        raise ProblemError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    impl = get_solver(solver)
    if mode not in impl.modes:
        raise ProblemError(f"solver {solver!r} does not handle mode {mode!r} (only {', '.join(impl.modes)})")
    unknown = sorted(set(options or {}) - set(impl.options))
    if unknown:
        valid = ", ".join(sorted(impl.options)) or "none"
        raise ProblemError(f"solver {solver!r}: unknown options {unknown}; valid options: {valid}")
    if not (isinstance(time_limit, (int, float)) and 0 < time_limit <= MAX_TIME_LIMIT_S):
        raise ProblemError(f"time_limit must be a positive number of seconds, at most {MAX_TIME_LIMIT_S:g} "
                           f"(a week), got {time_limit!r}")
    if impl.takes_arg and targets is not None:
        resolve_target_name(impl.arg, list(targets), f"solver {solver!r}: ")
    return impl


def solve(problem: PlacementProblem, mode: str = "latency", solver: str = "cpsat", *,
          time_limit: float = 10.0, seed: int = 0, num_stages: int | None = None, contiguous: bool = False,
          coarsen: bool | str | int = "auto", **options: Any) -> Plan:
    """Place ``problem`` with the named solver.

    Parameters
    ----------
    problem : PlacementProblem
    mode : {"latency", "pipeline"}
        Minimize the makespan of one inference, or the pipeline bottleneck then latency.
    solver : str
        A name from :func:`available_solvers` (``"cpsat"``, ``"heft"``, ``"single:<target>"``...).
    time_limit : float
        Seconds for the whole call (model building included).
    seed : int
        Random seed (CP-SAT); heuristics are deterministic.
    num_stages : int, optional
        Pipeline mode: at most this many non-empty stages (<= number of targets); ``None`` lets the
        solver choose up to the number of targets.
    contiguous : bool
        Pipeline mode: every stage is a contiguous run of the problem's canonical op order
        (:attr:`~placer.problem.PlacementProblem.canonical_order`, recorded as the plan option
        ``op_order="canonical"``).
    coarsen : bool, "auto" or int
        Merge chains / single-successor groups before solving (an int sets the target number of
        super-ops). ``"auto"``: only for solvers that allow it, above ``AUTO_COARSEN_OPS`` ops.
    **options
        Solver-specific options (see each solver's ``options``); unknown ones raise ProblemError.

    Every solver runs on :meth:`~placer.problem.PlacementProblem.canonical` (the problem listed in
    a canonical topological order, tensors sorted), so the result does not depend on the order the
    ops, tensors or colocation members were listed in; the plan is mapped back to ``problem``.

    Returns
    -------
    Plan
        Validated against ``problem`` is up to the caller (``plan.validate(problem)``); every
        registered solver returns plans that pass.

    Raises
    ------
    ProblemError
        Unknown solver / mode / option, a mode the solver does not handle, or an infeasible problem.
    TimeLimitError
        (a ProblemError) The time limit ran out preparing the problem (listing it canonically),
        before a heuristic (a solver that is not ``exact``: it cannot stop midway) could start.
    """
    t0 = time.monotonic()
    if not isinstance(problem, PlacementProblem):
        raise ProblemError(f"solve() needs a PlacementProblem, got {type(problem).__name__}")
    impl = check_request(mode, solver, time_limit, problem.targets, options)
    if num_stages is not None:
        if mode != "pipeline":
            raise ProblemError("num_stages is a pipeline-mode option")
        if not isinstance(num_stages, int) or not 1 <= num_stages <= problem.n_targets:
            raise ProblemError(f"num_stages must be an int in [1, {problem.n_targets}] (the number of "
                               f"targets), got {num_stages!r}")
    if contiguous and mode != "pipeline":
        raise ProblemError("contiguous is a pipeline-mode option")
    if impl.contiguous_only:
        contiguous = True
    ctx = SolveContext(mode=mode, name=solver, time_limit=float(time_limit), seed=int(seed),
                       num_stages=num_stages, contiguous=bool(contiguous), options=dict(options),
                       deadline=t0 + float(time_limit))

    canon = problem.canonical()
    if not impl.exact and time.monotonic() >= ctx.deadline:
        # a heuristic has no search to cut short: started now, it would run past the limit by all of its
        # (linear) work; an exact solver stops at the deadline with the best plan it has
        raise TimeLimitError(
            f"time limit of {time_limit:g} s spent before solver {solver!r} could start: preparing the "
            f"problem ({problem.n_ops} ops: canonical order, relisting) took {time.monotonic() - t0:.2f} s; "
            f"{solver!r} cannot stop midway, so it was not started: give a longer time limit")
    target = _coarse_size(coarsen, impl, canon)
    if target is None:
        plan = impl.solve(canon, ctx)
    else:
        plan = _solve_coarsened(canon, impl, ctx, target)
    if canon is not problem:
        plan = _relabel_plan(problem, canon, plan)
    return dataclasses.replace(plan, solver=solver,
                               stats=dataclasses.replace(plan.stats, wall_s=time.monotonic() - t0))


def _relabel_plan(problem: PlacementProblem, canon: PlacementProblem, plan: Plan) -> Plan:
    """``plan`` (solved on ``canon``, the canonical listing of ``problem``) as a plan of ``problem``.

    Placement, stage order and stats are kept; the per-op times are recomputed on ``problem``: a
    pipeline runs a stage's ops in the problem's op order, and a latency schedule is replayed in
    the plan's (start, end, canonical position) order, which reproduces it exactly."""
    assign = assignment_indices(problem, plan.assignment)
    kw = {"stats": plan.stats, "options": dict(plan.options), "coarsening": plan.coarsening}
    if plan.mode == "pipeline":
        order = [problem.target_index[d] for d in plan.stage_targets]
        return make_pipeline_plan(problem, assign, plan.solver, order=order, **kw)
    pos, ops = canon.op_index, problem.ops
    start = np.fromiter((plan.start_ms[o] for o in ops), dtype=float, count=problem.n_ops)
    end = np.fromiter((plan.end_ms[o] for o in ops), dtype=float, count=problem.n_ops)
    rank = np.fromiter((pos[o] for o in ops), dtype=np.int64, count=problem.n_ops)
    order = np.lexsort((rank, end, start)).tolist()  # by (start, end, canonical position)
    return make_latency_plan(problem, assign, plan.solver, order=order, **kw)


def _coarse_size(coarsen: bool | str | int, impl: Solver, problem: PlacementProblem) -> int | None:
    if coarsen is False or coarsen is None:
        return None
    if coarsen == "auto":
        return COARSE_OPS if impl.auto_coarsen and problem.n_ops > AUTO_COARSEN_OPS else None
    if coarsen is True:
        return COARSE_OPS
    if isinstance(coarsen, int) and coarsen >= 1:
        return coarsen if coarsen < problem.n_ops else None
    raise ProblemError(f"coarsen must be True, False, 'auto' or a positive int, got {coarsen!r}")


def _solve_coarsened(problem: PlacementProblem, impl: Solver, ctx: SolveContext, target: int) -> Plan:
    """Coarsen, solve, expand, re-evaluate on the fine problem; keep the best fine heuristic if better.

    For exact solvers the fine heuristics (HEFT, LP + list scheduling, ...) run first, within 30 %
    of the time limit; the coarse problem gets the rest (minus a reserve for the expansion).
    In latency mode (options ``dynamic``, ``window_bound``, ``lns`` of ``cpsat``) the fine
    heuristics include :class:`~placer.solve.heuristics.DynamicListSearch`; the window LP bound
    follows (at most a tenth of the time left); the coarse solve is skipped when the best fine plan
    is already within ``lns_skip_coarse_gap`` of that bound and otherwise gets half of the time
    left; the rest goes to CP-SAT window LNS (:mod:`placer.solve.lns`) on the best plan so far
    (after up to half of it lets the dynamic search finish two passes per portfolio member).
    """
    t0 = time.monotonic()
    p = problem
    pipeline = ctx.mode == "pipeline"
    opts = ctx.plan_options()
    k = ctx.max_stages(p)
    opts_all = {**impl.options, **ctx.options}
    fine_latency = impl.exact and not pipeline and p.n_targets > 1  # the latency extras apply
    # fine heuristics first (they are the fallback and the yardstick)
    fine_best = None
    ht = None  # per-target heads and tails with communication (latency mode)
    best_val = math.inf
    lb_info: dict[str, float] = {}
    search = DynamicListSearch(p) if fine_latency and opts_all.get("dynamic", False) else None
    dp = None
    if pipeline and impl.exact and opts_all.get("ideals", False):  # cpsat: the ideals DP on the fine problem
        dp = ideals_warm_start(p, ctx, opts_all, t0)
        if dp is not None:
            fine_best = ("ideals", dp.assign, dp.stage_targets)
            proven = ideals_plan_stats(p, dp, ctx, opts, t0)
            if proven is not None:
                return proven
    if impl.exact:
        heuristic_deadline = t0 + 0.3 * ctx.time_limit
        if pipeline:
            best_key = None
            if fine_best is not None:
                ev = pipeline_eval(p, fine_best[1], fine_best[2])
                best_key = (ev.bottleneck, ev.latency)
            for name, a, o in pipeline_candidates(p, k, ctx.contiguous, heuristic_deadline):
                ev = pipeline_eval(p, a, o)
                if best_key is None or (ev.bottleneck, ev.latency) < best_key:
                    best_key, fine_best = (ev.bottleneck, ev.latency), (name, a, o)
        else:
            # the coarse solve tries HEFT looking ahead at the tails; here the fine search has the time
            span = heuristic_deadline - time.monotonic()
            for name, a, o in latency_candidates(p, heuristic_deadline, lb_info, search, 0.8 * span,
                                                 lookahead=False):
                val = float(latency_schedule(p, a, o)[1].max())
                if val < best_val:
                    best_val, fine_best = val, (name, a, o)
    bound = None
    if not pipeline:
        fcosts = Costs.of(p)
        if p.n_targets > 1 and int(p.allowed.sum()) <= COMM_MAX_PAIRS:  # pure Python: ~25 us a pair
            ht = comm_heads_tails(p, fcosts)
        bound = latency_bound(p, fcosts, load=lb_info.get("load_bound"), heads_tails=ht, comm=False)
        if fine_latency and opts_all.get("window_bound", False):
            bound = window_load_bound(p, fcosts, bound, deadline=time.monotonic() + 0.1 * ctx.remaining(),
                                      heads_tails=ht if ht is not None else target_heads_tails(p, fcosts))
    use_lns = fine_latency and opts_all.get("lns", False) and fine_best is not None
    skip_coarse = use_lns and best_val - bound <= float(opts_all.get("lns_skip_coarse_gap", 0.02)) * best_val
    # keep time for expansion and bounds (linear-ish in the number of ops)
    reserve = min(0.25 * ctx.time_limit, 0.1 + 3e-4 * p.n_ops * max(1, p.n_targets // 2))
    plan = None
    source = ""
    coarse_stats = None
    info = None
    sub_deadline = ctx.deadline - reserve
    if use_lns:  # half of what is left, the LNS gets the rest
        now = time.monotonic()
        sub_deadline = now + 0.5 * max(0.0, sub_deadline - now)
    if fine_best is not None and sub_deadline - time.monotonic() < MIN_COARSE_S:
        skip_coarse = True  # no time left for a coarse solve worth having: keep the fine plan, stay in time
    if not skip_coarse:
        coarse, members = coarsen_problem(p, target, contiguous=pipeline and ctx.contiguous)
        info = {"n_ops": p.n_ops, "n_coarse_ops": coarse.n_ops,
                "groups": {p.ops[m[0]]: [p.ops[i] for i in m] for m in members if len(m) > 1}}
        sub = dataclasses.replace(ctx, deadline=sub_deadline)
        try:
            cplan = impl.solve(coarse, sub)
        except ProblemError:
            # merging can make a feasible problem infeasible (e.g. a pipeline with pins): solve it whole
            return impl.solve(p, ctx)
        coarse_stats = cplan.stats
        assign = expand_assignment(p, coarse, members, cplan.assignment)
        if pipeline:
            order = [p.target_index[d] for d in cplan.stage_targets]
            plan = make_pipeline_plan(p, assign, ctx.name, order=order, options=opts, coarsening=info)
        else:
            order = expand_order(p, coarse, members, cplan.start_ms)
            plan = make_latency_plan(p, assign, ctx.name, order=order, options=opts, coarsening=info)
        source = "coarse " + str(cplan.stats.extra.get("source", impl.name))
    if fine_best is not None:
        name, a, o = fine_best
        fb = (make_pipeline_plan(p, a, ctx.name, order=o, options=opts) if pipeline
              else make_latency_plan(p, a, ctx.name, order=o, options=opts))
        if plan is None or better(plan, fb) is fb:
            plan, source = fb, f"fine heuristic {name}"
    assert plan is not None
    margin = 0.1 + 1e-4 * p.n_ops  # building, comparing and returning the plan
    if use_lns and search is not None and search.passes < 2 * len(search.PORTFOLIO):
        # big problems: let every member of the portfolio have two passes first (half the time left)
        now = time.monotonic()
        best = search.run(now + 0.5 * max(0.0, ctx.deadline - margin - now), max_passes=2 * len(search.PORTFOLIO))
        if best is not None and best[0] < plan.makespan_ms - 1e-9:
            plan, source = make_latency_plan(p, best[1], ctx.name, order=best[2], options=opts), "fine heuristic dynamic"
    if use_lns:
        a = assignment_indices(p, plan.assignment)
        o = sorted(range(p.n_ops), key=lambda i: (plan.start_ms[p.ops[i]], i))
        lns = LatencyLNS(p, a, o, opts_all, ctx.seed)
        lns.run(ctx.deadline - margin, window_ops=max(30, 280 // p.n_targets))
        if lns.improved:
            coarsening = plan.coarsening if source.startswith("coarse") else None
            plan = make_latency_plan(p, lns.assign, ctx.name, order=lns.order, options=opts, coarsening=coarsening)
            source += f" + lns ({lns.improved}/{lns.steps} windows)"
    elif search is not None:  # no LNS: the fine search goes on with what is left
        best = search.run(ctx.deadline - margin, 0.8 * ctx.time_limit)
        if best is not None and best[0] < plan.makespan_ms - 1e-9:
            plan, source = make_latency_plan(p, best[1], ctx.name, order=best[2], options=opts), "fine heuristic dynamic"
    if pipeline:
        bound = pipeline_bound(p, num_stages=k)
        if dp is not None:  # the DP optimum: a bound with communication
            bound = proven_bound(plan.bottleneck_ms, [bound, ideals_bound(dp)])
    objective = plan.bottleneck_ms if pipeline else plan.makespan_ms
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
                        wall_s=time.monotonic() - t0, extra=extra)
    return dataclasses.replace(plan, stats=stats)
