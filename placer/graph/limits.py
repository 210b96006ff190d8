"""Size limits of an ONNX model, checked before anything large is read or allocated.

* :func:`check_model_file`: the model file (a regular file, at most :func:`max_model_bytes`: 4 GiB,
  ``$PLACER_MAX_MODEL_MB``) before it is parsed;
* :func:`load_external_data`: each tensor stored in an external data file is checked (a location
  inside the model's folder, a regular file holding ``offset + length`` bytes, exactly the bytes its
  declared shape needs, all of them together with the model file within the limit) before any is read;
* :func:`check_tensor_sizes`: every initializer and ``Constant`` value (subgraphs too) must hold the
  bytes its declared shape needs: a tensor declaring 2 GiB while holding 16 bytes is refused by name
  (ONNX shape inference would otherwise plan for the declared 2 GiB);
* :func:`data_prop_safe`: whether ONNX shape inference may run with data propagation. ONNX 1.23
  spends about 140 bytes per element of every 1-D tensor a data-propagating op (Cast, Add,
  Concat, Unsqueeze, ...) reads (a legitimate 1-D input of 2^24 floats took 2.5 GB, 2^26 more than
  9.4 GB); a model with a 1-D tensor over :data:`DATA_PROP_MAX_ELEMENTS` is inferred without data
  propagation (shape chains are still resolved: placer folds ``Shape`` of every static tensor).

Each refusal is a :class:`~placer.errors.GraphError` naming the file and the tensor.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import onnx
from onnx import AttributeProto, TensorProto

from placer.errors import GraphError
from placer.graph import proto as P
from placer.safe_io import check_regular_file

__all__ = ["DATA_PROP_MAX_ELEMENTS", "DEFAULT_MAX_MODEL_MB", "MAX_MODEL_ENV", "check_model_file",
           "check_tensor_sizes", "data_prop_safe", "load_external_data", "max_model_bytes"]

#: default limit of a model file plus its external data, MiB (``$PLACER_MAX_MODEL_MB`` overrides it)
DEFAULT_MAX_MODEL_MB = 4096
#: the most bytes one protobuf message can be serialized into: a model whose external data brings it
#: past this cannot be hashed, cut into partitions or saved by placer, which keep weights inline
PROTOBUF_MAX_BYTES = 2**31 - 1
MAX_MODEL_ENV = "PLACER_MAX_MODEL_MB"
#: a 1-D tensor with more elements than this turns data propagation off (a shape tensor has rank-many)
DATA_PROP_MAX_ELEMENTS = 2**16
# a tensor declaring more elements than this is refused (the graph loader's own limit)
MAX_TENSOR_ELEMENTS = 2**36

# storage bits of element types narrower than a byte, where placer.graph.proto does not know them
_PACKED_BITS = {getattr(TensorProto, n): b for n, b in
                (("FLOAT6E2M3", 6), ("FLOAT6E3M2", 6)) if hasattr(TensorProto, n)}
# typed storage fields and how many entries one element takes there
_FIELD_OF = {
    TensorProto.FLOAT: ("float_data", 1), TensorProto.COMPLEX64: ("float_data", 2),
    TensorProto.DOUBLE: ("double_data", 1), TensorProto.COMPLEX128: ("double_data", 2),
    TensorProto.INT64: ("int64_data", 1), TensorProto.UINT32: ("uint64_data", 1),
    TensorProto.UINT64: ("uint64_data", 1), TensorProto.STRING: ("string_data", 1),
}


def max_model_bytes() -> int:
    """The limit of a model file plus its external data: ``$PLACER_MAX_MODEL_MB`` MiB if set to a
    positive number, else 4 GiB."""
    env = os.environ.get(MAX_MODEL_ENV, "")
    try:
        mb = float(env) if env else DEFAULT_MAX_MODEL_MB
    except ValueError:
        mb = DEFAULT_MAX_MODEL_MB
    if not (math.isfinite(mb) and mb > 0):
        mb = DEFAULT_MAX_MODEL_MB
    return int(min(mb, 2**40) * 2**20)


def _over(where: str, what: str, size: int, limit: int) -> GraphError:
    return GraphError(f"{where}: {what} is {size / 2**20:.4g} MiB, over the limit of {limit / 2**20:.4g} MiB "
                      f"(${MAX_MODEL_ENV} raises it)")


def check_model_file(path: str | os.PathLike) -> int:
    """The size of the model file ``path`` if it is a regular file within :func:`max_model_bytes`."""
    st = check_regular_file(path, "the ONNX model", GraphError)
    limit = max_model_bytes()
    if st.st_size > limit:
        raise _over(str(path), "the model file", st.st_size, limit)
    return st.st_size


# ------------------------------------------------------------------------------------ every tensor
def _tensors(g: onnx.GraphProto):
    """(kind, tensor) for every initializer and tensor attribute of ``g``, subgraphs included."""
    for t in g.initializer:
        yield "initializer", t
    for s in g.sparse_initializer:
        yield "sparse initializer", s.values
        yield "sparse initializer", s.indices
    for n in g.node:
        for a in n.attribute:
            if a.type == AttributeProto.TENSOR:
                yield f"value of node '{n.name}' ({n.op_type})", a.t
            elif a.type == AttributeProto.TENSORS:
                for t in a.tensors:
                    yield f"tensor of node '{n.name}' ({n.op_type})", t
            elif a.type == AttributeProto.SPARSE_TENSOR:
                yield f"value of node '{n.name}' ({n.op_type})", a.sparse_tensor.values
            elif a.type == AttributeProto.GRAPH:
                yield from _tensors(a.g)
            elif a.type == AttributeProto.GRAPHS:
                for sg in a.graphs:
                    yield from _tensors(sg)


def _bits(elem_type: int) -> int:
    return _PACKED_BITS.get(elem_type) or P.elem_bits(elem_type)


def _declared(t: TensorProto, kind: str, where: str) -> tuple[int, int]:
    """(elements, bytes) ``t`` declares; refuses negative dims and more than MAX_TENSOR_ELEMENTS."""
    if any(d < 0 for d in t.dims):
        raise GraphError(f"{where}: {_label(kind, t)} declares a negative dim {list(t.dims)}")
    numel = math.prod(int(d) for d in t.dims)
    if numel > MAX_TENSOR_ELEMENTS:
        raise GraphError(f"{where}: {_label(kind, t)} declares shape {list(t.dims)}: {numel:.3g} elements, "
                         f"more than placer accepts ({MAX_TENSOR_ELEMENTS:.3g})")
    return numel, (numel * _bits(t.data_type) + 7) // 8


def _entries(t: TensorProto) -> tuple[str, int, int]:
    """(field, entries held, entries per element) of a tensor stored in a typed field."""
    field, per = _FIELD_OF.get(t.data_type, ("int32_data", 1))
    return field, len(getattr(t, field)), per


def _label(kind: str, t: TensorProto) -> str:
    return f"{kind} '{t.name}'" if t.name else kind


def check_tensor_sizes(model: onnx.ModelProto, where: str) -> None:
    """Every initializer / Constant value of ``model`` holds exactly what its shape declares (see the
    module docstring). Tensors still in external files are checked by :func:`load_external_data`."""
    for kind, t in _tensors(model.graph):
        numel, nbytes = _declared(t, kind, where)
        if t.data_location == TensorProto.EXTERNAL:
            continue
        if t.HasField("raw_data"):
            held, need = len(t.raw_data), nbytes
            unit = "bytes"
        else:
            field, held, per = _entries(t)
            bits = _bits(t.data_type)
            if t.data_type != TensorProto.STRING and 0 < bits < 8:  # packed several to an entry
                if held * 32 >= numel * bits and held <= numel:
                    continue
                need = math.ceil(numel * bits / 32)
            else:
                need = numel * per
            unit = f"entries of {field}"
        if held != need:
            size = f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes} bytes"
            raise GraphError(f"{where}: {_label(kind, t)} declares shape {list(t.dims)} "
                             f"({P.dtype_name(t.data_type)}, {size}) but holds {held} {unit} "
                             f"(expected {need}): a truncated or forged tensor")


# ---------------------------------------------------------------------------------- external data
def _external_entries(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def load_external_data(model: onnx.ModelProto, model_path: str | os.PathLike, model_bytes: int) -> None:
    """Check every external tensor of ``model`` (loaded from ``model_path`` without its external data),
    then read them (see the module docstring)."""
    where = str(model_path)
    base = Path(model_path).resolve().parent
    limit = max_model_bytes()
    total = model_bytes
    external = False
    for kind, t in _tensors(model.graph):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        external = True
        _, nbytes = _declared(t, kind, where)
        info = _external_entries(t)
        loc = info.get("location", "")
        name = _label(kind, t)
        if not loc:
            raise GraphError(f"{where}: {name} is external but names no file")
        try:
            file = (base / loc).resolve()
        except (OSError, ValueError, RuntimeError) as exc:  # a NUL in the name, a symbolic link loop
            raise GraphError(f"{where}: {name}: its external file {loc[:80]!r} cannot be resolved "
                             f"({type(exc).__name__}: {exc})") from None
        if Path(loc).is_absolute() or (file != base and base not in file.parents):
            raise GraphError(f"{where}: {name}: its external file {loc!r} is outside the model's folder")
        try:
            st = check_regular_file(file, f"the external data of {name}", GraphError)
        except GraphError as e:
            raise GraphError(f"{where}: cannot load the model's external data: {e}") from None
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if info.get("length") else st.st_size - offset
        except ValueError:
            raise GraphError(f"{where}: {name}: external offset/length are not integers") from None
        if offset < 0 or length < 0 or offset + length > st.st_size:
            raise GraphError(f"{where}: {name}: bytes {offset}..{offset + length} of {file.name} "
                             f"requested, the file has {st.st_size}")
        if length != nbytes:
            raise GraphError(f"{where}: {name} declares shape {list(t.dims)} ({nbytes} bytes) but its "
                             f"external data holds {length} bytes: a truncated or forged tensor")
        total += length
        if total > limit:
            raise _over(where, "the model with its external data", total, limit)
    if external:
        if total > PROTOBUF_MAX_BYTES:
            raise GraphError(f"{where}: the model with its external data is {total / 2**20:.6g} MiB; placer holds "
                             "a model's weights in one ONNX message, which protobuf limits to 2 GiB: such models "
                             "are not supported")
        from onnx.external_data_helper import load_external_data_for_model

        try:
            load_external_data_for_model(model, str(base))
        except Exception as e:  # noqa: BLE001 - onnx's own checks (a symlink, a changed file)
            raise GraphError(f"{where}: cannot load the model's external data: {e}") from e


# ------------------------------------------------------------------------------- data propagation
def _long_1d(vis) -> str | None:
    for vi in vis:
        tt = P.tensor_type_of(vi)
        dims = tt[1] if tt is not None else None
        if dims is not None and len(dims) == 1 and isinstance(dims[0], int) \
                and dims[0] > DATA_PROP_MAX_ELEMENTS:
            return vi.name
    return None


def data_prop_safe(skeleton: onnx.ModelProto) -> bool:
    """Whether ``skeleton`` (a model without big initializers) has no 1-D tensor longer than
    :data:`DATA_PROP_MAX_ELEMENTS`, judged from its declared types, its initializers and a shape
    inference without data propagation (cheap on a skeleton)."""
    g = skeleton.graph
    if any(len(t.dims) == 1 and t.dims[0] > DATA_PROP_MAX_ELEMENTS for t in g.initializer):
        return False
    if _long_1d(list(g.input) + list(g.value_info) + list(g.output)):
        return False
    try:
        out = onnx.shape_inference.infer_shapes(skeleton, check_type=False, strict_mode=False,
                                                data_prop=False)
    except Exception:  # noqa: BLE001 - the caller's inference reports the error
        return True
    og = out.graph
    return _long_1d(list(og.value_info) + list(og.output)) is None
