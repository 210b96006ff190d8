"""Benchmark: a full profiling campaign (resnet50 on the three default targets by default).

    python -m experiments.bench_profile [--model zoo:resnet50] [--targets ...] [--json out.json]
    placer bench profile [--model zoo:resnet50]

Profiles into a fresh temporary store (unless ``--db``): every unique op signature on every
target, each target's call overhead, the whole model per target and the links between targets;
then reruns the campaign on the same store (it must measure nothing). Prints the wall time of
both, the number of unique signatures, and the per-target table. Target: <= 3 minutes for
resnet50 x 3 targets on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence


def run_bench(model: str = "zoo:resnet50", *, targets: Sequence[str] | None = None, db: str | None = None,
              timeout_s: float = 60.0, json_path: str | None = None, progress: bool = True) -> dict:
    from placer.devices import make_targets
    from placer.graph import load_graph
    from placer.profile import ProfileStore, profile_graph
    from placer.profile.report import console as _console
    from placer.profile.report import link_table, summary_lines, summary_table

    console = _console()
    tlist = make_targets(targets)
    t0 = time.perf_counter()
    graph = load_graph(model)
    load_s = time.perf_counter() - t0
    tmp = None
    if db is None:
        tmp = tempfile.mkdtemp(prefix="placer-bench-")
        db = os.path.join(tmp, "profile.db")
    with ProfileStore(db) as store:
        res = profile_graph(graph, tlist, store, timeout_s=timeout_s, progress=progress)
        console.print(summary_table(graph, res, title=f"{model}: first campaign"))
        for line in summary_lines(res):
            console.print(line, highlight=False)
        rerun = profile_graph(graph, tlist, store, timeout_s=timeout_s, progress=False)
        links = store.link_model(tlist, missing="skip")
        console.print(link_table(links, [t.name for t in tlist]))
        integrity = store.integrity_check()
    figures = {
        "model": model,
        "ops": len(graph.ops),
        "unique_signatures": res.unique_signatures,
        "targets": [t.name for t in tlist],
        "load_s": round(load_s, 2),
        "campaign_s": round(res.wall_s, 1),
        "rerun_s": round(rerun.wall_s, 2),
        "rerun_measured": rerun.measured,
        "measured": res.measured,
        "unsupported": res.unsupported,
        "failed": res.failed,
        "links_measured": res.links_measured,
        "per_target": {k: v.to_dict() for k, v in res.per_target.items()},
        "integrity": integrity,
        "cpu": platform.processor() or platform.machine(),
        "nproc": os.cpu_count(),
        "store": db,
    }
    console.print(
        f"[bold]{model}[/]: {len(graph.ops)} ops, {res.unique_signatures} unique signatures, "
        f"{len(tlist)} targets -> campaign {res.wall_s:.1f} s (load {load_s:.1f} s), rerun {rerun.wall_s:.2f} s "
        f"measuring {rerun.measured}; integrity {integrity}",
        highlight=False,
    )
    if json_path:
        with open(json_path, "w") as f:
            json.dump(figures, f, indent=1, sort_keys=True, default=str)
    return figures


def main(argv: list[str] | None = None) -> int:
    from placer.errors import PlacerError

    ap = argparse.ArgumentParser(prog="python -m experiments.bench_profile", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="zoo:resnet50")
    ap.add_argument("--targets", default=None, help="comma-separated (default: onnxruntime,openvino,tvm-llvm)")
    ap.add_argument("--db", default=None, help="store (default: a fresh temporary one)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()] if args.targets else None
    try:
        run_bench(args.model, targets=targets, db=args.db, timeout_s=args.timeout, json_path=args.json,
                  progress=not args.quiet)
    except PlacerError as exc:
        print(f"bench_profile: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
