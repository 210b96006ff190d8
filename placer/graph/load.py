"""Load an ONNX model and bring it into the one form the rest of placer works on.

:func:`load_model` returns a *folded* model:

1. read (clear :class:`~placer.errors.GraphError` for a missing path, a directory, bytes that are not
   ONNX, a truncated protobuf);
2. every node gets a unique non-empty name (a name that occurs once in the file is kept, others
   become ``f"{op_type}_{i}"`` with ``i`` the node's index in the file), so op ids are stable across
   loads of the same file;
3. structure checks: a node input that is neither produced by a node, an initializer nor a graph
   input ("dangling"), a tensor produced twice, a cycle: each an error naming the node. Nodes are
   put in a stable topological order (ties broken by their order in the file);
4. initializers listed as graph inputs (IR 3 "light" models, ``keep_initializers_as_inputs``
   exports) are treated as constants and removed from the graph inputs; ``ir_version`` becomes
   ``max(4, min(ir_version, 10))`` (ONNX Runtime 1.31 rejects IR > 13, TVM's importer and others
   are happier with <= 10; IR >= 4 lets initializers stay out of the inputs); opsets are kept;
5. graph-input dims are bound from ``shapes``; every input must end up fully static;
6. ``onnx.checker`` (on the model without its big initializers: cheap);
7. every node whose inputs are all constant is folded into initializers (deterministic ops of
   the default domain without subgraphs), including ``Shape``/``Size`` of tensors whose shape is
   static, repeated until nothing changes: the light models' ``ConstantOfShape`` weights become
   real initializers, ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` chains become constants;
   a node whose output is a graph output is never folded. Values come from
   ``onnx.reference`` (plus a fast path for ``ConstantOfShape``); a node it cannot evaluate stays;
8. dead nodes (no path to a graph output), unused optional outputs (Dropout's mask) and unused
   initializers are removed;
9. ``onnx.shape_inference.infer_shapes(strict_mode=True, data_prop=True)``; control flow (If, Loop,
   Scan) and every node that produces or reads a tensor without a static shape (NonZero and what
   follows it, ...) are contracted into opaque ops, one per connected region
   (:mod:`placer.graph.opaque`); then every remaining tensor must have a static shape and a known
   dtype (a graph output with a data-dependent shape is refused); the inferred types are stored
   in ``graph.value_info`` and ``graph.output``.

The folded model runs in ONNX Runtime (and, with its opaque regions' functions inlined, in OpenVINO)
and computes the same outputs as the original. It carries
the metadata entry ``placer.graph = folded-v1`` so :func:`placer.graph.build_graph` does not fold
it twice.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from placer.errors import GraphError
from placer.graph import limits
from placer.graph import proto as P
from placer.graph.opaque import contract_dynamic
from placer.toposort import CycleError, topological_order

__all__ = ["FOLDED_KEY", "FOLDED_VALUE", "check_prepared", "is_folded", "load_model", "read_model", "reference_run",
           "shape_tuple"]

FOLDED_KEY = "placer.graph"
FOLDED_VALUE = "folded-v1"

MAX_IR_VERSION = 10
MIN_IR_VERSION = 4

# Ops never folded even when every input is constant.
_NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
# Initializers up to this many elements stay real initializers in the shape-inference skeleton
# (data propagation needs the values of shape tensors); bigger ones become typed inputs there.
_SKELETON_KEEP_NUMEL = 1024
_MAX_FOLD_ROUNDS = 8
# A tensor with more elements than this is refused (no target here holds 2^36 floats = 256 GiB).
MAX_TENSOR_ELEMENTS = 2**36


def is_folded(model: onnx.ModelProto) -> bool:
    """Whether ``model`` came out of :func:`load_model` (carries the ``placer.graph`` marker)."""
    return any(p.key == FOLDED_KEY and p.value == FOLDED_VALUE for p in model.metadata_props)


def load_model(
    source: str | os.PathLike | onnx.ModelProto,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    *,
    name: str | None = None,
) -> onnx.ModelProto:
    """Load, check, bind shapes, fold constants and infer static shapes (see module docstring).

    Parameters
    ----------
    source
        Path to an ``.onnx`` file or a ``ModelProto`` (copied, never modified). ``"zoo:<name>"``
        references are resolved a layer above, by :func:`placer.zoo.load_model`.
    shapes
        Static shapes for graph inputs with symbolic or unknown dims, e.g. ``{"x": (2, 3, 8, 8)}``.
    name
        What error messages call the model (default: its path, ``<memory>`` or ``<bytes>``).

    Returns
    -------
    onnx.ModelProto
        The folded model. Raises :class:`~placer.errors.GraphError` (message names the file and the
        node / tensor / input) for anything the user can fix.

    Examples
    --------
    >>> m = load_model("model.onnx", shapes={"input": (1, 3, 224, 224)})  # doctest: +SKIP
    """
    model, where = _read(source)
    return _prepare(model, name or where, shapes)


def check_prepared(model: onnx.ModelProto, where: str) -> None:
    """A model marked as already prepared (:func:`is_folded`: a plan directory's ``model.onnx``, a file
    a user may hand over edited) is used without folding it again; its structure is checked as loading
    checks it: node names given once each, every tensor read produced before (no cycle, no dangling
    input), every output produced, the checker passes, and every tensor typed. GraphError naming the
    file (the graph built from it raised a bare KeyError on an untyped tensor)."""
    g = model.graph
    seen: set[str] = set()
    for n in g.node:
        if not n.name or n.name in seen:
            raise GraphError(f"{where}: node names must be given once each in a prepared model; "
                             f"{n.name!r} ({n.op_type}) is {'empty' if not n.name else 'repeated'} (edited?)")
        seen.add(n.name)
    _check_structure_and_sort(g, where)
    _run_checker(model, where)
    typed = {vi.name for vi in (*g.input, *g.output, *g.value_info)} | {t.name for t in g.initializer}
    for n in g.node:
        for t in (*n.input, *n.output):
            if t and t not in typed:
                raise GraphError(f"{where}: tensor {t!r} of {_node_desc(n)} has no type or shape: not the model "
                                 "placer prepared (edited?)")


def read_model(source: str | os.PathLike | onnx.ModelProto | bytes) -> onnx.ModelProto:
    """The model at a path (or in bytes, or a copy of a ModelProto), read with :func:`load_model`'s
    clear errors but not checked or folded."""
    return _read(source)[0]


def reference_run(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], outputs: list[str],
                  model: onnx.ModelProto) -> list[np.ndarray]:
    """The values of ``outputs`` of ``nodes`` on ``feeds``, computed by ``onnx.reference`` (with the
    opsets of ``model``): what constant folding evaluates nodes with."""
    return _reference_run(nodes, feeds, outputs, model)


# --------------------------------------------------------------------------------------------- read


def _read(source: Any) -> tuple[onnx.ModelProto, str]:
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        return model, "<memory>"
    if isinstance(source, (bytes, bytearray)):
        model = onnx.ModelProto()
        try:
            model.ParseFromString(bytes(source))
        except Exception as e:
            raise GraphError(f"<bytes>: not an ONNX model (protobuf parse failed: {e})") from e
        return model, "<bytes>"
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if isinstance(text, bytes):
            text = text.decode()
        if text.startswith("zoo:"):  # resolved a layer above: the zoo builds on the graph layer
            raise GraphError(f"{text}: a zoo reference; placer.graph reads ONNX files and ModelProtos "
                             "(load it with placer.zoo.load_model / placer.zoo.load_graph)")
        path = Path(text)
        if not path.exists():
            raise GraphError(f"{path}: model file not found")
        if path.is_dir():
            raise GraphError(f"{path}: is a directory, not an ONNX model file")
        if not path.is_file():
            raise GraphError(f"{path}: not a regular file")
        if path.stat().st_size == 0:
            raise GraphError(f"{path}: empty file, not an ONNX model")
        size = limits.check_model_file(path)
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as e:
            raise GraphError(
                f"{path}: not a valid ONNX model (truncated or not a protobuf: {type(e).__name__}: {e})"
            ) from e
        limits.load_external_data(model, path, size)
        return model, str(path)
    raise GraphError(f"cannot load a model from a {type(source).__name__}; pass a path or an onnx.ModelProto")


# ------------------------------------------------------------------------------------------ prepare


def _prepare(model: onnx.ModelProto, where: str, shapes: Mapping[str, tuple[int, ...]] | None) -> onnx.ModelProto:
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise GraphError(f"{where}: not an ONNX model (no ir_version or no graph; truncated or not ONNX?)")
    g = model.graph
    if len(g.output) == 0:
        raise GraphError(f"{where}: the graph has no outputs (truncated or not an ONNX model?)")
    limits.check_tensor_sizes(model, where)
    _normalize_domains(model)
    _check_opsets(model, where)
    _name_nodes(g)
    _check_structure_and_sort(g, where)
    _strip_initializer_inputs(g)
    model.ir_version = max(MIN_IR_VERSION, min(model.ir_version, MAX_IR_VERSION))
    _negative_dims_unknown(g)
    _bind_shapes(g, shapes or {}, where)
    _run_checker(model, where)
    _fold(model, where)
    _prune(model)
    _constant_outputs_through_identity(g)
    _final_inference(model, where)
    if len(g.node) == 0:
        raise GraphError(f"{where}: the model has no ops to place (its outputs are inputs or constants)")
    _mark(model)
    return model


def _check_opsets(model: onnx.ModelProto, where: str) -> None:
    newest = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain == "" and o.version > newest:
            raise GraphError(
                f"{where}: the model imports ONNX opset {o.version}; the newest this placer knows is {newest}"
            )


def _normalize_domains(model: onnx.ModelProto) -> None:
    for n in model.graph.node:
        if n.domain == "ai.onnx":
            n.domain = ""
    seen: dict[str, int] = {}
    for o in model.opset_import:
        d = "" if o.domain == "ai.onnx" else o.domain
        seen[d] = max(seen.get(d, 0), o.version)
    if len(seen) != len(model.opset_import) or any(o.domain == "ai.onnx" for o in model.opset_import):
        del model.opset_import[:]
        for d, v in seen.items():
            model.opset_import.append(onnx.helper.make_opsetid(d, v))


def _name_nodes(g: onnx.GraphProto) -> None:
    """A name occurring once in the file is kept; others become f"{op_type}_{i}" (i: file index)."""
    counts = Counter(n.name for n in g.node)
    taken = {name for name, c in counts.items() if name and c == 1}
    for i, n in enumerate(g.node):
        if n.name and counts[n.name] == 1:
            continue
        base = f"{n.op_type}_{i}"
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        n.name = name
        taken.add(name)


def _node_desc(n: onnx.NodeProto) -> str:
    return f"node '{n.name}' ({n.op_type})"


def _check_structure_and_sort(g: onnx.GraphProto, where: str) -> None:
    nodes = list(g.node)
    constants = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
    graph_inputs = {vi.name for vi in g.input}
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for t in n.output:
            if not t:
                continue
            if t in producer:
                raise GraphError(
                    f"{where}: tensor '{t}' is produced by both {_node_desc(nodes[producer[t]])} "
                    f"and {_node_desc(n)}"
                )
            if t in constants or t in graph_inputs:
                kind = "an initializer" if t in constants else "a graph input"
                raise GraphError(f"{where}: {_node_desc(n)} writes tensor '{t}', which is also {kind}")
            producer[t] = i
    deps: list[set[int]] = []
    for i, n in enumerate(nodes):
        d: set[int] = set()
        names = list(n.input) + (P.subgraph_outer_refs(n) if P.has_subgraph(n) else [])
        for t in names:
            if not t:
                continue
            if t in producer:
                d.add(producer[t])
            elif t not in constants and t not in graph_inputs:
                raise GraphError(
                    f"{where}: {_node_desc(n)} reads tensor '{t}', which is not produced by any node, "
                    f"not an initializer and not a graph input (dangling input)"
                )
        deps.append(d)
    for o in g.output:
        if o.name not in producer and o.name not in constants and o.name not in graph_inputs:
            raise GraphError(f"{where}: graph output '{o.name}' is not produced by any node")
    # Stable: among ready nodes the one first in the file goes first.
    try:
        order = topological_order(range(len(nodes)), deps.__getitem__)
    except CycleError as exc:
        names = " -> ".join(f"'{nodes[i].name}'" for i in exc.cycle)
        raise GraphError(f"{where}: the graph has a cycle through nodes {names}") from None
    if order != list(range(len(nodes))):
        del g.node[:]
        g.node.extend(nodes[i] for i in order)


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without its big initializers (they become typed graph inputs): cheap to serialize."""
    g = model.graph
    sk = onnx.ModelProto()
    sk.ir_version = model.ir_version
    sk.opset_import.extend(model.opset_import)
    sk.functions.extend(model.functions)
    sg = sk.graph
    sg.name = g.name
    sg.node.extend(g.node)
    sg.input.extend(g.input)
    sg.output.extend(g.output)
    sg.value_info.extend(g.value_info)
    sg.sparse_initializer.extend(g.sparse_initializer)
    input_names = {vi.name for vi in g.input}
    for t in g.initializer:
        if P.init_numel(t) <= _SKELETON_KEEP_NUMEL or t.data_type == TensorProto.STRING:
            sg.initializer.append(t)
        elif t.name not in input_names:
            sg.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return sk


