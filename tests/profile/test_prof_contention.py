"""Measurement conditions: every profile row records how busy other processes kept the machine; a row
that stayed contended is flagged and taken again on request (``retry_contended``; tune and plan ask for
it when the machine is quiet)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from placer.profile import ProfileStore, profile_graph
from placer.profile.contention import CONTENDED, CpuWindow, busy_ticks_of, is_contended


def test_a_process_burning_a_core_shows_up_as_contention():
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # let it get going
        with CpuWindow() as w:
            time.sleep(0.6)  # this process idles: every busy tick is someone else's
    finally:
        burner.kill()
        burner.wait()
    assert w.others is not None
    # one core of the machine burned throughout: at least 1/cpu_count of its time, whatever else runs
    import os

    assert w.others >= 0.8 / (os.cpu_count() or 1)
    assert w.loadavg is not None


def test_only_the_cores_this_process_may_use_count():
    # /proc/stat's per-CPU lines (user nice system idle iowait irq softirq steal guest guest_nice)
    stat = ("cpu  300 0 100 900 0 0 0 0 0 0\n"
            "cpu0 250 0 50 100 0 0 0 0 0 0\n"
            "cpu1 50 0 50 800 0 0 0 0 0 0\n"
            "intr 12345\n")
    assert busy_ticks_of(stat, frozenset({0})) == 300
    assert busy_ticks_of(stat, frozenset({1})) == 100
    assert busy_ticks_of(stat, frozenset({0, 1})) == 400
    assert busy_ticks_of(stat, frozenset({2})) is None  # a core the file does not list: unknown, not 0


def test_a_burner_on_this_process_core_is_contention_when_pinned():
    import os

    core = min(os.sched_getaffinity(0))
    code = f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
    burner = subprocess.Popen([sys.executable, "-c", code])
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {core})
        time.sleep(0.3)
        with CpuWindow() as w:
            time.sleep(0.6)  # this process idles on its one core: the burner owns it
    finally:
        os.sched_setaffinity(0, before)
        burner.kill()
        burner.wait()
    # the window covers this process's one core only, which the burner kept busy throughout
    assert w.others is not None and w.others >= 0.8


def test_own_work_is_not_counted_as_contention():
    with CpuWindow() as w:
        t_end = time.perf_counter() + 0.4
        x = 0
        while time.perf_counter() < t_end:  # this process is the busy one
            x += 1
    # the share is of *other* processes: our own busy core does not count (others may add some)
    assert w.others is not None and w.others < 1.0


def test_rows_record_their_conditions_and_contended_rows_can_be_measured_again(tmp_path, tiny, fast_timing):
    from placer.devices import make_target

    ort = make_target("onnxruntime")
    with ProfileStore(tmp_path / "p.db") as store:
        first = profile_graph(tiny, [ort], store, timing=fast_timing, whole_model=False, progress=False)
        rows = [m for m in first.results.values() if m.ok and m.kind == "op"]
        assert rows and all({"contention", "loadavg", "attempts", "contended"} <= set(m.meta) for m in rows)
        assert all(1 <= m.meta["attempts"] <= 3 for m in rows)
        # flag one row as measured on a busy machine: the next campaign measures it again, and only it
        victim = rows[0]
        store.put(victim.key, ort, kind=victim.kind, status="ok", median_ms=victim.median_ms, net_ms=victim.net_ms,
                  p10_ms=victim.p10_ms, p90_ms=victim.p90_ms, n=victim.n,
                  meta=dict(victim.meta, contended=True, contention=max(CONTENDED, 0.9)))
        assert is_contended(store.get(victim.key, ort).meta)
        # a campaign reuses flagged rows unless told to take them again
        assert profile_graph(tiny, [ort], store, timing=fast_timing, whole_model=False, progress=False).measured == 0
        # rows the first campaign itself found contended (a busy CI machine) are measured again too
        flagged = {k for k, m in first.results.items() if is_contended(m.meta)} | {(victim.key, ort.name)}
        again = profile_graph(tiny, [ort], store, timing=fast_timing, whole_model=False, progress=False,
                              retry_contended=True)
        assert again.measured == len(flagged)
        assert again.cached == first.measured + first.cached - len(flagged)
        assert (victim.key, ort.name) in again.results


def test_a_stored_whole_model_time_the_session_contradicts_is_flagged(tmp_path):
    from placer import api
    from placer.profile.keys import model_key

    ctx = api.prepare("zoo:tiny", targets=["onnxruntime"], db=tmp_path / "p.db")
    (t,) = ctx.targets
    stored = ctx.table.whole_model_ms[t.name]
    said = []
    assert api.check_store(ctx, {t.name: stored * 1.1}, said.append) == []  # within noise: trusted
    assert api.check_store(ctx, {t.name: stored / 2}, said.append) == [t.name]
    row = ctx.store.get(model_key(ctx.graph), t)
    assert is_contended(row.meta) and "measured" in row.meta["distrusted"]
    assert said and t.name in said[0]


def test_a_core_slower_than_its_reference_reads_as_slowed(core_speed_refs):
    """The host's slowdown of a virtual machine's core cannot be staged in a test (a process sharing
    the core does not do it: the scheduler lets a ~1 ms loop run through), so the reference is
    seeded instead, as a campaign hands its best times to a new worker: a core whose reference is
    half its time now reads about 2x."""
    import os

    from placer.profile.contention import SLOWED, core_reference, core_slowdown, disturbed, warm_core_probe

    core_speed = core_speed_refs
    core = min(os.sched_getaffinity(0))
    warm_core_probe(rounds=3)  # each core's best time: the reference
    assert str(core) in core_reference()
    assert core_slowdown(frozenset({core})) >= 1.0  # a ratio to the best, never below 1
    core_speed._best_probe_s[core] = core_speed._best_probe_s[core] / 4
    assert core_slowdown(frozenset({core})) >= SLOWED
    with CpuWindow() as w:
        time.sleep(0.01)
    assert w.slowdown is not None and w.slowdown >= SLOWED
    assert disturbed(None, 2.0) and not disturbed(0.0, 1.0) and disturbed(0.3, None)


def test_a_row_measured_while_a_core_was_slowed_is_flagged(tmp_path, tiny, fast_timing, core_speed_refs):
    """End to end, through a worker process: the campaign hands the worker a reference far faster
    than any core runs the loop, so every window reads slowed; each row of a 2-thread target is taken
    again up to the attempts allowed, then stored flagged with its slowdown."""
    from placer.devices import make_target
    from placer.profile.contention import SLOWED

    core_speed = core_speed_refs
    ort = make_target("onnxruntime:t2")  # a one-thread target is not judged by the other core
    core_speed.warm_core_probe(rounds=1)
    for c in list(core_speed._best_probe_s):
        core_speed._best_probe_s[c] = 1e-7
    with ProfileStore(tmp_path / "p.db") as store:
        res = profile_graph(tiny, [ort], store, timing=fast_timing, whole_model=False, progress=False,
                            second_window=False)
        rows = [m for m in res.results.values() if m.ok and m.kind == "op"]
    assert rows and all(m.meta["slowdown"] >= SLOWED and m.meta["contended"] for m in rows)
    assert all(m.meta["attempts"] == fast_timing.contended_attempts for m in rows)
    assert res.contended >= len(rows)  # the call-overhead row too


def _profile_tiny_allowing_three_attempts(tmp_path, tiny, fast_timing):
    """The tiny model's ops on ONNX Runtime t2 (one window each), three attempts allowed: (result, op rows)."""
    from dataclasses import replace

    from placer.devices import make_target

    with ProfileStore(tmp_path / "p.db") as store:
        res = profile_graph(tiny, [make_target("onnxruntime:t2")], store, whole_model=False, progress=False,
                            timing=replace(fast_timing, contended_attempts=3), second_window=False, links=False)
        return res, [m for m in res.results.values() if m.ok and m.kind == "op"]


