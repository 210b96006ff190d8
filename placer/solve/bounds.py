"""Lower bounds on the optimum, used to tighten CP-SAT models and to report gaps.

Latency mode
    * ``head[v]``: earliest start of ``v`` = longest path from the sources with each op at its
      cheapest allowed cost and each edge at its cheapest possible delay
      (``min_{a in A(u), b in A(v)} delay(a, b)``, 0 if ``u`` and ``v`` can share a target).
    * ``tail[v]``: cheapest cost of ``v`` plus the longest such path after it, so any schedule has
      ``start[v] + tail[v] <= makespan``.
    * critical path ``max_v head[v] + tail[v]``.
    * load: the LP relaxation of the assignment, ``min M  s.t.  sum_d x[v,d] = 1,
      sum_{d uses r} sum_v c[v,d] x[v,d] <= M  for every resource r,  x >= 0`` over allowed pairs
      (colocation groups as one unit): every resource (a target, or a core shared by targets,
      ``PlacementProblem.resource_sets``) runs one op at a time, so its busy time is a lower bound
      on the makespan. Without shared cores the resources are the targets.
    * per-target heads / tails (:func:`target_heads_tails`): ``H[v,d]`` earliest start of ``v``
      if it runs on ``d`` and ``Q[v,d]`` least time from its end to the makespan, minimizing over
      the targets of the other ops (with the actual pairwise delays, so a transfer into ``d`` counts).
    * window load (:func:`window_load_bound`): the load LP where each target must also pay for the
      idle time it cannot avoid at the start and at the end. In ``[0, tau]`` an op can run at most
      ``min(c[v,d], (tau - H[v,d])+)`` on ``d`` and in ``[M - tau, M]`` at most
      ``min(c[v,d], (tau - Q[v,d])+)``, so ``load_d + (tau - that work) + (tau' - that work)
      <= M`` for windows with ``tau + tau' <= M`` (``tau, tau' <= LB / 2`` for a proven ``LB``);
      rows are added as cutting planes. It sees, e.g., the targets idle while a lone source op runs.
      With shared cores the same holds per resource (loads and window work summed over the
      targets using it). It is fed the communication-aware heads and tails of
      :mod:`placer.solve.bounds_comm` (neighbours sharing a target run in turn).
    * :func:`latency_bound` also takes the path bound of :mod:`placer.solve.bounds_comm`
      (``max_v min_d H[v,d] + c[v,d] + Q[v,d]`` with those heads and tails).
Pipeline mode
    * the same LP with ``sum_d sum_v c[v,d] x[v,d] <= K * B`` added (at most K stages; each
      stage's time is at most its resources' load <= B), and ``B >= min_d c[unit, d]`` for every
      unit.
"""

from __future__ import annotations

import time

import numpy as np

from placer.problem import PlacementProblem
from placer.solve.bound_utils import MinMaxLoadLP, edge_delays, minmax_load_lp, shave, unit_costs
from placer.solve.bounds_comm import comm_heads_tails, path_bound
from placer.solve.evaluate import Costs

__all__ = [
    "MinMaxLoadLP",
    "critical_path_bound",
    "dual_load",
    "dual_load_bound",
    "edge_delays",
    "edge_min_delay",
    "heads_tails",
    "latency_bound",
    "load_bound",
    "minmax_load_lp",
    "pipeline_bound",
    "shave",
    "target_heads_tails",
    "window_load_bound",
]


def edge_min_delay(problem: PlacementProblem, costs: Costs) -> dict[tuple[int, int], float]:
    """Cheapest delay of each precedence edge ``(u, v)`` over allowed target pairs."""
    p = problem
    allowed = p.allowed
    out: dict[tuple[int, int], float] = {}
    for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)):
        if u < 0:
            continue
        au = np.flatnonzero(allowed[u])
        for v in cs:
            av = np.flatnonzero(allowed[v])
            if np.intersect1d(au, av).size:
                m = 0.0
            else:
                m = float(min(costs.link[k, a, b] + costs.entry[b] for a in au for b in av))
            out[(u, v)] = max(out.get((u, v), 0.0), m)
    return out


def heads_tails(problem: PlacementProblem, costs: Costs) -> tuple[np.ndarray, np.ndarray]:
    """``head[v]`` (earliest start) and ``tail[v]`` (own min cost + longest path after it)."""
    p = problem
    n = p.n_ops
    minc = np.where(p.allowed, costs.cost, np.inf).min(axis=1)
    delay = edge_min_delay(p, costs)
    head = np.zeros(n)
    for v in range(n):  # ops are in topological order
        for u in p.preds[v]:
            head[v] = max(head[v], head[u] + minc[u] + delay[(u, v)])
    tail = minc.copy()
    for u in range(n - 1, -1, -1):
        for v in p.succs[u]:
            tail[u] = max(tail[u], minc[u] + delay[(u, v)] + tail[v])
    return head, tail


