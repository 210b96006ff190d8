"""The profile's whole-model timing against the bench's turns, at the same moments (issue 15).

A single-target plan is predicted from the store's whole-model row and measured by the bench
(:class:`placer.run.bench.PlanBench`: turns of a few requests per candidate, the first left out).
When the two disagree, is it the way each times, or the host's pace between the profile and the
bench? This script takes the pace out: for each target it alternates, in one process, the
profile's own timing of the model (``Target.compile_alone`` + ``time_compiled``, as the profiling
worker does) with two bench rounds of the same model as a one-partition plan, ``--alternations``
times, and reports the bench's median over the profile's, alternation by alternation (the median
and range of those ratios), and the bench's samples by position in its turn.

    python -m experiments.profile_vs_bench --models squeezenet,bert-tiny,resnet50 \\
        --targets onnxruntime:t1,openvino:t1,onnxruntime:t2,openvino:t2 --out runs/pvb.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def compare_model(name: str, target_names: list[str], alternations: int, per_round: int) -> list[dict]:
    from placer import zoo
    from placer.devices import make_targets
    from placer.graph import build_graph, load_model
    from placer.materialize import materialize
    from placer.profile.timing import TimingConfig, random_feeds, time_compiled
    from placer.run.bench import PlanBench, settle_own_threads
    from placer.run.numerics import load_inputs

    graph = build_graph(load_model(zoo.resolve(f"zoo:{name}")))
    targets = make_targets(target_names)
    profile_feeds = random_feeds(graph.model, 0)
    alone = {t.name: t.compile_alone(graph.model) for t in targets}
    profiled: dict[str, list[float]] = {t.name: [] for t in targets}
    benched: dict[str, list[float]] = {t.name: [] for t in targets}
    turns: dict[str, list[list[float]]] = {t.name: [] for t in targets}
    with PlanBench(load_inputs("seed:0", graph, 4), rounds=1, per_round=per_round) as bench:
        for t in targets:
            bench.add(t.name, materialize(graph, {op.id: t.name for op in graph.ops}))
        for _ in range(alternations):
            for t in targets:
                compiled = alone[t.name]
                compiled.run(profile_feeds)  # the worker's first run, apart
                profiled[t.name].append(time_compiled(compiled, profile_feeds, TimingConfig()).median_ms)
                settle_own_threads()  # its pool spins on after its last run, as the bench waits out a turn's
                stats = bench.measure([t.name], rounds=2, fresh=True)
                benched[t.name].append(stats[t.name].median_ms)
                turns[t.name].append(list(bench.candidates[t.name].samples_ms))
    for compiled in alone.values():
        compiled.close()
    rows = []
    for t in targets:
        ratios = [b / p for p, b in zip(profiled[t.name], benched[t.name])]
        width = min(len(s) for s in turns[t.name])
        rows.append({"model": name, "target": t.name,
                     "profile_ms": statistics.median(profiled[t.name]),
                     "bench_ms": statistics.median(benched[t.name]),
                     "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
                     "bench_by_position_ms": [statistics.median(s[i] for s in turns[t.name]) for i in range(width)]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="squeezenet,bert-tiny,resnet50")
    ap.add_argument("--targets", default="onnxruntime:t1,openvino:t1,onnxruntime:t2,openvino:t2")
    ap.add_argument("--alternations", type=int, default=8)
    ap.add_argument("--per-round", type=int, default=8, help="requests per bench turn (the first left out)")
    ap.add_argument("--out", type=Path, default=None, help="JSON with every row")
    args = ap.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        for row in compare_model(name, args.targets.split(","), args.alternations, args.per_round):
            rows.append(row)
            print(f"{row['model']:12s} {row['target']:20s} profile {row['profile_ms']:8.3f} ms  bench "
                  f"{row['bench_ms']:8.3f} ms  bench/profile {row['ratio_median']:.3f} "
                  f"({row['ratio_min']:.2f}-{row['ratio_max']:.2f})  by position "
                  + " ".join(f"{x:.2f}" for x in row["bench_by_position_ms"]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": " ".join(["python -m experiments.profile_vs_bench"]
                                                            + (argv if argv is not None else sys.argv[1:])),
                                        "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
