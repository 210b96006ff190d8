"""Solver benchmarks.

``python experiments/bench_solver.py stg [--time-limit 10] [--filter 100/]``
    The STG instances of ``tests/data/stg`` (P|prec|Cmax: identical targets, zero transfer cost;
    ``PLACER_STG_ROOT`` points elsewhere): latency-mode ``cpsat`` must reach and prove every
    optimum of ``optima.csv``. Prints instance, p, optimum, found, proved, time.

``python experiments/bench_solver.py random [--sizes 100,500,2000,5000] [--targets 2,4,8]``
    Random layered DAGs (:func:`placer.solve.instances.random_layered`), both modes: ``cpsat`` wall time, gap to its
    proven lower bound, and the ratio of its objective to HEFT's (latency: makespan; pipeline:
    bottleneck, HEFT's assignment repaired into a pipeline). ``--workers`` sets CP-SAT's
    ``num_workers`` (default 2); ``--unsupported`` the fraction of ops each target but the first
    lacks (default 0.1).

``python experiments/bench_solver.py ops [--kinds transformer,cnn] [--sizes 500,1500,3000] [--accs 3,6]``
    Training operator graphs (:func:`placer.solve.instances.training_graph`: forward/backward colocation pairs, ``k``
    identical accelerators plus a CPU, memory caps, broadcast links), pipeline mode: the
    ``ideals`` DP optimum is the reference column; ``cpsat`` without the DP (``ideals=False``) and
    with it (the default), each at ``--time-limit`` (60 s), as ratios to the reference.

Timings are wall-clock on a shared machine: other jobs running at the same time make them noisy.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from placer.solve.instances import load_stg, random_layered, stg_optima, training_graph

__all__ = ["STG_ROOT", "load_stg", "main", "random_layered", "stg_optima", "training_graph"]

#: The STG benchmark set (test data of this repository; ``PLACER_STG_ROOT`` overrides it).
STG_ROOT = Path(os.environ.get("PLACER_STG_ROOT")
                or Path(__file__).resolve().parents[1] / "tests" / "data" / "stg")


# ---------------------------------------------------------------------- commands
def cmd_stg(args: argparse.Namespace) -> int:
    from placer.solve import solve

    rows = [r for r in stg_optima(STG_ROOT) if args.filter in r[0]]
    print(f"{'instance':<18} {'p':>3} {'optimum':>8} {'found':>8} {'proved':>7} {'time_s':>7}")
    failures = 0
    total = 0.0
    for inst, procs, opt in rows:
        problem = load_stg(STG_ROOT / inst, procs)
        t0 = time.monotonic()
        plan = solve(problem, "latency", "cpsat", time_limit=args.time_limit, seed=args.seed,
                     num_workers=args.workers)
        dt = time.monotonic() - t0
        plan.validate(problem)
        total += dt
        proved = plan.stats.status == "OPTIMAL" and abs(plan.makespan_ms - opt) < 1e-6
        failures += not proved
        print(f"{inst:<18} {procs:>3} {opt:>8} {plan.makespan_ms:>8.0f} {'yes' if proved else 'NO':>7} {dt:>7.2f}",
              flush=True)
    print(f"# {len(rows) - failures}/{len(rows)} optima reached and proved; total {total:.1f} s, "
          f"num_workers={args.workers}, time_limit={args.time_limit} s")
    return 1 if failures else 0


def cmd_random(args: argparse.Namespace) -> int:
    from placer.solve import solve

    sizes = [int(x) for x in args.sizes.split(",")]
    targets = [int(x) for x in args.targets.split(",")]
    modes = args.modes.split(",")
    print(f"{'mode':<9} {'ops':>5} {'T':>2} {'status':<9} {'wall_s':>7} {'gap_%':>7} {'obj_ms':>10} "
          f"{'heft_ms':>10} {'cpsat/heft':>10} {'heft_s':>7} {'coarse':>7} source")
    for mode in modes:
        for n in sizes:
            for t in targets:
                problem = random_layered(n, t, seed=args.seed, p_unsupported=args.unsupported)
                t0 = time.monotonic()
                hplan = solve(problem, mode, "heft")
                heft_s = time.monotonic() - t0
                t0 = time.monotonic()
                plan = solve(problem, mode, "cpsat", time_limit=args.time_limit, seed=args.seed,
                             num_workers=args.workers)
                wall = time.monotonic() - t0
                plan.validate(problem)
                hplan.validate(problem)
                key = (lambda p: p.makespan_ms) if mode == "latency" else (lambda p: p.bottleneck_ms)
                obj, hobj = key(plan), key(hplan)
                gap = plan.stats.gap
                coarse = plan.coarsening["n_coarse_ops"] if plan.coarsening else "-"
                print(f"{mode:<9} {n:>5} {t:>2} {plan.stats.status:<9} {wall:>7.2f} "
                      f"{100 * gap if gap is not None else math.nan:>7.2f} {obj:>10.3f} {hobj:>10.3f} "
                      f"{obj / hobj:>10.4f} {heft_s:>7.2f} {coarse!s:>7} {plan.stats.extra.get('source', '')}",
                      flush=True)
    print(f"# time_limit={args.time_limit} s, num_workers={args.workers}, seed={args.seed}, "
          f"unsupported={args.unsupported}; gap is relative to the solver's proven lower bound")
    return 0


def cmd_dp_limit(args: argparse.Namespace) -> int:
    """How well ``dp`` (or ``--solver ideals``) honours its time limit on random layered DAGs too big
    for it to finish."""
    from placer.errors import ProblemError
    from placer.solve import solve

    print(f"{'ops':>5} {'T':>2} {'limit_s':>7} {'wall_s':>7} {'over_%':>7} {'status':<9} {'obj_ms':>10} "
          f"{'bound_ms':>10} labels")
    worst = 0.0
    for n in [int(x) for x in args.sizes.split(",")]:
        for t in [int(x) for x in args.targets.split(",")]:
            problem = random_layered(n, t, seed=args.seed)
            t0 = time.monotonic()
            try:
                plan = solve(problem, "pipeline", args.solver, time_limit=args.time_limit)
                status, obj, bound = plan.stats.status, plan.bottleneck_ms, plan.stats.best_bound
                labels = plan.stats.extra.get("labels", plan.stats.extra.get("ideals"))
            except ProblemError as exc:
                status, obj, bound, labels = "ERROR", math.nan, math.nan, str(exc)[:60]
            wall = time.monotonic() - t0
            over = 100 * (wall - args.time_limit) / args.time_limit
            worst = max(worst, over)
            print(f"{n:>5} {t:>2} {args.time_limit:>7.1f} {wall:>7.2f} {over:>7.1f} {status:<9} {obj:>10.3f} "
                  f"{bound:>10.3f} {labels}", flush=True)
    print(f"# worst overrun {worst:.1f} % of the limit (seed={args.seed})")
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    """Training operator graphs: the ideals DP optimum as the reference, CP-SAT without and with it."""
    from placer.solve import solve

    print(f"{'graph':<11} {'ops':>5} {'k':>2} {'ideals':>6} {'dp_s':>6} {'dp_ms':>10} {'dp':<8} "
          f"{'cpsat_ms':>10} {'x_dp':>7} {'status':<9} {'gap_%':>6} {'wall_s':>7} "
          f"{'+dp_ms':>10} {'x_dp':>7} {'status':<9} {'wall_s':>7}")
    for kind in args.kinds.split(","):
        for n in [int(x) for x in args.sizes.split(",")]:
            for k in [int(x) for x in args.accs.split(",")]:
                problem = training_graph(kind, n, k, seed=args.seed, broadcast=not args.no_broadcast)
                t0 = time.monotonic()
                ref = solve(problem, "pipeline", "ideals", time_limit=args.time_limit)
                dp_s = time.monotonic() - t0
                ref.validate(problem)
                n_ideals = ref.stats.extra.get("ideals", 0)
                row = [(f"{kind:<11} {problem.n_ops:>5} {k:>2} {n_ideals:>6} {dp_s:>6.2f} "
                        f"{ref.bottleneck_ms:>10.3f} {ref.stats.status:<8}")]
                for warm in (False, True):
                    if not warm and args.no_cold:
                        row.append(f"{'-':>10} {'-':>7} {'-':<9} {'-':>6} {'-':>7}")
                        continue
                    t0 = time.monotonic()
                    plan = solve(problem, "pipeline", "cpsat", time_limit=args.time_limit, seed=args.seed,
                                 num_workers=args.workers, ideals=warm)
                    wall = time.monotonic() - t0
                    plan.validate(problem)
                    ratio = plan.bottleneck_ms / ref.bottleneck_ms
                    gap = 100 * (plan.stats.gap or 0.0)
                    row.append(f"{plan.bottleneck_ms:>10.3f} {ratio:>7.4f} {plan.stats.status:<9} "
                               + (f"{gap:>6.1f} " if not warm else "") + f"{wall:>7.2f}")
                print(" ".join(row), flush=True)
    print(f"# time_limit={args.time_limit} s, num_workers={args.workers}, seed={args.seed}; x_dp = bottleneck "
          "/ the ideals DP's bottleneck (OPTIMAL: proven over every monotone pipeline; FEASIBLE: its prices "
          "were a lower bound, see ideals' best_bound)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("stg", help="STG optima (latency mode, identical targets)")
    a.add_argument("--time-limit", type=float, default=10.0)
    a.add_argument("--filter", default="", help="substring of the instance path")
    a.add_argument("--workers", type=int, default=2)
    a.add_argument("--seed", type=int, default=0)
    a.set_defaults(func=cmd_stg)
    b = sub.add_parser("random", help="random layered DAGs, both modes, vs HEFT")
    b.add_argument("--sizes", default="100,500,2000,5000")
    b.add_argument("--targets", default="2,4,8")
    b.add_argument("--modes", default="latency,pipeline")
    b.add_argument("--time-limit", type=float, default=10.0)
    b.add_argument("--workers", type=int, default=2)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--unsupported", type=float, default=0.1,
                   help="fraction of ops each non-reference target lacks (default 0.1)")
    b.set_defaults(func=cmd_random)
    c = sub.add_parser("dp-limit", help="dp solver: wall time against its time limit")
    c.add_argument("--sizes", default="200,500,1000")
    c.add_argument("--targets", default="4")
    c.add_argument("--time-limit", type=float, default=10.0)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--solver", default="dp", help="dp or ideals")
    c.set_defaults(func=cmd_dp_limit)
    d = sub.add_parser("ops", help="training operator graphs: ideals DP optimum vs CP-SAT (pipeline mode)")
    d.add_argument("--kinds", default="transformer,cnn")
    d.add_argument("--sizes", default="500,1500,3000")
    d.add_argument("--accs", default="3,6", help="numbers of identical accelerators (plus one CPU)")
    d.add_argument("--time-limit", type=float, default=60.0)
    d.add_argument("--workers", type=int, default=2)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--no-cold", action="store_true", help="skip CP-SAT without the DP warm start")
    d.add_argument("--no-broadcast", action="store_true",
                   help="senders pay every destination: the DP's prices are then a lower bound, not exact")
    d.set_defaults(func=cmd_ops)
    args = ap.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