def _run_checker(model: onnx.ModelProto, where: str) -> None:
    """onnx.checker on the skeleton. Graph outputs without a type or shape (ONNX Runtime accepts
    them, the checker does not) get a placeholder there; inference fills in the real one later."""
    sk = _skeleton(model)
    for vi in sk.graph.output:
        if not vi.type.HasField("tensor_type") and not vi.type.HasField("sequence_type"):
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
        if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
            vi.type.tensor_type.shape.SetInParent()
    try:
        onnx.checker.check_model(sk)
    except Exception as e:
        msg = str(e).strip().replace("\n", " ")
        raise GraphError(f"{where}: invalid ONNX model: {msg}") from e


def _strip_initializer_inputs(g: onnx.GraphProto) -> None:
    constants = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
    if any(vi.name in constants for vi in g.input):
        keep = [vi for vi in g.input if vi.name not in constants]
        del g.input[:]
        g.input.extend(keep)


def _fmt_dims(dims: tuple | None) -> str:
    if dims is None:
        return "unknown rank"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _negative_dims_unknown(g: onnx.GraphProto) -> None:
    """A declared dim of -1 (a common way of writing "dynamic" in hand-built models) is made unknown:
    kept, it conflicted with every binding and failed strict shape inference on outputs."""
    for vi in (*g.input, *g.output, *g.value_info):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value < 0:
                d.Clear()


