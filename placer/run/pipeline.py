"""Pipeline executor: one worker thread per stage, bounded queues between stages, request order kept.

* **Workers.** Stage ``s`` runs in its own thread. The thread pins itself to the stage's cores
  (``os.sched_setaffinity(0, cores)``, Linux: the calling thread) *before* it builds its sessions,
  so runtime threads created while compiling inherit the pinning; then it builds every partition
  of the stage on its target and serves requests: it runs the stage's partitions in order, drops
  tensors no later stage or model output needs, and passes the rest on. Threads (not processes):
  ONNX Runtime, OpenVINO and TVM release the GIL inside their kernels (measured in
  ``experiments/bench_executor.py``).
* **Queues.** ``queue.Queue(maxsize=queue_size)`` between feeder, stages and collector:
  back-pressure, no unbounded buffering. Every queue operation polls an abort flag, so nothing
  can block forever.
* **Order.** Each stage is FIFO, so results leave in request order; the collector indexes them by
  request id anyway.
* **Errors.** A stage that raises fails that request with a :class:`StageError` naming the stage,
  the partition and the target. Policy (deterministic): requests *before* the first failed one
  complete normally; the failed request gets its StageError; every later request is failed with
  :class:`PipelineStopped` (not run where it had not been started, results discarded where it had),
  and the executor shuts down: the workers drain, receive a stop token and are joined. A stage that
  cannot build its sessions fails every request with a StageError the same way.
* **Latency** of a request runs from when the feeder's put into the first queue returns to when the
  collector receives its result; throughput = completed requests / wall time.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from placer.errors import PlacerError
from placer.run.executors import PartitionError, RunResult
from placer.run.measurement import summarize

_STOP = object()
_POLL_S = 0.05


class StageError(PartitionError):
    """A pipeline stage failed on a request (stage, partition and target named)."""

    def __init__(self, message: str, stage: int, partition: str = "", target: str = "", request: int = -1):
        super().__init__(message, partition, target, stage)
        self.request = request


class PipelineStopped(PlacerError):
    """A request was not completed because an earlier request failed in a stage."""


class _Aborted(Exception):
    pass


class PipelineExecutor:
    """One worker per stage of a materialized plan (see module docstring).

    Use as a context manager, or call :meth:`start` / :meth:`close`::

        with PipelineExecutor(mat) as pe:
            result = pe.run(requests)
    """

    name = "pipeline"

    def __init__(self, mat, *, queue_size: int = 2, start_timeout_s: float = 600.0):
        self.mat = mat
        self.stages = tuple(mat.stage_config.stages)
        self.output_names = tuple(mat.stage_config.model_outputs)
        self.queue_size = int(queue_size)
        self.start_timeout_s = start_timeout_s
        self._threads: list[threading.Thread] = []
        self._queues: list[queue.Queue] = []
        self._abort = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._failed_at: int | None = None
        self._compile_errors: dict[int, BaseException] = {}
        self._ready: list[threading.Event] = []
        self._ptimes: dict[str, list[float]] = defaultdict(list)
        self._stage_times: dict[int, list[float]] = defaultdict(list)
        self._worker_crash: BaseException | None = None
        self.compiled_s: float | None = None
        # tensors each stage must pass on: read by a later stage, or a model output
        needed: list[set[str]] = []
        for i in range(len(self.stages)):
            later = {t for s in self.stages[i + 1:] for p in s.partitions for t in p.inputs}
            needed.append(later | set(self.output_names))
        self._needed_after = needed

    # ---- lifecycle ------------------------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self) -> None:
        if self._started:
            return
        if self._closed:
            raise PlacerError("pipeline executor is closed")
        self._started = True
        t0 = time.perf_counter()
        n = len(self.stages)
        self._queues = [queue.Queue(maxsize=self.queue_size) for _ in range(n + 1)]
        self._ready = [threading.Event() for _ in range(n)]
        for i in range(n):
            th = threading.Thread(target=self._worker, args=(i,), name=f"placer-stage{i}", daemon=True)
            th.start()
            self._threads.append(th)
        deadline = time.monotonic() + self.start_timeout_s
        for ev in self._ready:
            if not ev.wait(max(0.0, deadline - time.monotonic())):
                self.close()
                raise PlacerError("pipeline: a stage did not finish building its sessions in time")
        self.compiled_s = time.perf_counter() - t0

    def close(self) -> None:
        """Stop the workers (stop token through every queue) and join them."""
        if self._closed:
            return
        self._closed = True
        if self._threads:
            try:
                self._put(self._queues[0], _STOP, timeout_s=5.0)
            except _Aborted:
                pass
            # drain the last queue so the stop token can travel
            deadline = time.monotonic() + 30.0
            while any(t.is_alive() for t in self._threads) and time.monotonic() < deadline:
                try:
                    self._queues[-1].get(timeout=_POLL_S)
                except queue.Empty:
                    pass
            if any(t.is_alive() for t in self._threads):
                self._abort.set()
            for t in self._threads:
                t.join(timeout=10.0)
        self._threads = []

    @property
    def alive_threads(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    # ---- queue helpers ----------------------------------------------------------------------------
    def _put(self, q: queue.Queue, item: Any, timeout_s: float | None = None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self._abort.is_set():
                raise _Aborted()
            try:
                q.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                if deadline is not None and time.monotonic() > deadline:
                    raise _Aborted() from None

    def _get(self, q: queue.Queue) -> Any:
        while True:
            if self._abort.is_set():
                raise _Aborted()
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                continue

    def _note_failure(self, rid: int) -> None:
        with self._lock:
            if self._failed_at is None or rid < self._failed_at:
                self._failed_at = rid

    # ---- the stage worker -------------------------------------------------------------------------
    def _worker(self, i: int) -> None:
        st = self.stages[i]
        compiled: dict[str, Any] = {}
        try:
            if st.cores:
                os.sched_setaffinity(0, set(st.cores))
            from placer.devices import make_target

            for p in st.partitions:
                compiled[p.id] = make_target(p.target).compile(self.mat.submodels[p.id])
        except BaseException as exc:  # reported per request, below
            self._compile_errors[i] = exc
        finally:
            self._ready[i].set()
        q_in, q_out = self._queues[i], self._queues[i + 1]
        keep = self._needed_after[i]
        try:
            while True:
                item = self._get(q_in)
                if item is _STOP:
                    self._put(q_out, _STOP)
                    return
                kind, rid, payload = item
                if kind == "req":
                    failed_at = self._failed_at
                    if failed_at is not None and rid > failed_at:
                        item = ("cancel", rid, None)
                    elif i in self._compile_errors:
                        exc = self._compile_errors[i]
                        self._note_failure(rid)
                        item = ("err", rid, StageError(
                            f"stage {i} ({st.target or 'mixed'}) could not build its sessions: {_line(exc)}",
                            i, request=rid))
                    else:
                        item = self._serve(i, st, compiled, rid, payload, keep)
                self._put(q_out, item)
        except _Aborted:
            return
        except BaseException as exc:  # pragma: no cover - a bug in the loop itself
            self._worker_crash = exc
            self._abort.set()
        finally:
            for c in compiled.values():
                try:
                    c.close()
                except Exception:  # pragma: no cover
                    pass

    def _serve(self, i, st, compiled, rid, env, keep):
        t_stage = time.perf_counter_ns()
        p = None
        try:
            for p in st.partitions:
                s = time.perf_counter_ns()
                out = compiled[p.id].run({t: env[t] for t in p.inputs})
                self._ptimes[p.id].append((time.perf_counter_ns() - s) / 1e6)
                env.update(out)
        except Exception as exc:
            self._note_failure(rid)
            pid = p.id if p is not None else "?"
            tgt = p.target if p is not None else (st.target or "")
            return ("err", rid, StageError(
                f"stage {i} failed on request {rid}: partition {pid} on {tgt}: "
                f"{type(exc).__name__}: {_line(exc)}",
                i, pid, tgt, rid))
        self._stage_times[i].append((time.perf_counter_ns() - t_stage) / 1e6)
        return ("req", rid, {k: v for k, v in env.items() if k in keep})

    # ---- running ----------------------------------------------------------------------------------
    def _batch(self, requests: Sequence[Mapping[str, np.ndarray]]):
        n = len(requests)
        t_enter: dict[int, int] = {}
        feed_error: list[BaseException] = []

        def feeder():
            try:
                for rid, feeds in enumerate(requests):
                    if self._failed_at is not None and rid > self._failed_at:
                        self._put(self._queues[0], ("cancel", rid, None))
                    else:
                        self._put(self._queues[0], ("req", rid, dict(feeds)))
                    t_enter[rid] = time.perf_counter_ns()
            except _Aborted:
                pass
            except BaseException as exc:  # pragma: no cover
                feed_error.append(exc)
                self._abort.set()

        outputs: list[dict[str, np.ndarray] | None] = [None] * n
        errors: list[BaseException | None] = [None] * n
        t_done: dict[int, int] = {}
        t0 = time.perf_counter()
        fth = threading.Thread(target=feeder, name="placer-feeder", daemon=True)
        fth.start()
        received = 0
        try:
            while received < n:
                if self._worker_crash is not None or feed_error:
                    raise self._worker_crash or feed_error[0]
                try:
                    item = self._queues[-1].get(timeout=_POLL_S)
                except queue.Empty:
                    if not all(t.is_alive() for t in self._threads):
                        raise PlacerError(
                            "pipeline: a stage worker exited unexpectedly") from self._worker_crash
                    continue
                if item is _STOP:  # pragma: no cover - only close() sends it
                    continue
                kind, rid, payload = item
                t_done[rid] = time.perf_counter_ns()
                if kind == "req":
                    outputs[rid] = {t: payload[t] for t in self.output_names}
                elif kind == "err":
                    errors[rid] = payload
                else:
                    errors[rid] = None  # filled below
                received += 1
        except BaseException:
            self._abort.set()
            fth.join(timeout=5.0)
            self.close()
            raise
        wall = time.perf_counter() - t0
        fth.join()
        failed_at = self._failed_at
        if failed_at is not None:
            first = errors[failed_at]
            stage = getattr(first, "stage", "?")
            for rid in range(failed_at + 1, n):
                outputs[rid] = None
                errors[rid] = PipelineStopped(
                    f"request {rid} not completed: the pipeline stopped after stage {stage} failed "
                    f"on request {failed_at}"
                )
        lat = [(t_done[r] - t_enter[r]) / 1e6 for r in range(n) if outputs[r] is not None and r in t_enter]
        return outputs, errors, lat, wall

    def run(self, requests: Sequence[Mapping[str, np.ndarray]], *, warmup: int = 2) -> RunResult:
        """Push requests through the stages; outputs in request order (see the error policy above)."""
        if self._closed:
            raise PlacerError("pipeline executor is closed (a stage failed earlier, or close() was called)")
        self.start()
        requests = list(requests)
        if warmup:
            w_out, w_err, _, _ = self._batch([requests[i % len(requests)] for i in range(warmup)])
            if any(w_err):
                err = next(e for e in w_err if e is not None)
                self.close()
                errors: list[BaseException | None] = [err] + [
                    PipelineStopped("not run: the pipeline failed during warm-up") for _ in requests[1:]]
                m = summarize(self.name, [], 0.0, n_failed=len(requests))
                return RunResult(outputs=[None] * len(requests), measurement=m, errors=errors)
        self._ptimes.clear()
        self._stage_times.clear()
        outputs, errors, lat, wall = self._batch(requests)
        if self._failed_at is not None:
            self.close()
        parts = [p for s in self.stages for p in s.partitions]
        stage_med = {str(i): float(np.median(v)) for i, v in sorted(self._stage_times.items()) if v}
        m = summarize(
            self.name, lat, wall, parts, dict(self._ptimes), n_failed=sum(e is not None for e in errors),
            extra={"compile_s": self.compiled_s, "queue_size": self.queue_size, "warmup": warmup,
                   "stage_median_ms": stage_med,
                   "stages": [{"index": s.index, "target": s.target,
                               "cores": list(s.cores) if s.cores else None} for s in self.stages]},
        )
        return RunResult(outputs=outputs, measurement=m, errors=errors)


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