@pytest.mark.parametrize("cap, attempts", [("2", 2), ("", 3), ("0", 3), ("x", 3)])
def test_the_environment_caps_the_attempts_at_a_disturbed_measurement(tmp_path, tiny, fast_timing, always_slowed,
                                                                       monkeypatch, cap, attempts):
    """Every window reads slowed and the timing allows three attempts: ``$PLACER_CONTENDED_ATTEMPTS``
    (an integer >= 1) takes fewer; unset, 0 or not a number, the timing's count stands."""
    from placer.profile import engine

    monkeypatch.setattr(engine, "RETAKE_PROBATION", 10**6)  # re-takes never judged futile here
    monkeypatch.setenv(engine.ATTEMPTS_ENV, cap)
    res, rows = _profile_tiny_allowing_three_attempts(tmp_path, tiny, fast_timing)
    assert rows and all(m.meta["contended"] and m.meta["attempts"] == attempts for m in rows)
    assert res.remeasured == (attempts - 1) * res.contended


def test_re_takes_stop_once_they_no_longer_escape_the_disturbance(tmp_path, tiny, fast_timing, always_slowed,
                                                                  monkeypatch):
    """Every window reads slowed (a host in a spell no re-take outlasts) and three attempts are allowed:
    the first RETAKE_PROBATION disturbed measurements are taken again, none escapes, and every later
    one is kept at its first attempt (flagged, counted as futile, said in the summary)."""
    from placer.profile import engine
    from placer.profile.report import summary_lines

    monkeypatch.delenv(engine.ATTEMPTS_ENV, raising=False)
    monkeypatch.setattr(engine, "RETAKE_PROBATION", 3)
    res, rows = _profile_tiny_allowing_three_attempts(tmp_path, tiny, fast_timing)
    attempts = sorted(m.meta["attempts"] for m in rows)
    assert len(rows) > 3 and all(m.meta["contended"] for m in rows)
    # the call-overhead row may be among the three taken again: at most three rows of three attempts
    assert attempts.count(3) <= 3 and attempts.count(1) >= len(rows) - 3 and set(attempts) == {1, 3}
    assert res.remeasured == 2 * 3 and res.futile == res.contended - 3
    assert any("re-takes stopped escaping" in line and f"{res.futile} disturbed" in line for line in summary_lines(res))