def _bind_shapes(g: onnx.GraphProto, shapes: Mapping[str, tuple[int, ...]], where: str) -> None:
    inputs = {vi.name: vi for vi in g.input}
    constants = {t.name for t in g.initializer}
    for name in shapes:
        if name not in inputs:
            what = "a constant (initializer)" if name in constants else "not a graph input"
            raise GraphError(
                f"{where}: shapes names '{name}', which is {what}; graph inputs: {sorted(inputs) or 'none'}"
            )
    for vi in g.input:
        tt = P.tensor_type_of(vi)
        if tt is None:
            raise GraphError(f"{where}: graph input '{vi.name}' is not a tensor (sequences/maps are not supported)")
        elem_type, dims = tt
        if elem_type == 0:
            raise GraphError(f"{where}: graph input '{vi.name}' has no element type")
        if vi.name in shapes:
            want = shape_tuple(vi.name, shapes[vi.name], where)
            if any(d < 0 for d in want):
                raise GraphError(f"{where}: shape for input '{vi.name}' has a negative dim: {want}")
            _check_input_size(vi.name, want, where)
            if dims is not None:
                if len(dims) != len(want):
                    raise GraphError(
                        f"{where}: shape {want} for input '{vi.name}' has rank {len(want)}, "
                        f"the model declares rank {len(dims)} {_fmt_dims(dims)}"
                    )
                for k, (have, new) in enumerate(zip(dims, want)):
                    if isinstance(have, int) and have >= 0 and have != new:  # a negative dim: unknown
                        raise GraphError(
                            f"{where}: shape {want} for input '{vi.name}' conflicts with the model's "
                            f"{_fmt_dims(dims)} at dim {k}"
                        )
            shape = vi.type.tensor_type.shape
            shape.Clear()
            for d in want:
                shape.dim.add().dim_value = d
        elif P.is_static(dims):
            _check_input_size(vi.name, dims, where)
        else:
            hint = ", ".join("?" if not isinstance(d, int) or d < 0 else str(d) for d in dims) if dims else "..."
            raise GraphError(
                f"{where}: graph input '{vi.name}' has a non-static shape {_fmt_dims(dims)}; bind it with "
                f"shapes={{'{vi.name}': ({hint})}} (CLI: --shape {vi.name}=...)"
            )


