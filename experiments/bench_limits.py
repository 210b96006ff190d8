"""Measurements of issue 19's size and time limits (each runs placer in a child process).

``python experiments/bench_limits.py big-input [--log2 26]``
    A model whose input is a 1-D float tensor of 2^log2 elements (2^26: 256 MiB) read by Add, Sub
    and a Reshape shaped by Shape (every tensor as big as the input), planned by ``placer plan MODEL --targets onnxruntime
    --solver greedy`` (profiling included): wall time and the peak RSS of the largest process.
``python experiments/bench_limits.py problem --ops 100000 --targets 4 --solver greedy``
    A random layered problem (``placer.solve.instances.random_layered``, scalar links) through
    ``placer plan --problem``: wall time of the command and the solver's own ``wall_s``.
``python experiments/bench_limits.py from-json [--sizes 25000,50000,100000]``
    ``PlacementProblem.from_json`` of the ``{op: {target: ms}}`` form at several sizes (linear?).
``python experiments/bench_limits.py tune [--trials 1000] [--budget 20s]``
    ``placer tune zoo:tiny --targets onnxruntime`` with that many trials and that budget: wall time.

Timings are wall-clock on a shared machine: other jobs running at the same time make them noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))


def _run(argv: list[str], cap_gib: float = 8.0) -> tuple[int, float, float, str]:
    """(rc, wall s, peak RSS MiB of the largest process, stderr tail) of ``python -m placer.cli ARGV``
    under an address-space cap (a runaway allocation fails instead of exhausting the machine)."""
    cap = int(cap_gib * 2**30)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (%d, %d)); "
            "from placer.cli import main; sys.exit(main())" % (cap, cap))  # main(): the command itself
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.monotonic()
    # cwd: ``python -c`` imports from the working directory first (another checkout's placer, else)
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env,
                       check=False, cwd=ROOT)
    wall = time.monotonic() - t0
    peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return p.returncode, wall, peak, (p.stderr.strip().splitlines() or [""])[-1][:300]


def cmd_big_input(args) -> int:
    from onnx import TensorProto, helper, save

    n = 1 << args.log2
    # Add and Sub propagate data in ONNX shape inference (the costly path); the Reshape's shape comes
    # from Shape; every tensor is as big as the input
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"),
             helper.make_node("Shape", ["a"], ["s"], name="shape"),
             helper.make_node("Reshape", ["a", "s"], ["r"], name="reshape"),
             helper.make_node("Sub", ["r", "x"], ["y"], name="sub")]
    g = helper.make_graph(nodes, "big_input", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "big_input.onnx"
        save(m, str(f))
        rc, wall, peak, last = _run(["plan", str(f), "--targets", "onnxruntime", "--db",
                                     str(Path(d) / "p.db"), "--solver", "greedy", "--out",
                                     str(Path(d) / "plan.json")], args.cap_gib)
    print(f"big-input 2^{args.log2} float32 ({n * 4 / 2**20:.0f} MiB): rc={rc} wall={wall:.1f}s "
          f"peak RSS={peak:.0f} MiB  {last}")
    return 0 if rc == 0 else 1


def layered_json(n_ops: int, n_targets: int, seed: int = 0) -> dict:
    """A random layered DAG as problem JSON (written directly: a problem over the size limits must
    reach ``placer plan`` to be refused there): about sqrt(n) layers, each op reads one op of the
    previous layer and sometimes one older one; 10 % of the (op, target) pairs unsupported (never
    all of an op's); scalar links."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n_layers = max(1, round(2 * n_ops ** 0.5))
    layer = np.sort(rng.integers(0, n_layers, n_ops))
    layer[0] = 0
    ops = [f"op{i}" for i in range(n_ops)]
    targets = [f"dev{j}" for j in range(n_targets)]
    first = {}
    for i, li in enumerate(layer):
        first.setdefault(int(li), i)
    tensors = []
    for i in range(n_ops):
        readers = [j for j in (i + 1, i + 1 + int(rng.integers(0, 8))) if j < n_ops]
        tensors.append({"name": f"t{i}", "producer": ops[i], "consumers": sorted({ops[j] for j in readers}),
                        "nbytes": int(rng.integers(1, 1 << 20))})
    cost = rng.uniform(0.1, 3.0, (n_ops, n_targets)).round(4)
    supported = rng.random((n_ops, n_targets)) >= 0.1
    supported[np.arange(n_ops), rng.integers(0, n_targets, n_ops)] = True
    return {"version": 1, "ops": ops, "targets": targets,
            "cost_ms": {o: {d: float(c) for d, c, s in zip(targets, row, ok) if s}
                        for o, row, ok in zip(ops, cost, supported)},
            "tensors": tensors, "links": {"latency_ms": 0.02, "ms_per_byte": 2e-8, "charge": "both"}}


def cmd_problem(args) -> int:
    d = layered_json(args.ops, args.targets)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "problem.json"
        f.write_text(json.dumps(d))
        out = Path(tmp) / "plan.json"
        rc, wall, peak, last = _run(["plan", "--problem", str(f), "--solver", args.solver, "--time-limit",
                                     str(args.time_limit), "--out", str(out)], args.cap_gib)
        solver_s = json.loads(out.read_text())["stats"]["wall_s"] if out.exists() else float("nan")
    print(f"problem {args.ops} ops x {args.targets} targets, {args.solver}, --time-limit {args.time_limit}: "
          f"rc={rc} command wall={wall:.1f}s solve() wall={solver_s:.2f}s peak RSS={peak:.0f} MiB  {last}")
    return 0 if rc == 0 else 1


def cmd_from_json(args) -> int:
    from placer.problem import PlacementProblem
    from placer.solve.instances import random_layered

    for n in (int(s) for s in args.sizes.split(",")):
        d = random_layered(n, 4, seed=0).to_json()
        assert isinstance(d["cost_ms"], dict)
        t0 = time.monotonic()
        PlacementProblem.from_json(d)
        dt = time.monotonic() - t0
        print(f"from_json {n} ops x 4 targets ({{op: cost}} form): {dt:.2f}s ({dt / n * 1e6:.1f} us per op)")
    return 0


def cmd_tune(args) -> int:
    with tempfile.TemporaryDirectory() as d:
        rc, wall, peak, last = _run(["tune", "zoo:tiny", "--targets", "onnxruntime", "--trials",
                                     str(args.trials), "--budget", args.budget, "--out", str(Path(d) / "out"), "--db",
                                     str(Path(d) / "p.db")], args.cap_gib)
    print(f"tune zoo:tiny --trials {args.trials} --budget {args.budget}: rc={rc} wall={wall:.1f}s "
          f"(imports included) peak RSS={peak:.0f} MiB  {last}")
    return 0 if rc == 0 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cap-gib", type=float, default=8.0, help="address-space cap of the child (GiB)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("big-input")
    b.add_argument("--log2", type=int, default=26)
    b.set_defaults(func=cmd_big_input)
    b = sub.add_parser("problem")
    b.add_argument("--ops", type=int, default=100_000)
    b.add_argument("--targets", type=int, default=4)
    b.add_argument("--solver", default="greedy")
    b.add_argument("--time-limit", type=float, default=5.0)
    b.set_defaults(func=cmd_problem)
    b = sub.add_parser("from-json")
    b.add_argument("--sizes", default="25000,50000,100000")
    b.set_defaults(func=cmd_from_json)
    b = sub.add_parser("tune")
    b.add_argument("--trials", type=int, default=1000)
    b.add_argument("--budget", default="20s")
    b.set_defaults(func=cmd_tune)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
