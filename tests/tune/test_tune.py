"""placer tune end to end on a small model (real runtimes, tiny budget), the API and the report."""

from __future__ import annotations

import json
import math
import os
import statistics
import types

import optuna
import pytest

from placer.cli import main
from placer.plan import Plan

TARGETS = "onnxruntime,openvino"


@pytest.fixture(scope="module")
def db(tmp_path_factory, warm_tiny_store):
    """A copy of the run's warm store (zoo:tiny profiled on TARGETS), shared by the module's tune runs."""
    return str(warm_tiny_store(tmp_path_factory.mktemp("tune_db") / "profiles.db"))


def test_cli_tune_latency_end_to_end(tmp_path, db, capsys):
    out = tmp_path / "out"
    rc = main(["tune", "zoo:tiny", "--targets", TARGETS, "--trials", "3", "--out", str(out), "--db", db])
    assert rc == 0
    text = capsys.readouterr().out
    assert "report:" in text and str(out / "report.md") in text
    for f in ("plan.json", "stage_config.json", "module.relax.txt", "model.onnx", "report.md", "report.html",
              "gantt.png", "predicted_vs_measured.png", "trials.json", "study.db"):
        assert (out / f).is_file(), f
    assert list((out / "partitions").glob("*.onnx"))
    records = json.loads((out / "trials.json").read_text())
    baselines = [r for r in records if r["kind"] == "baseline"]
    assert {r["label"] for r in baselines} == {"single:onnxruntime@cpu:t1", "single:openvino@cpu:t1"}
    # every candidate priced on the problem re-priced from the session's single targets, the measured
    # single targets too (the store's price kept beside it); the others have no store price of their own
    shown = ("label", "measured_ms", "predicted_ms", "store_predicted_ms", "error")
    priced = [r for r in baselines if r["measured_ms"]]
    assert all(r["store_predicted_ms"] > 0 and r["predicted_ms"] > 0 for r in priced), \
        [{k: r[k] for k in shown} for r in baselines]
    assert all(r["store_predicted_ms"] is None for r in records if r["kind"] != "baseline")
    measured = [r for r in records if r["measured_ms"] is not None]
    # every placement candidate passes the numerics check; a yardstick is what a user runs, checked
    # and reported but not required to pass (OpenVINO's default is bf16 on a CPU that has it)
    assert measured and all(r["numerics_ok"] for r in measured if r["kind"] != "yardstick")
    assert all(r["numerics_ok"] in (True, False) for r in measured if r["kind"] == "yardstick")
    # the plan written is the best candidate of the final rounds (the measured guard), compared
    # round by round: every final record carries its paired figure
    final = [r for r in measured if r["final"]]
    assert final and all(r["paired_ms"] is not None and r["paired_ms"] > 0 for r in final)
    # each final trial is priced again from the single targets measured in the same rounds; the single
    # targets (its anchors) and the yardsticks are not
    assert all(r["anchored_predicted_ms"] > 0 for r in final if r["kind"] == "trial")
    assert all(r["anchored_predicted_ms"] is None for r in records if r["kind"] != "trial" or not r["final"])
    plan = Plan.load(out / "plan.json")
    best = min((r for r in final if r["kind"] != "yardstick"), key=lambda r: r["paired_ms"])
    assert plan.assignment == best["plan"]["assignment"]
    study = optuna.load_study(study_name=optuna.get_all_study_names(f"sqlite:///{out / 'study.db'}")[0],
                              storage=f"sqlite:///{out / 'study.db'}")
    assert len(study.trials) == 3
    report = (out / "report.md").read_text()
    assert "Candidates" in report and "single:onnxruntime@cpu:t1" in report and "gantt.png" in report
    # placer run on the tuned plan dir, checked against the reference
    assert main(["run", str(out), "--inputs", "seed:1", "--check"]) == 0
    # placer report re-renders the report from the saved records
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0
    assert "Candidates" in (out / "report.md").read_text()
    assert main(["report", str(tmp_path)]) == 2  # not a tune directory: one clear line


def test_python_api_plan_run_explain(tmp_path, db):
    import placer

    pm = placer.plan("zoo:tiny", targets=TARGETS.split(","), db=db, time_limit=3)
    assert isinstance(pm.plan, placer.Plan) and pm.makespan_ms > 0
    rows = pm.explain()
    assert {r["op"] for r in rows} == set(pm.assignment)
    assert all(r["reason"] in {"pinned", "only supported target", "cheapest", "memory", "transfers"} for r in rows)
    result = pm.run("seed:0")
    assert result.numerics.passed and result.measurement.latency_p50_ms > 0
    pm.save(tmp_path / "plan_dir")
    assert placer.Plan.load(tmp_path / "plan_dir" / "plan.json").assignment == {
        op: t for op, t in pm.assignment.items()}
    assert callable(placer.tune)


