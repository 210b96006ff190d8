"""Tuning: Optuna over a plan's knobs against measured latency or throughput (see :mod:`placer.tune.tuner`)."""

from placer.tune.tuner import TrialRecord, TuneResult, tune

__all__ = ["TrialRecord", "TuneResult", "tune"]
