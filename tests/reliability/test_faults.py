"""Targets that run out of memory on an op: the campaign records it, goes on, and plans around it.

Segfault, abort, hang, compile error and raise are covered by tests/profile/test_prof_faults.py
(``placer.devices.testing``); this adds the out-of-memory cases (``reliability_oom_target``): a
real ``MemoryError`` under a lowered ``RLIMIT_AS`` in the worker, and a SIGKILL as the kernel's
OOM killer sends.
"""

from __future__ import annotations

import os

import pytest
from rel_support import HERE
from corpus import FAST_TIMING

from placer.devices.registry import register_target
from placer.devices.testing import FAULT_ENV
from placer.profile import ProfileStore, TimingConfig, profile_graph


@pytest.fixture(autouse=True)
def _oom_kinds(monkeypatch):
    from reliability_oom_target import KINDS

    for kind, path in KINDS.items():
        register_target(kind, path)
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(HERE) + (os.pathsep + old if old else ""))  # workers import the kinds
    monkeypatch.setenv(FAULT_ENV, "Relu")


@pytest.fixture(scope="module")
def tiny():
    from placer.zoo import load_graph

    return load_graph("zoo:tiny")


@pytest.mark.parametrize("kind,status,reason", [
    ("test-oom", "unsupported", "out of memory while running"),
    ("test-oomkill", "crash", "SIGKILL (out of memory?)"),
])
def test_oom_is_recorded_and_the_campaign_goes_on(tmp_path, tiny, kind, status, reason):
    db = tmp_path / "p.db"
    timing = TimingConfig(**FAST_TIMING)
    res = profile_graph(tiny, [kind], db, progress=False, links=False, whole_model=False, timing=timing,
                        timeout_s=60)
    relu = {op.signature.hash for op in tiny.ops if op.op_type == "Relu"}
    with ProfileStore(db) as st:
        for h in tiny.unique_signatures():
            m = st.get(h, kind)
            assert m is not None
            if h in relu:
                assert m.status == status and not m.supported and reason in m.reason, m
            else:
                assert m.ok and m.median_ms > 0, m  # the ops after the failure were measured
        assert st.integrity_check() == "ok"
    assert res.measured == len(tiny.unique_signatures()) - len(relu) + 1  # + overhead
    again = profile_graph(tiny, [kind], db, progress=False, links=False, whole_model=False, timing=timing)
    assert again.measured == 0 and again.failed == 0  # failures are results too: nothing re-run


def test_plan_routes_around_the_oom_op(tmp_path, capsys, monkeypatch):
    """Through the CLI: the MaxPool the OOM target cannot run goes to ONNX Runtime (the link
    measurements run Relu-free models, so the fault op is MaxPool here)."""
    from placer.cli import main

    monkeypatch.setenv(FAULT_ENV, "MaxPool")
    rc = main(["plan", "zoo:tiny", "--targets", "test-oom,onnxruntime", "--db", str(tmp_path / "p.db"),
               "--solver", "greedy", "--out", str(tmp_path / "plan.json")])
    assert rc == 0, capsys.readouterr().err
    from placer.plan import Plan

    plan = Plan.load(tmp_path / "plan.json")
    assert plan.assignment["pool_b"] == "onnxruntime@cpu:t1"


def test_op_that_only_the_oom_target_has_is_one_clear_error(tmp_path, capsys, monkeypatch):
    from placer.cli import main

    monkeypatch.setenv(FAULT_ENV, "MaxPool")
    rc = main(["plan", "zoo:tiny", "--targets", "test-oom", "--db", str(tmp_path / "p.db"), "--solver", "greedy"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "op 'pool_b' (MaxPool)" in err and "runs on no target" in err and "out of memory" in err, err
