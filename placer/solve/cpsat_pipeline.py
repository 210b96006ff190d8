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
    add_memory_caps,
    canonical_assign,
    choose_resolution,
    first_use_values,
    interchangeable_classes,
    make_solver,
    plan_if_no_time_to_build,
    read_assign,
    reported_bound,
    rounding_slack,
    skipped_stats_plan,
    status_name,
    to_int,
)
from placer.solve.evaluate import Costs, better, make_pipeline_plan, pipeline_eval
from placer.solve.ideals import ideals_bound, ideals_proven, ideals_warm_start, proven_bound
from placer.solve.pipeline_candidates import pipeline_candidates

__all__ = ["PipelineModel", "pipeline_candidates", "solve_pipeline"]  # pipeline_candidates: re-exported


def solve_pipeline(problem: PlacementProblem, ctx: SolveContext, options: dict[str, Any]) -> Plan:
    """Solve pipeline mode with CP-SAT (see the module docstring): a short driver of the phases of
    :class:`PipelineModel`."""
    m = PipelineModel(problem, ctx, options)
    if m.run_ideals():
        lower = proven_bound(m.best_plan.bottleneck_ms, [m.dp_bound])
        return skipped_stats_plan(m.best_plan, ctx, m.t0, lower, m.r, m.best_name,
                                  "the ideals DP proved its plan optimal")
    m.run_heuristics()
    m.lower_bound()
    late = plan_if_no_time_to_build(m, problem, ctx, "pipeline")
    if late is not None:
        return late
    m.add_variables()
    m.add_constraints()
    m.add_hints()
    m.solve_contiguous_warm_start()
    m.solve()
    plan, source = m.final_plan()
    return dataclasses.replace(plan, stats=m.stats(plan, source), solver=ctx.name)


