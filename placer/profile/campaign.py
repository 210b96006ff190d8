"""Profiling campaigns: measure what the store lacks, each measurement isolated in a worker.

``profile_graph(graph, targets, store)`` walks the graph's unique signatures x targets (plus
each target's call overhead, the whole model per target and, optionally, segments and links),
skips everything the store already has (a rerun measures nothing), records static
``supports() == False`` as ``unsupported`` without running, and sends the rest to one
long-lived worker process per target (:mod:`placer.profile.worker`), one request at a time:

* the single-op model (``OpGraph.single_op_model``: weights as constants) travels as bytes;
* the worker compiles it, runs it on seeded random inputs, warms up and times
  ``CompiledModel.run`` until the median is stable (:mod:`placer.profile.timing`);
* a compile error or MemoryError -> ``unsupported``; an exception while running -> ``error``;
  the worker dying (segfault, abort, OOM kill) -> ``crash``; no answer within ``timeout_s`` ->
  the worker is killed, ``timeout``. The worker is restarted for the next request and the
  campaign goes on.

Every result is written in its own transaction, so killing the campaign (even SIGKILL) loses at
most the measurement in flight, and two campaigns may share a store (each re-checks the store
right before measuring). Only one worker measures at a time (timings are not disturbed by the
profiler itself); workers of finished targets are stopped.
"""

from __future__ import annotations

import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placer import zoo
from placer.devices import make_target, make_targets
from placer.devices.registry import registered_kinds
from placer.errors import PlacerError, ProfileError, TargetUnavailable, first_line
from placer.graph import OpGraph
from placer.profile import keys as K
from placer.profile.contention import CONTENDED, is_contended
from placer.profile.links import DEFAULT_LINK_SIZES, fit_cut_points, fit_points
from placer.profile.store import OVERHEAD_KEY, Measurement, ProfileStore, open_store
from placer.profile.timing import TimingConfig
from placer.profile.worker import WorkerCore, write_msg
from placer.safe_io import printable

FAILED = ("error", "timeout", "crash")
DEFAULT_TIMEOUT_S = 60.0
STARTUP_TIMEOUT_S = 300.0


# ---- results ----------------------------------------------------------------------------------
@dataclass
class TargetTotals:
    """Per target: outcome counts by kind and the sums a summary table shows."""

    name: str
    counts: Counter = field(default_factory=Counter)  # (kind, outcome) -> n; outcome in measured/cached/unsupported/failed
    ops_total: int = 0  # unique signatures
    ops_unsupported: int = 0  # ops of the graph (not signatures) that cannot run here
    op_ms: float = 0.0  # sum of net op costs over the graph's supported ops
    overhead_ms: float | None = None
    whole_model_ms: float | None = None
    wall_s: float = 0.0

    def n(self, outcome: str, kind: str | None = "op") -> int:
        return sum(v for (k, o), v in self.counts.items() if o == outcome and (kind is None or k == kind))

    def to_dict(self) -> dict:
        return {
            "name": self.name, "counts": {f"{k}:{o}": v for (k, o), v in sorted(self.counts.items())},
            "ops_total": self.ops_total, "ops_unsupported": self.ops_unsupported, "op_ms": self.op_ms,
            "overhead_ms": self.overhead_ms, "whole_model_ms": self.whole_model_ms, "wall_s": self.wall_s,
        }


@dataclass
class CampaignResult:
    """What a campaign did: counts over (key, target) measurements of every kind, wall time, per target."""

    measured: int = 0
    cached: int = 0
    unsupported: int = 0
    failed: int = 0
    wall_s: float = 0.0
    per_target: dict[str, TargetTotals] = field(default_factory=dict)
    unique_signatures: int = 0
    links_measured: int = 0
    links_cached: int = 0
    store_path: str = ""
    problems: list[str] = field(default_factory=list)  # worker start failures and such (not stored)
    remeasured: int = 0  # measurements taken again because other processes kept the machine busy
    contended: int = 0  # rows stored although every attempt was contended (flagged; re-measured next time)
    results: dict[tuple[str, str], Measurement] = field(default_factory=dict)  # (key, target name) -> row

    def to_dict(self) -> dict:
        return {
            "measured": self.measured, "cached": self.cached, "unsupported": self.unsupported, "failed": self.failed,
            "wall_s": self.wall_s, "unique_signatures": self.unique_signatures, "links_measured": self.links_measured,
            "links_cached": self.links_cached, "store": self.store_path, "problems": list(self.problems),
            "remeasured": self.remeasured, "contended": self.contended,
            "per_target": {k: v.to_dict() for k, v in self.per_target.items()},
        }


