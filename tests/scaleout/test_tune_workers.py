"""Several `placer tune` workers on one Optuna study (RDB storage): no trial lost, none duplicated."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

TRIALS = 2
WORKERS = 2


def _trials(url: str):
    import optuna

    studies = optuna.get_all_study_summaries(url)
    assert len(studies) == 1, [s.study_name for s in studies]  # both workers joined one study
    return optuna.load_study(study_name=studies[0].study_name, storage=url).get_trials(deepcopy=False)


def test_two_tune_workers_share_one_study(placer_cmd, cli_env, tmp_path):
    """Both workers start at once on a fresh SQLite study (and a shared, empty profile store).

    Each asks exactly ``--trials`` trials and an ask either takes a waiting (enqueued) trial or
    creates one, so the study ends with exactly WORKERS x TRIALS trials, whatever the race on the
    default trial's enqueue (Optuna's ``skip_if_exists`` is not atomic across processes: it may be
    enqueued once or twice, and every enqueued copy is consumed by an ask).
    """
    url = f"sqlite:///{tmp_path / 'study.db'}"
    procs = []
    # one runtime: the shared study and two processes profiling into one store are the subject, and a
    # second runtime only doubled the profiling (session 55: 31 -> 17 s alone)
    for w in range(WORKERS):
        cmd = placer_cmd("tune", "zoo:tiny", "--targets", "onnxruntime", "--trials", TRIALS,
                         "--storage", url, "--db", tmp_path / "profiles.db", "--out", tmp_path / f"out{w}")
        procs.append(subprocess.Popen(cmd, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=240)
        outs.append(out)
        assert p.returncode == 0, out[-4000:]
    trials = _trials(url)
    numbers = sorted(t.number for t in trials)
    assert numbers == list(range(WORKERS * TRIALS)), numbers  # none lost, none duplicated
    assert all(t.state.is_finished() for t in trials), [t.state for t in trials]
    assert sum(t.state.name == "COMPLETE" for t in trials) == WORKERS * TRIALS
    enqueued = [t for t in trials if "fixed_params" in t.system_attrs]
    assert 1 <= len(enqueued) <= WORKERS
    assert all("plan_key" in t.user_attrs for t in trials)
    for w in range(WORKERS):
        assert (tmp_path / f"out{w}" / "plan.json").is_file()


def test_open_storage_race(tmp_path):
    """Four processes open one fresh SQLite storage at the same moment (Optuna's schema creation
    is not locked: without the retry in `open_storage` some of them crash), then each finishes one
    trial. Two of them may pop the same enqueued trial (Optuna's pop is not atomic on SQLite):
    `tell_once` then returns False for the second and that worker asks again, so exactly four
    distinct trials end COMPLETE."""
    url = f"sqlite:///{tmp_path / 'race.db'}"
    code = textwrap.dedent(f"""
        import sys, time, optuna
        from placer.tune.study import open_storage, tell_once
        t0 = float(sys.argv[1])
        time.sleep(max(t0 - time.time(), 0))
        storage = open_storage({url!r})
        study = optuna.create_study(storage=storage, study_name="race", load_if_exists=True)
        study.enqueue_trial({{"x": 1.0}}, skip_if_exists=True)
        for _ in range(10):
            t = study.ask({{"x": optuna.distributions.FloatDistribution(0, 2)}})
            if tell_once(study, t, 1.0, {{"pid": 1}}):
                break
        else:
            raise SystemExit("no trial could be told in 10 asks")
    """)
    import time

    start = time.time() + 4.0  # after every interpreter has imported optuna
    procs = [subprocess.Popen([sys.executable, "-c", code, str(start)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(4)]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out[-3000:]
    import optuna

    trials = optuna.load_study(study_name="race", storage=url).get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert all(t.state.name == "COMPLETE" for t in trials), [t.state for t in trials]


def test_tell_once_refuses_a_finished_trial(tmp_path):
    """The second tell of one trial (a worker that popped a trial another one finished) is refused
    with False instead of crashing, and the first value is kept."""
    import optuna

    from placer.tune.study import tell_once

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 2)})
    assert tell_once(study, trial, 1.0, {"who": "first"}) is True
    assert tell_once(study, trial, 2.0, {"who": "second"}) is False
    assert tell_once(study, trial, None) is False
    (only,) = study.get_trials()
    assert only.value == 1.0 and only.user_attrs == {"who": "first"}


@pytest.mark.parametrize("shared", [False, True])
def test_sampler_seed(shared):
    from placer.tune.study import sampler_seed

    s = sampler_seed(7, shared=shared)
    assert (s == 7) is (not shared)
    assert 0 <= s < 2**32


def test_a_killed_workers_running_trial_is_failed_after_its_heartbeat_stops(tmp_path):
    """A worker killed mid-trial leaves its trial RUNNING; once its heartbeat is older than the grace
    period, the next worker's `fail_stale` marks it FAIL (and leaves live trials alone)."""
    import time

    import optuna

    from placer.tune.study import ask, fail_stale, open_storage, trial_heartbeat

    url = f"sqlite:///{tmp_path / 'hb.db'}"
    code = textwrap.dedent(f"""
        import os, time, optuna
        from placer.tune.study import open_storage, trial_heartbeat
        study = optuna.create_study(storage=open_storage({url!r}, heartbeat_interval=1, grace_period=2),
                                    study_name="hb")
        trial = study.ask()
        with trial_heartbeat(study, trial):
            time.sleep(1.5)
            os._exit(9)  # killed mid-trial: no tell, no cleanup
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 9, p.stderr[-2000:]
    study = optuna.load_study(study_name="hb", storage=open_storage(url, heartbeat_interval=1, grace_period=2))
    live = ask(study)
    said = []
    with trial_heartbeat(study, live):
        time.sleep(3.0)  # the dead trial's heartbeat is now older than the grace period; ours is fresh
        assert fail_stale(study, said.append) == 1
    states = {t.number: t.state.name for t in study.get_trials(deepcopy=False)}
    assert states == {0: "FAIL", 1: "RUNNING"}, states
    assert said and "0" in said[0] and "heartbeat" in said[0]
