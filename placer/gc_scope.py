"""A garbage collection that looks only at what a block of code made.

The profiling worker collects after each measurement, so that a compiled model's reference cycles
(and the runtime memory they hold) are gone before the next one is compiled. A full collection walks
every tracked object of the process: in a worker that imported TVM, PyTorch and scikit-learn, and
above all in a process that runs a campaign in-process (``isolate=False``: the test suite's workers,
holding everything earlier tests made), one took 0.56 s, which 57 measurements of the suite paid
(32 s of its summed time, session 42). The objects that existed before the measurement are not its
garbage: :func:`collected_after` moves them out of the collector's sight (``gc.freeze``) for the
block, collects once at its end, over what the block made, and gives them back (``gc.unfreeze``).
Cycles among the older objects that the block made unreachable wait for a later collection.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collected_after"]


@contextlib.contextmanager
def collected_after() -> Iterator[None]:
    """Run the block, then collect the garbage it made, without walking the objects that existed
    before it. Where some objects are already frozen (a process on its way out:
    :mod:`placer.process_exit`), a plain full collection, and they stay frozen."""
    scoped = gc.get_freeze_count() == 0
    if scoped:
        gc.freeze()
    try:
        yield
    finally:
        try:
            gc.collect()
        finally:
            if scoped:
                gc.unfreeze()
