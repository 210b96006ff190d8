"""Placement-problem generators for tests and benchmarks (numbers only: no graph, no runtime).

* :func:`load_stg` / :func:`stg_optima`: task graphs of the Standard Task Graph Set (Tobita and
  Kasahara, 2002) as latency problems on identical targets with free transfers (P|prec|Cmax), and
  their known optimal makespans. The instances are not shipped with placer: the repository keeps
  twenty of them, with their optima, under ``tests/data/stg``.
* :func:`random_layered`: random layered DAGs on heterogeneous targets.
* :func:`training_graph`: DNN training operator graphs (forward/backward colocation pairs) on
  identical accelerators plus a CPU, with memory caps and broadcast links.

Each is deterministic for its arguments (seeded ``numpy`` generators). Used by ``tests/solve`` and
``experiments/bench_solver.py``.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import numpy as np

from placer.problem import PlacementProblem, Tensor

__all__ = ["load_stg", "random_layered", "stg_optima", "training_graph"]


def load_stg(path: str | os.PathLike, processors: int) -> PlacementProblem:
    """An STG task graph as a latency problem on ``processors`` identical targets, free transfers.

    Task ``0`` (dummy entry) is dropped; the dummy exit task is kept (cost 0). Each task produces
    one tensor read by all its successors.
    """
    tasks: dict[int, tuple[int, list[int]]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            fields = [int(x) for x in line.split()]
            tasks[fields[0]] = (fields[1], [q for q in fields[3:3 + fields[2]] if q != 0])
    ids = sorted(tasks)
    succ: dict[int, list[int]] = {i: [] for i in ids}
    for i in ids:
        for q in tasks[i][1]:
            succ[q].append(i)
    cost = np.array([[float(tasks[i][0])] * processors for i in ids])
    tensors = [Tensor(f"out{i}", f"task{i}", tuple(f"task{j}" for j in succ[i])) for i in ids if succ[i]]
    return PlacementProblem(ops=[f"task{i}" for i in ids], targets=[f"p{j}" for j in range(processors)],
                            cost_ms=cost, tensors=tensors,
                            provenance={"benchmark": "stg", "instance": str(path), "processors": processors})


def stg_optima(root: str | os.PathLike) -> list[tuple[str, int, int]]:
    """``(instance, processors, optimal_makespan)`` rows of ``root/optima.csv`` (an STG set as in the
    repository's ``tests/data/stg``: ``<size>/<instance>.stg`` files and their optima)."""
    with open(Path(root) / "optima.csv", encoding="utf-8") as f:
        return [(r["instance"], int(r["processors"]), int(r["optimal_makespan"])) for r in csv.DictReader(f)]


def random_layered(n_ops: int, n_targets: int, seed: int = 0, *, p_unsupported: float = 0.1,
                   skip_prob: float = 0.1) -> PlacementProblem:
    """A random layered DAG placement problem with heterogeneous targets.

    * ``round(2 sqrt(n))`` layers of random width; every op after the first layer reads the output
      of 1-3 ops of the previous layer and, with probability ``skip_prob``, one of an earlier layer.
      Each op produces one tensor (log-uniform 16 KB - 4 MB) read by all its successors.
    * Base op cost log-normal (median 0.2 ms); target ``d`` is ``speed_d`` times faster
      (target 0 = 1, others uniform in [0.4, 2.5]) with per-(op, target) log-normal noise
      (sigma 0.4); targets other than 0 lack a fraction ``p_unsupported`` of the ops.
    * Links: 20 us latency + 1 ms / 10 MB (about 10 GB/s), charged to both sides; partition entry
      overhead 5 us on every target.
    """
    rng = np.random.default_rng(seed)
    n, t = n_ops, n_targets
    n_layers = max(2, min(n, round(2 * math.sqrt(n))))
    cuts = np.sort(rng.choice(np.arange(1, n), size=n_layers - 1, replace=False))
    layer_of = np.searchsorted(cuts, np.arange(n), side="right")
    layers = [np.flatnonzero(layer_of == li) for li in range(n_layers)]
    ops = [f"op{i}" for i in range(n)]
    preds: list[set[int]] = [set() for _ in range(n)]
    for li in range(1, n_layers):
        prev = layers[li - 1]
        for v in layers[li]:
            k = int(min(len(prev), rng.integers(1, 4)))
            preds[v].update(int(u) for u in rng.choice(prev, size=k, replace=False))
            if li >= 2 and rng.random() < skip_prob:
                earlier = np.concatenate(layers[:li - 1])
                preds[v].add(int(rng.choice(earlier)))
    succs: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        for u in preds[v]:
            succs[u].append(v)
    base = rng.lognormal(np.log(0.2), 0.8, size=n)
    speed = np.concatenate([[1.0], rng.uniform(0.4, 2.5, size=t - 1)])
    cost = base[:, None] / speed[None, :] * rng.lognormal(0.0, 0.4, size=(n, t))
    cost = np.round(cost, 4)
    unsupported = rng.random((n, t)) < p_unsupported
    unsupported[:, 0] = False
    cost[unsupported] = np.inf
    tensors = []
    for u in range(n):
        nbytes = int(np.exp(rng.uniform(np.log(16e3), np.log(4e6))))
        tensors.append(Tensor(f"t{u}", ops[u], tuple(ops[v] for v in sorted(succs[u])), nbytes))
    tensors.append(Tensor("input", None, tuple(ops[v] for v in layers[0]), 600_000))
    return PlacementProblem(
        ops=ops, targets=[f"dev{d}" for d in range(t)], cost_ms=cost, tensors=tensors,
        link_latency_ms=0.02, link_ms_per_byte=1e-7, link_charge="both", partition_overhead_ms=0.005,
        provenance={"benchmark": "random_layered", "n_ops": n, "n_targets": t, "seed": seed},
    )


def _block_ops(kind: str, b: int) -> list[tuple[str, str, list[str]]]:
    """Forward ops ``(name, op type, input op names)`` of block ``b`` (its input is ``x{b}``)."""
    x = f"x{b}"
    if kind == "transformer":
        n = lambda s: f"{s}{b}"
        return [(n("ln1_"), "norm", [x]), (n("q"), "matmul", [n("ln1_")]), (n("k"), "matmul", [n("ln1_")]),
                (n("v"), "matmul", [n("ln1_")]), (n("qk"), "bmm", [n("q"), n("k")]),
                (n("softmax"), "softmax", [n("qk")]), (n("av"), "bmm", [n("softmax"), n("v")]),
                (n("proj"), "matmul", [n("av")]), (n("add1_"), "add", [x, n("proj")]),
                (n("ln2_"), "norm", [n("add1_")]), (n("fc1_"), "matmul4", [n("ln2_")]),
                (n("gelu"), "act", [n("fc1_")]), (n("fc2_"), "matmul4", [n("gelu")]),
                (f"x{b + 1}", "add", [n("add1_"), n("fc2_")])]
    n = lambda s: f"{s}{b}"
    ops = [(n("c1_"), "conv1", [x]), (n("bn1_"), "bn", [n("c1_")]), (n("r1_"), "act", [n("bn1_")]),
           (n("c2_"), "conv3", [n("r1_")]), (n("bn2_"), "bn", [n("c2_")]), (n("r2_"), "act", [n("bn2_")]),
           (n("c3_"), "conv1", [n("r2_")]), (n("bn3_"), "bn", [n("c3_")])]
    short = x
    if b % 4 == 0:  # a downsampling block: projection shortcut
        ops += [(n("cs"), "conv1", [x]), (n("bns"), "bn", [n("cs")])]
        short = n("bns")
    ops += [(n("add"), "add", [n("bn3_"), short]), (f"x{b + 1}", "act", [n("add")])]
    return ops


#: Accelerator forward time (ms, median) and weights (MB) of each op type; backward = ``bwd`` x forward.
_OP_TYPES = {  # type: (fwd ms, spread sigma, bwd factor, weight MB, activation MB)
    "matmul": (0.6, 0.3, 2.0, 2.4, 3.0), "matmul4": (2.4, 0.3, 2.0, 9.4, 12.0),
    "bmm": (0.5, 0.3, 2.0, 0, 6.0),
    "softmax": (0.15, 0.4, 1.0, 0, 6.0), "norm": (0.06, 0.4, 1.5, 0.01, 3.0), "add": (0.03, 0.4, 0.5, 0, 3.0),
    "act": (0.05, 0.4, 1.0, 0, 6.0), "conv1": (0.5, 0.5, 2.0, 1.0, 4.0), "conv3": (1.2, 0.5, 2.0, 2.3, 4.0),
    "bn": (0.08, 0.4, 1.5, 0.01, 4.0), "embed": (0.2, 0.2, 1.0, 90.0, 3.0), "loss": (0.3, 0.2, 1.0, 2.4, 0.1),
}


def training_graph(kind: str, n_ops: int, n_acc: int, seed: int = 0, *, mem_slack: float = 1.5,
                   broadcast: bool = True) -> PlacementProblem:
    """A DNN training operator graph on ``n_acc`` identical accelerators plus one CPU.

    * ``kind="transformer"``: an embedding, then blocks of 14 ops (layer norm, Q/K/V matmuls,
      attention, projection, residual add, MLP with a residual add), then a loss;
      ``kind="cnn"``: a ResNet-style stem, then bottleneck blocks of 10-12 ops (three conv+BN
      (+ReLU), a projection shortcut every fourth block, residual add, ReLU), then a loss. Blocks
      are added until the graph has about ``n_ops`` ops, forward and backward together.
    * Every forward op ``f`` has a backward op ``f_bwd`` colocated with it (a colocation pair).
      In a monotone pipeline every edge goes forward, so the backward pass is written as the
      pipeline contraction of Tarnawski et al. (2020): ``f_bwd`` reads the activations ``f``
      read (the stashed inputs: same destination as ``f``, so no extra copy) and produces the
      gradient of ``f``'s output, read by the backward ops of ``f``'s consumers: a tensor of the
      activation's size crossing the same stage boundary as the activation (a real gradient
      flows the other way, which would fold the whole graph into one unit).
    * Costs: log-normal around a per-type median on the accelerators (identical columns), the
      backward op ``bwd`` times its forward op; the CPU 8-40x slower. Weights per type (the
      embedding is big), memory cap of each accelerator ``mem_slack`` x total weights / n_acc.
    * Links: 20 us + 10 GB/s; copies between accelerators charge both sides, the CPU pays no
      communication (``sender`` towards it, ``receiver`` from it); ``links.broadcast`` (default on):
      a tensor sent to several stages costs its sender once.
    """
    rng = np.random.default_rng(seed)
    fwd: list[tuple[str, str, list[str]]] = [("x0", "embed" if kind == "transformer" else "conv3", [])]
    per_block = 14 if kind == "transformer" else 11
    b = 0
    while 2 * (len(fwd) + per_block + 1) <= n_ops or b == 0:
        fwd += _block_ops(kind, b)
        b += 1
    fwd.append(("loss", "loss", [f"x{b}"]))
    names = [f for f, _, _ in fwd]
    consumers: dict[str, list[str]] = {f: [] for f in names}
    for f, _, ins in fwd:
        for u in ins:
            consumers[u].append(f)
    ops = names + [f + "_bwd" for f in names]
    t = n_acc + 1
    base = np.array([_OP_TYPES[ty][0] for _, ty, _ in fwd]) * rng.lognormal(
        0.0, np.array([_OP_TYPES[ty][1] for _, ty, _ in fwd]))
    bwd = base * np.array([_OP_TYPES[ty][2] for _, ty, _ in fwd]) * rng.lognormal(0.0, 0.1, len(fwd))
    acc = np.round(np.concatenate([base, bwd]), 4)
    cpu = np.round(acc * rng.uniform(8.0, 40.0, len(acc)), 4)
    cost = np.concatenate([np.tile(acc[:, None], (1, n_acc)), cpu[:, None]], axis=1)
    weights = np.array([_OP_TYPES[ty][3] * 1e6 for _, ty, _ in fwd] + [0.0] * len(fwd))
    act_mb = {f: _OP_TYPES[ty][4] * rng.uniform(0.8, 1.2) for f, ty, _ in fwd}
    tensors = [Tensor("input", None, ("x0",), 600_000)]
    for f, _, ins in fwd:
        nbytes = int(act_mb[f] * 1e6)
        readers = tuple(consumers[f]) + tuple(c + "_bwd" for c in consumers[f])
        tensors.append(Tensor(f"{f}.out", f, readers, nbytes))
        if consumers[f]:
            tensors.append(Tensor(f"{f}.grad", f + "_bwd", tuple(c + "_bwd" for c in consumers[f]), nbytes))
    targets = [f"acc{d}" for d in range(n_acc)] + ["cpu"]
    charge = [["both"] * t for _ in range(t)]
    for d in range(n_acc):
        charge[d][n_acc] = "sender"
        charge[n_acc][d] = "receiver"
    caps = [mem_slack * weights.sum() / n_acc] * n_acc + [math.inf]
    return PlacementProblem(
        ops=ops, targets=targets, cost_ms=cost, tensors=tensors, link_latency_ms=0.02, link_ms_per_byte=1e-7,
        link_charge=charge, link_broadcast=broadcast, memory_cap_bytes=caps, weight_bytes=weights,
        colocate=[[f, f + "_bwd"] for f in names],
        provenance={"benchmark": "training_graph", "kind": kind, "n_ops": len(ops), "n_acc": n_acc,
                    "seed": seed})
