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


class _CountingExecutor:
    """Requests that take ``step_ms`` of a fake clock each, recorded in order."""

    def __init__(self, clock: list[int], step_ms: float):
        self.clock, self.step, self.calls = clock, int(step_ms * 1e6), []

    def run_timed(self, feeds, share_outputs=False):
        self.clock[0] += self.step
        self.calls.append("timed")
        return {}, {"p0": self.step / 1e6}

    def run(self, feeds, share_outputs=False):
        self.clock[0] += self.step
        self.calls.append("run")
        return {}


def test_a_turn_times_a_small_models_requests_once_it_has_run_for_the_warm_up(monkeypatch):
    """The first requests after a switch run cold for several requests on a model of a third of a
    millisecond (session 48): a turn runs untimed requests until TURN_WARM_MS has passed, times the
    partitions again, then its requests. A model slower than that keeps the turn it had: one request
    timed partition by partition, left out, then the timed ones. A fake clock: no wall time read."""
    import placer.run.bench as bench_mod
    from placer.run.bench import TURN_WARM_MS, Candidate, PlanBench

    clock = [0]
    monkeypatch.setattr(bench_mod.time, "perf_counter_ns", lambda: clock[0])
    bench = PlanBench([{"x": None}], rounds=1, per_round=4)
    small = Candidate("small", None, _CountingExecutor(clock, TURN_WARM_MS / 5))
    assert bench._plan_turn(small, 0, 3)
    assert small.executor.calls == ["timed"] + ["run"] * 4 + ["timed"] + ["run"] * 3
    assert small.samples_ms == [TURN_WARM_MS / 5] * 3 and small.partition_ms == {"p0": [TURN_WARM_MS / 5]}
    big = Candidate("big", None, _CountingExecutor(clock, TURN_WARM_MS * 2))
    assert bench._plan_turn(big, 0, 3)
    assert big.executor.calls == ["timed"] + ["run"] * 3 and big.samples_ms == [TURN_WARM_MS * 2] * 3