def shape_tuple(name: str, want: Any, where: str = "shapes") -> tuple[int, ...]:
    """A shape given for input ``name`` as a tuple of ints; GraphError for anything else (a bare number,
    a string, a float or None dim: int() would truncate 1.9 and split "123" into three dims)."""
    ok = isinstance(want, (list, tuple)) or (isinstance(want, np.ndarray) and want.ndim == 1)
    if ok:
        ok = all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in want)
    if not ok:
        raise GraphError(f"{where}: shape for input '{name}' must be a tuple of ints, got {str(want)[:80]!r}")
    return tuple(int(d) for d in want)


def _check_input_size(name: str, dims: tuple[int, ...], where: str) -> None:
    """A graph input must have at least one element and at most MAX_TENSOR_ELEMENTS."""
    if any(d == 0 for d in dims):
        raise GraphError(f"{where}: graph input '{name}' has a zero dim {_fmt_dims(tuple(dims))}: no elements")
    numel = math.prod(int(d) for d in dims)
    if numel > MAX_TENSOR_ELEMENTS:
        raise GraphError(
            f"{where}: graph input '{name}' of shape {_fmt_dims(tuple(dims))} has {numel:.3g} elements, "
            f"more than placer accepts ({MAX_TENSOR_ELEMENTS:.3g})"
        )


