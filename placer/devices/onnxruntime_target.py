"""ONNX Runtime (CPU execution provider) as a target."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from placer.devices.base import CompiledModel, Target, TargetSpec
from placer.errors import TargetError


def session_options(threads: int):
    """Session options shared by profiling and execution (time ops the way they will run).

    One intra-op pool of ``threads``, sequential execution, no spinning (spinning ORT workers slow
    down another runtime's next call in the same process: docs/design.md).
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    return so


class OrtCompiled(CompiledModel):
    def __init__(self, session):
        self.session = session
        self.input_names = tuple(i.name for i in session.get_inputs())
        self.output_names = tuple(o.name for o in session.get_outputs())

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = self.session.run(None, {n: feeds[n] for n in self.input_names})
        return dict(zip(self.output_names, outs))

    def close(self) -> None:
        self.session = None


class OnnxRuntimeTarget(Target):
    kind = "onnxruntime"
    runtime = "onnxruntime"

    def runtime_version(self) -> str:
        import onnxruntime as ort

        return f"onnxruntime {ort.__version__} CPUExecutionProvider"

    def supports(self, op_type: str, domain: str = "") -> tuple[bool, str]:
        if domain not in ("", "ai.onnx", "com.microsoft", "ai.onnx.ml"):
            return False, f"domain {domain!r} has no kernels in onnxruntime"
        return True, ""

    def compile(self, model: Any) -> CompiledModel:
        import onnxruntime as ort

        try:
            sess = ort.InferenceSession(
                model.SerializeToString(), session_options(self.spec.threads), providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # ORT raises several exception types (Fail, InvalidGraph, NotImplemented...)
            raise TargetError(f"{self.name}: cannot build a session for {model.graph.name!r}: {_first_line(exc)}") from exc
        return OrtCompiled(sess)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


__all__ = ["OnnxRuntimeTarget", "session_options", "TargetSpec"]
