"""Single-request executors: the hybrid executor and the Relax-VM executor.

Hybrid executor
---------------
Each partition's ONNX sub-model is compiled on its own target
(``make_target(name).compile(submodel)``) and the partitions run in dependency order. Targets
that share a CPU core (:mod:`placer.devices.cores`: ``onnxruntime:t2`` and ``openvino:t2`` on a
2-core machine both use every core) never run at the same time, as the solver assumed. When the
plan has independent partitions on targets with disjoint cores (or a target pinned to cores),
each group of core-sharing targets gets one worker thread (a single-thread pool: one partition at
a time), pinned to a target's cores before it builds that target's sessions and before each of
its runs; the dispatcher submits a partition to its group's worker as soon as its inputs exist,
so independent partitions on disjoint cores run at once. Otherwise (a chain, or targets that all
share cores) partitions run inline in the calling thread: no thread hand-off.

Relax executor
--------------
The materialized Relax module (:mod:`placer.materialize.relax_module`), compiled by ``tvm.compile``
after ``RunCodegen`` and run by ``relax.VirtualMachine``; TVM partitions run as compiled TVM code,
the others through their runtime's cached session behind a registered packed function. Sequential
(the VM runs one call at a time). Per-partition times come from a few extra runs with a VM
instrument (it costs ~6 us per VM call, so request latencies are timed without it).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from placer.devices import make_target
from placer.devices.base import TargetSpec
from placer.devices.cores import conflict_groups, core_sets
from placer.errors import PlacerError
from placer.materialize.relax_module import load_compiled
from placer.run.measurement import Measurement, summarize

_ALL_CORES = tuple(sorted(os.sched_getaffinity(0)))


class PartitionError(PlacerError):
    """A partition failed to compile or run (partition, target and stage named)."""

    def __init__(self, message: str, partition: str = "", target: str = "", stage: int | None = None):
        super().__init__(message)
        self.partition = partition
        self.target = target
        self.stage = stage


@dataclass
class RunResult:
    """Outputs per request (None where a request failed; with a pipeline consumer, what it returned:
    ``PipelineExecutor.run(consume=...)``), errors per request, the measurement."""

    outputs: list[Any]
    measurement: Measurement
    errors: list[BaseException | None] = field(default_factory=list)
    numerics: Any = None

    @property
    def ok(self) -> bool:
        return not any(self.errors)

    def raise_first(self) -> None:
        for e in self.errors:
            if e is not None:
                raise e


def _reachability(n: int, deps: Sequence[Sequence[int]]) -> list[set[int]]:
    anc: list[set[int]] = [set() for _ in range(n)]
    for i in range(n):  # partitions are in topological order
        for d in deps[i]:
            anc[i].add(d)
            anc[i] |= anc[d]
    return anc


class _Executor:
    name = "base"
    time_requests_with_partitions = True

    def __init__(self, mat):
        self.mat = mat
        self.partitions = tuple(mat.partitions)
        self.input_names = tuple(mat.stage_config.model_inputs)
        self.output_names = tuple(mat.stage_config.model_outputs)
        self.compiled_s: float | None = None

    # subclasses: compile(), run(feeds), run_timed(feeds) -> (outputs, {pid: ms}), close()
    def __enter__(self):
        try:
            self.compile()
        except BaseException:  # __exit__ does not run when __enter__ raises: free what was built
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def measure(self, requests: Sequence[Mapping[str, np.ndarray]], *, warmup: int = 2,
                partition_runs: int | None = None) -> RunResult:
        """Run each request once (after ``warmup`` runs); latencies, throughput, partition medians."""
        if self.compiled_s is None:
            self.compile()
        requests = list(requests)
        if not requests:
            raise PlacerError("measure: no requests")
        for i in range(warmup):
            self.run(requests[i % len(requests)])
        outputs: list[dict[str, np.ndarray] | None] = []
        lat: list[float] = []
        ptimes: dict[str, list[float]] = defaultdict(list)
        t0 = time.perf_counter()
        for feeds in requests:
            s = time.perf_counter_ns()
            if self.time_requests_with_partitions:
                out, times = self.run_timed(feeds)
                for k, v in times.items():
                    ptimes[k].append(v)
            else:
                out = self.run(feeds)
            lat.append((time.perf_counter_ns() - s) / 1e6)
            outputs.append(out)
        wall = time.perf_counter() - t0
        if not self.time_requests_with_partitions:
            k = partition_runs if partition_runs is not None else min(len(requests), 5)
            for i in range(k):
                _, times = self.run_timed(requests[i % len(requests)])
                for key, v in times.items():
                    ptimes[key].append(v)
        m = summarize(self.name, lat, wall, self.partitions, ptimes,
                      extra={"compile_s": self.compiled_s, "warmup": warmup, **self.describe()})
        return RunResult(outputs=outputs, measurement=m, errors=[None] * len(outputs))

    def describe(self) -> dict[str, Any]:
        return {}


class HybridExecutor(_Executor):
    """Partitions compiled on their own targets, run in dependency order (see module docstring)."""

    name = "hybrid"

    def __init__(self, mat, *, parallel: bool | None = None):
        super().__init__(mat)
        parts = self.partitions
        producer = {t: p.index for p in parts for t in p.outputs}
        self.deps: list[list[int]] = [sorted({producer[t] for t in p.inputs if t in producer}) for p in parts]
        self.succs: list[list[int]] = [[] for _ in parts]
        for i, ds in enumerate(self.deps):
            for d in ds:
                self.succs[d].append(i)

        specs = {t: TargetSpec.parse(t) for t in dict.fromkeys(p.target for p in parts)}
        self.cores = core_sets(specs.values())
        #: target -> its worker: targets that share a core share a worker (never run at once)
        self.group_of = {t: g for g, names in enumerate(conflict_groups(self.cores)) for t in names}
        anc = _reachability(len(parts), self.deps)
        self.has_parallelism = any(
            self.group_of[parts[i].target] != self.group_of[parts[j].target] and i not in anc[j] and j not in anc[i]
            for i in range(len(parts)) for j in range(i + 1, len(parts))
        )
        #: a worker that ran a pinned target's partition is re-pinned to every core for an unpinned one
        self._any_pinned = any(s.cores for s in specs.values())
        self.parallel = (self.has_parallelism or self._any_pinned) if parallel is None else bool(parallel)
        self.compiled: dict[str, Any] = {}
        self.pools: dict[str, cf.ThreadPoolExecutor] = {}
        self._targets: dict[str, Any] = {}

    def describe(self) -> dict[str, Any]:
        return {"parallel": self.parallel, "has_parallelism": self.has_parallelism}

    def _compile_one(self, p) -> Any:
        try:
            target = make_target(p.target)
            # one partition: nothing else runs in this process, so its runtime may keep its threads hot
            compile_fn = target.compile_alone if len(self.partitions) == 1 else target.compile
            return compile_fn(self.mat.submodels[p.id])
        except PlacerError as exc:
            raise PartitionError(f"partition {p.id} (stage {p.stage}) on {p.target}: {exc}", p.id, p.target,
                                 p.stage) from exc

    def compile(self) -> None:
        if self.compiled_s is not None:
            return
        t0 = time.perf_counter()
        if self.parallel:
            for g in sorted(set(self.group_of.values())):
                self.pools[g] = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"placer-cores{g}")
            for t in dict.fromkeys(p.target for p in self.partitions):
                self._targets[t] = make_target(t)
            futs = {p.id: self._pool(p).submit(self._pinned, p, self._compile_one, p) for p in self.partitions}
            cf.wait(futs.values())  # every session built before the first error is raised: close() frees them
            for pid, f in futs.items():
                if f.exception() is None:
                    self.compiled[pid] = f.result()
            for f in futs.values():
                if f.exception() is not None:
                    raise f.exception()
        else:
            for p in self.partitions:
                self.compiled[p.id] = self._compile_one(p)
        #: the model's outputs that a partition returns as views of its runtime's buffers
        self._shared_outputs = {t for p in self.partitions
                                if getattr(self.compiled[p.id], "shares_outputs", False)
                                for t in p.outputs if t in self.output_names}
        self.compiled_s = time.perf_counter() - t0

    def _pool(self, p) -> cf.ThreadPoolExecutor:
        return self.pools[self.group_of[p.target]]

    def _pinned(self, p, fn, *args):
        """Run ``fn(*args)`` in a worker pinned to ``p``'s target cores (a worker serves every
        target of its group; their sessions' threads inherit the pinning they were built with)."""
        cores = self.cores.get(p.target)
        if self._targets[p.target].spec.cores and cores:
            os.sched_setaffinity(0, set(cores))
        elif self._any_pinned:  # an unpinned target in a worker that may have been pinned before (an
            # unpinned target on every core shares its worker with the pinned ones: one pool, one thread)
            os.sched_setaffinity(0, set(_ALL_CORES))
        return fn(*args)

    def _run_part(self, p, feeds: Mapping[str, np.ndarray]):
        s = time.perf_counter_ns()
        try:
            # a partition's outputs are read by later partitions of the same request, before it runs
            # again: views of its runtime's buffers will do (run_timed copies the model's outputs)
            c = self.compiled[p.id]
            out = c.run_shared(feeds) if hasattr(c, "run_shared") else c.run(feeds)  # a plug-in may lack it
        except PlacerError as exc:
            raise PartitionError(f"partition {p.id} (stage {p.stage}) on {p.target} failed: {exc}",
                                 p.id, p.target, p.stage) from exc
        except Exception as exc:
            raise PartitionError(
                f"partition {p.id} (stage {p.stage}) on {p.target} failed: "
                f"{type(exc).__name__}: {_first(exc)}",
                p.id, p.target, p.stage) from exc
        return out, (time.perf_counter_ns() - s) / 1e6

    def run_timed(self, feeds: Mapping[str, np.ndarray], *, share_outputs: bool = False
                  ) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Run one request: ``(outputs, {partition: ms})``. ``share_outputs``: the model's outputs may
        be views of a runtime's buffers, valid until the next request (for a caller done with them
        by then, e.g. a timed run; OpenVINO's own ``share_outputs``); otherwise the caller owns them."""
        if self.compiled_s is None:
            self.compile()
        env: dict[str, np.ndarray] = dict(feeds)
        times: dict[str, float] = {}
        parts = self.partitions
        if not self.parallel:
            for p in parts:
                out, dt = self._run_part(p, {t: env[t] for t in p.inputs})
                env.update(out)
                times[p.id] = dt
        else:
            waiting = [len(d) for d in self.deps]
            running: dict[cf.Future, Any] = {}

            def submit(i: int) -> None:
                p = parts[i]
                running[self._pool(p).submit(self._pinned, p, self._run_part, p, {t: env[t] for t in p.inputs})] = p

            for i in range(len(parts)):
                if waiting[i] == 0:
                    submit(i)
            while running:
                done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for f in done:
                    p = running.pop(f)
                    try:
                        out, dt = f.result()
                    except BaseException:
                        cf.wait(running)  # let partitions in flight finish before reporting
                        raise
                    env.update(out)
                    times[p.id] = dt
                    for j in self.succs[p.index]:
                        waiting[j] -= 1
                        if waiting[j] == 0:
                            submit(j)
        if share_outputs:
            return {t: env[t] for t in self.output_names}, times
        return {t: env[t].copy() if t in self._shared_outputs else env[t] for t in self.output_names}, times

    def run(self, feeds: Mapping[str, np.ndarray], *, share_outputs: bool = False) -> dict[str, np.ndarray]:
        return self.run_timed(feeds, share_outputs=share_outputs)[0]

    def close(self) -> None:
        for c in self.compiled.values():
            try:
                c.close()
            except Exception:  # pragma: no cover - best effort
                pass
        self.compiled.clear()
        for pool in self.pools.values():
            pool.shutdown(wait=True)
        self.pools.clear()
        self.compiled_s = None


