"""The op graph: ops in topological order, tensors, edges, signatures and cost figures.

An :class:`OpGraph` is built from a folded model (:func:`placer.graph.load_model`) and is
read-only. Op ids are the (unique) node names, stable across loads of the same file.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from placer.errors import GraphError
from placer.graph import proto as P
from placer.graph.flops import op_flops
from placer.graph.load import is_folded, load_model
from placer.graph.opaque import is_opaque

__all__ = [
    "SIGNATURE_VERSION",
    "Edge",
    "Op",
    "OpGraph",
    "Signature",
    "TensorInfo",
    "TensorSpec",
    "build_graph",
    "load_graph",
]

#: Bumped when the canonical form of a signature changes (hashes change with it).
SIGNATURE_VERSION = 1

#: Constant inputs of integer dtype with at most this many elements enter the signature by value.
SMALL_CONST_NUMEL = 16
#: Ops whose small *float* constant inputs also enter the signature (scales, exponents).
_FLOAT_VALUE_OPS = frozenset({"Resize", "Upsample", "Pow"})


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True)


@dataclass(frozen=True)
class TensorSpec:
    """Shape, dtype and constness of one op input/output, as a signature sees it.

    ``value`` holds the flattened values of a small constant that changes semantics (integer
    constants of <= 16 elements, e.g. Reshape's shape, Slice's starts/ends, Pad's pads; small
    float constants of Resize/Upsample/Pow), else None.
    """

    shape: tuple[int, ...]
    dtype: str
    is_constant: bool = False
    value: tuple[Any, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype, "const": self.is_constant}
        if self.value is not None:
            d["value"] = list(self.value)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TensorSpec:
        value = d.get("value")
        return cls(
            shape=tuple(int(x) for x in d["shape"]),
            dtype=str(d["dtype"]),
            is_constant=bool(d.get("const", False)),
            value=tuple(value) if value is not None else None,
        )


@dataclass(frozen=True)
class Signature:
    """What determines an op's cost: type, domain, opset version, attributes, input/output specs.

    ``version`` is the ``since_version`` of the op's schema at the model's opset (so a Conv in an
    opset-9 and an opset-10 model share a signature); the model's opset for unknown ops. ``attrs``
    are canonical: JSON-able, sorted, schema defaults filled in. ``inputs[i]`` is None for an
    omitted optional input. Two ops with one signature cost the same, so each signature is
    profiled once. ``hash`` is the first 16 hex digits of the sha256 of :meth:`canonical_json`.
    """

    op_type: str
    domain: str
    version: int
    attrs: dict[str, Any]
    inputs: tuple[TensorSpec | None, ...]
    outputs: tuple[TensorSpec, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": SIGNATURE_VERSION,
            "op_type": self.op_type,
            "domain": self.domain,
            "version": self.version,
            "attrs": self.attrs,
            "inputs": [s.to_dict() if s is not None else None for s in self.inputs],
            "outputs": [s.to_dict() for s in self.outputs],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Signature:
        if int(d.get("v", SIGNATURE_VERSION)) != SIGNATURE_VERSION:
            raise GraphError(f"signature format v{d.get('v')} is not supported (expected v{SIGNATURE_VERSION})")
        return cls(
            op_type=str(d["op_type"]),
            domain=str(d.get("domain", "")),
            version=int(d["version"]),
            attrs=dict(d.get("attrs", {})),
            inputs=tuple(TensorSpec.from_dict(s) if s is not None else None for s in d["inputs"]),
            outputs=tuple(TensorSpec.from_dict(s) for s in d["outputs"]),
        )

    def canonical_json(self) -> str:
        return _canonical_json(self.to_dict())

    @cached_property
    def hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    def __hash__(self) -> int:
        return hash(self.hash)

    def __str__(self) -> str:
        ins = ", ".join(
            "-" if s is None else f"{s.dtype}{list(s.shape)}{'c' if s.is_constant else ''}" for s in self.inputs
        )
        outs = ", ".join(f"{s.dtype}{list(s.shape)}" for s in self.outputs)
        dom = f"{self.domain}." if self.domain else ""
        return f"{dom}{self.op_type}-{self.version}({ins}) -> {outs} #{self.hash}"


@dataclass(frozen=True)
class TensorInfo:
    """A tensor of the folded model. ``dtype`` is the numpy name ("float32")."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    is_constant: bool