class PipelineModel:
    """The pipeline-mode CP-SAT model of the module docstring, built and solved in named phases that
    must run in this order: :meth:`run_ideals` (the ideals DP warm start), :meth:`run_heuristics`
    (hint and fallback), :meth:`lower_bound`, :meth:`add_variables`, :meth:`add_constraints`,
    :meth:`add_hints`, :meth:`solve_contiguous_warm_start` (phase 0), :meth:`solve` (phase 1, the
    bottleneck, then phase 2, the latency: each sets its own objective), :meth:`final_plan` and
    :meth:`stats`. CP-SAT's search depends on the order in which variables and constraints are
    created, so each phase creates them in a fixed order. Times are in the integer units of ``ci``
    (see :mod:`placer.solve.cpsat_util`)."""

    def __init__(self, problem: PlacementProblem, ctx: SolveContext, options: dict[str, Any]) -> None:
        p = self.p = problem
        self.ctx, self.options = ctx, options
        self.t0 = time.monotonic()
        self.n, self.t = p.n_ops, p.n_targets
        self.K = ctx.max_stages(p)
        self.contiguous = bool(ctx.contiguous)
        self.r = choose_resolution(p, options.get("time_resolution_ms", "auto"))
        self.ci = Costs.rounded(p, self.r)
        self.best_plan: Plan | None = None
        self.best_name = ""
        self.hint: tuple[np.ndarray, list[int]] | None = None  # (assign, stage targets)
        self.hint_key = (math.inf, math.inf)  # its (bottleneck, latency), rounded units
        self.dp_bound = 0.0
        self.warm_bott = None
        self.model = cp_model.CpModel()
        self.margin = 0.05 + 2e-5 * self.n
        self.size = int(p.allowed.sum())

    # ---------------------------------------------------------------- heuristics: hint and fallback
    def run_ideals(self) -> bool:
        """The ideals DP (every monotone pipeline): when it completes, its plan is the hint and the
        fallback and its optimum ``dp_bound``. True when its plan is proven optimal (no model
        needed)."""
        p, ctx = self.p, self.ctx
        dp = ideals_warm_start(p, ctx, self.options, self.t0)  # exact when prices are separable
        if dp is None:
            return False
        self.best_plan = make_pipeline_plan(p, dp.assign, ctx.name, order=dp.stage_targets,
                                            options=ctx.plan_options())
        self.best_name = "ideals"
        ev = pipeline_eval(p, dp.assign, dp.stage_targets, self.ci)
        self.hint_key, self.hint = (ev.bottleneck, ev.latency), (dp.assign, dp.stage_targets)
        self.dp_bound = ideals_bound(dp)
        return bool(ideals_proven(dp, self.best_plan))

    def run_heuristics(self) -> None:
        """The heuristic pipelines: the best (:func:`~placer.solve.evaluate.better`) is the
        fallback, the best by the rounded (bottleneck, latency) the hint."""
        p, ctx, t0 = self.p, self.ctx, self.t0
        if not self.options.get("hint", True):
            return
        share = float(self.options.get("heuristic_fraction", 0.3))
        # the span is a share of the time limit, counted from now, as latency mode's: counted from
        # t0 it was gone whenever the ideals DP ran past it (a loaded host: no hint at all, a
        # different search; test_solver_contract[cpsat-pipeline-rand_30x3] in session 42)
        start = time.monotonic()
        deadline = min(start + share * max(0.0, ctx.deadline - t0), ctx.deadline)
        for name, assign, order in pipeline_candidates(p, self.K, self.contiguous, deadline):
            plan = make_pipeline_plan(p, assign, ctx.name, order=order, options=ctx.plan_options())
            if better(self.best_plan, plan) is plan:
                self.best_plan, self.best_name = plan, name
            ev = pipeline_eval(p, assign, order, self.ci)
            if (ev.bottleneck, ev.latency) < self.hint_key:
                self.hint_key, self.hint = (ev.bottleneck, ev.latency), (assign, order)

    def lower_bound(self) -> None:
        """``lb_ms`` (valid as reported) and ``lb`` (rounded units, for the model)."""
        # the load bound on the float costs is valid as reported; the model gets it in rounded units
        self.lb_ms = max(pipeline_bound(self.p, Costs.of(self.p), self.K), self.dp_bound)
        self.slack = rounding_slack(self.p, self.ci, "pipeline")
        self.lb = max(0, math.ceil((self.lb_ms - self.slack) / self.r - 1e-6))

    # ---------------------------------------------------------------- variables
    def add_variables(self) -> None:
        """``x`` and ``sigma`` per colocation unit, ``used``, ``pos``, the copy literals, the stage
        times ``loads`` and the bottleneck ``bott``."""
        p, model, t = self.p, self.model, self.t
        self.classes = interchangeable_classes(p) if self.options.get("symmetry_breaking", True) else []
        self.unit_lits: list[dict[int, Any]] = []
        self.x: list[dict[int, Any]] = [{} for _ in range(self.n)]
        self.sigma: list[Any] = [None] * self.n
        for unit in p.units:
            lits = {int(d): model.new_bool_var(f"x{unit[0]}_{d}") for d in np.flatnonzero(p.allowed[unit[0]])}
            self.unit_lits.append(lits)
            sg = model.new_int_var(0, t - 1, f"sigma{unit[0]}")
            for v in unit:
                self.x[v], self.sigma[v] = lits, sg
        self.used = [model.new_bool_var(f"used{d}") for d in range(t)]
        self.pos = [model.new_int_var(0, t - 1, f"pos{d}") for d in range(t)]
        recv_terms, send_terms = self._add_copies()
        self.loads = []
        his = []
        for d in range(t):
            comp = [(to_int(self.ci.cost[v, d]), self.x[v][d]) for v in range(self.n) if d in self.x[v]]
            terms = [(c_, lit) for c_, lit in comp + recv_terms[d] + send_terms[d] if c_ > 0]
            hi = sum(c_ for c_, _ in terms)
            his.append(hi)
            ld = model.new_int_var(0, hi, f"L{d}")
            model.add(ld == sum(c_ * lit for c_, lit in terms))
            self.loads.append(ld)
        max_load = max([0] + [sum(his[d] for d in users) for users in p.resource_users])  # per resource
        ub = max_load
        if self.hint is not None:
            ub = min(ub, round(self.hint_key[0]))
        self.bott = model.new_int_var(min(self.lb, ub), max(ub, self.lb), "B")

    def _add_copies(self) -> tuple[list[list[tuple[int, Any]]], list[list[tuple[int, Any]]]]:
        """The copy literals ``need`` and ``z`` (and the broadcast levels ``bcast``) with their
        implications; returns the receive and send cost terms per target."""
        p, model, x, ci, t = self.p, self.model, self.x, self.ci, self.t
        self.need: dict[tuple[int, int], Any] = {}
        self.z: dict[tuple[int, int, int], Any] = {}
        recv_terms: list[list[tuple[int, Any]]] = [[] for _ in range(t)]
        send_terms: list[list[tuple[int, Any]]] = [[] for _ in range(t)]
        code = p.charge_code
        sends: dict[int, list[tuple[int, Any]]] = {}  # broadcast: sender-charged copies of one tensor
        self.bcast: list[tuple[Any, list[Any]]] = []  # (level literal, the copies that reach it)
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
                self.need[(k, b)] = nk
                for a, rc, sc in arcs:
                    zz = model.new_bool_var(f"z{k}_{a}_{b}")
                    model.add_bool_or([x[u][a].Not(), nk.Not(), zz])
                    self.z[(k, a, b)] = zz
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
                    self.bcast.append((yy, reach))
                    send_terms[a].append((lv - prev, yy))
                    prev = lv
            sends.clear()
        return recv_terms, send_terms

    # ---------------------------------------------------------------- constraints
    def add_constraints(self) -> None:
        """Every constraint of the module docstring, in a fixed order (the objective is set by the
        solve phases)."""
        p, model, t, sigma, used, pos = self.p, self.model, self.t, self.sigma, self.used, self.pos
        for lits in self.unit_lits:
            model.add_exactly_one(lits.values())
        add_memory_caps(model, p, self.unit_lits)
        model.add_all_different(pos)
        for unit, lits in zip(p.units, self.unit_lits):
            for d, lit in lits.items():
                model.add_implication(lit, used[d])
                model.add(sigma[unit[0]] == pos[d]).only_enforce_if(lit)
        for u, v in p.edges:
            if sigma[u] is not sigma[v]:
                model.add(sigma[u] <= sigma[v])
        if self.contiguous:
            for i in range(self.n - 1):
                if sigma[i] is not sigma[i + 1]:
                    model.add(sigma[i] <= sigma[i + 1])
        n_used = sum(used)
        model.add(n_used <= self.K)
        for d in range(t):
            model.add(pos[d] >= n_used).only_enforce_if(used[d].Not())
            for d2 in range(d + 1, t):
                model.add(pos[d] < pos[d2]).only_enforce_if([used[d].Not(), used[d2].Not()])
        for users in p.resource_users:
            if len(users) == 1:
                model.add(self.bott >= self.loads[users[0]])
            else:  # a core shared by several targets: their stage times add up on it
                model.add(self.bott >= sum(self.loads[d] for d in users))
        model.add(sum(self.loads) <= self.K * self.bott)
        self.y = add_first_use_order(model, p, self.unit_lits, self.classes) if self.classes else {}

    # ---------------------------------------------------------------- hint
    def add_hints(self) -> None:
        """Hint with the heuristic hint, its targets relabelled for the symmetry breaking."""
        if self.hint is not None:
            hint = self.hint
            h_assign = canonical_assign(self.p, hint[0], self.classes) if self.classes else hint[0]
            h_order = [int(h_assign[int(np.argmax(hint[0] == d))]) for d in hint[1]]
            self.set_hint(h_assign, h_order)

    def set_hint(self, assign: np.ndarray, order: list[int]) -> None:
        """Replace the model's hints with the values of the pipeline ``assign`` / ``order``."""
        p, model = self.p, self.model
        model.clear_hints()
        ev = pipeline_eval(p, assign, order, self.ci)
        rank = {d: i for i, d in enumerate(order)}
        rest = [d for d in range(self.t) if d not in rank]
        for d in rest:
            rank[d] = len(rank)
        for unit, lits in zip(p.units, self.unit_lits):
            for d, lit in lits.items():
                model.add_hint(lit, int(assign[unit[0]] == d))
            model.add_hint(self.sigma[unit[0]], rank[int(assign[unit[0]])])
        for d in range(self.t):
            model.add_hint(self.used[d], int(d in order))
            model.add_hint(self.pos[d], rank[d])
            model.add_hint(self.loads[d], round(ev.total[d]))
        model.add_hint(self.bott, round(ev.bottleneck))
        for (k, b), nk in self.need.items():
            model.add_hint(nk, int(any(assign[v] == b for v in p.tensor_consumers[k])))
        zval = {}
        for (k, a, b), zz in self.z.items():
            u = p.tensor_producer[k]
            zval[zz.index] = int(assign[u] == a and any(assign[v] == b for v in p.tensor_consumers[k]))
            model.add_hint(zz, zval[zz.index])
        for yy, reach in self.bcast:
            model.add_hint(yy, int(any(zval[zz.index] for zz in reach)))
        for key, val in first_use_values(p, assign, self.classes).items():
            if key in self.y:
                model.add_hint(self.y[key], val)

    # ---------------------------------------------------------------- solve
    def solve_contiguous_warm_start(self) -> None:
        """Phase 0 (without ``contiguous``, option ``contiguous_warm_start``): a clone of the model
        with the contiguity constraints, ``minimize B``; its best split becomes the hint when it
        beats the current one."""
        p, n, sigma = self.p, self.n, self.sigma
        if self.contiguous or n <= 1 or not self.options.get("contiguous_warm_start", True):
            return
        warm = self.model.clone()

        def w(v: Any) -> Any:
            return warm.get_int_var_from_proto_index(v.index)

        for i in range(n - 1):
            if sigma[i] is not sigma[i + 1]:
                warm.add(w(sigma[i]) <= w(sigma[i + 1]))
        warm.minimize(w(self.bott))
        ws = make_solver(self.options, (self.ctx.remaining() - self.margin)
                         * float(self.options.get("warm_start_fraction", 0.25)), self.ctx.seed, self.size)
        wst = ws.solve(warm)
        if wst in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            wa = read_assign(p, self.unit_lits, lambda lit: ws.boolean_value(w(lit)))
            wo = sorted({int(d) for d in wa}, key=lambda d: ws.value(w(self.pos[d])))
            ev = pipeline_eval(p, wa, wo, self.ci)
            self.warm_bott = ev.bottleneck
            if (ev.bottleneck, ev.latency) < self.hint_key:
                self.hint_key = (ev.bottleneck, ev.latency)
                self.set_hint(wa, wo)

    def solve(self) -> None:
        """Phase 1: ``minimize B``; on a solution, phase 2: ``B <= B*`` and ``minimize sum_d L[d]``,
        hinted with phase 1's solution. ``plan`` is the result (None without a solution),
        ``bound1`` phase 1's bound (rounded units)."""
        p, ctx, model, options = self.p, self.ctx, self.model, self.options
        frac = float(options.get("phase1_fraction", 0.7))
        model.minimize(self.bott)
        solver = make_solver(options, (ctx.remaining() - self.margin) * frac, ctx.seed, self.size)
        st1 = solver.solve(model)
        self.name = status_name(st1)
        if st1 == cp_model.MODEL_INVALID:  # pragma: no cover
            raise RuntimeError(f"cpsat: invalid model: {model.validate()}")
        self.bound1 = None
        self.plan: Plan | None = None
        if st1 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            self.bound1 = solver.best_objective_bound
            b_star = int(solver.value(self.bott))
            a1 = read_assign(p, self.unit_lits, solver.boolean_value)
            o1 = sorted({int(d) for d in a1}, key=lambda d: solver.value(self.pos[d]))
            # ------------------------------------------------------------ phase 2: latency at B <= B*
            model.add(self.bott <= b_star)
            model.minimize(sum(self.loads))
            self.set_hint(a1, o1)
            solver2 = make_solver(options, ctx.remaining() - self.margin, ctx.seed, self.size)
            st2 = solver2.solve(model)
            if st2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                a1 = read_assign(p, self.unit_lits, solver2.boolean_value)
                o1 = sorted({int(d) for d in a1}, key=lambda d: solver2.value(self.pos[d]))
                if st1 == cp_model.OPTIMAL and st2 != cp_model.OPTIMAL:
                    self.name = "FEASIBLE"  # bottleneck proved, latency not
            elif st1 == cp_model.OPTIMAL:
                self.name = "FEASIBLE"
            self.plan = make_pipeline_plan(p, a1, ctx.name, order=o1, options=ctx.plan_options())
        elif st1 == cp_model.INFEASIBLE:
            raise ProblemError(f"cpsat: no pipeline of at most {self.K} stages exists"
                               f"{' (contiguous)' if self.contiguous else ''} "
                               "(op support, memory caps, colocation, pins)")

    def final_plan(self) -> tuple[Plan, str]:
        """The better of CP-SAT's plan and the heuristic fallback, and its source; a heuristic win
        takes back an ``OPTIMAL`` status."""
        plan, best_plan = self.plan, self.best_plan
        if plan is None or (best_plan is not None and better(plan, best_plan) is best_plan):
            if best_plan is None:
                raise ProblemError(f"cpsat: no pipeline found within the time limit (status {self.name})")
            if self.name in ("OPTIMAL", "UNKNOWN"):
                self.name = "FEASIBLE"
            return best_plan, self.best_name
        return plan, "cpsat"

    # ---------------------------------------------------------------- stats
    def stats(self, plan: Plan, source: str) -> SolverStats:
        """The returned plan's stats: the best bound valid for the float bottleneck, and the status
        (``OPTIMAL`` only when that bound proves it)."""
        p, r, bound1 = self.p, self.r, self.bound1
        objective = plan.bottleneck_ms
        cp_bound = bound1 * r - self.slack if bound1 is not None and math.isfinite(bound1) else 0.0
        bound_ms, proven = reported_bound(objective, [self.lb_ms, cp_bound])
        name = self.name
        if name == "OPTIMAL" and not proven:
            name = "FEASIBLE"  # optimal for the rounded numbers only
        gap = 0.0 if objective <= 0 else max(0.0, (objective - bound_ms) / objective)
        best_plan, warm_bott = self.best_plan, self.warm_bott
        return SolverStats(status=name, objective=objective, best_bound=bound_ms, gap=gap,
                           wall_s=time.monotonic() - self.t0,
                           extra={"resolution_ms": r, "source": source, "hint": self.best_name,
                                  "hint_bottleneck": best_plan.bottleneck_ms if best_plan else None,
                                  "lower_bound_ms": self.lb_ms, "rounding_slack_ms": self.slack,
                                  "contiguous_warm_start_ms": None if warm_bott is None else warm_bott * r,
                                  "interchangeable_targets": [[p.targets[d] for d in cl]
                                                              for cl in self.classes]})