def test_api_tune_latency_and_rerun_reuses_study(tmp_path, db):
    from placer.tune import tune

    res = tune("zoo:tiny", targets=TARGETS.split(","), db=db, out_dir=tmp_path, n_trials=2)
    assert res.best.measured_ms > 0 and res.best_single.measured_ms > 0
    assert res.best.measured_ms <= res.best_single.measured_ms + 1e-9
    assert res.speedup_vs_best_single >= 1.0 - 1e-9
    assert res.report_path.is_file() and (tmp_path / "report.html").is_file()
    keys = [r.key for r in res.records]
    assert len(keys) == len(set(keys))  # a placement measured once, whatever the knobs
    # a second run on the same storage continues the study (resumable)
    tune("zoo:tiny", targets=TARGETS.split(","), db=db, out_dir=tmp_path, n_trials=1)
    names = optuna.get_all_study_names(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.load_study(study_name=names[0], storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert len(study.trials) == 3


def test_per_core_stages_are_priced_from_each_runtime_s_one_thread_target():
    """The default targets list each runtime on all cores first, then at one thread: a pipeline stage
    owns one core, so its costs come from the one-thread column (they came from the first of the kind)."""
    from placer.devices import make_target
    from placer.tune.pipeline_tuner import one_thread_columns

    targets = [make_target(n) for n in ("onnxruntime:t2", "openvino:t2", "onnxruntime:t1", "openvino:t1")]
    assert one_thread_columns(targets) == {"onnxruntime": 2, "openvino": 3}
    # a runtime without a one-thread target keeps its first one
    assert one_thread_columns(targets[:2] + targets[3:]) == {"onnxruntime": 0, "openvino": 2}


def test_a_spent_throughput_budget_still_gets_every_final_round(tmp_path, db):
    """The verdict's samples: the final rounds run FINAL_ROUNDS rounds even when the budget is spent by
    then (a 1-s budget is, by the profiling and the baselines: the search runs no trial), and say so."""
    from placer.tune import tune
    from placer.tune.pipeline_tuner import FINAL_ROUNDS

    said: list[str] = []
    res = tune("zoo:tiny", targets=TARGETS.split(","), db=db, out_dir=tmp_path, objective="throughput",
               budget_s=1, progress=said.append)
    assert not [r for r in res.records if r.kind == "trial"]
    finals = res.extra["final_rounds"]
    # rounds may be added after them, for rounds no runtime read as a spell of the host
    n_rounds = len(res.extra["final_rounds_spelled"])
    assert FINAL_ROUNDS <= n_rounds and finals and all(len(v) == n_rounds for v in finals.values()), finals
    assert any("final rounds past the 1 s budget" in m for m in said)


def test_api_tune_throughput_pipeline(tmp_path, db):
    from placer.tune import tune

    res = tune("zoo:tiny", targets=TARGETS.split(","), db=db, out_dir=tmp_path, objective="throughput",
               n_trials=2)
    assert res.objective == "throughput"
    assert res.best.throughput_rps > 0 and res.extra["core_limit_rps"] > 0
    trials = [r for r in res.records if r.kind == "trial" and r.throughput_rps]
    assert trials and all(r.numerics_ok for r in trials)
    assert all(len(set(r.plan.stage.values())) >= 1 for r in trials)
    assert "req/s" in (tmp_path / "report.md").read_text()
    # the replicated candidates: the whole model on one runtime, one replica per core, measured and checked
    reps = {r.key: r for r in res.records if r.kind == "replicas"}
    n_cores = len(os.sched_getaffinity(0))
    assert set(reps) == {f"replicas:{k}:t1x{n_cores}" for k in ("onnxruntime", "openvino")}
    for r in reps.values():
        assert r.throughput_rps > 0 and r.numerics_ok and r.error is None, r
        assert r.knobs["replicas"] == [[c] for c in sorted(os.sched_getaffinity(0))]
        assert len(res.extra["throughput_rounds"][r.key]) >= 2
    # the measured guard: the chosen candidate is the best of those measured side by side at the end
    # (finalists and baselines, interleaved rounds), and its plan dir runs
    final = [r for r in res.records if r.key in res.extra["final_candidates"]]
    assert res.best in final and {r.kind for r in final} >= {"baseline", "replicas"}
    assert res.best.throughput_rps == max(r.throughput_rps for r in final)
    assert all(len(res.extra["final_rounds"][r.key]) >= 1 for r in final if r.kind != "baseline")
    # their figures are the final rounds', and the report says so (it labelled them "measured in its
    # trial, not in the final rounds")
    assert all(r.final for r in final)
    # each runtime alone, on all cores and at one thread, is measured in the final rounds as the candidates
    # are (pipeline rounds of the same requests), and that figure is the one it competes with; the N-core
    # limit is N x the best one-thread figure of those rounds (a median of single requests put it above
    # what N sessions reach: session 54)
    alone = [r for r in final if r.kind == "baseline"]
    finals = res.extra["final_rounds"]
    assert {r.key for r in alone} == {f"{k}:t{t}" for k in ("onnxruntime", "openvino") for t in (1, n_cores)}
    assert all(r.throughput_rps == pytest.approx(statistics.median(finals[r.key])) for r in alone)
    one_thread = max(r.throughput_rps for r in alone if r.key.endswith(":t1"))
    assert res.extra["core_limit_rps"] == pytest.approx(n_cores * one_thread)
    assert res.extra["core_limit_fraction"] == pytest.approx(res.best.throughput_rps / res.extra["core_limit_rps"])
    saved = json.loads((tmp_path / "trials.json").read_text())
    assert {r["key"] for r in saved if r["kind"] == "replicas"} == set(reps)
    assert main(["run", str(tmp_path), "--pipeline", "--requests", "8", "--check"]) == 0
    # the throughput yardsticks of this machine, each measured and its outputs checked
    from placer.run.yardsticks import label, throughput_kinds

    ys = {r.key: r for r in res.yardsticks}
    assert set(ys) == {label(k) for k in throughput_kinds()}
    assert all(r.throughput_rps > 0 and r.numerics_ok in (True, False) for r in ys.values())
    # the f32 ones pass at the f32 tolerance; the fastest of those that pass is the fair yardstick
    assert ys[label("ort-sessions")].numerics_ok
    if label("ov-throughput-f32") in ys:
        assert ys[label("ov-throughput-f32")].numerics_ok
    passing = res.best_default_passing
    assert passing is not None and passing.numerics_ok
    assert passing.throughput_rps == max(r.throughput_rps for r in ys.values() if r.numerics_ok)


def test_throughput_tune_writes_a_replicated_plan_dir_when_it_wins(tmp_path, db, monkeypatch):
    """A replicated winner is saved with its replicas (stage config version 2) and runs: no study
    trials, and the baselines made to look 100x slower (in the latency bench and in the final rounds'
    pipeline rounds), so a replicated candidate wins."""
    from placer.run import bench as bench_mod
    from placer.tune import tune

    class SlowBench(bench_mod.PlanBench):  # every baseline sample taken 100x slower than measured
        def measure(self, keys, *, rounds=None):
            before = {k: len(self.candidates[k].samples_ms) for k in keys}
            super().measure(keys, rounds=rounds)
            for k in keys:
                s = self.candidates[k].samples_ms
                s[before[k]:] = [x * 100 for x in s[before[k]:]]
            return {k: self.stats(k) for k in keys}

    monkeypatch.setattr(bench_mod, "PlanBench", SlowBench)
    # each runtime alone on all cores also runs pipeline rounds in the final rounds: those 100x slower too
    from placer.tune import pipeline_tuner

    real_round = pipeline_tuner._PipelineRuns.round

    def slow_round(self, warmup=0):
        rps = real_round(self, warmup)
        if not any(s.replicas for s in self.mat.stage_config.stages):  # no trials here: a runtime alone
            rps = self.rps[-1] = rps / 100
        return rps

    monkeypatch.setattr(pipeline_tuner._PipelineRuns, "round", slow_round)
    res = tune("zoo:tiny", targets=TARGETS.split(","), db=db, out_dir=tmp_path, objective="throughput", n_trials=0)
    assert res.best.kind == "replicas" and not res.fell_back
    cfg = json.loads((tmp_path / "stage_config.json").read_text())
    assert cfg["version"] == 2 and cfg["stages"][0]["replicas"] == res.best.knobs["replicas"]
    assert "Chosen layout" in (tmp_path / "report.md").read_text()
    assert main(["run", str(tmp_path), "--pipeline", "--requests", "8", "--check"]) == 0
    assert main(["report", str(tmp_path)]) == 0  # the saved records load back


def test_throughput_final_rounds_add_rounds_for_a_spell_and_leave_out_a_runtime_that_fails(tmp_path, db, monkeypatch,
                                                                                         added_rounds):
    """The runtimes alone made deterministic in the final rounds (100 req/s at 1 thread, 190 on all
    cores). ONNX Runtime on all cores serves at its 1-thread rate in the first two (a spell): rounds are
    added until two read no spell, and every round counts in the figures. OpenVINO at one thread raises
    in its third round: it has no final figure, its error says why, and the N-core limit and the choice
    are made without it (its None figure raised in max)."""
    from placer.errors import PlacerError
    from placer.run.bench import QUIET_WAIT_ENV
    from placer.tune import pipeline_tuner, tune

    monkeypatch.setenv(QUIET_WAIT_ENV, "0")
    real_round = pipeline_tuner._PipelineRuns.round
    n_cores = len(os.sched_getaffinity(0))
    calls: dict[str, int] = {}

    def scripted_round(self, warmup=0):
        stages = self.mat.stage_config.stages
        target = self.mat.partitions[0].target if len(self.mat.partitions) == 1 else ""
        alone = len(stages) == 1 and not stages[0].replicas and target
        n = 0
        if alone:  # a runtime alone's rounds, counted (replicas run on the same one-thread targets)
            n = calls[target] = calls.get(target, 0) + 1
        if alone and target == "openvino@cpu:t1" and n == pipeline_tuner.FINAL_ROUNDS:
            raise PlacerError("scripted: the session died")
        rps = real_round(self, warmup)
        if alone:
            rps = 100.0 if target.endswith(":t1") else 190.0
            if target == f"onnxruntime@cpu:t{n_cores}" and n <= 2:
                rps = 100.0  # the spell
            self.rps[-1] = rps
        return rps

    real_baselines = pipeline_tuner.ThroughputSearch.measure_baselines

    def baselines_without_a_quiet_ratio(self):
        stats = real_baselines(self)
        self.quiet_ratio = {}  # the rounds' own ratios only: the scripted figures decide
        return stats

    monkeypatch.setattr(pipeline_tuner._PipelineRuns, "round", scripted_round)
    monkeypatch.setattr(pipeline_tuner.ThroughputSearch, "measure_baselines", baselines_without_a_quiet_ratio)
    said: list[str] = []
    res = tune("zoo:tiny", targets=TARGETS.split(","), db=db, out_dir=tmp_path, objective="throughput",
               n_trials=0, progress=said.append)
    # the spell: two rounds added ... (OpenVINO's pair reads nothing once its one-thread runtime is gone)
    assert res.extra["final_rounds_spelled"] == [True, True, False, False]
    finals = res.extra["final_rounds"]
    assert "openvino:t1" not in finals and all(len(v) == 4 for v in finals.values()), finals
    base = {r.key: r for r in res.records if r.kind == "baseline"}
    assert base[f"onnxruntime:t{n_cores}"].throughput_rps == pytest.approx(145.0)  # 100, 100, 190, 190
    for r in res.records:
        if r.kind == "replicas" and r.key in finals:
            assert r.throughput_rps == pytest.approx(statistics.median(finals[r.key]))
    assert any("2 of 3 read as a spell of the host" in m and "one more round" in m for m in said), said
    assert any("2 of 4 read as a spell of the host (marked *; every round counts)" in m for m in said), said
    report = (tmp_path / "report.md").read_text()
    assert "2 of 4 rounds read as a spell of the host" in report and "100\\*, 100\\*, 190, 190" in report
    # ... and the runtime that failed: out of the limit and of the choice
    failed = base["openvino:t1"]
    assert failed.throughput_rps is None and "scripted: the session died" in failed.error
    assert "openvino:t1" not in res.extra["final_candidates"] and res.best is not failed
    assert res.extra["core_limit_rps"] == pytest.approx(n_cores * 100.0)  # ONNX Runtime's one thread alone


def test_per_core_targets_keep_each_runtime_s_one_thread_target_else_its_first():
    from placer.devices import make_targets
    from placer.tune.pipeline_tuner import per_core_targets

    def names(ts):
        return [t.name for t in ts]

    both = make_targets(["onnxruntime:t2", "openvino:t2", "onnxruntime:t1", "openvino:t1"])
    assert names(per_core_targets(both)) == ["onnxruntime@cpu:t1", "openvino@cpu:t1"]
    only_all_cores = make_targets(["openvino:t2", "onnxruntime:t2", "onnxruntime:t1"])
    assert names(per_core_targets(only_all_cores)) == ["openvino@cpu:t2", "onnxruntime@cpu:t1"]
    # untuned TVM is no stage's runtime while another is given (ThroughputSearch.usable): not profiled
    assert names(per_core_targets(make_targets(["tvm-llvm:t1", "onnxruntime:t1"]))) == ["onnxruntime@cpu:t1"]
    assert names(per_core_targets(make_targets(["tvm-llvm:t1"]))) == ["tvm-llvm@cpu:t1"]


def test_every_runtime_s_replicas_run_in_the_final_rounds_beside_the_best_trials():
    # lucky pipeline trials took the final places and left ONNX Runtime's replicas out (session 39)
    import math

    from placer.tune.pipeline_tuner import N_FINALISTS, ThroughputSearch
    from placer.tune.records import TrialRecord

    def rec(key, kind, rps):
        return TrialRecord(key, key, kind, {}, None, math.nan, throughput_rps=rps)

    search = ThroughputSearch.__new__(ThroughputSearch)
    search.n_cores = 2
    trials = [rec(f"trial {i}", "trial", 350.0 - i) for i in range(N_FINALISTS + 2)]
    reps = [rec("replicas:openvino:t1x2", "replicas", 293.9),
            rec("replicas:onnxruntime:t1x2", "replicas", 293.7)]
    alone = [rec("onnxruntime:t2", "baseline", 250.0), rec("onnxruntime:t1", "baseline", 170.0)]
    search.records = trials + reps + alone + [rec("failed", "replicas", None)]
    finalists, runtimes_alone = search.finalists()
    assert finalists == trials[:N_FINALISTS] + reps
    assert runtimes_alone == alone  # on all cores, and at one thread: the N-core limit's unit


def test_a_throughput_tune_profiles_ops_on_the_per_core_targets_only(tmp_path):
    # each runtime on all cores is measured whole as a baseline; no trial reads its op costs. The study
    # keeps the name, and the choices, the user's targets give it (a resumed study keeps its distributions)
    from placer.devices import make_target, make_targets
    from placer.profile import ProfileStore
    from placer.tune import shared_study, tune
    from placer.tune.pipeline_tuner import ThroughputSearch, per_core_targets
    from placer.zoo import load_graph

    n = len(os.sched_getaffinity(0))
    if n < 2:
        pytest.skip("the throughput objective needs 2 cores")
    given = [f"onnxruntime:t{n}", "openvino:t1", "onnxruntime:t1"]
    db, out = tmp_path / "profiles.db", tmp_path / "out"
    res = tune("zoo:tiny", targets=given, db=db, out_dir=out, objective="throughput", n_trials=0)
    graph = load_graph("zoo:tiny")
    with ProfileStore(db, readonly=True) as st:
        ops = len(graph.ops)
        for name, rows in (("onnxruntime:t1", ops), ("openvino:t1", ops), (given[0], 0)):
            assert len(st.op_costs(graph, [make_target(name)], missing="skip")) == rows, name
    baselines = {r.key: r for r in res.records if r.kind == "baseline"}
    assert baselines[f"onnxruntime:t{n}"].throughput_rps > 0
    assert baselines["onnxruntime:t1"].throughput_rps > 0
    assert res.extra["targets_given"] == [t.name for t in make_targets(given)]
    name = shared_study.study_name(graph.model_hash, make_targets(given), "throughput")
    assert name in optuna.get_all_study_names(f"sqlite:///{out / 'study.db'}")
    ctx = types.SimpleNamespace(graph=graph, targets=per_core_targets(make_targets(given)))
    search = ThroughputSearch(ctx, budget_s=None, out=tmp_path, storage=None, seed=0, t_start=0.0,
                              solver_time_limit=1.0, say=lambda m: None, n_trials=0,
                              study_targets=make_targets(given))
    assert search.usable == ["onnxruntime", "openvino", "onnxruntime"]


def test_tune_rejects_bad_objective_and_budget(capsys):
    assert main(["tune", "zoo:tiny", "--objective", "latency", "--budget", "soon"]) == 2
    assert "--budget" in capsys.readouterr().err
    assert main(["tune", "/nonexistent/model.onnx", "--trials", "1"]) == 2
    assert "/nonexistent/model.onnx" in capsys.readouterr().err


@pytest.mark.parametrize("budget", [float("inf"), float("nan"), 0, -5, "90"])
def test_the_api_refuses_a_budget_the_search_cannot_keep_before_any_work(tmp_path, budget):
    """inf overflowed the final race's round count after the whole search, NaN never ended the search,
    0 silently skipped it (the CLI's --budget was checked, the API's was not)."""
    from placer.errors import PlacerError
    from placer.tune import tune

    with pytest.raises(PlacerError, match="budget .*: must be a number of seconds above 0"):
        tune("zoo:tiny", targets=["onnxruntime"], db=str(tmp_path / "p.db"), out_dir=tmp_path / "out", budget_s=budget)
    assert not (tmp_path / "p.db").exists() and not (tmp_path / "out").exists()


def test_a_throughput_tune_on_one_core_is_refused_before_the_profiling(tmp_path, monkeypatch):
    import os

    from placer.errors import PlacerError
    from placer.tune import tune

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    with pytest.raises(PlacerError, match="needs at least 2 cores"):
        tune("zoo:tiny", targets=["onnxruntime"], db=str(tmp_path / "p.db"), out_dir=tmp_path / "out",
             objective="throughput", n_trials=1)
    assert not (tmp_path / "p.db").exists()


def test_an_error_after_the_search_keeps_the_study_it_measured(tmp_path, monkeypatch):
    """A failed run removes the output directory it created, but not once its study holds measured
    trials: an error writing the report had deleted them, and nothing was left to resume."""
    from placer.tune import records, tune

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device", "report.md")

    monkeypatch.setattr(records, "write_tune_report", full_disk)
    with pytest.raises(OSError, match="No space left"):
        tune("zoo:tiny", targets=["onnxruntime"], db=str(tmp_path / "p.db"), out_dir=tmp_path / "out", n_trials=1,
             cost_model_dir=False)
    assert (tmp_path / "out" / "study.db").is_file()


@pytest.mark.parametrize("objective", ["latency", "throughput"])
def test_tune_refuses_a_simulated_target_before_any_work(tmp_path, capsys, objective):
    """A simulated target cannot run, and tune measures every plan: each trial placing an op there
    failed, and the budget went on them (15 of 33 trials on a 26-op model). Refused up front, in one line
    naming it; nothing is written."""
    out = tmp_path / "out"
    assert main(["tune", "zoo:tiny", "--targets", "onnxruntime,sim:server/gpu", "--objective", objective,
                 "--trials", "1", "--out", str(out), "--db", str(tmp_path / "p.db")]) == 2
    err = capsys.readouterr().err
    assert "sim:server/gpu" in err and "placer plan" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "p.db").exists()


def test_a_throughput_tune_on_untuned_tvm_alone_is_refused_before_any_work(tmp_path, capsys):
    """The throughput objective's baselines are each runtime alone on all cores, and untuned TVM is none
    (15-100x slower on a CPU): on TVM targets alone the tune profiled the model, then stopped on an empty
    max(). Refused up front, in one line; nothing is written."""
    out = tmp_path / "out"
    assert main(["tune", "zoo:tiny", "--targets", "tvm-llvm", "--objective", "throughput", "--trials", "1",
                 "--out", str(out), "--db", str(tmp_path / "p.db")]) == 2
    err = capsys.readouterr().err
    assert "tvm-llvm" in err and "untuned TVM" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "p.db").exists()


