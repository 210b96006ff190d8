"""Group a plan's ops into partitions: connected same-target regions with an acyclic quotient graph.

Algorithm (deterministic; ops are visited in the graph's topological order)
--------------------------------------------------------------------------
1. **Greedy growth.** Each op ``v`` looks at the partitions of its producers (its *pred
   partitions*). Among those with the same key ``(target, stage)`` it joins the lowest-numbered
   one, ``P``, for which the join creates no cycle: none of the *other* pred partitions ``Q``
   depends on ``P`` (``P`` is not an ancestor of ``Q``), since ``v`` in ``P`` reading from ``Q``
   while ``Q`` reads from ``P`` would make the two partitions depend on each other both ways. If
   no pred partition qualifies, ``v`` opens a new partition. Ancestor sets (transitive
   predecessors in the partition quotient graph) are kept exact as partitions grow.
2. **Merge pass.** Two partitions with the same key and a direct edge ``A -> B`` are merged when
   no path leads from ``A`` to ``B`` through a third partition (the standard "merge if no path
   through another partition" check). This undoes choices step 1 made early (an op with two
   same-key pred partitions joins only one of them). Pairs are tried in index order, repeated until
   nothing merges.
3. **Order.** Partitions are sorted topologically in the quotient graph (Kahn's algorithm, ties
   broken by ``(stage, first op index)``) and named ``p0, p1, ...`` in that order; the ops of a
   partition keep the graph's topological order.

Partitions are connected through producer/consumer edges by construction (an op joins only a
partition it reads from) and never span stages (the stage is part of the key). A pipeline plan
must have ``stage(u) <= stage(v)`` on every edge; that is checked here (PlanError naming the edge).

Only numpy-free plain Python: the graph is used through the OpGraph contract
(``ops``, ``producer``, ``consumers``, ``inputs``, ``outputs``, ``tensors``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from placer.errors import PlanError
from placer.toposort import CycleError, topological_order


@dataclass(frozen=True)
class Partition:
    """A connected set of ops on one target (and one pipeline stage), run as one unit.

    ``inputs``/``outputs`` are tensor names in the order of the partition's ONNX sub-model
    (inputs: non-constant tensors read but not produced inside; outputs: tensors produced inside
    and read outside or model outputs). ``symbol`` is the Relax global symbol of its function.
    """

    id: str
    index: int
    target: str
    runtime: str
    stage: int
    ops: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    symbol: str = ""
    file: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "index": self.index,
            "target": self.target,
            "runtime": self.runtime,
            "stage": self.stage,
            "ops": list(self.ops),
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "symbol": self.symbol,
            "file": self.file,
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Partition":
        return Partition(
            id=d["id"],
            index=int(d["index"]),
            target=d["target"],
            runtime=d["runtime"],
            stage=int(d["stage"]),
            ops=tuple(d["ops"]),
            inputs=tuple(d["inputs"]),
            outputs=tuple(d["outputs"]),
            symbol=d.get("symbol", ""),
            file=d.get("file", ""),
        )


@dataclass(frozen=True)
class PartitionStats:
    n_partitions: int
    n_boundary_tensors: int
    boundary_bytes: int
    n_stages: int
    by_target: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_partitions": self.n_partitions,
            "n_boundary_tensors": self.n_boundary_tensors,
            "boundary_bytes": self.boundary_bytes,
            "n_stages": self.n_stages,
            "by_target": dict(self.by_target),
        }


# ---- graph helpers (OpGraph contract) -----------------------------------------------------------
def _name(x: Any) -> str:
    return x if isinstance(x, str) else x.name


def graph_input_names(graph) -> tuple[str, ...]:
    return tuple(_name(x) for x in graph.inputs)


def graph_output_names(graph) -> tuple[str, ...]:
    return tuple(_name(x) for x in graph.outputs)


def _is_constant(graph, tensor: str) -> bool:
    info = graph.tensors.get(tensor)
    return bool(info is not None and getattr(info, "is_constant", False))


def _op_inputs(op) -> tuple[str, ...]:
    """Non-empty inputs of an op, subgraph (If/Loop/Scan) outer-scope reads included."""
    return tuple(getattr(op, "all_inputs", None) or tuple(t for t in op.inputs if t))


def partition_io(graph, op_ids: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(inputs, outputs) of a set of ops (see :class:`Partition`); the graph's ``subgraph_io`` order."""
    if hasattr(graph, "subgraph_io"):
        ins, outs = graph.subgraph_io(list(op_ids))
        return tuple(ins), tuple(outs)
    members = set(op_ids)
    ops = sorted((graph.op(o) for o in members), key=lambda op: op.index)
    produced: set[str] = set()
    for op in ops:
        produced.update(t for t in op.outputs if t)
    model_outputs = set(graph_output_names(graph))
    inputs: list[str] = []
    seen: set[str] = set()
    for op in ops:
        for t in _op_inputs(op):
            if t in produced or t in seen or _is_constant(graph, t):
                continue
            seen.add(t)
            inputs.append(t)
    outputs: list[str] = []
    for op in ops:
        for t in op.outputs:
            if not t:
                continue
            outside = any(c not in members for c in graph.consumers.get(t, ()))
            if outside or t in model_outputs:
                outputs.append(t)
    return tuple(inputs), tuple(outputs)


