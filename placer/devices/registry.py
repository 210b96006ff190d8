"""Target registry: kind -> Target class, and what this machine has."""

from __future__ import annotations

import importlib
import os
import re
from typing import Iterable

from placer.devices import openvino_target
from placer.devices.base import Target, TargetSpec
from placer.errors import TargetError, first_line

_KIND_RE = re.compile(r"^[a-z][a-z0-9\-]*$")  # the KIND of a target name (placer.devices.base)

# kind -> "module:Class"; imported lazily so that listing targets does not import every runtime.
# Read it through registered_kinds(), change it through register_target().
_KINDS: dict[str, str] = {
    "onnxruntime": "placer.devices.onnxruntime_target:OnnxRuntimeTarget",
    "openvino": "placer.devices.openvino_target:OpenVinoTarget",
    "openvino-bf16": "placer.devices.openvino_target:OpenVinoBf16Target",
    "tvm-llvm": "placer.devices.tvm_target:TvmLlvmTarget",
    "tvm-llvm-tuned": "placer.devices.tvm_tuning:TvmLlvmTunedTarget",
    "sim": "placer.devices.sim:SimTarget",  # sim:SPEC/DEVICE, known only by a devices.toml spec (issue 6)
    "tvm-rpc": "placer.devices.rpc:RpcTarget",  # TVM RPC device behind a tracker (issue 6)
}

#: runtimes placed by default. Untuned TVM (``tvm-llvm``) is 15-100x slower than either on a CPU
#: (docs/tvm_notes.md): it never wins an op there, so it is profiled only when named
#: (``--targets onnxruntime,openvino,tvm-llvm``) or tuned (``tvm-llvm-tuned``).
DEFAULT_KINDS = ("onnxruntime", "openvino")
#: the precisions a plan may compute in: ``f32`` (exact to the reference's tolerance) or ``bf16``
#: (OpenVINO in bf16 where the CPU has it, as OpenVINO's own default does there; checked at a bf16
#: tolerance, :data:`placer.run.numerics.TOLERANCES`)
PRECISIONS = ("f32", "bf16")


def default_kinds(precision: str = "f32") -> tuple[str, ...]:
    """The runtimes placed by default at ``precision``; refuses bf16 on a CPU without it.

    ``bf16``: OpenVINO in bf16, and the f32 runtimes too: ONNX Runtime (it has no bf16 CPU kernels)
    and OpenVINO in f32, for the models whose bf16 outputs fail even the bf16 check. Without it,
    inception_v1 at ``--precision bf16`` (session 20) was left with ONNX Runtime and failing bf16
    partitions: tuned 11.4 ms, against 7.3 ms for OpenVINO's f32 LATENCY hint, which passes."""
    if precision not in PRECISIONS:
        raise TargetError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if precision == "f32":
        return DEFAULT_KINDS
    if not openvino_target.cpu_has_bf16():
        caps = ", ".join(openvino_target.cpu_capabilities()) or "none reported"
        raise TargetError(f"precision bf16: this CPU has no bf16 (OpenVINO's CPU capabilities: {caps})")
    return ("onnxruntime", "openvino-bf16", "openvino")


def default_target_names(precision: str = "f32") -> list[str]:
    """The default targets: each default runtime (:func:`default_kinds`) on the whole machine (one
    thread per core this process may use), as a user's runtime at its defaults runs, and, on a
    machine of several cores, each at one thread: on small models one thread beats a pool's
    hand-offs, and 1-thread targets on different cores can run independent branches at once
    (:mod:`placer.devices.cores`). Cores are a resource the plan decides."""
    kinds = default_kinds(precision)
    n = len(os.sched_getaffinity(0))
    return [f"{kind}:t{n}" for kind in kinds] + ([f"{kind}:t1" for kind in kinds] if n > 1 else [])


def register_target(kind: str, path: str, *, overwrite: bool = False) -> None:
    """Register a target class by ``"module:Class"`` (plug-ins, test targets).

    Registering a kind again with the same path does nothing; with another path it raises
    TargetError naming both, unless ``overwrite`` (the kind then builds the new class). The
    profiling campaign hands the registered kinds to its worker processes
    (:func:`registered_kinds`), so a plug-in kind works there too.
    """
    if not _KIND_RE.match(kind):
        raise TargetError(f"invalid target kind {kind!r}: lowercase letters, digits and '-', starting with a letter")
    module, sep, cls = path.partition(":")
    if not (module and sep and cls):
        raise TargetError(f"target kind {kind!r}: {path!r} is not 'module:Class'")
    old = _KINDS.get(kind)
    if old is not None and old != path and not overwrite:
        raise TargetError(f"target kind {kind!r} is already registered as {old!r}; not replaced by {path!r} "
                          "(pass overwrite=True to replace it)")
    _KINDS[kind] = path


def registered_kinds() -> dict[str, str]:
    """Every registered kind and its ``"module:Class"`` (a copy: change it with :func:`register_target`)."""
    return dict(_KINDS)


def known_kinds() -> list[str]:
    return sorted(_KINDS)


def target_class(kind: str) -> type[Target]:
    if kind not in _KINDS:
        raise TargetError(f"unknown target kind {kind!r}; known kinds: {', '.join(known_kinds())}")
    module, cls = _KINDS[kind].split(":")
    return getattr(importlib.import_module(module), cls)


def make_target(spec: str | TargetSpec) -> Target:
    """Build a target from its name (``onnxruntime``, ``openvino@cpu1:t1`` ...) or spec."""
    if isinstance(spec, str):
        spec = TargetSpec.parse(spec)
    return target_class(spec.kind)(spec)


def make_targets(specs: Iterable[str | TargetSpec] | None = None) -> list[Target]:
    """Targets for the given names, or every default target this machine has."""
    targets = [make_target(s) for s in (specs if specs else default_target_names())]
    names = [t.name for t in targets]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise TargetError(f"target listed twice: {', '.join(sorted(dup))}")
    return targets


def available_targets() -> list[dict]:
    """What this machine has: one row per kind with version, or why it is unavailable."""
    rows = []
    for kind in known_kinds():
        try:
            t = make_target(kind)
            rows.append({"kind": kind, "name": t.name, "available": True, "version": t.runtime_version()})
        except Exception as exc:  # a missing runtime is a row, not a crash
            rows.append({"kind": kind, "name": kind, "available": False, "version": first_line(exc)})
    return rows
