"""Re-price from the bench's earlier rounds, or keep the store's time? (issue 15)

The comparison and the tuner re-price each single target from the bench's rounds measured before
the plans'. Until session 44 only where those rounds stood on quiet samples
(:meth:`placer.run.bench.PlanBench.settled`): a target slowed in most rounds kept the store's
whole-model time, taken in the quietest of its profile windows (on session 44's host, slowed in
nearly every round, every target of every model). This script measures which of the two predicts
the later rounds better: per model,
the single-target plans on the store ``--db`` (profiled already), measured in rounds as the
re-pricing takes them (``until_quiet``), then fresh rounds as the final measurement takes them, and
the later rounds' median read against (a) the store's time, (b) the earlier rounds' median, (c)
what session 43's re-pricing used (b where settled, else a; the re-pricing now takes b).

    python -m experiments.reprice_vs_store --db STORE --models squeezenet,bert-tiny --out runs/rvs.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

MODELS = ["squeezenet", "inception_v1", "resnet50", "bert-tiny", "hf-bert", "hf-gpt2", "hf-vit",
          "hf-convnext", "hf-llama", "hf-distilbert", "hf-mobilenetv2"]


def measure_model(name: str, db: str) -> list[dict]:
    from placer import api
    from placer.materialize import materialize
    from placer.run.bench import PlanBench
    from placer.run.numerics import load_inputs
    from placer.solve import solve

    ctx = api.prepare(f"zoo:{name}", db=db)
    stored = dict(ctx.table.whole_model_ms)
    feeds = load_inputs("seed:0", ctx.graph, 4)
    rows = []
    with PlanBench(feeds, rounds=8, per_round=5) as bench:
        keys = []  # each single target's candidate, named by its target
        for t in ctx.targets:
            plan = solve(ctx.problem, "latency", f"single:{t.name}")
            if len(set(plan.assignment.values())) != 1 or t.name not in stored:
                continue
            bench.add(t.name, materialize(ctx.graph, plan))
            keys.append(t.name)
        earlier = bench.measure(keys, until_quiet=8, deadline=time.monotonic() + 60.0)
        settled = set(bench.settled(keys))
        later = bench.measure(keys, fresh=True, until_quiet=8, deadline=time.monotonic() + 60.0)
        for t in keys:
            rows.append({"model": name, "target": t, "store_ms": stored[t],
                         "earlier_ms": earlier[t].median_ms, "earlier_slowed_share": earlier[t].slowed_share,
                         "settled": t in settled, "later_ms": later[t].median_ms,
                         "later_slowed_share": later[t].slowed_share})
    return rows


def summary(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Median and p90 of |price / later - 1| for each way of pricing."""
    ways = {"store": lambda r: r["store_ms"], "earlier rounds": lambda r: r["earlier_ms"],
            "settled only (session 43)": lambda r: r["earlier_ms"] if r["settled"] else r["store_ms"]}
    out = {}
    for way, price in ways.items():
        errs = [abs(price(r) / r["later_ms"] - 1) for r in rows
                if r["later_ms"] > 0 and math.isfinite(r["later_ms"])]
        out[way] = {"n": len(errs), "median": float(np.median(errs)), "p90": float(np.percentile(errs, 90))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="a profile store holding the models (e.g. a comparison's)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", type=Path, default=None, help="JSON with every row")
    args = ap.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        for r in measure_model(name, args.db):
            rows.append(r)
            print(f"{r['model']:14s} {r['target']:20s} store {r['store_ms']:8.3f}  earlier "
                  f"{r['earlier_ms']:8.3f} (slowed {r['earlier_slowed_share']:.2f}, settled {r['settled']})  "
                  f"later {r['later_ms']:8.3f} "
                  f"(slowed {r['later_slowed_share']:.2f})", flush=True)
    s = summary(rows)
    for way, v in s.items():
        print(f"{way:26s} n {v['n']}  median |err| {v['median']:.3f}  p90 {v['p90']:.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": " ".join(["python -m experiments.reprice_vs_store"]
                                                            + (argv if argv is not None else sys.argv[1:])),
                                        "rows": rows, "summary": s}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
