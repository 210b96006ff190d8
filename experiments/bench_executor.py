"""Executor benchmarks: overhead, per-boundary hand-off cost, 2-stage pipeline throughput.

Run::

    python experiments/bench_executor.py --out runs/bench_executor.json

Sections (``--sections``, default all):

overhead
    A plan that puts every op on one runtime (one partition) run by the hybrid executor and by the
    Relax executor, against that runtime alone on the same folded model, same threads (1).
    ``overhead = median over rounds of (executor median / runtime-alone median) - 1``; variants are
    interleaved inside every round (rotating order) so that machine noise hits all of them.
handoff
    A chain of ``L`` convolutions cut into ``k`` contiguous partitions on one runtime, k in
    (1, 2, 4, 8, 16); per-boundary cost = least-squares slope of the median latency over the
    number of boundaries ``k - 1`` (small tensors: fixed cost; large tensors: copies too).
pipeline
    A model cut into 2 stages at half its FLOPs, stage 0 pinned to core 0 and stage 1 to core 1,
    single-thread runtimes, vs the best single runtime at 2 threads (sequential requests,
    unpinned). Throughput = requests / wall time, median over interleaved rounds. Also the same
    2 stages unpinned (``pipeline-<rt>-unpinned``: separates pinning from pipelining) and a GIL
    check: one single-thread session run from 1 thread vs from 2 threads pinned to cores 0 and 1.

The machine may be shared: the load average is recorded before and after every section.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from placer.profile.links import conv_chain_model


def _median_ms(fn: Callable[[], Any], reps: int) -> float:
    ts = []
    for _ in range(reps):
        s = time.perf_counter_ns()
        fn()
        ts.append((time.perf_counter_ns() - s) / 1e6)
    return float(np.median(ts))


def _interleave(variants: dict[str, Callable[[], Any]], rounds: int, reps: int,
                warmup: int = 3) -> dict[str, list[float]]:
    """Per-round medians (ms) of each variant; the order rotates every round."""
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    names = list(variants)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            out[n].append(_median_ms(variants[n], reps))
    return out


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ---- overhead -------------------------------------------------------------------------------------
def bench_overhead(models: list[str], runtimes: list[str], rounds: int, reps: int) -> list[dict[str, Any]]:
    from placer import zoo
    from placer.devices import make_target
    from placer.graph import build_graph
    from placer.materialize import materialize
    from placer.run import HybridExecutor, RelaxExecutor, random_inputs

    rows = []
    for name in models:
        g = build_graph(zoo.reweighted(name))
        feeds = random_inputs(g, 0)
        for rt in runtimes:
            alone = make_target(f"{rt}:t1").compile(g.model)
            mat = materialize(g, {op.id: f"{rt}:t1" for op in g.ops})
            hyb = HybridExecutor(mat)
            hyb.compile()
            rel = RelaxExecutor(mat)
            rel.compile()
            load0 = _load()
            res = _interleave({"alone": lambda: alone.run(feeds), "hybrid": lambda: hyb.run(feeds),
                               "relax": lambda: rel.run(feeds)}, rounds, reps)
            row = {"model": name, "runtime": f"{rt}:t1", "n_partitions": len(mat.partitions),
                   "load_before": load0, "load_after": _load()}
            for v, ms in res.items():
                row[f"{v}_ms"] = float(np.median(ms))
            for v in ("hybrid", "relax"):
                ratios = [a / b for a, b in zip(res[v], res["alone"])]
                row[f"{v}_overhead_pct"] = 100 * (float(np.median(ratios)) - 1)
                row[f"{v}_overhead_pct_iqr"] = [100 * (float(np.percentile(ratios, q)) - 1) for q in (25, 75)]
            rows.append(row)
            print(f"overhead {name:<11} {rt:<12} alone {row['alone_ms']:8.3f} ms | "
                  f"hybrid {row['hybrid_ms']:8.3f} ms "
                  f"({row['hybrid_overhead_pct']:+.2f}%) | relax {row['relax_ms']:8.3f} ms "
                  f"({row['relax_overhead_pct']:+.2f}%)  load {load0}->{row['load_after']}", flush=True)
            hyb.close()
            rel.close()
            alone.close()
    return rows


# ---- hand-off ---------------------------------------------------------------------------------------
def bench_handoff(runtimes: list[str], rounds: int, reps: int, ks=(1, 2, 4, 8, 16)) -> list[dict[str, Any]]:
    from placer.graph import build_graph
    from placer.materialize import materialize
    from placer.run import HybridExecutor, RelaxExecutor, random_inputs

    rows = []
    layers = max(ks)
    for channels, hw in ((16, 8), (64, 56)):
        g = build_graph(conv_chain_model(layers, channels, hw))
        feeds = random_inputs(g, 0)
        tensor_kb = channels * hw * hw * 4 / 1024
        for rt in runtimes:
            for exname, cls in (("hybrid", HybridExecutor), ("relax", RelaxExecutor)):
                execs = {}
                for k in ks:
                    # k contiguous partitions on one target: one "stage" per chunk keeps neighbouring
                    # chunks from merging (the hybrid/relax executors ignore stages)
                    chunk = {op.id: op.index * k // layers for op in g.ops}
                    mat = materialize(g, {op.id: f"{rt}:t1" for op in g.ops}, stage_of=chunk)
                    assert len(mat.partitions) == k, (k, len(mat.partitions))
                    ex = cls(mat) if cls is RelaxExecutor else cls(mat, parallel=False)
                    ex.compile()
                    execs[k] = ex
                load0 = _load()
                variants = {str(k): (lambda e=e: e.run(feeds)) for k, e in execs.items()}
                res = _interleave(variants, rounds, reps)
                med = {k: float(np.median(res[str(k)])) for k in ks}
                x = np.array([k - 1 for k in ks], dtype=float)
                y = np.array([med[k] for k in ks])
                slope = float(np.polyfit(x, y, 1)[0])
                row = {"runtime": rt, "executor": exname, "tensor": [1, channels, hw, hw],
                       "tensor_kb": tensor_kb,
                       "latency_ms_by_k": {str(k): med[k] for k in ks}, "per_boundary_us": 1000 * slope,
                       "load_before": load0, "load_after": _load()}
                rows.append(row)
                print(f"handoff {rt:<12} {exname:<7} tensor {tensor_kb:7.1f} KiB: "
                      + " ".join(f"k={k}:{med[k]:.3f}ms" for k in ks)
                      + f" -> {1000 * slope:7.1f} us/boundary  load {load0}->{row['load_after']}", flush=True)
                for e in execs.values():
                    e.close()
    return rows


# ---- pipeline ---------------------------------------------------------------------------------------
def _split_by_flops(g) -> dict[str, int]:
    total = sum(op.flops for op in g.ops)
    acc, stage_of = 0, {}
    for op in g.ops:
        stage_of[op.id] = 0 if acc < total / 2 else 1
        acc += op.flops
    return stage_of


def _gil_check(g, feeds, n: int) -> dict[str, Any]:
    """One single-thread ORT session per thread; 1 thread vs 2 threads pinned to cores 0 and 1."""
    from placer.devices import make_target

    def work(core: int, out: list) -> None:
        os.sched_setaffinity(0, {core})
        c = make_target(f"onnxruntime@cpu{core}:t1").compile(g.model)
        c.run(feeds)
        barrier.wait()
        t0 = time.perf_counter()
        for _ in range(n):
            c.run(feeds)
        out.append(time.perf_counter() - t0)

    res = {}
    for threads in (1, 2):
        barrier = threading.Barrier(threads)
        outs: list[float] = []
        ths = [threading.Thread(target=work, args=(i, outs)) for i in range(threads)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        res[f"{threads}_threads_rps"] = threads * n / max(outs)
    res["speedup"] = res["2_threads_rps"] / res["1_threads_rps"]
    return res


def bench_pipeline(models: list[str], runtimes: list[str], rounds: int,
                   n_requests: dict[str, int]) -> list[dict[str, Any]]:
    from placer import zoo
    from placer.devices import make_target
    from placer.graph import build_graph
    from placer.materialize import materialize
    from placer.run import PipelineExecutor, random_inputs

    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        print("pipeline: needs cores 0 and 1; skipped")
        return []
    rows = []
    for name in models:
        g = build_graph(zoo.reweighted(name))
        n = n_requests.get(name, 50)
        reqs = [random_inputs(g, s) for s in range(n)]
        stage_of = _split_by_flops(g)
        pipes = {}
        # pinned: stage 0 on core 0, stage 1 on core 1; "unpinned": the same stages, no affinity
        variants = [(rt, True) for rt in runtimes] + [(runtimes[0], False)]
        for rt, pinned in variants:
            if pinned:
                asg = {o: (f"{rt}@cpu0:t1" if s == 0 else f"{rt}@cpu1:t1") for o, s in stage_of.items()}
            else:
                asg = {o: f"{rt}:t1" for o in stage_of}
            mat = materialize(g, asg, stage_of=stage_of)
            pe = PipelineExecutor(mat, queue_size=2)
            pe.start()
            pe.run(reqs[:4], warmup=0)
            pipes[rt if pinned else f"{rt}-unpinned"] = pe
        singles = {rt: make_target(f"{rt}:t2").compile(g.model) for rt in runtimes}
        stage_ms: dict[str, list] = {key: [] for key in pipes}
        tput: dict[str, list[float]] = {f"pipeline-{key}": [] for key in pipes}
        tput.update({f"{rt}:t2": [] for rt in runtimes})
        for c in singles.values():
            for r in reqs[:3]:
                c.run(r)
        load0 = _load()
        for r in range(rounds):
            order = [("pipe", key) for key in pipes] + [("single", rt) for rt in runtimes]
            order = order[r % len(order):] + order[: r % len(order)]
            for kind, rt in order:
                if kind == "pipe":
                    res = pipes[rt].run(reqs, warmup=0)
                    assert res.ok, res.errors
                    tput[f"pipeline-{rt}"].append(res.measurement.throughput_rps)
                    stage_ms[rt].append(res.measurement.extra["stage_median_ms"])
                else:
                    c = singles[rt]
                    t0 = time.perf_counter()
                    for q in reqs:
                        c.run(q)
                    tput[f"{rt}:t2"].append(n / (time.perf_counter() - t0))
        for pe in pipes.values():
            pe.close()
        med = {k: float(np.median(v)) for k, v in tput.items()}
        best_single = max((k for k in med if not k.startswith("pipeline")), key=med.get)
        best_pipe = max((k for k in med if k.startswith("pipeline") and "unpinned" not in k), key=med.get)
        row = {"model": name, "n_requests": n, "rounds": rounds, "throughput_rps": med,
               "throughput_rps_rounds": tput, "best_single": best_single, "best_pipeline": best_pipe,
               "pipeline_vs_best_single": med[best_pipe] / med[best_single],
               "stage_median_ms": {rt: {s: float(np.median([d[s] for d in v])) for s in v[0]}
                                   for rt, v in stage_ms.items() if v},
               "load_before": load0, "load_after": _load()}
        row["gil_check"] = _gil_check(g, reqs[0], max(10, n // 2))
        rows.append(row)
        print(f"pipeline {name:<11} " + " | ".join(f"{k} {v:7.1f} req/s" for k, v in med.items())
              + f" -> {best_pipe} / {best_single} = {row['pipeline_vs_best_single']:.3f}x"
              + f"  stages(ms) {row['stage_median_ms']}"
              + f"  GIL check: 2 threads {row['gil_check']['speedup']:.2f}x"
              + f"  load {load0}->{row['load_after']}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default="overhead,handoff,pipeline")
    ap.add_argument("--models", default="squeezenet,resnet50")
    ap.add_argument("--runtimes", default="onnxruntime,openvino")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--pipeline-models", default=None, help="pipeline section models (default: --models)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    sections = args.sections.split(",")
    models = args.models.split(",")
    runtimes = args.runtimes.split(",")
    report: dict[str, Any] = {"argv": sys.argv, "cpu_count": os.cpu_count(),
                              "affinity": sorted(os.sched_getaffinity(0)),
                              "load_start": _load(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    t0 = time.time()
    if "overhead" in sections:
        report["overhead"] = bench_overhead(models, runtimes, args.rounds, args.reps)
    if "handoff" in sections:
        report["handoff"] = bench_handoff(runtimes, args.rounds, max(args.reps, 20))
    if "pipeline" in sections:
        pmodels = args.pipeline_models.split(",") if args.pipeline_models else models
        report["pipeline"] = bench_pipeline(pmodels, runtimes, args.rounds,
                                            {"squeezenet": 200, "resnet50": 30, "shufflenet": 200})
    report["load_end"] = _load()
    report["wall_s"] = time.time() - t0
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1, sort_keys=True, default=float))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
