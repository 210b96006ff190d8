"""OpenVINO (CPU plugin) as a target.

OpenVINO runs bf16 on CPUs that have it unless told otherwise (~1.9x faster, 0.5-1.7% output
error here): the ``openvino`` target pins ``INFERENCE_PRECISION_HINT=f32``; ``openvino-bf16`` is a
separate target, to be allowed only within the user's numeric tolerance.
"""

from __future__ import annotations

import functools

import os
from typing import Any, Mapping

import numpy as np

from placer.devices.base import CompiledModel, Target
from placer.errors import TargetError, first_line


def _core():
    import openvino as ov

    return ov.Core()


class OvCompiled(CompiledModel):
    shares_outputs = True

    def __init__(self, compiled, input_names, output_names):
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        # the request's output buffers are reused by its next call: the caller gets copies
        return {n: a.copy() for n, a in self.run_shared(feeds).items()}

    def run_shared(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import openvino as ov

        # Inputs are shared (zero-copy views of the numpy arrays), and so are the outputs (views of
        # the request's buffers). This is ~2x cheaper per call than ``request.infer([...])`` with
        # copies (measured: ~45 vs ~95 us on a 200 KB tensor here).
        req = self.request
        for i, n in enumerate(self.input_names):
            a = np.asarray(feeds[n], order="C")  # (np.ascontiguousarray makes a 0-d scalar 1-d)
            if a.dtype.char in "qQ":  # numpy's longlong, as ONNX Runtime returns int64: OpenVINO's
                a = a.view(a.dtype.str)  # binding knows only the canonical int64 ('l' here); same bytes
            req.set_input_tensor(i, ov.Tensor(a, shared_memory=True))
        # share_outputs: a bare ``infer()`` returns its outputs copied (``share_outputs`` defaults to
        # False), a copy this call then dropped: hf-llama's 4 MB of logits, 6% of its 2 ms
        # (session 20: 2.177 against 2.320 ms, paired; squeezenet and bert-tiny unchanged)
        req.infer(share_outputs=True)
        return {n: req.get_output_tensor(i).data for i, n in enumerate(self.output_names)}

    def close(self) -> None:
        self.request = None
        self.compiled = None


class OpenVinoTarget(Target):
    kind = "openvino"
    runtime = "openvino"
    precision = "f32"
    # 2: shared input tensors + get_output_tensor (was infer([...]), ~2x the call cost); 3: profiles
    # time run_shared (no output copy), as the executor runs partitions; 4: run_shared's infer() no
    # longer copies the outputs it then dropped (rows timed with that copy are measured again)
    adapter_version = 4

    def runtime_version(self) -> str:
        import openvino as ov

        return f"openvino {ov.__version__} CPU {self.precision}"

    def config(self) -> dict[str, Any]:
        cfg = {
            "INFERENCE_NUM_THREADS": self.spec.threads,
            "INFERENCE_PRECISION_HINT": self.precision,
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1,
            "ENABLE_CPU_PINNING": False,
        }
        if self.owns_machine():  # all cores: OpenVINO's own thread pinning, as at its defaults
            del cfg["ENABLE_CPU_PINNING"]
        return cfg

    def owns_machine(self) -> bool:
        """Whether this target's threads cover every core the process may use (OpenVINO then keeps its
        own thread pinning, as at its defaults). Not so in a thread pinned to fewer cores than its
        process (a pipeline replica pinned to one core): OpenVINO's pinning maps its stream to the
        cores it saw, the first one for every replica, and two 1-thread replicas measured 1.01x one
        (squeezenet) where the thread's own affinity gives 2.06x."""
        if self.spec.cores:
            return False
        mine, process = os.sched_getaffinity(0), os.sched_getaffinity(os.getpid())
        return mine == process and self.spec.threads >= len(process)

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        if self.owns_machine():  # 1-thread fingerprints (and their stored profiles) stay as they were
            fp["cpu_pinning"] = "runtime default"
        return fp

    def compile(self, model: Any) -> CompiledModel:
        core = _core()
        if len(model.functions):
            # OpenVINO's ONNX frontend does not call model-local functions (placer's opaque regions,
            # placer.graph.opaque): inline them; it runs their If / Loop / NonZero bodies itself.
            import onnx.inliner

            model = onnx.inliner.inline_local_functions(model)
        try:
            ov_model = core.read_model(model.SerializeToString())
            compiled = core.compile_model(ov_model, "CPU", self.config())
        except Exception as exc:
            raise TargetError(f"{self.name}: cannot compile {model.graph.name!r}: {first_line(exc)}") from exc
        inputs = [i.name for i in model.graph.input]
        outputs = [o.name for o in model.graph.output]
        if len(compiled.inputs) != len(inputs) or len(compiled.outputs) != len(outputs):
            raise TargetError(
                f"{self.name}: compiled {model.graph.name!r} has {len(compiled.inputs)} inputs / "
                f"{len(compiled.outputs)} outputs, the model has {len(inputs)} / {len(outputs)}"
            )
        # OpenVINO keeps the ONNX input/output order; check names where it kept them. A single
        # input cannot be out of order (and a pass-through model such as a lone Dropout renames it).
        for port, name in zip(compiled.inputs, inputs):
            if len(inputs) > 1 and name not in port.get_names():
                raise TargetError(f"{self.name}: input order differs from the model ({name!r} vs {port.get_names()})")
        return OvCompiled(compiled, inputs, outputs)


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively, as OpenVINO reports it (``OPTIMIZATION_CAPABILITIES``
    lists ``BF16``); where it does, OpenVINO's default CPU precision is bf16. Detected, never assumed:
    machines of one kind differ."""
    return "BF16" in cpu_capabilities()


@functools.lru_cache(maxsize=1)
def cpu_capabilities() -> tuple[str, ...]:
    """OpenVINO's ``OPTIMIZATION_CAPABILITIES`` of this CPU (``FP32``, ``INT8``, ``BF16`` ...); empty
    without OpenVINO's CPU plugin."""
    try:
        import openvino as ov

        return tuple(str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    except Exception:  # noqa: BLE001 - no OpenVINO, or no CPU plugin: no bf16 we can use
        return ()


class OpenVinoBf16Target(OpenVinoTarget):
    kind = "openvino-bf16"
    precision = "bf16"
