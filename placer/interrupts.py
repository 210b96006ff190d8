"""A stop request (Ctrl-C, SIGTERM) that cannot be lost.

Python runs a signal handler between bytecodes of the main thread; an exception it raises while the
main thread is inside a finalizer (``__del__``, a weakref callback) is printed as "Exception
ignored" and dropped, so a plain ``raise KeyboardInterrupt`` can vanish and a long loop runs to its
end. The handler here also sets :data:`STOP`, and long loops call :func:`raise_if_stopped` at every
step, so a dropped interrupt is raised again at the next one.
"""

from __future__ import annotations

import threading

import contextlib

__all__ = ["STOP", "request_stop", "raise_if_stopped", "install", "deferred"]

#: set once a stop was requested in this process
STOP = threading.Event()
_deferring = 0  # > 0 inside :func:`deferred` (the handler runs in the main thread only)


def request_stop(signum=None, frame=None) -> None:
    """Signal handler: remember the request, then stop now (KeyboardInterrupt), unless inside
    :func:`deferred`, whose caller checks :func:`raise_if_stopped` where it is safe."""
    STOP.set()
    if _deferring == 0:
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred():
    """A block a stop request does not cut in two (e.g. "ask the study for a trial and remember it":
    interrupted between the two, the trial would stay RUNNING with nobody to fail it). The request
    is only recorded in :data:`STOP`; the caller calls :func:`raise_if_stopped` once it can clean up."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1


def raise_if_stopped() -> None:
    """Raise KeyboardInterrupt if a stop was requested (a check point of a long loop)."""
    if STOP.is_set():
        raise KeyboardInterrupt


def install() -> None:
    """Route SIGINT and SIGTERM to :func:`request_stop` where they still have Python's defaults
    (a caller that installed its own handler keeps it); clears an earlier request."""
    import signal

    STOP.clear()
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, request_stop)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, request_stop)
