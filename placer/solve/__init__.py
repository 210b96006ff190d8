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
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from placer.errors import ProblemError, TimeLimitError
from placer.plan import Plan
from placer.problem import PlacementProblem, resolve_target_name
from placer.solve import baselines as _baselines  # noqa: F401  (registers single, greedy, heft)
from placer.solve import bruteforce as _bruteforce  # noqa: F401
from placer.solve import cpsat as _cpsat  # noqa: F401
from placer.solve import dp as _dp  # noqa: F401
from placer.solve import ideals as _ideals  # noqa: F401
from placer.solve.base import MODES, SolveContext, Solver, available_solvers, get_solver, register_solver
from placer.solve.coarsened import solve_coarsened
from placer.solve.evaluate import (
    _gap,
    assignment_indices,
    better,
    check_assignment,
    make_latency_plan,
    make_pipeline_plan,
    plan_key,
)

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


def check_request(mode: str, solver: str, time_limit: float, targets: Sequence[str] | None = None,
                  options: Mapping[str, Any] | None = None, num_stages: int | None = None):
    """Check a solve request before any costly work (profiling): the mode, the solver name and its
    options, the time limit, ``num_stages`` (pipeline mode, at most one stage per target when the
    targets are known) and a ``single:<target>`` argument against ``targets`` when known.
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
    if num_stages is not None:
        if mode != "pipeline":
            raise ProblemError("num_stages is a pipeline-mode option")
        most = len(targets) if targets is not None else None
        if not (isinstance(num_stages, int) and 1 <= num_stages and (most is None or num_stages <= most)):
            raise ProblemError(f"num_stages must be an int in [1, {most}] (the number of targets), "
                               f"got {num_stages!r}" if most is not None else
                               f"num_stages must be a positive int, got {num_stages!r}")
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
    impl = check_request(mode, solver, time_limit, problem.targets, options, num_stages=num_stages)
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
    work = canon.cut_view  # every plan priced as one that cuts the model; one-target plans re-priced below
    if target is None:
        plan = impl.solve(work, ctx)
    else:
        plan = solve_coarsened(work, impl, ctx, target)
    if work is not canon:
        tw = float({**impl.options, **ctx.options}.get("transfer_weight", 0.0) or 0.0)
        plan = _priced_uncut(canon, plan, impl.exact, tw)
    if canon is not problem:
        plan = _relabel_plan(problem, canon, plan)
    return dataclasses.replace(plan, solver=solver,
                               stats=dataclasses.replace(plan.stats, wall_s=time.monotonic() - t0))


def _priced_uncut(canon: PlacementProblem, plan: Plan, exact: bool, transfer_weight: float = 0.0) -> Plan:
    """``plan``, solved on ``canon.cut_view`` (every op at its cut scale), as a plan of ``canon``.

    A plan on one target does not cut the model: re-priced on ``canon`` at its own costs. An exact
    solver's plan is also compared with every one-target plan at its own costs and the better
    kept: the cut view prices every plan that cuts exactly and every one-target plan at least as
    high, so its optimum among cut plans, or else the best one-target plan, is the optimum of
    ``canon``. A heuristic keeps its own placement. Either way a bound becomes ``min(bound, best
    one-target plan)``: the cut view's bound holds for the plans that cut, not for a one-target plan
    priced below its cut price (a heuristic's bound, from the coarsened path, read 6 ms on a problem
    whose one-target optimum is 3). In latency mode with ``transfer_weight`` the plans are compared,
    and the objective reported, as ``makespan + transfer_weight * transfer ms`` (CP-SAT's objective)."""
    assign = assignment_indices(canon, plan.assignment)
    kw = {"stats": plan.stats, "options": dict(plan.options), "coarsening": plan.coarsening}
    if len(np.unique(assign)) == 1:  # priced on the cut view, it does not cut
        plan = _relabel_plan(canon, canon.cut_view, plan)
    weighed = plan.mode == "latency" and transfer_weight > 0

    def objective_of(p: Plan) -> float:
        if weighed:
            return p.makespan_ms + transfer_weight * sum(x.ms + x.entry_ms for x in p.transfers)
        return plan_key(p)[0]

    bound = plan.stats.best_bound
    if exact or bound is not None:
        for d in range(canon.n_targets):
            one = np.full(canon.n_ops, d)
            try:
                check_assignment(canon, one)
            except ProblemError:
                continue
            cand = (make_latency_plan(canon, one, plan.solver, **kw) if plan.mode == "latency"
                    else make_pipeline_plan(canon, one, plan.solver, order=[d], **kw))
            if exact:
                if weighed:
                    if objective_of(cand) < objective_of(plan) - 1e-9 * max(1.0, objective_of(plan)):
                        plan = cand
                else:
                    plan = better(plan, cand)
            if bound is not None:
                bound = min(bound, objective_of(cand))
    objective = objective_of(plan)
    if bound is not None:
        bound = min(bound, objective)
    stats = dataclasses.replace(plan.stats, objective=objective, best_bound=bound,
                                gap=None if bound is None else _gap(objective, bound))
    return dataclasses.replace(plan, stats=stats)


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
