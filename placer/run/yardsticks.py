"""Yardsticks: what a knowledgeable user runs instead of placer, measured beside its candidates.

A placement is worth having only if it beats the model loaded straight into a runtime, at the
runtime's defaults (all cores) and at its best settings (docs/design.md, "Yardsticks"):

* latency: ONNX Runtime ``InferenceSession(path)``, ONNX Runtime with parallel execution mode,
  OpenVINO ``compile_model(m, "CPU")`` with no config, and with the LATENCY hint at f32;
* throughput: OpenVINO's THROUGHPUT hint driven by an ``AsyncInferQueue``, and one 1-thread ONNX
  Runtime session per core, each in its own thread.

Each yardstick lives in a process of its own (:mod:`placer.run.yardstick_worker`), so its
runtime's spinning threads neither slow down placer's candidates nor are slowed by them; the
parent sends it a batch of requests when its turn in an interleaved round comes
(:meth:`placer.run.bench.PlanBench.measure` takes a :class:`Yardstick` like a compiled plan).
A yardstick that fails to load (an op the runtime lacks, a crash) is reported, not fatal.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from placer.devices.openvino_target import cpu_has_bf16
from placer.errors import PlacerError
from placer.graph.opaque import OPAQUE_DOMAIN
from placer.run.numerics import NumericsReport, check_against_reference
from placer.run.yardstick_worker import (
    BF16_KINDS,
    PARENT_ENV,
    DESCRIPTIONS,
    F32_THROUGHPUT_KINDS,
    LATENCY_KINDS,
    N_FEEDS_KEY,
    PIPELINE_PLAN_KIND,
    PLAN_KIND,
    THROUGHPUT_KINDS,
)

__all__ = ["DESCRIPTIONS", "LATENCY_KINDS", "THROUGHPUT_KINDS", "Yardstick", "YardstickSet", "label",
           "latency_kinds", "throughput_kinds"]


def latency_kinds() -> tuple[str, ...]:
    """The latency yardsticks of this machine: :data:`LATENCY_KINDS`, and where the CPU computes
    bf16 natively (OpenVINO's default there), OpenVINO's LATENCY hint in bf16 too: the best
    latency setting a user of that CPU would try."""
    return LATENCY_KINDS + (BF16_KINDS if cpu_has_bf16() else ())


def throughput_kinds() -> tuple[str, ...]:
    """The throughput yardsticks of this machine: :data:`THROUGHPUT_KINDS`, and where the CPU computes
    bf16 natively (OpenVINO's THROUGHPUT default there is bf16, outside an f32 tolerance), the same
    hint pinned to f32: the fastest way a user who needs f32 outputs would serve requests."""
    return THROUGHPUT_KINDS + (F32_THROUGHPUT_KINDS if cpu_has_bf16() else ())


#: seconds a yardstick may take to load a model and answer its first request
LOAD_TIMEOUT_S = 600.0
#: pause before each batch so the previous process's pool threads have stopped spinning
SETTLE_S = 0.002


def label(kind: str) -> str:
    """The name a yardstick goes by in tables (``yardstick:ort-default``)."""
    return f"yardstick:{kind}"


class Yardstick:
    """One runtime, loaded as a user would load it, in its own process."""

    def __init__(self, kind: str, model_path: Path, feeds_path: Path, workdir: Path, *,
                 key: str | None = None, name: str | None = None):
        self.kind = kind
        self.key = key or label(kind)
        self.workdir = workdir
        #: the stem of this process's files in ``workdir`` (its stderr, its outputs)
        self.name = name or kind
        self.error: str | None = None
        self.info: dict[str, Any] = {}
        self._stderr = open(workdir / f"{self.name}.stderr", "w+b")  # noqa: SIM115 - closed in close()
        # the worker dies with this process (PARENT_ENV: it checks it did not miss our death)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "placer.run.yardstick_worker", kind, str(model_path), str(feeds_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1,
            env={**os.environ, PARENT_ENV: str(os.getpid())})

    def wait_ready(self, timeout_s: float = LOAD_TIMEOUT_S) -> bool:
        reply = self._read(timeout_s)
        if reply is None:
            return False
        if "error" in reply:
            self._fail(reply["error"])
            return False
        self.info = reply.get("info", {})
        self._pause()
        return True

    def _pause(self) -> None:
        """Freeze the process between its turns: a runtime at its defaults keeps its pool threads
        spinning for a while after a run (ONNX Runtime's default does, for tens of ms), which
        would steal the cores from whatever is measured next. A user's process has no neighbour
        to slow down, so freezing it keeps both sides of the comparison honest."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def _resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    @property
    def ok(self) -> bool:
        return self.error is None

    def _fail(self, why: str) -> None:
        self.error = why
        self.close()

    def _read(self, timeout_s: float = LOAD_TIMEOUT_S) -> dict | None:
        import select

        if self.proc is None:
            return None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self._stderr.seek(0)
            tail = self._stderr.read().decode(errors="replace").strip().splitlines()[-1:] or [""]
            code = self.proc.poll()
            why = (f"timed out after {timeout_s:.0f} s" if not ready else
                   f"exited with code {code}" + (f": {tail[0][:200]}" if tail[0] else ""))
            self._fail(why)
            return None
        return json.loads(line)

    def _ask(self, msg: Mapping[str, Any], timeout_s: float = LOAD_TIMEOUT_S) -> dict | None:
        if not self.ok:
            return None
        time.sleep(SETTLE_S)
        self._resume()
        try:
            self.proc.stdin.write(json.dumps(dict(msg)) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._fail("its process is gone")
            return None
        reply = self._read(timeout_s)
        self._pause()
        return reply

    def run_batch(self, n: int, start: int = 0, *, warm_ms: float = 0.0) -> list[float]:
        """Wall times (ms) of ``n`` sequential requests, after untimed ones for ``warm_ms`` (one at
        least, when > 0); empty if the yardstick failed."""
        msg: dict[str, Any] = {"cmd": "run", "n": n, "start": start}
        if warm_ms > 0:
            msg["warm_ms"] = float(warm_ms)
        reply = self._ask(msg)
        return list(reply["ms"]) if reply else []

    def throughput(self, n: int) -> float | None:
        """Requests/s over ``n`` requests at the yardstick's own concurrency."""
        reply = self._ask({"cmd": "throughput", "n": n})
        return reply["n"] / reply["wall_s"] if reply and reply.get("wall_s") else None

    def outputs(self, n_feeds: int, output_names: Sequence[str]) -> list[dict[str, np.ndarray]] | None:
        path = self.workdir / f"{self.name}.outputs.npz"
        if not self._ask({"cmd": "outputs", "path": str(path)}):
            return None
        with np.load(path, allow_pickle=False) as z:
            return [{name: z[f"{i}__{j}"] for j, name in enumerate(output_names)} for i in range(n_feeds)]

    def close(self) -> None:
        proc, self.proc = getattr(self, "proc", None), None
        if proc is not None:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
            try:
                proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                proc.stdin.flush()
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - already gone, or stuck: kill below
                pass
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except Exception:  # noqa: BLE001
                    pass
        if not self._stderr.closed:
            self._stderr.close()


def _without_opaque_regions(model):
    """The model as a user would run it: placer's opaque regions (model-local functions, see
    placer.graph.opaque) inlined back; OpenVINO's ONNX reader does not call such functions."""

    ids = [(f.domain, f.name) for f in model.functions if f.domain == OPAQUE_DOMAIN]
    if not ids:
        return model
    import onnx.inliner

    return onnx.inliner.inline_selected_functions(model, ids)


class YardstickSet:
    """The yardsticks of one model and one set of inputs (a temporary folder holds their files).

    Each worker process dies with the *thread* that started it (Linux ``PR_SET_PDEATHSIG`` follows
    the creating thread): build the set in a thread that outlives its use, as the tuners and
    ``experiments.compare`` do (the main thread).

    >>> with YardstickSet(model_proto, feeds, LATENCY_KINDS) as ys:      # doctest: +SKIP
    ...     ys["ort-default"].run_batch(10)
    """

    def __init__(self, model, feeds: Sequence[Mapping[str, np.ndarray]], kinds: Sequence[str] = LATENCY_KINDS,
                 *, say=lambda msg: None):
        unknown = [k for k in kinds if k not in DESCRIPTIONS]
        if unknown:
            raise PlacerError(f"unknown yardstick(s) {unknown}; known: {', '.join(DESCRIPTIONS)}")
        self.workdir = Path(tempfile.mkdtemp(prefix="placer-yardsticks-"))
        self.all: dict[str, Yardstick] = {}
        #: placer plans deployed in processes of their own (:meth:`add_plan`), by key
        self.plans: dict[str, Yardstick] = {}
        try:
            self._start(model, feeds, kinds, say)
        except BaseException:  # an interrupt while a yardstick loads, feeds numpy cannot save, ...:
            self.close()  # the caller never gets the set to close: its processes and files go now
            raise

    def _start(self, model, feeds: Sequence[Mapping[str, np.ndarray]], kinds: Sequence[str], say) -> None:
        self.output_names = [o.name for o in model.graph.output]
        model_path = self.workdir / "model.onnx"
        model_path.write_bytes(_without_opaque_regions(model).SerializeToString())
        feeds_path = self.workdir / "feeds.npz"
        np.savez(feeds_path, **{f"{i}__{k}": np.asarray(v) for i, f in enumerate(feeds) for k, v in f.items()},
                 **{N_FEEDS_KEY: np.asarray(len(feeds))})  # a model may have no inputs: the count is its own
        self.n_feeds = len(feeds)
        # started together (loading overlaps), then awaited one by one
        for k in kinds:
            self.all[k] = Yardstick(k, model_path, feeds_path, self.workdir)
        for k, y in self.all.items():
            if not y.wait_ready():
                say(f"yardstick {k}: not available ({y.error})")

    def __getitem__(self, kind: str) -> Yardstick:
        return self.all[kind]

    def add_plan(self, key: str, mat, *, pipeline: bool = False) -> Yardstick:
        """``mat`` (a :class:`~placer.materialize.Materialized`) saved as a PLAN_DIR and run in a process
        of its own, on the set's inputs: placer's result as a user deploys it, measured as the yardsticks
        are. Run by the hybrid executor, as ``placer run PLAN_DIR`` runs it; with ``pipeline``, by the
        pipeline executor, as ``placer run PLAN_DIR --pipeline`` serves it (one worker per stage or
        replica; its ``throughput`` the pipeline's, the outputs dropped where produced). Keyed ``key``
        in a bench; not a yardstick (``self.all`` does not list it). Check ``.ok``: a plan that fails
        to load says why."""
        if key in self.plans:
            return self.plans[key]
        name = f"plan{len(self.plans)}"
        plan_dir = self.workdir / name
        copy.copy(mat).save(plan_dir, relax=False)  # a copy: the caller's keeps its own out_dir
        kind = PIPELINE_PLAN_KIND if pipeline else PLAN_KIND
        proc = Yardstick(kind, plan_dir, self.workdir / "feeds.npz", self.workdir, key=key, name=name)
        proc.wait_ready()
        self.plans[key] = proc
        return proc

    @property
    def ready(self) -> dict[str, Yardstick]:
        return {k: y for k, y in self.all.items() if y.ok}

    def check(self, kind: str, model, feeds: Sequence[Mapping[str, np.ndarray]],
              **tolerance) -> NumericsReport | None:
        """Yardstick ``kind``'s outputs on ``feeds`` (the set's own) checked against the reference as
        the candidates' are (``tolerance``: :func:`~placer.run.numerics.check_against_reference`'s
        keywords); None when it gave none. ``kind`` may also be the key of a plan :meth:`add_plan`
        started."""
        outs = (self.all.get(kind) or self.plans[kind]).outputs(len(feeds), self.output_names)
        return None if outs is None else check_against_reference(model, feeds, outs, **tolerance)

    def close(self) -> None:
        for y in [*self.all.values(), *self.plans.values()]:
            y.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "YardstickSet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def cores() -> int:
    """Cores this process may run on (the yardsticks' "all cores")."""
    return len(os.sched_getaffinity(0))
