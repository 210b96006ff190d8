"""The phases of the CP-SAT models (:class:`~placer.solve.cpsat_latency.LatencyModel`,
:class:`~placer.solve.cpsat_pipeline.PipelineModel`), driven one by one.

The hint a model is given must be a complete solution of that model: every variable hinted, and
CP-SAT with every variable fixed to its hinted value finds it feasible (a partial or infeasible
hint is silently repaired or dropped by CP-SAT, which costs search without any error). Covered:
colocation, pins, memory caps, charged links, shared cores, pooled and interchangeable targets,
the transfer term, broadcast links, contiguous and free pipelines. Each check solves a fully
fixed model (no search), bounded by deterministic time.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest
from ortools.sat.python import cp_model
from solve_testlib import random_problem

from placer.problem import PlacementProblem
from placer.solve.base import SolveContext
from placer.solve.cpsat import CpSat
from placer.solve.cpsat_latency import LatencyModel
from placer.solve.cpsat_pipeline import PipelineModel
from placer.solve.instances import load_stg, random_layered, training_graph

STG = Path(__file__).resolve().parents[1] / "data" / "stg" / "50" / "rand0003.stg"


def _random(seed: int, n: int, t: int) -> PlacementProblem:
    rng = np.random.default_rng(seed)
    p = None
    while p is None:
        p = random_problem(rng, n, t)
    return p


def _shared(p: PlacementProblem) -> PlacementProblem:
    """Targets 0 and 1 share a core, the others keep their own."""
    return dataclasses.replace(p, target_cores={p.targets[0]: [0], p.targets[1]: [0, 1]})


LATENCY = [
    ("random", lambda: _random(1, 9, 3), {}),
    ("random-transfers", lambda: _random(2, 9, 3), {"transfer_weight": 0.5}),
    ("random-shared-cores", lambda: _shared(_random(3, 8, 3)), {}),
    ("layered", lambda: random_layered(30, 3, 1), {}),
    ("stg-pooled", lambda: load_stg(STG, 3), {}),
    ("stg-interchangeable", lambda: load_stg(STG, 3), {"pool_identical": False}),
    ("training-transfers", lambda: training_graph("cnn", 40, 2, 1), {"transfer_weight": 0.25}),
]

PIPELINE = [
    ("random", lambda: _random(4, 9, 3), {}),
    ("random-contiguous", lambda: _random(5, 9, 3), {"contiguous": True}),
    ("random-shared-cores", lambda: _shared(_random(6, 8, 3)), {}),
    ("layered-2-stages", lambda: random_layered(30, 3, 2), {"num_stages": 2}),
    ("training-broadcast", lambda: training_graph("transformer", 40, 2, 0), {}),
    ("training-no-broadcast", lambda: training_graph("cnn", 40, 2, 1, broadcast=False), {}),
]


#: the solve's time limit, a hang guard only: every phase these tests drive stops on its own effort rules
#: (the heuristics' convergence and kick limits, CP-SAT's deterministic time) long before it, so what the
#: phases build does not depend on how fast or busy the machine is
HANG_GUARD_S = 3600.0


def _ctx(mode: str, overrides: dict) -> tuple[SolveContext, dict]:
    ctx_keys = {"contiguous", "num_stages"}
    options = {**CpSat.options, "ideals": False,
               **{k: v for k, v in overrides.items() if k not in ctx_keys}}
    ctx = SolveContext(mode=mode, name="cpsat", time_limit=HANG_GUARD_S, options=options,
                       deadline=time.monotonic() + HANG_GUARD_S,
                       **{k: v for k, v in overrides.items() if k in ctx_keys})
    return ctx, options


def _case(case, mode: str) -> tuple[PlacementProblem, SolveContext, dict]:
    """A case of LATENCY / PIPELINE: its problem, and the context and options to build its model with."""
    _, make, overrides = case
    return (make(), *_ctx(mode, overrides))


def _solve_fixed(model: cp_model.CpModel) -> cp_model.CpSolver:
    """CP-SAT on the model with every hinted variable fixed to its hint (no search to do)."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.max_deterministic_time = 10.0
    status = solver.solve(model)
    assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE), solver.status_name(status)
    return solver


def _all_hinted(model: cp_model.CpModel) -> None:
    proto = model.proto
    assert sorted(proto.solution_hint.vars) == list(range(len(proto.variables)))


@pytest.mark.parametrize("case", LATENCY, ids=[c[0] for c in LATENCY])
def test_latency_hint_is_a_solution_of_the_model(case):
    p, ctx, options = _case(case, "latency")
    m = LatencyModel(p, ctx, options)
    m.lower_bound()
    m.run_heuristics()
    m.upper_bound()
    m.symmetry()
    m.add_variables()
    m.add_constraints()
    m.add_objective()
    m.add_hints()
    assert m.hint is not None
    if case[0] == "stg-pooled":
        assert m.pools and not m.classes
    if case[0] == "stg-interchangeable":
        assert m.classes and not m.pools
    _all_hinted(m.model)
    solver = _solve_fixed(m.model)
    # the hinted makespan is the heuristic's, the model's upper bound, and no lower than its bound
    assert solver.value(m.makespan) == m.ub >= m.lb


@pytest.mark.parametrize("case", PIPELINE, ids=[c[0] for c in PIPELINE])
def test_pipeline_hint_is_a_solution_of_the_model(case):
    p, ctx, options = _case(case, "pipeline")
    m = PipelineModel(p, ctx, options)
    assert not m.run_ideals()  # ideals off: no DP, so the model is built
    m.run_heuristics()
    m.lower_bound()
    m.add_variables()
    m.add_constraints()
    m.add_hints()
    assert m.hint is not None
    if case[0] == "training-broadcast":
        assert m.bcast  # broadcast levels are hinted too
    _all_hinted(m.model)
    m.model.minimize(m.bott)
    solver = _solve_fixed(m.model)
    assert solver.value(m.bott) == round(m.hint_key[0])


@pytest.mark.parametrize("case", PIPELINE, ids=[c[0] for c in PIPELINE])
def test_pipeline_heuristics_get_their_share_however_long_the_ideals_dp_ran(case):
    # the heuristics' span counts from their own start: a solve whose earlier phase (the ideals DP)
    # used 60% of the time limit on a loaded host builds the same candidates, so the same hint
    p, ctx, options = _case(case, "pipeline")
    fresh = PipelineModel(p, ctx, options)
    fresh.run_heuristics()
    late = PipelineModel(p, ctx, options)
    # its clock set back: 60% of a time limit of HANG_GUARD_S gone before the heuristics start (the
    # ideals DP on a loaded host), no new reading of the clock; what is left (24 min) and the
    # heuristics' span (18 min) are hang guards for milliseconds of work, counted from the start
    # they now count from, and long past if counted from the solve's
    late.t0 -= 0.6 * HANG_GUARD_S
    late.ctx = dataclasses.replace(ctx, deadline=late.t0 + HANG_GUARD_S)
    late.run_heuristics()
    assert fresh.hint is not None and late.best_name == fresh.best_name
    assert late.hint_key == fresh.hint_key
