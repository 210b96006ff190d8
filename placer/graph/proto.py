"""Small helpers over ONNX protobufs: dtypes, tensor types, attribute values, tensor bytes.

Shared by :mod:`placer.graph` and :mod:`placer.zoo` (imported as ``P``). Everything here works on
plain protos and numpy; nothing copies a large initializer unless it has to (protobuf copies of big byte fields
are slow: ~0.3-0.5 GB/s on the reference machine).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

# Element types whose storage is narrower than a byte (numpy/ml_dtypes itemsize says 1).
_SUB_BYTE_BITS = {
    TensorProto.INT4: 4,
    TensorProto.UINT4: 4,
    TensorProto.FLOAT4E2M1: 4,
    TensorProto.INT2: 2,
    TensorProto.UINT2: 2,
}

INT_TYPES = frozenset(
    {
        TensorProto.INT8,
        TensorProto.INT16,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.UINT8,
        TensorProto.UINT16,
        TensorProto.UINT32,
        TensorProto.UINT64,
        TensorProto.BOOL,
    }
)


def dtype_name(elem_type: int) -> str:
    """Numpy-style name of an ONNX element type ("float32", "int64", "bfloat16", "str")."""
    if elem_type == TensorProto.STRING:
        return "str"
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        try:
            return onnx.TensorProto.DataType.Name(elem_type).lower()
        except ValueError:  # a value no ONNX element type has (a forged file): named for the message
            return f"unknown element type {elem_type}"


def elem_bits(elem_type: int) -> int:
    """Storage bits of one element (0 for strings: their size is not known statically)."""
    if elem_type in _SUB_BYTE_BITS:
        return _SUB_BYTE_BITS[elem_type]
    if elem_type == TensorProto.STRING:
        return 0
    try:
        return 8 * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return 0


def nbytes_of(shape: tuple[int, ...], elem_type: int) -> int:
    return (math.prod(shape) * elem_bits(elem_type) + 7) // 8


def short_sha(data: bytes, n: int = 16) -> str:
    return hashlib.sha256(data).hexdigest()[:n]


def tensor_summary(t: TensorProto) -> dict[str, Any]:
    """JSON-able summary of a tensor attribute: dtype, shape, sha of its values."""
    try:
        arr = numpy_helper.to_array(t)
        digest = short_sha(np.ascontiguousarray(arr).tobytes())
    except Exception:  # noqa: BLE001 - external or exotic data: hash the proto instead
        digest = short_sha(t.SerializeToString(deterministic=True))
    return {"dtype": dtype_name(t.data_type), "shape": [int(d) for d in t.dims], "sha": digest}


def attr_value(a: AttributeProto) -> Any:
    """Attribute as a JSON-able python value (tensors and graphs summarized)."""
    T = AttributeProto
    if a.type == T.FLOAT:
        return float(a.f)
    if a.type == T.INT:
        return int(a.i)
    if a.type == T.STRING:
        return a.s.decode("utf-8", "backslashreplace")
    if a.type == T.TENSOR:
        return tensor_summary(a.t)
    if a.type == T.GRAPH:
        return {"graph": a.g.name, "sha": short_sha(a.g.SerializeToString(deterministic=True))}
    if a.type == T.SPARSE_TENSOR:
        return {
            "sparse": True,
            "shape": [int(d) for d in a.sparse_tensor.dims],
            "sha": short_sha(a.sparse_tensor.SerializeToString(deterministic=True)),
        }
    if a.type == T.TYPE_PROTO:
        return {"type": short_sha(a.tp.SerializeToString(deterministic=True))}
    if a.type == T.FLOATS:
        return [float(v) for v in a.floats]
    if a.type == T.INTS:
        return [int(v) for v in a.ints]
    if a.type == T.STRINGS:
        return [s.decode("utf-8", "backslashreplace") for s in a.strings]
    if a.type == T.TENSORS:
        return [tensor_summary(t) for t in a.tensors]
    if a.type == T.GRAPHS:
        return [{"graph": g.name, "sha": short_sha(g.SerializeToString(deterministic=True))} for g in a.graphs]
    if a.type == T.SPARSE_TENSORS:
        return [short_sha(s.SerializeToString(deterministic=True)) for s in a.sparse_tensors]
    if a.type == T.TYPE_PROTOS:
        return [short_sha(tp.SerializeToString(deterministic=True)) for tp in a.type_protos]
    return None


def schema_for(op_type: str, domain: str, opset: int | None):
    """The ONNX schema of an op at a model's opset, or None (custom op, unknown version)."""
    if opset is None:
        return None
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except Exception:  # noqa: BLE001 - SchemaError and friends: a custom or unknown op
        return None


