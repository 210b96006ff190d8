"""A stop request survives being raised inside a finalizer (where Python drops exceptions)."""

from __future__ import annotations

import gc

import pytest

from placer import interrupts


class _StoppedWhileFinalizing:
    def __del__(self):
        interrupts.request_stop()  # raises KeyboardInterrupt, which Python ignores in __del__


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop is the point
def test_a_stop_dropped_in_a_finalizer_is_raised_at_the_next_check_point():
    interrupts.STOP.clear()
    try:
        obj = _StoppedWhileFinalizing()
        del obj  # the KeyboardInterrupt is printed as "Exception ignored" and dropped here
        gc.collect()
        with pytest.raises(KeyboardInterrupt):
            interrupts.raise_if_stopped()
    finally:
        interrupts.STOP.clear()
    interrupts.raise_if_stopped()  # cleared: no stop pending


def test_install_keeps_a_callers_own_handler():
    import signal

    def mine(signum, frame):  # pragma: no cover - never delivered
        pass

    old = signal.signal(signal.SIGTERM, mine)
    try:
        interrupts.install()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, signal.default_int_handler)