# --------------------------------------------------------------------------------------------- infer


def _infer(model: onnx.ModelProto, strict: bool, where: str, blame: bool = True) -> dict[str, onnx.ValueInfoProto]:
    """Shape inference on the skeleton; name -> ValueInfoProto for every typed tensor. ``blame``: name
    the failing node in the error (:func:`_blame`, which infers with ``blame=False``: no recursion)."""
    sk = _skeleton(model)
    try:
        out = onnx.shape_inference.infer_shapes(sk, check_type=strict, strict_mode=strict,
                                                data_prop=limits.data_prop_safe(sk))
    except Exception as e:
        msg = str(e).strip().replace("\n", " ")
        if blame and "node name" not in msg:
            msg += _blame(model)
        raise GraphError(f"{where}: shape inference failed: {msg}") from e
    types: dict[str, onnx.ValueInfoProto] = {}
    for vi in list(out.graph.input) + list(out.graph.value_info) + list(out.graph.output):
        types[vi.name] = vi
    return types


def _blame(model: onnx.ModelProto) -> str:
    """`` (node 'n' (Op))``: the first node that fails strict inference alone, given its inputs'
    types from a lenient pass; for inference errors that do not name their node. Empty if none."""
    try:
        types = _infer(model, strict=False, where="", blame=False)
    except GraphError:
        return ""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    for n in g.node:
        one = onnx.ModelProto()
        one.ir_version = model.ir_version
        one.opset_import.extend(model.opset_import)
        one.graph.node.append(n)
        for t in dict.fromkeys(x for x in n.input if x):
            if t in inits and P.init_numel(inits[t]) <= _SKELETON_KEEP_NUMEL:
                one.graph.initializer.append(inits[t])
            elif t in types:
                one.graph.input.append(types[t])
        for t in n.output:
            if t:
                one.graph.output.append(onnx.helper.make_empty_tensor_value_info(t))
        try:
            onnx.shape_inference.infer_shapes(one, check_type=True, strict_mode=True,
                                              data_prop=limits.data_prop_safe(one))
        except Exception:  # noqa: BLE001 - this node is the one
            return f" (at {_node_desc(n)})"
    return ""


# ---------------------------------------------------------------------------------------------- fold


def _foldable(n: onnx.NodeProto, const: set[str], graph_outputs: set[str]) -> bool:
    if n.domain not in ("", "ai.onnx") or n.op_type in _NONDETERMINISTIC or P.has_subgraph(n):
        return False
    if any(o in graph_outputs for o in n.output):
        return False
    if not any(n.output):
        return False
    return all((not t) or t in const for t in n.input)


def _shape_value(n: onnx.NodeProto, dims: tuple[int, ...]) -> np.ndarray:
    if n.op_type == "Size":
        return np.array(int(np.prod(dims, dtype=np.int64)), dtype=np.int64)
    start, end = 0, None
    for a in n.attribute:
        if a.name == "start":
            start = int(a.i)
        elif a.name == "end":
            end = int(a.i)
    return np.array(list(dims)[start:end], dtype=np.int64)


class _TooBig(Exception):
    """A folded value would exceed the folding budget."""