def test_a_throughput_trials_problem_keeps_each_source_targets_cut_scale():
    # a warm store gives the latency problem a learned cut scale per target; the throughput tuner's
    # per-core targets copy columns of it, and must copy the scale with them (it raised
    # "cut_scale: shape (4,), expected (2,)" on a store the latency tuner had probed)
    import numpy as np

    from placer.problem import PlacementProblem, Tensor
    from placer.tune.pipeline_tuner import retarget

    base = PlacementProblem(ops=["a", "b"], targets=["ort:t2", "ov:t2", "ort:t1", "ov:t1"],
                            cost_ms=[[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]],
                            tensors=[Tensor("t0", "a", ("b",), 100.0)], link_latency_ms=0.05,
                            cut_scale=[1.1, 1.2, 1.3, 1.4])
    p = retarget(base, ["ov@cpu0:t1", "ort@cpu1:t1"], [3, 2], [0.01, 0.02])
    np.testing.assert_allclose(p.cut_scale, [1.4, 1.3])
    np.testing.assert_allclose(p.cost_ms, [[4.0, 3.0], [1.0, 2.0]])


def test_a_yardstick_whose_process_died_mid_run_is_never_the_best_default(tmp_path):
    """Its figure is NaN, which was truthy and compared as if measured: it could be taken as the best
    default, and the verdict read 'nan ms ... nanx'."""
    from placer.tune.records import TrialRecord, TuneResult

    def rec(key, kind, ms):
        return TrialRecord(key, key, kind, {}, None, 1.0, measured_ms=ms, numerics_ok=True)

    best = rec("single:ort", "baseline", 4.0)
    dead, ok = rec("yardstick:ov-default", "yardstick", math.nan), rec("yardstick:ort-default", "yardstick", 5.0)
    for order in ([dead, ok], [ok, dead]):
        result = TuneResult(best=best, best_single=best, records=[best, *order], objective="latency",
                            out_dir=tmp_path, fell_back=False, wall_s=1.0)
        assert result.yardsticks == [ok] and result.best_default is ok and result.best_default_passing is ok


