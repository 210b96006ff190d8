"""The fast paths behind ``solve()`` on big problems (issue 19: 100,000 ops under a 5 s limit) give
exactly what the straightforward code gave: the canonical relisting built without re-validation,
the vectorized edges / schedule / transfers / greedy assignment; and a heuristic is not started once
the time limit is spent (a fake clock: nothing here depends on the machine's speed)."""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np
import pytest

import placer.solve as solve_mod
from placer.errors import ProblemError, TimeLimitError
from placer.problem import PlacementProblem, Tensor, _natural_key
from placer.solve import solve
from placer.solve.evaluate import Costs, latency_schedule, needed_transfers
from placer.solve.heuristics import priority_assign


def _random_problem(seed: int, n: int = 40, t: int = 3, *, caps: float | None = None, shared: bool = False,
                    extras: bool = True, ties: bool = False) -> PlacementProblem:
    """A random DAG listed in a shuffled order: model inputs, outputs, multi-consumer tensors listed
    in random order, pins, colocation groups, weights, provenance (``extras``), shared cores."""
    rng = np.random.default_rng(seed)
    names = [f"n{i}" if i % 3 else f"layer{i % 7}/op_{i}" for i in range(n)]
    cost = rng.uniform(0.0, 3.0, (n, t)).round(3)
    cost[rng.random((n, t)) < 0.2] = np.inf
    cost[np.arange(n), rng.integers(0, t, n)] = rng.uniform(0.0, 2.0, n).round(3)
    cost[rng.random(n) < 0.1, 0] = 0.0  # free ops
    if ties:  # costs that tie (tie-breaks matter)
        cost = np.where(np.isfinite(cost), np.ceil(cost), np.inf)
    tensors = [Tensor("x_in", None, tuple(rng.choice(names[:5], 2, replace=False)), 64)]
    for i in range(n - 1):
        later = rng.choice(np.arange(i + 1, n), size=min(n - i - 1, int(rng.integers(0, 4))), replace=False)
        cons = [names[j] for j in later]
        rng.shuffle(cons)
        tensors.append(Tensor(f"t{i}_{int(rng.integers(0, 3))}", names[i], tuple(cons), int(rng.integers(0, 1 << 16))))
        if rng.random() < 0.2:  # a second output of the same op (tensors then tie on the producer)
            tensors.append(Tensor(f"t{i}b", names[i], tuple(cons[:1]), 8))
    perm = rng.permutation(n)
    kw = {}
    if extras:
        support = np.isfinite(cost)
        pin_ops = [i for i in rng.choice(n, 3, replace=False)]
        kw["pinned"] = {names[i]: f"d{int(np.flatnonzero(support[i])[0])}" for i in pin_ops}
        free = [i for i in range(n) if i not in pin_ops and support[i].all()]
        groups = [free[k:k + 2] for k in range(0, min(len(free), 6), 2) if len(free[k:k + 2]) == 2]
        kw["colocate"] = [tuple(names[i] for i in reversed(g)) for g in groups]
        kw["weight_bytes"] = rng.integers(0, 100, n).astype(float)[perm]
        kw["provenance"] = {"seed": seed}
        kw["partition_overhead_ms"] = rng.uniform(0, 0.1, t)
    if caps is not None:
        kw["memory_cap_bytes"] = np.full(t, caps)
    if shared:
        kw["target_cores"] = {"d0": [0, 1], "d1": [1]}
    order = list(tensors)
    rng.shuffle(order)
    return PlacementProblem(ops=[names[i] for i in perm], targets=[f"d{j}" for j in range(t)], cost_ms=cost[perm],
                            tensors=order, link_latency_ms=rng.uniform(0, 0.2, (t, t)), link_ms_per_byte=1e-6,
                            link_charge="sender", **kw)


