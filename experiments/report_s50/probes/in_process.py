"""Does a plan measured in the bench's process (beside the other candidates' compiled runtimes) run
slower than the same plan in a process of its own (as `placer run PLAN_DIR` deploys it, and as the
profile's workers time it)? One-target plans, in-process and own-process in the same interleaved
rounds; with --alone, the bench process holds only the plans under test.

    python experiments/report_s50/probes/in_process.py [MODEL] [--alone]
"""
import sys

from placer import zoo
from placer.graph import build_graph
from placer.materialize import materialize
from placer.run.bench import PlanBench
from placer.run.yardsticks import YardstickSet

args = [a for a in sys.argv[1:] if not a.startswith("--")]
name = args[0] if args else "zoo:squeezenet"
alone = "--alone" in sys.argv
under_test = ["openvino-bf16:t2", "onnxruntime:t2", "openvino:t2", "openvino-bf16:t1"]
bystanders = [] if alone else ["onnxruntime:t1", "openvino:t1"]
model = zoo.load_model(name)
graph = build_graph(model, source=name)
feeds = [zoo.random_inputs(model, seed=s) for s in range(4)]
with PlanBench(feeds, rounds=8, per_round=5) as bench, YardstickSet(model, feeds, ()) as ys:
    for t in under_test + bystanders:
        mat = materialize(graph, {op.id: t for op in graph.ops})
        bench.add(f"in:{t}", mat)
        if t in under_test:
            y = ys.add_plan(f"own:{t}", mat)
            assert y.ok, y.error
            bench.add_yardstick(y)
    keys = list(bench.candidates)
    stats = bench.measure(keys, rounds=8)
    print(f"{name} ({'alone' if alone else 'with bystanders ' + ','.join(bystanders)}):")
    for t in under_test:
        i, o = f"in:{t}", f"own:{t}"
        print(f"  {t:20s} in-process {stats[i].median_ms:7.3f} ms  own process {stats[o].median_ms:7.3f} ms  "
              f"in/own (round by round) {bench.paired_ratio(i, o):.3f}")