def critical_path_bound(problem: PlacementProblem, costs: Costs) -> float:
    """``max_v head[v] + tail[v]``."""
    head, tail = heads_tails(problem, costs)
    return float((head + tail).max())


def dual_load_bound(unit_costs: np.ndarray, num_stages: int | None = None, iterations: int = 80,
                    tol: float = 1e-7, resources: tuple[tuple[int, ...], ...] | None = None,
                    deadline: float | None = None) -> float:
    """Lagrangian lower bound of the min-max-load LP (see :func:`dual_load`)."""
    return dual_load(unit_costs, num_stages, None, iterations, tol, resources, deadline)[0]


def dual_load(unit_costs: np.ndarray, num_stages: int | None = None, offset: np.ndarray | None = None,
              iterations: int = 80, tol: float = 1e-7, resources: tuple[tuple[int, ...], ...] | None = None,
              deadline: float | None = None) -> tuple[float, np.ndarray]:
    """Lagrangian (dual) lower bound of the min-max-load LP, maximized by Kelley's cutting planes.

    For ``lam >= 0`` on the resources (and ``mu >= 0`` when ``K < T``) with
    ``sum(lam) + K mu = 1``, weak duality gives ``B >= g(lam, mu) = sum_u min_d (price_d + mu) c[u,d]``
    with ``price_d = sum_{r in resources[d]} lam_r`` (a target's time occupies all its resources),
    so every iterate is a valid bound and the best is returned. ``g`` is concave and its
    supergradient is the load vector (per resource) of the minimizing assignment, so a master LP
    over at most ``R + 1`` variables finds the next point. Each step is one vectorized pass over
    the costs: far cheaper than the full LP on big graphs, and within ``tol`` (relative) of it on
    convergence. ``resources`` (``PlacementProblem.resource_sets``; default: every target its own
    resource) maps targets to resources; ``offset[r]`` is a constant added to resource ``r``'s
    load (term ``lam_r offset_r``). Returns the best bound and the prices ``price (+ mu)`` per
    target that achieve it. ``deadline`` (``time.monotonic()``): no new iteration starts after it
    (every iterate is a valid bound; with many targets one iteration takes milliseconds).
    """
    from ortools.linear_solver import pywraplp

    uc = np.asarray(unit_costs, dtype=float)
    n_u, t = uc.shape
    inc = None  # (T, R) incidence of targets on resources; None = identity
    n_r = t
    if resources is not None and any(rs != (d,) for d, rs in enumerate(resources)):
        n_r = 1 + max(r for rs in resources for r in rs)
        inc = np.zeros((t, n_r))
        for d, rs in enumerate(resources):
            inc[d, list(rs)] = 1.0
    use_mu = num_stages is not None and num_stages < t
    dim = n_r + 1 if use_mu else n_r
    big = np.where(np.isfinite(uc), uc, 0.0)
    finite = np.isfinite(uc)
    rows = np.arange(n_u)
    point = np.full(dim, 1.0 / (n_r + (num_stages if use_mu else 0)))
    if not use_mu:
        point = np.full(n_r, 1.0 / n_r)
    off = np.zeros(n_r) if offset is None else np.asarray(offset, dtype=float)

    def prices(pt: np.ndarray) -> np.ndarray:
        lam_r = pt[:n_r] if inc is None else inc @ pt[:n_r]
        return lam_r + (pt[n_r] if use_mu else 0.0)

    cuts: list[tuple[float, list[tuple[int, float]]]] = []  # (rhs, coefficients of x) per cut
    best = 0.0
    best_lam = prices(point)
    for _ in range(iterations):
        lam = prices(point)
        scaled = np.where(finite, big * lam[None, :], np.inf)
        choice = np.argmin(scaled, axis=1)
        g = float(scaled[rows, choice].sum() + (point[:n_r] * off).sum())
        if g > best:
            best, best_lam = g, lam
        load_t = np.bincount(choice, weights=big[rows, choice], minlength=t)
        load = (load_t if inc is None else load_t @ inc) + off
        grad = np.append(load, load.sum() if inc is None else load_t.sum()) if use_mu else load
        xk = point.copy()  # the cut's row, made once: theta - grad . x <= g - grad . xk
        cuts.append((g - sum(float(grad[j]) * float(xk[j]) for j in range(dim)),
                     [(j, -float(grad[j])) for j in range(dim) if grad[j] != 0.0]))
        # master: max theta s.t. theta <= g_k + grad_k . (x - x_k), x in the (weighted) simplex
        # built with the low-level API (the natural one cost ~25 s at 256 targets: one Python
        # expression object per term); the same LP, row by row, as the expressions would make it
        solver = pywraplp.Solver.CreateSolver("GLOP")
        xs = [solver.NumVar(0.0, 1.0, "") for _ in range(dim)]
        theta = solver.NumVar(0.0, solver.infinity(), "")
        weights = [1.0] * n_r + ([float(num_stages)] if use_mu else [])
        row = solver.Constraint(1.0, 1.0)
        for wgt, x in zip(weights, xs):
            row.SetCoefficient(x, wgt)
        for rhs, coefs in cuts:
            row = solver.Constraint(-solver.infinity(), rhs)
            row.SetCoefficient(theta, 1.0)
            for j, c in coefs:
                row.SetCoefficient(xs[j], c)
        objective = solver.Objective()
        objective.SetCoefficient(theta, 1.0)
        objective.SetMaximization()
        if solver.Solve() != pywraplp.Solver.OPTIMAL:
            break
        upper = theta.solution_value()
        point = np.array([x.solution_value() for x in xs])
        if upper - best <= tol * max(1.0, abs(upper)):
            break
        if deadline is not None and time.monotonic() > deadline:
            break
    return best, best_lam


