"""A target that crashes / hangs / fails to compile on one op type: the campaign survives."""

from __future__ import annotations

import pytest

from placer.devices.testing import FAULT_ENV, register_test_targets
from placer.profile import ProfileStore, profile_graph

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _kinds(monkeypatch):
    register_test_targets()
    monkeypatch.setenv(FAULT_ENV, "Relu")


def _relu_keys(graph):
    return {op.signature.hash for op in graph.ops if op.op_type == "Relu"}


@pytest.mark.parametrize("kind,status,reason", [
    ("test-crash", "crash", "SIGSEGV"),
    ("test-abort", "crash", "SIGABRT"),
    ("test-error", "unsupported", "failing on purpose"),
    ("test-raise", "error", "failing on purpose"),
])
def test_fault_marks_op_and_campaign_goes_on(tmp_path, tiny, fast_timing, kind, status, reason):
    db = tmp_path / "p.db"
    res = profile_graph(tiny, [kind], db, progress=False, links=False, whole_model=False, timing=fast_timing,
                        timeout_s=60)
    relu = _relu_keys(tiny)
    with ProfileStore(db) as st:
        for h, (sig, ids) in tiny.unique_signatures().items():
            m = st.get(h, kind)
            assert m is not None, f"{sig.op_type} not recorded"
            if h in relu:
                assert m.status == status and not m.supported
                assert reason in m.reason, m.reason
            else:
                assert m.ok and m.median_ms > 0
        costs = st.op_costs(tiny, [kind])
        assert all((costs[(op.id, res.per_target[next(iter(res.per_target))].name)] == float("inf")) == (op.op_type == "Relu")
                   for op in tiny.ops)
        assert st.integrity_check() == "ok"
    assert res.measured == len(tiny.unique_signatures()) - len(relu) + 1  # + overhead
    # a rerun measures nothing (failures are results too)
    again = profile_graph(tiny, [kind], db, progress=False, links=False, whole_model=False, timing=fast_timing)
    assert again.measured == 0 and again.failed == 0 and again.unsupported == 0


def test_hang_times_out(tmp_path, tiny, fast_timing):
    db = tmp_path / "p.db"
    res = profile_graph(tiny, ["test-hang"], db, progress=False, links=False, whole_model=False,
                        timing=fast_timing, timeout_s=4)
    with ProfileStore(db) as st:
        for h in _relu_keys(tiny):
            m = st.get(h, "test-hang")
            assert m.status == "timeout" and "4 s" in m.reason
        ok = [st.get(op.signature.hash, "test-hang") for op in tiny.ops if op.op_type != "Relu"]
        assert all(m.ok for m in ok)
    assert res.failed == len(_relu_keys(tiny))


def test_static_unsupported_not_run(tmp_path, tiny, fast_timing, monkeypatch):
    """supports() False is recorded as unsupported without running anything."""
    from placer.devices.testing import CrashTarget

    monkeypatch.setattr(CrashTarget, "supports", lambda self, op_type, domain="": (op_type != "Relu", "no Relu here"))
    db = tmp_path / "p.db"
    res = profile_graph(tiny, ["test-crash"], db, progress=False, links=False, whole_model=False, timing=fast_timing)
    with ProfileStore(db) as st:
        for h in _relu_keys(tiny):
            m = st.get(h, "test-crash")
            assert m.status == "unsupported" and "no Relu here" in m.reason and m.meta.get("static")
    assert res.failed == 0
