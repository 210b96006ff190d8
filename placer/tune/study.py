"""The Optuna study both tuners share: storage, ask/tell, heartbeats, stale trials, seeds.

Several ``placer tune`` workers may share one study (``--storage``): :func:`open_storage` survives
their race to create the schema and turns heartbeats on; each worker asks for a trial
and runs it inside :func:`asked_trial` (heartbeats while it runs; FAIL if it is
interrupted, even while being asked for), tells its result once (:func:`tell_once` / :func:`tell_trial`: a trial another worker
finished first is dropped, not crashed on) and, before asking again, fails the trials of workers
that stopped sending heartbeats (:func:`fail_stale`). Why ask/tell and not ``study.optimize``, and
the one private Optuna call this needs: :mod:`placer.tune.optuna_shim`.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import optuna
import sqlalchemy.exc

from placer.errors import first_line
from placer.interrupts import deferred, raise_if_stopped
from placer.tune import shared_study
from placer.tune.optuna_shim import trial_heartbeat

__all__ = ["GRACE_PERIOD_S", "HEARTBEAT_INTERVAL_S", "ask", "asked_trial", "fail_stale", "open_storage",
           "open_study", "sampler_seed", "storage_for", "storage_writes", "tell_once", "tell_trial",
           "trial_heartbeat"]


def tell_once(study, trial, value: float | None = None, attrs: Mapping[str, Any] | None = None) -> bool:
    """Store ``attrs`` on ``trial`` and tell Optuna its value (``None``: FAIL); False if another worker
    already finished it.

    Two workers on one SQLite study can ``ask()`` the same enqueued (WAITING) trial: Optuna's
    pop of a waiting trial is not atomic there (SQLite has no ``SELECT ... FOR UPDATE``). The
    second one to finish must not crash ("Cannot tell a COMPLETE trial"): its measurement is
    dropped and the caller asks for another trial, so no trial is lost or counted twice.
    """
    try:
        for k, v in (attrs or {}).items():
            trial.set_user_attr(k, v)
        if value is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    except ValueError as exc:
        if "Cannot tell" not in str(exc):
            raise
        return False
    return True


@contextlib.contextmanager
def storage_writes():
    """A block of study storage writes (a trial's suggestions, its tell) that a stop request does not cut
    in two: the request is held until the block ends, then raised (KeyboardInterrupt). A SIGTERM
    raised inside an Optuna write on SQLite could leave the write lock held by a connection that was
    never rolled back or closed; every later write (failing the trial, the heartbeat) then waited 60
    s for it, and ``placer tune`` was still running 120 s after the signal (two CI runs in session
    14; reproduced with a timer interrupting suggest_categorical: the lock stayed held after 1 of 92
    interrupts, and neither disposing the engine's pool nor clearing the traceback's frames freed
    it)."""
    with deferred():
        yield
    raise_if_stopped()


def tell_trial(study, trial, rec: Any, value: float | None, say: Callable[[str], None], message: str) -> bool:
    """Store the trial's plan key and prediction with it, then tell Optuna its measured value (or FAIL).

    Returns False (and says so) when another worker had already finished the same trial (see
    :func:`tell_once`): the caller then does not count it."""
    attrs = {"plan_key": rec.key, "predicted": rec.predicted_ms, "n_partitions": rec.n_partitions,
             **shared_study.plan_attrs(rec.plan)}
    with storage_writes():
        told = tell_once(study, trial, value, attrs)
    if not told:
        say(f"trial {trial.number}: another worker finished it first; its result is kept, this one dropped")
        return False
    if value is None:
        say(f"trial {trial.number}: failed ({rec.error})")
    else:
        say(f"trial {trial.number}: {message}")
    return True


#: a running trial records a heartbeat this often (s); one silent for GRACE_PERIOD_S is failed
HEARTBEAT_INTERVAL_S = 10
GRACE_PERIOD_S = 60


def open_storage(url: str, *, heartbeat_interval: int = HEARTBEAT_INTERVAL_S, grace_period: int = GRACE_PERIOD_S):
    """The Optuna RDB storage at ``url``, safe when several ``placer tune`` workers open a fresh one at once.

    Optuna creates its schema on first use without a lock, so two processes starting on an empty
    database race ("table ... already exists", "UNIQUE constraint failed: alembic_version";
    optuna#1092, #4621). The loser retries and then finds the schema. SQLite waits up to 60 s for
    the write lock instead of the default 5 s (trials of several workers commit concurrently).

    Heartbeats: a worker records one every ``heartbeat_interval`` s while it runs a trial
    (:func:`~placer.tune.optuna_shim.trial_heartbeat`); :func:`fail_stale` marks FAIL a RUNNING trial
    silent for ``grace_period`` s, i.e. one whose worker was killed, so the study does not keep it
    forever.
    """
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    for attempt in range(8):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs,
                                                     heartbeat_interval=heartbeat_interval,
                                                     grace_period=grace_period)
            if url.startswith("sqlite"):
                _serialize_sqlite_writes(storage.engine)
            return storage
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            # SQLite: "table ... already exists" / locked; PostgreSQL: DuplicateTable, UniqueViolation
            if attempt == 7:
                raise
            time.sleep(0.1 + 0.4 * random.random())
    raise AssertionError("unreachable")


def _serialize_sqlite_writes(engine) -> None:
    """Every transaction on ``engine`` starts with ``BEGIN IMMEDIATE`` (the write lock first).

    Optuna checks a trial's state and then writes it in one transaction: popping a WAITING trial,
    telling a RUNNING one. With SQLite's default deferred transactions two workers can both read
    the old state before either writes, and both win: one enqueued trial run twice, or one trial
    told twice and another worker's trial never created (seen in
    ``tests/scaleout/test_tune_workers.py::test_open_storage_race``: 3 trials instead of 4). Taking
    the lock at the start makes check-then-write atomic (SQLAlchemy's recipe for pysqlite: the
    driver's own transaction handling off, the BEGIN emitted here). PostgreSQL needs none of it.
    """

    @sqlalchemy.event.listens_for(engine, "begin")
    def _begin_immediate(conn):
        # the driver's own BEGIN off (on every connection, those made before this listener too)
        conn.connection.dbapi_connection.isolation_level = None
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def ask(study):
    """``study.ask()`` without Optuna's warning that heartbeats are meant for ``optimize``: with
    ask/tell placer records them itself (:func:`~placer.tune.optuna_shim.trial_heartbeat`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed", category=UserWarning)
        return study.ask()


@contextlib.contextmanager
def asked_trial(study, on_ask: Callable[[Any], None] = lambda trial: None):
    """Ask ``study`` for a trial and run the block with it: heartbeats while it runs
    (:func:`~placer.tune.optuna_shim.trial_heartbeat`), and if it is interrupted (Ctrl-C, SIGTERM)
    or fails before telling Optuna, the trial is told FAIL, so the study keeps no RUNNING trial and
    a later run resumes it cleanly. A stop request arriving while the trial is being asked for
    (``on_ask`` included) is held until the trial is known (:func:`placer.interrupts.deferred`):
    the trial is then failed."""
    trial = heartbeat = None
    try:
        with deferred():
            trial = ask(study)
            # the first heartbeat before anything else: a trial that never got one is never counted
            # stale, so a worker killed before it (the test suite froze one between marking its trial
            # and its first beat) left the trial RUNNING for good
            heartbeat = trial_heartbeat(study, trial)
            heartbeat.__enter__()
            on_ask(trial)
        raise_if_stopped()
        yield trial
    except BaseException:
        if trial is not None:
            # the heartbeat thread first: its writes would contend with the FAIL below for the
            # storage's write lock, and a beat blocked on that lock held the exit up (see below)
            if heartbeat is not None:
                stopping, heartbeat = heartbeat, None
                stopping.__exit__(None, None, None)
            _fail_unwinding(study, trial)
        raise
    finally:
        if heartbeat is not None:
            heartbeat.__exit__(None, None, None)


def _fail_unwinding(study, trial) -> None:
    """Tell ``trial`` FAIL while an exception (a stop request among them) unwinds, held against a
    second stop request. A stop that landed inside one of the storage's commits leaves its session
    to be rolled back: Optuna's first call then rolls it back and raises StorageInternalError
    (which replaced the stop: ``placer tune`` exited 1, not 130, with the trial left RUNNING), and a
    second call goes through. If that fails too (a CI run: "database is locked" on both calls, the
    trial's heartbeat thread blocked on the same lock, and the process still alive 120 s after its
    SIGTERM), the stop goes on all the same, with a warning: the trial stays RUNNING until a later
    run fails it as stale (:func:`fail_stale`, after the grace period)."""
    with deferred():
        try:
            tell_once(study, trial, None)
        except optuna.exceptions.StorageInternalError:
            try:
                tell_once(study, trial, None)
            except optuna.exceptions.StorageInternalError as exc:
                warnings.warn(f"could not record trial {trial.number} as failed ({first_line(exc)}); "
                              "a later run fails it as stale", RuntimeWarning, stacklevel=2)


def storage_for(url: str, stale_after_s: float = GRACE_PERIOD_S):
    """:func:`open_storage` with heartbeats every sixth of ``stale_after_s`` (at least 1 s) and a
    trial silent for ``stale_after_s`` counted as its worker's death."""
    grace = max(2, int(round(stale_after_s)))
    return open_storage(url, heartbeat_interval=max(1, grace // 6), grace_period=grace)


def fail_stale(study, say: Callable[[str], None] = lambda m: None, grace_s: float = GRACE_PERIOD_S) -> int:
    """Mark FAIL the RUNNING trials whose worker stopped sending heartbeats; returns how many."""
    before = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
    if not before:
        return 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    after = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
    failed = sorted(before - after)
    if failed:
        say(f"trial(s) {', '.join(map(str, failed))}: their worker stopped (no heartbeat for "
            f"{grace_s:.0f} s): marked failed")
    return len(failed)


def sampler_seed(seed: int, *, shared: bool) -> int:
    """The TPE seed: ``seed`` for a private study (reproducible); for a shared study (``--storage``)
    mixed with the process id, so concurrent workers do not replay one random startup sequence."""
    return seed if not shared else (int(seed) * 1_000_003 + os.getpid()) % (2**32)


def open_study(storage_url: str, name: str, *, direction: str, seed: int, shared: bool,
               n_startup_trials: int, stale_after_s: float = GRACE_PERIOD_S):
    """The TPE study ``name`` in the storage at ``storage_url`` (created, or loaded to resume it);
    ``shared``: other workers use it too (:func:`sampler_seed`); heartbeats: :func:`storage_for`."""
    sampler = optuna.samplers.TPESampler(seed=sampler_seed(seed, shared=shared),
                                         n_startup_trials=n_startup_trials)
    return optuna.create_study(storage=storage_for(storage_url, stale_after_s), study_name=name, direction=direction,
                               sampler=sampler, load_if_exists=True)