# ---- the algorithm ------------------------------------------------------------------------------
def check_assignment(graph, assignment: Mapping[str, str], stage_of: Mapping[str, int] | None) -> None:
    """Every op assigned (and staged, in pipeline mode); no unknown op; stages monotone on edges."""
    ids = [op.id for op in graph.ops]
    missing = [o for o in ids if o not in assignment]
    if missing:
        raise PlanError(f"plan assigns no target to {len(missing)} op(s), e.g. {missing[:3]}")
    known = set(ids)
    extra = sorted(o for o in assignment if o not in known)
    if extra:
        raise PlanError(f"plan names op(s) not in model {graph.name!r}: {extra[:3]}")
    if stage_of is None:
        return
    missing = [o for o in ids if o not in stage_of]
    if missing:
        raise PlanError(f"pipeline plan gives no stage to {len(missing)} op(s), e.g. {missing[:3]}")
    for op in graph.ops:
        for t in _op_inputs(op):
            src = graph.producer.get(t)
            if src is not None and int(stage_of[src]) > int(stage_of[op.id]):
                raise PlanError(
                    f"pipeline plan runs op {src!r} (stage {stage_of[src]}) after its consumer {op.id!r} "
                    f"(stage {stage_of[op.id]}) on tensor {t!r}: stages must not decrease along edges"
                )


def group_ops(
    graph, assignment: Mapping[str, str], stage_of: Mapping[str, int] | None = None
) -> list[list[str]]:
    """The partition op lists, in topological order of the quotient graph (see module docstring)."""
    check_assignment(graph, assignment, stage_of)

    def key(op_id: str) -> tuple[str, int]:
        return (assignment[op_id], int(stage_of[op_id]) if stage_of is not None else 0)

    part_of: dict[str, int] = {}
    members: list[list[str]] = []
    keys: list[tuple[str, int]] = []
    anc: list[set[int]] = []  # exact transitive ancestor partitions

    for op in graph.ops:
        k = key(op.id)
        preds = sorted({part_of[graph.producer[t]] for t in _op_inputs(op) if t in graph.producer})
        chosen = None
        for p in preds:
            if keys[p] != k:
                continue
            if not any(p in anc[q] for q in preds if q != p):
                chosen = p
                break
        if chosen is None:
            chosen = len(members)
            members.append([])
            keys.append(k)
            anc.append(set())
        members[chosen].append(op.id)
        part_of[op.id] = chosen
        new = set()
        for q in preds:
            if q != chosen:
                new.add(q)
                new |= anc[q]
        if new - anc[chosen]:
            anc[chosen] |= new
            for r in range(len(members)):
                if chosen in anc[r]:
                    anc[r] |= new

    members = _merge_pass(graph, members, keys, part_of)
    return _topo_order(graph, members, stage_of)


