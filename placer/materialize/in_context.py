"""A latency plan priced as its partitions will run: each by the target that ran just before it.

The solvers price a cut plan with one entry cost and one cut scale per target
(:func:`placer.costing.partition_pricing`): they cannot know which target runs before a partition,
since the partitions are what they decide. Once a plan is made, they are known: the hybrid
executor runs the partitions in :func:`placer.materialize.partition.group_ops`'s order, and each
request starts after the previous request's last partition (a cut plan's first partition is
entered from its last one's target). Measured, the predecessor matters: on hf-vit's probe plans an
OpenVINO-t2 piece cost 1.21-1.23x its price after ONNX Runtime t2 and 1.08-1.12x after a
one-thread target (:func:`placer.costing.pair_pricing`).

:func:`priced_as_run` re-times a latency plan with those prices: every op of a partition entered
from target ``a`` onto ``b`` costs ``cost x pair_scale[a>b]``, and the partition's first op pays
``pair_entry_ms[a>b]`` once, on its target (the executor's hand-off keeps the target busy); the
links still price each tensor's copy. Pairs the problem has no figure for, and partitions that
follow one on their own target, take the target's ``cut_scale`` and ``partition_overhead_ms`` (per
tensor received, as the solvers charge it). A plan on one target, a
pipeline plan, a problem without pair prices (``provenance["pair_scale"]``) or no ``graph`` returns
the plan as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from placer.materialize.partition import group_ops, partition_io
from placer.plan import latency_transfers
from placer.semantics import latency_schedule, resource_busy_ms

__all__ = ["priced_as_run"]


def priced_as_run(problem, graph, plan):
    """``plan`` (made on ``problem``, the model ``graph``) re-timed as its partitions will run (module
    docstring); its provenance keeps the solver's figure as ``solver_makespan_ms``."""
    prov = problem.provenance or {}
    pair_scale: Mapping[str, float] = prov.get("pair_scale") or {}
    pair_entry: Mapping[str, float] = prov.get("pair_entry_ms") or {}
    if graph is None or plan.mode != "latency" or not (pair_scale or pair_entry):
        return plan
    if len(set(plan.assignment.values())) <= 1:  # one target: priced as measured whole
        return plan
    targets = list(problem.targets)
    tidx = {t: j for j, t in enumerate(targets)}
    if any(plan.assignment.get(o) not in tidx for o in problem.ops):
        return plan
    row = {o: i for i, o in enumerate(problem.ops)}
    assign = np.array([tidx[plan.assignment[o]] for o in problem.ops], dtype=int)
    groups = group_ops(graph, {o: plan.assignment[o] for o in problem.ops})
    cost = np.array(problem.cost_ms, dtype=float)
    scale = np.asarray(problem.cut_scale, dtype=float)
    entry = np.asarray(problem.partition_overhead_ms, dtype=float)
    prev = tidx[plan.assignment[groups[-1][0]]]  # the previous request ended there
    for ops in groups:
        b = tidx[plan.assignment[ops[0]]]
        key = f"{targets[prev]}>{targets[b]}" if prev != b else None  # None: after its own target
        pos = [row[o] for o in ops]
        cost[pos, b] = cost[pos, b] * float(pair_scale.get(key, scale[b]))
        if key in pair_entry:  # the pair's entry once per partition
            cost[pos[0], b] += float(pair_entry[key])
        else:  # the target's own, per tensor received (as the solvers charge it)
            cost[pos[0], b] += float(entry[b]) * max(len(partition_io(graph, ops)[0]), 1)
        prev = b
    priced = dataclasses.replace(problem, cost_ms=cost, cut_scale=np.ones(len(targets)),
                                 partition_overhead_ms=np.zeros(len(targets)))
    order = sorted(range(len(problem.ops)), key=lambda i: (plan.start_ms.get(problem.ops[i], 0.0), i))
    start, end = latency_schedule(priced, assign, order)  # as the solvers' evaluation re-times a plan
    names = priced.ops
    return dataclasses.replace(
        plan, start_ms=dict(zip(names, start.tolist())), end_ms=dict(zip(names, end.tolist())),
        op_cost_ms=dict(zip(names, cost[np.arange(len(names)), assign].tolist())),
        transfers=latency_transfers(priced, assign, end),
        makespan_ms=float(end.max()), bottleneck_ms=float(resource_busy_ms(priced, assign).max()),
        provenance={**dict(plan.provenance), "priced": "as run: each partition by the target before it",
                    "solver_makespan_ms": float(plan.makespan_ms)})