def load_bound(problem: PlacementProblem, costs: Costs, num_stages: int | None = None,
               lp_max_size: int = 12000, deadline: float | None = None) -> float:
    """Bound on the largest per-resource load (see the module docstring): the LP optimum (GLOP) for
    problems with at most ``lp_max_size`` (unit, target) pairs, else its Lagrangian dual bound."""
    uc = unit_costs(problem, costs)
    if np.isfinite(uc).sum() > lp_max_size:
        return shave(dual_load_bound(uc, num_stages, resources=problem.resource_sets, deadline=deadline))
    res = minmax_load_lp(problem, costs, num_stages)
    if res is None:  # pragma: no cover
        uc = unit_costs(problem, costs)
        return float(uc.min(axis=1).sum() / problem.n_targets)
    return shave(res[0])


def latency_bound(problem: PlacementProblem, costs: Costs | None = None, load: float | None = None,
                  heads_tails: tuple[np.ndarray, np.ndarray] | None = None, comm: bool = True) -> float:
    """Best of the critical-path, communication-aware path (:func:`~placer.solve.bounds_comm.path_bound`,
    unless ``comm`` is false) and load bounds on the makespan (``load``: an already computed load
    bound; ``heads_tails``: already computed :func:`~placer.solve.bounds_comm.comm_heads_tails` of
    ``costs``)."""
    c = costs or Costs.of(problem)
    h, q = heads_tails if heads_tails is not None else (None, None)
    path = path_bound(problem, c, h, q) if comm or heads_tails is not None else 0.0
    return max(critical_path_bound(problem, c), path, load_bound(problem, c) if load is None else load)


def pipeline_bound(problem: PlacementProblem, costs: Costs | None = None, num_stages: int | None = None) -> float:
    """Lower bound on the bottleneck with at most ``num_stages`` stages."""
    c = costs or Costs.of(problem)
    uc = unit_costs(problem, c)
    return max(float(uc.min(axis=1).max()), load_bound(problem, c, num_stages))


