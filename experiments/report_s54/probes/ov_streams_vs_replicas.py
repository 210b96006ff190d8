"""OpenVINO's THROUGHPUT hint (streams, an AsyncInferQueue) against placer's OpenVINO replicas (one
1-thread compiled model per core, each in a pinned worker of the pipeline executor), and variants in
between, in interleaved rounds in one process (session 54, issue 14).

    PYTHONPATH=. python experiments/report_s54/probes/ov_streams_vs_replicas.py [MODEL] [ROUNDS]
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import openvino as ov

from placer.graph.inputs import random_inputs
from placer.materialize import materialize
from placer.run.pipeline import PipelineExecutor, discard_outputs
from placer.zoo import load_graph, load_model

MODEL = sys.argv[1] if len(sys.argv) > 1 else "zoo:inception_v1"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
CORES = sorted(os.sched_getaffinity(0))
core = ov.Core()


def async_queue(path, config):
    compiled = core.compile_model(path, "CPU", config)
    n_req = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
    q = ov.AsyncInferQueue(compiled, n_req)
    info = {p: str(compiled.get_property(p)) for p in ("NUM_STREAMS", "INFERENCE_NUM_THREADS", "OPTIMAL_NUMBER_OF_INFER_REQUESTS")}

    def run(feeds, n):
        inputs = [list(f.values()) for f in feeds]
        t0 = time.perf_counter()
        for i in range(n):
            q.start_async(inputs[i % len(inputs)], share_inputs=True)
        q.wait_all()
        return n / (time.perf_counter() - t0)
    return run, info


def threads_over(compiled_list, pin):
    reqs = [c.create_infer_request() for c in compiled_list]

    def run(feeds, n):
        counter = iter(range(n))
        lock = threading.Lock()
        inputs = [list(f.values()) for f in feeds]

        def worker(r, core_id):
            if pin:
                os.sched_setaffinity(0, {core_id})
            try:
                while True:
                    with lock:
                        i = next(counter, None)
                    if i is None:
                        return
                    r.infer(inputs[i % len(inputs)], share_inputs=True, share_outputs=True)
            finally:
                if pin:
                    os.sched_setaffinity(0, set(CORES))

        th = [threading.Thread(target=worker, args=(r, c)) for r, c in zip(reqs, CORES)]
        t0 = time.perf_counter()
        for t in th:
            t.start()
        for t in th:
            t.join()
        return n / (time.perf_counter() - t0)
    return run


def main():
    model = load_model(MODEL)
    graph = load_graph(MODEL)
    feeds = [random_inputs(model, seed=i) for i in range(4)]
    path = "/dev/shm/placer_probe_model.onnx" if os.path.isdir("/dev/shm") else "placer_probe_model.onnx"
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    loops, infos = {}, {}
    loops["ov THROUGHPUT f32, AsyncInferQueue"], infos["tp"] = async_queue(path, {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_PRECISION_HINT": "f32"})
    tp = core.compile_model(path, "CPU", {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_PRECISION_HINT": "f32"})
    loops["ov THROUGHPUT f32, one request per thread"] = threads_over([tp, tp], pin=False)
    lat1 = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32",
            "ENABLE_CPU_PINNING": False}
    loops["ov LATENCY 1-thread x2 compiled, pinned threads"] = threads_over(
        [core.compile_model(path, "CPU", lat1) for _ in CORES], pin=True)
    tp1 = {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32",
           "ENABLE_CPU_PINNING": False}
    loops["ov THROUGHPUT 1-thread 1-stream x2 compiled, pinned"] = threads_over(
        [core.compile_model(path, "CPU", tp1) for _ in CORES], pin=True)
    mat = materialize(graph, {op.id: "openvino:t1" for op in graph.ops},
                      stage_of={op.id: 0 for op in graph.ops}, replicas={0: [[c] for c in CORES]})
    pe = PipelineExecutor(mat)
    pe.start()
    pe.run(feeds, warmup=4, consume=discard_outputs)

    def placer_run(feeds, n):
        res = pe.run([feeds[i % len(feeds)] for i in range(n)], warmup=0, consume=discard_outputs)
        res.raise_first()
        return n / res.measurement.wall_s
    loops["placer openvino:t1 replicas"] = placer_run
    rate = loops["ov THROUGHPUT f32, AsyncInferQueue"](feeds, 8)
    n = max(16, int(rate))
    for f in loops.values():
        f(feeds, 8)
    names = list(loops)
    rps = {k: [] for k in names}
    for r in range(ROUNDS):
        for k in (names if r % 2 == 0 else names[::-1]):
            rps[k].append(loops[k](feeds, n))
    ref = np.asarray(rps[names[0]])
    print(f"{MODEL}: {ROUNDS} interleaved rounds of {n} requests, cores {CORES}; THROUGHPUT f32 compiled as {infos['tp']}")
    for k in names:
        v = np.asarray(rps[k])
        print(f"  {k:52s} {np.median(v):8.1f} req/s  p10-p90 {np.percentile(v, 10):.1f}-{np.percentile(v, 90):.1f}"
              f"  x THROUGHPUT f32 (median of per-round ratios) {np.median(v / ref):.3f}")
    pe.close()


if __name__ == "__main__":
    main()
