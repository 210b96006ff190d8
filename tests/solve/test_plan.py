"""Plan: canonical JSON, text form, and validate() catching every kind of broken plan."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from placer.errors import PlanError
from placer.plan import Plan, StageCost, Transfer
from placer.problem import PlacementProblem, Tensor
from placer.solve import solve


@pytest.fixture(scope="module")
def problem() -> PlacementProblem:
    return PlacementProblem(
        ops=["a", "b", "c", "d"], targets=["cpu", "gpu"],
        cost_ms=np.array([[1.0, 3.0], [4.0, 1.0], [2.0, 2.0], [1.0, np.inf]]),
        tensors=[Tensor("x", None, ("a",), 8), Tensor("t", "a", ("b", "c"), 1000), Tensor("u", "b", ("d",), 10),
                 Tensor("v", "c", ("d",), 10)],
        link_latency_ms=0.5, link_ms_per_byte=0.001, weight_bytes=[1, 2, 3, 4], memory_cap_bytes=[100, 5],
        colocate=[["c", "d"]], provenance={"model_hash": "deadbeef", "cost_model": "test"})


@pytest.fixture(scope="module", params=["latency", "pipeline"])
def plan(request, problem) -> Plan:
    return solve(problem, request.param, "cpsat", time_limit=5)


def test_json_round_trip(plan, tmp_path):
    d = plan.to_json()
    assert d["version"] == 1
    assert Plan.from_json(d) == plan
    assert Plan.from_json(plan.dumps()) == plan
    text = plan.dumps()
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"  # sorted, canonical
    path = tmp_path / "plan.json"
    plan.save(path)
    assert Plan.load(path) == plan
    assert Plan.load(path).dumps() == text


def test_provenance_and_options_recorded(plan, problem):
    assert plan.provenance == problem.provenance
    assert plan.options["seed"] == 0 and plan.options["time_limit"] == 5
    assert plan.stats.status == "OPTIMAL" and plan.stats.gap == 0.0


def test_summary_is_short_and_deterministic(plan, problem):
    s = plan.summary()
    assert s.splitlines()[0].startswith(f"plan v1 mode={plan.mode} solver=cpsat status=OPTIMAL")
    assert "wall" not in s
    assert s == solve(problem, plan.mode, "cpsat", time_limit=5).summary()


def test_golden_summary_latency(problem):
    # a on cpu [0, 1]; t -> gpu takes 0.5 + 1000 * 0.001 = 1.5: b on gpu [2.5, 3.5]; c on cpu [1, 3];
    # u -> cpu takes 0.5 + 0.01: d on cpu [4.01, 5.01]. All on cpu would take 8.
    plan = solve(problem, "latency", "cpsat", time_limit=5)
    assert plan.summary() == (
        "plan v1 mode=latency solver=cpsat status=OPTIMAL makespan=5.0100ms bottleneck=4.0000ms gap=0.00%\n"
        "  cpu: 3 ops, busy 4.0000ms ops=a,c,d\n"
        "  gpu: 1 ops, busy 1.0000ms ops=b\n"
        "  transfers: 2 (2.0100ms)")


def test_load_errors(tmp_path):
    with pytest.raises(PlanError, match="cannot read"):
        Plan.load(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(PlanError, match="invalid JSON"):
        Plan.load(tmp_path / "bad.json")
    with pytest.raises(PlanError, match="unsupported plan version"):
        Plan.from_json({"version": 7})
    with pytest.raises(PlanError, match="malformed"):
        Plan.from_json({"version": 1, "mode": "latency"})


def test_validate_accepts_solver_plans(plan, problem):
    plan.validate(problem)


def _move(plan: Plan, op: str, target: str) -> Plan:
    return dataclasses.replace(plan, assignment={**plan.assignment, op: target})


def test_validate_rejects_unsupported_target(problem):
    plan = solve(problem, "latency", "heft")
    with pytest.raises(PlanError, match="op 'd' placed on 'gpu', which does not support it"):
        _move(plan, "d", "gpu").validate(problem)


def test_validate_rejects_missing_and_unknown_ops(problem):
    plan = solve(problem, "latency", "heft")
    a = dict(plan.assignment)
    del a["b"]
    with pytest.raises(PlanError, match="op 'b' is not placed"):
        dataclasses.replace(plan, assignment=a).validate(problem)
    with pytest.raises(PlanError, match="unknown op 'zz'"):
        dataclasses.replace(plan, assignment={**plan.assignment, "zz": "cpu"}).validate(problem)


def test_validate_rejects_pin_colocation_memory(problem):
    pinned = dataclasses.replace(problem, pinned={"a": "gpu"})
    plan = solve(problem, "latency", "cpsat")
    assert plan.assignment["a"] == "cpu"
    with pytest.raises(PlanError, match="op 'a' is pinned to 'gpu'"):
        plan.validate(pinned)
    with pytest.raises(PlanError, match="op 'd' must be colocated with 'c'"):
        _move(plan, "c", "gpu").validate(problem)
    heavy = dataclasses.replace(problem, weight_bytes=[1, 6, 3, 4], memory_cap_bytes=[100, 6.5])
    broken = _move(_move(plan, "a", "gpu"), "b", "gpu")
    with pytest.raises(PlanError, match="memory cap of 'gpu' exceeded"):
        broken.validate(heavy)


def test_validate_rejects_schedule_violations(problem):
    plan = solve(problem, "latency", "cpsat")
    early = dict(plan.start_ms)
    early["d"] = 0.0
    end = {**plan.end_ms, "d": 1.0}
    with pytest.raises(PlanError, match="op 'd' starts at 0 ms before its input"):
        dataclasses.replace(plan, start_ms=early, end_ms=end).validate(problem)
    # shift c onto a's slot on cpu: overlap (and its inputs are not ready)
    c_at = {**plan.start_ms, "c": 0.5}
    with pytest.raises(PlanError, match="overlap|before its input"):
        dataclasses.replace(plan, start_ms=c_at, end_ms={**plan.end_ms, "c": 2.5}).validate(problem)
    with pytest.raises(PlanError, match=r"end .* != start"):
        dataclasses.replace(plan, end_ms={**plan.end_ms, "a": 9.0}).validate(problem)
    with pytest.raises(PlanError, match="makespan_ms"):
        dataclasses.replace(plan, makespan_ms=plan.makespan_ms - 1).validate(problem)
    with pytest.raises(PlanError, match="bottleneck_ms"):
        dataclasses.replace(plan, bottleneck_ms=0.0).validate(problem)


def test_validate_rejects_transfer_mismatch(problem):
    plan = solve(problem, "latency", "cpsat")
    assert plan.transfers
    with pytest.raises(PlanError, match="is missing"):
        dataclasses.replace(plan, transfers=plan.transfers[1:]).validate(problem)
    extra = Transfer("x", "cpu", "gpu", 0.5, 0.0, 0.0, 0.5)
    with pytest.raises(PlanError, match="is not needed"):
        dataclasses.replace(plan, transfers=plan.transfers + (extra,)).validate(problem)
    wrong = dataclasses.replace(plan.transfers[0], ms=plan.transfers[0].ms + 1)
    with pytest.raises(PlanError, match="problem says"):
        dataclasses.replace(plan, transfers=(wrong,) + plan.transfers[1:]).validate(problem)


def test_validate_rejects_pipeline_violations(problem):
    plan = solve(problem, "pipeline", "cpsat")
    assert len(plan.stage_targets) == 2
    with pytest.raises(PlanError, match="stage targets are not distinct"):
        dataclasses.replace(plan, stage_targets=(plan.stage_targets[0],) * 2).validate(problem)
    flipped = {o: 1 - s for o, s in plan.stage.items()}
    with pytest.raises(PlanError, match="consumes from|in stage"):
        dataclasses.replace(plan, stage=flipped, stage_targets=plan.stage_targets[::-1],
                            stages=plan.stages[::-1]).validate(problem)
    bad_stage = dataclasses.replace(plan.stages[0], total_ms=plan.stages[0].total_ms + 1)
    with pytest.raises(PlanError, match="stage 0 on"):
        dataclasses.replace(plan, stages=(bad_stage,) + plan.stages[1:]).validate(problem)
    with pytest.raises(PlanError, match="more than num_stages=1"):
        dataclasses.replace(plan, options={**plan.options, "num_stages": 1}).validate(problem)
    assert isinstance(plan.stages[0], StageCost)
