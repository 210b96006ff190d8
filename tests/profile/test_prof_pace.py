"""The host's pace, timed beside every measurement, and rows read at their target's usual pace
(placer.profile.pace)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from placer.devices import make_target
from placer.devices.testing import register_test_targets
from placer.profile.pace import PACE_EDGE_CALLS, PACE_ENV, PaceMeter, pace_factors, paced, row_pace


def _row(target: str, key: str, pace: float | None, ms: float = 1.0) -> dict:
    meta = {} if pace is None else {"pace_ms": pace}
    return {"target": target, "key": key, "status": "ok", "median_ms": ms, "meta": meta}


def test_a_rows_factor_is_its_own_pace_over_its_targets_usual_pace():
    # target a: 20 rows at its usual pace, a spell of 9 rows at 1.5x, one reading at 3x
    rows = [_row("a", f"q{i}", 1.0) for i in range(20)] + [_row("a", f"s{i}", 1.5) for i in range(9)]
    rows.append(_row("a", "x", 3.0))
    rows.append(_row("b", "q0", 7.0))  # another target: its own usual pace
    rows.append(_row("a", "old", None))  # stored without a pace
    f = pace_factors(rows)
    assert all(f[("a", f"q{i}")] == pytest.approx(1.0) for i in range(20))
    assert all(f[("a", f"s{i}")] == pytest.approx(1.5) for i in range(9))
    assert f[("a", "x")] == pytest.approx(3.0) and f[("b", "q0")] == pytest.approx(1.0)
    assert ("a", "old") not in f
    assert row_pace(rows[0]) == 1.0 and row_pace(rows[-1]) is None
    assert row_pace({"meta": {"pace_ms": "nan"}}) is None and row_pace({"meta": {"pace_ms": -1}}) is None


def test_the_pace_a_row_is_judged_against_is_the_one_read_beside_work_of_its_size():
    """Bigger measurements leave the anchors colder caches, so their pace reads slower with no spell of
    the host (session 50: whole models 1.1-1.2x the median op's pace, priced 10-17% low): the reference
    is a line of log pace against log time, and only what departs from it is the host's."""
    sizes = np.geomspace(0.001, 100.0, 40)
    rows = [_row("a", f"op{i}", 1.0 * ms ** 0.02, ms) for i, ms in enumerate(sizes)]  # no spell: on the line
    rows += [_row("a", "spell", 1.5 * 0.1 ** 0.02, 0.1), _row("a", "big", 100.0 ** 0.02, 100.0)]
    f = pace_factors(rows)
    assert all(f[("a", f"op{i}")] == pytest.approx(1.0, rel=1e-6) for i in range(40))
    assert f[("a", "big")] == pytest.approx(1.0, rel=1e-6)  # 1.10x the median pace: its size, not a spell
    assert f[("a", "spell")] == pytest.approx(1.5, rel=1e-3)
    # whole models: against the median pace of the target's whole models (one alone: as measured)
    models = [{**_row("a", f"model:{i}", p, 50.0), "kind": "model"} for i, p in enumerate((2.0, 2.2, 3.3))]
    f = pace_factors(rows + models)
    assert [f[("a", f"model:{i}")] for i in range(3)] == pytest.approx([2.0 / 2.2, 1.0, 1.5])
    assert pace_factors(rows + models[:1])[("a", "model:0")] == pytest.approx(1.0)
    # too few rows, or sizes within a decade, to tell a line: the median pace, as before
    few = [_row("b", f"op{i}", 1.0 * ms ** 0.02, ms) for i, ms in enumerate(sizes[:10])]
    usual = np.exp(np.median([0.02 * np.log(m) for m in sizes[:10]]))
    assert pace_factors(few)[("b", "op9")] == pytest.approx(sizes[9] ** 0.02 / usual)


@pytest.fixture()
def pace_on(monkeypatch):
    """The pace timed beside measurements, as by default (the suite turns it off: conftest)."""
    monkeypatch.setenv(PACE_ENV, "1")


def test_the_meter_times_the_anchors_over_a_window_on_a_one_thread_cpu_runtime_only(pace_on, monkeypatch):
    meter = PaceMeter(make_target("onnxruntime"))
    try:
        meter.start()
        for _ in range(4):  # between the measurement's batches
            meter.sample()
        ms = meter.finish()
        assert len(meter.readings) == 2 * PACE_EDGE_CALLS + 4 and 0 < ms < math.inf
        assert min(meter.readings) <= ms <= max(meter.readings)
        meter.start()  # the next measurement's window starts afresh
        assert len(meter.readings) == PACE_EDGE_CALLS
    finally:
        meter.close()
    register_test_targets()
    crashing = make_target("test-crash")  # ONNX Runtime that segfaults on Relu, which the anchors hold
    assert not paced(crashing)
    never = PaceMeter(crashing)
    never.start()
    never.sample()
    assert never.finish() is None and never.readings == []
    assert paced(make_target("openvino")) and paced(make_target("openvino-bf16"))
    assert not paced(make_target("onnxruntime:t2"))  # one-thread targets only (what was measured)
    monkeypatch.setenv(PACE_ENV, "0")  # turned off: not even a CPU runtime's target times it
    assert not paced(make_target("onnxruntime")) and PaceMeter(make_target("onnxruntime")).failed


def test_a_campaign_times_the_pace_beside_each_row_and_the_store_prices_rows_at_the_usual_pace(
        tmp_path, tiny, fast_timing, pace_on):
    from placer.profile import ProfileStore, profile_graph
    from placer.profile.keys import OVERHEAD_KEY

    db = tmp_path / "p.db"
    profile_graph(tiny, ["onnxruntime"], db, isolate=False, progress=False, links=False, whole_model=False,
                  timing=fast_timing, second_window=False)
    with ProfileStore(db, readonly=True) as st:
        target = "onnxruntime@cpu:t1"
        factors = st.pace_factors(target)
        keys = {op.signature.hash for op in tiny.ops}
        assert keys | {OVERHEAD_KEY} <= set(factors)
        assert all(st.get(k, target).meta["pace_ms"] > 0 for k in keys)
        overhead = st.get(OVERHEAD_KEY, target).median_ms / factors[OVERHEAD_KEY]
        raw, paced_costs = st.op_costs(tiny, [target], pace=False), st.op_costs(tiny, [target])
        for op in tiny.ops:
            m = st.get(op.signature.hash, target)
            assert raw[(op.id, target)] == m.net_ms
            at_pace = max(m.median_ms / factors[m.key] - overhead, 0.0)
            assert paced_costs[(op.id, target)] == pytest.approx(at_pace)


def test_a_one_thread_whole_model_carries_the_pace_and_is_priced_at_the_usual_pace(
        tmp_path, tiny, fast_timing, pace_on):
    # a whole model timed alone on one thread has no pool spinning beside the anchors (session 42);
    # on two threads it would, and its row carries none
    from placer.costing import cost_table_from_store
    from placer.devices import make_targets
    from placer.profile import ProfileStore, profile_graph
    from placer.profile.keys import model_key

    db = tmp_path / "p.db"
    targets = make_targets(["onnxruntime", "onnxruntime:t2"])
    profile_graph(tiny, targets, db, isolate=False, progress=False, links=False, timing=fast_timing,
                  second_window=False)
    with ProfileStore(db, readonly=True) as st:
        one, two = (st.get(model_key(tiny), t) for t in targets)
        assert one.ok and one.meta["pace_ms"] > 0
        assert two.ok and "pace_ms" not in two.meta
        table = cost_table_from_store(tiny, targets, st)
        factor = st.pace_factors(targets[0])[one.key]
        assert table.whole_model_ms[targets[0].name] == pytest.approx(one.median_ms / factor)
        assert table.whole_model_ms[targets[1].name] == two.median_ms
