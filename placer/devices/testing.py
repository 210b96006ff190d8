"""Test plug-in targets: ONNX Runtime that fails on purpose on one op type.

Kinds (registered by :func:`register_test_targets`, never part of the defaults):

* ``test-crash``: segfaults (reads address 0) when it *runs* a model containing the fault op;
* ``test-abort``: ``os.abort()`` when it runs it;
* ``test-hang``: sleeps forever when it runs it;
* ``test-error``: raises TargetError when it *compiles* it (a compile error);
* ``test-raise``: raises RuntimeError when it runs it;
* ``test-wrong``: runs it, and returns every floating-point output off by one (outputs that fail the
  numerics check, as a reduced-precision target's may on a model that does not take it).

The fault op type is ``PLACER_TEST_FAULT_OP`` (environment, read at compile time, so a profiling
worker started from the test's environment sees it), default ``Relu``. Everything else behaves
exactly like the ``onnxruntime`` target. The profiler forwards registered kinds to its worker
processes, so ``register_test_targets()`` in the parent is enough.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from placer.devices.base import CompiledModel
from placer.devices.onnxruntime_target import OnnxRuntimeTarget
from placer.devices.registry import register_target
from placer.errors import TargetError

FAULT_ENV = "PLACER_TEST_FAULT_OP"
DEFAULT_FAULT_OP = "Relu"


def fault_op() -> str:
    return os.environ.get(FAULT_ENV, DEFAULT_FAULT_OP)


class _Faulty(CompiledModel):
    def __init__(self, inner: CompiledModel, fault: str):
        self.inner = inner
        self.fault = fault
        self.input_names = inner.input_names
        self.output_names = inner.output_names

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.fault == "crash":
            ctypes.string_at(0)  # SIGSEGV
        elif self.fault == "abort":
            os.abort()
        elif self.fault == "hang":
            while True:
                time.sleep(3600)
        elif self.fault == "raise":
            raise RuntimeError("test-raise: failing on purpose")
        out = self.inner.run(feeds)
        if self.fault == "wrong":
            out = {k: (v + 1 if np.issubdtype(v.dtype, np.floating) else v) for k, v in out.items()}
        return out

    def close(self) -> None:
        self.inner.close()


class _FaultyTarget(OnnxRuntimeTarget):
    fault = ""

    def runtime_version(self) -> str:
        return super().runtime_version() + f" ({self.kind}: fails on {fault_op()})"

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        fp["fault_op"] = fault_op()
        return fp

    def compile(self, model: Any) -> CompiledModel:
        op = fault_op()
        hit = any(n.op_type == op for n in model.graph.node)
        if hit and self.fault == "compile":
            raise TargetError(f"{self.name}: cannot compile {op} (test-error: failing on purpose)")
        inner = super().compile(model)
        return _Faulty(inner, self.fault) if hit else inner


class CrashTarget(_FaultyTarget):
    kind = "test-crash"
    fault = "crash"


class AbortTarget(_FaultyTarget):
    kind = "test-abort"
    fault = "abort"


class HangTarget(_FaultyTarget):
    kind = "test-hang"
    fault = "hang"


class CompileErrorTarget(_FaultyTarget):
    kind = "test-error"
    fault = "compile"


class RaiseTarget(_FaultyTarget):
    kind = "test-raise"
    fault = "raise"


class WrongOutputsTarget(_FaultyTarget):
    kind = "test-wrong"
    fault = "wrong"


TEST_KINDS = {
    "test-crash": "placer.devices.testing:CrashTarget",
    "test-abort": "placer.devices.testing:AbortTarget",
    "test-hang": "placer.devices.testing:HangTarget",
    "test-error": "placer.devices.testing:CompileErrorTarget",
    "test-raise": "placer.devices.testing:RaiseTarget",
    "test-wrong": "placer.devices.testing:WrongOutputsTarget",
}


def register_test_targets() -> list[str]:
    """Register the test kinds with :func:`placer.devices.register_target`; return their names."""
    for kind, path in TEST_KINDS.items():
        register_target(kind, path)
    return list(TEST_KINDS)
