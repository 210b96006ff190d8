"""Throughput on all cores: placer's replicas (pipeline executor, one pinned 1-thread session per core)
against one 1-thread ONNX Runtime session per core in plain threads (the yardstick's loop), pinned and
not, in interleaved rounds in one process (session 54, issue 14).

    PYTHONPATH=. python experiments/report_s54/probes/replicas_vs_sessions.py [MODEL] [ROUNDS]
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import onnxruntime as ort

from placer.graph.inputs import random_inputs
from placer.materialize import materialize
from placer.run.pipeline import PipelineExecutor, discard_outputs
from placer.zoo import load_graph, load_model

MODEL = sys.argv[1] if len(sys.argv) > 1 else "zoo:squeezenet"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
CORES = sorted(os.sched_getaffinity(0))


def sessions_loop(model_bytes, pin: bool, options):
    sess = [ort.InferenceSession(model_bytes, options(), providers=["CPUExecutionProvider"]) for _ in CORES]

    def run(feeds, n):
        counter = iter(range(n))
        lock = threading.Lock()

        def worker(s, core):
            if pin:
                os.sched_setaffinity(0, {core})
            try:
                while True:
                    with lock:
                        i = next(counter, None)
                    if i is None:
                        return
                    s.run(None, feeds[i % len(feeds)])
            finally:
                if pin:
                    os.sched_setaffinity(0, set(CORES))

        th = [threading.Thread(target=worker, args=(s, c)) for s, c in zip(sess, CORES)]
        t0 = time.perf_counter()
        for t in th:
            t.start()
        for t in th:
            t.join()
        return n / (time.perf_counter() - t0)
    return run


def user_options():
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return so


def placer_options():
    from placer.devices.onnxruntime_target import session_options
    return session_options(1)


def one_at_a_time(model_bytes):
    s = ort.InferenceSession(model_bytes, user_options(), providers=["CPUExecutionProvider"])

    def run(feeds, n):
        n = max(1, n // len(CORES))
        t0 = time.perf_counter()
        for i in range(n):
            s.run(None, feeds[i % len(feeds)])
        return len(CORES) * n / (time.perf_counter() - t0)
    return run


def main():
    model = load_model(MODEL)
    graph = load_graph(MODEL)
    feeds = [random_inputs(model, seed=i) for i in range(4)]
    mb = model.SerializeToString()
    mat = materialize(graph, {op.id: "onnxruntime:t1" for op in graph.ops},
                      stage_of={op.id: 0 for op in graph.ops}, replicas={0: [[c] for c in CORES]})
    pe = PipelineExecutor(mat)
    pe.start()
    pe.run(feeds, warmup=4, consume=discard_outputs)

    def placer_run(feeds, n):
        res = pe.run([feeds[i % len(feeds)] for i in range(n)], warmup=0, consume=discard_outputs)
        res.raise_first()
        return n / res.measurement.wall_s

    loops = {
        "limit (2 x one at a time)": one_at_a_time(mb),
        "sessions, unpinned (yardstick)": sessions_loop(mb, False, user_options),
        "sessions, pinned": sessions_loop(mb, True, user_options),
        "sessions, placer options, pinned": sessions_loop(mb, True, placer_options),
        "placer replicas (pipeline executor)": placer_run,
    }
    # requests per round: about 1 s at the one-at-a-time rate
    rate = loops["limit (2 x one at a time)"](feeds, 20)
    n = max(40, int(rate))
    for f in loops.values():
        f(feeds, 8)
    rps = {k: [] for k in loops}
    names = list(loops)
    for r in range(ROUNDS):
        for k in (names if r % 2 == 0 else names[::-1]):
            rps[k].append(loops[k](feeds, n))
    lim = np.median(rps[names[0]])
    ref = np.median(rps["sessions, unpinned (yardstick)"])
    print(f"{MODEL}: {ROUNDS} interleaved rounds of {n} requests, cores {CORES}")
    for k in names:
        v = np.asarray(rps[k])
        print(f"  {k:40s} {np.median(v):8.1f} req/s  p10-p90 {np.percentile(v, 10):.1f}-{np.percentile(v, 90):.1f}"
              f"  x limit {np.median(v) / lim:.3f}  x yardstick {np.median(v) / ref:.3f}"
              f"  per-round ratio to yardstick median {np.median(v / np.asarray(rps['sessions, unpinned (yardstick)'])):.3f}")
    pe.close()


if __name__ == "__main__":
    main()
