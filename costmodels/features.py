"""Features of one op, computed from its signature alone.

An op's cost depends only on its signature (op type, attributes, input/output shapes and dtypes),
so every feature here is a function of the signature dict plus the work numbers the graph layer
and the profile store keep next to it (``flops``, ``bytes_in``, ``bytes_out``, ``weight_bytes``).
Where those numbers are missing they are estimated from the shapes (:func:`estimate_work`).

:func:`normalize_signature` accepts what the rest of placer hands around: a ``placer.graph`` ``Op``
(its signature plus its work numbers), a ``Signature`` (anything with ``to_dict()``), or a plain
mapping, and returns one canonical dict::

    {"op_type": "Conv", "domain": "", "attrs": {...},
     "inputs":  [{"shape": (1, 3, 224, 224), "dtype": "float32", "const": False}, ...],
     "outputs": [{"shape": (1, 64, 112, 112), "dtype": "float32"}],
     "flops": 2.4e8, "bytes_in": ..., "bytes_out": ..., "weight_bytes": ...}

:func:`signature_features` turns it into a fixed-length vector; :data:`FEATURE_NAMES` names the
columns. The vector is the same for every target; targets differ by the regressor fitted on it.

Examples
--------
>>> sig = {"op_type": "Relu", "inputs": [{"shape": [1, 64, 56, 56], "dtype": "float32"}],
...        "outputs": [{"shape": [1, 64, 56, 56], "dtype": "float32"}]}
>>> x = signature_features(sig)
>>> float(x[FEATURE_NAMES.index("op=Relu")])
1.0
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from placer.graph.opgraph import Signature

#: Op types with their own one-hot column; anything else is ``op=other`` (plus its family column).
OP_VOCAB: tuple[str, ...] = (
    "Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "Clip",
    "Sigmoid", "Tanh", "Erf", "Pow", "Sqrt", "MaxPool", "AveragePool", "GlobalAveragePool",
    "BatchNormalization", "LayerNormalization", "LRN", "Softmax", "Concat", "Reshape", "Transpose",
    "Flatten", "Gather", "ReduceMean", "Split", "Slice", "Squeeze", "Unsqueeze", "Dropout",
    "Identity", "Cast", "Where", "Expand", "Gelu", "Sum",
)

#: Coarse op families; a regressor trained on few rows generalises through these.
FAMILIES: dict[str, tuple[str, ...]] = {
    "conv": ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"),
    "matmul": ("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "Einsum"),
    "elementwise": (
        "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "Tanh", "Erf",
        "Pow", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Max", "Min", "Where", "Equal",
        "Less", "Greater", "Not", "And", "Or", "HardSigmoid", "HardSwish", "Gelu", "Cast", "Sum",
        "Mean", "Floor", "Ceil", "Round", "Sign", "Elu", "Selu", "Softplus", "Mish",
    ),
    "pool": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"),
    "norm": (
        "BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
        "LRN", "Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceL2",
        "SkipLayerNormalization",
    ),
    "movement": (
        "Concat", "Reshape", "Transpose", "Flatten", "Gather", "Split", "Slice", "Squeeze",
        "Unsqueeze", "Expand", "Tile", "Pad", "Resize", "DepthToSpace", "SpaceToDepth",
        "Identity", "Dropout", "Shape", "ConstantOfShape", "Range", "ScatterND", "GatherElements",
    ),
}
_FAMILY_OF = {t: fam for fam, types in FAMILIES.items() for t in types}
FAMILY_NAMES: tuple[str, ...] = tuple(FAMILIES) + ("other",)

_DTYPE_BYTES = {
    "float32": 4, "float": 4, "float16": 2, "bfloat16": 2, "float64": 8, "double": 8,
    "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
    "uint64": 8, "bool": 1,
}
# ONNX TensorProto.DataType numbers, for signature dicts that keep dtypes as ints.
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
                9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}

_NUMERIC = (
    # work
    "log_flops", "log_bytes_in", "log_bytes_out", "log_weight_bytes", "log_intensity",
    "log_out_elems", "log_in_elems", "dtype_bytes", "n_inputs", "n_outputs", "out_rank",
    # conv / pool family (first input taken as N, C, H, W)
    "N", "C", "H", "W", "K", "out_H", "out_W", "kernel_h", "kernel_w", "stride", "dilation",
    "pad", "groups", "depthwise", "log_C", "log_K", "log_HW",
    # matmul family: A[..., M, Kd] @ B[Kd, Nd]; batch = prod(leading dims); heads = dim 1 of a rank-4 A
    "mm_batch", "mm_M", "mm_K", "mm_N", "heads", "seq", "hidden", "b_const",
    # others
    "axis_last", "concat_inputs",
    # vector-width alignment of the channel / inner sizes (kernels pick code paths by it), and how a
    # data-movement op walks memory (the innermost axis kept in place or not; the rank)
    "align_C", "align_K", "align_inner", "inner_moved", "in_rank",
    # a convolution as the GEMM its kernels run, per group: M = output pixels, N = K / groups,
    # depth = C / groups * kh * kw; how well N and C / groups fit the vector width picks the kernel
    # (1-thread ONNX Runtime: 47 GFLOP/s at 5 output channels per group, 200 at 128)
    "log_C_per_group", "log_K_per_group", "log_gemm_depth", "log_gemm_M", "align_C_per_group",
    "align_K_per_group", "K_per_group_mod16", "log_groups",
    # an element-wise op with several operands: one of them a single element, or broadcast along
    # some axes (ONNX Runtime's binary kernels take three paths: scalar, same shape, general)
    "bcast_scalar", "bcast_partial",
    # a transpose copies runs of the trailing axes it keeps in place: the run's length in elements
    "log_inner_run",
    # the largest data (non-weight) input: ONNX Runtime copies each input of a Concat with a parallel-for
    # of its own, and its pool splits a call only above a size (near 90k float elements)
    "log_max_in_elems",
)
#: Column names of :func:`signature_features`, in order.
FEATURE_NAMES: tuple[str, ...] = (
    tuple(f"op={t}" for t in OP_VOCAB) + ("op=other",) + tuple(f"family={f}" for f in FAMILY_NAMES) + _NUMERIC
)


def kernel_op_type(op_type: str, attrs: Mapping[str, Any]) -> str:
    """The op type whose kernel a runtime runs for this op. A ``Dropout`` from before opset 12 (it
    carries a ``ratio`` attribute; later ones take the ratio as an input) is the identity at
    inference, and runtimes register it as their Identity kernel (ONNX Runtime: ``IdentityOp``,
    a copy); the later one has its own kernel, 3-4x slower per element at one thread."""
    if op_type == "Dropout" and "ratio" in attrs:
        return "Identity"
    return op_type


def family_of(op_type: str) -> str:
    """Coarse family of an op type: conv, matmul, elementwise, pool, norm, movement or other."""
    return _FAMILY_OF.get(op_type, "other")


# ---- canonical signature dict ------------------------------------------------------------------
def _tensor(t: Any) -> dict:
    """One input/output description -> {"shape": tuple, "dtype": str, "const": bool | None}."""
    if t is None:
        return {"shape": (), "dtype": "float32", "const": None, "missing": True}
    if isinstance(t, Mapping):
        shape = t.get("shape", t.get("dims", ()))
        dtype = t.get("dtype", t.get("elem_type", "float32"))
        const = t.get("const", t.get("is_constant", t.get("constant")))
    elif isinstance(t, (list, tuple)) and len(t) in (2, 3) and isinstance(t[0], (list, tuple)):
        shape, dtype = t[0], t[1]
        const = t[2] if len(t) == 3 else None
    else:  # a bare shape
        shape, dtype, const = t, "float32", None
    if isinstance(dtype, (int, np.integer)):
        dtype = _ONNX_DTYPES.get(int(dtype), "float32")
    shape = tuple(int(d) if d is not None and int(d) >= 0 else 1 for d in (shape or ()))
    return {"shape": shape, "dtype": str(dtype), "const": None if const is None else bool(const)}


def normalize_signature(obj: Any) -> dict:
    """Canonical signature dict (see the module docstring) from an Op, a Signature or a mapping.

    Work numbers present on the object or in the mapping are kept; missing ones are estimated
    from shapes with :func:`estimate_work`.
    """
    extra: dict[str, Any] = {}
    if hasattr(obj, "signature") and not isinstance(obj, Mapping):  # placer.graph Op
        for key in ("flops", "bytes_in", "bytes_out", "weight_bytes"):
            if getattr(obj, key, None) is not None:
                extra[key] = getattr(obj, key)
        obj = obj.signature
    if hasattr(obj, "to_dict") and not isinstance(obj, Mapping):
        if isinstance(getattr(obj, "hash", None), str):
            extra["hash"] = obj.hash
        obj = obj.to_dict()
    if not isinstance(obj, Mapping):
        raise TypeError(f"expected an Op, a Signature or a signature dict, got {type(obj).__name__}")
    if "signature" in obj and isinstance(obj["signature"], Mapping):  # a store row {signature, flops...}
        extra = {**{k: obj[k] for k in ("flops", "bytes", "bytes_in", "bytes_out", "weight_bytes")
                    if obj.get(k) is not None}, **extra}
        obj = obj["signature"]
    op_type = str(obj.get("op_type", obj.get("type", "")))
    attrs = dict(obj.get("attrs", obj.get("attributes", {})) or {})
    inputs = [_tensor(t) for t in (obj.get("inputs", obj.get("input_shapes", ())) or ())]
    outputs = [_tensor(t) for t in (obj.get("outputs", obj.get("output_shapes", ())) or ())]
    # constant flags may come as a separate list
    consts = obj.get("input_const", obj.get("const_inputs"))
    if consts is not None and len(consts) == len(inputs):
        for t, c in zip(inputs, consts):
            t["const"] = bool(c)
    sig = {"op_type": op_type, "domain": str(obj.get("domain", "") or ""), "attrs": attrs,
           "inputs": inputs, "outputs": outputs}
    key = extra.get("hash") or obj.get("hash") or _graph_hash(obj)
    if key:
        sig["hash"] = str(key)
    for key in ("flops", "bytes_in", "bytes_out", "weight_bytes"):
        val = extra.get(key, obj.get(key))
        if val is not None:
            sig[key] = float(val)
    est = estimate_work(sig)
    total = extra.get("bytes", obj.get("bytes"))
    if total is not None and "bytes_in" not in sig and "bytes_out" not in sig:
        # the profile store keeps bytes in + out as one number: split it like the shapes do
        sig["bytes_out"] = min(est["bytes_out"], float(total))
        sig["bytes_in"] = float(total) - sig["bytes_out"]
    for key, val in est.items():
        sig.setdefault(key, val)
    return sig


def _graph_hash(d: Mapping) -> str | None:
    """``Signature.hash`` of a dict in placer.graph's ``Signature.to_dict()`` form, else None."""
    if "v" not in d or "version" not in d:
        return None
    try:
        return Signature.from_dict(d).hash
    except Exception:  # not quite that form: fall back to our own hash
        return None


