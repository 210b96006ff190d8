"""`placer run` and `placer show` on a PLAN_DIR."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mz_models import graph_of, lpnorm_model

from placer.cli import main
from placer.materialize import materialize


@pytest.fixture
def plan_dir(tmp_path):
    g = graph_of(lpnorm_model())
    asg = {op.id: "tvm-llvm" for op in g.ops}
    asg["lpnorm"] = "onnxruntime"  # no Relax converter for LpNormalization
    asg["conv2"] = "openvino"
    materialize(g, asg, tmp_path / "plan")
    return tmp_path / "plan"


@pytest.mark.parametrize("executor", ["hybrid", "relax"])
def test_run_checks_numerics(plan_dir, executor, capsys, tmp_path):
    out = tmp_path / "m.json"
    rc = main(["run", str(plan_dir), "--inputs", "seed:1", "--check", "--executor", executor,
               "--requests", "3", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert f"{executor}: 3 requests" in text and "PASS" in text
    blob = json.loads(out.read_text())
    assert blob["numerics"]["passed"] and blob["measurement"]["n_requests"] == 3


def test_run_pipeline_and_npz_inputs(plan_dir, capsys, tmp_path):
    x = np.random.default_rng(0).standard_normal((4, 1, 3, 16, 16)).astype(np.float32)  # 4 requests
    np.savez(tmp_path / "in.npz", x=x)
    rc = main(["run", str(plan_dir), "--inputs", str(tmp_path / "in.npz"), "--pipeline", "--requests", "4",
               "--check"])
    text = capsys.readouterr().out
    assert rc == 0 and "pipeline: 4 requests" in text


def test_check_fails_with_the_output_named(plan_dir, capsys, monkeypatch):
    # OpenVINO computes wrong numbers (its partition's outputs x1.5): the plan loads, the numbers differ.
    # (An edited partition file is refused when the plan directory is loaded: tests/reliability.)
    from placer.devices.openvino_target import OpenVinoTarget

    compile_ = OpenVinoTarget.compile

    def wrong(self, model):
        compiled = compile_(self, model)
        run, run_shared = compiled.run, compiled.run_shared  # the executor runs partitions by the latter
        compiled.run = lambda feeds: {k: v * 1.5 for k, v in run(feeds).items()}
        compiled.run_shared = lambda feeds: {k: v * 1.5 for k, v in run_shared(feeds).items()}
        return compiled

    monkeypatch.setattr(OpenVinoTarget, "compile", wrong)
    rc = main(["run", str(plan_dir), "--check"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "output 'y' differs from the reference" in err


def test_bad_plan_dir_is_a_one_line_error(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope")]) == 2
    assert "not a plan directory" in capsys.readouterr().err


def test_show_summary_json_and_ir(plan_dir, capsys):
    assert main(["show", str(plan_dir)]) == 0
    text = capsys.readouterr().out
    assert "4 partitions in 1 stage(s)" in text and "tvm-llvm@cpu:t1" in text
    assert main(["show", str(plan_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "placer.stage_config"
    assert main(["show", str(plan_dir), "--ir"]) == 0
    ir = capsys.readouterr().out
    assert '"Codegen": "onnxruntime"' in ir and '"Codegen": "openvino"' in ir and "def main(" in ir


@pytest.mark.parametrize("extra, expect", [
    (["--pipeline", "--executor", "relax"], "pipeline=True runs the pipeline executor"),
    (["--pipeline", "--compiled", "--executor", "relax"], "pipeline=True runs the pipeline executor"),
    (["--json", "/nonexistent-dir/m.json"], "--json /nonexistent-dir/m.json: directory '/nonexistent-dir'"),
])
def test_run_refuses_options_it_would_ignore_or_fail_on_after_the_run(plan_dir, capsys, extra, expect):
    """--pipeline ran the pipeline executor and ignored --executor relax and --compiled (exit 0); a
    --json file in a missing directory failed only after the run."""
    assert main(["run", str(plan_dir), "--requests", "2", *extra]) == 2
    assert expect in capsys.readouterr().err


def test_plan_refuses_a_json_out_in_a_missing_directory_before_any_work(tmp_path, capsys):
    db = tmp_path / "p.db"
    assert main(["plan", "zoo:tiny", "--targets", "onnxruntime", "--db", str(db),
                 "--out", str(tmp_path / "missing" / "p.json")]) == 2
    assert "does not exist" in capsys.readouterr().err and not db.exists()


def test_a_planned_model_copies_and_pickles():
    """PlannedModel forwards unknown attributes to its plan: copy and pickle, which look up special names
    on an instance not yet initialised, recursed until RecursionError."""
    import copy
    import pickle

    from placer.api import PlannedModel

    pm = PlannedModel(None, None, note="n")
    assert copy.copy(pm).note == "n" and pickle.loads(pickle.dumps(pm)).note == "n"


def test_plan_from_a_problem_refuses_the_options_it_would_ignore(tmp_path, capsys):
    """A problem JSON names its own targets and costs: --targets, --shape and --db were silently ignored."""
    problem = tmp_path / "p.json"
    problem.write_text('{"ops": ["a"], "targets": ["cpu"], "cost_ms": {"a": {"cpu": 1.0}}}')
    assert main(["plan", "--problem", str(problem), "--solver", "greedy"]) == 0
    capsys.readouterr()
    assert main(["plan", "--problem", str(problem), "--targets", "onnxruntime", "--db", str(tmp_path / "x.db")]) == 2
    assert "--targets, --db: not used with --problem" in capsys.readouterr().err
