"""``placer tune`` killed with SIGKILL at random points, then resumed with the same --out.

Run 1 is killed while it profiles (after a random number of measurements), run 2 after its study
finished at least one trial (plus a random delay), run 3 completes. After every kill both SQLite
files pass ``PRAGMA integrity_check``, every measurement row and every finished trial written
before the kill is still there unchanged, and the final plan runs with ``placer run --check``.
(A profiling campaign killed mid-way and two campaigns sharing one store are
tests/profile/test_prof_resume.py.)
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from rel_support import ROOT, python, subprocess_env
from corpus import SEED

pytestmark = pytest.mark.slow


def _query(db: Path, sql: str) -> list[tuple]:
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()
    except sqlite3.Error:  # not created yet / schema not there yet
        return []


def _integrity(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def _measurements(db: Path) -> dict:
    return {(k, t): (i, ts, st) for k, t, i, ts, st in
            _query(db, "SELECT key, target, id, timestamp, status FROM measurements")}


def _contended(db: Path) -> set:
    """Rows flagged as measured on a busy machine: a later run may take them again (on a quiet one)."""
    return {(k, t) for k, t in _query(db, "SELECT key, target FROM measurements "
                                          "WHERE json_extract(meta, '$.contended') = 1")}


def _finished_trials(study: Path) -> dict:
    return {n: v for n, v in _query(study, "SELECT t.number, v.value FROM trials t JOIN trial_values v "
                                            "ON v.trial_id = t.trial_id WHERE t.state = 'COMPLETE'")}


def _signals_as_in_a_terminal() -> None:
    """In the child, before it execs: SIGINT and SIGTERM at their defaults, as a command typed in a
    terminal has them. A test run started in the background by a non-interactive shell (``pytest ... &``,
    a script, an agent's tool) has SIGINT *ignored*, and an ignored signal stays ignored across fork and
    exec; Python then keeps it ignored, and so does ``placer`` (:func:`placer.interrupts.install` leaves
    a disposition it did not get from Python alone), so the SIGINT the test sends would be dropped and
    tune would run all its trials and exit 0."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _popen(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen(cmd, cwd=ROOT, env=subprocess_env(), stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_signals_as_in_a_terminal)


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    return _popen([python(), "-m", "placer.cli", *argv], log)


def _ignored_signals(pid: int) -> set[int]:
    """The signals process ``pid`` ignores (``SigIgn`` of /proc/PID/status, a bit mask)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        mask = int(next(ln for ln in f if ln.startswith("SigIgn:")).split()[1], 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


def test_the_started_commands_take_sigint_even_when_this_run_ignores_it(tmp_path):
    """The cause of a flake of the SIGINT case below (tune ran all its trials and exited 0): started in
    the background, the test run ignores SIGINT and so did every command it started."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a non-interactive shell
    try:
        plain = subprocess.Popen([python(), "-c", "import time; time.sleep(120)"], stdin=subprocess.DEVNULL)
        started = _popen([python(), "-c", "import time; time.sleep(120)"], tmp_path / "log")
    finally:
        signal.signal(signal.SIGINT, old)
    try:
        # Popen returns once the child has exec'ed: its dispositions are the ones it runs with
        assert signal.SIGINT in _ignored_signals(plain.pid)  # what the SIGINT case used to start
        assert signal.SIGINT not in _ignored_signals(started.pid)
        started.send_signal(signal.SIGINT)  # it stops: KeyboardInterrupt (1), or killed if before Python's handler
        assert started.wait(timeout=60) in (1, -signal.SIGINT)
    finally:
        for p in (plain, started):
            p.kill()
            p.wait(timeout=60)


#: a hang guard, not a time limit: a run whose log has not grown for this long is stuck (a slow or busy
#: machine still prints each phase and trial; no outcome depends on how long the run takes)
STALL_S = 240.0


def _wait(p: subprocess.Popen, log: Path, ready=None) -> int | None:
    """Until ``ready()`` holds while ``p`` runs (asserting it does not end first), or, without ``ready``,
    until ``p`` ends (its return code); fails only if ``p``'s log stops growing for :data:`STALL_S`."""
    size, grew = -1, time.monotonic()
    while not (ready() if ready is not None else p.poll() is not None):
        assert ready is None or p.poll() is None, \
            f"run ended (rc {p.returncode}) before the awaited point:\n{log.read_text()[-3000:]}"
        now = log.stat().st_size if log.exists() else 0
        if now != size:
            size, grew = now, time.monotonic()
        assert time.monotonic() - grew < STALL_S, f"no output for {STALL_S:.0f} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)
    return p.returncode if ready is None else None


def _kill_when(p: subprocess.Popen, ready, log: Path) -> None:
    try:
        _wait(p, log, ready)
        os.kill(p.pid, signal.SIGKILL)
        assert p.wait(timeout=30) == -signal.SIGKILL
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)