@dataclass(frozen=True)
class Edge:
    """A data dependency op -> op through a non-constant tensor of ``nbytes`` bytes."""

    src: str
    dst: str
    tensor: str
    nbytes: int


@dataclass(frozen=True)
class Op:
    """One node of the folded model.

    ``bytes_in``: bytes of the distinct non-constant inputs (activations); ``weight_bytes``: bytes
    of the distinct constant inputs (initializers); ``bytes_out``: bytes of the outputs. Memory
    traffic of a standalone run is ``bytes_in + weight_bytes + bytes_out``. ``attrs`` are the
    canonical attributes (schema defaults filled in; tensor attributes as
    ``{"dtype", "shape", "sha"}``). ``implicit_inputs`` are outer-scope tensors read by the op's
    subgraphs (If/Loop/Scan), empty for ordinary ops.
    """

    id: str
    index: int
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any]
    signature: Signature
    flops: int
    bytes_in: int
    bytes_out: int
    weight_bytes: int
    implicit_inputs: tuple[str, ...] = field(default=())

    def __hash__(self) -> int:
        return hash((self.id, self.index))

    @property
    def all_inputs(self) -> tuple[str, ...]:
        """Distinct non-empty input names, explicit then implicit."""
        return tuple(dict.fromkeys(t for t in self.inputs + self.implicit_inputs if t))


