"""Benchmark: tune workers sharing one study on PostgreSQL: trials per minute, and nothing lost.

    python -m experiments.bench_scaleout [--model zoo:squeezenet] [--budget 60] [--kill-rounds 3] [--no-pin]

Starts a throwaway PostgreSQL server (placer.tune.local_postgres: the Debian package's initdb and
pg_ctl on 127.0.0.1), warms one profile store (so that neither run spends its budget profiling),
then, on the same model and targets (1-thread ONNX Runtime and OpenVINO):

Hosts. By default worker *i* is pinned to core *i* (its CPU affinity: its targets, its yardsticks
"on all cores" and its contention signal all see that one core), which stands for N one-core hosts
of the same kind: the one-worker run is one such host, the two-worker run two. ``--no-pin`` lets the
workers share every core instead (two workers on one machine: their all-core yardsticks and the
search's own CPU time collide, so this measures the machine, not the scale-out).

A. **Throughput of the search:** one worker alone for ``--budget`` seconds, then two workers at once
   on one study for the same budget (each run on a fresh database). Reports the COMPLETE trials per
   minute of each run, the measured ones per minute (a trial whose plan its worker had measured
   before is told that figure at once: only the others are measurement-bound), the mean duration of
   a measured trial, and the ratios (goal >= 1.8x). The search stops on its own when it converges
   (trials that keep drawing plans already measured), so the runs' spans and plan mixes differ; the
   measuring capacity (2 x one worker's mean time per measured trial / the two workers') is the
   figure that says whether two workers slow each other down.
B. **Kill and resume:** ``--kill-rounds`` times, two workers start on one study; one is SIGKILLed
   while it holds a RUNNING trial; the other finishes; after the heartbeat grace a new worker runs
   one trial. Checks after every round: trial numbers contiguous (none lost), none RUNNING, every
   killed trial FAIL.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = "onnxruntime:t1,openvino:t1"


def _worker(model, url, db, out, *, budget=None, trials=None, seed=0, stale=None, core=None):
    cmd = [sys.executable, "-m", "placer.cli", "tune", model, "--targets", TARGETS, "--storage", url,
           "--db", str(db), "--out", str(out), "--no-cost-model", "--seed", str(seed)]
    if budget is not None:
        cmd += ["--budget", f"{budget:.0f}s"]
    if trials is not None:
        cmd += ["--trials", str(trials)]
    if stale is not None:
        cmd += ["--stale-after", str(stale)]
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=pin)


def _core(i, pin):
    """The core worker ``i`` is pinned to (None: unpinned)."""
    if not pin:
        return None
    cores = sorted(os.sched_getaffinity(0))
    return cores[i % len(cores)]


def _finish(procs, timeout=900):
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise SystemExit(f"worker failed ({p.returncode}):\n{out[-3000:]}")


_STORAGES: dict = {}


def _trials(url):
    """Every trial of every study in ``url``, through one storage per URL (polling with a new one each
    time would open a connection pool each time: the server refuses past max_connections)."""
    import optuna

    storage = _STORAGES.get(url)
    if storage is None:
        storage = _STORAGES[url] = optuna.storages.RDBStorage(url)
    out = []
    for s in optuna.get_all_study_summaries(storage):
        out += optuna.load_study(study_name=s.study_name, storage=storage).get_trials(deepcopy=False)
    return out


def _complete_in_search(trials):
    """``(COMPLETE trials, measured ones, span, mean s per measured trial)``: a trial is measured when
    its worker had not measured its plan before (a plan a worker already measured is told its
    earlier figure at once); the span runs from the first trial's start to the last one's end (s);
    the mean is over the measured trials' own durations (start to end): it rises when the workers
    slow each other down, whatever plans the search happened to draw."""
    import optuna

    done = sorted((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.number)
    if not done:
        return 0, 0, float("nan"), float("nan")
    seen, durations = set(), []
    for t in done:
        key = ((t.user_attrs.get("worker") or {}).get("pid"), t.user_attrs.get("plan_key"))
        if key not in seen:
            durations.append((t.datetime_complete - t.datetime_start).total_seconds())
        seen.add(key)
    span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
    return len(done), len(durations), span, sum(durations) / len(durations)


def throughput(pg_factory, model, db, budget, tmp, pin=True):
    rates = {}
    for n_workers in (1, 2):
        with pg_factory() as pg:
            procs = [_worker(model, pg.url, db, tmp / f"tp{n_workers}-{i}", budget=budget, seed=i,
                             core=_core(i, pin))
                     for i in range(n_workers)]
            _finish(procs)
            n, measured, span, per_measured = _complete_in_search(_trials(pg.url))
        rates[n_workers] = {"complete": n, "measured": measured, "span_s": span,
                            "per_min": 60.0 * n / span if span > 0 else 0.0,
                            "measured_per_min": 60.0 * measured / span if span > 0 else 0.0,
                            "s_per_measured_trial": per_measured}
        print(f"{n_workers} worker(s): {n} trials ({measured} measured, the rest plans already measured) in "
              f"{span:.1f} s of search: {rates[n_workers]['per_min']:.1f}/min, "
              f"{rates[n_workers]['measured_per_min']:.1f} measured/min, "
              f"{per_measured:.2f} s per measured trial",
              flush=True)
    for what in ("per_min", "measured_per_min"):
        rates[f"ratio_{what}"] = rates[2][what] / rates[1][what] if rates[1][what] else float("nan")
    # N workers that do not slow each other down measure N trials in the time one measures one
    rates["ratio_measured_capacity"] = 2 * rates[1]["s_per_measured_trial"] / rates[2]["s_per_measured_trial"]
    print(f"two workers / one: {rates['ratio_per_min']:.2f}x trials/min, {rates['ratio_measured_per_min']:.2f}x "
          f"measured trials/min, {rates['ratio_measured_capacity']:.2f}x measuring capacity "
          "(2 x one worker's "
          "time per measured trial / two workers'; goal >= 1.8x)", flush=True)
    return rates


def kill_rounds(pg_factory, model, db, rounds, tmp, stale=3, pin=True):
    import optuna

    results = []
    with pg_factory() as pg:
        for r in range(rounds):
            doomed, survivor = (_worker(model, pg.url, db, tmp / f"k{r}-{i}", trials=t, stale=stale,
                                        seed=10 * r + i, core=_core(i, pin))
                                for i, t in ((0, 500), (1, 3)))
            killed = None
            deadline = time.monotonic() + 300
            while killed is None and time.monotonic() < deadline:
                for t in _trials(pg.url):
                    if (t.state == optuna.trial.TrialState.RUNNING
                            and (t.user_attrs.get("worker") or {}).get("pid") == doomed.pid):
                        os.kill(doomed.pid, signal.SIGSTOP)
                        again = {x.number: x.state for x in _trials(pg.url)}
                        if again.get(t.number) == optuna.trial.TrialState.RUNNING:
                            killed = t.number
                            break
                        os.kill(doomed.pid, signal.SIGCONT)
                time.sleep(0.05)
            doomed.kill()
            doomed.communicate()
            t_kill = time.monotonic()
            _finish([survivor])
            time.sleep(max(0.0, t_kill + stale + 1 - time.monotonic()))
            # the late worker restarts on the killed worker's host (its core: an unpinned worker
            # is other hardware, with its own study)
            _finish([_worker(model, pg.url, db, tmp / f"k{r}-late", trials=1, stale=stale, seed=10 * r + 5,
                             core=_core(0, pin))])
            trials = _trials(pg.url)
            numbers = sorted(t.number for t in trials)
            states = {t.number: t.state.name for t in trials}
            ok = (numbers == list(range(len(numbers))) and "RUNNING" not in states.values()
                  and killed is not None and states.get(killed) == "FAIL")
            results.append({"round": r, "killed_trial": killed, "trials": len(trials), "ok": ok,
                            "states": {s: list(states.values()).count(s) for s in set(states.values())}})
            print(f"kill round {r}: killed trial {killed}, {len(trials)} trials, {results[-1]['states']}, "
                  f"{'OK' if ok else 'LOST OR RUNNING TRIALS'}", flush=True)
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_scaleout", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="zoo:squeezenet")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per throughput run (default 60)")
    ap.add_argument("--kill-rounds", type=int, default=3)
    ap.add_argument("--no-pin", action="store_true",
                    help="workers share every core (default: worker i on core i)")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)

    from placer import api
    from placer.tune.local_postgres import LocalPostgres

    tmp = Path(tempfile.mkdtemp(prefix="bench-scaleout-"))
    db = tmp / "profiles.db"
    pin = not args.no_pin
    t0 = time.monotonic()
    # warmed as the workers will see the machine: on one core when they are pinned (a target that
    # owns every core it may use has another fingerprint, hence other store rows)
    every_core = os.sched_getaffinity(0)
    if pin:
        os.sched_setaffinity(0, {_core(0, pin)})
    try:
        api.prepare(api.load(args.model), targets=TARGETS.split(","), db=db, progress=False)
    finally:
        os.sched_setaffinity(0, every_core)
    print(f"profile store warmed in {time.monotonic() - t0:.0f} s", flush=True)
    report = {"model": args.model, "targets": TARGETS, "budget_s": args.budget, "cpus": os.cpu_count(),
              "pinned": pin}
    report["throughput"] = throughput(LocalPostgres, args.model, db, args.budget, tmp, pin=pin)
    report["kill_rounds"] = kill_rounds(LocalPostgres, args.model, db, args.kill_rounds, tmp, pin=pin)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0 if all(r["ok"] for r in report["kill_rounds"]) else 1


if __name__ == "__main__":
    sys.exit(main())
