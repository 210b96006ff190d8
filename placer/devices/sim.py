"""Targets known only by a spec: what-if devices for planning, never for running.

A *simulated* target (``sim:SPEC/DEVICE``, e.g. ``sim:ultra96/dpu``) is a device described by a
``devices.toml`` file: peak FLOP/s per dtype, memory bandwidth and capacity, per-op-type
efficiency, a per-op call overhead and the ops it supports; the file also gives the links
between its devices. Planning prices its ops with a roofline (:meth:`SimTarget.estimate_op_ms`)
instead of profiling them, and its links from the spec; ``compile`` raises TargetError. The
cost table marks those costs ``"simulated"`` and the problem's provenance lists the simulated
targets (``provenance["simulated_targets"]``), so every plan built on them says so.

Cost of one op on a device (ms)::

    dtype   = device.precision or the op's dtype (its first non-constant input, else first output)
    scale   = itemsize(device.precision) / itemsize(op dtype)   (1 without a precision)
    compute = op.flops / (peak_flops[dtype] * efficiency[op_type])
    memory  = (op.bytes_in + op.bytes_out + op.weight_bytes) * scale / mem_bandwidth
    cost    = max(compute, memory) + overhead                 (inf if the op is unsupported)

``peak_flops`` is looked up by dtype (``fp32``, ``fp16``, ``bf16``, ``int8`` ... ONNX names such
as ``float32`` work too), then under ``default``; an op with FLOPs and no peak for its dtype is
unsupported. ``efficiency`` is looked up by op type, then ``default`` (1.0 if absent).

The devices.toml format (see also ``docs/devices_toml.md``)
-----------------------------------------------------------
::

    [spec]                       # optional
    description = "Avnet Ultra96-V2 (Zynq UltraScale+ ZU3EG)"

    [defaults]                   # optional: keys every device inherits unless it sets them
    overhead_us = 10

    [devices.a53]                # one table per device: the target is sim:<file stem>/a53
    description = "4x Cortex-A53 @ 1.5 GHz, NEON"
    peak_gflops = { fp32 = 24.0, int8 = 48.0 }   # or peak_tflops = {...}
    precision = "fp32"           # optional: the dtype it computes in (a DPU: "int8")
    mem_bandwidth_gbs = 4.0      # achievable GB/s (1e9 bytes/s)
    memory_gib = 2.0             # capacity (or memory_gb, 1e9 bytes); absent = unlimited
    overhead_us = 10.0           # fixed cost of every op (dispatch, kernel launch)
    ops = "all"                  # "all" or a list of ONNX op types
    exclude_ops = ["LRN"]        # with ops = "all": what it cannot run
    [devices.a53.efficiency]     # fraction of peak reached, by ONNX op type
    default = 0.2
    Conv = 0.35

    [default_link]               # any pair without its own [[links]] entry
    latency_us = 200
    bandwidth_gbs = 1.0

    [[links]]                    # one entry per pair; symmetric unless symmetric = false
    src = "a53"
    dst = "dpu"
    latency_us = 100
    bandwidth_gbs = 2.0

A link costs ``latency + bytes / bandwidth`` (a :class:`placer.devices.links.LinkFit`). Between a
simulated target and a target outside its spec (a real one, or another spec's), the simulated
side's ``[default_link]`` is used (the source's when both are simulated); no default link means
free transfers for such pairs.

Where specs are found
---------------------
``sim:SPEC/DEVICE`` names the device ``DEVICE`` of ``SPEC.toml`` (``SPEC`` may contain ``/``: the
last component is the device). Files registered with :func:`register_spec` come first (in this process:
a registry, not the environment; :func:`registered_specs` lists it), then the directories and
files listed in ``PLACER_SPECS`` (``os.pathsep``-separated, read at each lookup), then the bundled
``placer/specs/`` (``ultra96``: Arm A53 + Mali-400 + DPU edge SoC; ``server``: 2-socket Xeon + H100
PCIe). Simulated targets are never profiled, so no worker process needs to find them.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placer.devices.base import CompiledModel, Target, TargetSpec
from placer.devices.links import LinkFit
from placer.errors import TargetError
from placer.safe_io import read_bytes

SPECS_ENV = "PLACER_SPECS"
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "specs"

# dtype spellings -> the spec's keys, and their sizes in bytes
_DTYPE_ALIASES = {
    "float32": "fp32", "float": "fp32", "fp32": "fp32", "tf32": "tf32",
    "float16": "fp16", "half": "fp16", "fp16": "fp16",
    "bfloat16": "bf16", "bf16": "bf16",
    "float64": "fp64", "double": "fp64", "fp64": "fp64",
    "int8": "int8", "uint8": "int8", "int4": "int4",
    "int16": "int16", "uint16": "int16", "int32": "int32", "uint32": "int32",
    "int64": "int64", "uint64": "int64", "bool": "bool",
    "float8e4m3fn": "fp8", "float8e5m2": "fp8", "fp8": "fp8",
}
_ITEMSIZE = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5,
             "int16": 2, "int32": 4, "int64": 8, "bool": 1}
_FLOAT = {"fp64", "fp32", "tf32", "fp16", "bf16", "fp8"}

_DEVICE_KEYS = {"description", "peak_gflops", "peak_tflops", "precision", "mem_bandwidth_gbs", "memory_gib",
                "memory_gb", "overhead_us", "ops", "exclude_ops", "efficiency", "notes"}


def dtype_key(dtype: str) -> str:
    """``float32`` / ``fp32`` -> ``fp32`` (the spec's peak keys); unknown names are lowercased."""
    d = str(dtype).lower()
    return _DTYPE_ALIASES.get(d, d)


# ---- the spec ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceSpec:
    """One device of a spec file (all units SI: FLOP/s, bytes/s, bytes, ms)."""

    name: str
    description: str
    peak_flops: Mapping[str, float]
    mem_bandwidth: float
    memory_bytes: float = math.inf
    overhead_ms: float = 0.0
    precision: str | None = None
    efficiency: Mapping[str, float] = field(default_factory=dict)
    ops: frozenset[str] | None = None  # None = all
    exclude_ops: frozenset[str] = frozenset()

    def supports(self, op_type: str, domain: str = "") -> tuple[bool, str]:
        if domain not in ("", "ai.onnx"):
            return False, f"ops of domain {domain!r} are not in the spec"
        if self.ops is not None and op_type not in self.ops:
            return False, f"{op_type} is not in the device's op list"
        if op_type in self.exclude_ops:
            return False, f"{op_type} is excluded by the spec"
        return True, ""

    def peak(self, dtype: str) -> float | None:
        key = dtype_key(dtype)
        if key in self.peak_flops:
            return self.peak_flops[key]
        return self.peak_flops.get("default")

    def eff(self, op_type: str) -> float:
        return float(self.efficiency.get(op_type, self.efficiency.get("default", 1.0)))


@dataclass(frozen=True)
class LinkSpec:
    latency_ms: float
    bandwidth: float  # bytes/s; inf = free

    @property
    def ms_per_byte(self) -> float:
        return 0.0 if math.isinf(self.bandwidth) else 1e3 / self.bandwidth


@dataclass(frozen=True)
class SpecFile:
    """A parsed devices.toml."""

    name: str
    path: str
    sha: str
    description: str
    devices: Mapping[str, DeviceSpec]
    links: Mapping[tuple[str, str], LinkSpec]
    default_link: LinkSpec | None

    def device(self, name: str) -> DeviceSpec:
        if name not in self.devices:
            raise TargetError(f"spec {self.name!r} ({self.path}) has no device {name!r}; "
                              f"it has: {', '.join(self.target_names())}")
        return self.devices[name]

    def link(self, src: str, dst: str) -> LinkSpec | None:
        """The link between two devices of this spec (their own entry, else the default)."""
        if src == dst:
            return LinkSpec(0.0, math.inf)
        return self.links.get((src, dst), self.default_link)

    def target_names(self) -> list[str]:
        return [f"sim:{self.name}/{d}" for d in self.devices]


def _num(table: Mapping, key: str, where: str, *, positive: bool = True) -> float:
    v = table[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TargetError(f"{where}: {key} must be a number, got {v!r}")
    v = float(v)
    if v < 0 or (positive and v == 0) or math.isnan(v):
        raise TargetError(f"{where}: {key} must be {'> 0' if positive else '>= 0'}, got {v}")
    return v


def _parse_device(name: str, d: Mapping[str, Any], where: str) -> DeviceSpec:
    w = f"{where}: device {name!r}"
    unknown = sorted(set(d) - _DEVICE_KEYS)
    if unknown:
        raise TargetError(f"{w}: unknown keys {unknown} (known: {sorted(_DEVICE_KEYS)})")
    peaks: dict[str, float] = {}
    for key, mult in (("peak_gflops", 1e9), ("peak_tflops", 1e12)):
        table = d.get(key, {})
        if not isinstance(table, Mapping):
            raise TargetError(f"{w}: {key} must be a table of dtype = number")
        for dt in table:
            peaks[dtype_key(dt) if dt != "default" else "default"] = _num(table, dt, f"{w} {key}") * mult
    if not peaks:
        raise TargetError(f"{w}: needs peak_gflops (or peak_tflops), e.g. {{ fp32 = 24.0 }}")
    if "mem_bandwidth_gbs" not in d:
        raise TargetError(f"{w}: needs mem_bandwidth_gbs")
    bw = _num(d, "mem_bandwidth_gbs", w) * 1e9
    mem = math.inf
    if "memory_gib" in d:
        mem = _num(d, "memory_gib", w) * (1 << 30)
    elif "memory_gb" in d:
        mem = _num(d, "memory_gb", w) * 1e9
    overhead = _num(d, "overhead_us", w, positive=False) / 1e3 if "overhead_us" in d else 0.0
    precision = d.get("precision")
    if precision is not None:
        precision = dtype_key(precision)
        if precision not in _ITEMSIZE:
            raise TargetError(f"{w}: unknown precision {d['precision']!r} (known: {sorted(_ITEMSIZE)})")
        if precision not in peaks and "default" not in peaks:
            raise TargetError(f"{w}: precision {precision!r} has no peak (peak_gflops.{precision})")
    eff_t = d.get("efficiency", {})
    if not isinstance(eff_t, Mapping):
        raise TargetError(f"{w}: efficiency must be a table of op_type = fraction")
    eff = {}
    for op in eff_t:
        e = _num(eff_t, op, f"{w} efficiency")
        if e > 1.0:
            raise TargetError(f"{w}: efficiency of {op} is {e} (a fraction of peak: 0 < e <= 1)")
        eff[op] = e
    ops_v = d.get("ops", "all")
    if ops_v == "all":
        ops = None
    elif isinstance(ops_v, list) and all(isinstance(o, str) for o in ops_v):
        ops = frozenset(ops_v)
    else:
        raise TargetError(f"{w}: ops must be \"all\" or a list of ONNX op types")
    exc = d.get("exclude_ops", [])
    if not (isinstance(exc, list) and all(isinstance(o, str) for o in exc)):
        raise TargetError(f"{w}: exclude_ops must be a list of ONNX op types")
    return DeviceSpec(name, str(d.get("description", "")), peaks, bw, mem, overhead, precision, eff, ops,
                      frozenset(exc))


def _parse_link(t: Mapping[str, Any], where: str) -> LinkSpec:
    lat = _num(t, "latency_us", where, positive=False) / 1e3 if "latency_us" in t else 0.0
    bw = _num(t, "bandwidth_gbs", where) * 1e9 if "bandwidth_gbs" in t else math.inf
    return LinkSpec(lat, bw)


def parse_spec(text: str, name: str, path: str = "<string>") -> SpecFile:
    """Parse devices.toml text; TargetError naming the file and key on any mistake."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TargetError(f"{path}: invalid TOML ({exc})") from None
    unknown = sorted(set(data) - {"spec", "defaults", "devices", "default_link", "links"})
    if unknown:
        raise TargetError(f"{path}: unknown top-level keys {unknown}")
    defaults = data.get("defaults", {})
    devs_t = data.get("devices")
    if not isinstance(devs_t, Mapping) or not devs_t:
        raise TargetError(f"{path}: needs at least one [devices.NAME] table")
    devices = {}
    for dname, d in devs_t.items():
        if not isinstance(d, Mapping):
            raise TargetError(f"{path}: devices.{dname} must be a table")
        if not TargetSpec.parse(f"sim:{name}/{dname}").arg:  # the name must be a valid target name
            raise TargetError(f"{path}: bad device name {dname!r}")
        devices[dname] = _parse_device(dname, {**defaults, **d}, path)
    default_link = _parse_link(data["default_link"], f"{path}: default_link") if "default_link" in data else None
    links: dict[tuple[str, str], LinkSpec] = {}
    for i, lt in enumerate(data.get("links", [])):
        w = f"{path}: links[{i}]"
        src, dst = lt.get("src"), lt.get("dst")
        for end in (src, dst):
            if end not in devices:
                raise TargetError(f"{w}: unknown device {end!r} (devices: {', '.join(devices)})")
        ls = _parse_link(lt, w)
        links[(src, dst)] = ls
        if lt.get("symmetric", True):
            links.setdefault((dst, src), ls)
    spec_t = data.get("spec", {})
    sha = hashlib.sha256(text.encode()).hexdigest()
    return SpecFile(name, str(path), sha, str(spec_t.get("description", "")), devices, links, default_link)


# spec name -> file, filled by register_spec(); read it through registered_specs()
_REGISTERED: dict[str, Path] = {}


def _search_path() -> list[Path]:
    extra = [Path(p) for p in os.environ.get(SPECS_ENV, "").split(os.pathsep) if p]
    return list(_REGISTERED.values()) + extra + [BUNDLED_DIR]


def find_spec(name: str) -> Path:
    """The file of spec ``name`` (registered files first, then ``PLACER_SPECS``, then the bundled specs)."""
    for entry in _search_path():
        if entry.is_file():
            if entry.stem == name:
                return entry
            continue
        cand = entry / f"{name}.toml"
        if cand.is_file():
            return cand
    raise TargetError(f"no devices.toml for spec {name!r}: looked in {', '.join(str(p) for p in _search_path())} "
                      f"(bundled: {', '.join(bundled_specs())}; add files with ${SPECS_ENV} or register_spec())")


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int, name: str) -> SpecFile:
    return parse_spec(_read_spec(path), name, path)


#: largest devices.toml read (a spec is a few KB)
MAX_SPEC_BYTES = 1 << 20


def _read_spec(path: str | os.PathLike) -> str:
    """A spec file's text: a regular file of at most 1 MiB (a FIFO or device is refused, not read)."""
    raw = read_bytes(path, "the devices.toml spec", TargetError, MAX_SPEC_BYTES)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TargetError(f"{path}: the devices.toml spec is not UTF-8 text") from None


def load_spec(name: str) -> SpecFile:
    """Load spec ``name`` (e.g. ``"ultra96"``) from the search path (cached by file mtime)."""
    path = find_spec(name)
    return _load_cached(str(path), path.stat().st_mtime_ns, name)


def register_spec(path: str | os.PathLike) -> str:
    """Make a devices.toml file findable as ``sim:<stem>/<device>`` in this process; returns the spec
    name. The file is parsed now, so a mistake is reported at once. Registering the same file again
    does nothing; another file under a registered name is refused (TargetError naming both)."""
    p = Path(path).resolve()
    parse_spec(_read_spec(p), p.stem, str(p))
    old = _REGISTERED.get(p.stem)
    if old is not None and old != p:
        raise TargetError(f"spec {p.stem!r} is already registered as {old}; not replaced by {p} (rename one)")
    _REGISTERED[p.stem] = p
    return p.stem


def registered_specs() -> dict[str, Path]:
    """The spec files :func:`register_spec` registered, by spec name (a copy)."""
    return dict(_REGISTERED)


def bundled_specs() -> list[str]:
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.toml"))


def spec_targets(name: str) -> list[str]:
    """Every target name of spec ``name``: ``["sim:ultra96/a53", ...]``."""
    return load_spec(name).target_names()


# ---- the target -----------------------------------------------------------------------------------
class SimTarget(Target):
    """A device known only by its spec: prices ops with a roofline, cannot run anything."""

    kind = "sim"
    runtime = "sim"
    simulated = True

    def __init__(self, spec: TargetSpec):
        super().__init__(spec)
        if not spec.arg or "/" not in spec.arg:
            raise TargetError(
                f"target {spec.kind!r} needs a spec and a device: sim:SPEC/DEVICE, e.g. "
                + ", ".join(n for s in bundled_specs() for n in spec_targets(s)[:3])
            )
        self.spec_name, self.device_name = spec.arg.rsplit("/", 1)
        self.specfile = load_spec(self.spec_name)
        self.device = self.specfile.device(self.device_name)

    # ---- identity
    def runtime_version(self) -> str:
        return f"sim {self.spec_name} ({self.specfile.sha[:12]})"

    def fingerprint(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "adapter_version": self.adapter_version,
            "spec": self.spec_name,
            "device": self.device_name,
            "spec_sha": self.specfile.sha,
            "simulated": True,
        }

    # ---- capability
    def supports(self, op_type: str, domain: str = "") -> tuple[bool, str]:
        return self.device.supports(op_type, domain)

    @property
    def memory_cap_bytes(self) -> float:
        return self.device.memory_bytes

    @property
    def overhead_ms(self) -> float:
        return self.device.overhead_ms

    def estimate(self, op) -> dict[str, float | str]:
        """The roofline of one op (an :class:`placer.graph.Op`): compute/memory ms, bound, total."""
        ok, why = self.supports(op.op_type, op.domain)
        if not ok:
            return {"ms": math.inf, "reason": why}
        dev = self.device
        op_dtype = _op_dtype(op)
        dtype = dev.precision or op_dtype
        scale = 1.0
        if dev.precision and op_dtype in _FLOAT and op_dtype in _ITEMSIZE:
            scale = _ITEMSIZE[dev.precision] / _ITEMSIZE[op_dtype]
        flops = float(op.flops or 0.0)
        compute_ms = 0.0
        if flops > 0:
            peak = dev.peak(dtype)
            if not peak:
                return {"ms": math.inf, "reason": f"no peak for dtype {dtype} on {self.name}"}
            compute_ms = flops / (peak * dev.eff(op.op_type)) * 1e3
        nbytes = float(op.bytes_in + op.bytes_out + op.weight_bytes) * scale
        memory_ms = nbytes / dev.mem_bandwidth * 1e3
        ms = max(compute_ms, memory_ms) + dev.overhead_ms
        return {"ms": ms, "compute_ms": compute_ms, "memory_ms": memory_ms, "overhead_ms": dev.overhead_ms,
                "bound": "compute" if compute_ms >= memory_ms else "memory", "dtype": dtype}

    def estimate_op_ms(self, op) -> float:
        """Roofline cost of ``op`` (ms): max(flops / (peak * eff), bytes / bandwidth) + overhead; inf if
        unsupported."""
        return float(self.estimate(op)["ms"])

    # ---- links
    def link_to(self, other) -> LinkSpec | None:
        """The spec link from this target to ``other`` (a Target or target name)."""
        other_name = other.name if hasattr(other, "name") else TargetSpec.parse(str(other)).name
        if other_name == self.name:
            return LinkSpec(0.0, math.inf)
        if getattr(other, "simulated", False) and getattr(other, "specfile", None) is not None \
                and other.specfile.path == self.specfile.path:
            return self.specfile.link(self.device_name, other.device_name)
        return self.specfile.default_link

    # ---- execution
    def compile(self, model: Any) -> CompiledModel:
        raise TargetError(f"{self.name}: simulated target cannot run (it is known only by its spec "
                          f"{self.specfile.path}); plan with it, run on real targets")

    def pin_current_thread(self) -> None:
        return None


def _op_dtype(op) -> str:
    sig = getattr(op, "signature", None)
    if sig is not None:
        for t in list(sig.inputs) + list(sig.outputs):
            if t is not None and not t.is_constant:
                return dtype_key(t.dtype)
        for t in sig.outputs:
            return dtype_key(t.dtype)
    return "fp32"


# ---- helpers for planning (placer.costing / placer.api) ------------------------------------------
def is_simulated(target) -> bool:
    return bool(getattr(target, "simulated", False))


def simulated_targets(targets: Iterable) -> list:
    return [t for t in targets if is_simulated(t)]


def spec_link_fits(targets: Sequence) -> list:
    """LinkFits (``placer.devices.links``) for every ordered pair of distinct targets with at least
    one simulated end: the spec's pair link, else the simulated side's default link (the source's
    when both are simulated). Pairs with no link in any spec are left out (free transfers)."""
    fits = []
    for a in targets:
        for b in targets:
            if a.name == b.name or not (is_simulated(a) or is_simulated(b)):
                continue
            link = a.link_to(b) if is_simulated(a) else b.link_to(a)
            if link is None:
                continue
            owner = a if is_simulated(a) else b
            gbs = link.bandwidth / 1e9 if math.isfinite(link.bandwidth) else None
            fits.append(LinkFit(a.name, b.name, link.latency_ms, link.ms_per_byte,
                                meta={"source": "simulated", "spec": owner.specfile.path, "bandwidth_gbs": gbs}))
    return fits