def test_tune_killed_twice_then_resumed(tmp_path):
    rng = random.Random(SEED)
    out = tmp_path / "out"
    db, study, log = out / "profiles.db", out / "study.db", tmp_path / "tune.log"
    out.mkdir()
    argv = ["tune", "zoo:tiny", "--targets", "onnxruntime,openvino", "--out", str(out), "--db", str(db),
            "--budget", "10m"]

    # 1) killed while profiling, after a random number of measurements
    k = rng.randint(3, 10)
    _kill_when(_start(argv + ["--trials", "200"], log), lambda: len(_measurements(db)) >= k, log)
    assert _integrity(db) == "ok"
    rows1 = _measurements(db)
    contended1 = _contended(db)
    assert len(rows1) >= k

    # 2) resumed, killed after >= 1 finished trial (and a random delay: maybe mid-trial)
    delay = rng.uniform(0.0, 0.5)
    first = {}

    def one_trial_done() -> bool:
        if not first and _finished_trials(study):
            first["t"] = time.monotonic()
        return bool(first) and time.monotonic() - first["t"] >= delay

    _kill_when(_start(argv + ["--trials", "200"], log), one_trial_done, log)
    assert _integrity(db) == "ok" and _integrity(study) == "ok"
    rows2 = _measurements(db)
    assert rows1.keys() <= rows2.keys(), "a measurement of run 1 vanished"
    flagged = _contended(db) | contended1
    changed = [(key, v, rows2[key]) for key, v in rows1.items() if key not in flagged and rows2[key] != v]
    assert not changed, f"a measurement of run 1 changed: {changed[:3]}"
    trials2 = _finished_trials(study)
    assert trials2

    # 3) resumed again: completes, nothing lost
    p = _start(argv + ["--trials", "3"], log)
    assert _wait(p, log) == 0, log.read_text()[-4000:]
    assert _integrity(db) == "ok" and _integrity(study) == "ok"
    rows3 = _measurements(db)
    assert rows2.keys() <= rows3.keys(), "a measurement of run 2 vanished"
    flagged = _contended(db) | flagged
    changed = [(key, v, rows3[key]) for key, v in rows2.items() if key not in flagged and rows3[key] != v]
    assert not changed, f"a measurement of run 2 changed (key, target), (id, time, status): {changed[:3]}"
    trials3 = _finished_trials(study)
    assert all(trials3.get(n) == v for n, v in trials2.items()), "a finished trial of run 2 was lost"
    assert len(trials3) >= len(trials2) + 1
    assert (out / "plan.json").is_file() and (out / "report.md").is_file()

    # the tuned plan directory loads and passes the numerics check
    r = subprocess.run([python(), "-m", "placer.cli", "run", str(out), "--check"], cwd=ROOT, env=subprocess_env(),
                       capture_output=True, check=False, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]


def _running_trials(study: Path) -> list:
    return _query(study, "SELECT number FROM trials WHERE state = 'RUNNING'")


def test_tune_interrupted_stops_cleanly_and_resumes(tmp_path, warm_tiny_store):
    """Stopped by SIGINT (Ctrl-C) once a trial finished, resumed and stopped by SIGTERM once another
    one did, resumed again: each stop exits 130 saying how to resume, leaves no trial RUNNING and
    both SQLite files whole, and each resume keeps every finished trial and adds to them."""
    out = tmp_path / "out"
    # stopped in its search (profiling stopped and resumed: test_tune_killed_twice_then_resumed)
    db, study = warm_tiny_store(tmp_path / "profiles.db"), out / "study.db"
    argv = ["tune", "zoo:tiny", "--targets", "onnxruntime", "--out", str(out), "--db", str(db)]
    before: dict = {}
    for n, sig in enumerate((signal.SIGINT, signal.SIGTERM)):
        log = tmp_path / f"tune{n}.log"
        p = _start(argv + ["--trials", "500"], log)
        _wait(p, log, lambda done=len(before): study.exists() and len(_finished_trials(study)) > done)
        p.send_signal(sig)
        assert _wait(p, log) == 130, (sig, log.read_text()[-3000:])
        assert "interrupted" in log.read_text() and "resume" in log.read_text()
        assert _integrity(study) == "ok" and _integrity(db) == "ok"
        assert _running_trials(study) == []  # the trial in flight was told FAIL, not left RUNNING
        after = _finished_trials(study)
        assert all(after.get(k) == v for k, v in before.items()) and len(after) > len(before)
        before = after
    log = tmp_path / "tune2.log"
    p = _start(argv + ["--trials", "1"], log)
    assert _wait(p, log) == 0, log.read_text()[-3000:]
    after = _finished_trials(study)
    assert all(after.get(n) == v for n, v in before.items()) and len(after) > len(before)
