"""Pipeline executor: worker threads per stage (replicas), bounded queues between stages, request order kept.

* **Workers.** Stage ``s`` runs in its own thread, or, when its stage config lists ``replicas``
  (stage config version 2), in one thread per replica: data-parallel copies of the stage, each
  pinned to its own cores and holding its own runtime sessions, all taking requests from the same
  place and passing results to the same place. A worker pins itself (``os.sched_setaffinity(0,
  cores)``, Linux: the calling thread; the replica's cores, else the stage's) *before* it builds its
  sessions, so runtime threads created while compiling inherit the pinning; then it builds every
  partition of the stage on its target and serves requests: it runs the stage's partitions in
  order, drops tensors no later stage or model output needs, and passes the rest on. Threads (not
  processes): ONNX Runtime, OpenVINO and TVM release the GIL inside their kernels (measured in
  ``experiments/bench_executor.py``).
* **Hand-offs.** :meth:`PipelineExecutor.run` publishes the batch and puts one batch token per
  first-stage worker into the first stage's control queue; first-stage workers then *pull*
  requests from the batch (a shared cursor under a lock: the next request id) while they are free,
  so there is no feeder thread and no queue in front of the first stage. Between stages:
  ``queue.Queue(maxsize=queue_size)`` (at least one slot per worker of the consuming stage):
  back-pressure, no unbounded buffering. The last stage's workers write each result straight into
  the batch (by request id) and the caller's thread waits for the batch to complete, so there is no
  collector queue either: a single-stage plan (e.g. the whole model replicated on every core) has
  no thread hand-off per request at all. Every blocking wait polls an abort flag, so nothing of
  placer's can block forever. A caller that only reduces or forwards each result passes ``run(...,
  consume=fn)``: the last stage's workers hand each request's outputs to ``fn`` as views of the
  runtimes' buffers, with no copy (OpenVINO's outputs are otherwise copied out of its request:
  4 MB of logits per request on hf-llama). ``fn`` runs in those workers, several at once where the
  last stage is replicated, in no set order; a consumer that hangs holds its worker.
* **Order.** A stage with one worker is FIFO; a replicated stage is not (replica B may finish
  request 5 before replica A finishes request 4), so requests may reach later stages and the end
  out of order. Nothing depends on arrival order: items carry their request id, results are stored
  by it, and the outputs are returned in request order.
* **Errors.** A stage that raises fails that request with a :class:`StageError` naming the stage,
  the partition and the target (a consumer that raises: the last stage, partition ``consumer``).
  Policy (deterministic, replicas or not): requests *before* the
  first failed one (lowest request id that failed) complete normally; the failed request gets its
  StageError; every later request is failed with :class:`PipelineStopped` (not run where it had not
  been started, results discarded where it had: with replicas a later request may already have
  finished), and the executor shuts down: the workers receive stop tokens and are joined. A stage
  that cannot build its sessions (in any of its replicas) fails every request with a StageError the
  same way, whichever replica serves it.
* **Shutdown.** :meth:`PipelineExecutor.close` puts one stop token per worker of the first stage
  into its control queue; each worker takes exactly one and exits, and the *last* worker of a stage
  to stop forwards one token per worker of the next stage. Every item a stage's workers produced
  is therefore queued before the next stage's tokens.
* **Timings.** Per-partition times (every replica's calls) and per-stage times are recorded for
  the measured batch; ``extra["replica_requests"]`` counts the requests each worker served.
* **Latency** of a request runs from when a first-stage worker takes it to when its result is
  stored, a consumer's time included (time waiting for a free first-stage worker is not counted;
  the bounded queues between stages are); throughput = completed requests / wall time of the batch.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from placer.devices import make_target
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


class _Batch:
    """The requests of one :meth:`PipelineExecutor.run` call and their results, by request id
    (``consume``: see :meth:`PipelineExecutor.run`)."""

    def __init__(self, requests: Sequence[Mapping[str, np.ndarray]], output_names: Sequence[str],
                 consume: Callable[[int, dict[str, np.ndarray]], Any] | None = None):
        self.requests = requests
        self.n = len(requests)
        self.output_names = tuple(output_names)
        self.consume = consume
        self.lock = threading.Lock()
        self.cursor = 0
        self.done = 0
        self.finished = threading.Event()
        self.outputs: list[dict[str, np.ndarray] | None] = [None] * self.n
        self.errors: list[BaseException | None] = [None] * self.n
        self.t_enter = [0] * self.n
        self.t_done = [0] * self.n
        self.completed = [False] * self.n  # its outputs delivered (a consumer may return None for them)
        if self.n == 0:
            self.finished.set()

    def take(self) -> int:
        """The next request id for a first-stage worker, or -1 when every request is taken."""
        with self.lock:
            rid = self.cursor
            if rid >= self.n:
                return -1
            self.cursor = rid + 1
        self.t_enter[rid] = time.perf_counter_ns()
        return rid

    def deliver(self, kind: str, rid: int, payload: Any) -> None:
        """A request leaves the last stage: its outputs ("req"), what a consumer made of them ("kept"),
        its error, or nothing (cancelled)."""
        if kind == "req":
            self.outputs[rid], self.completed[rid] = {t: payload[t] for t in self.output_names}, True
        elif kind == "kept":
            self.outputs[rid], self.completed[rid] = payload, True
        elif kind == "err":
            self.errors[rid] = payload
        self.t_done[rid] = time.perf_counter_ns()
        with self.lock:
            self.done += 1
            if self.done == self.n:
                self.finished.set()


class PipelineExecutor:
    """One worker per stage (or per replica of a replicated stage) of a materialized plan (see the
    module docstring).

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
        # one run() at a time: the last stage delivers to the batch in flight, by request id, so two
        # batches at once swapped outputs (188 of 200 of one call's were the other's) and one never ended
        self._run_lock = threading.Lock()
        self._started = False
        self._closed = False
        self._failed_at: int | None = None
        self._compile_errors: dict[int, tuple[int, BaseException]] = {}  # stage -> (replica, error)
        self._ready: list[threading.Event] = []
        self._workers: list[tuple[tuple[int, ...] | None, ...]] = [tuple(s.workers) for s in self.stages]
        self._stops_seen = [0] * len(self.stages)
        # filled for every partition / stage / worker up front: workers only append (no dict inserts
        # from several threads)
        self._ptimes: dict[str, list[float]] = {p.id: [] for s in self.stages for p in s.partitions}
        self._stage_times: dict[int, list[float]] = {i: [] for i in range(len(self.stages))}
        self._served: dict[tuple[int, int], list[int]] = {
            (i, j): [0] for i, w in enumerate(self._workers) for j in range(len(w))}
        self._worker_crash: BaseException | None = None
        self._current: _Batch | None = None  # the batch in flight (one run() at a time)
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
        # queue 0: control tokens (batches, stops) for the first stage, one per worker at most in flight;
        # queue i > 0: requests into stage i, at least one slot per worker so every replica can be busy
        sizes = [max(self.queue_size, len(w)) for w in self._workers]
        sizes[0] = max(sizes[0], 2 * len(self._workers[0]))
        self._queues = [queue.Queue(maxsize=m) for m in sizes]
        self._ready = []
        for i, workers in enumerate(self._workers):
            for j, cores in enumerate(workers):
                ev = threading.Event()
                self._ready.append(ev)
                name = f"placer-stage{i}" if len(workers) == 1 else f"placer-stage{i}.{j}"
                th = threading.Thread(target=self._worker, args=(i, j, cores, ev), name=name, daemon=True)
                th.start()
                self._threads.append(th)
        deadline = time.monotonic() + self.start_timeout_s
        for ev in self._ready:
            if not ev.wait(max(0.0, deadline - time.monotonic())):
                self.close()
                raise PlacerError("pipeline: a stage did not finish building its sessions in time")
        self.compiled_s = time.perf_counter() - t0

    def close(self) -> None:
        """Stop the workers (one stop token per worker, passed on stage by stage) and join them."""
        if self._closed:
            return
        self._closed = True
        if self._threads:
            try:
                for _ in self._workers[0]:
                    self._put(self._queues[0], _STOP, timeout_s=5.0)
            except _Aborted:
                pass
            deadline = time.monotonic() + 30.0
            for t in self._threads:
                t.join(timeout=max(0.0, deadline - time.monotonic()))
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
    def _worker(self, i: int, j: int, cores: tuple[int, ...] | None, ready: threading.Event) -> None:
        st = self.stages[i]
        compiled: dict[str, Any] = {}
        try:
            if cores:
                os.sched_setaffinity(0, set(cores))

            # the whole model in one partition on one worker: nothing else runs, so its runtime may
            # keep its threads hot between requests (Target.compile_alone)
            alone = len(self.mat.partitions) == 1 and sum(len(w) for w in self._workers) == 1
            for p in st.partitions:
                target = make_target(p.target)
                compiled[p.id] = (target.compile_alone if alone else target.compile)(self.mat.submodels[p.id])
        except BaseException as exc:  # reported per request, below
            with self._lock:
                self._compile_errors.setdefault(i, (j, exc))
        finally:
            ready.set()
        last_stage = i == len(self.stages) - 1
        q_in = self._queues[i]
        q_out = None if last_stage else self._queues[i + 1]
        keep = self._needed_after[i]
        served = self._served[(i, j)]

        def handle(rid: int, payload: Any) -> None:
            failed_at = self._failed_at
            if failed_at is not None and rid > failed_at:
                item = ("cancel", rid, None)
            elif i in self._compile_errors:
                rj, exc = self._compile_errors[i]
                self._note_failure(rid)
                who = f" replica {rj}" if len(self._workers[i]) > 1 else ""
                item = ("err", rid, StageError(
                    f"stage {st.index}{who} ({st.target or 'mixed'}) could not build its sessions: {_line(exc)}",
                    st.index, request=rid))
            else:
                # a consumer takes the last stage's outputs before this worker runs again: views of
                # its runtimes' buffers will do (no copy of each output)
                shared = last_stage and self._current.consume is not None
                item = self._serve(i, st, compiled, rid, payload, keep, shared)
                served[0] += 1
            if last_stage:
                if item[0] == "req" and self._current.consume is not None:
                    item = self._consumed(rid, item[2])
                self._current.deliver(*item)
            else:
                self._put(q_out, item)

        try:
            while True:
                item = self._get(q_in)
                if item is _STOP:
                    with self._lock:
                        self._stops_seen[i] += 1
                        last = self._stops_seen[i] == len(self._workers[i])
                    if last and not last_stage:  # every sibling has put its last item: one token per next worker
                        for _ in self._workers[i + 1]:
                            self._put(q_out, _STOP)
                    return
                if i == 0:  # a batch token: pull requests while there are any
                    batch = item
                    while True:
                        if self._abort.is_set():
                            raise _Aborted()
                        rid = batch.take()
                        if rid < 0:
                            break
                        handle(rid, dict(batch.requests[rid]))
                else:
                    kind, rid, payload = item
                    if kind == "req":
                        handle(rid, payload)
                    elif last_stage:
                        self._current.deliver(kind, rid, payload)
                    else:
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

    def _consumed(self, rid: int, env: Mapping[str, np.ndarray]) -> tuple:
        """The batch's consumer on one request's outputs, in the last stage's worker: ("kept", rid,
        what it returned); the request failed (the error policy) if it raised; not called for a
        request after one that failed meanwhile (its result would be discarded)."""
        failed_at = self._failed_at
        if failed_at is not None and rid > failed_at:
            return "cancel", rid, None
        try:
            return "kept", rid, self._current.consume(rid, {t: env[t] for t in self.output_names})
        except Exception as exc:  # noqa: BLE001 - the caller's code: reported per request
            self._note_failure(rid)
            last = self.stages[-1].index
            return "err", rid, StageError(
                f"stage {last} failed on request {rid}: the consumer of its outputs raised "
                f"{type(exc).__name__}: {_line(exc)}", last, "consumer", "", rid)

    def _serve(self, i, st, compiled, rid, env, keep, shared: bool = False):
        t_stage = time.perf_counter_ns()
        p = None
        try:
            for p in st.partitions:
                s = time.perf_counter_ns()
                c = compiled[p.id]
                call = getattr(c, "run_shared", c.run) if shared else c.run  # a plug-in may lack run_shared
                out = call({t: env[t] for t in p.inputs})
                self._ptimes[p.id].append((time.perf_counter_ns() - s) / 1e6)
                env.update(out)
        except Exception as exc:
            self._note_failure(rid)
            pid = p.id if p is not None else "?"
            tgt = p.target if p is not None else (st.target or "")
            return ("err", rid, StageError(
                f"stage {st.index} failed on request {rid}: partition {pid} on {tgt}: "
                f"{type(exc).__name__}: {_line(exc)}",
                st.index, pid, tgt, rid))
        self._stage_times[i].append((time.perf_counter_ns() - t_stage) / 1e6)
        return ("req", rid, {k: v for k, v in env.items() if k in keep})

    # ---- running ----------------------------------------------------------------------------------
    def _batch(self, requests: Sequence[Mapping[str, np.ndarray]], consume=None):
        batch = _Batch(requests, self.output_names, consume)
        self._current = batch
        n = batch.n
        t0 = time.perf_counter()
        try:
            for _ in self._workers[0]:
                self._put(self._queues[0], batch)
            while not batch.finished.wait(_POLL_S):
                if self._worker_crash is not None:
                    raise self._worker_crash
                if self._closed:  # close() from another thread: no worker serves this batch any more
                    raise PlacerError("pipeline executor is closed (close() was called during run())")
                if not all(t.is_alive() for t in self._threads):
                    raise PlacerError("pipeline: a stage worker exited unexpectedly") from self._worker_crash
        except BaseException:
            self._abort.set()
            self.close()
            raise
        wall = time.perf_counter() - t0
        outputs, errors = batch.outputs, batch.errors
        failed_at = self._failed_at
        if failed_at is not None:
            first = errors[failed_at]
            stage = getattr(first, "stage", "?")
            for rid in range(failed_at + 1, n):
                outputs[rid] = None
                batch.completed[rid] = False
                errors[rid] = PipelineStopped(
                    f"request {rid} not completed: the pipeline stopped after stage {stage} failed "
                    f"on request {failed_at}"
                )
        lat = [(batch.t_done[r] - batch.t_enter[r]) / 1e6 for r in range(n) if batch.completed[r]]
        return outputs, errors, lat, wall

    def run(self, requests: Sequence[Mapping[str, np.ndarray]], *, warmup: int = 2,
            consume: Callable[[int, dict[str, np.ndarray]], Any] | None = None) -> RunResult:
        """See :meth:`_run`; calls from several threads run one after the other."""
        with self._run_lock:
            return self._run(requests, warmup=warmup, consume=consume)

    def _run(self, requests: Sequence[Mapping[str, np.ndarray]], *, warmup: int = 2,
             consume: Callable[[int, dict[str, np.ndarray]], Any] | None = None) -> RunResult:
        """Push requests through the stages; outputs in request order (see the error policy above).

        ``warmup`` requests (at least two per worker of the widest stage when nonzero) run first, untimed.

        ``consume(request_id, outputs)``: the request's outputs are handed to it in the last stage's
        worker as they are produced, as views of the runtimes' own buffers (no copy of each output:
        OpenVINO's are overwritten by that worker's next request, so the consumer must not keep them),
        and ``RunResult.outputs`` holds what it returned (e.g. a class id, or None: ``errors`` says
        which requests failed). A serving loop that reduces or forwards each result this way pays no
        output copy, as an OpenVINO ``AsyncInferQueue`` callback does not. It is called from the last
        stage's workers, several at once where that stage is replicated, in no set order (make it
        thread-safe); one that raises fails its request under the error policy (a StageError, partition
        ``consumer``), and no later request reaches it once one has failed. Warm-up requests go to a
        consumer that keeps nothing."""
        if self._closed:
            raise PlacerError("pipeline executor is closed (a stage failed earlier, or close() was called)")
        requests = list(requests)
        if not requests:
            raise PlacerError("pipeline executor: no requests to run")
        self.start()
        if warmup:
            # every replica of every stage should have made its (cold) first call before timing starts:
            # with pulled work one replica can take them all, so warm with a few requests per worker
            warmup = max(warmup, 2 * max(len(w) for w in self._workers))
            w_out, w_err, _, _ = self._batch([requests[i % len(requests)] for i in range(warmup)],
                                             None if consume is None else discard_outputs)
            if any(w_err):
                err = next(e for e in w_err if e is not None)
                self.close()
                errors: list[BaseException | None] = [err] + [
                    PipelineStopped("not run: the pipeline failed during warm-up") for _ in requests[1:]]
                m = summarize(self.name, [], 0.0, n_failed=len(requests))
                return RunResult(outputs=[None] * len(requests), measurement=m, errors=errors)
        for v in (*self._ptimes.values(), *self._stage_times.values()):
            v.clear()
        for c in self._served.values():
            c[0] = 0
        outputs, errors, lat, wall = self._batch(requests, consume)
        if self._failed_at is not None:
            self.close()
        parts = [p for s in self.stages for p in s.partitions]
        # keyed by the stages' own indices (a plan's stage_of may skip some), as the partitions name them
        stage_med = {str(self.stages[i].index): float(np.median(v))
                     for i, v in sorted(self._stage_times.items()) if v}
        m = summarize(
            self.name, lat, wall, parts, dict(self._ptimes), n_failed=sum(e is not None for e in errors),
            extra={"compile_s": self.compiled_s, "queue_size": self.queue_size, "warmup": warmup,
                   "stage_median_ms": stage_med,
                   "replica_requests": {str(self.stages[i].index): [self._served[(i, j)][0] for j in range(len(w))]
                                        for i, w in enumerate(self._workers)},
                   "stages": [{"index": s.index, "target": s.target,
                               "cores": list(s.cores) if s.cores else None,
                               "replicas": [list(r) for r in s.replicas] if s.replicas else None}
                              for s in self.stages]},
        )
        return RunResult(outputs=outputs, measurement=m, errors=errors)


def discard_outputs(rid: int, outputs: Mapping[str, np.ndarray]) -> None:
    """A consumer that drops every output (warm-up requests, measurement rounds)."""


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
