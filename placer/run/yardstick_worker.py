"""One yardstick runtime in its own process: what a user would run instead of placer.

Started by :class:`placer.run.yardsticks.YardstickBench` as
``python -m placer.run.yardstick_worker KIND MODEL.onnx FEEDS.npz``. It loads the model the way a
user would (see :data:`KINDS`), then answers JSON-line commands on stdin with JSON lines on stdout:

``{"cmd": "run", "n": K, "start": I[, "warm_ms": W]}``
    K requests, one after another, cycling the feeds from index I; replies ``{"ms": [...]}``, the
    wall time of each request (the runtime's call plus the numpy conversion a user pays). With W,
    untimed requests come first until W ms have passed (one at least).
``{"cmd": "throughput", "n": K}``
    K requests as fast as the yardstick can take them (its own concurrency: an async infer queue,
    N sessions in N threads); replies ``{"wall_s": s, "n": K}``.
``{"cmd": "outputs", "path": P}``
    the outputs of every feed, saved to ``P`` (npz, ``{feed}__{output}``); replies ``{"ok": true}``.
``{"cmd": "info"}``
    what the runtime reports of itself (threads, streams, precision); replies a dict.

Kind :data:`PLAN_KIND` loads a placer plan instead (``MODEL.onnx`` is then a PLAN_DIR), run by
the hybrid executor as ``placer run PLAN_DIR`` runs it; kind :data:`PIPELINE_PLAN_KIND` runs it by
the pipeline executor, as ``placer run PLAN_DIR --pipeline`` serves it: placer's result
deployed in a process of its own, measured exactly as the runtimes it is compared with
(docs/design.md, "A plan in a process of its own", "A throughput plan served in a process of its
own").

Each yardstick has a process of its own because runtimes at their defaults keep pool threads
spinning after a run: in one process they slow each other down (docs/design.md, "Measuring
yardsticks without contaminating them").
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, Callable

import numpy as np

from placer.devices.openvino_target import OvCompiled
from placer.errors import first_line

# A yardstick worker imports only its runtime: the plan kinds import the executors and ONNX where they
# load a plan (_plan), so the four latency yardsticks a tune starts do not pay 0.3 s each for them.

#: latency yardsticks: a runtime loaded with its defaults, and at its best latency settings
LATENCY_KINDS = ("ort-default", "ort-parallel", "ov-default", "ov-latency")
#: throughput yardsticks: the runtime's own way to serve many requests
THROUGHPUT_KINDS = ("ov-throughput", "ort-sessions")
#: a latency yardstick only where the CPU has bf16 (:func:`placer.run.yardsticks.latency_kinds`)
BF16_KINDS = ("ov-latency-bf16",)
#: a throughput yardstick only where the CPU has bf16, where OpenVINO's THROUGHPUT default computes in
#: bf16: the same hint pinned to f32 (:func:`placer.run.yardsticks.throughput_kinds`)
F32_THROUGHPUT_KINDS = ("ov-throughput-f32",)
KINDS = LATENCY_KINDS + BF16_KINDS + THROUGHPUT_KINDS + F32_THROUGHPUT_KINDS
#: not a yardstick: a placer plan (a PLAN_DIR) run by the hybrid executor in a process of its own
PLAN_KIND = "placer-plan"
#: not a yardstick: a placer plan run by the pipeline executor in a process of its own (one worker per
#: stage or replica), as ``placer run PLAN_DIR --pipeline`` serves it
PIPELINE_PLAN_KIND = "placer-plan-pipeline"

DESCRIPTIONS = {
    "ort-default": "ONNX Runtime, InferenceSession(path) with default options",
    "ort-parallel": "ONNX Runtime, execution_mode=ORT_PARALLEL",
    "ov-default": 'OpenVINO, compile_model(model, "CPU") with no config',
    "ov-latency": "OpenVINO, PERFORMANCE_HINT=LATENCY, INFERENCE_PRECISION_HINT=f32",
    "ov-latency-bf16": "OpenVINO, PERFORMANCE_HINT=LATENCY, INFERENCE_PRECISION_HINT=bf16 (CPUs with bf16)",
    "ov-throughput": "OpenVINO, PERFORMANCE_HINT=THROUGHPUT driven by an AsyncInferQueue",
    "ov-throughput-f32": "OpenVINO, PERFORMANCE_HINT=THROUGHPUT, INFERENCE_PRECISION_HINT=f32, driven by an "
                         "AsyncInferQueue (CPUs with bf16)",
    "ort-sessions": "ONNX Runtime, one 1-thread session per core, each in its own thread",
}


class _Runner:
    """``run_one(feeds)`` for latency; ``throughput(feed_list, n)`` for requests/s; ``warm(feed_list)``
    before the first command; ``close()`` before the process exits."""

    def __init__(self, run_one: Callable[[dict], list], info: dict[str, Any],
                 throughput: Callable[[list, int], float] | None = None, *,
                 warm: Callable[[list], None] | None = None, close: Callable[[], None] | None = None):
        self.run_one = run_one
        self.info = info
        self._throughput = throughput
        self._warm = warm
        self.close = close or (lambda: None)

    def warm(self, feeds: list[dict]) -> None:
        if self._warm is not None:
            self._warm(feeds)
            return
        for f in feeds[:2]:
            self.run_one(f)

    def throughput(self, feeds: list[dict], n: int) -> float:
        if self._throughput is not None:
            return self._throughput(feeds, n)
        t0 = time.perf_counter()
        for i in range(n):
            self.run_one(feeds[i % len(feeds)])
        return time.perf_counter() - t0


def _ort(model_path: str, kind: str) -> _Runner:
    import onnxruntime as ort

    if kind == "ort-sessions":
        return _ort_sessions(model_path)
    so = None
    if kind == "ort-parallel":
        so = ort.SessionOptions()
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    return _Runner(lambda feeds: sess.run(None, feeds),
                   {"runtime": f"onnxruntime {ort.__version__}", "options": "parallel" if so else "default"})


def _ort_sessions(model_path: str) -> _Runner:
    import onnxruntime as ort

    n_cores = len(os.sched_getaffinity(0))
    sessions = []
    for _ in range(n_cores):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sessions.append(ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"]))

    def throughput(feeds: list[dict], n: int) -> float:
        counter = iter(range(n))
        lock = threading.Lock()

        def worker(sess) -> None:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                sess.run(None, feeds[i % len(feeds)])

        threads = [threading.Thread(target=worker, args=(s,)) for s in sessions]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0

    return _Runner(lambda feeds: sessions[0].run(None, feeds),
                   {"runtime": f"onnxruntime {ort.__version__}", "sessions": n_cores, "threads_each": 1},
                   throughput)


def _ov(model_path: str, kind: str) -> _Runner:
    import openvino as ov

    core = ov.Core()
    config = {
        "ov-default": {},
        "ov-latency": {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"},
        "ov-latency-bf16": {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "bf16"},
        "ov-throughput": {"PERFORMANCE_HINT": "THROUGHPUT"},
        "ov-throughput-f32": {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_PRECISION_HINT": "f32"},
    }[kind]
    compiled = core.compile_model(model_path, "CPU", config)
    info = {"runtime": f"openvino {ov.__version__}", "config": config}
    for prop in ("PERFORMANCE_HINT", "INFERENCE_PRECISION_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS",
                 "OPTIMAL_NUMBER_OF_INFER_REQUESTS"):
        try:
            value = compiled.get_property(prop)
            # an element type prints as "<Type: 'bfloat16'>"; its short name is "bf16"
            info[prop] = value.get_type_name() if hasattr(value, "get_type_name") else str(value)
        except Exception:  # noqa: BLE001 - a property this version does not report
            pass
    # an input port may carry several tensor names (OpenVINO merges a Reshape's output into the
    # input of GPT-2's exported graph): feed it by whichever of them the request has
    ports = [p.get_names() for p in compiled.inputs]
    names: list[str] = []

    def _names(feeds: dict) -> list[str]:
        if not names:
            names.extend(next((n for n in sorted(ns) if n in feeds), next(iter(ns))) for ns in ports)
        return names

    # OpenVINO's fastest call, the one placer's target makes (OvCompiled.run_shared: inputs bound as
    # shared tensors, infer(share_outputs=True), views of the outputs); ``infer([...],
    # share_inputs=True, share_outputs=True)`` measured 5-7% slower on squeezenet and bert-tiny
    # (session 20), and a yardstick is not handicapped
    call: list[OvCompiled] = []

    def run_one(feeds: dict) -> list:
        if not call:
            call.append(OvCompiled(compiled, _names(feeds), range(len(compiled.outputs))))
        return list(call[0].run_shared(feeds).values())

    throughput = None
    if kind.startswith("ov-throughput"):
        n_req = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        queue = ov.AsyncInferQueue(compiled, n_req)

        def throughput(feeds: list[dict], n: int) -> float:
            inputs = [[f[nm] for nm in _names(f)] for f in feeds]
            t0 = time.perf_counter()
            for i in range(n):
                queue.start_async(inputs[i % len(inputs)], share_inputs=True)
            queue.wait_all()
            return time.perf_counter() - t0

        info["infer_requests"] = n_req
    return _Runner(run_one, info, throughput)


def _plan(plan_dir: str, pipeline: bool = False) -> _Runner:
    from placer.materialize import load_plan_dir
    from placer.run.executors import make_executor

    mat = load_plan_dir(plan_dir)
    info = {"partitions": len(mat.partitions), "targets": sorted({p.target for p in mat.partitions}),
            "cores": sorted(os.sched_getaffinity(0))}
    if pipeline:
        return _pipelined_plan(mat, info)
    ex = make_executor(mat, "hybrid")
    ex.compile()
    names = list(ex.output_names)

    def run_one(feeds: dict) -> list:
        # views of a runtime's buffers, as the OpenVINO yardsticks return theirs (share_outputs)
        out = ex.run(feeds, share_outputs=True)
        return [out[n] for n in names]

    return _Runner(run_one, {"runtime": "placer hybrid executor", **info})


def _pipelined_plan(mat, info: dict[str, Any]) -> _Runner:
    """The plan run by the pipeline executor, one worker per stage or replica, as ``placer run PLAN_DIR
    --pipeline`` runs it (a throughput tune's plan: replicas, or stages; any plan runs so); a
    throughput batch drops each request's outputs where the last stage produces them (``consume``),
    as an OpenVINO ``AsyncInferQueue`` callback leaves them. Only this executor is built: the process
    holds what a server of the plan holds. The warm-up sends every worker its first requests."""
    from placer.run.pipeline import PipelineExecutor, discard_outputs

    pe = PipelineExecutor(mat)
    pe.start()
    names = list(pe.output_names)

    def warm(feeds: list[dict]) -> None:
        # the executor's warm-up: two requests per worker of the widest stage, so every replica ran
        pe.run(feeds, warmup=2, consume=discard_outputs).raise_first()

    def run_one(feeds: dict) -> list:
        res = pe.run([feeds], warmup=0)
        res.raise_first()
        return [res.outputs[0][n] for n in names]

    def throughput(feeds: list[dict], n: int) -> float:
        res = pe.run([feeds[i % len(feeds)] for i in range(n)], warmup=0, consume=discard_outputs)
        res.raise_first()
        return res.measurement.wall_s

    workers = [len(s.workers) for s in mat.stage_config.stages]
    return _Runner(run_one, {"runtime": "placer pipeline executor", "workers": workers, **info}, throughput,
                   warm=warm, close=pe.close)


def load(kind: str, model_path: str) -> _Runner:
    if kind in (PLAN_KIND, PIPELINE_PLAN_KIND):
        return _plan(model_path, pipeline=kind == PIPELINE_PLAN_KIND)
    if kind not in KINDS:
        raise ValueError(f"unknown yardstick {kind!r}; known: {', '.join(KINDS)}")
    return _ort(model_path, kind) if kind.startswith("ort") else _ov(model_path, kind)


def _outputs_of(runner: _Runner, feeds: list[dict]) -> dict[str, np.ndarray]:
    out = {}
    for i, f in enumerate(feeds):
        for j, v in enumerate(runner.run_one(f)):
            out[f"{i}__{j}"] = np.array(v)
    return out


#: the environment variable through which a worker learns its parent's pid
PARENT_ENV = "PLACER_YARDSTICK_PARENT"
#: the member of the worker's feeds file that holds the number of requests (the others are
#: ``{request}__{input name}``; a model with no inputs has none of those)
N_FEEDS_KEY = "n_requests"


def _die_with_parent() -> None:
    """A worker is frozen (SIGSTOP) between its batches, so it cannot notice that its parent is gone:
    a ``placer tune`` killed with SIGKILL (or by the OOM killer) left its yardsticks stopped forever.
    Ask the kernel to SIGKILL this process when its parent dies (Linux ``PR_SET_PDEATHSIG``;
    elsewhere nothing), and exit if the parent is already gone."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        return
    parent = os.environ.get(PARENT_ENV)
    if parent and parent.isdigit() and os.getppid() != int(parent):
        os._exit(1)  # the parent died before prctl took effect


def main(argv: list[str]) -> int:
    _die_with_parent()
    kind, model_path, feeds_path = argv
    with np.load(feeds_path, allow_pickle=False) as z:
        n_feeds = int(z[N_FEEDS_KEY])
        feeds: list[dict[str, np.ndarray]] = [{} for _ in range(n_feeds)]
        for k in z.files:
            if k == N_FEEDS_KEY:
                continue
            i, name = k.split("__", 1)
            feeds[int(i)][name] = z[k]
    out = sys.stdout
    runner = None
    try:
        runner = load(kind, model_path)
        runner.warm(feeds)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which marks the yardstick failed
        out.write(json.dumps({"error": f"{type(exc).__name__}: {first_line(exc, 300)}"}) + "\n")
        out.flush()
        if runner is not None:
            runner.close()
        return 1
    out.write(json.dumps({"ready": True, "info": runner.info}) + "\n")
    out.flush()
    try:
        return _serve(runner, feeds, out)
    finally:
        runner.close()  # a pipeline's workers stopped before the runtimes are torn down at exit


def _serve(runner: _Runner, feeds: list[dict[str, np.ndarray]], out) -> int:
    """Answer the parent's commands (module docstring) until ``quit`` or the end of stdin."""
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg.get("cmd")
        if cmd == "run":
            ms = []
            start = int(msg.get("start", 0))
            warm_ms = float(msg.get("warm_ms", 0.0))
            if warm_ms > 0:  # untimed until the runtime has run for warm_ms: its pools awake, caches warm
                warm_until = time.perf_counter_ns() + warm_ms * 1e6
                runner.run_one(feeds[start % len(feeds)])
                start += 1
                while time.perf_counter_ns() < warm_until:
                    runner.run_one(feeds[start % len(feeds)])
                    start += 1
            for i in range(int(msg["n"])):
                f = feeds[(start + i) % len(feeds)]
                t0 = time.perf_counter_ns()
                runner.run_one(f)
                ms.append((time.perf_counter_ns() - t0) / 1e6)
            reply: dict[str, Any] = {"ms": ms}
        elif cmd == "throughput":
            n = int(msg["n"])
            reply = {"wall_s": runner.throughput(feeds, n), "n": n}
        elif cmd == "outputs":
            np.savez(msg["path"], **_outputs_of(runner, feeds))
            reply = {"ok": True}
        elif cmd == "info":
            reply = dict(runner.info)
        elif cmd == "quit":
            return 0
        else:
            reply = {"error": f"unknown command {cmd!r}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    from placer.process_exit import exit_process

    exit_process(main(sys.argv[1:]))
