"""The plan bench waits for a candidate's runtime threads to stop spinning before the next one runs.

The CPU clock is handed in, so each test counts the windows the wait took; the only wall-clock
figures asserted are lower bounds (a sleep never returns early)."""

from __future__ import annotations

from placer.run.bench import SETTLE_BUSY_SHARE, settle_own_threads


class _Clock:
    """A process CPU clock (seconds) read twice per settle window: before and after it."""

    def __init__(self, busy_windows: int | None, per_window_s: float):
        self.busy_windows, self.per_window_s = busy_windows, per_window_s
        self.reads = 0
        self.used = 0.0

    def __call__(self) -> float:
        self.reads += 1
        if self.reads % 2 == 0:  # the end of a window: busy ones used a whole core's worth and more
            window = self.reads // 2
            if self.busy_windows is None or window <= self.busy_windows:
                self.used += self.per_window_s
        return self.used


def test_settle_waits_while_the_process_is_busy_and_stops_once_it_is_quiet():
    clock = _Clock(busy_windows=3, per_window_s=10.0)  # a pool spinning for three windows, then parked
    waited = settle_own_threads(window_s=0.001, max_s=60.0, cpu_s=clock)
    assert clock.reads == 2 * 4  # three busy windows, then the quiet one
    assert waited >= 4 * 0.001


def test_settle_gives_up_after_max_s_when_the_process_stays_busy():
    clock = _Clock(busy_windows=None, per_window_s=10.0)
    waited = settle_own_threads(window_s=0.001, max_s=0.02, cpu_s=clock)
    assert waited >= 0.02 and clock.reads >= 2 and clock.reads % 2 == 0


def test_settle_on_a_quiet_process_takes_one_window():
    clock = _Clock(busy_windows=0, per_window_s=10.0)
    waited = settle_own_threads(window_s=0.001, max_s=60.0, cpu_s=clock)
    assert SETTLE_BUSY_SHARE > 0 and clock.reads == 2 and waited >= 0.001


def test_turns_taken_on_a_slowed_core_are_left_out_while_half_the_samples_remain():
    import numpy as np

    from placer.run.bench import quiet_samples

    values = [1.0, 1.1, 2.0, 1.05, 2.1, 0.95]
    slowed = [False, False, True, False, True, False]
    kept, left_out = quiet_samples(values, slowed)
    assert left_out == 2 and np.median(kept) == np.median([1.0, 1.1, 1.05, 0.95])
    # most samples slowed: every sample counts (a figure from a few quiet ones would be noise)
    kept, left_out = quiet_samples(values, [True] * 5 + [False])
    assert left_out == 0 and kept.size == 6
    # flags missing for samples appended elsewhere count as quiet
    kept, left_out = quiet_samples(values, [True])
    assert left_out == 1 and kept.size == 5
