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


class _ScriptedWorker:
    """A worker whose every request answers with ``reply`` (a dict) or raises it (an exception)."""

    def __init__(self, reply):
        self.reply, self.calls = reply, 0

    def request(self, header, payload, timeout_s, what=""):
        self.calls += 1
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply

    def stop(self):
        pass


def _engine_with_due_rows(tmp_path, worker, n: int, target_name: str = "onnxruntime:t2", **meta):
    """An engine over a store holding ``n`` ok rows of ``target_name``, each due a second window."""
    from placer.devices import make_target
    from placer.profile.engine import Engine, Task
    from placer.profile.results import CampaignResult
    from placer.profile.store import WINDOW_DUE

    st = ProfileStore(tmp_path / "due.db")
    t = make_target(target_name)
    kind = "model" if n == 1 else "op"
    for i in range(n):
        st.put(f"{kind}:{i}", t, kind=kind, status="ok", median_ms=10.0, net_ms=10.0, p10_ms=9.5, p90_ms=10.5,
               n=20, meta={WINDOW_DUE: True, "compile_ms": 5.0, "overhead_ms": 0.0, "contended": False, **meta})
    eng = Engine(st, timeout_s=10, isolate=False, progress=False, timing=None, seed=0, retry_failed=False,
                 result=CampaignResult())
    eng._worker = lambda target: worker
    eng._payload = lambda task: b""
    tasks = [Task(f"{kind}:{i}", kind, t, f"row {i}", lambda: None, 10.0) for i in range(n)]
    return st, t, eng, tasks


def test_second_windows_stop_asking_a_worker_that_cannot_start(tmp_path):
    """Each start may take minutes; the second windows tried one per due row and reported nothing (the
    first windows stop after two)."""
    from placer.profile.store import WINDOW_DUE
    from placer.profile.supervisor import WorkerDied

    worker = _ScriptedWorker(WorkerDied("error", "did not start"))
    st, t, eng, tasks = _engine_with_due_rows(tmp_path, worker, 30)
    eng.run(tasks)
    assert worker.calls == 2
    assert any("did not start" in p for p in eng.result.problems)
    assert all(st.get(task.key, t).meta.get(WINDOW_DUE) for task in tasks)  # still due: a later run takes them
    gone = _ScriptedWorker(WorkerDied("unavailable", "device unreachable"))
    (tmp_path / "b").mkdir()
    st, t, eng, tasks = _engine_with_due_rows(tmp_path / "b", gone, 30)
    eng.run(tasks)
    assert gone.calls == 1 and "device unreachable" in eng.unavailable[t.name]


def test_a_whole_model_s_disturbed_second_window_flags_the_mean_it_goes_into(tmp_path):
    """On all cores a whole model keeps the mean of its windows: a second window that other processes'
    work disturbed in every attempt flags the row, so that a retry of contended rows takes it again."""
    stats = {"median_ms": 30.0, "p10_ms": 29.0, "p90_ms": 31.0, "n": 20, "mad_ms": 0.1, "mean_ms": 30.0}
    worker = _ScriptedWorker({"status": "ok", "contention": 0.9, "contended": True, "slowdown": None,
                              "stats": stats})
    st, t, eng, tasks = _engine_with_due_rows(tmp_path, worker, 1)
    eng.run(tasks)
    m = st.get(tasks[0].key, t)
    assert m.median_ms == pytest.approx(20.0) and m.meta["windows_kept"] == "mean"
    assert m.meta["contended"] is True and (m.p10_ms, m.p90_ms) == (9.5, 31.0)


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs two cores")
def test_profiling_in_process_gives_the_caller_its_cores_back(tmp_path, tiny, fast_timing):
    """isolate=False answers in the caller's process, and a pinned target's worker pinned the caller's
    thread to its core for good: an all-core target measured next ran on one core."""
    import os

    before = os.sched_getaffinity(0)
    profile_graph(tiny, ["onnxruntime@cpu0"], tmp_path / "aff.db", isolate=False, progress=False,
                  links=False, whole_model=False, timing=fast_timing)
    assert os.sched_getaffinity(0) == before
