"""`placer profile` / `placer bench profile` from the command line: bad inputs exit 2 with one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from _profhelpers import ROOT


def placer(*args, cwd=None, timeout=300):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-m", "placer.cli", *args], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("placer profile: error:"), lines[0]
    for n in needles:
        assert n in lines[0], lines[0]


def test_not_a_file(tmp_path):
    one_line_error(placer("profile", str(tmp_path / "missing.onnx"), "--db", str(tmp_path / "p.db")), "missing.onnx")


def test_not_onnx(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01 definitely not a protobuf model \xff" * 20)
    one_line_error(placer("profile", str(bad), "--db", str(tmp_path / "p.db")), "bad.onnx")


def test_unknown_target(tmp_path):
    one_line_error(placer("profile", "zoo:tiny", "--targets", "onnxruntime,warp-drive", "--db", str(tmp_path / "p.db")),
                   "warp-drive")


def test_malformed_target_and_shape(tmp_path):
    one_line_error(placer("profile", "zoo:tiny", "--targets", "onnxruntime@gpu", "--db", str(tmp_path / "p.db")))
    one_line_error(placer("profile", "zoo:tiny", "--shape", "x=1xA", "--db", str(tmp_path / "p.db")), "--shape")


def test_store_not_sqlite(tmp_path):
    db = tmp_path / "store.db"
    db.write_text("this is a text file\n" * 50)
    one_line_error(placer("profile", "zoo:tiny", "--targets", "onnxruntime", "--db", str(db)), "store.db", "not a SQLite")


@pytest.mark.slow
def test_profile_ok_then_cached(tmp_path):
    db = str(tmp_path / "p.db")
    p = placer("profile", "zoo:tiny", "--targets", "onnxruntime,openvino", "--db", db, "--segments", "2", "--quiet",
               "--no-links")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "onnxruntime@cpu:t1" in p.stdout and "openvino@cpu:t1" in p.stdout and "unique signatures" in p.stdout
    p2 = placer("profile", "zoo:tiny", "--targets", "onnxruntime,openvino", "--db", db, "--segments", "2", "--quiet",
                "--no-links")
    assert p2.returncode == 0 and "0 measured" in p2.stdout, p2.stdout


def test_probes_report_the_sessions_speed_against_the_store_and_reject_a_negative_count(tmp_path):
    db = str(tmp_path / "p.db")
    args = ("profile", "zoo:tiny", "--targets", "onnxruntime", "--db", db, "--quiet", "--no-links",
            "--no-whole-model")
    first = placer(*args)
    assert first.returncode == 0 and "probe measurement" not in first.stdout, first.stderr[-3000:]
    again = placer(*args, "--probes", "2")
    assert again.returncode == 0, again.stderr[-3000:]
    line = next(ln for ln in again.stdout.splitlines() if ln.startswith("session "))
    assert "probe measurement(s)" in line and "onnxruntime@cpu:t1 " in line, line
    bad = placer(*args, "--probes", "-1")
    assert bad.returncode == 2 and "argument --probes: -1 is out of range" in bad.stderr.splitlines()[-1]


def test_a_target_that_runs_none_of_the_models_ops_fails_the_command(tmp_path, capsys):
    """A target failing on some ops only has them marked unsupported (exit 0); one on which every op
    failed leaves the store unable to price a plan there: exit 1, naming the target and why. A target
    that supports none of the ops (its compiler refuses them) is a fact measured: a note, exit 0."""
    import onnx
    from onnx import TensorProto, helper

    from placer.devices.testing import register_test_targets
    from placer.profile.report import profile_command

    register_test_targets()
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    relu_only = tmp_path / "relu_only.onnx"  # the test targets fail on Relu (their default fault op)
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu_only", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), relu_only)
    common = {"shapes": None, "timeout_s": 60.0, "segments": 0, "links": False, "whole_model": False,
              "retry_failed": False, "progress": False}
    raising = {**common, "targets": ["onnxruntime", "test-raise"]}  # raises when it runs Relu: an error
    assert profile_command(str(relu_only), db=str(tmp_path / "a.db"), **raising) == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("placer profile: error:")]
    assert len(err) == 1 and "test-raise@cpu:t1 ran none of the 1 op signature(s)" in err[0], err
    assert "error: " in err[0] and "failing on purpose" in err[0], err[0]
    # again on the same store: nothing measured, the stored failure still tells
    assert profile_command(str(relu_only), db=str(tmp_path / "a.db"), **raising) == 1
    assert "test-raise@cpu:t1 ran none" in capsys.readouterr().err
    # refused by its compiler on every op: unsupported there, a note and exit 0
    refusing = {**common, "targets": ["onnxruntime", "test-error"]}
    assert profile_command(str(relu_only), db=str(tmp_path / "c.db"), **refusing) == 0
    said = capsys.readouterr()
    assert "placer profile: error:" not in said.err
    assert "note: test-error@cpu:t1 supports none of the 1 op signature(s)" in said.out, said.out
    # a model with another op besides: test-raise runs that one, and the campaign succeeds
    two = tmp_path / "relu_sigmoid.onnx"
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8])
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y1"]),
                                                   helper.make_node("Sigmoid", ["y1"], ["z"])], "two", [x], [z]),
                                opset_imports=[helper.make_opsetid("", 17)]), two)
    assert profile_command(str(two), db=str(tmp_path / "b.db"), **raising) == 0
    said = capsys.readouterr()
    assert "placer profile: error:" not in said.err and "note:" not in said.out


def test_a_problem_names_a_target_only_as_a_whole_name():
    from placer.profile.report import _names

    assert _names("onnxruntime@cpu:t1 is unavailable (refused)", "onnxruntime@cpu:t1")
    assert _names("hand-off openvino@cpu:t1 -> onnxruntime@cpu:t1: worker died", "onnxruntime@cpu:t1")
    assert not _names("onnxruntime@cpu:t12 is unavailable (refused)", "onnxruntime@cpu:t1")
    assert not _names("onnxruntime@cpu0:t1 is unavailable (refused)", "onnxruntime@cpu:t1")