class OpGraph:
    """Read-only view of a folded model as ops, tensors and edges.

    Build with :func:`build_graph` or :func:`load_graph`.

    Attributes
    ----------
    model : onnx.ModelProto
        The folded model (do not modify it).
    name, source : str
        Graph name; the path it was loaded from, or ``"<memory>"``.
    ops : tuple[Op, ...]
        Topological order, stable w.r.t. the node order in the file.
    tensors : dict[str, TensorInfo]
        Every graph input, initializer and node output.
    inputs, outputs : list[str]
        Graph inputs (non-constant) and outputs.
    producer : dict[str, str]
        tensor -> id of the op producing it.
    consumers : dict[str, tuple[str, ...]]
        tensor -> ids of the ops reading it (in op order).
    edges : tuple[Edge, ...]
        op -> op edges over non-constant tensors, sorted by (src index, dst index, tensor).
    """

    def __init__(self, model: onnx.ModelProto, source: str = "<memory>") -> None:
        if not is_folded(model):
            raise GraphError("OpGraph needs a model from placer.graph.load_model(); use build_graph()")
        self.model = model
        self.source = source
        g = model.graph
        stem = Path(source).stem if source not in ("<memory>", "<bytes>") else ""
        self.name = g.name or stem or "model"

        elem: dict[str, int] = {}
        shape: dict[str, tuple[int, ...]] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            tt = P.tensor_type_of(vi)
            if tt is not None and P.is_static(tt[1]):
                elem[vi.name] = tt[0]
                shape[vi.name] = tuple(int(d) for d in tt[1])  # type: ignore[arg-type]
        self._init_by_name: dict[str, onnx.TensorProto] = {}
        for t in g.initializer:
            self._init_by_name[t.name] = t
            elem[t.name] = t.data_type
            shape[t.name] = tuple(int(d) for d in t.dims)
        self._elem = elem

        tensors: dict[str, TensorInfo] = {}

        def add_tensor(name: str, const: bool) -> None:
            if name in tensors:
                return
            if name not in elem:
                raise GraphError(f"{source}: tensor '{name}' has no static shape (model not folded?)")
            tensors[name] = TensorInfo(
                name=name,
                shape=shape[name],
                dtype=P.dtype_name(elem[name]),
                nbytes=P.nbytes_of(shape[name], elem[name]),
                is_constant=const,
            )

        for vi in g.input:
            add_tensor(vi.name, False)
        for t in g.initializer:
            add_tensor(t.name, True)
        for n in g.node:
            for o in n.output:
                if o:
                    add_tensor(o, False)
        self.tensors = tensors
        self.inputs: list[str] = [vi.name for vi in g.input]
        self.outputs: list[str] = [vi.name for vi in g.output]

        opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}
        ops: list[Op] = []
        self._node_by_id: dict[str, onnx.NodeProto] = {}
        producer: dict[str, str] = {}
        consumers: dict[str, list[str]] = {}
        for i, n in enumerate(g.node):
            op = self._make_op(i, n, opsets)
            ops.append(op)
            self._node_by_id[op.id] = n
            for o in op.outputs:
                if o:
                    producer[o] = op.id
            for t in op.all_inputs:
                consumers.setdefault(t, []).append(op.id)
        self.ops: tuple[Op, ...] = tuple(ops)
        self._index: dict[str, int] = {op.id: op.index for op in ops}
        self.producer: dict[str, str] = producer
        self.consumers: dict[str, tuple[str, ...]] = {t: tuple(c) for t, c in consumers.items()}
        edges: list[Edge] = []
        for op in ops:
            for t in op.all_inputs:
                src = producer.get(t)
                if src is not None and not tensors[t].is_constant:
                    edges.append(Edge(src=src, dst=op.id, tensor=t, nbytes=tensors[t].nbytes))
        edges.sort(key=lambda e: (self._index[e.src], self._index[e.dst], e.tensor))
        self.edges: tuple[Edge, ...] = tuple(edges)

    # ------------------------------------------------------------------------------ construction

    def _spec(self, name: str, op_type: str) -> TensorSpec | None:
        if not name:
            return None
        info = self.tensors[name]
        value = None
        if info.is_constant and math.prod(info.shape) <= SMALL_CONST_NUMEL:
            et = self._elem[name]
            if et in P.INT_TYPES:
                arr = numpy_helper.to_array(self._init_by_name[name])
                value = tuple(int(v) for v in np.asarray(arr).reshape(-1))
            elif op_type in _FLOAT_VALUE_OPS and info.dtype.startswith("float"):
                arr = numpy_helper.to_array(self._init_by_name[name])
                value = tuple(float(v) for v in np.asarray(arr, dtype=np.float64).reshape(-1))
        return TensorSpec(shape=info.shape, dtype=info.dtype, is_constant=info.is_constant, value=value)

    def _make_op(self, index: int, n: onnx.NodeProto, opsets: dict[str, int]) -> Op:
        domain = "" if n.domain == "ai.onnx" else n.domain
        opset = opsets.get(domain)
        schema = P.schema_for(n.op_type, domain, opset)
        version = int(schema.since_version) if schema is not None else int(opset or 0)
        attrs = P.canonical_attrs(n, schema)
        inputs = tuple(n.input)
        outputs = tuple(n.output)
        implicit = tuple(P.subgraph_outer_refs(n)) if P.has_subgraph(n) else ()
        in_specs = tuple(self._spec(t, n.op_type) for t in inputs)
        out_specs = tuple(
            TensorSpec(shape=self.tensors[o].shape, dtype=self.tensors[o].dtype) for o in outputs if o
        )
        sig = Signature(
            op_type=n.op_type, domain=domain, version=version, attrs=attrs, inputs=in_specs, outputs=out_specs
        )
        flops = op_flops(
            n.op_type,
            attrs,
            [s.shape if s is not None else None for s in in_specs],
            [s.shape for s in out_specs],
        )
        distinct = dict.fromkeys(t for t in inputs + implicit if t)
        bytes_in = sum(self.tensors[t].nbytes for t in distinct if not self.tensors[t].is_constant)
        weight_bytes = sum(self.tensors[t].nbytes for t in distinct if self.tensors[t].is_constant)
        bytes_out = sum(self.tensors[o].nbytes for o in dict.fromkeys(o for o in outputs if o))
        return Op(
            id=n.name,
            index=index,
            op_type=n.op_type,
            domain=domain,
            inputs=inputs,
            outputs=outputs,
            attrs=attrs,
            signature=sig,
            flops=int(flops),
            bytes_in=int(bytes_in),
            bytes_out=int(bytes_out),
            weight_bytes=int(weight_bytes),
            implicit_inputs=implicit,
        )

    # ---------------------------------------------------------------------------------- queries

    @cached_property
    def model_hash(self) -> str:
        """sha256 hex of the folded model's deterministic serialization (computed on first use)."""
        return hashlib.sha256(self.model.SerializeToString(deterministic=True)).hexdigest()

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __repr__(self) -> str:
        return f"OpGraph({self.name!r}, ops={len(self.ops)}, source={self.source!r})"

    def op(self, op_id: str) -> Op:
        return self.ops[self.index_of(op_id)]

    def index_of(self, op_id: str) -> int:
        try:
            return self._index[op_id]
        except KeyError:
            raise GraphError(f"unknown op '{op_id}' in model '{self.name}' ({self.source})") from None

    @property
    def total_flops(self) -> int:
        return sum(op.flops for op in self.ops)

    @property
    def weight_bytes(self) -> int:
        """Bytes of all constants (initializers) of the folded model."""
        return sum(t.nbytes for t in self.tensors.values() if t.is_constant)

    def unique_signatures(self) -> dict[str, tuple[Signature, list[str]]]:
        """signature hash -> (signature, ids of the ops with it), in order of first occurrence."""
        out: dict[str, tuple[Signature, list[str]]] = {}
        for op in self.ops:
            h = op.signature.hash
            if h not in out:
                out[h] = (op.signature, [])
            out[h][1].append(op.id)
        return out

    def op_type_counts(self) -> dict[str, int]:
        """op_type -> count, most frequent first (ties by name)."""
        counts = Counter(op.op_type for op in self.ops)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def summary(self) -> str:
        """One paragraph: ops, types, unique signatures, GFLOPs, weights, inputs and outputs."""

        def io(names: list[str]) -> str:
            return ", ".join(
                f"{t} {self.tensors[t].dtype}{list(self.tensors[t].shape)}" for t in names
            ) or "none"

        types = ", ".join(f"{k} {v}" for k, v in self.op_type_counts().items())
        return (
            f"{self.name} ({self.source}): {len(self.ops)} ops ({types}), "
            f"{len(self.unique_signatures())} unique signatures, {self.total_flops / 1e9:.3f} GFLOPs, "
            f"{self.weight_bytes / 1e6:.1f} MB of weights in {sum(t.is_constant for t in self.tensors.values())} "
            f"constants, {len(self.edges)} edges; inputs: {io(self.inputs)}; outputs: {io(self.outputs)}."
        )

    # ------------------------------------------------------------------------------ sub-models

    def _ordered_ids(self, op_ids: Iterable[str]) -> list[str]:
        if isinstance(op_ids, str):
            op_ids = [op_ids]
        ids = list(dict.fromkeys(op_ids))
        if not ids:
            raise GraphError(f"an empty set of ops has no sub-model (model '{self.name}')")
        for i in ids:
            self.index_of(i)
        return sorted(ids, key=self._index.__getitem__)

    def _sort_key(self, t: str) -> tuple[int, str]:
        src = self.producer.get(t)
        return (self._index[src] if src is not None else -1, t)

    def _subgraph_io(self, ids: list[str]) -> tuple[list[str], list[str]]:
        inside = set(ids)
        produced: set[str] = set()
        for i in ids:
            produced.update(o for o in self.ops[self._index[i]].outputs if o)
        model_outputs = set(self.outputs)
        ins: set[str] = set()
        for i in ids:
            for t in self.ops[self._index[i]].all_inputs:
                if t not in produced and not self.tensors[t].is_constant:
                    ins.add(t)
        outs = {
            t
            for t in produced
            if t in model_outputs or any(c not in inside for c in self.consumers.get(t, ()))
        }
        return sorted(ins, key=self._sort_key), sorted(outs, key=self._sort_key)

    def subgraph_io(self, op_ids: Iterable[str]) -> tuple[list[str], list[str]]:
        """(inputs, outputs) of the sub-model of ``op_ids``; see :meth:`subgraph_model`."""
        return self._subgraph_io(self._ordered_ids(op_ids))

    def _value_info(self, name: str) -> onnx.ValueInfoProto:
        return P.make_value_info(name, self._elem[name], self.tensors[name].shape)

    def _build(self, ids: list[str], inputs: list[str], outputs: list[str], name: str) -> onnx.ModelProto:
        m = onnx.ModelProto()
        m.ir_version = self.model.ir_version
        m.producer_name = "placer"
        # an opaque region's function (and its domain) only where one of the ops calls it
        calls = {self._node_by_id[i].op_type for i in ids if is_opaque(self._node_by_id[i].domain)}
        m.opset_import.extend(o for o in self.model.opset_import if not is_opaque(o.domain) or calls)
        m.functions.extend(f for f in self.model.functions if not is_opaque(f.domain) or f.name in calls)
        g = m.graph
        g.name = name
        g.node.extend(self._node_by_id[i] for i in ids)
        g.input.extend(self._value_info(t) for t in inputs)
        g.output.extend(self._value_info(t) for t in outputs)
        seen: set[str] = set()
        out_set = set(outputs)
        for i in ids:
            op = self.ops[self._index[i]]
            for t in op.all_inputs:
                if t not in seen and self.tensors[t].is_constant:
                    seen.add(t)
                    g.initializer.add().CopyFrom(self._init_by_name[t])
            for o in op.outputs:
                if o and o not in out_set:
                    g.value_info.append(self._value_info(o))
        return m

    def subgraph_model(self, op_ids: Iterable[str], name: str | None = None) -> onnx.ModelProto:
        """The ops ``op_ids`` (any set, connected or not) as a standalone model.

        * graph inputs: every non-constant tensor the set reads but does not produce (model
          inputs included);
        * graph outputs: every tensor the set produces that an op outside the set reads, or that
          is a model output;
        * initializers: the constants the set reads (real values); nodes keep their names and
          topological order; ``value_info`` holds the shapes of internal tensors.

        Inputs and outputs are sorted by (index of the producing op, -1 for model inputs; name).
        Upstream ops are never pulled in (unlike ``onnx.utils.Extractor``).
        """
        ids = self._ordered_ids(op_ids)
        inputs, outputs = self._subgraph_io(ids)
        if not outputs:  # cannot happen after dead-node pruning, kept for safety
            raise GraphError(f"ops {ids[:5]} of model '{self.name}' produce nothing that is used")
        return self._build(ids, inputs, outputs, name or f"{self.name}_sub_{ids[0]}_{len(ids)}")

    def single_op_model(self, op_id: str) -> onnx.ModelProto:
        """The op alone: its constant inputs as initializers (the real weights), its non-constant
        inputs as graph inputs, all its outputs as graph outputs. For profiling one op."""
        op = self.op(op_id)
        inputs = [t for t in op.all_inputs if not self.tensors[t].is_constant]
        outputs = list(dict.fromkeys(o for o in op.outputs if o))
        return self._build([op.id], inputs, outputs, f"{self.name}_{op.id}")


def build_graph(model: onnx.ModelProto, source: str | None = None) -> OpGraph:
    """:class:`OpGraph` of ``model``; folds it first with :func:`load_model` unless it already is
    folded (a folded model is used as is, not copied: do not modify it afterwards)."""
    if not is_folded(model):
        model = load_model(model)
    return OpGraph(model, source=source or "<memory>")


def load_graph(
    source: str | Path | onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]] | None = None, *,
    name: str | None = None,
) -> OpGraph:
    """``build_graph(load_model(source, shapes))`` with ``source`` recorded ("<memory>" for protos),
    or ``name`` when given (what messages and ``OpGraph.source`` call the model).

    ``"zoo:NAME"`` references are loaded by :func:`placer.zoo.load_graph`, a layer above.

    Examples
    --------
    >>> g = load_graph("model.onnx")  # doctest: +SKIP
    >>> len(g.ops), len(g.unique_signatures())  # doctest: +SKIP
    (66, 31)
    """
    model = load_model(source, shapes, name=name)
    if name is not None:
        src = name
    elif isinstance(source, onnx.ModelProto):
        src = "<memory>"
    elif isinstance(source, (bytes, bytearray)):
        src = "<bytes>"
    else:
        src = str(source)
    return OpGraph(model, source=src)
