"""The plan as one TVM Relax IRModule: a function per partition plus a ``main`` that calls them.

Partition functions
-------------------
* **TVM partitions** (target runtime ``tvm``): the partition's ONNX sub-model imported by the
  Relax ONNX frontend (:func:`placer.devices.tvm_target.import_onnx`, weights bound as constants),
  renamed to the partition's global symbol and annotated with attrs ``placer.target``,
  ``placer.stage``, ``placer.partition``, ``placer.runtime = "tvm"``. They carry **no**
  ``Codegen`` attr: in Relax BYOC a ``Codegen`` attr means "not compiled by TVM" (``RunCodegen``
  would hand the function to ``relax.ext.<Codegen>``), and TVM is the runtime that owns them.
  Their tensors carry the module's ``VDevice`` (see below).
* **External partitions** (any other runtime, e.g. ONNX Runtime, OpenVINO): a BYOC function with
  ``Codegen = <runtime>`` and ``global_symbol``, plus the same ``placer.*`` attrs; its body is one
  ``R.call_dps_packed(<global_symbol>, inputs, out_ty)`` (the body is never compiled: the partition
  stays an ONNX sub-model). At compile time ``RunCodegen`` calls the Python-registered codegen
  ``relax.ext.<runtime>``, which registers a packed function under the global symbol. On its first
  call that function builds the runtime's session once through
  ``placer.devices.make_target(target).compile(submodel)`` and caches it; every call reads the VM's
  input tensors with ``np.from_dlpack`` (zero copy) and writes the outputs into the VM's
  destination-passing buffers (one copy, or none where the runtime can write into them directly:
  ONNX Runtime with IO binding for outputs of at least ``IOBIND_MIN_BYTES``).

``main`` takes the model inputs, calls the partitions in the stage config's order inside one
dataflow block and returns the model outputs (a tuple when there are several).

VDevice
-------
Every tensor of ``main`` and of the TVM partitions is annotated with one ``VDevice`` (index 0,
target = the llvm target of the first TVM partition's target, or plain llvm), and outputs of
external partitions are ``match_cast`` onto it (a shape check, no copy). One VDevice *per distinct
TVM target* does not work in TVM 0.27: with two VDevices, constants bound inside a partition stay
on VM device 0 while the partition's tensors are allocated on device 1, and the VM fails with
``Mismatched B.device_id on argument #1 when calling multiply_llvm``; and annotating the outputs
of ``call_dps_packed`` directly with a VDevice makes ``LowerAllocTensor`` fail with ``Argument 0
type mismatch: expected R.Tensor(..., vdevice=...), given R.Tensor(...)``. So several TVM targets
share the one VDevice, and each partition keeps its own target in ``placer.target`` (all TVM
targets here are host CPU llvm targets; the per-target thread count only matters to tuned kernels).
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from placer.devices import make_target
from placer.devices.tvm_target import import_onnx, llvm_target
from placer.errors import PlanError, TargetError
from placer.materialize.partition import Partition, graph_input_names, graph_output_names

# 256 KiB: below this, ONNX Runtime's IO-binding setup costs more than the copy (docs/tvm_notes.md Q5)
IOBIND_MIN_BYTES = 1 << 18
_COMPILE_LOCK = threading.Lock()  # RunCodegen looks codegens up in TVM's process-wide registry


def partition_symbol(prefix: str, p: Partition) -> str:
    kind = p.target.split("@")[0].split(":")[0].replace("-", "_")
    return f"{prefix}_{p.id}_{kind}"


def symbol_prefix(model_hash: str, assignment_hash: str) -> str:
    h = hashlib.sha256(f"{model_hash}:{assignment_hash}".encode()).hexdigest()[:8]
    return f"placer_{h}"


@dataclass
class ExternalPartition:
    """An external partition as the Relax program calls it: a packed function over an ONNX sub-model."""

    symbol: str
    partition: str
    target: str
    runtime: str
    model: Any  # onnx.ModelProto
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


class Callout:
    """The packed-function body of one external partition (DPS: inputs..., outputs...).

    Builds the target's session on first use and caches it. Records call times (ns) in ``times``
    when ``record`` is set.
    """

    def __init__(self, ext: ExternalPartition):
        self.ext = ext
        self.compiled = None
        self._lock = threading.Lock()
        self._iobind = None
        self.last_error: BaseException | None = None  # read by the executor to name the partition

    def build(self) -> None:
        with self._lock:
            if self.compiled is None:
                self.compiled = make_target(self.ext.target).compile(self.ext.model)
                sess = getattr(self.compiled, "session", None)
                if self.ext.runtime == "onnxruntime" and sess is not None and hasattr(sess, "io_binding"):
                    self._iobind = sess

    def __call__(self, *args) -> None:
        try:
            self._call(args)
        except BaseException as exc:
            self.last_error = exc
            raise

    def _call(self, args) -> None:
        if self.compiled is None:
            self.build()
        ext = self.ext
        n = len(ext.input_names)
        feeds = {name: np.from_dlpack(a) for name, a in zip(ext.input_names, args[:n])}
        outs = [np.from_dlpack(a) for a in args[n:]]
        if self._iobind is not None and sum(o.nbytes for o in outs) >= IOBIND_MIN_BYTES:
            b = self._iobind.io_binding()
            for name, arr in feeds.items():
                b.bind_cpu_input(name, np.asarray(arr, order="C"))
            for name, o in zip(ext.output_names, outs):
                b.bind_output(name, "cpu", 0, o.dtype, list(o.shape), o.ctypes.data)
            self._iobind.run_with_iobinding(b)
            return
        res = self.compiled.run(feeds)
        for name, o in zip(ext.output_names, outs):
            np.copyto(o, res[name], casting="no")


@dataclass
class RelaxProgram:
    """A materialized plan as a Relax IRModule (before ``RunCodegen``), ready to compile."""

    mod: Any  # tvm.IRModule
    partitions: tuple[Partition, ...]
    externals: dict[str, ExternalPartition]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    tvm_target: str  # the target whose llvm config the VDevice uses ("" = plain llvm)
    vdevice: str = ""
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The module as TVMScript (constants elided), with a header naming the partitions."""
        head = [f"# placer Relax module: {len(self.partitions)} partition functions + main"]
        for p in self.partitions:
            head.append(
                f"#   {p.symbol}: {p.id} stage {p.stage} on {p.target} ({p.runtime}), {len(p.ops)} ops")
        head.append(f"# VDevice: {self.vdevice}")
        for n in self.notes:
            head.append(f"# note: {n}")
        return "\n".join(head) + "\n" + self.mod.script(show_meta=False)

    def compile(self) -> "RelaxCompiled":
        """RunCodegen (external partitions -> registered packed functions) + tvm.compile + VM."""
        import tvm
        import tvm_ffi
        from tvm import relax

        callouts = {sym: Callout(ext) for sym, ext in self.externals.items()}
        runtimes = sorted({ext.runtime for ext in self.externals.values()})

        def make_codegen(runtime: str):
            def codegen(funcs, options, constant_names):
                for f in funcs:
                    sym = str(f.attrs["global_symbol"])
                    if sym not in callouts:
                        raise TargetError(f"relax.ext.{runtime}: no external partition named {sym}")
                    tvm_ffi.register_global_func(sym, callouts[sym], override=True)
                return []

            return codegen

        tgt = _llvm_for(self.tvm_target)
        with _COMPILE_LOCK:
            for rt in runtimes:
                tvm_ffi.register_global_func(f"relax.ext.{rt}", make_codegen(rt), override=True)
            try:
                mod = relax.transform.RunCodegen()(self.mod)
                mod = relax.transform.RealizeVDevice()(mod)
                t0 = time.perf_counter()
                ex = tvm.compile(mod, target=tgt, relax_pipeline=relax.get_default_pipeline(tgt))
                compile_s = time.perf_counter() - t0
            except TargetError:
                raise
            except Exception as exc:
                raise TargetError(f"tvm: compiling the Relax module failed: {_tvm_error_line(exc)}") from exc
            # The VM resolves packed functions at init, from the registry: create it while ours are in.
            for sym, c in callouts.items():
                tvm_ffi.register_global_func(sym, c, override=True)
            vm = relax.VirtualMachine(ex, tvm.cpu(0))
        return RelaxCompiled(self, ex, vm, callouts, compile_s)