#: a measurement taken while other processes kept the machine busy is tried this many times in all
CONTENDED_ATTEMPTS = TimingConfig().contended_attempts  # the default (TimingConfig.contended_attempts)


# ---- worker processes ---------------------------------------------------------------------------
class WorkerDied(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class WorkerProcess:
    """Parent side of one ``python -m placer.profile.worker`` process serving ``targets``."""

    def __init__(self, targets: Sequence, *, preload: Sequence[str] = (), startup_timeout_s: float = STARTUP_TIMEOUT_S):
        self.targets = list(targets)
        self.preload = [p for p in preload if p not in {t.name for t in self.targets}]
        self.names = [t.name for t in self.targets]
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.fin = self.fout = None
        self.log_path: str | None = None
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        threads = max(t.spec.threads for t in self.targets)
        env.setdefault("TVM_NUM_THREADS", str(threads))
        env["PYTHONFAULTHANDLER"] = "1"
        for t in self.targets:  # configuration a target was given explicitly (tvm-rpc: RpcConfig)
            env.update(t.worker_env())
        return env

    def start(self) -> None:
        self.stop()
        r_req, w_req = os.pipe()
        r_rep, w_rep = os.pipe()
        fd, self.log_path = tempfile.mkstemp(prefix="placer-worker-", suffix=".log")
        cmd = [sys.executable, "-m", "placer.profile.worker", "--in", str(r_req), "--out", str(w_rep),
               "--ppid", str(os.getpid())]
        try:
            # own process group: a timed-out worker is killed with whatever it spawned (TVM tuning workers)
            self.proc = subprocess.Popen(cmd, pass_fds=(r_req, w_rep), stdin=subprocess.DEVNULL, stdout=fd,
                                         stderr=subprocess.STDOUT, env=self._env(), close_fds=True,
                                         start_new_session=True)
        finally:
            os.close(r_req)
            os.close(w_rep)
            os.close(fd)
        self.fout = os.fdopen(w_req, "wb", buffering=0)
        self.fin = os.fdopen(r_rep, "rb", buffering=0)
        self.starts += 1
        try:
            reply = self._request({"cmd": "init", "targets": self.names, "registry": registered_kinds(),
                                   "preload": self.preload}, b"",
                                  self.startup_timeout_s, what="starting")
        except WorkerDied as exc:
            self.stop()
            raise WorkerDied("error", f"worker for {', '.join(self.names)} did not start: {exc.reason}") from None
        if reply.get("status") != "ok":
            self.stop()
            status = "unavailable" if reply.get("status") == "unavailable" else "error"
            raise WorkerDied(status, f"worker for {', '.join(self.names)} did not start: {reply.get('reason')}")

    def request(self, header: dict, payload: bytes, timeout_s: float, what: str = "") -> dict:
        if not self.alive:
            self.start()
        return self._request(header, payload, timeout_s, what)

    def _request(self, header: dict, payload: bytes, timeout_s: float, what: str) -> dict:
        try:
            write_msg(self.fout, header, payload)
        except (BrokenPipeError, OSError):
            raise WorkerDied("crash", self._death_reason(what)) from None
        deadline = time.monotonic() + timeout_s
        try:
            (n,) = struct.unpack(">I", self._read(4, deadline))
            reply = json.loads(self._read(n, deadline))
            (pl,) = struct.unpack(">Q", self._read(8, deadline))
            if pl:
                self._read(pl, deadline)
            return reply
        except TimeoutError:
            self.kill()
            raise WorkerDied("timeout", f"no answer within {timeout_s:g} s {what}".rstrip()) from None
        except EOFError:
            raise WorkerDied("crash", self._death_reason(what)) from None

    def _read(self, n: int, deadline: float) -> bytes:
        buf = bytearray()
        fd = self.fin.fileno()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            r, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not r:
                continue
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def _death_reason(self, what: str) -> str:
        rc = None
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
                rc = self.proc.returncode
        if rc is not None and rc < 0:
            try:
                how = f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                how = f"killed by signal {-rc}"
            if -rc == signal.SIGKILL:
                how += " (out of memory?)"
        else:
            how = f"exited with status {rc}"
        detail = self._log_hint()
        self._close_pipes()
        return f"worker process {how} {what}".rstrip() + (f" [{detail}]" if detail else "")

    def _log_hint(self) -> str:
        if not self.log_path:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(size - 8192, 0))
                lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        for ln in lines:
            if ln.startswith("Fatal Python error"):
                return ln[:200]
        lines = [ln for ln in lines if not ln.startswith("[placer worker]") and not ln.startswith("File ")]
        return lines[-1][:200] if lines else ""

    def _close_pipes(self) -> None:
        for f in (self.fin, self.fout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        self.fin = self.fout = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group this worker leads (started above)
            except OSError:
                self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        self._close_pipes()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None and self.fout is not None:
            try:
                self._request({"cmd": "exit"}, b"", 10.0, "exiting")
                self.proc.wait(timeout=10)
            except (WorkerDied, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()
        try:  # leftovers of the worker's own group (e.g. TVM tuning pool processes)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if self.log_path:
            try:
                os.unlink(self.log_path)
            except OSError:
                pass
            self.log_path = None
        self.proc = None


class InProcessWorker:
    """``isolate=False``: the same requests answered in this process (no timeout, no crash safety)."""

    def __init__(self, targets: Sequence):
        self.core = WorkerCore()
        self.core.init([t.name for t in targets], None)
        # reuse the caller's Target objects (same spec)
        for t in targets:
            self.core.targets[t.name] = t

    def request(self, header: dict, payload: bytes, timeout_s: float, what: str = "") -> dict:
        return self.core.handle(header, payload)

    def stop(self) -> None:
        pass

    kill = stop


# ---- tasks --------------------------------------------------------------------------------------
@dataclass
class _Task:
    key: str
    kind: str
    target: Any
    label: str
    model_fn: Callable[[], Any]
    timeout_s: float
    static: tuple[bool, str] = (True, "")


class _Engine:
    def __init__(self, store: ProfileStore, *, timeout_s: float, isolate: bool, progress: bool,
                 timing: TimingConfig | None, seed: int, retry_failed: bool, result: CampaignResult,
                 colocate: Sequence[str] = (), retry_contended: bool = False):
        self.store = store
        self.colocate = list(colocate)
        self.timeout_s = float(timeout_s)
        self.isolate = isolate
        self.progress = progress
        self.timing = timing or TimingConfig()
        self.seed = seed
        self.retry_failed = retry_failed
        self.retry_contended = retry_contended
        self.result = result
        self._bytes: dict[str, bytes] = {}
        self._start_failures: Counter = Counter()
        #: target name -> why its device became unreachable (its remaining tasks are skipped, not stored)
        self.unavailable: dict[str, str] = {}
        self._skipped: Counter = Counter()

    def _totals(self, target) -> TargetTotals:
        return self.result.per_target.setdefault(target.name, TargetTotals(target.name))

    def _count(self, task: _Task, outcome: str, m: Measurement | None) -> None:
        self._totals(task.target).counts[(task.kind, outcome)] += 1
        setattr(self.result, outcome, getattr(self.result, outcome) + 1)
        if m is not None:
            self.result.results[(task.key, task.target.name)] = m

    def _is_done(self, m: Measurement | None) -> bool:
        """A stored row is reused unless it failed (with ``retry_failed``) or was flagged as measured on
        a busy machine (with ``retry_contended``)."""
        if m is None:
            return False
        return not ((self.retry_failed and m.status in FAILED) or (self.retry_contended and is_contended(m.meta)))

    def _measure_quietly(self, worker, header: dict, payload: bytes, task: _Task) -> dict:
        """Measure; while other processes keep the machine busy (:data:`CONTENDED`), wait a moment and
        measure again, up to ``timing.contended_attempts`` times, and keep the least contended reply
        (flagged ``contended`` if even that one was)."""
        best = None
        for attempt in range(1, max(1, int(self.timing.contended_attempts)) + 1):
            reply = worker.request(header, payload, task.timeout_s,
                                   what=f"while measuring {task.label} on {task.target.name}")
            if reply.get("status") != "ok":
                return reply
            share = reply.get("contention")
            reply["attempts"] = attempt
            if best is None or (share or 0.0) < (best.get("contention") or 0.0):
                best = reply
            if share is None or share < CONTENDED:
                break
            self.result.remeasured += 1
            time.sleep(0.05 * attempt)
        best["contended"] = (best.get("contention") or 0.0) >= CONTENDED
        best["attempts"] = attempt
        return best

    def _payload(self, task: _Task) -> bytes:
        b = self._bytes.get(task.key)
        if b is None:
            b = task.model_fn().SerializeToString()
            if task.kind != "model":
                self._bytes[task.key] = b
        return b

    def _mark_unavailable(self, task: _Task, reason: str) -> None:
        """The device behind ``task``'s target is unreachable: this task and the target's remaining ones
        are skipped (nothing stored: not the ops' fault); :meth:`run` reports it once."""
        self.unavailable.setdefault(task.target.name, reason)
        self._skipped[task.target.name] += 1
        self._count(task, "failed", None)

    def run(self, tasks: list[_Task]) -> None:
        """Run tasks (grouped by target, in order); skip those the store has."""
        by_target: dict[str, list[_Task]] = defaultdict(list)
        targets = {}
        for t in tasks:
            by_target[t.target.name].append(t)
            targets[t.target.name] = t.target
        # what is cached, up front (for the progress total)
        todo: dict[str, list[_Task]] = {}
        for name, ts in by_target.items():
            have = self.store.get_many([t.key for t in ts], targets[name])
            todo[name] = []
            for t in ts:
                m = have.get(t.key)
                if self._is_done(m):
                    self._count(t, "cached", m)
                elif not t.static[0]:
                    m = self.store.put(t.key, t.target, kind=t.kind, status="unsupported", reason=t.static[1],
                                       meta={"static": True})
                    self._count(t, "unsupported", m)
                else:
                    todo[name].append(t)
        total = sum(len(v) for v in todo.values())
        with _progress(self.progress, total) as bar:
            for name, ts in todo.items():
                if not ts:
                    continue
                t0 = time.perf_counter()
                worker = (WorkerProcess([targets[name]], preload=self.colocate) if self.isolate
                          else InProcessWorker([targets[name]]))
                try:
                    for i, task in enumerate(ts):
                        bar.describe(f"{name} {task.label}")
                        self._run_one(worker, task)
                        bar.advance()
                finally:
                    worker.stop()
                self._totals(targets[name]).wall_s += time.perf_counter() - t0
        for name, why in self.unavailable.items():
            self.result.problems.append(
                f"{name} became unavailable ({why}): {self._skipped[name]} measurement(s) skipped, nothing stored "
                "for them; run the campaign again once the device is back to resume")

    def _run_one(self, worker, task: _Task) -> None:
        # another campaign may have measured it meanwhile
        m = self.store.get(task.key, task.target)
        if self._is_done(m):
            self._count(task, "cached", m)
            return
        if self._start_failures[task.target.name] >= 2:
            self._count(task, "failed", None)
            return
        if task.target.name in self.unavailable:  # its device is gone: nothing stored, a later run resumes
            self._skipped[task.target.name] += 1
            self._count(task, "failed", None)
            return
        header = {"cmd": "measure", "target": task.target.name, "key": task.key, "seed": self.seed,
                  "timing": self.timing.to_dict(), "repeat": 3 if task.kind == "overhead" else 1}
        try:
            payload = self._payload(task)
        except PlacerError as exc:
            m = self.store.put(task.key, task.target, kind=task.kind, status="unsupported",
                               reason=f"cannot build the {task.kind} model: {exc}")
            self._count(task, "unsupported", m)
            return
        t0 = time.perf_counter()
        try:
            reply = self._measure_quietly(worker, header, payload, task)
        except WorkerDied as exc:
            if exc.status == "unavailable":
                self._mark_unavailable(task, exc.reason)
                return
            if exc.status == "error":  # the worker could not start: not the op's fault, not stored
                self._start_failures[task.target.name] += 1
                self.result.problems.append(exc.reason)
                self._count(task, "failed", None)
                return
            m = self.store.put(task.key, task.target, kind=task.kind, status=exc.status, reason=exc.reason,
                               meta={"timeout_s": task.timeout_s, "wall_s": time.perf_counter() - t0})
            self._count(task, "failed", m)
            return
        self._start_failures[task.target.name] = 0
        status = reply.get("status", "error")
        if status == "unavailable":
            self._mark_unavailable(task, str(reply.get("reason", "")))
            return
        if status != "ok":
            m = self.store.put(task.key, task.target, kind=task.kind, status=status if status in FAILED + ("unsupported",) else "error",
                               reason=str(reply.get("reason", "")), meta={"wall_s": time.perf_counter() - t0})
            self._count(task, "unsupported" if status == "unsupported" else "failed", m)
            return
        st = reply["stats"]
        if task.kind == "overhead":
            overhead = 0.0
        else:
            overhead = self.store.overhead_ms(task.target, default=0.0)
        median = float(st["median_ms"])
        meta = {
            "mad_ms": st["mad_ms"], "mean_ms": st["mean_ms"], "warmup_n": st["warmup_n"], "sample_s": st["sample_s"],
            "stable": st["stable"], "compile_ms": reply.get("compile_ms"), "first_run_ms": reply.get("first_run_ms"),
            "overhead_ms": overhead, "wall_s": time.perf_counter() - t0, "seed": self.seed,
            "isolated": self.isolate, "timing": self.timing.to_dict(),
            "colocated": [n for n in self.colocate if n != task.target.name],
            # measurement conditions: the share of the machine other processes used meanwhile
            "contention": reply.get("contention"), "loadavg": reply.get("loadavg"),
            "attempts": reply.get("attempts", 1), "contended": bool(reply.get("contended")),
        }
        if meta["contended"]:
            self.result.contended += 1
        m = self.store.put(task.key, task.target, kind=task.kind, status="ok", median_ms=median,
                           net_ms=max(median - overhead, 0.0), p10_ms=st["p10_ms"], p90_ms=st["p90_ms"], n=st["n"],
                           meta=meta)
        self._count(task, "measured", m)


class _NoBar:
    def describe(self, text: str) -> None:
        pass

    def advance(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _RichBar(_NoBar):
    def __init__(self, total: int):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("[bold]profile"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.description}"),
                                 console=Console(stderr=True), transient=False)
        self.task = self.progress.add_task("", total=total)

    def describe(self, text: str) -> None:
        from rich.markup import escape

        self.progress.update(self.task, description=escape(printable(text[:48], newlines=False)))

    def advance(self) -> None:
        self.progress.advance(self.task)

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)


def _progress(enabled: bool, total: int):
    if not enabled or total == 0 or not sys.stderr.isatty():
        return _NoBar()
    try:
        return _RichBar(total)
    except Exception:  # pragma: no cover - rich missing or broken terminal
        return _NoBar()


# ---- public API ---------------------------------------------------------------------------------
def _resolve_targets(targets) -> list:
    if targets is None:
        return make_targets(None)
    out = []
    for t in targets:
        out.append(make_target(t) if isinstance(t, str) else t)
    names = [t.name for t in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ProfileError(f"target listed twice: {', '.join(sorted(dup))}")
    return out


def _measurable(tlist: list, res: CampaignResult) -> list:
    """Drop simulated targets (known only by a spec: nothing to run); ProfileError if none is left."""
    sim = [t.name for t in tlist if getattr(t, "simulated", False)]
    if sim and len(sim) == len(tlist):
        raise ProfileError(f"{', '.join(sim)}: simulated targets cannot be profiled (their costs come from the spec)")
    if sim:
        res.problems.append(f"skipped simulated targets {', '.join(sim)} (their costs come from the spec)")
    return [t for t in tlist if not getattr(t, "simulated", False)]


def _min_timeout(target, timeout_s: float) -> float:
    return max(float(timeout_s), float(getattr(target, "profile_timeout_s", 0.0) or 0.0))


def _overhead_task(target, timeout_s) -> _Task:
    return _Task(OVERHEAD_KEY, "overhead", target, "overhead", K.overhead_model, _min_timeout(target, timeout_s))


def _static_support(target, ops) -> tuple[bool, str]:
    for op in ops:
        ok, why = target.supports(op.op_type, op.domain)
        if not ok:
            return False, f"{target.name}: {op.op_type}: {why}" if why else f"{target.name}: {op.op_type} not supported"
    return True, ""


def _segment_task(graph, op_ids, target, timeout_s) -> tuple[_Task, dict]:
    row = K.segment_signature_row(graph, op_ids)
    key = row["key"]
    ops = [graph.op(i) for i in op_ids]
    ids = list(op_ids)
    return (
        _Task(key, "segment", target, f"segment[{len(ids)}] {row['op_type']}"[:50],
              lambda: graph.subgraph_model(ids, name=key.replace(":", "_")), _min_timeout(target, timeout_s),
              _static_support(target, ops)),
        row,
    )


def profile_graph(
    graph,
    targets: Iterable | None = None,
    store: ProfileStore | str | os.PathLike | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    model_timeout_s: float | None = None,
    isolate: bool = True,
    progress: bool = True,
    whole_model: bool = True,
    links: bool = True,
    segments: Iterable[Sequence[str]] | None = None,
    timing: TimingConfig | None = None,
    link_sizes: Sequence[int] | None = None,
    retry_failed: bool = False,
    seed: int = 0,
    colocate: bool = True,
    retry_contended: bool = False,
) -> CampaignResult:
    """Profile every unique op signature of ``graph`` on every target; measure only what is missing.

    ``targets``: Target objects or names (None: the defaults). ``store``: a ProfileStore or a path.
    Also measures each target's call overhead (stored apart; op rows carry ``net_ms`` =
    median - overhead), the whole model per target (``whole_model``), the given ``segments``
    (op-id lists, profiled as one unit each) and the hand-off links between every pair of
    targets (``links``). ``timeout_s`` bounds one measurement (compile + timing);
    ``model_timeout_s`` (default 10x) the whole-model ones. ``retry_failed`` re-measures rows
    whose status is error/timeout/crash; ``retry_contended`` rows flagged as measured while other
    processes kept the machine busy (:mod:`placer.profile.contention`). ``colocate``: each worker also imports the other
    targets' runtimes, as the executor's process does (they slow each other's calls).
    """
    t_start = time.perf_counter()
    res = CampaignResult()
    tlist = _measurable(_resolve_targets(targets), res)
    st, owned = open_store(store)
    res.store_path = st.path
    try:
        reachable = []
        for t in tlist:
            try:
                st.register_target(t)
            except TargetUnavailable as exc:  # a device down now: the others are measured, it is resumed later
                res.problems.append(f"{t.name} is unavailable ({first_line(exc)}): not measured; run the campaign "
                                    "again once the device is back")
                continue
            reachable.append(t)
        tlist = reachable
        uniq = graph.unique_signatures()
        res.unique_signatures = len(uniq)
        rows = [K.overhead_signature_row()]
        first_ops = {}
        for h, (sig, op_ids) in uniq.items():
            op = graph.op(op_ids[0])
            first_ops[h] = op
            rows.append(K.op_signature_row(op))
        seg_tasks_rows = []
        if whole_model:
            rows.append(K.model_signature_row(graph))
        tasks: list[_Task] = []
        seg_list = [list(s) for s in (segments or [])]
        mto = model_timeout_s if model_timeout_s is not None else 10.0 * timeout_s
        for t in tlist:
            tasks.append(_overhead_task(t, timeout_s))
            for h, op in first_ops.items():
                tasks.append(_Task(h, "op", t, f"{op.op_type} {op.id}"[:50],
                                   (lambda oid=op.id: graph.single_op_model(oid)), _min_timeout(t, timeout_s),
                                   t.supports(op.op_type, op.domain)))
            seen = set()
            for ids in seg_list:
                task, row = _segment_task(graph, ids, t, timeout_s)
                if task.key in seen:
                    continue
                seen.add(task.key)
                tasks.append(task)
                seg_tasks_rows.append(row)
            if whole_model:
                tasks.append(_Task(K.model_key(graph), "model", t, f"whole model {graph.name}"[:50], lambda: graph.model,
                                   _min_timeout(t, mto), _static_support(t, graph.ops)))
        uniq_rows = {r["key"]: r for r in rows + seg_tasks_rows}
        st.register_signatures(uniq_rows.values())
        eng = _Engine(st, timeout_s=timeout_s, isolate=isolate, progress=progress, timing=timing, seed=seed,
                      retry_failed=retry_failed, result=res, colocate=[t.name for t in tlist] if colocate else (),
                      retry_contended=retry_contended)
        eng.run(tasks)
        if links and len(tlist) > 1:
            _run_links(st, tlist, res, sizes=link_sizes, isolate=isolate, timeout_s=max(timeout_s, 120.0),
                       progress=progress)
        _fill_totals(st, graph, tlist, res, whole_model)
    finally:
        res.wall_s = time.perf_counter() - t_start
        if owned:
            st.close()
    return res


def _fill_totals(st: ProfileStore, graph, tlist, res: CampaignResult, whole_model: bool) -> None:
    import math

    costs = st.op_costs(graph, tlist, missing="inf")
    for t in tlist:
        tot = res.per_target.setdefault(t.name, TargetTotals(t.name))
        tot.ops_total = res.unique_signatures
        vals = [costs[(op.id, t.name)] for op in graph.ops]
        tot.ops_unsupported = sum(1 for v in vals if math.isinf(v))
        tot.op_ms = float(sum(v for v in vals if not math.isinf(v)))
        tot.overhead_ms = st.overhead_ms(t, default=-1.0)
        if tot.overhead_ms < 0:
            tot.overhead_ms = None
        if whole_model:
            m = st.get(K.model_key(graph), t)
            tot.whole_model_ms = m.median_ms if m is not None and m.ok else None


def _run_links(st: ProfileStore, tlist, res: CampaignResult, *, sizes, isolate: bool, timeout_s: float,
               progress: bool) -> None:
    sizes = list(sizes or DEFAULT_LINK_SIZES)
    # (t, t): the cost of a cut on t itself (placer.profile.links.measure_cut_points), folded into
    # every boundary t takes part in; measured once there is a boundary to price (two targets)
    pairs = [(a, b) for a in tlist for b in tlist if a.name != b.name or len(tlist) > 1]
    todo = [(a, b) for a, b in pairs if not st.has_link(a, b)]
    res.links_cached += len(pairs) - len(todo)
    if not todo:
        return
    overheads = {t.name: st.overhead_ms(t, default=-1.0) for t in tlist}
    overheads = {k: v for k, v in overheads.items() if v >= 0}
    worker = WorkerProcess(tlist) if isolate else InProcessWorker(tlist)
    try:
        with _progress(progress, len(todo)) as bar:
            for a, b in todo:
                bar.describe(f"link {a.name} -> {b.name}")
                if st.has_link(a, b):
                    res.links_cached += 1
                    bar.advance()
                    continue
                if a.name == b.name and a.kind.startswith("tvm"):
                    # ten TVM compiles (seconds each) for a target that is never a CPU default: not priced
                    st.put_link(a, a, 0.0, 0.0, [], {"kind": "cut", "skipped": "TVM targets: not measured"})
                    res.links_measured += 1
                    bar.advance()
                    continue
                try:
                    reply = worker.request({"cmd": "link", "src": a.name, "dst": b.name, "sizes": sizes,
                                            "overhead_ms": overheads}, b"", timeout_s, what=f"while timing link {a.name}->{b.name}")
                except WorkerDied as exc:
                    res.problems.append(exc.reason)
                    bar.advance()
                    continue
                if a.name == b.name:  # a cut cost that cannot be measured prices cuts as before: no failure
                    ok = reply.get("status") == "ok"
                    points = reply["points"] if ok else []
                    per_byte = fit_cut_points(points, overheads.get(a.name, 0.0)) if ok else 0.0
                    st.put_link(a, a, 0.0, per_byte, points,
                                {"kind": "cut",
                                 "method": "conv chain whole vs cut per conv, minus the call overhead"}
                                | ({} if ok else {"error": str(reply.get("reason"))}))
                    res.links_measured += 1
                    bar.advance()
                    continue
                if reply.get("status") != "ok":
                    res.problems.append(str(reply.get("reason")))
                    bar.advance()
                    continue
                fit = fit_points(a.name, b.name, reply["points"])
                st.put_link(a, b, fit.latency_ms, fit.ms_per_byte, fit.points, fit.meta)
                res.links_measured += 1
                bar.advance()
    finally:
        worker.stop()


def profile_links(targets: Iterable | None, store: ProfileStore | str | os.PathLike, *, sizes: Sequence[int] | None = None,
                  isolate: bool = True, timeout_s: float = 300.0, progress: bool = True):
    """Measure the hand-off between every ordered pair of ``targets`` that the store lacks.

    Returns the :class:`placer.devices.links.LinkModel`. Overheads are measured first if missing.
    """
    tlist = _measurable(_resolve_targets(targets), CampaignResult())
    st, owned = open_store(store)
    try:
        res = CampaignResult(store_path=st.path)
        st.register_signatures([K.overhead_signature_row()])
        eng = _Engine(st, timeout_s=60.0, isolate=isolate, progress=progress, timing=None, seed=0,
                      retry_failed=False, result=res)
        eng.run([_overhead_task(t, 60.0) for t in tlist])
        _run_links(st, tlist, res, sizes=sizes, isolate=isolate, timeout_s=timeout_s, progress=progress)
        if res.problems:
            raise ProfileError("; ".join(res.problems))
        return st.link_model(tlist)
    finally:
        if owned:
            st.close()


def profile_segment(
    graph,
    op_ids: Sequence[str],
    targets: Iterable | None = None,
    store: ProfileStore | str | os.PathLike | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    isolate: bool = True,
    timing: TimingConfig | None = None,
    progress: bool = False,
) -> dict[str, Measurement]:
    """Profile the op set ``op_ids`` as one unit (``OpGraph.subgraph_model``) on each target.

    Keyed by :func:`placer.profile.keys.segment_key`; cached like op rows. Returns
    ``{target_name: Measurement}`` (net of the call overhead, which is measured if missing).
    """
    tlist = _measurable(_resolve_targets(targets), CampaignResult())
    st, owned = open_store(store)
    try:
        res = CampaignResult(store_path=st.path)
        tasks, rows = [], [K.overhead_signature_row()]
        for t in tlist:
            st.register_target(t)
            tasks.append(_overhead_task(t, timeout_s))
            task, row = _segment_task(graph, list(op_ids), t, timeout_s)
            tasks.append(task)
            rows.append(row)
        st.register_signatures({r["key"]: r for r in rows}.values())
        _Engine(st, timeout_s=timeout_s, isolate=isolate, progress=progress, timing=timing, seed=0,
                retry_failed=False, result=res).run(tasks)
        key = rows[-1]["key"]
        return _collect(st, key, tlist, res)
    finally:
        if owned:
            st.close()


def profile_whole_model(
    graph,
    targets: Iterable | None = None,
    store: ProfileStore | str | os.PathLike | None = None,
    *,
    timeout_s: float = 10 * DEFAULT_TIMEOUT_S,
    isolate: bool = True,
    timing: TimingConfig | None = None,
    progress: bool = False,
    retry_contended: bool = False,
) -> dict[str, Measurement]:
    """Profile the whole model as one partition on each target -> ``{target_name: Measurement}``
    (``retry_contended``: re-measure a stored one flagged as taken on a busy machine)."""
    tlist = _measurable(_resolve_targets(targets), CampaignResult())
    st, owned = open_store(store)
    try:
        res = CampaignResult(store_path=st.path)
        st.register_signatures([K.overhead_signature_row(), K.model_signature_row(graph)])
        tasks = []
        for t in tlist:
            st.register_target(t)
            tasks.append(_overhead_task(t, DEFAULT_TIMEOUT_S))
            tasks.append(_Task(K.model_key(graph), "model", t, f"whole model {graph.name}", lambda: graph.model,
                               _min_timeout(t, timeout_s), _static_support(t, graph.ops)))
        _Engine(st, timeout_s=timeout_s, isolate=isolate, progress=progress, timing=timing, seed=0,
                retry_failed=False, result=res, retry_contended=retry_contended).run(tasks)
        return _collect(st, K.model_key(graph), tlist, res)
    finally:
        if owned:
            st.close()


def _collect(st: ProfileStore, key: str, tlist, res: CampaignResult) -> dict[str, Measurement]:
    out = {}
    for t in tlist:
        m = st.get(key, t)
        if m is None:
            why = "; ".join(res.problems) or "not measured"
            raise ProfileError(f"{key} on {t.name}: {why}")
        out[t.name] = m
    return out


def profile_model(
    source,
    targets: Iterable | None = None,
    store: ProfileStore | str | os.PathLike | None = None,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    segments: bool | int = False,
    **kw,
) -> tuple[Any, CampaignResult]:
    """Load a model (path, ``zoo:NAME``, ModelProto or OpGraph) and :func:`profile_graph` it.

    Returns ``(graph, result)``. ``segments``: False, True (chain windows of 2..3 ops) or the
    max window length.
    """
    graph = source if isinstance(source, OpGraph) else zoo.load_graph(source, dict(shapes) if shapes else None)
    segs = None
    if segments:
        max_len = 3 if segments is True else int(segments)
        segs = K.chain_segments(graph, max_len=max_len)
    return graph, profile_graph(graph, targets, store, segments=segs, **kw)