# ---------------------------------------------------------------------- per-target heads and the window LP
def target_heads_tails(problem: PlacementProblem, costs: Costs,
                       delays: dict[tuple[int, int], np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-target heads and tails, ``(n_ops, T)`` arrays, ``inf`` where ``v`` may not go.

    ``H[v, d]``: earliest start of ``v`` if it runs on ``d``, ``max`` over predecessors ``u`` of
    ``min_a H[u, a] + c[u, a] + delay_uv[a, d]``. ``Q[v, d]``: least time between the end of ``v``
    on ``d`` and the makespan, ``max`` over successors ``w`` of ``min_b delay_vw[d, b] + c[w, b] +
    Q[w, b]`` (0 for sinks). Whatever targets the other ops get, these hold in every schedule.
    """
    p = problem
    n, t = p.n_ops, p.n_targets
    cost = np.where(p.allowed, costs.cost, np.inf)
    dl = delays if delays is not None else edge_delays(p, costs)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for (u, v) in dl:
        preds[v].append(u)
        succs[u].append(v)
    head = np.zeros((n, t))
    for v in range(n):  # topological order
        for u in preds[v]:
            arrive = ((head[u] + cost[u])[:, None] + dl[(u, v)]).min(axis=0)
            np.maximum(head[v], arrive, out=head[v])
    after = np.zeros((n, t))
    for u in range(n - 1, -1, -1):
        for w in succs[u]:
            need = (dl[(u, w)] + (cost[w] + after[w])[None, :]).min(axis=1)
            np.maximum(after[u], need, out=after[u])
    ok = p.allowed
    return np.where(ok, head, np.inf), np.where(ok, after, np.inf)


def window_load_bound(problem: PlacementProblem, costs: Costs, lower: float = 0.0, *,
                      deadline: float | None = None, max_rounds: int = 8, n_windows: int = 48,
                      max_pairs: int = 40000,
                      heads_tails: tuple[np.ndarray, np.ndarray] | None = None) -> float:
    """The load LP strengthened with the idle time each target must have at the start and the end.

    With ``H``, ``Q`` of :func:`target_heads_tails`, an op ``v`` on ``d`` can run at most
    ``a_v(tau) = min(c[v,d], (tau - H[v,d])+)`` of its time inside ``[0, tau]`` and at most
    ``b_v(tau') = min(c[v,d], (tau' - Q[v,d])+)`` inside ``[M - tau', M]``; the rest of ``[0, M]``
    holds at most ``M - tau - tau'`` of busy time when ``tau + tau' <= M``. So for every target
    ``load_d + (tau - sum_v a_v(tau) x[v,d]) + (tau' - sum_v b_v(tau') x[v,d]) <= M``: the LP
    ``min M  s.t.  sum_d x[u,d] = 1,  sum_u c[u,d] x[u,d] + S_d + E_d <= M,
    S_d >= tau - sum_u a_u(tau) x[u,d],  E_d >= tau - sum_u b_u(tau) x[u,d],  S, E, x >= 0``
    (units: colocation groups, their members' terms summed) is a lower bound on the makespan for
    windows ``tau, tau' <= lower / 2`` when ``lower`` is already a proven bound. Window rows are
    added as cutting planes (the most violated ``tau`` per target and side, over ``n_windows``
    candidates, at most ``max_rounds`` rounds). Returns ``lower`` when the LP is too big
    (``max_pairs`` allowed (unit, target) pairs), fails, or runs past ``deadline`` (the last solved
    value if any, which is valid too). Solved with GLOP (as the other LPs here); the LP value
    is shaved by ``1e-7`` (relative and absolute) to stay valid within the solver's tolerances.
    ``H`` and ``Q`` are the communication-aware ones of
    :func:`~placer.solve.bounds_comm.comm_heads_tails` (at least those of :func:`target_heads_tails`),
    or ``heads_tails`` when given (any valid per-target heads and tails).

    With shared cores the rows are per resource ``r`` (``problem.resource_sets``) rather than per
    target: the ops of all targets using ``r`` never overlap, so ``sum_{d uses r} load_d + S_r +
    E_r <= M`` with ``S_r >= tau - sum_{d uses r} sum_u a_u(tau) x[u,d]`` (and ``E_r`` alike).
    """
    p = problem
    if lower <= 0 or int(p.allowed.sum()) > max_pairs:
        return lower
    if deadline is not None and time.monotonic() >= deadline:  # no time: the arrays below are not free
        return lower
    if heads_tails is None:
        heads_tails = comm_heads_tails(p, costs)
    taus, a, b = _window_work(p, costs, lower, n_windows, heads_tails)
    lp = _WindowLP(p, unit_costs(p, costs))
    best = lower
    added: set[tuple[int, int, int]] = set()
    for _ in range(max_rounds + 1):
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            lp.solver.SetTimeLimit(max(1, int(1000 * left)))  # one Solve() cannot be interrupted otherwise
        if not lp.solve():
            break
        best = max(best, lp.m.solution_value() * (1 - 1e-7) - 1e-7)  # LP tolerances: keep it valid
        rows = lp.violated_windows(taus, ((0, a, lp.s_var), (1, b, lp.e_var)), lower, added)
        for side, r, w, coef, var in rows:
            added.add((side, r, w))
            lp.add_window_row(float(taus[w]), r, w, coef, var)
        if not rows:
            break
    return best


def _window_work(p: PlacementProblem, costs: Costs, lower: float, n_windows: int,
                 heads_tails: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The candidate windows ``tau`` (up to ``lower / 2``) and, per (unit, target, window), the
    time that can fall inside ``[0, tau]`` (``a``) and inside ``[M - tau, M]`` (``b``)."""
    head, after = heads_tails
    cost = np.where(p.allowed, costs.cost, 0.0)
    taus = 0.5 * lower * (np.arange(1, n_windows + 1) / n_windows) ** 2
    # per (op, target, window): time that can fall inside the window
    h = np.where(p.allowed, head, np.inf)
    q = np.where(p.allowed, after, np.inf)
    units = p.units
    ui = np.empty(p.n_ops, dtype=int)
    for i, unit in enumerate(units):
        ui[list(unit)] = i
    n_u = len(units)

    def per_unit(ops_val: np.ndarray) -> np.ndarray:  # (n_ops, T, W) -> (units, T, W)
        out = np.zeros((n_u,) + ops_val.shape[1:])
        np.add.at(out, ui, ops_val)
        return out

    a = per_unit(np.minimum(cost[:, :, None], np.maximum(taus[None, None, :] - h[:, :, None], 0.0)))
    b = per_unit(np.minimum(cost[:, :, None], np.maximum(taus[None, None, :] - q[:, :, None], 0.0)))
    return taus, a, b


class _WindowLP:
    """The GLOP model of :func:`window_load_bound`: the load rows per resource with their start and
    end idle variables ``S_r``, ``E_r``, and ``x[u, d]``; window rows are added as cuts."""

    def __init__(self, p: PlacementProblem, uc: np.ndarray) -> None:
        from ortools.linear_solver import pywraplp  # OR-Tools is loaded on first use

        self.p = p
        t = p.n_targets
        n_u = len(uc)
        solver = pywraplp.Solver.CreateSolver("GLOP")  # GLOP: one unexplained crash was seen around CLP
        self.solver, self.optimal = solver, pywraplp.Solver.OPTIMAL
        self.inf = inf = solver.infinity()
        self.m = m = solver.NumVar(0, inf, "M")
        n_r = p.n_resources  # rows per resource (= per target when no core is shared)
        res = p.resource_sets
        self.s_var = [solver.NumVar(0, inf, f"S{r}") for r in range(n_r)]
        self.e_var = [solver.NumVar(0, inf, f"E{r}") for r in range(n_r)]
        self.xs = xs = np.empty((n_u, t), dtype=object)
        loads = []
        for r in range(n_r):
            ct = solver.Constraint(-inf, 0.0)
            ct.SetCoefficient(m, -1.0)
            ct.SetCoefficient(self.s_var[r], 1.0)
            ct.SetCoefficient(self.e_var[r], 1.0)
            loads.append(ct)
        for i in range(n_u):
            one = solver.Constraint(1.0, 1.0)
            for d in range(t):
                if not np.isfinite(uc[i, d]):
                    continue
                x = solver.NumVar(0.0, 1.0, "")
                xs[i, d] = x
                one.SetCoefficient(x, 1.0)
                if uc[i, d] > 0:
                    for r in res[d]:
                        loads[r].SetCoefficient(x, float(uc[i, d]))
        objective = solver.Objective()
        objective.SetCoefficient(m, 1.0)
        objective.SetMinimization()

    def solve(self) -> bool:
        """Solve; True if optimal."""
        return self.solver.Solve() == self.optimal

    def violated_windows(self, taus: np.ndarray, sides: tuple, lower: float,
                         added: set[tuple[int, int, int]]) -> list[tuple]:
        """Per side and resource, the most violated window of the current solution not added yet:
        ``(side, resource, window, coef, var)`` rows."""
        p, xs = self.p, self.xs
        frac = np.zeros(xs.shape)
        for (i, d), x in np.ndenumerate(xs):
            if x is not None:
                frac[i, d] = x.solution_value()
        slack = [np.array([x.solution_value() for x in var]) for var in (self.s_var, self.e_var)]
        rows = []
        for side, coef, var in sides:
            cover = np.einsum("ud,udw->dw", frac, coef)  # (T, W)
            if p.shares_resources:  # (R, W): the window work of every target using the resource
                cover = np.array([cover[list(u)].sum(axis=0) for u in p.resource_users])
            for r in range(p.n_resources):
                viol = taus - cover[r] - slack[side][r]
                w = int(np.argmax(viol))
                if viol[w] > 1e-7 * max(1.0, lower) and (side, r, w) not in added:
                    rows.append((side, r, w, coef, var))
        return rows

    def add_window_row(self, tau: float, r: int, w: int, coef: np.ndarray, var: list) -> None:
        """``var[r] >= tau - sum_{d uses r} sum_u coef[u, d, w] x[u, d]``."""
        row = self.solver.Constraint(tau, self.inf)
        row.SetCoefficient(var[r], 1.0)
        for d in self.p.resource_users[r]:
            for i in np.flatnonzero(coef[:, d, w] > 0):
                row.SetCoefficient(self.xs[i, d], float(coef[i, d, w]))
