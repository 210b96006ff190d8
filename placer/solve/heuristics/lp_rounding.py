"""LP rounding.

* :func:`lp_assign`: round the LP relaxation of "minimize the largest per-target load" (all but a
  handful of ops are integral in a basic solution; the rest go to their largest fraction, or the
  cheapest target with room); pins, colocation and memory respected.
* :func:`lp_list`: :func:`lp_assign` + :func:`~placer.solve.heuristics.fixed_schedule.schedule_fixed`,
  re-solving the LP with each target's observed idle time added to its load until the makespan
  stops improving.
"""

from __future__ import annotations

import time

import numpy as np

from placer.problem import PlacementProblem
from placer.solve.bounds import MinMaxLoadLP, shave
from placer.solve.evaluate import Costs, latency_schedule, resource_busy_ms
from placer.solve.heuristics.common import HeuristicError, no_room, unit_weight
from placer.solve.heuristics.fixed_schedule import schedule_fixed

__all__ = ["lp_assign", "lp_list"]


def lp_assign(problem: PlacementProblem, costs: Costs | None = None, num_stages: int | None = None,
              who: str = "lp", offset: np.ndarray | None = None, lp: object | None = None,
              info: dict | None = None) -> np.ndarray:
    """Assignment from the rounded LP relaxation of min-max load (see module docstring).

    ``offset[d]`` is added to target ``d``'s load (e.g. its expected idle time); ``lp`` is an
    already built :class:`~placer.solve.bounds.MinMaxLoadLP` (with memory caps) to re-solve;
    ``info["lp_value"]`` receives the LP optimum.
    """
    p = problem
    c = costs or Costs.of(p)
    t = p.n_targets
    units = p.units
    lp = lp or MinMaxLoadLP(p, c, num_stages, memory=True)
    res = lp.solve(offset)  # type: ignore[attr-defined]
    if res is None:
        raise HeuristicError(f"{who}: LP relaxation not solved")
    if info is not None:
        info["lp_value"] = res[0]
    frac = res[1]
    uc = np.array([c.cost[list(u)].sum(axis=0) for u in units])
    uw = np.array([unit_weight(p, u) for u in units])
    assign = np.full(p.n_ops, -1, dtype=int)
    mem_free = np.array(p.memory_cap_bytes, dtype=float)
    # integral units first (they are feasible together), fractional ones after
    order = sorted(range(len(units)), key=lambda i: (bool(frac[i].max() < 1 - 1e-6), i))
    for i in order:
        allowed = [d for d in range(t) if p.allowed[units[i][0], d]]
        prefs = sorted(allowed, key=lambda d: (-round(frac[i, d], 6), uc[i, d]))
        d = next((d for d in prefs if mem_free[d] >= uw[i]), None)
        if d is None:
            raise no_room(who, [p.ops[units[i][0]]])
        assign[list(units[i])] = d
        mem_free[d] -= uw[i]
    return assign


def lp_list(problem: PlacementProblem, costs: Costs | None = None, deadline: float | None = None,
            max_iter: int = 8, who: str = "lp-list", info: dict | None = None) -> tuple[np.ndarray, list[int]]:
    """LP-rounding assignment + :func:`schedule_fixed`, iterated with idle compensation.

    Iteration ``i`` solves the min-max-load LP with each resource's load increased by the idle time
    its schedule showed so far (smoothed), so targets that wait a lot get less work; stops after
    ``max_iter`` rounds, two rounds without improvement, or at ``deadline``. Returns the best
    ``(assign, order)`` seen (by makespan); ``info["load_bound"]`` gets the first LP's optimum (a
    lower bound on the makespan).
    """

    p = problem
    c = costs or Costs.of(p)
    t = p.n_targets
    idle = np.zeros(p.n_resources)
    best: tuple[float, np.ndarray, list[int]] | None = None
    stall = 0
    lp = MinMaxLoadLP(p, c, memory=True)
    for it in range(max_iter):
        if it and deadline is not None and time.monotonic() > deadline:
            break
        lp_info: dict = {}
        assign = lp_assign(p, c, who=who, offset=idle, lp=lp, info=lp_info)
        if it == 0 and info is not None:
            info["load_bound"] = shave(lp_info["lp_value"])  # with memory caps: still a relaxation
        _, order = schedule_fixed(p, assign, c)
        _, end = latency_schedule(p, assign, order, c)
        makespan = float(end.max())
        if best is None or makespan < best[0] - 1e-12:
            best, stall = (makespan, assign, order), 0
        else:
            stall += 1
            if stall >= 2:
                break
        finish = np.array([end[assign == d].max() if (assign == d).any() else 0.0 for d in range(t)])
        if p.shares_resources:  # a resource is done when the last target using it is
            finish = np.array([finish[list(u)].max() for u in p.resource_users])
        new_idle = np.maximum(finish - resource_busy_ms(p, assign, c), 0.0)
        idle = new_idle if it == 0 else 0.5 * (idle + new_idle)
    assert best is not None
    return best[1], best[2]
