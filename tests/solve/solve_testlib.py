"""Random tiny placement problems for the solver tests (hypothesis strategies and plain generators).

All numbers are integers (ms) or integer multiples of 0.5, so CP-SAT's rounding is exact and
exact solvers can be compared with ``==`` up to float noise.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from placer.errors import ProblemError
from placer.problem import LINK_CHARGES, PlacementProblem, Tensor


def random_problem(rng: np.random.Generator, n_ops: int, n_targets: int, *, p_edge: float = 0.35,
                   p_inf: float = 0.2, charges: bool = True, groups: bool = True, memory: bool = True,
                   pins: bool = True, overhead: bool = True) -> PlacementProblem | None:
    """A random small problem, or None if the draw is invalid (e.g. infeasible memory)."""
    n, t = n_ops, n_targets
    ops = [f"op{i}" for i in range(n)]
    targets = [f"t{j}" for j in range(t)]
    cost = rng.integers(0, 10, size=(n, t)).astype(float)
    cost[rng.random((n, t)) < p_inf] = np.inf
    for i in range(n):
        if not np.isfinite(cost[i]).any():
            cost[i, rng.integers(t)] = float(rng.integers(1, 10))
    tensors = []
    for i in range(n):
        for j in range(int(rng.integers(0, 3))):
            later = [v for v in range(i + 1, n) if rng.random() < p_edge]
            if later or rng.random() < 0.2:
                tensors.append(Tensor(f"x{i}_{j}", ops[i], tuple(ops[v] for v in later),
                                      int(rng.choice([0, 1000, 2000, 5000]))))
    tensors.append(Tensor("input", None, tuple(ops[v] for v in range(n) if rng.random() < 0.3), 4000))
    lat = rng.integers(0, 4, size=(t, t)).astype(float)
    per_byte = rng.choice([0.0, 0.001], size=(t, t))
    charge = [[str(rng.choice(LINK_CHARGES)) for _ in range(t)] for _ in range(t)] if charges else "both"
    ov = rng.integers(0, 3, size=t).astype(float) if overhead and rng.random() < 0.5 else None
    colocate = []
    if groups and n >= 2 and rng.random() < 0.4:
        members = rng.choice(n, size=int(rng.integers(2, min(n, 3) + 1)), replace=False)
        colocate.append([ops[i] for i in sorted(members)])
    pinned = {}
    if pins and rng.random() < 0.3:
        i = int(rng.integers(n))
        sup = np.flatnonzero(np.isfinite(cost[i]))
        pinned[ops[i]] = targets[int(rng.choice(sup))]
    weights = caps = None
    if memory and rng.random() < 0.4:
        weights = rng.integers(0, 5, size=n).astype(float)
        caps = np.full(t, np.inf)
        j = int(rng.integers(t))
        caps[j] = float(rng.integers(0, int(weights.sum()) + 1))
    try:
        return PlacementProblem(ops=ops, targets=targets, cost_ms=cost, tensors=tensors, link_latency_ms=lat,
                                link_ms_per_byte=per_byte, link_charge=charge, memory_cap_bytes=caps,
                                weight_bytes=weights, pinned=pinned, colocate=colocate,
                                partition_overhead_ms=ov)
    except ProblemError:
        return None


@st.composite
def problems(draw, max_ops: int = 9, min_targets: int = 2, max_targets: int = 3, min_ops: int = 1,
             **kw) -> PlacementProblem:
    """Hypothesis strategy of random tiny problems (see :func:`random_problem`)."""
    seed = draw(st.integers(0, 2**32 - 1))
    n = draw(st.sampled_from(range(min_ops, max_ops + 1)))  # uniform: do not favour tiny graphs
    t = draw(st.sampled_from(range(min_targets, max_targets + 1)))
    p = random_problem(np.random.default_rng(seed), n, t, **kw)
    assume(p is not None)
    return p


def permuted(problem: PlacementProblem, rng: np.random.Generator) -> PlacementProblem:
    """The same problem listed in another order: ops, tensors, consumers and colocation members
    shuffled (the constructor sorts the ops topologically again, stably, so the stored order is
    usually another topological order)."""
    p = problem
    perm = rng.permutation(p.n_ops)

    def shuffle(xs) -> list:
        return [xs[i] for i in rng.permutation(len(xs))]

    tensors = [Tensor(t.name, t.producer, tuple(shuffle(list(t.consumers))), t.nbytes)
               for t in shuffle(list(p.tensors))]
    return PlacementProblem(
        ops=[p.ops[i] for i in perm], targets=p.targets, cost_ms=p.cost_ms[perm], tensors=tensors,
        link_latency_ms=p.link_latency_ms, link_ms_per_byte=p.link_ms_per_byte, link_charge=p.link_charge,
        memory_cap_bytes=p.memory_cap_bytes, weight_bytes=p.weight_bytes[perm], pinned=dict(p.pinned),
        colocate=[shuffle(list(g)) for g in p.colocate], partition_overhead_ms=p.partition_overhead_ms,
        provenance=p.provenance, target_cores={d: list(c) for d, c in p.target_cores.items()},
        link_broadcast=p.link_broadcast)


def perturbed(problem: PlacementProblem, rng: np.random.Generator, rel: float = 0.01) -> PlacementProblem:
    """The problem with op costs and link latencies scaled by random factors in ``[1, 1 + rel)``:
    numbers no longer multiples of a common resolution, so CP-SAT has to round them."""
    p = problem
    cost = p.cost_ms * (1 + rel * rng.random(p.cost_ms.shape))
    lat = p.link_latency_ms * (1 + rel * rng.random(p.link_latency_ms.shape))
    return dataclasses.replace(p, cost_ms=cost, link_latency_ms=lat)


def training_like(n_fwd: int, seed: int) -> PlacementProblem:
    """A training-like graph: forward chain with residuals, then the mirrored backward chain, each
    backward op reading its forward op's activation and feeding a weight update ``u<i>`` (a sink);
    the last 4 forward ops colocated with their backward ops (groups spanning the middle of the
    graph); a slow host target supporting everything and two fast accelerators missing a few ops."""
    rng = np.random.default_rng(seed)
    f = [f"f{i}" for i in range(n_fwd)]
    b = [f"b{i}" for i in range(n_fwd)]
    u = [f"u{i}" for i in range(n_fwd)]
    ops = f + ["loss"] + b + u
    tensors = [Tensor(f"w{i}", b[i], (u[i],), int(rng.integers(1, 4)) * 100_000) for i in range(n_fwd)]
    for i in range(n_fwd):
        cons = [f[i + 1] if i + 1 < n_fwd else "loss", b[i]]
        if i + 2 < n_fwd and i % 3 == 0:
            cons.append(f[i + 2])  # residual
        tensors.append(Tensor(f"a{i}", f[i], tuple(cons), int(rng.integers(1, 8)) * 100_000))
    tensors.append(Tensor("g", "loss", (b[n_fwd - 1],), 100_000))
    for i in range(n_fwd - 1, 0, -1):
        tensors.append(Tensor(f"g{i}", b[i], (b[i - 1],), int(rng.integers(1, 8)) * 100_000))
    tensors.append(Tensor("in", None, (f[0],), 600_000))
    n = len(ops)
    base = rng.lognormal(0.0, 0.6, size=n)
    cost = np.stack([base * 4.0, base * rng.uniform(0.8, 1.2, n), base * rng.uniform(0.8, 1.2, n)], axis=1)
    cost = np.round(cost, 3)
    cost[rng.random((n, 3)) < 0.05] = np.inf
    cost[:, 0] = np.round(base * 4.0, 3)
    groups = [[f[i], b[i]] for i in range(n_fwd - 4, n_fwd)]  # the last layers' fwd/bwd pairs
    return PlacementProblem(ops=ops, targets=["host", "acc0", "acc1"], cost_ms=cost, tensors=tensors,
                            link_latency_ms=0.01, link_ms_per_byte=1e-6, colocate=groups,
                            memory_cap_bytes=[np.inf, 1e9, 1e9])
