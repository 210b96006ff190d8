"""Feasibility of tensor parallelism on two cores: a transformer layer's MLP (MatMul -> Gelu -> MatMul,
constant weights) split Megatron-style (the first weight by columns, the second by rows, the two
partial outputs added) over two 1-thread OpenVINO requests, each in a thread pinned to its own core,
against the whole block in one OpenVINO request on both cores (the LATENCY hint, as OpenVINO's
default runs it) and at one thread. Interleaved rounds: 15 rounds x 20 calls, medians; the ratio
whole-on-both-cores / this, round by round.

    SEQ=128 HID=768 FFN=3072 python experiments/report_s51/probes/tensor_parallel_mlp.py f32|bf16
"""
import os
import statistics
import sys
import threading
import time

import numpy as np
import openvino as ov
from onnx import TensorProto, helper, numpy_helper

prec = sys.argv[1] if len(sys.argv) > 1 else "bf16"
seq, hid, ffn = int(os.environ.get("SEQ", "128")), int(os.environ.get("HID", "768")), int(os.environ.get("FFN", "3072"))
rng = np.random.default_rng(0)
W1 = rng.standard_normal((hid, ffn), dtype=np.float32) * 0.02
W2 = rng.standard_normal((ffn, hid), dtype=np.float32) * 0.02
def mlp(w1, w2, name):
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Gelu", ["h"], ["g"], domain=""),
             helper.make_node("MatMul", ["g", "w2"], ["y"])]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, hid])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, hid])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
core = ov.Core()
def comp(m, threads, pin):
    cfg = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": prec, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
    if not pin: cfg["ENABLE_CPU_PINNING"] = False
    return core.compile_model(core.read_model(m.SerializeToString(), b""), "CPU", cfg)
whole = comp(mlp(W1, W2, "whole"), 2, True)
h = ffn // 2
halves = [mlp(W1[:, :h].copy(), W2[:h].copy(), "a"), mlp(W1[:, h:].copy(), W2[h:].copy(), "b")]
x = rng.standard_normal((seq, hid), dtype=np.float32)
rw = whole.create_infer_request()
def run_whole():
    rw.set_input_tensor(0, ov.Tensor(x, shared_memory=True)); rw.infer(share_outputs=True); return rw.get_output_tensor(0).data
# two workers, each pinned to its core, each with a 1-thread request
start = [threading.Event(), threading.Event()]; done = [threading.Event(), threading.Event()]
outs = [None, None]; stop = False
reqs = [None, None]
def worker(i):
    os.sched_setaffinity(0, {i})
    c = comp(halves[i], 1, False); reqs[i] = c.create_infer_request()
    done[i].set()
    while True:
        start[i].wait(); start[i].clear()
        if stop: return
        r = reqs[i]; r.set_input_tensor(0, ov.Tensor(x, shared_memory=True)); r.infer(share_outputs=True)
        outs[i] = r.get_output_tensor(0).data
        done[i].set()
ths = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(2)]
for t in ths: t.start()
for d in done: d.wait(); d.clear()
def run_split():
    for s in start: s.set()
    for d in done: d.wait(); d.clear()
    return outs[0] + outs[1]
# one request alone at 1 thread, for the per-core time
one = comp(mlp(W1, W2, "one"), 1, False).create_infer_request()
def run_one():
    one.set_input_tensor(0, ov.Tensor(x, shared_memory=True)); one.infer(share_outputs=True)
ref = run_whole().copy(); sp = run_split()
print("max abs diff split vs whole", float(np.abs(sp - ref).max()), "ref scale", float(np.abs(ref).max()))
fns = {"whole t2": run_whole, "split 2x t1": run_split, "whole t1": run_one}
for f in fns.values():
    for _ in range(20): f()
T = {k: [] for k in fns}
for rnd in range(15):
    for k, f in fns.items():
        ts = []
        for _ in range(20):
            t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
        T[k].append(statistics.median(ts) * 1e3)
b = T["whole t2"]
for k, v in T.items():
    print(f"{prec} seq {seq} {k:12s} {statistics.median(v):7.3f} ms   whole_t2/this {statistics.median([x/y for x, y in zip(b, v)]):.3f}")
