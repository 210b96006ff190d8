"""A multi-thread target's one-thread sibling, and the prior its op model gives.

The default targets run each runtime on the whole machine and at one thread
(:func:`placer.devices.registry.default_target_names`), so a profile holds the same signatures
measured at both. At one thread an op's time follows its work closely; at two it is that time,
halved or not depending on whether the runtime's pool splits the op, plus the hand-off when it
does: on session 27's stores ONNX Runtime's two-thread time was 0.95-1.55x its one-thread time
for ops under 50 us, 0.5-0.6x above 0.3 ms. A multi-thread target's op model
(:class:`costmodels.op_model.OpLatencyModel`) can learn that ratio on top of the sibling's
prediction, beside its own roofline and affine priors (docs/design.md, "The learned model,
session 28").

Examples
--------
>>> sibling_target("onnxruntime@cpu:t2", ["onnxruntime@cpu:t2", "onnxruntime@cpu:t1", "openvino@cpu:t1"])
'onnxruntime@cpu:t1'
>>> sibling_target("onnxruntime@cpu:t2", ["onnxruntime@cpu1:t1", "onnxruntime@cpu0:t1"])
'onnxruntime@cpu0:t1'
>>> sibling_target("onnxruntime@cpu:t2", ["onnxruntime@cpu10:t1", "onnxruntime@cpu2:t1"])
'onnxruntime@cpu2:t1'
>>> sibling_target("onnxruntime@cpu:t1", ["onnxruntime@cpu:t1"]) is None
True
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from costmodels._common import as_features
from placer.devices.base import TargetSpec
from placer.errors import TargetError


def _spec(name: str) -> TargetSpec | None:
    """``name`` read as a target name (its cores need not be this machine's), None if it is not one."""
    try:
        return TargetSpec.parse(name, here=False)
    except TargetError:
        return None


def sibling_candidates(name: str, names: Iterable[str]) -> list[str]:
    """Every one-thread target of ``name``'s runtime among ``names``, best first (unpinned, then by
    core number); none when ``name`` runs one thread itself."""
    me = _spec(name)
    if me is None or me.threads <= 1:
        return []
    found = []
    for other in names:
        spec = _spec(other)
        if spec is not None and (spec.kind, spec.arg) == (me.kind, me.arg) and spec.threads == 1:
            found.append((bool(spec.cores), spec.cores or (), other))
    return [other for *_, other in sorted(found)]


def sibling_target(name: str, names: Iterable[str]) -> str | None:
    """The one-thread target of ``name``'s runtime among ``names`` (unpinned first, then the lowest
    core), or None: ``name`` runs one thread itself, or no such target is there."""
    found = sibling_candidates(name, names)
    return found[0] if found else None


class SiblingPrior(RegressorMixin, BaseEstimator):
    """Latency (ms) as the sibling's op model predicts it; ``fallback``'s estimate where it cannot
    (an op type the sibling never ran: its ``inf``).

    Parameters
    ----------
    sibling : fitted OpLatencyModel
        The one-thread target's op model.
    fallback : fitted RooflineModel
        The multi-thread target's own roofline.
    """

    def __init__(self, sibling: Any = None, fallback: Any = None):
        self.sibling = sibling
        self.fallback = fallback

    def predict(self, X: Any) -> np.ndarray:
        F = as_features(X)
        out = np.asarray(self.sibling.predict(F), dtype=np.float64)
        bad = ~np.isfinite(out)
        if bad.any():
            out[bad] = self.fallback.predict(F[bad])
        return out