def test_the_verdict_compares_the_final_rounds_paired_figures_not_their_medians(tmp_path):
    """A record's ``compare_ms`` is its paired figure where the final rounds gave one: the fastest
    yardstick, the ratios and the verdict's figures follow it (placer.run.bench, paired rounds)."""
    from placer.tune.records import TrialRecord, TuneResult

    def rec(key, kind, median, paired):
        return TrialRecord(key, key, kind, {"what": key}, None, 1.0, measured_ms=median, paired_ms=paired,
                           numerics_ok=True, final=True)

    best = rec("single:ort", "baseline", 5.41, 3.65)  # its median drew the slow spell's rounds
    ort = rec("yardstick:ort-default", "yardstick", 3.87, 3.52)
    ov = rec("yardstick:ov-latency", "yardstick", 3.80, 3.85)
    result = TuneResult(best=best, best_single=best, records=[best, ort, ov], objective="latency",
                        out_dir=tmp_path, fell_back=True, wall_s=1.0)
    assert result.best_default is ort  # by median it would be ov-latency
    assert result.speedup_vs(ort) == pytest.approx(3.52 / 3.65)
    lines = result.verdict()
    assert "3.650 ms" in lines[0] and "0.96x" in lines[1] and "3.520 ms" in lines[1]
    # outside the final rounds a record has no paired figure: its median counts
    assert TrialRecord("t", "t", "trial", {}, None, 1.0, measured_ms=4.0).compare_ms == 4.0


