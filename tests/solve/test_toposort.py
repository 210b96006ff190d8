"""placer.toposort: graphlib's sorter with a priority (Kahn with a heap), one canonical cycle."""

from __future__ import annotations

import heapq
import random

import pytest

from placer.toposort import CycleError, topological_order


def _kahn(n: int, preds: list[set[int]], key) -> list[int]:
    """The hand-written priority Kahn the callers used before (the reference)."""
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(p) for p in preds]
    for v, ps in enumerate(preds):
        for u in ps:
            succ[u].append(v)
    heap = [(key(i), i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, u = heapq.heappop(heap)
        out.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (key(v), v))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_same_order_as_priority_kahn(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 60)
    perm = list(range(n))
    rng.shuffle(perm)  # a hidden topological order; edges go forward in it
    rank = {v: i for i, v in enumerate(perm)}
    preds = [{u for u in range(n) if rank[u] < rank[v] and rng.random() < 0.1} for v in range(n)]
    prio = [rng.randint(0, 3) for _ in range(n)]
    assert topological_order(range(n), preds.__getitem__) == _kahn(n, preds, lambda i: i)
    assert topological_order(range(n), preds.__getitem__, key=prio.__getitem__) == \
        _kahn(n, preds, lambda i: (prio[i], i))


def test_ties_by_position_then_key():
    preds = {"a": ["c"], "b": [], "c": []}
    assert topological_order(["c", "a", "b"], preds) == ["c", "a", "b"]
    assert topological_order(["c", "a", "b"], preds, key=str) == ["b", "c", "a"]


def test_a_cycle_is_reported_producers_first_from_its_earliest_node():
    with pytest.raises(CycleError) as exc:  # a -> b -> c -> a, and d hangs below the cycle
        topological_order(["d", "a", "b", "c"], {"a": ["c"], "b": ["a"], "c": ["b"], "d": ["c"]})
    assert exc.value.cycle == ["a", "b", "c", "a"]
    cycles = []
    for order in ([2, 1], [1, 2]):  # two cycles through 0; the same one is named whatever the order
        with pytest.raises(CycleError) as exc:
            topological_order([0, 1, 2], {0: order, 1: [0], 2: [1]})
        cycles.append(exc.value.cycle)
    assert cycles[0] == cycles[1] and cycles[0][0] == cycles[0][-1] == 0
    with pytest.raises(CycleError) as exc:
        topological_order([0], {0: [0]})
    assert exc.value.cycle == [0, 0]
