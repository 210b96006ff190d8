"""A one-target plan (OpenVINO bf16, both cores) in the bench's process ("in") and in a process of its own ("own"), against OpenVINO's default and LATENCY-bf16 yardsticks, in the same interleaved rounds (session 50's hf-distilbert read 0.901x / 0.862x).

    python experiments/report_s51/probes/own_process.py zoo:hf-distilbert [ROUNDS]
"""
import sys

from placer import zoo
from placer.graph import build_graph
from placer.materialize import materialize
from placer.run.bench import PlanBench
from placer.run.yardsticks import YardstickSet

name = sys.argv[1]; rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 12
model = zoo.load_model(name)
graph = build_graph(model, source=name)
feeds = [zoo.random_inputs(model, seed=s) for s in range(4)]
t = "openvino-bf16:t2"
with PlanBench(feeds, rounds=rounds, per_round=5) as bench, YardstickSet(graph.model, feeds, ("ov-default", "ov-latency-bf16")) as ys:
    mat = materialize(graph, {op.id: t for op in graph.ops})
    bench.add("in", mat)
    y = ys.add_plan("own", mat); assert y.ok, y.error
    bench.add_yardstick(y)
    for k in ("ov-default", "ov-latency-bf16"):
        assert ys[k].ok, (k, ys[k].error)
        bench.add_yardstick(ys[k])
    keys = list(bench.candidates)
    print(keys)
    stats = bench.measure(keys, rounds=rounds)
    for k in keys:
        base = next(k2 for k2 in keys if "ov-default" in k2)
        print(f"{k:28s} {stats[k].median_ms:7.3f} ms p10 {stats[k].p10_ms:7.3f} p90 {stats[k].p90_ms:7.3f}  x ov-default {bench.paired_ratio(base, k):.3f}")