class RelaxExecutor(_Executor):
    """The Relax module compiled by tvm.compile and run by relax.VirtualMachine (see module docstring)."""

    name = "relax"
    time_requests_with_partitions = False

    def __init__(self, mat, *, compiled: bool = False, trust: bool = False):
        super().__init__(mat)
        self.program = None
        self.rc = None
        self.use_compiled = bool(compiled)
        self.trust = bool(trust)  # load a compiled module this machine did not make (native code!)

    def compile(self) -> None:
        if self.compiled_s is not None:
            return
        t0 = time.perf_counter()
        if self.use_compiled:  # the exported module.so of the plan directory, checked against compiled.json
            import tempfile

            path, data = self.mat.compiled_module(trust=self.trust)  # checked before any TVM work
            self.program = self.mat.relax_program()
            with tempfile.TemporaryDirectory(prefix="placer-module-") as tmp:  # the checked bytes, privately
                copy = Path(tmp) / path.name
                copy.write_bytes(data)
                self.rc = load_compiled(self.program, copy, name=path)
        else:
            self.program = self.mat.relax_program()
            self.rc = self.program.compile()
        self.rc.build_sessions()
        self.compiled_s = time.perf_counter() - t0

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.rc is None:
            self.compile()
        try:
            return self.rc.run(feeds)
        except Exception as exc:
            bad = self.rc.failed_callout()
            if bad is not None:
                callout, cause = bad
                p = self.mat.partition(callout.ext.partition)
                raise PartitionError(
                    f"partition {p.id} (stage {p.stage}) on {p.target} failed in the Relax VM: "
                    f"{type(exc).__name__}: {_first(exc)}", p.id, p.target, p.stage) from cause
            raise PartitionError(f"relax executor failed: {type(exc).__name__}: {_first(exc)}") from exc

    def run_timed(self, feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        if self.rc is None:
            self.compile()
        return self.rc.run_timed(feeds)

    def describe(self) -> dict[str, Any]:
        return {"vdevice": self.program.vdevice if self.program else ""}

    def close(self) -> None:
        if self.rc is not None:
            self.rc.close()
        self.rc = None
        self.compiled_s = None


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


EXECUTORS = {"hybrid": HybridExecutor, "relax": RelaxExecutor}


def make_executor(mat, executor: str = "hybrid", **kw) -> _Executor:
    """``"hybrid"`` or ``"relax"`` (the pipeline executor: :class:`placer.run.pipeline.PipelineExecutor`)."""
    if executor not in EXECUTORS:
        raise PlacerError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    return EXECUTORS[executor](mat, **kw)
