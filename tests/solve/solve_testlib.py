"""Random tiny placement problems for the solver tests (hypothesis strategies and plain generators).

All numbers are integers (ms) or integer multiples of 0.5, so CP-SAT's rounding is exact and
exact solvers can be compared with ``==`` up to float noise.
"""

from __future__ import annotations

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
