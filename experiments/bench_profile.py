"""Benchmark: a full profiling campaign (resnet50 on the three default targets by default).

    python -m experiments.bench_profile [--model zoo:resnet50] [--targets ...] [--json out.json]
    placer bench profile [--model zoo:resnet50]

The benchmark itself is :func:`placer.profile.bench.run_bench` (``placer bench`` is a placer
command, so it lives in placer); this is its command line as a script.
"""

from __future__ import annotations

import argparse
import sys

from placer.profile.bench import run_bench

__all__ = ["main", "run_bench"]


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
