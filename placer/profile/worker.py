"""The profiling worker: a long-lived process that compiles and times models for its target(s).

Started by :class:`placer.profile.supervisor.WorkerProcess` as::

    python -m placer.profile.worker --in FD --out FD --ppid PID

It talks over two inherited pipe file descriptors (stdout/stderr stay free for runtime logs).
Each message is ``u32 header length | header JSON | u64 payload length | payload bytes``; the
payload is a serialized ONNX model. Nothing is pickled.

Requests (header ``cmd``):

* ``init``: ``{"targets": [names], "registry": {kind: "module:Class"}, "preload": [names]}`` ->
  registers plug-in kinds (test targets ...), imports the runtimes of the ``preload`` targets
  (the campaign's other targets: the executor process has them all loaded), builds the targets,
  pins to their cores, answers the fingerprints;
* ``measure``: ``{"target", "seed", "timing"}`` + model bytes -> compile, warm up, time
  ``CompiledModel.run`` (see :mod:`placer.profile.timing`), the host's pace timed over the same window
  (:mod:`placer.profile.pace`); answers ``status`` ``ok`` with stats and ``pace_ms``,
  ``unsupported`` (TargetError while compiling, MemoryError) or ``error`` (raised while running);
* ``link``: ``{"src", "dst", "sizes", "overhead_ms", "ops"}`` -> :func:`placer.profile.links.measure_link_points`
  (``src == dst``: :func:`placer.profile.links.measure_cut_points`);
* ``exit``.

A segfault, ``os.abort``, a hang or an OOM kill simply ends or stalls this process; the parent
notices (EOF / timeout) and records ``crash`` / ``timeout``. The worker dies with its parent
(``PR_SET_PDEATHSIG``), so a killed campaign leaves no orphans.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import time
import traceback
from typing import Any

from placer.devices import make_target
from placer.devices.registry import register_target
from placer.errors import PlacerError, TargetUnavailable, first_line
from placer.gc_scope import collected_after
from placer.profile.contention import CpuWindow, core_reference, seed_core_reference
from placer.profile.links import LINK_OPS, measure_cut_points, measure_link_points
from placer.profile.pace import PaceMeter
from placer.profile.timing import TimingConfig, random_feeds, time_compiled

_HDR = struct.Struct(">I")
_LEN = struct.Struct(">Q")


# ---- framing (shared with the parent) -----------------------------------------------------------
def write_msg(f, header: dict, payload: bytes = b"") -> None:
    h = json.dumps(header, default=_json_default).encode()
    f.write(_HDR.pack(len(h)) + h + _LEN.pack(len(payload)))
    if payload:
        f.write(payload)
    f.flush()


def _json_default(o):
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
    except ImportError:  # pragma: no cover
        pass
    return str(o)


def _read_exact(f, n: int) -> bytes:
    chunks = []
    while n:
        b = f.read(n)
        if not b:
            raise EOFError("pipe closed")
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def read_msg(f) -> tuple[dict, bytes]:
    (hl,) = _HDR.unpack(_read_exact(f, _HDR.size))
    header = json.loads(_read_exact(f, hl))
    (pl,) = _LEN.unpack(_read_exact(f, _LEN.size))
    payload = _read_exact(f, pl) if pl else b""
    return header, payload


#: longest reason a worker sends back for a failed request: the first line of the exception's message
#: (``placer.errors.first_line``, which cuts at 300 characters by default)
_REASON_LIMIT = 500


# ---- the request handler (also used in-process when isolate=False) -------------------------------
class WorkerCore:
    """Holds the targets and answers requests; no process handling here."""

    def __init__(self) -> None:
        self.targets: dict[str, Any] = {}
        self.meters: dict[str, PaceMeter] = {}  # per target: the host's pace beside each measurement

    def init(self, names: list[str], registry: dict[str, str] | None = None, preload: list[str] | None = None) -> dict:
        for kind, path in (registry or {}).items():  # the parent's kinds (plug-ins, test targets) rule
            register_target(kind, path, overwrite=True)
        for name in preload or ():
            # Import the other targets' runtimes, as the executor process will have them: a loaded
            # runtime can slow another one's calls (onnxruntime imported doubles OpenVINO's
            # Python-side infer() cost here), so op timings must be taken with them loaded.
            try:
                make_target(name).runtime_version()
            except Exception:
                pass
        for name in names:
            t = make_target(name)
            self.targets[t.name] = t
            if name != t.name:
                self.targets[name] = t
        uniq = {id(t): t for t in self.targets.values()}.values()
        cores = set()
        for t in uniq:
            if t.spec.cores:
                cores.update(t.spec.cores)
        if cores:
            os.sched_setaffinity(0, cores)
        try:
            fingerprints = {t.name: t.fingerprint_hash() for t in uniq}
        except TargetUnavailable as exc:
            return {"status": "unavailable", "reason": first_line(exc, _REASON_LIMIT)}
        return {"status": "ok", "pid": os.getpid(), "fingerprints": fingerprints}

    def measure(self, header: dict, payload: bytes) -> dict:
        import onnx

        target = self.targets[header["target"]]
        cfg = TimingConfig.from_dict(header.get("timing"))
        seed_core_reference(header.get("core_reference"))  # the campaign's best core times so far
        model = onnx.load_from_string(payload)
        t0 = time.perf_counter()
        try:
            # a whole model is timed as a one-partition plan runs it (Target.compile_alone)
            compiled = target.compile_alone(model) if header.get("alone") else target.compile(model)
        except MemoryError:
            return {"status": "unsupported", "reason": f"{target.name}: out of memory while compiling"}
        except TargetUnavailable as exc:  # the device is gone, not the op's fault
            return {"status": "unavailable", "reason": first_line(exc, _REASON_LIMIT)}
        except PlacerError as exc:
            return {"status": "unsupported", "reason": first_line(exc, _REASON_LIMIT)}
        except Exception as exc:  # a runtime's own exception types
            return {"status": "unsupported", "reason": f"{target.name}: compile failed: {type(exc).__name__}: {first_line(exc, _REASON_LIMIT)}"}
        compile_ms = (time.perf_counter() - t0) * 1e3
        try:
            feeds = random_feeds(model, int(header.get("seed", 0)))
            t1 = time.perf_counter()
            compiled.run(feeds)  # first run apart: it may allocate / JIT
            first_ms = (time.perf_counter() - t1) * 1e3
            # the host's pace over the same window, on one-thread targets only (placer.profile.pace.paced):
            # a whole model timed alone on more threads keeps its pool spinning between runs
            meter = self.meters.setdefault(target.name, PaceMeter(target))
            meter.start()
            with CpuWindow() as window:  # how busy other processes kept the machine meanwhile
                stats = time_compiled(compiled, feeds, cfg, prewarmed_s=first_ms / 1e3, between=meter.sample)
                for _ in range(int(header.get("repeat", 1)) - 1):  # keep the lowest median (transient noise)
                    again = time_compiled(compiled, feeds, cfg, between=meter.sample)
                    if again.median_ms < stats.median_ms:
                        stats = again
            pace_ms = meter.finish()
        except MemoryError:
            return {"status": "unsupported", "reason": f"{target.name}: out of memory while running"}
        except TargetUnavailable as exc:
            return {"status": "unavailable", "reason": first_line(exc, _REASON_LIMIT)}
        except Exception as exc:
            return {"status": "error", "reason": f"{target.name}: run failed: {type(exc).__name__}: {first_line(exc, _REASON_LIMIT)}"}
        finally:
            try:
                compiled.close()
            except Exception:
                pass
            del compiled
        return {"status": "ok", "stats": stats.to_dict(), "compile_ms": compile_ms, "first_run_ms": first_ms,
                "contention": window.others, "loadavg": window.loadavg, "slowdown": window.slowdown,
                "core_reference": core_reference(), "pace_ms": pace_ms}

    def link(self, header: dict) -> dict:
        src, dst = self.targets[header["src"]], self.targets[header["dst"]]
        if src.name == dst.name:  # a target to itself: what cutting a model into partitions costs on it
            try:
                return {"status": "ok", "points": measure_cut_points(src)}
            except Exception as exc:
                why = f"cut cost on {src.name}: {type(exc).__name__}: {first_line(exc, _REASON_LIMIT)}"
                return {"status": "error", "reason": why}
        try:
            pts = measure_link_points(src, dst, header["sizes"], overhead_ms=header.get("overhead_ms") or {},
                                      rounds_s=float(header.get("rounds_s", 0.25)),
                                      ops=tuple(header.get("ops") or LINK_OPS))
        except Exception as exc:
            return {"status": "error", "reason": f"link {src.name}->{dst.name}: {type(exc).__name__}: {first_line(exc, _REASON_LIMIT)}"}
        return {"status": "ok", "points": pts}

    def handle(self, header: dict, payload: bytes) -> dict:
        cmd = header.get("cmd")
        try:
            if cmd == "init":
                return self.init(header["targets"], header.get("registry"), header.get("preload"))
            # what a measurement made (its compiled models' cycles) is collected before the next one
            # compiles, the process's older objects left out (placer.gc_scope)
            if cmd == "measure":
                with collected_after():
                    return self.measure(header, payload)
            if cmd == "link":
                with collected_after():
                    return self.link(header)
            if cmd == "ping":
                return {"status": "ok"}
            return {"status": "error", "reason": f"unknown worker command {cmd!r}"}
        except Exception as exc:
            return {"status": "error", "reason": f"{type(exc).__name__}: {first_line(exc, _REASON_LIMIT)}",
                    "traceback": traceback.format_exc()[-2000:]}


def _die_with_parent(ppid: int) -> None:
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    if ppid and os.getppid() != ppid:
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="placer.profile.worker")
    ap.add_argument("--in", dest="fd_in", type=int, required=True)
    ap.add_argument("--out", dest="fd_out", type=int, required=True)
    ap.add_argument("--ppid", type=int, default=0)
    args = ap.parse_args(argv)
    _die_with_parent(args.ppid)
    import faulthandler

    faulthandler.enable()  # a segfault leaves a traceback in the worker log (the crash reason)
    fin = os.fdopen(args.fd_in, "rb", buffering=0)
    fout = os.fdopen(args.fd_out, "wb", buffering=0)
    core = WorkerCore()
    while True:
        try:
            header, payload = read_msg(fin)
        except EOFError:
            return 0
        if header.get("cmd") == "exit":
            write_msg(fout, {"status": "ok"})
            return 0
        sys.stderr.write(f"[placer worker] {header.get('cmd')} {header.get('target', '')} {header.get('key', '')}\n")
        sys.stderr.flush()
        reply = core.handle(header, payload)
        write_msg(fout, reply)


if __name__ == "__main__":
    from placer.process_exit import exit_process

    exit_process(main())
