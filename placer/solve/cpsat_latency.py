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
    ``shave_fraction`` > 0, shaved (:func:`~placer.solve.bounds_comm.shaved_bound`, at most that
    share of the time left once the hint is known), all on the rounded costs. With ``comm_bound``
    the per-target heads ``H`` and tails ``Q`` also enter the model: ``x[v,d] => s[v] >= H[v,d]`` and
    ``x[v,d] => e[v] + Q[v,d] <= M``, and ``x[v,d] = 0`` when ``H + c + Q`` exceeds ``UB``.
Hint and fallback
    The best of HEFT, HEFT looking ahead at the per-target tails ``Q`` (PEFT-like, option
    ``comm_bound``), LP-rounding + list scheduling, greedy and every single-target plan, and the
    price-guided dynamic list scheduling search (:class:`~placer.solve.heuristics.DynamicListSearch`,
    option ``dynamic``; it runs last, until a deterministic effort of 80 % of the heuristic time) —
    by the rounded objective; computed within ``heuristic_fraction`` of the time limit — is the
    hint and sets ``UB``; the returned plan is the best (float-evaluated) of CP-SAT's solution,
    re-timed, and those heuristic plans, so it is never worse than HEFT.
"""

from __future__ import annotations

import math
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
    build_seconds,
    canonical_assign,
    choose_resolution,
    first_use_values,
    interchangeable_classes,
    make_solver,
    reported_bound,
    rounding_slack,
    skipped_stats_plan,
    status_name,
    to_int,
)
from placer.solve.evaluate import Costs, latency_schedule, make_latency_plan, needed_transfers, order_by_start
from placer.solve.heuristics import DynamicListSearch, HeuristicError, heft, lp_list, priority_assign

__all__ = ["latency_candidates", "solve_latency"]


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
    """Solve latency mode with CP-SAT (see the module docstring)."""
    p = problem
    t0 = time.monotonic()
    n, t = p.n_ops, p.n_targets
    tw = float(options.get("transfer_weight", 0.0) or 0.0)
    r = choose_resolution(p, options.get("time_resolution_ms", "auto"))
    ci = Costs.rounded(p, r)
    fc = Costs.of(p)

    def float_obj(plan: Plan) -> float:
        return plan.makespan_ms + tw * sum(x.ms + x.entry_ms for x in plan.transfers)

    # ---------------------------------------------------------------- heuristics: hint and fallback
    share = float(options.get("heuristic_fraction", 0.3))
    comm = bool(options.get("comm_bound", True)) and t > 1
    ht_f = comm_heads_tails(p, fc) if comm else None  # float ms: HEFT's lookahead and the float bound
    cands = []
    if options.get("hint", True):
        span = share * max(0.0, ctx.deadline - t0)
        search = (DynamicListSearch(p, fc, deadline=t0 + 0.5 * span) if options.get("dynamic", True) and t > 1
                  else None)
        cands = latency_candidates(p, t0 + span, search=search, search_dtime=0.8 * span,
                                   tails=None if ht_f is None else ht_f[1])
    best_plan: Plan | None = None
    best_name = ""
    best_val = math.inf
    hint = None
    hint_obj = math.inf
    for name, assign, order in cands:
        _, f_end = latency_schedule(p, assign, order, fc)
        val = float(f_end.max()) + tw * _transfer_total(p, assign, fc)
        if val < best_val - 1e-12:
            best_val, best_name = val, name
            best_plan = make_latency_plan(p, assign, ctx.name, order=order, options=ctx.plan_options())
        s_i, e_i = latency_schedule(p, assign, order, ci)
        obj_i = float(e_i.max()) + tw * _transfer_total(p, assign, ci)
        if obj_i < hint_obj:
            hint_obj, hint = obj_i, (assign, s_i, e_i)

    # ---------------------------------------------------------------- bounds
    head, tail = heads_tails(p, ci)
    minc = np.where(p.allowed, ci.cost, np.inf).min(axis=1)
    h_dt = q_dt = None  # per-target heads / tails with communication (rounded units)
    if comm:
        h_dt, q_dt = comm_heads_tails(p, ci)
        head = np.maximum(head, h_dt.min(axis=1))
    # s[v] + c[v,d] + Q[v,d] <= makespan on the target d of v: s[v] <= UB - s_tail[v]
    s_tail = tail
    if h_dt is not None:
        s_tail = np.maximum(tail, (q_dt + np.where(p.allowed, ci.cost, np.inf)).min(axis=1))
    # the load bound's iterations stop at 60 % of the limit (many targets: milliseconds each)
    lb = max(float((head + s_tail).max()), math.ceil(load_bound(p, ci, deadline=t0 + 0.6 * ctx.time_limit)
                                                     - 1e-6))
    if options.get("window_bound", True) and t > 1:
        lb = max(lb, math.ceil(window_load_bound(p, ci, lb, deadline=time.monotonic() + 0.1 * ctx.remaining(),
                                                 heads_tails=None if h_dt is None else (h_dt, q_dt))
                               - 1e-6))
    lb = round(lb)
    # lb (rounded units) bounds the rounded makespan; for the floats: lb * r - slack, or the
    # critical path on the float numbers (cheap)
    chain_slack = rounding_slack(p, ci, "latency")
    lb_ms = max(lb * r - chain_slack, critical_path_bound(p, fc), path_bound(p, fc, *ht_f) if ht_f else 0.0)
    if best_plan is not None and ctx.remaining() < 2 * build_seconds(p, "latency") + 0.2:
        return skipped_stats_plan(best_plan, ctx, t0, lb_ms, r, best_name,
                                  "not enough time left to build the model")
    if hint is not None:
        ub = round(float(hint[2].max()))
    else:
        ub = int(np.where(p.allowed, ci.cost, 0).max(axis=1).sum()
                 + sum(float(ci.link[k].max()) + float(ci.entry.max()) for k in range(len(p.tensors))))
    frac = float(options.get("shave_fraction", 0.0) or 0.0)
    if comm and hint is not None and frac > 0 and ub > lb:  # bisection over "no schedule below L"
        shaved = shaved_bound(p, ci, lb, ub, deadline=time.monotonic() + frac * ctx.remaining(), steps=6)
        lb = max(lb, math.ceil(shaved - 1e-6))
        lb_ms = max(lb_ms, lb * r - chain_slack)
    ub = max(ub, lb)
    horizon = ub if tw == 0 else int(np.where(p.allowed, ci.cost, 0).max(axis=1).sum()
                                     + sum(float(ci.link[k].max()) + float(ci.entry.max())
                                           for k in range(len(p.tensors))))
    horizon = max(horizon, ub)

    classes = interchangeable_classes(p) if options.get("symmetry_breaking", True) else []
    pools = _pools(p, classes) if options.get("pool_identical", True) else []
    classes = [cl for cl in classes if cl not in pools]
    rep = list(range(t))  # representative target of each target's pool
    capacity = [1] * t
    for cl in pools:
        for d in cl:
            rep[d] = cl[0]
        capacity[cl[0]] = len(cl)
    model = cp_model.CpModel()

    # ---------------------------------------------------------------- variables
    unit_lits: list[dict[int, Any]] = []
    x: list[dict[int, Any]] = [{} for _ in range(n)]
    for ui, unit in enumerate(p.units):
        lits = {}
        for d in np.flatnonzero(p.allowed[unit[0]]):
            if rep[d] == d:
                lits[int(d)] = model.new_bool_var(f"x{unit[0]}_{d}")
        unit_lits.append(lits)
        for v in unit:
            x[v] = lits
    s = [model.new_int_var(int(head[v]), max(int(head[v]), int(horizon - s_tail[v])), f"s{v}")
         for v in range(n)]
    e, dur = [], []
    for v in range(n):
        lo = int(head[v] + minc[v])
        e_v = model.new_int_var(lo, max(lo, int(horizon - tail[v] + minc[v])), f"e{v}")
        cs_v = [to_int(ci.cost[v, d]) for d in x[v]]
        d_v = model.new_int_var(min(cs_v), max(cs_v), f"dur{v}")
        model.add(d_v == sum(c_ * lit for c_, lit in zip(cs_v, x[v].values())))
        model.add(e_v == s[v] + d_v)
        e.append(e_v)
        dur.append(d_v)
    makespan = model.new_int_var(lb, horizon, "makespan")

    # ---------------------------------------------------------------- constraints
    for lits in unit_lits:
        model.add_exactly_one(lits.values())
    per_target: list[list[Any]] = [[] for _ in range(t)]
    for v in range(n):
        for d, lit in x[v].items():
            size = to_int(ci.cost[v, d])
            if len(x[v]) == 1:
                model.add(lit == 1)
            if size == 0:  # instantaneous: occupies no time on its target (see placer.plan)
                continue
            if len(x[v]) == 1:
                iv = model.new_fixed_size_interval_var(s[v], size, f"I{v}_{d}")
            else:
                iv = model.new_optional_fixed_size_interval_var(s[v], size, lit, f"I{v}_{d}")
            per_target[d].append(iv)
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

    # edge delays: max over the edge's tensors of link + entry, per target pair (a != b used below)
    delays = edge_delays(p, ci)
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
    for d in range(t):
        if np.isfinite(p.memory_cap_bytes[d]):
            terms = [(round(p.weight_bytes[list(unit)].sum()), lits[d])
                     for unit, lits in zip(p.units, unit_lits) if d in lits]
            terms = [(w_, lit) for w_, lit in terms if w_ > 0]
            if terms and sum(w_ for w_, _ in terms) > p.memory_cap_bytes[d]:
                model.add(sum(w_ * lit for w_, lit in terms) <= math.floor(p.memory_cap_bytes[d]))
    for v in range(n):
        if not p.succs[v]:
            model.add(makespan >= e[v])
    if h_dt is not None:  # per target: x[v,d] => s[v] >= H[v,d] and e[v] + Q[v,d] <= makespan
        for v in range(n):
            if len(x[v]) < 2:
                continue
            for d, lit in x[v].items():
                if h_dt[v, d] + ci.cost[v, d] + q_dt[v, d] > horizon:
                    model.add(lit == 0)
                    continue
                if h_dt[v, d] > head[v]:
                    model.add(s[v] >= int(h_dt[v, d])).only_enforce_if(lit)
                if q_dt[v, d] + ci.cost[v, d] > s_tail[v]:
                    model.add(makespan >= e[v] + int(q_dt[v, d])).only_enforce_if(lit)
    if options.get("redundant", True):
        for users in p.resource_users:
            terms = [(to_int(ci.cost[v, d]), x[v][d]) for d in users for v in range(n) if d in x[v]]
            terms = [(c_, lit) for c_, lit in terms if c_ > 0]
            if terms:
                model.add(capacity[users[0]] * makespan >= sum(c_ * lit for c_, lit in terms))
        width = _max_parallel(p)
        if width > 1 and n <= int(options.get("cumulative_max_ops", 3000)):
            mains = [model.new_interval_var(s[v], dur[v], e[v], f"J{v}") for v in range(n)]
            model.add_cumulative(mains, [1] * n, width)
    y = add_first_use_order(model, p, unit_lits, classes) if classes else {}

    # ---------------------------------------------------------------- objective
    transfer_terms: list[tuple[int, Any]] = []
    need: dict[tuple[int, int], Any] = {}
    zvars: dict[tuple[int, int, int], Any] = {}
    if tw > 0:
        for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)):
            if u < 0 or not cs:
                continue
            for b in range(t):
                readers = [x[v][b] for v in cs if b in x[v] and x[v] is not x[u]]
                if not readers:
                    continue
                nk = model.new_bool_var(f"need{k}_{b}")
                for lit in readers:
                    model.add_implication(lit, nk)
                need[(k, b)] = nk
                for a, xa in x[u].items():
                    if a == b:
                        continue
                    c_ = to_int(ci.link[k, a, b] + ci.entry[b])
                    if c_ <= 0:
                        continue
                    z = model.new_bool_var(f"z{k}_{a}_{b}")
                    model.add_bool_or([xa.Not(), nk.Not(), z])
                    zvars[(k, a, b)] = z
                    transfer_terms.append((c_, z))
        scale = 1000
        wt = round(tw * scale)
        model.minimize(scale * makespan + wt * sum(c_ * z for c_, z in transfer_terms))
    else:
        scale, wt = 1, 0
        model.minimize(makespan)

    # ---------------------------------------------------------------- hint
    if hint is not None:
        h_assign = canonical_assign(p, hint[0], classes) if classes else hint[0]
        hs, he = latency_schedule(p, h_assign, order_by_start(p, hint[1]), ci)
        h_assign = np.array([rep[d] for d in h_assign])
        for v in range(n):
            model.add_hint(s[v], round(hs[v]))
            model.add_hint(e[v], round(he[v]))
            model.add_hint(dur[v], round(he[v] - hs[v]))
        for lits, unit in zip(unit_lits, p.units):
            for d, lit in lits.items():
                model.add_hint(lit, int(h_assign[unit[0]] == d))
        model.add_hint(makespan, round(float(he.max())))
        for key, val in first_use_values(p, h_assign, classes).items():
            if key in y:
                model.add_hint(y[key], val)
        if tw > 0:
            for (k, b), nk in need.items():
                model.add_hint(nk, int(any(h_assign[v] == b for v in p.tensor_consumers[k])))
            for (k, a, b), z in zvars.items():
                u = p.tensor_producer[k]
                model.add_hint(z, int(h_assign[u] == a and any(h_assign[v] == b for v in p.tensor_consumers[k])))

    # ---------------------------------------------------------------- solve
    margin = 0.1 + 5e-5 * n  # model hand-over, CP-SAT overrunning on a loaded machine, re-timing
    size = int(p.allowed.sum())
    solver = make_solver(options, ctx.remaining() - margin, ctx.seed, size)
    status = solver.solve(model)
    name = status_name(status)
    if status == cp_model.INFEASIBLE:
        if best_plan is not None:  # cannot happen with a correct model; keep the heuristic rather than fail
            name = "FEASIBLE"
        else:
            raise ProblemError("cpsat: the problem is infeasible (memory caps, colocation, pins)")
    if status == cp_model.MODEL_INVALID:  # pragma: no cover - a bug, not a user error
        raise RuntimeError(f"cpsat: invalid model: {model.validate()}")

    plan = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assign = np.empty(n, dtype=int)
        for lits, unit in zip(unit_lits, p.units):
            d = next(d for d, lit in lits.items() if solver.boolean_value(lit))
            assign[list(unit)] = d
        starts = np.array([solver.value(s[v]) for v in range(n)], dtype=float)
        ends = np.array([solver.value(e[v]) for v in range(n)], dtype=float)
        for cl in pools:
            _color_pool(assign, starts, ends, cl)
        plan = make_latency_plan(p, assign, ctx.name, order=order_by_start(p, starts), options=ctx.plan_options())
    source = "cpsat"
    if plan is None or (best_plan is not None and float_obj(best_plan) < float_obj(plan) - 1e-9):
        if best_plan is None:
            raise ProblemError(f"cpsat: no solution within the time limit (status {name})")
        plan, source = best_plan, best_name
        if name == "OPTIMAL" or name == "UNKNOWN":  # the rounded optimum re-timed in floats lost to a heuristic: no proof
            name = "FEASIBLE"
    # ---------------------------------------------------------------- stats
    bound_units = solver.best_objective_bound if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None
    cp_bound = 0.0
    if bound_units is not None and math.isfinite(bound_units):
        cp_bound = _float_objective_bound(p, ci, bound_units / scale * r, tw, wt / scale)
    objective = float_obj(plan)
    bound_ms, proven = reported_bound(objective, [lb_ms, cp_bound])
    if name == "OPTIMAL" and not proven:
        name = "FEASIBLE"  # optimal for the rounded numbers only
    gap = 0.0 if objective <= 0 else max(0.0, (objective - bound_ms) / objective)
    stats = SolverStats(status=name, objective=objective, best_bound=bound_ms, gap=gap,
                        wall_s=time.monotonic() - t0,
                        extra={"resolution_ms": r, "source": source, "hint": best_name,
                               "hint_objective": float_obj(best_plan) if best_plan else None,
                               "cpsat_wall_s": solver.wall_time, "lower_bound_ms": lb_ms,
                               "rounding_slack_ms": chain_slack,
                               "interchangeable_targets": [[p.targets[d] for d in cl] for cl in classes],
                               "pooled_targets": [[p.targets[d] for d in cl] for cl in pools]})
    return _replace_stats(plan, stats, ctx)


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
