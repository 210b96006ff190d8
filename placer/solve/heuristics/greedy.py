"""Priority assignment: each placement unit (op or colocation group) goes to the first target of a
preference list that supports its first op and has memory room; a group goes where its first op
goes if every member is supported there, else to the first target (problem order) supporting all
members."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from placer.problem import PlacementProblem
from placer.solve.heuristics.common import group_target, no_room, unit_weight

__all__ = ["priority_assign"]


def priority_assign(problem: PlacementProblem, preference: Sequence[int] | None = None, *,
                    fastest_fallback: bool = False, who: str = "heuristic") -> np.ndarray:
    """Assign units in topological order to the first preferred target with support and memory room.

    Parameters
    ----------
    preference : sequence of target indices
        Preference list (default: problem target order). Targets not listed follow in problem order.
    fastest_fallback : bool
        If True, only ``preference[0]`` is preferred and other ops go to their fastest target.
    """
    p = problem
    pref = list(preference or [])
    pref += [d for d in range(p.n_targets) if d not in pref]
    if np.isinf(p.memory_cap_bytes).all():  # no memory caps: every unit at once, the same choices
        return _priority_assign_uncapped(p, pref, fastest_fallback, who)
    assign = np.full(p.n_ops, -1, dtype=int)
    mem_free = np.array(p.memory_cap_bytes, dtype=float)
    for unit in p.units:
        first = unit[0]
        w = unit_weight(p, unit)
        cands = pref
        if fastest_fallback:
            rest = sorted(pref[1:], key=lambda d: (p.cost_ms[first, d], d))
            cands = [pref[0]] + rest
        ok = [d for d in cands if np.isfinite(p.cost_ms[first, d]) and mem_free[d] >= w
              and (p.pin_of[first] < 0 or p.pin_of[first] == d)]
        choice = group_target(p, unit, ok[0] if ok else max(p.pin_of[first], 0),
                               mem_free, who)
        assign[list(unit)] = choice
        mem_free[choice] -= w
    return assign


def _priority_assign_uncapped(p: PlacementProblem, pref: list[int], fastest_fallback: bool, who: str
                              ) -> np.ndarray:
    """:func:`priority_assign` without memory caps (a unit's choice then depends on its first op only),
    vectorized over the units: the loop's choices exactly."""
    units = p.units
    first = np.fromiter((u[0] for u in units), dtype=np.int64, count=len(units))
    rows = np.arange(len(first))
    cost = p.cost_ms[first]
    if fastest_fallback:  # pref[0], then the others by (cost, target index)
        rest = np.array(sorted(pref[1:]), dtype=np.int64)
        ranked = rest[np.argsort(cost[:, rest], axis=1, kind="stable")] if len(rest) else rest[None, :0]
        cands = np.concatenate([np.full((len(first), 1), pref[0], dtype=np.int64),
                                np.broadcast_to(ranked, (len(first), len(rest)))], axis=1)
    else:
        cands = np.broadcast_to(np.asarray(pref, dtype=np.int64), (len(first), len(pref)))
    pin = p.pin_of[first]
    ok = np.isfinite(cost[rows[:, None], cands]) & ((pin < 0)[:, None] | (cands == pin[:, None]))
    choice = np.where(ok.any(axis=1), cands[rows, ok.argmax(axis=1)], np.maximum(pin, 0))
    # the colocation rule (group_target): that choice if allowed, else the first allowed target
    allowed = p.allowed[first]
    good = allowed[rows, choice]
    choice = np.where(good, choice, allowed.argmax(axis=1))
    stuck = np.flatnonzero(~good & ~allowed.any(axis=1))
    if len(stuck):
        names = [p.ops[i] for i in units[int(stuck[0])]]
        raise no_room(who, names)
    assign = np.full(p.n_ops, -1, dtype=int)
    if len(units) == p.n_ops:  # single-op units
        assign[first] = choice
    else:
        for unit, d in zip(units, choice.tolist()):
            assign[list(unit)] = d
    return assign