def load_compiled(program: RelaxProgram, path, name=None) -> "RelaxCompiled":
    """A compiled module exported by :meth:`RelaxCompiled.export`, loaded with its callouts.

    The library is native code: load only files you trust (``placer run --compiled`` checks its
    SHA-256 against the plan directory's ``compiled.json`` first). The VM resolves the external
    partitions' packed functions from the registry at init, so they are registered first.
    """
    import tvm
    import tvm_ffi
    from tvm import relax

    name = name if name is not None else path  # the file to name in errors (``path`` may be a private copy)
    callouts = {sym: Callout(ext) for sym, ext in program.externals.items()}
    with _COMPILE_LOCK:
        try:
            lib = tvm.runtime.load_module(str(path))
        except Exception as exc:
            raise TargetError(f"{name}: cannot load the compiled Relax module: {_tvm_error_line(exc)}") from exc
        for sym, c in callouts.items():
            tvm_ffi.register_global_func(sym, c, override=True)
        try:
            vm = relax.VirtualMachine(lib, tvm.cpu(0))
        except Exception as exc:  # a library that is not a Relax executable (another .so)
            raise TargetError(f"{name}: not a compiled Relax module ({type(exc).__name__}: "
                              f"{_tvm_error_line(exc)})") from exc
    return RelaxCompiled(program, lib, vm, callouts, 0.0)


