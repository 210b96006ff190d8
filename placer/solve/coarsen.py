"""Coarsening: merge ops into super-ops, solve the smaller problem, expand the plan.

Merge rule
    Two super-ops ``U -> V`` are merged when ``U`` has the single successor ``V`` or ``V`` the
    single predecessor ``U`` (so contracting the edge cannot create a cycle), they can share a
    target (common allowed target with room for both weights, compatible pins, not two different
    colocation groups), and, with ``contiguous=True``, they are adjacent runs of the op order.
    Passes merge the cheapest such pairs first (each super-op at most once per pass), never
    creating a super-op costlier than ``max_share`` of the total cheapest work, until at most
    ``target_ops`` super-ops remain or nothing can merge.
Costs are kept exact
    A super-op costs the sum of its members on each target (``inf`` if any member is unsupported),
    weighs the sum of their weights, reads the tensors its members read from outside it and
    produces the tensors read outside it; tensors internal to a super-op vanish (same target).
    Placing a super-op = placing all its members on its target; its members run back to back.
    Hence every coarse plan is a valid fine plan: in pipeline mode with exactly the same stage
    costs; in latency mode the coarse schedule is feasible for the fine problem, so the fine
    re-timing (what the Plan reports) is never later. Coarsening only restricts the search space.
Expansion
    Fine assignment = the super-op's target; latency order = (super-op start, super-op index, op
    index); the plan is re-evaluated on the fine problem and records the merge in ``coarsening``.
"""

from __future__ import annotations

import numpy as np

from placer.problem import PlacementProblem, Tensor

__all__ = ["coarsen_problem", "expand_assignment", "expand_order"]


def coarsen_problem(problem: PlacementProblem, target_ops: int, contiguous: bool = False,
                    max_share: float = 0.02) -> tuple[PlacementProblem, list[list[int]]]:
    """Return ``(coarse_problem, members)``; ``members[j]`` are the fine op indices of coarse op ``j``."""
    p = problem
    n = p.n_ops
    parent = list(range(n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    cost = np.where(p.allowed, p.cost_ms, np.inf)
    sup_cost = {i: cost[i].copy() for i in range(n)}
    sup_w = {i: float(p.weight_bytes[i]) for i in range(n)}
    sup_pin = {i: int(p.pin_of[i]) for i in range(n)}
    sup_group = {i: int(p.group_of[i]) for i in range(n)}
    sup_lo = {i: i for i in range(n)}
    sup_hi = {i: i for i in range(n)}
    minc = cost.min(axis=1)
    limit = max_share * float(minc.sum())
    caps = p.memory_cap_bytes
    count = n
    while count > target_ops:
        roots = sorted({find(i) for i in range(n)})
        succ: dict[int, set[int]] = {r: set() for r in roots}
        pred: dict[int, set[int]] = {r: set() for r in roots}
        for u, v in p.edges:
            a, b = find(u), find(v)
            if a != b:
                succ[a].add(b)
                pred[b].add(a)
        cand = []
        for a in roots:
            for b in succ[a]:
                if len(succ[a]) != 1 and len(pred[b]) != 1:
                    continue
                if contiguous and sup_hi[a] + 1 != sup_lo[b]:
                    continue
                c = sup_cost[a] + sup_cost[b]
                ok = np.isfinite(c) & (caps >= sup_w[a] + sup_w[b])
                if sup_pin[a] >= 0 and sup_pin[b] >= 0 and sup_pin[a] != sup_pin[b]:
                    continue
                pin = max(sup_pin[a], sup_pin[b])
                if pin >= 0:
                    keep = ok[pin]
                    ok[:] = False
                    ok[pin] = keep
                if not ok.any():
                    continue
                if sup_group[a] >= 0 and sup_group[b] >= 0 and sup_group[a] != sup_group[b]:
                    continue
                weight = float(np.min(c[ok]))
                if weight > limit:
                    continue
                cand.append((weight, a, b))
        if not cand:
            break
        cand.sort()
        touched: set[int] = set()
        merged = 0
        for _, a, b in cand:
            if a in touched or b in touched or count - merged <= target_ops:
                continue
            touched.update((a, b))
            r, o = min(a, b), max(a, b)
            parent[o] = r
            sup_cost[r] = sup_cost[a] + sup_cost[b]
            sup_w[r] = sup_w[a] + sup_w[b]
            sup_pin[r] = max(sup_pin[a], sup_pin[b])
            sup_group[r] = max(sup_group[a], sup_group[b])
            sup_lo[r] = min(sup_lo[a], sup_lo[b])
            sup_hi[r] = max(sup_hi[a], sup_hi[b])
            merged += 1
        if not merged:
            break
        count -= merged

    by_root: dict[int, list[int]] = {}
    for i in range(n):
        by_root.setdefault(find(i), []).append(i)
    members = [by_root[r] for r in sorted(by_root)]
    return _build(p, members), members


def _build(p: PlacementProblem, members: list[list[int]]) -> PlacementProblem:
    idx_of = {}
    for j, mem in enumerate(members):
        for i in mem:
            idx_of[i] = j
    names = [p.ops[mem[0]] for mem in members]
    cost = np.array([p.cost_ms[mem].sum(axis=0) for mem in members])
    weights = np.array([float(p.weight_bytes[mem].sum()) for mem in members])
    tensors = []
    for k, tt in enumerate(p.tensors):
        u = p.tensor_producer[k]
        src = None if u < 0 else idx_of[u]
        cons = tuple(dict.fromkeys(names[idx_of[v]] for v in p.tensor_consumers[k] if idx_of[v] != src))
        tensors.append(Tensor(tt.name, None if src is None else names[src], cons, tt.nbytes))
    pinned = {}
    for o, tgt in p.pinned.items():
        pinned[names[idx_of[p.op_index[o]]]] = tgt
    groups = []
    for g in p.colocate:
        sup = sorted({idx_of[p.op_index[o]] for o in g})
        if len(sup) > 1:
            groups.append([names[j] for j in sup])
    return PlacementProblem(
        ops=names, targets=p.targets, cost_ms=cost, tensors=tensors, link_latency_ms=p.link_latency_ms,
        link_ms_per_byte=p.link_ms_per_byte, link_charge=p.link_charge, memory_cap_bytes=p.memory_cap_bytes,
        weight_bytes=weights, pinned=pinned, colocate=groups, partition_overhead_ms=p.partition_overhead_ms,
        provenance=p.provenance, target_cores=p.target_cores, link_broadcast=p.link_broadcast,
        cut_scale=p.cut_scale,
    )


def expand_assignment(fine: PlacementProblem, coarse: PlacementProblem, members: list[list[int]],
                      coarse_assign: dict[str, str]) -> np.ndarray:
    """Fine target indices from a coarse plan's assignment."""
    out = np.empty(fine.n_ops, dtype=int)
    for mem in members:
        d = fine.target_index[coarse_assign[fine.ops[mem[0]]]]
        out[mem] = d
    return out


def expand_order(fine: PlacementProblem, coarse: PlacementProblem, members: list[list[int]],
                 coarse_start: dict[str, float]) -> list[int]:
    """Fine priority order from coarse start times (super-op start, coarse index, op index)."""
    keys = []
    for mem in members:
        name = fine.ops[mem[0]]
        j = coarse.op_index[name]
        for i in mem:
            keys.append((coarse_start[name], j, i))
    keys.sort()
    return [i for _, _, i in keys]
