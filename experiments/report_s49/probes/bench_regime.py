"""Does the bench's regime (PlanBench: hybrid executor, core probes, yardstick processes idle beside it)
slow a plan against a loop of the same compiled runtime? squeezenet, one plan per target."""
import statistics
import sys
import time

from placer import zoo
from placer.devices import make_targets
from placer.graph import build_graph
from placer.materialize import materialize
from placer.run.bench import PlanBench
from placer.run.yardsticks import YardstickSet

name = "zoo:squeezenet"
names = ["openvino-bf16:t2", "onnxruntime:t2", "openvino-bf16:t1"]
with_yardsticks = "--yardsticks" in sys.argv
model = zoo.load_model(name)
graph = build_graph(model, source=name)
feeds = [zoo.random_inputs(model, seed=s) for s in range(4)]
targets = make_targets(names)
compiled = {t.name: t.compile(model) for t in targets}


def loop_ms(cm, n=30):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        cm.run(feeds[0])
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out[10:])


with PlanBench(feeds, rounds=3, per_round=5) as bench:
    for t in targets:
        bench.add(t.name, materialize(graph, {op.id: t.name for op in graph.ops}))
    ys = YardstickSet(model, feeds, ["ov-latency-bf16", "ort-default"]) if with_yardsticks else None
    try:
        if ys is not None:
            for y in ys.all.values():
                bench.add_yardstick(y)
        keys = list(bench.candidates)
        for r in range(3):
            loops = {k: loop_ms(cm) for k, cm in compiled.items()}
            stats = bench.measure(keys, rounds=2)
            print(f"round {r}: " + ", ".join(f"{k} loop {loops[k]:.2f} bench {stats[k].median_ms:.2f}"
                                              for k in compiled)
                  + "".join(f", {k} {stats[k].median_ms:.2f}" for k in keys if k not in compiled), flush=True)
    finally:
        if ys is not None:
            ys.close()
