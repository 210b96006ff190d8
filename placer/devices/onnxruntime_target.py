"""ONNX Runtime (CPU execution provider) as a target."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from placer.devices.base import CompiledModel, Target, TargetSpec
from placer.errors import TargetError, first_line


def spins(threads: int) -> bool:
    """Whether a target of ``threads`` threads keeps its pool spinning during a run.

    Spinning is what makes ONNX Runtime's default fast on many small ops (a parked worker takes
    microseconds to wake for each parallel section), so a multi-thread target spins like the
    default does; ``session.force_spinning_stop`` parks the pool the moment ``Run()`` returns, so
    the next partition, on another runtime in the same process, finds its cores free (spinning
    workers left running slow a neighbour's next call by up to 1.6x: docs/design.md). A 1-thread
    target has no pool to spin."""
    return threads > 1


def session_options(threads: int, *, alone: bool = False):
    """Session options shared by profiling and execution (time ops the way they will run).

    One intra-op pool of ``threads``, sequential execution; spinning only while a run is in
    flight (:func:`spins`). With ``alone`` (the session is the only thing the process runs: a
    one-partition plan, a whole-model profile) the pool also spins between runs, as ONNX Runtime's
    default does: parking it after every run cost 2-5% on squeezenet and bert-tiny at 2 threads
    (docs/design.md, "Spinning between requests").
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spins(threads) else "0")
    if spins(threads) and not alone:
        so.add_session_config_entry("session.force_spinning_stop", "1")
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

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        if spins(self.spec.threads):  # 1-thread fingerprints (and their stored profiles) stay as they were
            fp["spinning"] = "while running"
        return fp

    def supports(self, op_type: str, domain: str = "") -> tuple[bool, str]:
        # "placer.opaque": a region placer contracted into a model-local function (placer.graph.opaque),
        # which ONNX Runtime inlines.
        if domain not in ("", "ai.onnx", "com.microsoft", "ai.onnx.ml", "placer.opaque"):
            return False, f"domain {domain!r} has no kernels in onnxruntime"
        return True, ""

    _alone = False

    def compile_alone(self, model: Any) -> CompiledModel:
        # through compile(), so a subclass that wraps compile() (the fault-injecting test targets)
        # wraps this one too
        self._alone = True
        try:
            return self.compile(model)
        finally:
            self._alone = False

    def compile(self, model: Any) -> CompiledModel:
        import onnxruntime as ort

        try:
            sess = ort.InferenceSession(model.SerializeToString(),
                                        session_options(self.spec.threads, alone=self._alone),
                                        providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises several exception types (Fail, InvalidGraph, NotImplemented...)
            raise TargetError(f"{self.name}: cannot build a session for {model.graph.name!r}: {first_line(exc)}") from exc
        return OrtCompiled(sess)


__all__ = ["OnnxRuntimeTarget", "session_options", "TargetSpec"]
