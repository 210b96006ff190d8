"""TVM (Relax, llvm) as a target.

Untuned Relax kernels on CPU are naive single-threaded loops (15-100x slower than ONNX Runtime
here, docs/tvm_notes.md Q1/Q3); ``tvm.compile``'s CPU default pipeline neither folds constants
nor fuses, so this target compiles with the CPU backend pipeline that does both
(LegalizeOps, FoldConstant, FuseOps, FuseTIR). TVM earns CPU ops only when tuned (the
``tvm-llvm-tuned`` target, MetaSchedule); it is also the IR of every materialized plan.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from placer.devices.base import CompiledModel, Target
from placer.devices.tvm_shim import onnx_converter_ops
from placer.errors import TargetError, first_line


def tvm_convertible_ops() -> frozenset[str]:
    """ONNX op types the Relax ONNX frontend can import (its converter table, :mod:`placer.devices.tvm_shim`)."""
    return onnx_converter_ops()


def import_onnx(model: Any, name: str = "<model>"):
    """ONNX ModelProto -> Relax IRModule with weights bound as constants. TargetError on failure."""
    from tvm.relax.frontend.onnx import from_onnx

    unsupported = sorted({n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")} - tvm_convertible_ops())
    if unsupported:
        raise TargetError(f"tvm: the Relax ONNX importer has no converter for {', '.join(unsupported)} (in {name})")
    try:
        return from_onnx(model, keep_params_in_input=False)
    except Exception as exc:
        raise TargetError(f"tvm: importing {name} failed: {first_line(exc)}") from exc


def llvm_target(threads: int = 1, mcpu: str | None = None):
    import tvm

    cfg: dict[str, Any] = {"kind": "llvm", "num-cores": int(threads)}
    if mcpu:
        cfg["mcpu"] = mcpu
    return tvm.target.Target(cfg)


class TvmCompiled(CompiledModel):
    def __init__(self, executable, input_names, output_names, device):
        from tvm import relax

        self.executable = executable
        self.device = device
        self.vm = relax.VirtualMachine(executable, device)
        self.main = self.vm["main"]
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tvm

        args = [tvm.runtime.tensor(np.asarray(feeds[n], order="C"), self.device) for n in self.input_names]
        out = self.main(*args)
        outs = list(out) if len(self.output_names) > 1 else [out]
        return {n: o.numpy() for n, o in zip(self.output_names, outs)}

    def close(self) -> None:
        self.main = None
        self.vm = None


class TvmLlvmTarget(Target):
    kind = "tvm-llvm"
    runtime = "tvm"

    def runtime_version(self) -> str:
        import tvm

        return f"tvm {tvm.__version__} llvm untuned"

    def supports(self, op_type: str, domain: str = "") -> tuple[bool, str]:
        if domain not in ("", "ai.onnx"):
            return False, f"the Relax ONNX importer has no converter for domain {domain!r}"
        if op_type not in tvm_convertible_ops():
            return False, f"the Relax ONNX importer has no converter for {op_type}"
        return True, ""

    def tvm_target(self):
        return llvm_target(self.spec.threads, self.spec.option("mcpu"))

    def build(self, mod, name: str = "<model>"):
        """Compile a Relax IRModule with folding and fusion; TargetError on failure."""
        import tvm
        from tvm import relax

        tgt = self.tvm_target()
        try:
            return tvm.compile(mod, target=tgt, relax_pipeline=relax.get_default_pipeline(tgt))
        except Exception as exc:
            raise TargetError(f"{self.name}: compiling {name} failed: {first_line(exc)}") from exc

    def import_and_build(self, model: Any) -> tuple[Any, list[str], list[str]]:
        """ONNX model -> (Relax executable, its input names, its output names); TargetError on failure."""
        name = model.graph.name or "<model>"
        ex = self.build(import_onnx(model, name), name)
        inits = {i.name for i in model.graph.initializer}
        inputs = [i.name for i in model.graph.input if i.name not in inits]
        outputs = [o.name for o in model.graph.output]
        return ex, inputs, outputs

    def compile(self, model: Any) -> CompiledModel:
        import tvm

        ex, inputs, outputs = self.import_and_build(model)
        return TvmCompiled(ex, inputs, outputs, tvm.cpu(0))
