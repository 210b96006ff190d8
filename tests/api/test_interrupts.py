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


def test_a_stop_inside_deferred_is_held_until_the_block_ends(tmp_path):
    """A worker interrupted while it asks the study for a trial: the stop is held until the trial is
    known, then the trial is told FAIL (never left RUNNING) and the stop goes on."""
    import optuna

    from placer.tune.tuner import asked_trial

    interrupts.STOP.clear()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    try:
        with pytest.raises(KeyboardInterrupt):
            with asked_trial(study, on_ask=lambda trial: interrupts.request_stop()):  # the stop, mid-ask
                raise AssertionError("the block must not run once a stop was requested")
        assert interrupts.STOP.is_set()
    finally:
        interrupts.STOP.clear()
    [trial] = study.get_trials(deepcopy=False)
    assert trial.state == optuna.trial.TrialState.FAIL


def test_a_stop_that_cut_a_storage_commit_still_fails_the_trial_and_goes_on(tmp_path):
    """A stop request raised inside one of the study storage's commits leaves its session to be rolled
    back (here: a flush that failed). Failing the trial then raised Optuna's StorageInternalError,
    which replaced the stop (``placer tune`` exited 1 with the trial RUNNING); now the trial is told
    FAIL and the stop goes on."""
    import optuna
    from optuna.storages._rdb import models

    from placer.tune.tuner import asked_trial

    interrupts.STOP.clear()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    session = study._storage._backend.scoped_session()
    with pytest.raises(KeyboardInterrupt):
        with asked_trial(study) as trial:
            # the same trial id again: the flush fails and the session must be rolled back
            session.add(models.TrialModel(trial_id=trial._trial_id, number=0, study_id=1,
                                          state=optuna.trial.TrialState.RUNNING))
            with pytest.raises(Exception, match="UNIQUE"):
                session.flush()
            raise KeyboardInterrupt  # the stop request, as the signal handler raises it
    [trial] = study.get_trials(deepcopy=False)
    assert trial.state == optuna.trial.TrialState.FAIL


def test_a_stop_goes_on_when_the_trial_cannot_be_failed_and_its_heartbeat_stops_first(tmp_path, monkeypatch):
    """Seen once in CI: SIGTERM during a trial, then both calls that fail the trial raised "database
    is locked" (StorageInternalError, which replaced the stop), while the trial's heartbeat thread
    waited on the same lock and held the exit up past 120 s. The heartbeat now stops before the
    trial is failed, and a trial that cannot be failed leaves a warning, not a different error."""
    import threading

    import optuna

    from placer.tune import study as study_mod
    from placer.tune.tuner import asked_trial

    interrupts.STOP.clear()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = study_mod.open_storage(f"sqlite:///{tmp_path / 's.db'}", heartbeat_interval=1, grace_period=2)
    study = optuna.create_study(storage=storage)
    beating_at_tell = []

    def locked(*args, **kwargs):
        beating_at_tell.append(any("_record_heartbeat" in t.name for t in threading.enumerate()))
        raise optuna.exceptions.StorageInternalError("database is locked")

    with pytest.raises(KeyboardInterrupt), pytest.warns(RuntimeWarning, match="could not record trial 0"):
        with asked_trial(study):
            assert any("_record_heartbeat" in t.name for t in threading.enumerate())  # it was beating
            monkeypatch.setattr(study_mod, "tell_once", locked)
            raise KeyboardInterrupt  # the stop request, as the signal handler raises it
    assert beating_at_tell == [False, False]
    assert not any("_record_heartbeat" in t.name for t in threading.enumerate())


def test_a_stop_requested_during_a_trials_storage_writes_waits_for_them(tmp_path):
    """A stop request raised inside an Optuna write on SQLite could leave the write lock held for good
    (reproduced with SIGTERM timers: after 1 of 92 interrupts); a trial's suggestions and its tell run
    as ``storage_writes``, so the request is raised once they are all written."""
    import sqlite3

    import optuna

    from placer.tune import study as study_mod

    interrupts.STOP.clear()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = tmp_path / "s.db"
    study = optuna.create_study(storage=study_mod.open_storage(f"sqlite:///{db}"))
    trial = study_mod.ask(study)
    try:
        with pytest.raises(KeyboardInterrupt):
            with study_mod.storage_writes():
                trial.suggest_categorical("a", [1, 2])
                interrupts.request_stop()  # what the SIGTERM handler calls: held, not raised here
                trial.suggest_categorical("b", [1, 2])
    finally:
        interrupts.STOP.clear()
    assert set(study.trials[0].params) == {"a", "b"}  # both writes went through
    con = sqlite3.connect(db, timeout=0.5)
    try:
        con.execute("BEGIN IMMEDIATE")  # nobody holds the write lock
        con.execute("ROLLBACK")
    finally:
        con.close()