def _constant_of_shape(n: onnx.NodeProto, shape_arr: np.ndarray, budget: int | None = None) -> np.ndarray:
    """ConstantOfShape without np.full (bytes repetition is ~5x faster for big fills); _TooBig past
    ``budget`` bytes (None: no budget)."""
    value = np.zeros(1, dtype=np.float32)
    for a in n.attribute:
        if a.name == "value":
            value = numpy_helper.to_array(a.t).reshape(-1)[:1]
    shape = tuple(int(d) for d in np.asarray(shape_arr).reshape(-1))
    count = math.prod(shape)  # Python ints: no int64 overflow
    if budget is not None and count * value.dtype.itemsize > budget:
        raise _TooBig(n.name)
    if value.dtype.kind in "OUS":
        return np.full(shape, value[0], dtype=value.dtype)
    raw = value.astype(value.dtype.newbyteorder("<"), copy=False).tobytes() * count
    return np.frombuffer(raw, dtype=value.dtype).reshape(shape)


def _eval_model(
    nodes: list[onnx.NodeProto],
    feeds: dict[str, np.ndarray],
    outputs: list[str],
    model: onnx.ModelProto,
) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.ir_version = model.ir_version
    m.opset_import.extend(model.opset_import)
    m.functions.extend(model.functions)
    g = m.graph
    g.name = "fold"
    g.node.extend(nodes)
    for name, arr in feeds.items():
        g.input.append(
            onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)
            )
        )
    for name in outputs:
        g.output.append(onnx.helper.make_empty_tensor_value_info(name))
    return m


def _reference_run(
    nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], outputs: list[str], model: onnx.ModelProto
) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    sess = ReferenceEvaluator(_eval_model(nodes, feeds, outputs, model))
    return [np.asarray(v) for v in sess.run(outputs, feeds)]


def _evaluate(
    nodes: list[onnx.NodeProto],
    known: dict[str, np.ndarray],
    init_by_name: dict[str, TensorProto],
    model: onnx.ModelProto,
    budget: int | None = None,
) -> dict[str, np.ndarray]:
    """Values of the outputs of ``nodes`` (constant inputs only). Nodes that fail stay unfolded, as do
    ConstantOfShape nodes that would fill more than ``budget`` bytes (and the nodes reading them)."""
    values: dict[str, np.ndarray] = {}

    def get(name: str) -> np.ndarray | None:
        if name in values:
            return values[name]
        if name in known:
            return known[name]
        t = init_by_name.get(name)
        if t is None:
            return None
        arr = numpy_helper.to_array(t)
        values[name] = arr
        return arr

    rest: list[onnx.NodeProto] = []
    for n in nodes:
        if n.op_type == "ConstantOfShape" and n.domain in ("", "ai.onnx"):
            shape = get(n.input[0])
            if shape is not None:
                try:
                    values[n.output[0]] = _constant_of_shape(n, shape, budget)
                    continue
                except _TooBig:
                    continue  # left unfolded: a runtime fills it
                except Exception:  # noqa: BLE001, S110 - the reference evaluator gets another try
                    pass
        rest.append(n)
    if not rest:
        return values
    produced = {o for n in rest for o in n.output if o}
    needed_in = []
    for n in rest:
        for t in n.input:
            if t and t not in produced and t not in needed_in:
                needed_in.append(t)
    feeds = {}
    for t in needed_in:
        v = get(t)
        if v is not None:
            feeds[t] = v
    outs = [o for n in rest for o in n.output if o]
    try:
        for name, v in zip(outs, _reference_run(rest, feeds, outs, model)):
            values[name] = v
        return values
    except Exception:  # noqa: BLE001, S110 - any failure: retry node by node below
        pass
    # One failing node spoils the batch: go node by node, leaving failures (and their users) unfolded.
    for n in rest:
        ins = {t: get(t) for t in n.input if t}
        if any(v is None for v in ins.values()):
            continue
        outs = [o for o in n.output if o]
        try:
            res = _reference_run([n], ins, outs, model)
        except Exception:  # noqa: BLE001, S112 - a node the evaluator cannot run stays unfolded
            continue
        for name, v in zip(outs, res):
            values[name] = v
    return values


def _fold_budget(g: onnx.GraphProto) -> int:
    """The bytes constant folding may still add to the model: what keeps it within the model-size limit
    and within one protobuf message (placer keeps weights inline). A node whose output would exceed it
    is not folded but stays an op a runtime computes: a 200-byte file's ConstantOfShape of [2**31] had
    allocated 8 GiB (and as much again in protobuf) while loading; the onnx package's light_vgg19
    folds 0.5 GiB of weights from such nodes, within it."""
    weights = sum(P.nbytes_of(tuple(t.dims), t.data_type) for t in g.initializer)
    return max(0, min(limits.max_model_bytes(), limits.PROTOBUF_MAX_BYTES) - weights)


