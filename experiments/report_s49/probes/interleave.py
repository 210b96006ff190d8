"""Is a runtime slower when its requests alternate with other runtimes' (the bench's turns) than in a loop
of its own (the profile's windows)? Same process, same compiled models; rounds alternate the two regimes."""
import statistics
import sys
import time

from placer import zoo
from placer.devices import make_targets

name = sys.argv[1] if len(sys.argv) > 1 else "zoo:squeezenet"
names = sys.argv[2].split(",") if len(sys.argv) > 2 else ["openvino-bf16:t1", "onnxruntime:t1", "openvino:t1"]
model = zoo.load_model(name)
feeds = zoo.random_inputs(model)
targets = make_targets(names)
compiled = {t.name: t.compile(model) for t in targets}


def timed(cm, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        cm.run(feeds)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


for cm in compiled.values():
    timed(cm, 20)
alone = {k: [] for k in compiled}
turns = {k: [] for k in compiled}
for r in range(8):
    for k, cm in compiled.items():  # loop of its own: 30 requests, the last 20 kept
        alone[k].append(statistics.median(timed(cm, 30)[10:]))
    for k, cm in compiled.items():  # turns: 5 ms warm-up then 4 timed, the others' turns in between
        t_end = time.perf_counter() + 0.005
        while time.perf_counter() < t_end:
            cm.run(feeds)
        turns[k].append(statistics.median(timed(cm, 4)))
for k in compiled:
    a, t = statistics.median(alone[k]), statistics.median(turns[k])
    ratios = sorted(tt / aa for tt, aa in zip(turns[k], alone[k]))
    print(f"{name} {k}: loop {a:.3f} ms, turns {t:.3f} ms, turn/loop per round median "
          f"{statistics.median(ratios):.2f} (min {ratios[0]:.2f}, max {ratios[-1]:.2f})")