def test_the_verdict_also_reads_the_result_against_the_fastest_default_that_passes_the_check(tmp_path):
    """OpenVINO's default computes in bf16 on a CPU that has it, outside the f32 tolerance: it stays
    the yardstick, and the verdict also gives the ratio to the fastest default that passes (the main
    job said only "0.56x the best default ... use it")."""
    from placer.tune.records import TrialRecord, TuneResult

    def rec(key, kind, ms, ok, **knobs):
        return TrialRecord(key, key, kind, {"what": key, **knobs}, None, 1.0, measured_ms=ms, numerics_ok=ok,
                           final=True)

    best = rec("single:ort", "baseline", 3.6, True)
    ov = rec("yardstick:ov-default", "yardstick", 2.0, False, INFERENCE_PRECISION_HINT="bf16")
    ort = rec("yardstick:ort-default", "yardstick", 3.5, True)
    ovl = rec("yardstick:ov-latency", "yardstick", 4.5, True)
    result = TuneResult(best=best, best_single=best, records=[best, ov, ort, ovl], objective="latency",
                        out_dir=tmp_path, fell_back=True, wall_s=1.0)
    assert result.best_default is ov and result.best_default_passing is ort
    lines = result.verdict()
    line = next(ln for ln in lines if "passes the check" in ln)
    assert "yardstick:ort-default" in line and "3.500 ms" in line and f"{3.5 / 3.6:.2f}x" in line
    # the advice to run a default instead names one that passes: ov-default (0.56x) fails the check
    # tune held every plan to, so it is ort-default (0.97x) or none
    assert not any("ov-default was faster" in ln for ln in lines)
    assert not any("was faster than every placement" in ln for ln in lines)  # 3.6 vs 3.5: within 0.97
    ort.measured_ms = 3.0  # now the passing default is clearly faster: it is the one advised
    assert any(ln.startswith("yardstick:ort-default was faster than every placement") for ln in result.verdict())
    # where the fastest default passes, no second reading
    ov.numerics_ok = True
    assert not any("passes the check" in ln for ln in result.verdict())