def signature_key(obj: Any) -> str:
    """The key a signature is measured under: the graph's ``Signature.hash`` when the object is an
    Op, a Signature or a dict of either form (or a normalized dict carrying ``hash``); else a
    stable hash of op type, domain, attrs, shapes and dtypes (work numbers excluded).
    """
    for cand in (obj, getattr(obj, "signature", None)):
        h = getattr(cand, "hash", None)
        if isinstance(h, str) and h and not isinstance(cand, Mapping):
            return h
    sig = normalize_signature(obj)
    if sig.get("hash"):
        return sig["hash"]
    blob = {
        "op_type": sig["op_type"], "domain": sig["domain"], "attrs": jsonable(sig["attrs"]),
        "inputs": [[list(t["shape"]), t["dtype"]] for t in sig["inputs"]],
        "outputs": [[list(t["shape"]), t["dtype"]] for t in sig["outputs"]],
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def jsonable(v: Any) -> Any:
    """A JSON-safe deep copy: mappings with string keys, tuples as lists, bytes as hex, numpy scalars
    as Python numbers."""
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, np.generic):
        return v.item()
    return v


# ---- work estimates ----------------------------------------------------------------------------
def _prod(shape: Iterable[int]) -> int:
    return int(np.prod(list(shape), dtype=np.int64)) if shape else 1


