"""The pieces both bound modules use (:mod:`placer.solve.bounds`, :mod:`placer.solve.bounds_comm`):
the delay matrices of precedence edges, the min-max-load LP over units, and shaving an LP value to
stay valid within the solver's tolerances."""

from __future__ import annotations

import numpy as np

from placer.problem import PlacementProblem
from placer.solve.evaluate import Costs

__all__ = ["MinMaxLoadLP", "edge_delays", "minmax_load_lp", "shave", "unit_costs"]


def edge_delays(problem: PlacementProblem, costs: Costs) -> dict[tuple[int, int], np.ndarray]:
    """Delay matrix ``(T, T)`` of every precedence edge ``(u, v)``: ``[a, b]`` = max over the edge's
    tensors of ``link + entry[b]``, 0 on the diagonal (the delays of the CP-SAT model)."""
    p = problem
    out: dict[tuple[int, int], np.ndarray] = {}
    for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)):
        if u < 0:
            continue
        m = costs.link[k] + costs.entry[None, :]
        for v in cs:
            prev = out.get((u, v))
            out[(u, v)] = m if prev is None else np.maximum(prev, m)
    diag = np.arange(p.n_targets)
    for key, m in out.items():
        m = np.array(m, dtype=float)
        m[diag, diag] = 0.0
        out[key] = m
    return out


def shave(lp_value: float) -> float:
    """An LP optimum is exact only to the solver's tolerances: shave a hair so the bound stays valid."""
    return max(0.0, lp_value * (1 - 1e-9) - 1e-9)


def unit_costs(problem: PlacementProblem, costs: Costs) -> np.ndarray:
    """Cost of each placement unit on each target (inf where not allowed)."""
    p = problem
    out = np.empty((len(p.units), p.n_targets))
    for i, unit in enumerate(p.units):
        c = costs.cost[list(unit)].sum(axis=0)
        out[i] = np.where(p.allowed[unit[0]], c, np.inf)
    return out



class MinMaxLoadLP:
    """``min M s.t. sum_d x[u,d] = 1, sum_{d uses r} sum_u c[u,d] x[u,d] + offset[r] <= M,
    0 <= x <= 1`` over units, one load row per resource ``r`` (``problem.resource_sets``; the
    targets themselves when no core is shared).

    With ``num_stages`` < T also ``sum_{u,d} c[u,d] x[u,d] <= K M``; with ``memory`` the weight
    caps. Built once; :meth:`solve` changes only the offsets (per resource), so GLOP re-solves warm.
    """

    def __init__(self, problem: PlacementProblem, costs: Costs, num_stages: int | None = None,
                 memory: bool = False) -> None:
        from ortools.linear_solver import pywraplp

        p = problem
        uc = unit_costs(p, costs)
        n_u, t = uc.shape
        self._ok = pywraplp.Solver.OPTIMAL
        solver = pywraplp.Solver.CreateSolver("GLOP")
        inf = solver.infinity()
        self.m = m = solver.NumVar(0, inf, "M")
        self.load = []
        res = p.resource_sets
        for _ in range(p.n_resources):
            ct = solver.Constraint(-inf, 0.0)
            ct.SetCoefficient(m, -1.0)
            self.load.append(ct)
        total = None
        if num_stages is not None and num_stages < t:
            total = solver.Constraint(-inf, 0.0)
            total.SetCoefficient(m, -float(num_stages))
        uw = np.array([float(p.weight_bytes[list(u)].sum()) for u in p.units])
        mem = [solver.Constraint(-inf, float(p.memory_cap_bytes[d]))
               if memory and np.isfinite(p.memory_cap_bytes[d]) else None for d in range(t)]
        self.xs = np.empty((n_u, t), dtype=object)
        for i in range(n_u):
            one = solver.Constraint(1.0, 1.0)
            for d in range(t):
                if not np.isfinite(uc[i, d]):
                    continue
                x = solver.NumVar(0.0, 1.0, "")
                self.xs[i, d] = x
                one.SetCoefficient(x, 1.0)
                if uc[i, d] > 0:
                    for r in res[d]:
                        self.load[r].SetCoefficient(x, float(uc[i, d]))
                    if total is not None:
                        total.SetCoefficient(x, float(uc[i, d]))
                if mem[d] is not None and uw[i] > 0:
                    mem[d].SetCoefficient(x, float(uw[i]))
        objective = solver.Objective()
        objective.SetCoefficient(m, 1.0)
        objective.SetMinimization()
        self.solver = solver

    def solve(self, offset: np.ndarray | None = None) -> tuple[float, np.ndarray] | None:
        """Return ``(M, x)`` (x of shape (units, targets)), or None if GLOP fails."""
        inf = self.solver.infinity()
        for r, ct in enumerate(self.load):
            ct.SetBounds(-inf, -(0.0 if offset is None else float(offset[r])))
        if self.solver.Solve() != self._ok:
            return None
        frac = np.zeros(self.xs.shape)
        for (i, d), x in np.ndenumerate(self.xs):
            if x is not None:
                frac[i, d] = x.solution_value()
        return float(self.m.solution_value()), frac


def minmax_load_lp(problem: PlacementProblem, costs: Costs, num_stages: int | None = None,
                   offset: np.ndarray | None = None, memory: bool = False) -> tuple[float, np.ndarray] | None:
    """One-shot :class:`MinMaxLoadLP`."""
    return MinMaxLoadLP(problem, costs, num_stages, memory).solve(offset)
