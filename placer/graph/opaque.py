"""Opaque regions: control flow and data-dependent shapes contracted into one op each.

placer prices and places ops by their static shapes. A model with ``Loop`` / ``If`` / ``Scan``
or with shapes that depend on the data (``NonZero``, a ``Reshape`` to a computed shape, ...)
has tensors whose shape shape inference cannot give. Instead of refusing such a model,
:func:`contract_dynamic` (called by :func:`placer.graph.load_model` after folding) finds the
*dynamic nodes*:

* every node with a subgraph (If, Loop, Scan, ...), whatever its output shapes;
* every node that produces or reads a tensor without a static inferred shape (so everything
  downstream of a data-dependent shape, up to where shapes are static again, e.g. a reduction);

joins nodes that share a dynamic tensor into one region, makes each region convex (a node on a
path that leaves the region and comes back joins it, so the contracted graph has no cycle), and
replaces each region by ONE node ``opaque_<k>`` of domain :data:`OPAQUE_DOMAIN` calling a
model-local ``FunctionProto`` that holds the region's original nodes (subgraphs included). The
region's inputs are every tensor its nodes read from outside it (the outer-scope tensors an
If / Loop body reads included, constants too); its outputs are the tensors it produces that a node
outside it or the graph's outputs read. Every one of them has a static shape by construction (a
dynamic tensor keeps its producer and all its readers in one region), so the rest of placer
sees an ordinary op with exact boundary shapes and transfer bytes.

The contracted model is still a valid ONNX model (IR >= 8) that ONNX Runtime and OpenVINO run,
inlining the function; TVM's Relax importer has no converter for the domain, so a region is
never placed there. A graph *output* whose shape depends on the data cannot be a region
boundary: such a model is refused with a clear error.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Mapping

import onnx

from placer.errors import GraphError
from placer.graph import proto as P

__all__ = ["OPAQUE_DOMAIN", "contract_dynamic", "describe_members", "describe_regions", "function_of", "is_opaque"]

#: Domain of the contracted region ops (and of their model-local functions).
OPAQUE_DOMAIN = "placer.opaque"
#: Model-local functions need IR version 8.
MIN_IR_FOR_FUNCTIONS = 8


def is_opaque(domain: str) -> bool:
    """Whether an op of ``domain`` is a contracted opaque region."""
    return domain == OPAQUE_DOMAIN


def function_of(model: onnx.ModelProto, op_type: str) -> onnx.FunctionProto | None:
    """The model-local function an opaque op of type ``op_type`` calls, or None."""
    for f in model.functions:
        if f.domain == OPAQUE_DOMAIN and f.name == op_type:
            return f
    return None


def describe_regions(graph) -> dict[str, str]:
    """op id -> one line on the region it stands for (``"3 nodes: NonZero, Transpose, GatherND"``),
    for every opaque op of an :class:`~placer.graph.OpGraph`, in op order."""
    out: dict[str, str] = {}
    for op in graph.ops:
        if not is_opaque(op.domain):
            continue
        fn = function_of(graph.model, op.op_type)
        kinds = list(dict.fromkeys(n.op_type for n in fn.node)) if fn is not None else []
        n = len(fn.node) if fn is not None else 0
        out[op.id] = f"{n} node{'s' if n != 1 else ''}: {', '.join(kinds)}"
    return out


def describe_members(graph, op, limit: int = 6) -> str:
    """The nodes an opaque op stands for, by name and kind (``"frob2 (com.example::Frobnicate), n3
    (Relu)"``, at most ``limit`` of them): what an error about the region names for the user."""
    fn = function_of(graph.model, op.op_type)
    nodes = list(fn.node) if fn is not None else []
    shown = [f"{n.name or '?'} ({f'{n.domain}::{n.op_type}' if n.domain else n.op_type})" for n in nodes[:limit]]
    more = f" and {len(nodes) - limit} more" if len(nodes) > limit else ""
    return ", ".join(shown) + more


def _reads(n: onnx.NodeProto) -> list[str]:
    names = list(n.input) + (P.subgraph_outer_refs(n) if P.has_subgraph(n) else [])
    return list(dict.fromkeys(t for t in names if t))


class _Sets:
    """Union-find over node indices."""

    def __init__(self, items) -> None:
        self.parent = {i: i for i in items}

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for i in sorted(self.parent):
            out.setdefault(self.find(i), []).append(i)
        return out


def contract_dynamic(
    model: onnx.ModelProto,
    types: Mapping[str, onnx.ValueInfoProto],
    where: str,
    describe: Callable[[onnx.NodeProto], str] = lambda n: f"node '{n.name}' ({n.op_type})",
) -> dict[str, onnx.ValueInfoProto]:
    """Contract the dynamic regions of ``model`` (modified in place) into opaque ops.

    ``types`` are the inferred value infos of the (folded) model. Returns the value infos of the
    regions' outputs (static: inference of a function call may not recover them). Empty and
    the model untouched when there is nothing dynamic.
    """
    g = model.graph
    nodes = list(g.node)
    static = _static_test(types, {t.name for t in g.initializer})
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    reads = [_reads(n) for n in nodes]
    dynamic = {
        i for i, n in enumerate(nodes)
        if P.has_subgraph(n) or any(not static(t) for t in n.output if t)
        or any(not static(t) for t in reads[i])
    }
    if not dynamic:
        return {}
    for o in g.output:
        if o.name in producer and not static(o.name):
            n = nodes[producer[o.name]]
            raise GraphError(
                f"{where}: graph output '{o.name}' produced by {describe(n)} has a data-dependent shape; "
                "placer keeps dynamic regions inside the model as opaque ops but needs static graph outputs"
            )
    users: list[list[int]] = [[] for _ in nodes]
    for i, names in enumerate(reads):
        for t in names:
            if t in producer:
                users[producer[t]].append(i)
    sets = _Sets(dynamic)
    for i in dynamic:  # a dynamic tensor keeps its producer and its readers together
        for t in reads[i]:
            if not static(t) and t in producer:
                sets.union(i, producer[t])
    regions = _convex(sets, users, reads, producer)
    calls, boundary = _region_calls(model, nodes, regions, reads, users, static, types, where)
    order = _contracted_order(nodes, regions, calls, reads)
    if order is None:  # _convex prevents it
        raise GraphError(f"{where}: contracting the dynamic regions left a cycle")
    del g.node[:]
    g.node.extend(order)
    if not any(o.domain == OPAQUE_DOMAIN for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(OPAQUE_DOMAIN, 1))
    model.ir_version = max(model.ir_version, MIN_IR_FOR_FUNCTIONS)
    return boundary


def _static_test(types: Mapping[str, onnx.ValueInfoProto], constants: set[str]) -> Callable[[str], bool]:
    """``static(t)``: whether tensor ``t`` is a constant or has a known element type and a static
    inferred shape."""

    def static(t: str) -> bool:
        if t in constants:
            return True
        vi = types.get(t)
        tt = P.tensor_type_of(vi) if vi is not None else None
        return tt is not None and tt[0] != 0 and P.is_static(tt[1])

    return static


def _region_calls(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    regions: list[list[int]],
    reads: list[list[str]],
    users: list[list[int]],
    static: Callable[[str], bool],
    types: Mapping[str, onnx.ValueInfoProto],
    where: str,
) -> tuple[dict[int, onnx.NodeProto], dict[str, onnx.ValueInfoProto]]:
    """``(calls, boundary)``: region index -> the node calling its function (added to
    ``model.functions``, once per distinct body), and the value infos of the regions' outputs."""
    outputs_of_model = {o.name for o in model.graph.output}
    taken = {n.name for n in nodes}
    opset_ir = [o for o in model.opset_import if o.domain != OPAQUE_DOMAIN]
    new_nodes: dict[int, onnx.NodeProto] = {}  # region index -> its call node
    known_functions = {f.name for f in model.functions if f.domain == OPAQUE_DOMAIN}
    boundary: dict[str, onnx.ValueInfoProto] = {}
    for k, members in enumerate(regions):
        inside = set(members)
        produced = {o for i in members for o in nodes[i].output if o}
        ins = list(dict.fromkeys(t for i in members for t in reads[i] if t not in produced))
        outs = [
            o for i in members for o in nodes[i].output
            if o and (o in outputs_of_model or any(u not in inside for u in users[i] if o in reads[u]))
        ]
        outs = list(dict.fromkeys(outs))
        for o in outs:
            if not static(o):  # cannot happen: a dynamic tensor's readers are all inside
                raise GraphError(f"{where}: region output '{o}' has no static shape")
            boundary[o] = types[o]
        body = [nodes[i] for i in members]
        fn = onnx.helper.make_function(
            OPAQUE_DOMAIN, "", ins, outs, body, opset_ir,
            doc_string=f"placer opaque region of {len(body)} node(s): " + ", ".join(n.name for n in body[:8]),
        )
        digest = hashlib.sha256(fn.SerializeToString(deterministic=True)).hexdigest()[:12]
        fn.name = f"Opaque_{digest}"
        if fn.name not in known_functions:
            known_functions.add(fn.name)
            model.functions.append(fn)
        name, j = f"opaque_{k}", 1
        while name in taken:
            name, j = f"opaque_{k}_{j}", j + 1
        taken.add(name)
        new_nodes[k] = onnx.helper.make_node(fn.name, ins, outs, name=name, domain=OPAQUE_DOMAIN)
    return new_nodes, boundary


def _contracted_order(
    nodes: list[onnx.NodeProto],
    regions: list[list[int]],
    calls: Mapping[int, onnx.NodeProto],
    reads: list[list[str]],
) -> list[onnx.NodeProto] | None:
    """The nodes of the contracted graph (each region's call in place of its first member) in a
    stable topological order (ties: the first original index of a unit); None if it has a cycle."""
    region_of = {i: k for k, members in enumerate(regions) for i in members}
    units: list[tuple[int, onnx.NodeProto, list[str]]] = []
    for i, n in enumerate(nodes):
        if i not in region_of:
            units.append((i, n, reads[i]))
        elif regions[region_of[i]][0] == i:
            call = calls[region_of[i]]
            units.append((i, call, list(call.input)))
    unit_producer = {o: u for u, (_, n, _) in enumerate(units) for o in n.output if o}
    deps = [{unit_producer[t] for t in r if t in unit_producer} for _, _, r in units]
    after: list[list[int]] = [[] for _ in units]
    for u, d in enumerate(deps):
        for p in d:
            after[p].append(u)
    indeg = [len(d) for d in deps]
    ready = [(units[u][0], u) for u in range(len(units)) if indeg[u] == 0]
    heapq.heapify(ready)
    order: list[onnx.NodeProto] = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(units[u][1])
        for v in after[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, (units[v][0], v))
    return order if len(order) == len(units) else None


def _convex(sets: _Sets, users: list[list[int]], reads: list[list[str]], producer: dict[str, int]) -> list[list[int]]:
    """Regions (sorted node indices, in index order) closed under paths that leave and re-enter."""
    while True:
        groups = sets.groups()
        grown = False
        for members in groups.values():
            inside = set(members)
            down = _reach(members, lambda i: users[i]) - inside
            if not down:
                continue
            up = _reach(members, lambda i: [producer[t] for t in reads[i] if t in producer]) - inside
            between = down & up
            if between:
                for i in between:
                    if i not in sets.parent:
                        sets.parent[i] = i
                    sets.union(members[0], i)
                grown = True
                break
        if not grown:
            break
    # A region may now overlap another one's members through the added nodes: union-find merged them.
    return sorted(sets.groups().values(), key=lambda m: m[0])


def _reach(start: list[int], step: Callable[[int], list[int]]) -> set[int]:
    seen: set[int] = set()
    stack = list(start)
    while stack:
        i = stack.pop()
        for j in step(i):
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return seen
