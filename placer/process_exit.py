"""Leaving a process quickly once its own command has returned.

A ``placer`` process (the command line, a profiling worker, a yardstick worker, an RPC device
server) holds millions of objects from TVM, PyTorch (which TVM's FFI and skops import when it is
installed), scikit-learn and OpenVINO. At exit the interpreter runs full garbage collections over all
of them: 2.3 s of a ``placer tune`` process's end, and 0.8 s a profiling worker made its parent
wait for (measured in session 37). :func:`freeze_before_exit` moves every object into the collector's
permanent generation, which those collections skip (0.35 s). Objects are still freed by reference
counting (only cycles are left to the process's end), and nothing placer writes waits for a
collection: the workers' pipes are unbuffered, Optuna commits each step, stores and files are
closed by their own ``with`` blocks. Call it only where the process ends: frozen objects are never
collected, so in a process that goes on (a test calling :func:`placer.cli.main`) it would keep
their reference cycles alive.
"""

from __future__ import annotations

import gc
import sys
from typing import NoReturn

__all__ = ["exit_process", "freeze_before_exit"]


def freeze_before_exit() -> None:
    """Spare the interpreter's exit its collections over everything this process imported."""
    gc.freeze()


def exit_process(rc: int) -> NoReturn:
    """End a worker's process with exit status ``rc`` (its ``__main__``), the collector frozen first."""
    freeze_before_exit()
    sys.exit(rc)
