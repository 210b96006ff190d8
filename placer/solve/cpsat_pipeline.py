r"""CP-SAT model for pipeline mode (minimum bottleneck, then minimum latency).

A stage is the set of ops on one used target, so "K stages on distinct targets with
``stage(u) <= stage(v)`` on every edge" is "an assignment whose used targets can be ordered so
that every edge goes forward": each target gets a position ``pos[d]`` (a permutation) and every op
the position of its target.

Notation as in :mod:`placer.solve.cpsat_latency`; ``K`` = ``num_stages`` (default: number of
targets); ``link[k,a,b]`` link time of tensor ``k``; ``snd[a,b]`` / ``rcv[a,b]`` are 1 if
``link_charge[a][b]`` charges the sender / receiver; ``entry[b]`` partition overhead.

Variables
    ``x[v,d]`` as in latency mode; ``used[d] >= x[v,d]``; ``pos[d] in [0, T-1]``;
    ``sigma[v] in [0, T-1]`` (stage of ``v``, shared by a colocation group);
    ``need[k,b] >= x[v,b]`` for each consumer ``v`` of ``k``;
    ``z[k,a,b] >= x[prod(k),a] + need[k,b] - 1`` for ``a != b`` (the copy of ``k`` from ``a`` to
    ``b``; one per (tensor, destination), however many consumers read it there);
    ``L[d]`` stage time of target ``d``; ``B`` the bottleneck.
Constraints
    * ``sum_d x[v,d] = 1``; memory as in latency mode
    * ``AllDifferent(pos)``; ``x[v,d] => sigma[v] = pos[d]``
    * ``sigma[u] <= sigma[v]`` for every edge; with ``contiguous=True`` also
      ``sigma[ops[i]] <= sigma[ops[i+1]]`` for consecutive ops of the problem's op order, i.e.
      every stage is one contiguous run of that fixed topological order (the space the ``dp``
      solver searches). Without it, stages are any monotone split: each prefix union of stages is
      a downset (closed under predecessors), i.e. every stage is a difference of two nested
      downsets.
    * ``sum_d used[d] <= K``; unused targets take the last positions
      (``not used[d] => pos[d] >= sum used``)
    * ``L[d] = sum_v c[v,d] x[v,d] + sum_{k,a} z[k,a,d] (rcv[a,d] link[k,a,d] + entry[d])
      + sum_{k,b} z[k,d,b] snd[d,b] link[k,d,b]`` (with ``link_broadcast`` the send part of tensor
      ``k`` is its largest ``snd link`` over the destinations: level literals ``y[k,d,l] >= z[k,d,b]``
      for every ``b`` whose cost is ``>= l``, priced by the level increments);
      ``B >= sum_{d uses r} L[d]`` for every
      resource ``r`` (``problem.resource_sets``: ``B >= L[d]`` per target when no core is shared;
      stages on targets sharing a core add up on it)
    * redundant: ``sum_d L[d] <= K * B``; symmetry breaking between interchangeable targets
Objective (lexicographic, two solves)
    phase 0 (``contiguous=False`` only, option ``contiguous_warm_start``): the same model with the
    contiguity constraints, solved for ``warm_start_fraction`` of the time; contiguous splits are
    a much smaller space that CP-SAT explores quickly, and their best is a feasible hint;
    phase 1: ``minimize B``; phase 2: fix ``B <= B*`` (phase 1's best) and ``minimize sum_d L[d]``
    (the latency of one request: the stages run one after the other). Phase 2 is hinted with
    phase 1's solution. ``z`` / ``need`` only have lower bounds: every cost is non-negative, so
    at an optimum they are exact, and the Plan is re-evaluated from the assignment anyway.
Warm start: the ideals DP
    Without ``contiguous`` (option ``ideals``, default on), :mod:`placer.solve.ideals` runs first
    for at most ``ideals_fraction`` (0.5) of the time. When it completes, its plan is the hint and
    the fallback, and its optimum a lower bound that includes communication; when its prices are
    exact (separable: see that module) its plan is the optimum and is returned without building
    the model.
Hint and fallback
    The best pipeline among the contiguous balanced splits, HEFT / greedy / single-target
    assignments repaired into pipelines; the returned plan is never worse than that hint.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from placer.errors import ProblemError
from placer.plan import Plan, SolverStats
from placer.problem import PlacementProblem
from placer.solve.base import SolveContext
from placer.solve.bounds import pipeline_bound
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
from placer.solve.evaluate import Costs, better, make_pipeline_plan, pipeline_eval
from placer.solve.ideals import ideals_bound, ideals_proven, ideals_warm_start, proven_bound
from placer.solve.pipeline_candidates import pipeline_candidates

__all__ = ["pipeline_candidates", "solve_pipeline"]  # pipeline_candidates: re-exported


def solve_pipeline(problem: PlacementProblem, ctx: SolveContext, options: dict[str, Any]) -> Plan:
    """Solve pipeline mode with CP-SAT (see the module docstring)."""
    p = problem
    t0 = time.monotonic()
    n, t = p.n_ops, p.n_targets
    K = ctx.max_stages(p)
    contiguous = bool(ctx.contiguous)
    r = choose_resolution(p, options.get("time_resolution_ms", "auto"))
    ci = Costs.rounded(p, r)

    # ---------------------------------------------------------------- heuristics: hint and fallback
    best_plan: Plan | None = None
    best_name = ""
    hint = None
    hint_key = (math.inf, math.inf)
    dp = ideals_warm_start(p, ctx, options, t0)  # every monotone pipeline, exact when prices are separable
    dp_bound = 0.0
    if dp is not None:
        best_plan = make_pipeline_plan(p, dp.assign, ctx.name, order=dp.stage_targets,
                                       options=ctx.plan_options())
        best_name = "ideals"
        ev = pipeline_eval(p, dp.assign, dp.stage_targets, ci)
        hint_key, hint = (ev.bottleneck, ev.latency), (dp.assign, dp.stage_targets)
        dp_bound = ideals_bound(dp)
        if ideals_proven(dp, best_plan):
            lower = proven_bound(best_plan.bottleneck_ms, [dp_bound])
            return skipped_stats_plan(best_plan, ctx, t0, lower, r, best_name,
                                      "the ideals DP proved its plan optimal")
    if options.get("hint", True):
        share = float(options.get("heuristic_fraction", 0.3))
        for name, assign, order in pipeline_candidates(p, K, contiguous, t0 + share * max(0.0, ctx.deadline - t0)):
            plan = make_pipeline_plan(p, assign, ctx.name, order=order, options=ctx.plan_options())
            if better(best_plan, plan) is plan:
                best_plan, best_name = plan, name
            ev = pipeline_eval(p, assign, order, ci)
            if (ev.bottleneck, ev.latency) < hint_key:
                hint_key, hint = (ev.bottleneck, ev.latency), (assign, order)

    # the load bound on the float costs is valid as reported; the model gets it in rounded units
    lb_ms = max(pipeline_bound(p, Costs.of(p), K), dp_bound)
    slack = rounding_slack(p, ci, "pipeline")
    lb = max(0, math.ceil((lb_ms - slack) / r - 1e-6))
    if best_plan is not None and ctx.remaining() < 2 * build_seconds(p, "pipeline") + 0.2:
        return skipped_stats_plan(best_plan, ctx, t0, lb_ms, r, best_name,
                                  "not enough time left to build the model")
    classes = interchangeable_classes(p) if options.get("symmetry_breaking", True) else []
    model = cp_model.CpModel()

    # ---------------------------------------------------------------- variables
    unit_lits: list[dict[int, Any]] = []
    x: list[dict[int, Any]] = [{} for _ in range(n)]
    sigma: list[Any] = [None] * n
    for unit in p.units:
        lits = {int(d): model.new_bool_var(f"x{unit[0]}_{d}") for d in np.flatnonzero(p.allowed[unit[0]])}
        unit_lits.append(lits)
        sg = model.new_int_var(0, t - 1, f"sigma{unit[0]}")
        for v in unit:
            x[v], sigma[v] = lits, sg
    used = [model.new_bool_var(f"used{d}") for d in range(t)]
    pos = [model.new_int_var(0, t - 1, f"pos{d}") for d in range(t)]
    need: dict[tuple[int, int], Any] = {}
    z: dict[tuple[int, int, int], Any] = {}
    recv_terms: list[list[tuple[int, Any]]] = [[] for _ in range(t)]
    send_terms: list[list[tuple[int, Any]]] = [[] for _ in range(t)]
    code = p.charge_code
    sends: dict[int, list[tuple[int, Any]]] = {}  # broadcast: sender-charged copies of one tensor
    bcast: list[tuple[Any, list[Any]]] = []  # (level literal, the copies that reach it)
    for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)):
        if u < 0 or not cs:
            continue
        for b in range(t):
            readers = [x[v][b] for v in cs if b in x[v] and x[v] is not x[u]]
            if not readers:
                continue
            arcs = []
            for a in x[u]:
                if a == b:
                    continue
                ms = to_int(ci.link[k, a, b])
                rc = (ms if code[a, b] & 2 else 0) + to_int(ci.entry[b])
                sc = ms if code[a, b] & 1 else 0
                if rc or sc:
                    arcs.append((a, rc, sc))
            if not arcs:
                continue
            nk = model.new_bool_var(f"need{k}_{b}")
            for lit in readers:
                model.add_implication(lit, nk)
            need[(k, b)] = nk
            for a, rc, sc in arcs:
                zz = model.new_bool_var(f"z{k}_{a}_{b}")
                model.add_bool_or([x[u][a].Not(), nk.Not(), zz])
                z[(k, a, b)] = zz
                if rc:
                    recv_terms[b].append((rc, zz))
                if sc and p.link_broadcast:
                    sends.setdefault(a, []).append((sc, zz))
                elif sc:
                    send_terms[a].append((sc, zz))
        for a, arcs_a in sends.items():  # broadcast: the sender pays its slowest destination once
            levels = sorted({sc for sc, _ in arcs_a})
            prev = 0
            for lv in levels:  # y = "pays at least lv"; cost = sum of the level increments
                yy = model.new_bool_var(f"bc{k}_{a}_{lv}")
                reach = [zz for sc, zz in arcs_a if sc >= lv]
                for zz in reach:
                    model.add_implication(zz, yy)
                bcast.append((yy, reach))
                send_terms[a].append((lv - prev, yy))
                prev = lv
        sends.clear()
    loads = []
    his = []
    for d in range(t):
        comp = [(to_int(ci.cost[v, d]), x[v][d]) for v in range(n) if d in x[v]]
        terms = [(c_, lit) for c_, lit in comp + recv_terms[d] + send_terms[d] if c_ > 0]
        hi = sum(c_ for c_, _ in terms)
        his.append(hi)
        ld = model.new_int_var(0, hi, f"L{d}")
        model.add(ld == sum(c_ * lit for c_, lit in terms))
        loads.append(ld)
    max_load = max([0] + [sum(his[d] for d in users) for users in p.resource_users])  # per resource
    ub = max_load
    if hint is not None:
        ub = min(ub, round(hint_key[0]))
    bott = model.new_int_var(min(lb, ub), max(ub, lb), "B")

    # ---------------------------------------------------------------- constraints
    for lits in unit_lits:
        model.add_exactly_one(lits.values())
    for d in range(t):
        if np.isfinite(p.memory_cap_bytes[d]):
            terms = [(round(p.weight_bytes[list(unit)].sum()), lits[d])
                     for unit, lits in zip(p.units, unit_lits) if d in lits]
            terms = [(w_, lit) for w_, lit in terms if w_ > 0]
            if terms and sum(w_ for w_, _ in terms) > p.memory_cap_bytes[d]:
                model.add(sum(w_ * lit for w_, lit in terms) <= math.floor(p.memory_cap_bytes[d]))
    model.add_all_different(pos)
    for unit, lits in zip(p.units, unit_lits):
        for d, lit in lits.items():
            model.add_implication(lit, used[d])
            model.add(sigma[unit[0]] == pos[d]).only_enforce_if(lit)
    for u, v in p.edges:
        if sigma[u] is not sigma[v]:
            model.add(sigma[u] <= sigma[v])
    if contiguous:
        for i in range(n - 1):
            if sigma[i] is not sigma[i + 1]:
                model.add(sigma[i] <= sigma[i + 1])
    n_used = sum(used)
    model.add(n_used <= K)
    for d in range(t):
        model.add(pos[d] >= n_used).only_enforce_if(used[d].Not())
        for d2 in range(d + 1, t):
            model.add(pos[d] < pos[d2]).only_enforce_if([used[d].Not(), used[d2].Not()])
    for users in p.resource_users:
        if len(users) == 1:
            model.add(bott >= loads[users[0]])
        else:  # a core shared by several targets: their stage times add up on it
            model.add(bott >= sum(loads[d] for d in users))
    model.add(sum(loads) <= K * bott)
    y = add_first_use_order(model, p, unit_lits, classes) if classes else {}

    # ---------------------------------------------------------------- hint
    def set_hint(assign: np.ndarray, order: list[int]) -> None:
        model.clear_hints()
        ev = pipeline_eval(p, assign, order, ci)
        rank = {d: i for i, d in enumerate(order)}
        rest = [d for d in range(t) if d not in rank]
        for d in rest:
            rank[d] = len(rank)
        for unit, lits in zip(p.units, unit_lits):
            for d, lit in lits.items():
                model.add_hint(lit, int(assign[unit[0]] == d))
            model.add_hint(sigma[unit[0]], rank[int(assign[unit[0]])])
        for d in range(t):
            model.add_hint(used[d], int(d in order))
            model.add_hint(pos[d], rank[d])
            model.add_hint(loads[d], round(ev.total[d]))
        model.add_hint(bott, round(ev.bottleneck))
        for (k, b), nk in need.items():
            model.add_hint(nk, int(any(assign[v] == b for v in p.tensor_consumers[k])))
        zval = {}
        for (k, a, b), zz in z.items():
            u = p.tensor_producer[k]
            zval[zz.index] = int(assign[u] == a and any(assign[v] == b for v in p.tensor_consumers[k]))
            model.add_hint(zz, zval[zz.index])
        for yy, reach in bcast:
            model.add_hint(yy, int(any(zval[zz.index] for zz in reach)))
        for key, val in first_use_values(p, assign, classes).items():
            if key in y:
                model.add_hint(y[key], val)

    if hint is not None:
        h_assign = canonical_assign(p, hint[0], classes) if classes else hint[0]
        h_order = [int(h_assign[int(np.argmax(hint[0] == d))]) for d in hint[1]]
        set_hint(h_assign, h_order)

    margin = 0.05 + 2e-5 * n
    size = int(p.allowed.sum())
    # ---------------------------------------------------------------- phase 0: contiguous warm start
    warm_bott = None
    if not contiguous and n > 1 and options.get("contiguous_warm_start", True):
        warm = model.clone()

        def w(v: Any) -> Any:
            return warm.get_int_var_from_proto_index(v.index)

        for i in range(n - 1):
            if sigma[i] is not sigma[i + 1]:
                warm.add(w(sigma[i]) <= w(sigma[i + 1]))
        warm.minimize(w(bott))
        ws = make_solver(options, (ctx.remaining() - margin) * float(options.get("warm_start_fraction", 0.25)),
                         ctx.seed, size)
        wst = ws.solve(warm)
        if wst in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            wa = np.empty(n, dtype=int)
            for lits, unit in zip(unit_lits, p.units):
                wa[list(unit)] = next(d for d, lit in lits.items() if ws.boolean_value(w(lit)))
            wo = sorted({int(d) for d in wa}, key=lambda d: ws.value(w(pos[d])))
            ev = pipeline_eval(p, wa, wo, ci)
            warm_bott = ev.bottleneck
            if (ev.bottleneck, ev.latency) < hint_key:
                hint_key = (ev.bottleneck, ev.latency)
                set_hint(wa, wo)

    # ---------------------------------------------------------------- phase 1: bottleneck
    frac = float(options.get("phase1_fraction", 0.7))
    model.minimize(bott)
    solver = make_solver(options, (ctx.remaining() - margin) * frac, ctx.seed, size)
    st1 = solver.solve(model)
    name = status_name(st1)
    if st1 == cp_model.MODEL_INVALID:  # pragma: no cover
        raise RuntimeError(f"cpsat: invalid model: {model.validate()}")
    bound1 = None
    plan = None
    if st1 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bound1 = solver.best_objective_bound
        b_star = int(solver.value(bott))
        a1 = _read_assign(p, unit_lits, solver)
        o1 = sorted({int(d) for d in a1}, key=lambda d: solver.value(pos[d]))
        # ------------------------------------------------------------ phase 2: latency at B <= B*
        model.add(bott <= b_star)
        model.minimize(sum(loads))
        set_hint(a1, o1)
        solver2 = make_solver(options, ctx.remaining() - margin, ctx.seed, size)
        st2 = solver2.solve(model)
        if st2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            a1 = _read_assign(p, unit_lits, solver2)
            o1 = sorted({int(d) for d in a1}, key=lambda d: solver2.value(pos[d]))
            if st1 == cp_model.OPTIMAL and st2 != cp_model.OPTIMAL:
                name = "FEASIBLE"  # bottleneck proved, latency not
        elif st1 == cp_model.OPTIMAL:
            name = "FEASIBLE"
        plan = make_pipeline_plan(p, a1, ctx.name, order=o1, options=ctx.plan_options())
    elif st1 == cp_model.INFEASIBLE:
        raise ProblemError(f"cpsat: no pipeline of at most {K} stages exists"
                           f"{' (contiguous)' if contiguous else ''} (op support, memory caps, colocation, pins)")
    source = "cpsat"
    if plan is None or (best_plan is not None and better(plan, best_plan) is best_plan):
        if best_plan is None:
            raise ProblemError(f"cpsat: no pipeline found within the time limit (status {name})")
        plan, source = best_plan, best_name
        if name in ("OPTIMAL", "UNKNOWN"):
            name = "FEASIBLE"

    # ---------------------------------------------------------------- stats
    objective = plan.bottleneck_ms
    cp_bound = bound1 * r - slack if bound1 is not None and math.isfinite(bound1) else 0.0
    bound_ms, proven = reported_bound(objective, [lb_ms, cp_bound])
    if name == "OPTIMAL" and not proven:
        name = "FEASIBLE"  # optimal for the rounded numbers only
    gap = 0.0 if objective <= 0 else max(0.0, (objective - bound_ms) / objective)
    stats = SolverStats(status=name, objective=objective, best_bound=bound_ms, gap=gap,
                        wall_s=time.monotonic() - t0,
                        extra={"resolution_ms": r, "source": source, "hint": best_name,
                               "hint_bottleneck": best_plan.bottleneck_ms if best_plan else None,
                               "lower_bound_ms": lb_ms, "rounding_slack_ms": slack,
                               "contiguous_warm_start_ms": None if warm_bott is None else warm_bott * r,
                               "interchangeable_targets": [[p.targets[d] for d in cl] for cl in classes]})
    return dataclasses.replace(plan, stats=stats, solver=ctx.name)


def _read_assign(p: PlacementProblem, unit_lits: list[dict[int, Any]], solver: cp_model.CpSolver) -> np.ndarray:
    assign = np.empty(p.n_ops, dtype=int)
    for lits, unit in zip(unit_lits, p.units):
        d = next(d for d, lit in lits.items() if solver.boolean_value(lit))
        assign[list(unit)] = d
    return assign