def _nbytes(t: Mapping) -> float:
    return float(_prod(t["shape"]) * _DTYPE_BYTES.get(t["dtype"], 4)) if not t.get("missing") else 0.0


def _attr_ints(attrs: Mapping, key: str, default: Sequence[int]) -> list[int]:
    v = attrs.get(key, default)
    if isinstance(v, (int, float, np.integer)):
        return [int(v)]
    try:
        return [int(x) for x in v]
    except TypeError:
        return list(default)


def _is_weight(sig: Mapping, i: int) -> bool:
    """Whether input ``i`` is a weight (constant); guessed from the op type when not recorded."""
    t = sig["inputs"][i]
    if t.get("const") is not None:
        return bool(t["const"])
    op = sig["op_type"]
    if op in ("Conv", "ConvTranspose", "Gemm", "BatchNormalization", "LayerNormalization",
              "InstanceNormalization", "PRelu"):
        return i >= 1
    return False


def estimate_work(sig: Mapping) -> dict[str, float]:
    """FLOPs and bytes of a canonical signature dict, from shapes (rough, but monotone in size).

    Returns ``{"flops", "bytes_in", "bytes_out", "weight_bytes"}``.
    """
    ins, outs, op, attrs = sig["inputs"], sig["outputs"], sig["op_type"], sig["attrs"]
    out_elems = float(sum(_prod(t["shape"]) for t in outs)) if outs else 0.0
    in_elems = float(_prod(ins[0]["shape"])) if ins else 0.0
    weight_bytes = sum(_nbytes(t) for i, t in enumerate(ins) if _is_weight(sig, i))
    bytes_in = sum(_nbytes(t) for i, t in enumerate(ins) if not _is_weight(sig, i))
    bytes_out = sum(_nbytes(t) for t in outs)
    fam = family_of(op)
    if op in ("Conv", "ConvTranspose") and len(ins) >= 2 and len(ins[1]["shape"]) >= 3:
        w = ins[1]["shape"]
        per_out = _prod(w[1:])  # C/groups * kh * kw
        if op == "ConvTranspose":
            flops = 2.0 * in_elems * _prod(w[1:])
        else:
            flops = 2.0 * out_elems * per_out
    elif op in ("MatMul", "Gemm") and len(ins) >= 2 and ins[0]["shape"]:
        a = ins[0]["shape"]
        k = a[-1] if not (op == "Gemm" and int(attrs.get("transA", 0))) else a[0]
        flops = 2.0 * out_elems * k
    elif fam == "pool":
        k = _prod(_attr_ints(attrs, "kernel_shape", [1]))
        flops = in_elems if op.startswith("Global") else out_elems * k
    elif op in ("Softmax", "LogSoftmax"):
        flops = 5.0 * out_elems
    elif op in ("LayerNormalization", "InstanceNormalization", "GroupNormalization"):
        flops = 8.0 * out_elems
    elif op == "LRN":
        flops = out_elems * (3.0 + int(attrs.get("size", 5)))
    elif op == "BatchNormalization":
        flops = 2.0 * out_elems
    elif fam == "elementwise":
        flops = out_elems * (8.0 if op in ("Erf", "Tanh", "Sigmoid", "Pow", "Gelu") else 1.0)
    elif fam == "norm":
        flops = in_elems
    else:
        flops = 0.0
    return {"flops": float(flops), "bytes_in": float(bytes_in), "bytes_out": float(bytes_out),
            "weight_bytes": float(weight_bytes)}


