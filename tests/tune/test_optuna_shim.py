"""The one private Optuna API placer uses (placer.tune.optuna_shim) still exists and still works.

Fails on an Optuna upgrade on purpose: re-check the shim against the new version (the private
heartbeat module, ``Trial._trial_id``, ``Study._storage``), then update ``CHECKED_WITH``.
"""

from __future__ import annotations

import time

import optuna
import pytest

from placer.tune import optuna_shim
from placer.tune.study import ask, fail_stale, open_storage


def test_installed_optuna_is_the_one_the_shim_was_checked_with():
    assert optuna.__version__ == optuna_shim.CHECKED_WITH, (
        f"Optuna {optuna.__version__} is installed; placer/tune/optuna_shim.py was checked with "
        f"{optuna_shim.CHECKED_WITH}: re-check its private calls against this version, then update CHECKED_WITH")


def test_the_private_names_it_uses_are_there():
    from optuna.storages import _heartbeat

    assert callable(_heartbeat.get_heartbeat_thread)
    study = optuna.create_study()
    trial = study.ask()
    assert isinstance(trial._trial_id, int) and study._storage is not None


@pytest.mark.parametrize("beating", [True, False])
def test_a_running_trial_stays_alive_only_while_its_heartbeat_runs(tmp_path, beating):
    """With heartbeats (interval 1 s, grace 2 s) a RUNNING trial is left alone by fail_stale; one
    whose heartbeat stopped is failed once the grace period has passed."""
    storage = open_storage(f"sqlite:///{tmp_path / 'hb.db'}", heartbeat_interval=1, grace_period=2)
    study = optuna.create_study(storage=storage, study_name="hb")
    trial = ask(study)
    with optuna_shim.trial_heartbeat(study, trial):
        time.sleep(1.2)  # at least one heartbeat recorded
    if beating:
        with optuna_shim.trial_heartbeat(study, trial):
            time.sleep(2.5)
            assert fail_stale(study) == 0
        assert study.trials[0].state == optuna.trial.TrialState.RUNNING
    else:
        time.sleep(3.0)
        assert fail_stale(study) == 1
        assert study.trials[0].state == optuna.trial.TrialState.FAIL


def test_a_trial_has_its_first_heartbeat_before_its_worker_marks_it(tmp_path):
    """``asked_trial`` records the trial's first heartbeat before ``on_ask`` (which marks the trial as
    the worker's): a trial with no heartbeat is never counted stale, so a worker killed between the two
    left it RUNNING for good (``tests/scaleout/test_postgres_study.py`` froze one there in session 36's
    CI run). The heartbeats are read from Optuna's own table."""
    import sqlite3

    from placer.tune.study import asked_trial

    db = tmp_path / "hb.db"
    storage = open_storage(f"sqlite:///{db}", heartbeat_interval=1, grace_period=2)
    study = optuna.create_study(storage=storage, study_name="hb")
    seen = []

    def on_ask(trial):
        with sqlite3.connect(db) as conn:
            seen.append(conn.execute("SELECT COUNT(*) FROM trial_heartbeats WHERE trial_id = ?",
                                     (trial._trial_id,)).fetchone()[0])

    with asked_trial(study, on_ask) as trial:
        study.tell(trial, 1.0)
    assert seen == [1]
