"""The solver registry and solve()'s argument checking (error paths)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from placer.errors import ProblemError
from placer.problem import PlacementProblem, Tensor
from placer.solve import Solver, available_solvers, register_solver, solve
from placer.solve.evaluate import make_plan


@pytest.fixture(scope="module")
def problem():
    return PlacementProblem(ops=["a", "b"], targets=["cpu", "gpu"], cost_ms=np.array([[1.0, 2.0], [3.0, 1.0]]),
                            tensors=[Tensor("t", "a", ("b",), 10)], link_latency_ms=0.1)


def test_available_solvers():
    names = available_solvers()
    assert names == sorted(names)
    assert {"cpsat", "heft", "greedy", "dp", "bruteforce", "single:<target>"} <= set(names)


def test_available_solvers_expands_single(problem):
    names = available_solvers(problem)
    assert "single:cpu" in names and "single:gpu" in names and "single:<target>" not in names


@pytest.mark.parametrize("name", ["nope", "cpsat:x", "single", "heft:cpu"])
def test_unknown_solver_lists_valid_ones(problem, name):
    with pytest.raises(ProblemError, match=r"unknown solver .*valid solvers: bruteforce, cpsat, dp, greedy, heft"):
        solve(problem, "latency", name)


def test_single_unknown_target(problem):
    with pytest.raises(ProblemError, match=r"unknown target 'tpu'; targets are \['cpu', 'gpu'\]"):
        solve(problem, "latency", "single:tpu")


def test_unknown_mode_and_options(problem):
    with pytest.raises(ProblemError, match="unknown mode 'throughput'; valid modes: latency, pipeline"):
        solve(problem, "throughput")
    with pytest.raises(ProblemError, match=r"unknown options \['num_wrokers'\]; valid options: .*num_workers"):
        solve(problem, "latency", "cpsat", num_wrokers=2)
    with pytest.raises(ProblemError, match="does not handle mode 'latency'"):
        solve(problem, "latency", "dp")
    with pytest.raises(ProblemError, match="num_stages must be an int in \\[1, 2\\]"):
        solve(problem, "pipeline", "cpsat", num_stages=3)
    with pytest.raises(ProblemError, match="num_stages is a pipeline-mode option"):
        solve(problem, "latency", "cpsat", num_stages=1)
    with pytest.raises(ProblemError, match="time_limit must be a positive"):
        solve(problem, "latency", "cpsat", time_limit=0)
    with pytest.raises(ProblemError, match="coarsen must be"):
        solve(problem, "latency", "cpsat", coarsen="sometimes")
    with pytest.raises(ProblemError, match="needs a PlacementProblem"):
        solve({"ops": []}, "latency")


def test_exact_solvers_refuse_big_problems():
    n = 14
    p = PlacementProblem(ops=[f"o{i}" for i in range(n)], targets=["x", "y", "z"], cost_ms=np.ones((n, 3)))
    with pytest.raises(ProblemError, match="more than max_ops=10"):
        solve(p, "latency", "bruteforce")
    with pytest.raises(ProblemError, match="more than its limit 1000"):
        solve(p, "pipeline", "bruteforce", max_assignments=1000)


def test_register_a_plugin(problem):
    @register_solver("test-first-target", overwrite=True)
    class FirstTarget(Solver):
        """Everything on the first target that supports the op."""

        options: ClassVar[dict[str, str]] = {"note": ""}

        def solve(self, problem, ctx):
            assign = np.argmax(np.isfinite(problem.cost_ms), axis=1)
            return make_plan(problem, ctx.mode, assign, ctx.name, stats={"status": "HEURISTIC"},
                             options=ctx.plan_options())

    assert "test-first-target" in available_solvers()
    plan = solve(problem, "latency", "test-first-target", note="hi")
    plan.validate(problem)
    assert plan.solver == "test-first-target" and plan.options["note"] == "hi"
    class Other(Solver):
        def solve(self, problem, ctx):  # pragma: no cover - never called
            raise AssertionError

    with pytest.raises(ProblemError, match="already registered"):
        register_solver("test-first-target", Other)
    with pytest.raises(ProblemError, match="invalid solver name"):
        register_solver("a:b", FirstTarget)


def test_infeasible_problem_reports_cleanly():
    # a -> b -> c with b only on gpu, a and c colocated on cpu: no monotone pipeline exists
    p = PlacementProblem(ops=["a", "b", "c"], targets=["cpu", "gpu"],
                         cost_ms=np.array([[1.0, np.inf], [np.inf, 1.0], [1.0, np.inf]]),
                         tensors=[Tensor("t", "a", ("b",)), Tensor("u", "b", ("c",))], colocate=[["a", "c"]])
    with pytest.raises(ProblemError, match="no pipeline"):
        solve(p, "pipeline", "cpsat")
    plan = solve(p, "latency", "cpsat")  # but a latency plan exists
    plan.validate(p)
    assert plan.makespan_ms == 3.0


def test_placer_plan_refuses_a_stage_count_before_profiling(tmp_path, capsys):
    """``--stages`` in latency mode, or more stages than targets, is refused by the cheap checks that
    come before profiling (it was refused by the solver, once the model had been profiled)."""
    from placer.cli import main

    db = tmp_path / "p.db"
    for args, why in ((["--stages", "2"], "num_stages is a pipeline-mode option"),
                      (["--mode", "pipeline", "--stages", "3"], r"num_stages must be an int in [1, 2]")):
        rc = main(["plan", "zoo:tiny", "--targets", "onnxruntime,openvino", "--db", str(db), *args])
        assert rc == 2 and why in capsys.readouterr().err
        assert not db.exists()  # nothing profiled