# ---- the feature vector ----------------------------------------------------------------------
def _l(x: float) -> float:
    return math.log1p(max(float(x), 0.0))


def _align(n: float) -> float:
    """The largest power of two (up to 64) that divides ``n`` (0 for 0): SIMD-friendly sizes."""
    n = int(n)
    if n <= 0:
        return 0.0
    return float(min(n & -n, 64))


def signature_features(obj: Any) -> np.ndarray:
    """Feature vector (float64, ``len(FEATURE_NAMES)``) of one op signature."""
    sig = normalize_signature(obj)
    f = dict.fromkeys(FEATURE_NAMES, 0.0)
    attrs, ins, outs = sig["attrs"], sig["inputs"], sig["outputs"]
    op = kernel_op_type(sig["op_type"], attrs)
    f[f"op={op}" if op in OP_VOCAB else "op=other"] = 1.0
    f[f"family={family_of(op)}"] = 1.0
    flops, bin_, bout, wb = sig["flops"], sig["bytes_in"], sig["bytes_out"], sig["weight_bytes"]
    f["log_flops"], f["log_bytes_in"], f["log_bytes_out"], f["log_weight_bytes"] = _l(flops), _l(bin_), _l(bout), _l(wb)
    f["log_intensity"] = _l(flops / max(bin_ + bout + wb, 1.0))
    f["log_out_elems"] = _l(sum(_prod(t["shape"]) for t in outs))
    f["log_in_elems"] = _l(_prod(ins[0]["shape"])) if ins else 0.0
    data_in = [_prod(t["shape"]) for i, t in enumerate(ins) if not _is_weight(sig, i)]
    f["log_max_in_elems"] = _l(max(data_in)) if data_in else 0.0
    f["dtype_bytes"] = float(_DTYPE_BYTES.get(outs[0]["dtype"] if outs else "float32", 4))
    f["n_inputs"], f["n_outputs"] = float(len(ins)), float(len(outs))
    f["out_rank"] = float(len(outs[0]["shape"])) if outs else 0.0
    x0 = ins[0]["shape"] if ins else ()
    y0 = outs[0]["shape"] if outs else ()
    if len(x0) >= 3 and family_of(op) in ("conv", "pool", "norm", "elementwise", "movement"):
        f["N"], f["C"] = float(x0[0]), float(x0[1])
        f["H"] = float(x0[2])
        f["W"] = float(x0[3]) if len(x0) >= 4 else 1.0
    if len(y0) >= 3:
        f["K"] = float(y0[1])
        f["out_H"] = float(y0[2])
        f["out_W"] = float(y0[3]) if len(y0) >= 4 else 1.0
    if family_of(op) in ("conv", "pool"):
        if op in ("Conv", "ConvTranspose") and len(ins) >= 2 and len(ins[1]["shape"]) >= 3:
            ks = list(ins[1]["shape"][2:])
        else:
            ks = _attr_ints(attrs, "kernel_shape", [x0[2] if len(x0) > 2 else 1, x0[3] if len(x0) > 3 else 1]
                            if op.startswith("Global") else [1])
        f["kernel_h"] = float(ks[0]) if ks else 1.0
        f["kernel_w"] = float(ks[1]) if len(ks) > 1 else f["kernel_h"]
        f["stride"] = float(max(_attr_ints(attrs, "strides", [1]) or [1]))
        f["dilation"] = float(max(_attr_ints(attrs, "dilations", [1]) or [1]))
        f["pad"] = float(sum(_attr_ints(attrs, "pads", [0])))
        g = int(attrs.get("group", 1) or 1)
        f["groups"] = float(g)
        f["depthwise"] = 1.0 if g > 1 and len(x0) >= 2 and g == x0[1] else 0.0
        if op in ("Conv", "ConvTranspose"):
            c_g, k_g = f["C"] / g, (float(y0[1]) if len(y0) >= 2 else 0.0) / g
            f["log_C_per_group"], f["log_K_per_group"] = _l(c_g), _l(k_g)
            f["log_gemm_depth"] = _l(c_g * f["kernel_h"] * f["kernel_w"])
            f["log_gemm_M"] = _l(_prod(y0[2:]) if len(y0) > 2 else 0.0)
            f["align_C_per_group"], f["align_K_per_group"] = _align(c_g), _align(k_g)
            f["K_per_group_mod16"] = float(int(k_g) % 16)
            f["log_groups"] = _l(g)
    f["log_C"], f["log_K"], f["log_HW"] = _l(f["C"]), _l(f["K"]), _l(f["H"] * f["W"])
    if family_of(op) == "matmul" and len(ins) >= 2:
        a, b = ins[0]["shape"], ins[1]["shape"]
        if op == "Gemm" and len(a) == 2 and len(b) == 2:
            m, k = (a[1], a[0]) if int(attrs.get("transA", 0)) else (a[0], a[1])
            n = b[0] if int(attrs.get("transB", 0)) else b[1]
            batch = 1
        else:
            m = a[-2] if len(a) >= 2 else 1
            k = a[-1] if a else 1
            n = b[-1] if b else 1
            batch = _prod(a[:-2]) if len(a) > 2 else 1
        f["mm_batch"], f["mm_M"], f["mm_K"], f["mm_N"] = float(batch), float(m), float(k), float(n)
        f["heads"] = float(a[1]) if len(a) == 4 else 1.0
        f["seq"] = float(m)
        f["hidden"] = float(max(k, n))
        f["b_const"] = 1.0 if _is_weight(sig, 1) or (len(ins) > 1 and ins[1].get("const")) else 0.0
    elif family_of(op) in ("norm", "elementwise", "movement") and len(x0) == 3:
        f["seq"], f["hidden"] = float(x0[1]), float(x0[2])
    if "axis" in attrs and x0:
        try:
            ax = int(attrs["axis"])
            f["axis_last"] = 1.0 if ax in (-1, len(x0) - 1) else 0.0
        except (TypeError, ValueError):
            pass
    if op == "Concat":
        f["concat_inputs"] = float(len(ins))
    if family_of(op) == "elementwise" and len(ins) >= 2:
        sizes = [_prod(t["shape"]) for t in ins]
        out_size = _prod(y0) if outs else max(sizes)
        f["bcast_scalar"] = 1.0 if min(sizes) == 1 < out_size else 0.0
        f["bcast_partial"] = 1.0 if any(1 < n < out_size for n in sizes) else 0.0
    f["align_C"], f["align_K"] = _align(f["C"]), _align(f["K"])
    f["align_inner"] = _align(x0[-1]) if x0 else 0.0
    f["in_rank"] = float(len(x0))
    if op == "Transpose" and x0:
        perm = _attr_ints(attrs, "perm", list(range(len(x0)))[::-1])
        f["inner_moved"] = 1.0 if perm and perm[-1] != len(x0) - 1 else 0.0
        kept = 0
        while kept < len(perm) and perm[len(perm) - 1 - kept] == len(perm) - 1 - kept:
            kept += 1
        f["log_inner_run"] = _l(_prod(x0[len(x0) - kept:]) if kept else 1)
    return np.fromiter((f[n] for n in FEATURE_NAMES), dtype=np.float64, count=len(FEATURE_NAMES))


def feature_matrix(signatures: Iterable[Any]) -> np.ndarray:
    """Stack :func:`signature_features` of many signatures into ``[n, len(FEATURE_NAMES)]``."""
    rows = [signature_features(s) for s in signatures]
    if not rows:
        return np.zeros((0, len(FEATURE_NAMES)))
    return np.vstack(rows)


_OP_COLS = [FEATURE_NAMES.index(f"op={t}") for t in OP_VOCAB] + [FEATURE_NAMES.index("op=other")]
_OP_NAMES = list(OP_VOCAB) + ["other"]


def op_type_of_rows(F: np.ndarray) -> np.ndarray:
    """The one-hot op type column name (vocabulary entry or "other") of each feature row."""
    return np.array([_OP_NAMES[i] for i in np.argmax(F[:, _OP_COLS], axis=1)], dtype=object) \
        if len(F) else np.zeros(0, dtype=object)


__all__ = [
    "OP_VOCAB", "FAMILIES", "FAMILY_NAMES", "FEATURE_NAMES", "family_of", "jsonable", "normalize_signature",
    "signature_key", "estimate_work", "signature_features", "feature_matrix", "op_type_of_rows",
]
