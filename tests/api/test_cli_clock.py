"""``placer tune --budget B`` counts from the process's start (issue 19: imports and setup came before
tune's clock, 22.4 s of process for a 20 s budget); ``main(argv)`` called from Python counts from
the call. Nothing is tuned here: ``tune`` is replaced by a stub that records its ``started``."""

from __future__ import annotations

import gc
import sys
import time

import placer.tune
from placer import cli
from placer.errors import PlacerError


def test_the_process_start_comes_before_the_cli_import():
    started = cli.process_started()
    assert started <= cli.IMPORTED_AT <= time.monotonic()
    assert time.monotonic() - started < 7 * 24 * 3600  # a plausible age, not ticks misread


def _capture_started(monkeypatch) -> list:
    seen = []

    def stub(model, **kw):
        seen.append(kw.get("started"))
        raise PlacerError("stub: nothing tuned")

    monkeypatch.setattr(placer.tune, "tune", stub)
    return seen


def test_tune_s_budget_counts_from_the_call_or_the_process_start(monkeypatch):
    seen = _capture_started(monkeypatch)
    before = time.monotonic()
    assert cli.main(["tune", "zoo:tiny", "--trials", "1", "--budget", "20s"]) == 2
    assert before <= seen[-1] <= time.monotonic()  # from Python: the call
    monkeypatch.setattr(sys, "argv", ["placer", "tune", "zoo:tiny", "--budget", "20s"])
    try:
        assert cli.main() == 2
    finally:
        gc.unfreeze()  # main() froze the collector, as for a process about to exit (placer.process_exit)
    # the command itself: the process's start (two reads of two clocks: equal within a clock tick)
    assert seen[-1] <= cli.IMPORTED_AT and abs(seen[-1] - cli.process_started()) < 1.0


def test_only_the_process_s_own_command_freezes_the_collector_for_its_exit(monkeypatch):
    """``main()`` (the process's command) leaves every object in the collector's permanent generation,
    so the interpreter's exit does not walk them (placer.process_exit); ``main(argv)``, called by a
    program that goes on, leaves the collector as it was."""
    _capture_started(monkeypatch)
    gc.unfreeze()
    assert cli.main(["tune", "zoo:tiny", "--budget", "20s"]) == 2
    assert gc.get_freeze_count() == 0
    monkeypatch.setattr(sys, "argv", ["placer", "tune", "zoo:tiny", "--budget", "20s"])
    try:
        assert cli.main() == 2
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
