"""Tuning: Optuna over a plan's knobs against measured latency or throughput (see :mod:`placer.tune.tuner`).

``placer.tune(model, ...)`` calls :func:`placer.tune.tuner.tune`.
"""

from placer._callable_module import make_callable as _make_callable
from placer.tune.tuner import TrialRecord, TuneResult, tune

__all__ = ["TrialRecord", "TuneResult", "tune"]

_make_callable(__name__, "placer.tune.tuner:tune")
