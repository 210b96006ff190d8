"""The knobs ``placer tune`` searches, and how each knob changes the placement problem.

Latency objective
-----------------
``boundary_ms``      extra entry cost per tensor a partition receives (0 .. 2 ms, log scale):
                     how strongly the solver avoids cutting the model.
``fuse``             keep runtime fusion groups (conv/matmul + bias/BN/activation chains) on one
                     target (colocation groups): cutting inside them loses the runtime's fusion.
``transfer_weight``  weight of total transfer time in the CP-SAT objective (0 .. 1).
``calibrate``        cost-model variant: op costs scaled to the measured whole-model time per
                     target (``True``) or raw isolated op costs (``False``).
``drop:<target>``    exclude a target from the plan (the target subset knob).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from placer.costing import fusion_groups  # noqa: F401  (re-exported: the tuner's fusion knob)

def default_knobs(targets: Sequence[str]) -> dict[str, Any]:
    knobs: dict[str, Any] = {"boundary_ms": 0.0, "fuse": True, "transfer_weight": 0.0, "calibrate": True}
    knobs.update({f"drop:{t}": False for t in targets})
    return knobs


def suggest_latency(trial, targets: Sequence[str]) -> dict[str, Any]:
    knobs: dict[str, Any] = {
        "boundary_ms": trial.suggest_categorical("boundary_ms", [0.0, 0.01, 0.03, 0.1, 0.3, 1.0]),
        "fuse": trial.suggest_categorical("fuse", [True, False]),
        "transfer_weight": trial.suggest_categorical("transfer_weight", [0.0, 0.1, 0.5]),
        "calibrate": trial.suggest_categorical("calibrate", [True, False]),
    }
    for t in targets:
        knobs[f"drop:{t}"] = trial.suggest_categorical(f"drop:{t}", [False, True])
    if all(knobs[f"drop:{t}"] for t in targets):  # keep at least one target
        knobs[f"drop:{targets[0]}"] = False
    return knobs


def latency_problem(ctx, knobs: dict[str, Any], fusion: list[list[str]], learned_entry_ms: np.ndarray):
    """The problem of ``ctx`` changed by ``knobs`` (and the entry cost learned so far)."""
    from placer.costing import build_problem

    if knobs.get("calibrate", True) and knobs.get("fuse", True):
        base = ctx.problem
    else:  # measured segment costs hold only for segments kept whole: without fusion, isolated op costs
        base = build_problem(ctx.graph, ctx.table, ctx.links, calibrate=knobs.get("calibrate", True),
                             use_segments=bool(knobs.get("fuse", True)), provenance=ctx.problem.provenance)
    cost = np.array(base.cost_ms, dtype=float)
    for j, t in enumerate(base.targets):
        if knobs.get(f"drop:{t}"):
            cost[:, j] = np.inf
    # an op supported nowhere after dropping falls back to its cheapest original target
    for i in np.flatnonzero(~np.isfinite(cost).any(axis=1)):
        j = int(np.argmin(base.cost_ms[i]))
        cost[i, j] = base.cost_ms[i, j]
    entry = np.asarray(learned_entry_ms, dtype=float) + float(knobs.get("boundary_ms", 0.0))
    groups = list(base.colocate) + ([tuple(g) for g in fusion] if knobs.get("fuse") else [])
    colocate = tuple(dict.fromkeys(tuple(g) for g in groups if _co_supported(cost, base.ops, g)))
    return dataclasses.replace(base, cost_ms=cost, partition_overhead_ms=entry, colocate=colocate)


def _co_supported(cost: np.ndarray, ops: Sequence[str], group: Sequence[str]) -> bool:
    idx = {o: i for i, o in enumerate(ops)}
    rows = cost[[idx[o] for o in group]]
    return bool(np.isfinite(rows).all(axis=0).any())