class RelaxCompiled:
    """A compiled Relax program: ``run(feeds) -> outputs`` through ``relax.VirtualMachine``."""

    def __init__(self, program: RelaxProgram, executable, vm, callouts: dict[str, Callout], compile_s: float):
        import tvm

        self.program = program
        self.executable = executable
        self.vm = vm
        self.callouts = callouts
        self.compile_s = compile_s
        self.device = tvm.cpu(0)
        self.main = vm["main"]
        self.input_names = program.input_names
        self.output_names = program.output_names

    def export(self, path) -> None:
        """Write the compiled module as a shared library (``tvm.runtime.load_module`` reads it back)."""
        self.executable.export_library(str(path))

    def build_sessions(self) -> None:
        """Build every external partition's session now (else on its first call)."""
        for c in self.callouts.values():
            c.build()

    def failed_callout(self) -> tuple[Callout, BaseException] | None:
        """(callout, its error) of the external partition that raised during the last run (then reset)."""
        bad = None
        for c in self.callouts.values():
            if c.last_error is not None:
                bad = bad or (c, c.last_error)
                c.last_error = None
        return bad

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:

        args = [_to_tvm(feeds[n], self.device) for n in self.input_names]
        out = self.main(*args)
        outs = list(out) if len(self.output_names) > 1 else [out]
        # the VM allocates fresh storage for returned tensors: share it (DLPack) instead of copying
        return {n: np.from_dlpack(o) for n, o in zip(self.output_names, outs)}

    def run_timed(self, feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Run once with a VM instrument timing each partition call; returns (outputs, {pid: ms}).

        The instrument costs ~6 us per VM call (docs/tvm_notes.md Q2), so time whole requests without it.
        """
        by_symbol = {p.symbol: p.id for p in self.program.partitions}
        t_start: dict[str, int] = {}
        times: dict[str, float] = {}

        def instrument(func, name, before_run, ret_value, *args):
            name = str(name)
            pid = by_symbol.get(name)
            if pid is not None:
                if before_run:
                    t_start[pid] = time.perf_counter_ns()
                else:
                    times[pid] = times.get(pid, 0.0) + (time.perf_counter_ns() - t_start[pid]) / 1e6
            return 0

        self.vm.set_instrument(instrument)
        try:
            out = self.run(feeds)
        finally:
            self.vm.set_instrument(lambda *a: 0)
        return out, times

    def close(self) -> None:
        for c in self.callouts.values():
            if c.compiled is not None:
                c.compiled.close()
        self.main = None
        self.vm = None


def _to_tvm(arr: np.ndarray, device):
    """numpy -> TVM tensor: zero-copy through DLPack when 64-byte aligned (TVM requires it), else a copy."""
    import tvm

    arr = np.asarray(arr, order="C")  # (np.ascontiguousarray makes a 0-d scalar 1-d)
    if arr.ctypes.data % 64 == 0 and arr.flags.writeable:
        try:
            return tvm.runtime.from_dlpack(arr)
        except Exception:  # pragma: no cover - fall back to a copy
            pass
    return tvm.runtime.tensor(arr, device)


def _tvm_error_line(exc: BaseException) -> str:
    """The line of a TVM exception's message that says what went wrong: the first (non-blank) line
    naming an error or a mismatch, else the last line, at most 300 characters (its type's name when
    the message is blank). Not ``placer.errors.first_line``: TVM's messages start with a traceback
    or context lines and put the error itself further down (``...\nInternalError: Check failed``),
    so the first line would quote a stack frame."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    for ln in lines:
        if "Error" in ln or "error" in ln or "mismatch" in ln:
            return ln.strip()[:300]
    return lines[-1][:300] if lines else type(exc).__name__


def _llvm_for(target_name: str):
    if not target_name:
        return llvm_target(1)

    t = make_target(target_name)
    return t.tvm_target() if hasattr(t, "tvm_target") else llvm_target(t.spec.threads)


def _tensor_type(graph, name: str, vdevice=None):
    from tvm import relax

    info = graph.tensors[name]
    dtype = str(np.dtype(info.dtype)) if not isinstance(info.dtype, str) else info.dtype
    return relax.TensorType([int(d) for d in info.shape], dtype, vdevice)


def _same_type(a, b) -> bool:
    from tvm import relax

    if not isinstance(a, relax.TensorType) or not isinstance(b, relax.TensorType):
        return False
    if a.dtype != b.dtype or a.shape is None or b.shape is None:
        return False
    try:
        return [int(x) for x in a.shape.values] == [int(x) for x in b.shape.values]
    except (TypeError, AttributeError):
        return False


def build_relax_program(
    graph,
    partitions: Sequence[Partition],
    submodels: Mapping[str, Any],
) -> RelaxProgram:
    """Build the Relax IRModule of a partitioned plan (see the module docstring)."""
    from tvm import relax
    from tvm.relax.global_info import VDevice

    tvm_parts = [p for p in partitions if p.runtime == "tvm"]
    tvm_target = tvm_parts[0].target if tvm_parts else ""
    notes: list[str] = []
    distinct = sorted({p.target for p in tvm_parts})
    if len(distinct) > 1:
        notes.append(
            f"TVM targets {distinct} share one VDevice (a VDevice per target fails in TVM 0.27; see "
            "placer.materialize.relax_module)"
        )
    vd = VDevice(_llvm_for(tvm_target), 0, "global")
    bb = relax.BlockBuilder()
    gvars: dict[str, Any] = {}
    externals: dict[str, ExternalPartition] = {}
    for p in partitions:
        sub = submodels[p.id]
        attrs = {
            "global_symbol": p.symbol,
            "placer.target": p.target,
            "placer.stage": p.stage,
            "placer.partition": p.id,
            "placer.runtime": p.runtime,
            "placer.n_ops": len(p.ops),
        }
        if p.runtime == "tvm":
            func = _tvm_partition_function(graph, p, sub, attrs, vd)
        else:
            func = _external_partition_function(graph, p, attrs)
            externals[p.symbol] = ExternalPartition(
                symbol=p.symbol,
                partition=p.id,
                target=p.target,
                runtime=p.runtime,
                model=sub,
                input_names=tuple(p.inputs),
                output_names=tuple(p.outputs),
            )
        gvars[p.id] = bb.add_func(func, p.symbol)

    input_names = graph_input_names(graph)
    output_names = graph_output_names(graph)
    _emit_main(bb, graph, partitions, gvars, vd, input_names, output_names)
    mod = bb.get()
    mod.update_global_info("vdevice", [vd])
    return RelaxProgram(
        mod=mod,
        partitions=tuple(partitions),
        externals=externals,
        input_names=input_names,
        output_names=output_names,
        tvm_target=tvm_target,
        vdevice=f"llvm:0 ({tvm_target or 'llvm'}); every tensor of main and of the TVM partitions",
        notes=notes,
    )


def _tvm_partition_function(graph, p: Partition, sub: Any, attrs: Mapping[str, Any], vd: Any) -> Any:
    """The Relax function of a TVM partition: its sub-model imported, every tensor parameter on
    ``vd``, its inputs and outputs checked against the partition's (TargetError if they differ)."""
    from tvm import relax

    def set_vdevice(var):
        ty = var.ty
        if isinstance(ty, relax.TensorType):
            return relax.TensorType(ty.shape, ty.dtype, vd)
        return None

    imod = import_onnx(sub, f"partition {p.id} ({p.target})")
    imod = relax.transform.UpdateParamType(set_vdevice)(imod)
    func = imod["main"]
    if len(func.params) != len(p.inputs):
        raise TargetError(
            f"tvm: partition {p.id} imports with {len(func.params)} inputs, "
            f"its sub-model has {len(p.inputs)}"
        )
    ret = func.ret_ty
    rets = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    if len(rets) != len(p.outputs):
        raise TargetError(
            f"tvm: partition {p.id} imports with {len(rets)} outputs, expected {len(p.outputs)}")
    for t, r in zip(p.outputs, rets):
        if not _same_type(r, _tensor_type(graph, t)):
            raise TargetError(
                f"tvm: partition {p.id} output {t!r} imports as {r} (expected a tensor "
                f"{list(graph.tensors[t].shape)} {graph.tensors[t].dtype}); "
                "place its producer on another target"
            )
    return func.without_attr("num_input").with_attrs(attrs)


def _external_partition_function(graph, p: Partition, attrs: Mapping[str, Any]) -> Any:
    """The Relax function of a partition another runtime runs: a ``Codegen``-tagged wrapper of one
    ``call_dps_packed`` to the packed function named by the partition's symbol."""
    from tvm import relax

    params = [relax.Var(_var_name(t), _tensor_type(graph, t)) for t in p.inputs]
    out_ty = [_tensor_type(graph, t) for t in p.outputs]
    fb = relax.BlockBuilder()
    with fb.function(p.symbol, params, attrs={"Codegen": p.runtime, **attrs}):
        ty = out_ty if len(out_ty) > 1 else out_ty[0]
        out = fb.emit(relax.call_dps_packed(p.symbol, params, ty))
        fb.emit_func_output(out)
    return fb.get()[p.symbol]


def _emit_main(bb: Any, graph, partitions: Sequence[Partition], gvars: Mapping[str, Any], vd: Any,
               input_names: Sequence[str], output_names: Sequence[str]) -> None:
    """Emit ``main`` into ``bb``: one dataflow block calling the partitions in order, each reading
    the model's inputs or earlier partitions' outputs (PlanError if one is read before it is made);
    an external partition's outputs are cast onto ``vd``."""
    from tvm import relax

    params = [relax.Var(_var_name(t), _tensor_type(graph, t, vd)) for t in input_names]
    with bb.function("main", params, attrs={"num_input": len(params)}):
        with bb.dataflow():
            env: dict[str, Any] = dict(zip(input_names, params))
            for p in partitions:
                try:
                    args = [env[t] for t in p.inputs]
                except KeyError as exc:
                    raise PlanError(
                        f"partition {p.id} reads {exc.args[0]!r} before any partition produces it") from None
                r = bb.emit(relax.Call(gvars[p.id], args), name_hint=p.id)
                if len(p.outputs) == 1:
                    vals = [r]
                else:
                    vals = [bb.emit(relax.TupleGetItem(r, i)) for i in range(len(p.outputs))]
                for t, v in zip(p.outputs, vals):
                    if p.runtime != "tvm":
                        v = bb.match_cast(v, _tensor_type(graph, t, vd))
                    env[t] = v
            outs = [env[t] for t in output_names]
            ret = bb.emit_output(outs[0] if len(outs) == 1 else relax.Tuple(outs))
        bb.emit_func_output(ret)


def _var_name(tensor: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in tensor)
    return out if out and not out[0].isdigit() else f"t_{out}"