def _validated_canonical(p: PlacementProblem) -> PlacementProblem:
    """What ``canonical()`` built before the fast relisting: the listing, validated from scratch."""
    order = list(p.canonical_order)
    pos = {p.ops[i]: r for r, i in enumerate(order)}
    tensors = [Tensor(tt.name, tt.producer, tuple(sorted(tt.consumers, key=pos.__getitem__)), tt.nbytes)
               for tt in sorted(p.tensors, key=lambda tt: (-1 if tt.producer is None else pos[tt.producer],
                                                           _natural_key(tt.name)))]
    return PlacementProblem(
        ops=[p.ops[i] for i in order], targets=p.targets, cost_ms=p.cost_ms[order], tensors=tensors,
        link_latency_ms=p.link_latency_ms, link_ms_per_byte=p.link_ms_per_byte, link_charge=p.link_charge,
        memory_cap_bytes=p.memory_cap_bytes, weight_bytes=p.weight_bytes[order], pinned=dict(p.pinned),
        colocate=[tuple(sorted(g, key=pos.__getitem__)) for g in p.colocate],
        partition_overhead_ms=p.partition_overhead_ms, provenance=p.provenance,
        target_cores={d: list(c) for d, c in p.target_cores.items()}, link_broadcast=p.link_broadcast)


def _same_field(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b) and not a.flags.writeable
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("seed", range(12))
def test_the_relisted_canonical_problem_is_the_validated_one(seed):
    p = _random_problem(seed, caps=1e6 if seed % 2 else None, shared=seed % 3 == 0, extras=seed % 4 != 3)
    fast, ref = p.canonical(), _validated_canonical(p)
    assert fast is not p
    for f in dataclasses.fields(PlacementProblem):
        assert _same_field(getattr(fast, f.name), getattr(ref, f.name)), f.name
    assert all(type(tt) is Tensor for tt in fast.tensors)
    assert fast.to_json() == ref.to_json()
    # what the copy knows without computing it equals what it would compute
    for name in ("op_index", "tensor_producer", "tensor_consumers", "pipeline_units"):
        assert fast.__dict__[name] == getattr(ref, name), name
    assert fast.canonical() is fast and ref.canonical() == ref
    assert fast.canonical_order == tuple(range(p.n_ops))
    # and it solves alike
    for solver in ("greedy", "heft"):
        a, b = solve(fast, "latency", solver, time_limit=30), solve(ref, "latency", solver, time_limit=30)
        assert a.assignment == b.assignment and a.start_ms == b.start_ms and a.transfers == b.transfers


def test_edges_units_and_order_match_their_definitions():
    for seed in range(6):
        p = _random_problem(seed, extras=False)
        es = sorted({(u, v) for u, cs in zip(p.tensor_producer, p.tensor_consumers) if u >= 0 for v in cs})
        assert p.edges == tuple(es)
        assert p.preds == tuple(tuple(u for u, w in es if w == v) for v in range(p.n_ops))
        assert p.succs == tuple(tuple(w for u, w in es if u == v) for v in range(p.n_ops))
        pairs = [(k, u, v) for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)) if u >= 0
                 for v in cs]
        assert p.in_tensors == tuple(tuple(k for k, _, w in pairs if w == v) for v in range(p.n_ops))
        assert p.out_tensors == tuple(tuple(sorted({k for k, u, _ in pairs if u == v})) for v in range(p.n_ops))
        ptr, flat = p.in_tensor_arrays
        assert all(tuple(flat[ptr[v]:ptr[v + 1]].tolist()) == p.in_tensors[v] for v in range(p.n_ops))
        depth = [0] * p.n_ops
        for u, v in es:  # sorted by u: ops are stored in a topological order
            depth[v] = max(depth[v], depth[u] + 1)
        ref = sorted(range(p.n_ops), key=lambda i: (depth[i], _natural_key(p.ops[i])))
        assert p.pipeline_units == tuple((i,) for i in ref)  # no colocation: one op per unit


