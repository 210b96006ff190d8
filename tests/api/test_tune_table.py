"""The rows of `placer tune`'s table (placer.cli.tune_table_row): every record prints, whatever it lacks."""

from __future__ import annotations

from pathlib import Path

from placer.cli import tune_table_row
from placer.tune.records import TrialRecord, TuneResult


def _record(key: str, kind: str = "trial", **kw) -> TrialRecord:
    return TrialRecord(key=key, label=key, kind=kind, knobs={}, plan=None, predicted_ms=kw.pop("predicted_ms", 1.0),
                       **kw)


def _result(objective: str, records: list[TrialRecord]) -> TuneResult:
    return TuneResult(best=records[0], best_single=records[0], records=records, objective=objective,
                      out_dir=Path("."), fell_back=False, wall_s=1.0)


def test_a_throughput_trial_whose_outputs_failed_the_check_prints_without_a_rate():
    """Such a trial keeps the latency of its check run and no req/s: `placer tune --objective
    throughput` on a model whose OpenVINO outputs failed the check stopped with a TypeError there."""
    best = _record("single", "baseline", throughput_rps=2000.0, numerics_ok=True, final=True)
    failed = _record("trial 1", measured_ms=0.18, numerics_ok=False, error="numerics check failed: y")
    yard = _record("yardstick:ov-throughput", "yardstick", throughput_rps=1000.0, numerics_ok=True, final=True)
    result = _result("throughput", [best, failed, yard])
    rows = {r.key: tune_table_row(r, result) for r in result.records}
    assert rows["trial 1"][4:8] == ("-", "-", "-", "-")
    assert rows["trial 1"][8:] == ("MISMATCH", "numerics check failed: y")
    assert rows["single"][0] == "single *" and rows["single"][4] == "2000.0"
    assert rows["single"][7] == "2.00"  # against the best default, the yardstick's 1000 req/s
    assert rows["yardstick:ov-throughput"][7] == "1.00"


def test_a_latency_record_without_a_measurement_or_a_spread_prints_dashes():
    best = _record("single", "baseline", measured_ms=2.0, p10_ms=1.9, p90_ms=2.2, paired_ms=2.0, numerics_ok=True,
                   final=True)
    unmeasured = _record("trial 3", predicted_ms=float("nan"), error="compile failed")
    no_spread = _record("trial 4", measured_ms=3.0)
    yard = _record("yardstick:ort-default", "yardstick", measured_ms=1.0, paired_ms=1.0, numerics_ok=True, final=True)
    result = _result("latency", [best, unmeasured, no_spread, yard])
    rows = {r.key: tune_table_row(r, result) for r in result.records}
    assert rows["single"][3:8] == ("1.000", "2.000", "1.900-2.200", "2.000", "0.50")
    assert rows["trial 3"][3:8] == ("-", "-", "-", "-", "-")
    assert rows["trial 3"][9] == "compile failed"
    assert rows["trial 4"][4:8] == ("3.000", "-", "-", "0.33")
    assert rows["trial 4"][9] == "measured in its trial, not in the final rounds"


def test_targets_that_all_run_on_fewer_threads_than_the_cores_get_a_note(monkeypatch):
    """`--targets onnxruntime,openvino` is two one-thread targets (a bare kind is one thread): on a
    machine of several cores their plans cannot use it all, while the runtimes' defaults do."""
    import placer.cli as cli

    monkeypatch.setattr(cli.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    note = cli.one_thread_note(["onnxruntime", "openvino"])
    assert note is not None and "4 cores" in note and "onnxruntime:t4" in note
    assert cli.one_thread_note(["onnxruntime:t4", "openvino"]) is None  # one of them has the machine
    assert cli.one_thread_note(["onnxruntime@cpu0:t1", "openvino@cpu1:t1"]) is None  # pinned: a chosen split
    assert cli.one_thread_note(None) is None  # the default targets cover every core
    monkeypatch.setattr(cli.os, "sched_getaffinity", lambda pid: {0})
    assert cli.one_thread_note(["onnxruntime"]) is None  # one core: one thread is all of it