def test_two_final_candidates_within_the_margin_race_in_more_rounds_as_the_budget_allows():
    """``LatencySearch._race`` on a real bench: two compiled plans get more rounds when the budget
    leaves room for three, none otherwise; the choice follows their paired ratio over all rounds."""
    import time

    from mz_models import diamond_model, graph_of

    from placer.materialize import materialize
    from placer.run import random_inputs
    from placer.run.bench import PlanBench
    from placer.tune.records import TrialRecord
    from placer.tune.tuner import DECIDE_MARGIN, DECIDE_ROUNDS, LatencySearch

    g = graph_of(diamond_model())
    said = []
    search = object.__new__(LatencySearch)  # only what the race reads
    search.records, search.ys_keys, search.say, search.write_s = [], [], said.append, 0.0
    with PlanBench([random_inputs(g, seed=0)], rounds=2, per_round=2) as bench:
        search.bench = bench
        recs = [TrialRecord(t, t, "baseline", {}, None, 1.0) for t in ("onnxruntime", "openvino")]
        for r in recs:
            bench.add(r.key, materialize(g, {op.id: r.key for op in g.ops}))
        bench.measure([r.key for r in recs])
        paired = bench.paired_ms([r.key for r in recs])
        assert LatencySearch._close(recs[0], recs[1], {"onnxruntime": 1.0, "openvino": 1.0 + DECIDE_MARGIN / 2}, {})
        assert not LatencySearch._close(recs[0], recs[1], {"onnxruntime": 1.0, "openvino": 1.1}, {})
        # no budget left for three rounds: no race, the first stays first
        search.budget_s, search.t_start = 1.0, time.monotonic() - 1.0
        assert search._race(recs[0], recs[1], 0.01, 2, paired.get) is recs[0] and not said
        assert all(len(bench.candidates[r.key].turns) == 2 for r in recs)
        # no budget (trials-bounded run): the full race
        search.budget_s = None
        first = search._race(recs[0], recs[1], 0.01, 2, paired.get)
        # plus the rounds added for quiet samples when most turns read the cores slowed
        assert all(len(bench.candidates[r.key].turns) == 2 + DECIDE_ROUNDS + bench.extra_rounds for r in recs)
        ratio = bench.paired_ratio("openvino", "onnxruntime")
        assert first is (recs[1] if ratio < 1.0 else recs[0]) and "more rounds" in said[0]


def test_a_baseline_left_unmeasured_is_the_record_of_its_placement():
    """A single target priced far slower than the fastest is recorded, not measured; a trial that places
    every op there meets that record instead of measuring a second one under the same key (which the
    final rounds then filled: the baseline, never checked, was reported measured with no numerics)."""
    from types import SimpleNamespace

    import numpy as np
    from mz_models import diamond_model, graph_of

    from placer.problem import PlacementProblem
    from placer.run import random_inputs
    from placer.run.bench import PlanBench
    from placer.solve import solve
    from placer.tune.tuner import SKIP_BASELINE_FACTOR, LatencySearch

    g = graph_of(diamond_model())
    ops = [op.id for op in g.ops]
    names = ["onnxruntime@cpu:t1", "openvino@cpu:t1"]
    problem = PlacementProblem(ops=ops, targets=names, tensors=[],
                               cost_ms=np.array([[1.0, 2.0 * SKIP_BASELINE_FACTOR]] * len(ops)))
    said = []
    search = object.__new__(LatencySearch)  # only what the baselines read
    search.ctx, search.graph = SimpleNamespace(problem=problem, graph=g, tolerance={}), g
    search.names, search.records, search.by_key, search.feedback_rows = names, [], {}, []
    search.say, search.solver_time_limit, search.cost_model = said.append, 5.0, None
    search.best_single, search.best_default_key = None, None
    search.feeds = [random_inputs(g, seed=0)]
    with PlanBench(search.feeds, rounds=1, per_round=2) as bench:
        search.bench = bench
        (measured,) = search._measure_singles()
        assert measured.label == "single:onnxruntime@cpu:t1" and measured.numerics_ok
        (skipped,) = [r for r in search.records if r.label == "single:openvino@cpu:t1"]
        assert skipped.measured_ms is None and skipped.error.startswith("not measured")
        # a trial's plan with every op on OpenVINO: the same record, nothing measured
        again = solve(problem, "latency", "single:openvino@cpu:t1")
        assert search.measure_plan(again, "trial 0", "trial", {}, problem, 0.0) is skipped
        assert len(search.records) == 2 and len({r.key for r in search.records}) == 2
        assert any(s.startswith("baseline openvino@cpu:t1: predicted") and "not measured" in s for s in said)


