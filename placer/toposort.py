"""The one topological sort of placer: :class:`graphlib.TopologicalSorter` with a priority.

Every caller wants a *deterministic* order with its own tie-breaking: among the nodes whose
predecessors are all placed, the one with the smallest ``key`` goes next (Kahn's algorithm with
a priority queue). :func:`topological_order` drives the standard library's sorter that way
(``get_ready`` feeds a heap, ``done`` releases a node's successors), so the order is exactly the
priority Kahn order. Callers and their keys:

* :mod:`placer.graph.load`: ONNX nodes, ties broken by their position in the file;
* :class:`placer.problem.PlacementProblem`: ops, ties broken by their listed position;
* :mod:`placer.materialize.partition`: partitions by ``(stage, first op, index)``;
* :func:`placer.semantics.stage_order`: the targets of a pipeline by their first op.

A cycle raises :class:`CycleError` (:class:`graphlib.CycleError`) whose :attr:`CycleError.cycle`
lists one cycle, producers first, starting at its earliest node and ending with it again
(``[a, b, c, a]``: ``a`` feeds ``b`` feeds ``c`` feeds ``a``).
"""

from __future__ import annotations

import graphlib
import heapq
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["CycleError", "topological_order"]

N = TypeVar("N", bound=Hashable)


class CycleError(graphlib.CycleError):
    """The graph has a cycle; :attr:`cycle` is one of them (see the module docstring)."""

    def __init__(self, cycle: list[Any]):
        super().__init__("the graph has a cycle", cycle)
        self.cycle = cycle


def topological_order(nodes: Sequence[N], predecessors: Mapping[N, Iterable[N]] | Callable[[N], Iterable[N]],
                      key: Callable[[N], Any] | None = None) -> list[N]:
    """``nodes`` in a topological order; among ready nodes the smallest ``key`` first.

    Parameters
    ----------
    nodes
        Every node, once (the position in this sequence is the last tie-breaker, and the default key).
    predecessors
        ``node -> the nodes it depends on`` (a mapping or a function); each must be in ``nodes``.
    key
        Priority of a ready node (smaller first); default: its position in ``nodes``.

    Raises
    ------
    CycleError
        If the dependencies form a cycle (a node depending on itself included).

    Examples
    --------
    >>> topological_order(["c", "a", "b"], {"a": ["c"], "b": [], "c": []})
    ['c', 'a', 'b']
    >>> topological_order(["c", "a", "b"], {"a": ["c"], "b": [], "c": []}, key=str)
    ['b', 'c', 'a']
    """
    pos = {n: i for i, n in enumerate(nodes)}
    preds = predecessors if callable(predecessors) else predecessors.get
    ts: graphlib.TopologicalSorter = graphlib.TopologicalSorter()
    for n in nodes:
        ts.add(n, *(preds(n) or ()))
    try:
        ts.prepare()
    except graphlib.CycleError:
        raise CycleError(_cycle(nodes, preds, pos)) from None
    prio = (lambda n: (pos[n],)) if key is None else (lambda n: (key(n), pos[n]))
    ready = [(prio(n), n) for n in ts.get_ready()]
    heapq.heapify(ready)
    order: list[N] = []
    while ready:
        _, n = heapq.heappop(ready)
        order.append(n)
        ts.done(n)
        for m in ts.get_ready():
            heapq.heappush(ready, (prio(m), m))
    return order


def _cycle(nodes: Sequence[N], preds: Callable[[N], Iterable[N]], pos: Mapping[N, int]) -> list[N]:
    """One cycle, the same whatever the order of each node's predecessors: the sorter's, on the
    graph rebuilt in ``nodes`` order, rotated to start at its earliest node."""
    ts: graphlib.TopologicalSorter = graphlib.TopologicalSorter()
    for n in nodes:  # every node first: the sorter then visits them in this order
        ts.add(n)
    for n in nodes:
        ts.add(n, *sorted(preds(n) or (), key=pos.__getitem__))
    try:
        ts.prepare()
    except graphlib.CycleError as exc:
        cyc = list(exc.args[1])[:-1]
    else:  # pragma: no cover - called only after the sorter found a cycle
        raise AssertionError("no cycle")
    start = min(range(len(cyc)), key=lambda i: pos[cyc[i]])
    cyc = cyc[start:] + cyc[:start]
    return cyc + [cyc[0]]