def _inferred_bytes(n: onnx.NodeProto, types: dict) -> int:
    """The bytes of ``n``'s outputs by their inferred shapes (0 for outputs of unknown shape:
    ConstantOfShape, the way to make a big tensor from a small one, checks its count itself)."""
    total = 0
    for o in n.output:
        vi = types.get(o) if o else None
        tt = P.tensor_type_of(vi) if vi is not None else None
        if tt is not None and tt[0] and P.is_static(tt[1]):
            total += P.nbytes_of(tt[1], tt[0])
    return total


def _fold(model: onnx.ModelProto, where: str) -> None:
    g = model.graph
    graph_outputs = {o.name for o in g.output}
    for _ in range(_MAX_FOLD_ROUNDS):
        budget = round_budget = _fold_budget(g)  # what this round's folded tensors may add, in all
        types = _infer(model, strict=False, where=where)
        const = {t.name for t in g.initializer}
        known: dict[str, np.ndarray] = {}
        candidates: list[onnx.NodeProto] = []
        shape_folded: set[str] = set()
        for n in g.node:
            if (
                n.domain == ""
                and n.op_type in ("Shape", "Size")
                and len(n.input) == 1
                and n.input[0] not in const
                and n.output[0] not in graph_outputs
            ):
                vi = types.get(n.input[0])
                tt = P.tensor_type_of(vi) if vi is not None else None
                if tt is not None and P.is_static(tt[1]):
                    known[n.output[0]] = _shape_value(n, tt[1])
                    const.add(n.output[0])
                    shape_folded.add(n.name)
                    continue
            size = _inferred_bytes(n, types) if _foldable(n, const, graph_outputs) else None
            if size is not None and size <= budget:
                budget -= size
                candidates.append(n)
                const.update(o for o in n.output if o)
        if not candidates and not known:
            return
        init_by_name = {t.name: t for t in g.initializer}
        values = dict(known)
        values.update(_evaluate(candidates, known, init_by_name, model, round_budget))
        folded = set(shape_folded)
        for n in candidates:
            if all((not o) or o in values for o in n.output):
                folded.add(n.name)
        if not folded:
            return
        kept = [n for n in g.node if n.name not in folded]
        needed: list[str] = []
        seen: set[str] = set()
        for n in kept:
            names = list(n.input) + (P.subgraph_outer_refs(n) if P.has_subgraph(n) else [])
            for t in names:
                if t and t in values and t not in init_by_name and t not in seen:
                    seen.add(t)
                    needed.append(t)
        for t in needed:
            arr = values[t]
            vi = types.get(t)
            tt = P.tensor_type_of(vi) if vi is not None else None
            elem_type = tt[0] if tt is not None and tt[0] else None
            if elem_type is not None:
                want = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
                if arr.dtype != want:
                    arr = arr.astype(want)
            P.fill_tensor(g.initializer.add(), arr, t, elem_type)
        del g.node[:]
        g.node.extend(kept)