def _quotient(graph, members: list[list[str]], part_of: Mapping[str, int]) -> list[set[int]]:
    succ: list[set[int]] = [set() for _ in members]
    for i, ops in enumerate(members):
        for o in ops:
            for t in graph.op(o).outputs:
                for c in graph.consumers.get(t, ()):
                    j = part_of[c]
                    if j != i:
                        succ[i].add(j)
    return succ


def _reach(succ: list[set[int]], start: int, skip_direct: int | None = None) -> set[int]:
    """Partitions reachable from ``start``, ignoring the direct edge ``start -> skip_direct``."""
    seen: set[int] = set()
    stack = [j for j in succ[start] if j != skip_direct]
    while stack:
        j = stack.pop()
        if j in seen:
            continue
        seen.add(j)
        stack.extend(succ[j])
    return seen


def _merge_pass(graph, members, keys, part_of) -> list[list[str]]:
    members = [list(m) for m in members]
    keys = list(keys)
    part_of = dict(part_of)
    changed = True
    while changed:
        changed = False
        succ = _quotient(graph, members, part_of)
        for a in range(len(members)):
            for b in sorted(succ[a]):
                if keys[a] != keys[b]:
                    continue
                if b in _reach(succ, a, skip_direct=b):
                    continue  # a path a -> c -> ... -> b exists: merging would create a cycle
                lo, hi = min(a, b), max(a, b)
                members[lo] = members[lo] + members[hi]
                for o in members[hi]:
                    part_of[o] = lo
                del members[hi]
                del keys[hi]
                for o, p in part_of.items():
                    if p > hi:
                        part_of[o] = p - 1
                changed = True
                break
            if changed:
                break
    return members


def _topo_order(graph, members: list[list[str]], stage_of) -> list[list[str]]:
    part_of = {o: i for i, ops in enumerate(members) for o in ops}
    succ = _quotient(graph, members, part_of)
    preds: list[list[int]] = [[] for _ in members]
    for i in range(len(members)):
        for j in succ[i]:
            preds[j].append(i)
    first = [min(graph.index_of(o) for o in ops) for ops in members]

    def prio(i: int):
        stage = int(stage_of[members[i][0]]) if stage_of is not None else 0
        return (stage, first[i], i)

    try:
        order = topological_order(range(len(members)), preds.__getitem__, key=prio)
    except CycleError:  # pragma: no cover - the construction keeps the quotient acyclic
        raise PlanError("internal error: partition quotient graph has a cycle") from None
    return [sorted(members[i], key=graph.index_of) for i in order]


def boundary_tensors(graph, partitions: Sequence[Partition]) -> list[str]:
    """Tensors produced by one partition and read by another (model inputs excluded), sorted."""
    produced = {t for p in partitions for t in p.outputs}
    read = {t for p in partitions for t in p.inputs}
    return sorted(produced & read)


def partition_stats(graph, partitions: Sequence[Partition]) -> PartitionStats:
    bt = boundary_tensors(graph, partitions)
    nbytes = 0
    for t in bt:
        info = graph.tensors.get(t)
        nbytes += int(getattr(info, "nbytes", 0) or 0)
    by_target: dict[str, int] = {}
    for p in partitions:
        by_target[p.target] = by_target.get(p.target, 0) + 1
    return PartitionStats(
        n_partitions=len(partitions),
        n_boundary_tensors=len(bt),
        boundary_bytes=nbytes,
        n_stages=len({p.stage for p in partitions}),
        by_target=dict(sorted(by_target.items())),
    )
