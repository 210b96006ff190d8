"""What the heuristics share: their error, unit weights, the baselines' colocation rule, and the
idle-gap timelines of the insertion schedulers."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from placer.errors import ProblemError
from placer.problem import PlacementProblem

__all__ = ["HeuristicError", "Timeline", "earliest_slot", "group_target", "no_room", "unit_weight"]


class HeuristicError(ProblemError):
    """A heuristic found no feasible answer (memory caps, pipeline shape); exact solvers may still."""


def unit_weight(problem: PlacementProblem, unit: Sequence[int]) -> float:
    """Bytes of weights of a unit's ops."""
    return float(problem.weight_bytes[list(unit)].sum())


def group_target(problem: PlacementProblem, unit: Sequence[int], first_choice: int,
                 mem_free: np.ndarray, who: str) -> int:
    """Where a unit goes given where its first op would go (the baselines' colocation rule)."""
    p = problem
    w = unit_weight(p, unit)
    if p.allowed[unit[0], first_choice] and mem_free[first_choice] >= w:
        return first_choice
    for d in range(p.n_targets):
        if p.allowed[unit[0], d] and mem_free[d] >= w:
            return d
    raise no_room(who, [p.ops[i] for i in unit])


def no_room(who: str, names: Sequence[str]) -> HeuristicError:
    """The error of a heuristic that placed ops first-fit and found no target with memory room left for
    ``names``: a fact about its placement, not the problem's (weights 3, 2, 2 on caps 4 and 3 fit, one
    way only)."""
    what = list(names) if len(names) > 1 else names[0]
    return HeuristicError(f"{who}: no target had memory room left for {what!r} after the ops it placed "
                          "first (a first-fit placement: the problem may still fit; cpsat searches every "
                          "placement)")


class Timeline:
    """Idle gaps of one target, for insertion-based scheduling.

    The target is busy from 0 to ``tail`` except in the sorted, disjoint ``gaps`` (``gs[i]``,
    ``ge[i]``); a search only visits the gaps, which stay few when the schedule is dense.
    Zero-length slots never go into the timeline (instantaneous ops occupy nothing).
    """

    def __init__(self) -> None:
        self.gs: list[float] = []
        self.ge: list[float] = []
        self.tail = 0.0

    def earliest(self, ready: float, dur: float) -> float:
        """Earliest start >= ready of a ``dur``-long slot."""
        gs, ge = self.gs, self.ge
        i = bisect.bisect_right(ge, ready)  # first gap ending after ready
        while i < len(gs):
            t = max(ready, gs[i])
            if t + dur <= ge[i]:
                return t
            i += 1
        return max(self.tail, ready)

    def insert(self, start: float, end: float) -> None:
        """Mark ``[start, end)`` busy (it must lie in a gap or after the tail)."""
        if end <= start:
            return
        if start >= self.tail:
            if start > self.tail:
                self.gs.append(self.tail)
                self.ge.append(start)
            self.tail = end
            return
        i = bisect.bisect_right(self.gs, start) - 1
        gs, ge = self.gs[i], self.ge[i]
        new = [(a, b) for a, b in ((gs, start), (end, ge)) if b > a]
        self.gs[i:i + 1] = [a for a, _ in new]
        self.ge[i:i + 1] = [b for _, b in new]


def earliest_slot(lines: list[Timeline], rs: tuple[int, ...], ready: float, dur: float) -> float:
    """Earliest start >= ready of a ``dur``-long slot free on every timeline of ``rs``.

    Each timeline's ``earliest`` is monotone and never earlier than its argument, so iterating
    from ``ready`` climbs to the least common start (it never passes one)."""
    if len(rs) == 1:
        return lines[rs[0]].earliest(ready, dur)
    t = ready
    while True:
        t2 = t
        for r in rs:
            t2 = lines[r].earliest(t2, dur)
        if t2 == t:
            return t
        t = t2
