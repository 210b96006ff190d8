"""The one place placer touches Optuna's private API (checked against :data:`CHECKED_WITH`).

placer drives its studies with ask/tell (:mod:`placer.tune.study`), not ``study.optimize``:

* two workers sharing one SQLite study can be handed the same enqueued trial, and the second to
  finish must drop its result, not crash (``study.optimize`` raises out of the loop there);
* a candidate that fails (a plan whose outputs differ from the reference, a runtime that refuses
  a partition) is an ordinary result of the search, told as FAIL; ``study.optimize`` reports each
  one as a warning with a traceback;
* the search stops on rules of its own (told trials counted, a converged search, a stop request).

What ask/tell lacks publicly is the heartbeat ``study.optimize`` records for a running trial, which
lets another worker fail a trial whose process was killed (``optuna.storages.fail_stale_trials``,
public). :func:`trial_heartbeat` borrows Optuna's own heartbeat thread for that: a private module
(``optuna.storages._heartbeat``) and the private ``Trial._trial_id`` / ``Study._storage``.
``tests/tune/test_optuna_shim.py`` fails when the installed Optuna is not :data:`CHECKED_WITH`
(re-check this module, then update it) or when those names are gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from optuna.storages._heartbeat import get_heartbeat_thread, is_heartbeat_enabled

__all__ = ["CHECKED_WITH", "trial_heartbeat"]

#: the Optuna version this module was checked against (pyproject.toml pins it)
CHECKED_WITH = "5.0.0"


@contextlib.contextmanager
def trial_heartbeat(study: Any, trial: Any) -> Iterator[None]:
    """Context manager: a thread records ``trial``'s heartbeat in ``study``'s storage while the block
    runs, as ``study.optimize`` does for its trials (a no-op without heartbeats in the storage).
    The first heartbeat is recorded before the block starts: Optuna never counts a RUNNING trial
    without one as stale, so a worker killed before the thread's first beat would leave the trial
    RUNNING forever."""
    storage = study._storage
    if is_heartbeat_enabled(storage):
        storage.record_heartbeat(trial._trial_id)
    with get_heartbeat_thread(trial._trial_id, storage):
        yield