def test_a_worker_takes_the_campaigns_core_reference(core_speed_refs):
    core_speed = core_speed_refs
    core_speed._best_probe_s.clear()
    core_speed._best_parallel_s.clear()
    core_speed.seed_core_reference({"0": 0.002, "1": 0.003, "x": 1, "2": -1, "0+1": 0.0005, "0+x": 1})
    core_speed.seed_core_reference({"0": 0.004, "1": 0.001, "1+0": 0.0003})  # the faster time wins
    assert core_speed.core_reference() == {"0": 0.002, "1": 0.001, "0+1": 0.0003}


def test_cores_the_host_stops_running_together_read_as_slowed(core_speed_refs):
    """The host running a process's cores one after the other (each as fast as ever alone) cannot be
    staged either: the parallel probe's reference is seeded at a quarter of its time instead, as a
    campaign hands it to a new worker; the cores together then read slowed (a 2-thread runtime
    runs at its 1-thread pace in such spells), one core alone has no parallel figure."""
    import os

    from placer.profile.contention import SLOWED, core_slowdown

    core_speed = core_speed_refs
    cores = frozenset(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("one core: nothing runs side by side")
    core_speed.warm_core_probe(rounds=3)
    assert core_speed.parallel_slowdown(cores) >= 1.0  # a ratio to the best, never below 1
    assert core_speed.parallel_slowdown(frozenset({min(cores)})) is None
    assert "+".join(map(str, sorted(cores))) in core_speed.core_reference()
    for c in cores:  # each core alone: no slower than ever (its reference is its own time now)
        core_speed._best_probe_s[c] = float("inf")
    core_speed._best_parallel_s[cores] = core_speed._best_parallel_s[cores] / 4
    assert core_speed.parallel_slowdown(cores) >= SLOWED
    assert core_slowdown(cores) >= SLOWED
    with CpuWindow() as w:
        time.sleep(0.01)
    assert w.slowdown is not None and w.slowdown >= SLOWED
