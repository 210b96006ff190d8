"""Benchmark of placer itself: a full profiling campaign, then its resume (``placer bench profile``).

Profiles into a fresh temporary store (unless ``db``): every unique op signature on every target,
each target's call overhead, the whole model per target and the links between targets; then reruns
the campaign on the same store (it must measure nothing). Prints the wall time of both, the number
of unique signatures, and the per-target table. Target: <= 3 minutes for resnet50 x 3 targets on 2
cores. ``python -m experiments.bench_profile`` is the same benchmark as a script.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import Sequence

from placer import zoo
from placer.devices import make_targets
from placer.profile.campaign import profile_graph
from placer.profile.report import console as report_console
from placer.profile.report import link_table, summary_lines, summary_table
from placer.profile.store import ProfileStore

__all__ = ["run_bench"]


def run_bench(model: str = "zoo:resnet50", *, targets: Sequence[str] | None = None, db: str | None = None,
              timeout_s: float = 60.0, json_path: str | None = None, progress: bool = True) -> dict:
    """Profile ``model`` on ``targets`` into ``db`` (default: a fresh temporary store), then rerun the
    campaign on the same store (it must measure nothing); print both and return the figures (also
    written to ``json_path``). ``placer bench profile`` and ``python -m experiments.bench_profile``."""
    console = report_console()
    tlist = make_targets(targets)
    t0 = time.perf_counter()
    graph = zoo.load_graph(model)
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