def canonical_attrs(node: onnx.NodeProto, schema) -> dict[str, Any]:
    """Node attributes as JSON-able values, with the schema's declared defaults filled in."""
    attrs = {a.name: attr_value(a) for a in node.attribute}
    if schema is not None:
        for name, spec in schema.attributes.items():
            if name not in attrs and spec.default_value.type != 0:
                attrs[name] = attr_value(spec.default_value)
    return dict(sorted(attrs.items()))


def has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def subgraph_outer_refs(node: onnx.NodeProto) -> list[str]:
    """Names a node's subgraphs (If/Loop/Scan bodies) read from the enclosing scope."""
    refs: list[str] = []
    seen: set[str] = set()

    def visit(g: onnx.GraphProto, outer_defined: set[str]) -> None:
        defined = set(outer_defined)
        defined.update(i.name for i in g.input)
        defined.update(i.name for i in g.initializer)
        defined.update(i.values.name for i in g.sparse_initializer)
        for n in g.node:
            for t in n.input:
                if t and t not in defined and t not in seen:
                    seen.add(t)
                    refs.append(t)
            for a in n.attribute:
                if a.type == AttributeProto.GRAPH:
                    visit(a.g, defined)
                elif a.type == AttributeProto.GRAPHS:
                    for sg in a.graphs:
                        visit(sg, defined)
            defined.update(o for o in n.output if o)

    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            visit(a.g, set())
        elif a.type == AttributeProto.GRAPHS:
            for sg in a.graphs:
                visit(sg, set())
    return refs


def tensor_type_of(vi: onnx.ValueInfoProto) -> tuple[int, tuple[int | str | None, ...] | None] | None:
    """(elem_type, dims) of a tensor value-info; dims entries are int, a symbol name, or None.

    Returns None if the value is not a tensor; dims is None if the rank is unknown.
    """
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return tt.elem_type, None
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tt.elem_type, tuple(dims)


def is_static(dims: tuple | None) -> bool:
    return dims is not None and all(isinstance(d, int) and d >= 0 for d in dims)


def make_value_info(name: str, elem_type: int, shape: tuple[int, ...]) -> onnx.ValueInfoProto:
    return onnx.helper.make_tensor_value_info(name, elem_type, list(shape))


def _raw_bytes(arr: np.ndarray) -> bytes:
    """The little-endian C-order bytes of ``arr``, without a copy when it is a view of a bytes object."""
    base = arr
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if (
        isinstance(base, bytes)
        and len(base) == arr.nbytes
        and arr.flags["C_CONTIGUOUS"]
        and arr.dtype.byteorder in "<=|"
    ):
        return base
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr).tobytes()


def fill_tensor(t: TensorProto, arr: np.ndarray, name: str, elem_type: int | None = None) -> TensorProto:
    """Fill ``t`` (e.g. ``graph.initializer.add()``, so the bytes are copied once) from ``arr``."""
    arr = np.asarray(arr)
    if arr.dtype == object or arr.dtype.kind in "US" or elem_type in _SUB_BYTE_BITS:
        t.CopyFrom(numpy_helper.from_array(arr, name))
        return t
    if elem_type is None:
        elem_type = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
    t.name = name
    t.data_type = elem_type
    t.dims.extend(int(d) for d in arr.shape)
    t.raw_data = _raw_bytes(arr)
    return t


def tensor_from_array(arr: np.ndarray, name: str, elem_type: int | None = None) -> TensorProto:
    """A new TensorProto with raw_data (faster than numpy_helper.from_array for big arrays)."""
    return fill_tensor(TensorProto(), arr, name, elem_type)


def init_numel(t: TensorProto) -> int:
    return math.prod(int(d) for d in t.dims)