def test_final_rounds_wait_for_quiet_cores_past_a_spent_budget(always_slowed, added_rounds):
    """Cores slowed throughout, the budget spent: the final rounds (the verdict) still add their rounds
    for quiet samples, past the budget, and say so; a measurement bounded by the budget adds none."""
    import time
    from types import SimpleNamespace

    from mz_models import diamond_model, graph_of

    from placer.materialize import materialize
    from placer.run import random_inputs
    from placer.run.bench import PlanBench
    from placer.tune.records import TrialRecord
    from placer.tune.tuner import FINAL_ROUNDS, QUIET_ROUNDS, LatencySearch

    g = graph_of(diamond_model())
    said = []
    search = object.__new__(LatencySearch)  # only what the final rounds read
    search.ys_keys, search.say, search.write_s = [], said.append, 0.0
    search.ctx, search.stored_whole_ms = SimpleNamespace(targets=[]), {}
    search.spell_note, search.by_key = "", {}
    search.budget_s, search.t_start = 1.0, time.monotonic() - 5.0  # spent 4 s ago
    with PlanBench([random_inputs(g, seed=0)], rounds=2, per_round=2) as bench:
        search.bench = bench
        recs = [TrialRecord(t, f"single:{t}", "baseline", {}, None, 1.0) for t in ("onnxruntime", "openvino")]
        for r in recs:
            bench.add(r.key, materialize(g, {op.id: r.key for op in g.ops}))
        bench.measure([r.key for r in recs], until_quiet=QUIET_ROUNDS, deadline=search._budget_end())
        assert bench.extra_rounds == 0  # bounded by the budget: nothing past it
        for r in recs:
            r.measured_ms = bench.stats(r.key).median_ms
        search.records, search.best_single = recs, recs[0]
        best, best_single = search.final_rounds()
        assert bench.extra_rounds == QUIET_ROUNDS  # never quiet: the count bounds it
        assert all(len(bench.candidates[r.key].turns) == FINAL_ROUNDS + QUIET_ROUNDS for r in recs)
        assert any("more round(s)" in s and "past the budget" in s for s in said)
        assert best in recs and best_single in recs and all(r.final for r in recs)


@pytest.mark.parametrize("stored_ratio, spell", [(0.01, True), (100.0, False)])
def test_final_rounds_wait_when_all_core_targets_ran_at_their_1_thread_pace(stored_ratio, spell, added_rounds):
    """A runtime's all-core / 1-thread ratio in the final rounds far above the store's (a host spell
    the probes did not read, placer.run.spells): the final rounds say so, poll the two targets for
    the spell's end (every poll here still reads it: the store's ratio is out of reach), and keep
    their figures; every final round reads as a spell, and rounds are added for quiet samples; a store
    that agrees raises nothing."""
    from types import SimpleNamespace

    from mz_models import diamond_model, graph_of

    from placer.devices import make_targets
    from placer.materialize import materialize
    from placer.run import random_inputs
    from placer.run.bench import PlanBench
    from placer.tune.records import TrialRecord
    from placer.tune.tuner import FINAL_ROUNDS, QUIET_ROUNDS, LatencySearch

    g = graph_of(diamond_model())
    targets = make_targets(["onnxruntime:t1", "onnxruntime:t2"])
    said = []
    search = object.__new__(LatencySearch)  # only what the final rounds read
    search.ys_keys, search.say, search.write_s, search.budget_s = [], said.append, 0.0, None
    search.ctx = SimpleNamespace(targets=targets)
    search.stored_whole_ms = {"onnxruntime@cpu:t1": 1.0, "onnxruntime@cpu:t2": stored_ratio}
    search.spell_note, search.by_key = "", {}
    with PlanBench([random_inputs(g, seed=0)], rounds=2, per_round=2) as bench:
        search.bench = bench
        recs = [TrialRecord(t.name, f"single:{t.name}", "baseline", {}, None, 1.0) for t in targets]
        for r, t in zip(recs, targets):
            bench.add(r.key, materialize(g, {op.id: t.name for op in g.ops}))
            r.measured_ms = 1.0
            search.by_key[r.key] = r
        search.records, search.best_single = recs, recs[0]
        best, _ = search.final_rounds()
        turns = [len(bench.candidates[r.key].turns) for r in recs]
        assert best in recs
        if spell:
            # each final round read as a spell (placer.run.bench.RatioWatch), so rounds were added
            assert any(f"{FINAL_ROUNDS + QUIET_ROUNDS} round(s) read as a spell" in s for s in said)
            assert any("unread by the probes" in s for s in said)
            assert any("the spell lasted" in s for s in said)
            # kept over a faster 1-thread target only within placer.run.spells.SPELL_GIVE of it
            kept = any("kept instead of" in s for s in said)
            assert not kept or (best is recs[1] and recs[1].compare_ms > recs[0].compare_ms)
            note = next((s[len("final rounds: "):] for s in said if "kept instead" in s), "")
            assert search.spell_note == note
            # the final rounds (and their rounds for quiet samples), then one poll per added round
            assert all(n >= FINAL_ROUNDS + QUIET_ROUNDS for n in turns)
        else:  # (the two may still race: within DECIDE_MARGIN, more rounds)
            assert not any("unread" in s or "spell" in s for s in said) and search.spell_note == ""