def _schedule_reference(p, assign, order, c):
    """The list scheduler's definition, op by op (the code before it was vectorized)."""
    start, end = np.zeros(p.n_ops), np.full(p.n_ops, np.nan)
    avail = [0.0] * p.n_targets
    for v in order:
        d = int(assign[v])
        t0 = 0.0
        for k in p.in_tensors[v]:
            u = p.tensor_producer[k]
            if np.isnan(end[u]):
                raise ProblemError("priority order is not topological")
            a = int(assign[u])
            t0 = max(t0, end[u] if a == d else end[u] + c.link[k, a, d] + c.entry[d])
        if c.cost[v, d] > 0:
            start[v] = max(t0, avail[d])
            end[v] = start[v] + c.cost[v, d]
            for d2 in (p.conflicts[d] if p.shares_resources else (d,)):
                avail[d2] = max(avail[d2], end[v])
        else:
            start[v] = end[v] = t0
    return start, end


@pytest.mark.parametrize("seed", range(8))
def test_schedule_and_transfers_match_their_definitions(seed):
    p = _random_problem(seed, shared=seed % 2 == 0, extras=False)
    rng = np.random.default_rng(seed)
    assign = np.array([rng.choice(np.flatnonzero(row)) for row in p.allowed])
    # a random topological order (Kahn, random ready op first)
    indeg = [len(x) for x in p.preds]
    ready = [(rng.random(), v) for v in range(p.n_ops) if indeg[v] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, v = heapq.heappop(ready)
        order.append(v)
        for w in p.succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(ready, (rng.random(), w))
    for c in (Costs.of(p), Costs.rounded(p, 0.01)):
        got, want = latency_schedule(p, assign, order, c), _schedule_reference(p, assign, order, c)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        ref = [(k, int(assign[u]), b, float(c.link[k, assign[u], b]), float(c.entry[b]))
               for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)) if u >= 0
               for b in sorted({int(assign[v]) for v in cs} - {int(assign[u])})]
        assert needed_transfers(p, assign, c) == ref
    with pytest.raises(ProblemError, match="not topological"):
        latency_schedule(p, assign, order[::-1])


@pytest.mark.parametrize("seed", range(8))
def test_the_uncapped_greedy_assignment_is_the_loop_s(seed):
    """Without memory caps priority_assign is vectorized; caps too large to bind run the unit-by-unit
    loop: the same choices, for every preference and both fallbacks."""
    uncapped = _random_problem(seed, t=4, ties=True)
    looped = PlacementProblem.from_json({**uncapped.to_json(), "memory_cap_bytes": {d: 1e300 for d in uncapped.targets}})
    rng = np.random.default_rng(seed)
    for _ in range(3):
        pref = [int(d) for d in rng.permutation(uncapped.n_targets)]
        for fast in (False, True):
            a = priority_assign(uncapped, pref, fastest_fallback=fast)
            b = priority_assign(looped, pref, fastest_fallback=fast)
            assert np.array_equal(a, b)


class _FakeClock:
    """``time`` for placer.solve: ``monotonic()`` reads a number the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_a_heuristic_is_not_started_once_the_limit_is_spent(monkeypatch):
    p = _random_problem(1, extras=False)
    clock = _FakeClock()
    monkeypatch.setattr(solve_mod, "time", clock)
    real = PlacementProblem.canonical
    started = []

    def slow_canonical(self):  # preparing the problem takes the whole limit (and a bit)
        clock.now += 5.01
        return real(self)

    monkeypatch.setattr(PlacementProblem, "canonical", slow_canonical)
    monkeypatch.setattr(type(solve_mod.get_solver("greedy")), "solve",
                        lambda self, problem, ctx: started.append(1))
    with pytest.raises(TimeLimitError, match=r"time limit of 5 s spent before solver 'greedy' could start: "
                                             r"preparing the problem \(40 ops.*took 5\.01 s"):
        solve(p, "latency", "greedy", time_limit=5)
    assert not started and issubclass(TimeLimitError, ProblemError)
    monkeypatch.setattr(PlacementProblem, "canonical", real)
    plan = solve(p, "latency", "heft", time_limit=5)  # within the limit (the clock stands still): solved
    plan.validate(p)
