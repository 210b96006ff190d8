"""Tuned throughput plans against the runtimes' own throughput modes, interleaved (issue 14).

``placer tune --objective throughput`` leaves a PLAN_DIR whose verdict rests on its final rounds,
and on a 30-s budget those are often one round per candidate (profiling a warm store takes 15-20 s
of it), on a host whose speed swings by 1.3-2x: one tune's figure per model moved by +-10% from
run to run (session 38). This bench measures each plan dir again, longer: on the pipeline executor
with the outputs dropped where they are produced (``PipelineExecutor.run(consume=...)``, as a
serving loop's consumer takes them and as the yardsticks leave theirs), beside the throughput
yardsticks of :mod:`placer.run.yardsticks` (OpenVINO's THROUGHPUT hint at its default precision and
pinned to f32, driven by an ``AsyncInferQueue``; one 1-thread ONNX Runtime session per core in as
many threads), each in a process of its own, in ``--rounds`` interleaved rounds of about 0.5 s per
candidate (the order alternating). Reported per model: the medians, and the median over rounds of
the plan's req/s over each yardstick's in the same round (paired). The plan's outputs and the
yardsticks' are checked against ONNX Runtime's reference first, at the plan's precision (bf16 where a
partition computes in bf16, as tune checked it).

Each plan dir also runs deployed, in every round: saved and served by ``placer run PLAN_DIR
--pipeline``'s pipeline executor in a process of its own (``YardstickSet.add_plan(...,
pipeline=True)``), as each yardstick has one; one that fails there is reported (``deployed_error``)
and the bench goes on. The same configuration measured in the bench's process, which holds the plan's
executor, the reference and the yardsticks' clients, and in a lean process has differed beyond its
spread here (session 39: OpenVINO's bf16 THROUGHPUT on hf-vit 0.893x in a loaded process, 0.983x
and 1.053x in a lean one); the yardsticks always ran in lean ones.

    python -m experiments.bench_throughput --plans 'RUN/tune_tp_*' --rounds 12 --out OUT
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import time
from pathlib import Path

import numpy as np

#: the plan dir run by the pipeline executor in a process of its own (``YardstickSet.add_plan``)
DEPLOYED = "deployed"


def bench_plan(plan_dir: Path, rounds: int, round_s: float = 0.5) -> dict:
    from placer.devices import make_target
    from placer.materialize import load_plan_dir
    from placer.run.numerics import ReferenceRunner, compare, load_inputs, tolerance_for
    from placer.run.pipeline import PipelineExecutor, discard_outputs
    from placer.run.yardsticks import YardstickSet, label, throughput_kinds

    mat = load_plan_dir(plan_dir)
    # checked at the plan's precision, as tune checked it: bf16 where a partition computes in bf16
    bf16 = any(getattr(make_target(p.target), "precision", "f32") == "bf16" for p in mat.partitions)
    precision = "bf16" if bf16 else "f32"
    rtol, atol = tolerance_for(precision)
    feeds = load_inputs("seed:0", mat.graph, 4)
    reference = ReferenceRunner(mat.graph.model)
    refs = [reference.run(f) for f in feeds]
    out: dict = {"plan": str(plan_dir), "partitions": len(mat.partitions), "precision": precision,
                 "stages": [{"target": s.target,
                             "replicas": [list(r) for r in s.replicas] if s.replicas else None}
                            for s in mat.stage_config.stages]}
    rps: dict[str, list[float]] = {}
    with YardstickSet(mat.graph.model, feeds, throughput_kinds()) as ys, PipelineExecutor(mat) as pe:
        check = pe.run([feeds[i % len(feeds)] for i in range(2 * len(feeds))], warmup=4)
        check.raise_first()
        out["plan_numerics_ok"] = all(compare(o, refs[i % len(refs)], rtol=rtol, atol=atol).passed
                                      for i, o in enumerate(check.outputs))
        # the same plan dir deployed as a user serves it: `placer run PLAN_DIR --pipeline` in a process
        # of its own, as each yardstick has one
        deployed = ys.add_plan(DEPLOYED, mat, pipeline=True)
        rep = ys.check(DEPLOYED, mat.graph.model, feeds, reference=reference, rtol=rtol, atol=atol) \
            if deployed.ok else None
        out["deployed_numerics_ok"] = None if rep is None else bool(rep.passed)
        out["deployed_info"] = deployed.info
        out["yardstick_numerics_ok"] = {}
        for kind, y in ys.ready.items():
            rep = ys.check(kind, mat.graph.model, feeds, reference=reference, rtol=rtol, atol=atol)
            out["yardstick_numerics_ok"][label(kind)] = None if rep is None else bool(rep.passed)
        first = pe.run([feeds[i % len(feeds)] for i in range(20)], warmup=0, consume=discard_outputs)
        n = int(min(4000, max(20, round_s * first.measurement.throughput_rps)))
        reqs = [feeds[i % len(feeds)] for i in range(n)]
        others = [(label(k), y) for k, y in ys.ready.items()]
        others = ([(DEPLOYED, deployed)] if deployed.ok else []) + others
        for _, y in others:
            y.throughput(max(4, n // 4))  # warm-up at its own concurrency
        turns = [("plan", None)] + others
        for r in range(rounds):
            for key, y in (turns if r % 2 == 0 else turns[::-1]):
                if y is None:
                    v = pe.run(reqs, warmup=0, consume=discard_outputs).measurement.throughput_rps
                else:
                    v = y.throughput(n)
                rps.setdefault(key, []).append(float(v) if v else math.nan)  # one entry per round
    out["deployed_error"] = deployed.error  # failed to load, or later (its rounds are then NaN)
    out["requests_per_round"] = n
    out["rounds_rps"] = rps
    out["median_rps"] = {k: float(np.nanmedian(v)) for k, v in rps.items()}
    for who in [w for w in ("plan", DEPLOYED) if w in rps]:  # round by round: over each yardstick, the other
        mine = np.asarray(rps[who])
        paired = {k: mine / np.asarray(v) for k, v in rps.items() if k != who}
        out[f"paired_{who}_over"] = {k: float(np.median(r[np.isfinite(r)])) if np.isfinite(r).any()
                                     else math.nan for k, r in paired.items()}
    return out


def report(results: dict[str, dict], meta: dict) -> str:
    from experiments.compare import geomean

    keys = sorted({k for r in results.values() for k in r["paired_plan_over"] if k != DEPLOYED})
    lines = ["# Tuned throughput plans against the runtimes' throughput modes", "",
             f"Machine: {meta['cpu']}, {meta['cores']} cores; {meta['date']}; `{meta['command']}`.", "",
             ("Each plan dir runs twice per round: on the pipeline executor in the bench's process "
              "(*here*) and deployed, as `placer run PLAN_DIR --pipeline` serves it, in a process of its "
              "own as each yardstick has (*own process*). Each yardstick cell: the plan's req/s over the "
              "yardstick's, here / own process, the median over rounds of the two measured in the same "
              "round (paired); in brackets the yardstick's median req/s and whether its outputs pass the "
              "check at the plan's precision (f32, or bf16 where a partition computes in bf16: the "
              "tolerance tune checked it at)."), "",
             "| model | plan | precision | plan numerics (here, own process) | req/s here | own process | "
             "own process x here | " + " | ".join(keys) + " |",
             "|---|---|---|---|---:|---:|---:|" + "---:|" * len(keys)]
    for name, r in results.items():
        st = r["stages"]
        what = "; ".join(s["target"] + (f" x{len(s['replicas'])} replicas" if s["replicas"] else "")
                         for s in st)
        dep = r.get("paired_deployed_over", {})
        cells = []
        for k in keys:
            ok = r["yardstick_numerics_ok"].get(k)
            tag = "" if ok is None else (" ok" if ok else " fails")
            ratio, rps = r["paired_plan_over"].get(k, math.nan), r["median_rps"].get(k, math.nan)
            cells.append(f"{ratio:.3f} / {dep.get(k, math.nan):.3f} ({rps:.1f}{tag})")
        oks = "/".join("ok" if v else ("fails" if v is not None else "-")
                       for v in (r["plan_numerics_ok"], r.get("deployed_numerics_ok")))
        lines.append(f"| {name} | {what} | {r['precision']} | {oks} | {r['median_rps']['plan']:.1f} | "
                     f"{r['median_rps'].get(DEPLOYED, math.nan):.1f} | {dep.get('plan', math.nan):.3f} | "
                     + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"{name}: the plan served in a process of its own failed: {r['deployed_error']}."
              for name, r in results.items() if r.get("deployed_error")]
    own = [r["paired_deployed_over"]["plan"] for r in results.values() if "paired_deployed_over" in r]
    if own:
        lines.append("The plan in its own process over the same plan here (paired): "
                     f"geomean {geomean(own):.3f}, {min(own):.3f}-{max(own):.3f}.")
    for who, what in (("plan", "here"), (DEPLOYED, "in its own process")):
        over = [r.get(f"paired_{who}_over") for r in results.values()]
        if not all(over):
            continue
        lines.append(f"The plan {what}, geomean of the paired ratios: " + ", ".join(
            f"{k} {geomean(o.get(k) for o in over):.3f}" for k in keys) + ".")
        passing = []
        for r, o in zip(results.values(), over):
            ok = [k for k in keys if r["yardstick_numerics_ok"].get(k) and k in r["median_rps"]]
            if ok:
                passing.append(o[max(ok, key=lambda k: r["median_rps"][k])])
        if passing:
            lines.append(f"The plan {what} against the fastest yardstick passing the check at the plan's "
                         f"precision, per model: geomean {geomean(passing):.3f}, min {min(passing):.3f}.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans", required=True, help="plan dirs (a glob): tune_tp_<model> folders")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from placer.devices.base import cpu_model

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import os
    import sys

    args_text = " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"cpu": cpu_model(), "cores": len(os.sched_getaffinity(0)), "date": time.strftime("%Y-%m-%d"),
            "command": f"python -m experiments.bench_throughput {args_text}"}
    results = {}
    for d in sorted(glob.glob(args.plans)):
        name = Path(d).name.removeprefix("tune_tp_")
        t0 = time.monotonic()
        results[name] = bench_plan(Path(d), args.rounds)
        print(f"{name}: plan {results[name]['median_rps']['plan']:.1f} req/s, paired "
              + ", ".join(f"{k} {v:.3f}" for k, v in results[name]["paired_plan_over"].items())
              + f" ({time.monotonic() - t0:.0f} s)", flush=True)
        (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (out / "report.md").write_text(report(results, meta))
    print(f"report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