@pytest.mark.parametrize("stored_ratio, spell", [(0.01, True), (100.0, False)])
def test_the_problem_is_re_priced_from_every_single_target_and_the_store_checked_only_by_quiet_ones(
        stored_ratio, spell):
    """Every baseline re-prices the problem, its rounds slowed or not (the rounds to come run on the same
    host); only those measured on quiet samples check the store: baselines whose rounds all read as a
    spell (a runtime on all cores at its 1-thread pace against the store's ratio, placer.run.spells)
    flag no store row."""
    from types import SimpleNamespace

    from mz_models import diamond_model, graph_of

    from placer.devices import make_targets
    from placer.materialize import materialize
    from placer.run import random_inputs
    from placer.run.bench import PlanBench
    from placer.tune.records import TrialRecord
    from placer.run.spells import spell_watches
    from placer.tune.tuner import LatencySearch

    g = graph_of(diamond_model())
    targets = make_targets(["onnxruntime:t1", "onnxruntime:t2"])
    said = []
    search = object.__new__(LatencySearch)  # only what the re-pricing reads
    search.say, search.ctx = said.append, SimpleNamespace(targets=targets)
    stored = {"onnxruntime@cpu:t1": 1.0, "onnxruntime@cpu:t2": stored_ratio}
    with PlanBench([random_inputs(g, seed=0)], rounds=3, per_round=2) as bench:
        search.bench = bench
        recs = [TrialRecord(t.name, f"single:{t.name}", "baseline", {}, None, 1.0) for t in targets]
        for r, t in zip(recs, targets):
            bench.add(r.key, materialize(g, {op.id: t.name for op in g.ops}))
        bench.watches = spell_watches(targets, {t.name: r.key for r, t in zip(recs, targets)}, stored)
        stats = bench.measure([r.key for r in recs])
        for r in recs:
            r.measured_ms = stats[r.key].median_ms
        session, checking = search._session_whole_ms(recs)
        settled = {t.name for t, r in zip(targets, recs) if bench.settled([r.key])}
    assert session == {t.name: r.measured_ms for t, r in zip(targets, recs)}
    if spell:
        assert bench.spell_rounds == 3 and checking == {}
        assert any("re-pricing" in s and "onnxruntime@cpu:t2" in s and "slowed" in s for s in said)
    else:  # the probes may still read a round slowed; at most the targets slowed in most rounds are left
        assert bench.spell_rounds == 0
        assert set(checking) == settled
        assert all(checking[name] == session[name] for name in checking)


def test_a_throughput_trial_whose_cores_run_no_kernel_for_an_op_fails_and_the_tune_goes_on(
        tmp_path, warm_tiny_store, monkeypatch):
    """The cores' runtimes a trial draws may leave an op with no kernel (here both cores on a runtime
    that refuses Relu: the first trial enqueued, the runtimes' first combination). The trial fails,
    saying which op, and the tune goes on; it had stopped with a ProblemError (and, its output new,
    deleted the study). The links of that runtime are timed with the next of LINK_OPS."""
    from placer.devices.testing import FAULT_ENV, register_test_targets
    from placer.tune import tune

    register_test_targets()
    monkeypatch.setenv(FAULT_ENV, "Relu")
    db = warm_tiny_store(tmp_path / "profiles.db")
    said: list[str] = []
    res = tune("zoo:tiny", targets=["test-error", "onnxruntime"], db=str(db), out_dir=tmp_path / "out",
               objective="throughput", n_trials=2, progress=said.append)
    failed = [m for m in said if "failed (no runtime of test-error+test-error runs op" in m]
    assert len(failed) == 1 and "(Relu)" in failed[0], said
    assert res.best.throughput_rps > 0 and res.best.numerics_ok
    assert "test-error" not in json.dumps(res.best.plan.assignment if res.best.plan else {})
    assert (tmp_path / "out" / "study.db").is_file()


def test_a_target_that_runs_no_op_is_no_baseline_and_does_not_take_another_s_name(tmp_path, monkeypatch):
    """single:T puts what T cannot run on another target: for a T that runs none of the ops that is
    another target's whole plan, which was measured under T's name (the verdict then named T, and the
    other target's own baseline row was never made)."""
    from onnx import TensorProto, helper

    from placer.devices.testing import FAULT_ENV, register_test_targets
    from placer.tune import tune

    register_test_targets()
    monkeypatch.setenv(FAULT_ENV, "Relu")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu1",
                                                [x], [y]), opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    said: list[str] = []
    res = tune(model, targets=["test-error", "onnxruntime"], db=str(tmp_path / "p.db"), out_dir=tmp_path / "out",
               n_trials=1, progress=said.append)
    labels = [r.label for r in res.records if r.kind == "baseline"]
    assert labels == ["single:onnxruntime@cpu:t1"], labels
    assert any("baseline test-error@cpu:t1: does not run every op, skipped" in m for m in said), said
    assert res.best_single.label == "single:onnxruntime@cpu:t1"


def test_an_interrupted_tune_keeps_the_partitions_it_measured(tmp_path, monkeypatch):
    """The partitions the trials measured reach the store (the next session's entry costs) only when
    the outputs are written: an interrupt in the final rounds lost them all."""
    from placer.profile import ProfileStore
    from placer.profile.keys import partition_prefix
    from placer.tune import tune, tuner
    from placer.zoo import load_graph

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(tuner.LatencySearch, "final_rounds", interrupted)
    db = tmp_path / "p.db"
    with pytest.raises(KeyboardInterrupt):
        tune("zoo:tiny", targets=["onnxruntime", "openvino"], db=str(db), out_dir=tmp_path / "out", n_trials=3,
             cost_model_dir=False)
    with ProfileStore(db) as st:
        runs = st.partition_runs(partition_prefix(load_graph("zoo:tiny")))
    assert any(r.get("source") == "tune" for r in runs), runs
