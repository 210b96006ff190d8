"""The comparison's reference rows (placer.report.comparison): the best single target is the fastest
that passes the numerics check, a runtime that died is the best of nothing, and shared candidates are
counted once."""

from __future__ import annotations

import math

import pytest

from placer.report.comparison import measured, rank_rows, unique_rows


def _row(placement, kind, ms, ok=True, key=None):
    return {"placement": placement, "kind": kind, "key": key or placement, "measured_ms": ms, "paired_ms": ms,
            "numerics_ok": ok}


def test_the_best_single_target_and_1_thread_runtime_pass_the_check_and_a_dead_yardstick_is_no_best():
    """resnet50 at --precision bf16 (session 50): OpenVINO bf16 fails the bf16 check; read against it,
    the tuned plan (OpenVINO f32, the fastest passing) showed 0.517x "the best single target"."""
    bf16 = _row("single:openvino-bf16@cpu:t2", "baseline", 22.0, ok=False)
    f32 = _row("single:openvino@cpu:t2", "baseline", 41.0)
    ort = _row("single:onnxruntime@cpu:t2", "baseline", 46.0)
    tuned = _row("tuned", "tuned", 41.0, key=f32["key"])
    dead = _row("yardstick:ort-default", "yardstick", math.nan)  # its process died before the final rounds
    ov = _row("yardstick:ov-latency", "yardstick", 40.0)
    ov_bf16 = _row("yardstick:ov-latency-bf16", "yardstick", 21.0, ok=False)
    one_bf16 = _row("1-thread:openvino-bf16", "1-thread", 41.0, ok=False)
    one = _row("1-thread:openvino", "1-thread", 80.0)
    rows = [dead, ov, ov_bf16, one_bf16, one, bf16, f32, ort, tuned]
    best_single, best_default, best_ok = rank_rows(rows, [bf16, f32, ort], {})
    assert best_single is f32 and best_default is ov_bf16 and best_ok is ov
    assert tuned["speedup_vs_best_single"] == pytest.approx(1.0)
    assert tuned["speedup_vs_best_1thread"] == pytest.approx(80.0 / 41.0)  # the passing 1-thread runtime
    assert tuned["speedup_vs_best_default"] == pytest.approx(21.0 / 41.0)  # the default stays the default
    assert "speedup_vs_ort_default" not in tuned  # the dead yardstick is read against nothing
    assert not measured(dead) and measured(ov) and not measured({"measured_ms": 1.0})


def test_a_round_by_round_ratio_is_preferred_to_the_paired_figures():
    a, b = _row("single:a", "baseline", 2.0), _row("yardstick:ov-default", "yardstick", 1.0)
    rank_rows([a, b], [a], {("single:a", "yardstick:ov-default"): 1.5})
    assert a["speedup_vs_best_default"] == pytest.approx(1 / 1.5)


def test_rows_sharing_a_candidate_are_counted_once():
    single = _row("single:x", "baseline", 1.0)
    rows = [single, _row("greedy", "plan", 1.0, key="single:x"), _row("heft", "plan", 2.0)]
    assert [r["placement"] for r in unique_rows(rows)] == ["single:x", "heft"]