def _drop_unused_optional_outputs(n: onnx.NodeProto, live: set[str], opsets: dict[str, int]) -> None:
    """Unused optional outputs (Dropout's mask, ...) are removed: they often have no inferable type."""
    if all((not o) or o in live for o in n.output):
        return
    schema = P.schema_for(n.op_type, n.domain, opsets.get(n.domain))
    if schema is None:
        return
    formal = list(schema.outputs)
    if not formal or formal[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return
    outs = list(n.output)
    for i, o in enumerate(outs):
        if o and o not in live and i < len(formal) and formal[i].option == onnx.defs.OpSchema.FormalParameterOption.Optional:
            outs[i] = ""
    while outs and not outs[-1]:
        outs.pop()
    if outs != list(n.output):
        del n.output[:]
        n.output.extend(outs)


def _prune(model: onnx.ModelProto) -> None:
    """Drop nodes with no path to a graph output, unused optional outputs, unread initializers."""
    g = model.graph
    live: set[str] = {o.name for o in g.output}
    keep: list[bool] = []
    for n in reversed(g.node):
        alive = any(o in live for o in n.output if o)
        keep.append(alive)
        if alive:
            live.update(t for t in n.input if t)
            if P.has_subgraph(n):
                live.update(P.subgraph_outer_refs(n))
    keep.reverse()
    opsets = {o.domain: o.version for o in model.opset_import}
    for n in g.node:
        _drop_unused_optional_outputs(n, live, opsets)
    if not all(keep):
        nodes = [n for n, k in zip(g.node, keep) if k]
        del g.node[:]
        g.node.extend(nodes)
    # Deleting from a repeated field of big messages in place is cheap; rebuilding would copy them.
    for i in reversed(range(len(g.initializer))):
        if g.initializer[i].name not in live:
            del g.initializer[i]


def _constant_outputs_through_identity(g: onnx.GraphProto) -> None:
    """A graph output that is an initializer gets an Identity node that writes it (from the initializer,
    renamed): every output is then produced by an op, which a partition can run and a plan's stage
    config can name as its source. Not in a graph with no other op (refused as having nothing to place)."""
    if not len(g.node):
        return
    inits = {t.name: t for t in g.initializer}
    taken = {t for n in g.node for t in (*n.input, *n.output)} | set(inits) | {i.name for i in g.input}
    names = {n.name for n in g.node}
    added = []
    for o in g.output:
        init = inits.get(o.name)
        if init is None:
            continue
        src, k = f"{o.name}__constant", 1
        while src in taken:
            src, k = f"{o.name}__constant_{k}", k + 1
        node, k = f"constant_output_{o.name}", 1
        while node in names:
            node, k = f"constant_output_{o.name}_{k}", k + 1
        taken.add(src)
        names.add(node)
        init.name = src
        added.append(onnx.helper.make_node("Identity", [src], [o.name], name=node))
    if added:  # first: other nodes may read the output too, and the node list stays in topological order
        nodes = added + list(g.node)
        del g.node[:]
        g.node.extend(nodes)


def _final_inference(model: onnx.ModelProto, where: str) -> None:
    g = model.graph
    types = _infer(model, strict=True, where=where)
    boundary = contract_dynamic(model, types, where, _node_desc)
    if boundary:  # dynamic regions became opaque ops: infer again, their outputs keep their shapes
        types = _infer(model, strict=True, where=where)
        types.update(boundary)
    constants = {t.name for t in g.initializer}
    infos: list[onnx.ValueInfoProto] = []
    outputs = {o.name for o in g.output}
    for n in g.node:
        for t in n.output:
            if not t:
                continue
            vi = types.get(t)
            tt = P.tensor_type_of(vi) if vi is not None else None
            if tt is None:
                what = "no inferred type" if vi is None else "a non-tensor type"
                raise GraphError(
                    f"{where}: tensor '{t}' produced by {_node_desc(n)} has {what}; placer needs "
                    "tensors with static shapes"
                )
            elem_type, dims = tt
            if elem_type == 0 or not P.is_static(dims):
                raise GraphError(
                    f"{where}: tensor '{t}' produced by {_node_desc(n)} has no static shape "
                    f"(inferred {P.dtype_name(elem_type) if elem_type else '?'} {_fmt_dims(dims)}); "
                    "bind the graph inputs' shapes (shapes=... / --shape) or simplify the model"
                )
            numel = math.prod(dims)
            if numel == 0 or numel > MAX_TENSOR_ELEMENTS:
                what = ("no elements" if numel == 0
                        else f"{numel:.3g} elements (placer accepts {MAX_TENSOR_ELEMENTS:.3g})")
                raise GraphError(
                    f"{where}: tensor '{t}' produced by {_node_desc(n)} has shape {_fmt_dims(dims)}: {what}"
                )
            if t not in outputs:
                infos.append(vi)
    for vi in g.input:
        tt = P.tensor_type_of(vi)
        if tt is None or not P.is_static(tt[1]):
            raise GraphError(f"{where}: graph input '{vi.name}' has no static shape")
    new_outputs = []
    for o in g.output:
        vi = types.get(o.name)
        if o.name in constants:
            t = next(t for t in g.initializer if t.name == o.name)
            vi = onnx.helper.make_tensor_value_info(o.name, t.data_type, list(t.dims))
        tt = P.tensor_type_of(vi) if vi is not None else None
        if tt is None or not P.is_static(tt[1]) or tt[0] == 0:
            raise GraphError(f"{where}: graph output '{o.name}' has no static shape")
        new_outputs.append(vi)
    del g.value_info[:]
    g.value_info.extend(infos)
    del g.output[:]
    g.output.extend(new_outputs)


def _mark(model: onnx.ModelProto) -> None:
    for p in model.metadata_props:
        if p.key == FOLDED_KEY:
            p.value = FOLDED_VALUE
            return
    model.metadata_props.add(key=FOLDED_KEY, value=FOLDED_VALUE)
