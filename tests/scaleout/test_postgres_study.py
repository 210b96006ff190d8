"""Tune workers sharing one study on a real PostgreSQL server (started here from the Debian package,
loopback only): one worker killed with SIGKILL in the middle of a trial loses nothing, leaves no
trial RUNNING once its heartbeat is stale, the other finishes, and the best plan is rebuilt from the
study alone and runs correctly."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from placer.tune.local_postgres import LocalPostgres, postgres_bin_dir

pytest.importorskip("psycopg2", reason="the PostgreSQL driver (pip install 'placer[postgres]') is absent")
pytestmark = pytest.mark.skipif(postgres_bin_dir() is None,
                                reason="PostgreSQL server binaries (initdb, pg_ctl) absent: apt-get install postgresql")

TARGETS = "onnxruntime,openvino"
STALE_S = 3


@pytest.fixture(scope="module")
def pg():
    with LocalPostgres() as server:
        yield server


_STORAGES: dict = {}


def _study(url):
    """The one study in ``url`` (None before a worker made it), through one storage per URL: each
    storage holds a pool of connections, and the server's are counted."""
    import optuna

    storage = _STORAGES.get(url)
    if storage is None:
        storage = _STORAGES[url] = optuna.storages.RDBStorage(url)
    names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    if not names:
        return None
    assert len(names) == 1, names
    return optuna.load_study(study_name=names[0], storage=storage)


def _running_trial_of(url, pid):
    """A RUNNING trial worker ``pid`` marked as its own, or None."""
    import optuna

    study = _study(url)
    if study is None:
        return None
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if (t.user_attrs.get("worker") or {}).get("pid") == pid:
            return t.number
    return None


def _freeze_mid_trial(url, proc):
    """Stop ``proc`` (SIGSTOP) at a moment it holds a RUNNING trial; returns that trial's number.
    Bounded by the worker's own work (its --trials): a worker that ends first fails the test."""
    import optuna

    while True:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        number = _running_trial_of(url, proc.pid)
        if number is not None:
            os.kill(proc.pid, signal.SIGSTOP)
            study = _study(url)
            if study.trials[number].state == optuna.trial.TrialState.RUNNING:
                return number
            os.kill(proc.pid, signal.SIGCONT)  # it finished the trial meanwhile: catch the next one
        time.sleep(0.05)


def test_sigkilled_worker_loses_nothing_and_the_best_plan_comes_back(pg, placer_cmd, cli_env, tmp_path,
                                                                      warm_tiny_store):
    import optuna

    from placer import api
    from placer.devices import make_targets
    from placer.materialize import materialize
    from placer.run.api import run_plan
    from placer.tune.shared_study import best_plan, hardware_tag
    from placer.tune.tuner import assignment_key

    db = warm_tiny_store(tmp_path / "profiles.db")  # the workers' study is the subject, not their profiling

    def worker(name, trials):
        cmd = placer_cmd("tune", "zoo:tiny", "--targets", TARGETS, "--trials", trials, "--storage", pg.url,
                         "--db", db, "--out", tmp_path / name, "--stale-after", STALE_S, "--no-cost-model")
        return subprocess.Popen(cmd, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    doomed, survivor = worker("a", 200), worker("b", 4)
    killed = _freeze_mid_trial(pg.url, doomed)
    doomed.kill()  # SIGKILL: no handler runs, its trial stays RUNNING with a heartbeat going stale
    killed_at = time.monotonic()
    doomed.communicate(timeout=60)
    out_b, _ = survivor.communicate(timeout=300)  # hang guard only
    assert survivor.returncode == 0, out_b[-4000:]

    # a worker that starts once the heartbeat is stale marks the killed trial failed, then goes on
    time.sleep(max(0.0, killed_at + STALE_S + 1 - time.monotonic()))
    late = worker("c", 1)
    out_c, _ = late.communicate(timeout=300)
    assert late.returncode == 0, out_c[-4000:]

    study = _study(pg.url)
    trials = study.get_trials(deepcopy=False)
    targets = make_targets(TARGETS.split(","))
    tag = hardware_tag(targets)
    assert study.study_name.endswith(f"-{tag}-latency")  # the hardware is in the study's name
    assert sorted(t.number for t in trials) == list(range(len(trials)))  # none lost
    assert not [t.number for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    assert trials[killed].state == optuna.trial.TrialState.FAIL
    assert (trials[killed].user_attrs["worker"]["pid"]) == doomed.pid
    by_pid = {}
    for t in trials:
        if t.state == optuna.trial.TrialState.COMPLETE:
            w = t.user_attrs["worker"]
            assert w["hardware"] == tag and w["fingerprints"] == {t.name: t.fingerprint_hash() for t in targets}
            by_pid[w["pid"]] = by_pid.get(w["pid"], 0) + 1
    assert by_pid.get(survivor.pid) == 4 and by_pid.get(late.pid) == 1  # each finished what it was asked

    # the best plan, from the study alone (another host could do this), runs and matches the model
    best, plan = best_plan(study)
    assert assignment_key(plan) == best.user_attrs["plan_key"]
    graph = api.load("zoo:tiny")
    result = run_plan(materialize(graph, plan), "seed:0", check=True)
    assert result.numerics is not None and result.numerics.passed


def test_hardware_tag_separates_hardware_not_order():
    from placer.devices import make_targets
    from placer.tune.shared_study import hardware_tag, study_name

    one = make_targets(["onnxruntime:t1", "openvino:t1"])
    assert hardware_tag(one) == hardware_tag(list(reversed(one)))
    assert hardware_tag(one) != hardware_tag(make_targets(["onnxruntime:t2", "openvino:t1"]))
    assert study_name("ab" * 32, one, "latency") == f"placer-{'ab' * 6}-{hardware_tag(one)}-latency"
