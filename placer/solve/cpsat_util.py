"""Helpers shared by the CP-SAT latency and pipeline models.

Time units
    CP-SAT needs integers. Every time (op cost, link time, partition overhead) is divided by a
    resolution ``r`` (ms per unit) and rounded to the nearest integer. ``time_resolution_ms="auto"``
    picks ``r`` = the greatest common divisor of all times when they are all whole multiples of
    1 us (exact: e.g. integer costs give r = 1 ms or more), else 1 us; ``r`` grows if the schedule
    horizon would exceed 1e9 units. The model is solved with the rounded numbers; the Plan is then
    re-timed with the problem's float numbers (same assignment and per-target op order), so the
    predicted costs it reports are exact. CP-SAT's proofs hold for the rounded numbers; the
    reported ``best_bound`` is valid for the float objective: a rounded bound is lowered by
    :func:`rounding_slack` (the most rounding can raise any plan's objective, 0 when ``r`` is
    exact), and the status is ``OPTIMAL`` only when that bound meets the float objective.

Symmetry
    Targets that are interchangeable (same costs, memory cap, partition overhead, links to and
    from every other target, link charges, no pins, and swapping them maps the shared-core
    structure onto itself) form classes; within a class, target
    ``d_{j+1}`` may only be used by a placement unit if ``d_j`` is used by an earlier unit
    (units in topological order). Hints are relabelled to satisfy this.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from placer.plan import Plan, SolverStats
from placer.problem import PlacementProblem
from placer.solve.evaluate import float_noise

__all__ = [
    "add_first_use_order",
    "add_memory_caps",
    "add_weight_row",
    "canonical_assign",
    "choose_resolution",
    "first_use_values",
    "integral_weights",
    "interchangeable_classes",
    "make_solver",
    "read_assign",
    "reported_bound",
    "rounding_slack",
    "status_name",
    "to_int",
]


def choose_resolution(problem: PlacementProblem, option: Any = "auto") -> float:
    """ms per CP-SAT time unit (see module docstring)."""
    if option not in (None, "auto"):
        r = float(option)
        if not r > 0:
            raise ValueError(f"time_resolution_ms must be > 0, got {option!r}")
        return r
    p = problem
    cost = p.cost_ms[np.isfinite(p.cost_ms)]
    link = p.link_ms.ravel() if p.link_ms.size else np.zeros(0)
    vals = np.concatenate([cost, link, p.partition_overhead_ms])
    vals = vals[vals > 0]
    horizon = float(np.where(p.allowed, p.cost_ms, 0).max(axis=1).sum())
    if p.link_ms.size:
        horizon += float(p.link_ms.max(axis=(1, 2)).sum() + len(p.tensors) * p.partition_overhead_ms.max())
    r = 1e-3
    if vals.size:
        us = vals * 1e3
        ints = np.rint(us)
        if np.all(np.abs(us - ints) <= 1e-6 * np.maximum(1.0, us)) and ints.max() < 2**62:
            g = int(np.gcd.reduce(ints.astype(np.int64)))
            r = max(g, 1) * 1e-3
    if horizon / r > 1e9:
        r = horizon / 1e9
    return r


def rounding_slack(problem: PlacementProblem, costs: Any, mode: str, copy_weight: float = 0.0) -> float:
    """An upper bound (ms) on ``|objective(rounded numbers) * r - objective(float numbers)|`` over all
    plans: a bound ``beta`` (units) of the rounded model gives ``beta * r - slack`` for the floats.

    ``e_op[v]`` = largest rounding error of op ``v`` over its allowed targets, ``e_k`` = largest of
    tensor ``k``'s link times, ``e_in`` = largest of the partition overheads, ``f_k`` = the most
    copies of ``k`` (destinations other than its producer's target). Pipeline: a resource's load
    is a sum of op costs (each op counted once) and copy terms (each copy on at most its sender
    and its receiver), so ``sum_v e_op[v] + sum_k f_k (2 e_k + e_in)``. Latency: the makespan is
    the length of a chain of distinct ops and one copy delay per op at most, so
    ``sum_v e_op[v] + sum_k (e_k + e_in)``, plus ``copy_weight * sum_k f_k (e_k + e_in)`` for the
    transfer term of the objective. ``costs`` is a :class:`~placer.solve.evaluate.Costs` in units
    of ``costs.scale_ms``. Exact to float noise: 0 when every number is a multiple of ``r``.
    """
    p = problem
    r = float(costs.scale_ms)
    fin = np.isfinite(p.cost_ms)
    err_op = np.where(fin, np.abs(np.where(fin, costs.cost, 0.0) * r - np.where(fin, p.cost_ms, 0.0)), 0.0)
    slack = float(err_op.max(axis=1).sum()) if err_op.size else 0.0
    if not len(p.tensors):
        return slack
    e_link = np.abs(np.asarray(costs.link) * r - p.link_ms).max(axis=(1, 2))
    e_in = float(np.abs(np.asarray(costs.entry) * r - p.partition_overhead_ms).max()) if p.n_targets else 0.0
    real = np.array([u >= 0 and bool(cs) for u, cs in zip(p.tensor_producer, p.tensor_consumers)])
    fan = np.array([min(p.n_targets - 1, len(cs)) for cs in p.tensor_consumers], dtype=float) * real
    if mode == "pipeline":
        return slack + float((fan * (2 * e_link + e_in)).sum())
    return slack + float((real * (e_link + e_in)).sum()) + copy_weight * float((fan * (e_link + e_in)).sum())


def reported_bound(objective: float, bounds: list[float]) -> tuple[float, bool]:
    """The best of ``bounds`` (each valid for the float objective) and whether it proves
    ``objective`` optimal (within relative 1e-9, the float noise of re-evaluating an exact integer
    optimum; the bound is then capped at the objective so the gap reads 0)."""
    bound = max([0.0] + [b for b in bounds if math.isfinite(b)])
    if objective - bound <= float_noise(objective):
        return min(bound, objective), True
    return bound, False


def interchangeable_classes(problem: PlacementProblem) -> list[list[int]]:
    """Classes (size >= 2) of interchangeable, unpinned targets, each sorted by index."""
    p = problem
    t = p.n_targets
    pinned = {int(x) for x in p.pin_of if x >= 0}
    lat, pb, code = p.link_latency_ms, p.link_ms_per_byte, p.charge_code
    family = {frozenset(u) for u in p.resource_users}  # which targets share each resource

    def same(a: int, b: int) -> bool:
        if a in pinned or b in pinned:
            return False
        if not np.array_equal(p.cost_ms[:, a], p.cost_ms[:, b]):
            return False
        if p.memory_cap_bytes[a] != p.memory_cap_bytes[b]:
            return False
        if p.partition_overhead_ms[a] != p.partition_overhead_ms[b]:
            return False
        perm = list(range(t))
        perm[a], perm[b] = b, a
        for m in (lat, pb, code):
            if not np.array_equal(m, m[np.ix_(perm, perm)]):
                return False
        if p.shares_resources and {frozenset(perm[d] for d in u) for u in family} != family:
            return False
        return True

    classes: list[list[int]] = []
    for d in range(t):
        for cl in classes:
            if same(cl[0], d):
                cl.append(d)
                break
        else:
            classes.append([d])
    return [cl for cl in classes if len(cl) > 1]


def canonical_assign(problem: PlacementProblem, assign: np.ndarray, classes: list[list[int]]) -> np.ndarray:
    """Relabel targets inside each class in order of first use by units (topological order)."""
    out = np.array(assign, dtype=int)
    firsts = [u[0] for u in problem.units]
    for cl in classes:
        members = set(cl)
        seen: list[int] = []
        for i in firsts:
            d = int(assign[i])
            if d in members and d not in seen:
                seen.append(d)
        mapping = {old: cl[j] for j, old in enumerate(seen)}
        for i in range(len(out)):
            d = int(assign[i])
            if d in mapping:
                out[i] = mapping[d]
    return out


def add_first_use_order(model: cp_model.CpModel, problem: PlacementProblem,
                        unit_lits: list[dict[int, Any]], classes: list[list[int]]) -> dict[tuple[int, int], Any]:
    """Symmetry breaking: within a class, unit i may use d_{j+1} only if some earlier unit uses d_j.

    ``unit_lits[i][d]`` is the literal "unit i on target d". Returns the auxiliary literals
    ``y[(i, d)]`` = "some unit <= i uses d" (for hinting).
    """
    y: dict[tuple[int, int], Any] = {}
    n_units = len(unit_lits)
    for cl in classes:
        for d in cl[:-1]:
            prev = None
            for i in range(n_units):
                x = unit_lits[i].get(d)
                if prev is None and x is None:
                    continue
                lit = model.new_bool_var(f"y{i}_{d}")
                terms = [v for v in (prev, x) if v is not None]
                # lit == OR(terms)
                for v in terms:
                    model.add_implication(v, lit)
                model.add_bool_or([lit.Not()] + terms)
                y[(i, d)] = lit
                prev = lit
        for j in range(1, len(cl)):
            d_prev, d = cl[j - 1], cl[j]
            for i in range(n_units):
                x = unit_lits[i].get(d)
                if x is None:
                    continue
                before = y.get((i - 1, d_prev)) if i > 0 else None
                if before is None:
                    model.add(x == 0)
                else:
                    model.add_implication(x, before)
    return y


def add_memory_caps(model: cp_model.CpModel, problem: PlacementProblem,
                    unit_lits: list[dict[int, Any]]) -> None:
    """``sum_units w[unit] x[unit,d] <= cap[d]`` for every target ``d`` with a finite cap that the
    units allowed on it could exceed (``unit_lits[i][d]``: "unit i on target d")."""
    p = problem
    for d in range(p.n_targets):
        if np.isfinite(p.memory_cap_bytes[d]):
            add_weight_row(model, [(float(p.weight_bytes[list(unit)].sum()), lits[d])
                                   for unit, lits in zip(p.units, unit_lits) if d in lits],
                           p.memory_cap_bytes[d])


def add_weight_row(model: cp_model.CpModel, terms: Sequence[tuple[float, Any]], cap: float) -> None:
    """``sum w * lit <= cap`` over ``terms`` (``(weight, literal)``), in :func:`integral_weights`' integers;
    nothing when the positive weights cannot exceed ``cap`` together (the memory rows of the full model
    and of the LNS windows)."""
    terms = [(w_, lit) for w_, lit in terms if w_ > 0]
    if terms and sum(w_ for w_, _ in terms) > cap:
        coefs, room = integral_weights([w_ for w_, _ in terms], cap)
        model.add(sum(c * lit for c, (_, lit) in zip(coefs, terms)) <= room)


#: integral weights of a memory row stay below this (CP-SAT's coefficients and sums are int64)
MAX_INT_WEIGHT_SUM = 2 ** 52


def integral_weights(weights: Sequence[float], cap: float) -> tuple[list[int], int]:
    """``sum_i w_i x_i <= cap`` as integers CP-SAT takes: the weights times a power of two ``s``,
    rounded up, and ``cap * s`` rounded down. ``s`` is 1 when the weights are whole bytes whose sum fits
    (the row is then exact), else the largest power of two that keeps the sum within
    :data:`MAX_INT_WEIGHT_SUM` (fractional bytes: the row is tighter by at most one unit in 2^52 of
    the sum; sums above 2^52 bytes: scaled down, tighter by a unit of ``1 / s`` bytes per op). A row
    so built never admits an assignment over the cap: fractional weights were rounded to whole bytes
    (0.4 -> 0, three ops over a cap of 1 accepted, the plan then refused), and weights of 1e19
    overflowed OR-Tools."""
    total = float(sum(weights))
    whole = all(float(w).is_integer() for w in weights)
    if whole and total <= MAX_INT_WEIGHT_SUM:
        scale = 1.0
    else:
        scale = 2.0 ** math.floor(math.log2(MAX_INT_WEIGHT_SUM / max(total, 1e-300)))
    coefs = [math.ceil(w * scale) for w in weights]
    return coefs, math.floor(min(cap * scale, 2.0 ** 62))


def read_assign(problem: PlacementProblem, unit_lits: list[dict[int, Any]], is_true: Any) -> np.ndarray:
    """The assignment (target per op) of a solution: ``is_true(lit)`` tells whether the literal
    ``unit_lits[i][d]`` ("unit i on target d") is true in it."""
    assign = np.empty(problem.n_ops, dtype=int)
    for lits, unit in zip(unit_lits, problem.units):
        assign[list(unit)] = next(d for d, lit in lits.items() if is_true(lit))
    return assign


def first_use_values(problem: PlacementProblem, assign: np.ndarray, classes: list[list[int]]
                     ) -> dict[tuple[int, int], int]:
    """Values of the ``y`` literals of :func:`add_first_use_order` for an assignment."""
    out: dict[tuple[int, int], int] = {}
    for cl in classes:
        for d in cl[:-1]:
            seen = 0
            for i, unit in enumerate(problem.units):
                seen = seen or int(assign[unit[0]] == d)
                out[(i, d)] = seen
    return out


def make_solver(options: dict[str, Any], time_s: float, seed: int, size: int = 0) -> cp_model.CpSolver:
    """A CpSolver with placer's defaults (``num_workers``, ``deterministic``, ``dtime_per_s``,
    ``gap_limit``, ``edge_finding``, ``probing_max_size``, ``log``, ``cpsat_params``). ``size`` is the
    number of (op, target) pairs of the model."""
    s = cp_model.CpSolver()
    prm = s.parameters
    prm.num_workers = int(options.get("num_workers", 2))
    prm.random_seed = int(seed) % (2**31)
    # OR-Tools installs its own SIGINT handler during a solve by default (and restores the default
    # one after): Ctrl-C would then kill the whole process instead of raising KeyboardInterrupt,
    # which placer turns into a clean stop (no RUNNING trial left, exit 130)
    prm.catch_sigint_signal = False
    t = max(0.01, float(time_s))
    prm.max_time_in_seconds = t
    if options.get("deterministic", True):
        # interleaved search is deterministic and stops on deterministic time; the wall-clock limit
        # stays as a hard backstop (if it is what stops the search, the run is not reproducible)
        prm.interleave_search = True
        prm.max_deterministic_time = t * float(options.get("dtime_per_s", 0.3))
    gap = float(options.get("gap_limit", 0.0) or 0.0)
    if gap > 0:
        prm.relative_gap_limit = gap
    if size > int(options.get("probing_max_size", 1000)):
        # presolve probing costs seconds of wall time on big scheduling models for little gain
        prm.cp_model_probing_level = 0
    if options.get("edge_finding", True):
        # timetable edge finding closes P|prec|Cmax proofs (STG) that default propagation cannot
        prm.use_timetable_edge_finding_in_cumulative = True
        prm.use_overload_checker_in_cumulative = True
    prm.log_search_progress = bool(options.get("log", False))
    for key, value in dict(options.get("cpsat_params") or {}).items():
        setattr(prm, key, value)
    return s


def build_seconds(problem: PlacementProblem, mode: str, per_item_s: float = 1.5e-5) -> float:
    """Rough wall time to build the CP-SAT model in Python (items = literals + edge / copy terms)."""
    p = problem
    pairs = int(p.allowed.sum())
    per_op = p.allowed.sum(axis=1)
    if mode == "latency":
        items = pairs + int(sum(per_op[v] for _, v in p.edges))
    else:
        items = pairs + int(sum(per_op[u] * p.n_targets for u, cs in zip(p.tensor_producer, p.tensor_consumers)
                                if u >= 0 and cs))
    return per_item_s * items


def skipped_stats_plan(plan: Plan, ctx: Any, t0: float, lower_bound_ms: float, resolution_ms: float,
                       source: str, reason: str) -> Plan:
    """The best heuristic plan with solver stats, when the CP-SAT model is not worth building."""
    import dataclasses
    import time

    objective = plan.makespan_ms if plan.mode == "latency" else plan.bottleneck_ms
    gap = 0.0 if objective <= 0 else max(0.0, (objective - lower_bound_ms) / objective)
    stats = SolverStats(status="OPTIMAL" if gap <= 1e-9 else "FEASIBLE", objective=objective,
                        best_bound=lower_bound_ms, gap=gap, wall_s=time.monotonic() - t0,
                        extra={"resolution_ms": resolution_ms, "source": source, "hint": source,
                               "cpsat_skipped": reason, "lower_bound_ms": lower_bound_ms})
    return dataclasses.replace(plan, stats=stats, solver=ctx.name)


def status_name(status: int) -> str:
    """CP-SAT status as a string."""
    names = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
             cp_model.MODEL_INVALID: "MODEL_INVALID", cp_model.UNKNOWN: "UNKNOWN"}
    return names.get(status, str(status))


def to_int(x: float) -> int:
    """Round a rounded-units float (finite) to int."""
    return round(float(x))


def plan_if_no_time_to_build(m: Any, problem: PlacementProblem, ctx: Any, mode: str) -> Plan | None:
    """The heuristic plan of model ``m`` (a :class:`~placer.solve.cpsat_latency.LatencyModel` or
    :class:`~placer.solve.cpsat_pipeline.PipelineModel` after its heuristics and lower bound), with its
    stats, when less time is left than twice the model's estimated build time + 0.2 s; None when
    there is time enough, or no plan yet."""
    if m.best_plan is None or ctx.remaining() >= 2 * build_seconds(problem, mode) + 0.2:
        return None
    return skipped_stats_plan(m.best_plan, ctx, m.t0, m.lb_ms, m.r, m.best_name,
                              "not enough time left to build the model")
