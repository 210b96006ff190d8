"""The target interface: where an op, a partition or a whole model can run.

A target is a runtime on some hardware with a resource budget (threads, cores). It compiles an
ONNX (sub-)model into a :class:`CompiledModel` and runs it on numpy inputs. Everything
framework-specific lives in the adapter modules next to this one; the rest of placer only sees
this interface.

Target names
------------
``KIND[@cpuCORES][:tTHREADS]``, e.g. ``onnxruntime``, ``openvino@cpu1``, ``tvm-llvm:t2``,
``onnxruntime@cpu0,1:t2``. Threads default to 1 and cores to "no pinning". The canonical name
(:attr:`TargetSpec.name`) always spells threads out (``onnxruntime@cpu:t1``) so that a target's
identity includes its resources, as profiles measured with 1 thread do not hold for 2.

Kinds that need an argument (issue 6) take it after a colon: ``KIND:ARG[@cpuCORES][:tTHREADS]``,
e.g. ``sim:ultra96/dpu`` (a device of a spec file, :mod:`placer.devices.sim`) or
``tvm-rpc:rk3399`` (a TVM RPC device key, :mod:`placer.devices.rpc`). ``ARG`` is letters,
digits, ``_ . - /`` and is never ``t<digits>`` (that is the threads suffix). Their canonical
name omits the default resources (``sim:ultra96/dpu``) and spells them otherwise
(``tvm-rpc:rk3399@cpu:t2``); names without an argument are unchanged.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
import platform
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from placer.errors import TargetError

#: most threads a target may ask for (more is a typo or an attack: each is an OS thread)
MAX_THREADS = 1024

_NAME_RE = re.compile(r"^(?P<kind>[a-z][a-z0-9\-]*)"
                      r"(:(?!t[0-9]+(?![A-Za-z0-9_.\-/]))(?P<arg>[A-Za-z0-9_][A-Za-z0-9_.\-/]*))?"  # KIND:ARG
                      r"(@cpu(?P<cores>[0-9,]*))?(:t(?P<threads>[0-9]+))?$")


@dataclass(frozen=True)
class TargetSpec:
    """What a target is: its kind (runtime + backend), threads and pinned cores."""

    kind: str
    threads: int = 1
    cores: tuple[int, ...] | None = None
    options: tuple[tuple[str, Any], ...] = field(default=())
    arg: str | None = None  # KIND:ARG (sim:ultra96/dpu, tvm-rpc:KEY); None for plain kinds

    @property
    def name(self) -> str:
        cores = ",".join(str(c) for c in self.cores) if self.cores else ""
        if self.arg is not None:
            base = f"{self.kind}:{self.arg}"
            return base if (self.threads == 1 and not self.cores) else f"{base}@cpu{cores}:t{self.threads}"
        return f"{self.kind}@cpu{cores}:t{self.threads}"

    def option(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)

    @staticmethod
    def parse(text: str, *, here: bool = True) -> "TargetSpec":
        """Parse ``KIND[:ARG][@cpuCORES][:tTHREADS]``; raise TargetError naming the text if malformed.
        ``here=False`` reads a name recorded elsewhere (a profile store's) without requiring its cores
        on this machine."""
        m = _NAME_RE.match(text.strip())
        if not m:
            raise TargetError(
                f"malformed target name {text!r}: expected KIND[:ARG][@cpuCORES][:tTHREADS], "
                "e.g. 'onnxruntime', 'openvino@cpu1', 'tvm-llvm:t2', 'sim:ultra96/dpu'"
            )
        cores = None
        numbers = [c for c in (m.group("cores") or "").split(",") if c] + [m.group("threads") or ""]
        if any(len(x) > 7 for x in numbers):  # a core id or thread count no machine has (and int() limits)
            raise TargetError(f"target {text[:80]!r}: a core id or thread count is out of range")
        if m.group("cores"):
            cores = tuple(int(c) for c in m.group("cores").split(",") if c != "")
        threads = int(m.group("threads")) if m.group("threads") else (len(cores) if cores else 1)
        if not 1 <= threads <= MAX_THREADS:
            raise TargetError(f"target {text!r}: threads must be between 1 and {MAX_THREADS}")
        if cores and here:
            avail = os.sched_getaffinity(0)
            missing = [c for c in cores if c not in avail]
            if missing:
                raise TargetError(f"target {text!r}: cores {missing} are not available (have {sorted(avail)})")
        return TargetSpec(kind=m.group("kind"), threads=threads, cores=cores, arg=m.group("arg"))


class CompiledModel(abc.ABC):
    """A model compiled for one target: call :meth:`run` with numpy inputs.

    ``input_names``/``output_names`` follow the ONNX model's graph inputs/outputs.
    """

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]

    #: whether :meth:`run_shared` returns views of the runtime's own buffers (valid until the next run)
    shares_outputs: bool = False

    @abc.abstractmethod
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; return every graph output by name (arrays the caller owns)."""

    def run_shared(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; the outputs may be views of the runtime's buffers, overwritten by the next run of
        this compiled model (OpenVINO's ``share_outputs``: no copy of each output). For a caller that
        is done with them by then: the next partition of the same request, a timed run."""
        return self.run(feeds)

    def close(self) -> None:  # pragma: no cover - default no-op
        """Release the runtime objects."""


class Target(abc.ABC):
    """A runtime on some hardware. Subclasses register themselves by ``kind``."""

    kind: str = ""
    runtime: str = ""  # the runtime that owns partitions on this target (BYOC "Codegen")
    #: bump when the adapter's way of calling the runtime changes what a measurement sees, so that
    #: profiles taken with the old adapter no longer match this target's fingerprint
    adapter_version: int = 1

    def __init__(self, spec: TargetSpec):
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"<Target {self.name}>"

    # ---- identity -------------------------------------------------------------------------
    @abc.abstractmethod
    def runtime_version(self) -> str:
        """Version string of the runtime behind this target."""

    def fingerprint(self) -> dict[str, Any]:
        """Everything that changes a measurement on this target: runtime version, CPU, resources."""
        return {
            "kind": self.kind,
            "adapter_version": self.adapter_version,
            "runtime_version": self.runtime_version(),
            "cpu": cpu_model(),
            "machine": platform.machine(),
            "threads": self.spec.threads,
            "cores": list(self.spec.cores) if self.spec.cores else None,
            "options": dict(self.spec.options),
        }

    def worker_env(self) -> dict[str, str]:
        """Environment variables a worker process needs to build this target by name as it is here
        (configuration given to this object rather than read from the environment, which the worker
        inherits); none by default. The profiler adds them to its workers' environment."""
        return {}

    def fingerprint_hash(self) -> str:
        blob = json.dumps(self.fingerprint(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    # ---- capability -----------------------------------------------------------------------
    def supports(self, op_type: str, domain: str = "") -> tuple[bool, str]:
        """Static support check for an op type; profiling discovers the rest.

        Returns ``(supported, reason)``; the reason says why not.
        """
        return True, ""

    # ---- execution ------------------------------------------------------------------------
    @abc.abstractmethod
    def compile(self, model: Any) -> CompiledModel:
        """Compile an ``onnx.ModelProto`` for this target. Raises TargetError naming the target."""

    def compile_alone(self, model: Any) -> CompiledModel:
        """Compile ``model`` for a process where it is the only thing that runs: a plan of one
        partition, a whole-model profile. A runtime may then keep its threads hot between calls, as
        its own default does, where :meth:`compile` hands the cores back after each call for the
        next partition. The same as :meth:`compile` unless a target says otherwise."""
        return self.compile(model)

    def pin_current_thread(self) -> None:
        """Pin the calling thread to this target's cores (threads it creates later inherit it)."""
        if self.spec.cores:
            os.sched_setaffinity(0, set(self.spec.cores))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def to_numpy_outputs(names: Sequence[str], values: Sequence[Any]) -> dict[str, np.ndarray]:
    return {n: np.asarray(v) for n, v in zip(names, values)}
