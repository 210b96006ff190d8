"""placer's OpenVINO configuration against compile_model(m, "CPU") and the LATENCY-bf16 hint, and the hybrid executor, in one process, interleaved rounds (the properties OpenVINO resolves are printed).

    python experiments/report_s51/probes/ov_config.py zoo:hf-distilbert [ROUNDS]
"""
import statistics
import sys
import time

import openvino as ov

from placer import zoo
from placer.devices.openvino_target import OvCompiled
from placer.graph import build_graph
from placer.materialize import materialize

name = sys.argv[1]
model = zoo.load_model(name)
graph = build_graph(model, source=name)
feeds = [zoo.random_inputs(model, seed=s) for s in range(4)]
core = ov.Core()
mb = graph.model.SerializeToString()
cfgs = {
 "default": {},
 "placer": {"INFERENCE_NUM_THREADS": 2, "INFERENCE_PRECISION_HINT": "bf16", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1},
 "lat-bf16": {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "bf16"},
}
runs = {}
for k, c in cfgs.items():
    cm = core.compile_model(core.read_model(mb), "CPU", c)
    print(k, {p: str(cm.get_property(p)) for p in ("NUM_STREAMS","INFERENCE_NUM_THREADS","ENABLE_CPU_PINNING","SCHEDULING_CORE_TYPE","ENABLE_HYPER_THREADING","PERFORMANCE_HINT","INFERENCE_PRECISION_HINT")})
    ins = [i.name for i in graph.model.graph.input]
    runs[k] = OvCompiled(cm, ins, range(len(cm.outputs)))
# materialized plan, hybrid executor in-process
from placer.run.executors import make_executor

mat = materialize(graph, {op.id: "openvino-bf16:t2" for op in graph.ops})
ex = make_executor(mat, "hybrid"); ex.compile()
fns = {k: (lambda f, r=r: r.run_shared(f)) for k, r in runs.items()}
fns["hybrid"] = lambda f: ex.run(f, share_outputs=True)
for f in fns.values():
    for i in range(5): f(feeds[i % 4])
times = {k: [] for k in fns}
for rnd in range(int(sys.argv[2]) if len(sys.argv) > 2 else 15):
    for k, f in fns.items():
        ts = []
        for i in range(8):
            t0 = time.perf_counter(); f(feeds[i % 4]); ts.append(time.perf_counter() - t0)
        times[k].append(statistics.median(ts) * 1e3)
base = times["default"]
for k, v in times.items():
    print(f"{k:10s} median {statistics.median(v):7.3f} ms  paired x default {statistics.median([b / x for b, x in zip(base, v)]):.3f}")
