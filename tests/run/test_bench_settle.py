"""The plan bench waits for a candidate's runtime threads to stop spinning before the next one runs."""

from __future__ import annotations

from placer.run.bench import SETTLE_BUSY_SHARE, settle_own_threads


def test_settle_waits_while_the_process_is_busy_and_stops_once_it_is_quiet():
    # a CPU clock that advances a whole window per window for three windows (a pool spinning), then stops
    used = iter([0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0])
    waited = settle_own_threads(window_s=0.001, max_s=5.0, cpu_s=lambda: next(used) * 0.001 * 10)
    assert waited >= 0.004  # four windows: three busy, the fourth quiet
    assert waited < 5.0


def test_settle_gives_up_after_max_s_when_the_process_stays_busy():
    ticks = iter(range(10_000))
    waited = settle_own_threads(window_s=0.001, max_s=0.02, cpu_s=lambda: next(ticks) * 1.0)
    assert 0.02 <= waited < 1.0


def test_settle_on_a_quiet_process_takes_one_window():
    waited = settle_own_threads(window_s=0.001, max_s=5.0, cpu_s=lambda: 0.0)
    assert SETTLE_BUSY_SHARE > 0 and 0.001 <= waited < 5.0
