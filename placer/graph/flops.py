"""FLOP counts per op, from static shapes and attributes.

A multiply-add counts as 2 FLOPs; a transcendental (exp, erf, tanh, sqrt...) counts as 1.
``out`` is the number of elements of the first output, ``in`` of the first input.

=========================================  ====================================================
op family                                  FLOPs
=========================================  ====================================================
Conv (any group / dilation / stride)       ``2 * out * (C_in/group * prod(kernel))`` + ``out``
                                           if a bias is given. ``W.shape[1] == C_in/group``, so
                                           groups are exact; dilation does not change the count.
ConvTranspose                              ``2 * in * (C_out/group * prod(kernel))`` + ``out``
                                           with a bias (each input element scatters into a
                                           kernel-sized window of every output channel of its
                                           group).
Gemm                                       ``2*M*N*K`` + ``M*N`` if C is given (beta != 0)
                                           + ``M*N`` if alpha != 1.
MatMul / MatMulInteger / QLinearMatMul     ``2 * out * K`` (batched and broadcast; K = last dim
                                           of A, or A's only dim when A is 1-D).
Einsum                                     ``2 * prod(all distinct index extents)``.
BatchNormalization (inference)             ``2 * out`` (scale and shift folded per channel).
InstanceNorm / LayerNorm / GroupNorm /     ``8 * out`` (mean, centre, square, sum, rsqrt-scale,
MeanVarianceNormalization / RMSNorm        gamma, beta).
LRN                                        ``out * (2*size + 4)`` (window sum of squares, then
                                           scale, bias, pow, divide).
Softmax / LogSoftmax / Hardmax             ``5 * out`` (max, subtract, exp, sum, divide).
MaxPool / AveragePool / LpPool             ``out * prod(kernel)`` (``2*`` for LpPool).
Global{Average,Max}Pool, GlobalLpPool      ``in`` (``2*in`` for GlobalLpPool).
Reduce* / ArgMax / ArgMin / CumSum / TopK  ``in`` (``2*in`` for ReduceSumSquare, ReduceL2,
                                           ReduceLogSumExp).
Sum / Max / Min (variadic)                 ``(n_inputs - 1) * out``; Mean: ``n_inputs * out``.
Elementwise unary / binary / Where / Cast  ``out`` (1 per output element).
Resize / Upsample                          nearest: 0; linear: ``2 * 2**k * out``; cubic:
                                           ``2 * 4**k * out`` (k = number of resized dims).
Pure data movement (Reshape, Transpose,    0.
Concat, Split, Slice, Gather*, Scatter*,
(Un)Squeeze, Flatten, Identity, Dropout,
Pad, Expand, Tile, Shape, Size,
DepthToSpace, SpaceToDepth, Constant*)
anything else                              ``out`` (1 per output element).
=========================================  ====================================================
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["DATA_MOVEMENT_OPS", "op_flops"]

Shape = tuple[int, ...]

DATA_MOVEMENT_OPS = frozenset(
    {
        "Reshape",
        "Transpose",
        "Concat",
        "Split",
        "SplitToSequence",
        "Slice",
        "Gather",
        "GatherElements",
        "GatherND",
        "Scatter",
        "ScatterElements",
        "ScatterND",
        "Squeeze",
        "Unsqueeze",
        "Flatten",
        "Identity",
        "Dropout",
        "Pad",
        "Expand",
        "Tile",
        "Shape",
        "Size",
        "DepthToSpace",
        "SpaceToDepth",
        "Constant",
        "ConstantOfShape",
        "Compress",
        "ReverseSequence",
        "Trilu",
        "EyeLike",
        "Range",
        "OneHot",
        "NonZero",
        "Optional",
        "OptionalGetElement",
        "OptionalHasElement",
    }
)

_NORM_OPS = frozenset(
    {
        "InstanceNormalization",
        "LayerNormalization",
        "GroupNormalization",
        "MeanVarianceNormalization",
        "RMSNormalization",
        "SimplifiedLayerNormalization",
        "SkipLayerNormalization",
    }
)
_POOL_OPS = frozenset({"MaxPool", "AveragePool", "LpPool", "MaxRoiPool"})
_GLOBAL_POOL_OPS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
_REDUCE_1 = frozenset(
    {
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceLogSum",
        "ArgMax",
        "ArgMin",
        "CumSum",
        "TopK",
    }
)
_REDUCE_2 = frozenset({"ReduceSumSquare", "ReduceL2", "ReduceLogSumExp"})
_MATMUL_OPS = frozenset({"MatMul", "MatMulInteger", "QLinearMatMul", "FusedMatMul"})
_CONV_OPS = frozenset({"Conv", "ConvInteger", "QLinearConv", "FusedConv"})


def _numel(shape: Sequence[int] | None) -> int:
    return math.prod(shape) if shape is not None else 0


def op_flops(
    op_type: str,
    attrs: dict[str, Any],
    in_shapes: Sequence[Shape | None],
    out_shapes: Sequence[Shape],
) -> int:
    """FLOPs of one op (see the module docstring for the formula of each op family).

    ``in_shapes[i]`` is None for an omitted optional input.
    """
    out = _numel(out_shapes[0]) if out_shapes else 0
    x = in_shapes[0] if in_shapes else None
    n_in = _numel(x)
    present = [s is not None for s in in_shapes]

    if op_type in DATA_MOVEMENT_OPS:
        return 0
    if op_type in _CONV_OPS:
        w_index = 3 if op_type == "QLinearConv" else 1
        w = in_shapes[w_index] if len(in_shapes) > w_index else None
        if w is None or len(w) < 2:
            return out
        bias_index = 8 if op_type == "QLinearConv" else 2
        has_bias = len(present) > bias_index and present[bias_index]
        return 2 * out * _numel(w[1:]) + (out if has_bias else 0)
    if op_type == "ConvTranspose":
        w = in_shapes[1] if len(in_shapes) > 1 else None
        if w is None or len(w) < 2:
            return out
        has_bias = len(present) > 2 and present[2]
        return 2 * n_in * _numel(w[1:]) + (out if has_bias else 0)
    if op_type == "Gemm":
        a, b = in_shapes[0], in_shapes[1]
        if a is None or b is None or len(a) != 2 or len(b) != 2:
            return out
        k = a[0] if attrs.get("transA", 0) else a[1]
        m, n = out_shapes[0][0], out_shapes[0][1]
        flops = 2 * m * n * k
        if len(present) > 2 and present[2] and float(attrs.get("beta", 1.0)) != 0.0:
            flops += m * n
        if float(attrs.get("alpha", 1.0)) != 1.0:
            flops += m * n
        return flops
    if op_type in _MATMUL_OPS:
        a = in_shapes[0]
        if a is None or len(a) == 0:
            return out
        return 2 * out * a[-1]
    if op_type == "Einsum":
        return _einsum_flops(attrs.get("equation", ""), in_shapes, out)
    if op_type == "BatchNormalization":
        return 2 * out
    if op_type in _NORM_OPS:
        return 8 * out
    if op_type == "LRN":
        return out * (2 * int(attrs.get("size", 1)) + 4)
    if op_type in ("Softmax", "LogSoftmax", "Hardmax"):
        return 5 * out
    if op_type in _POOL_OPS:
        kernel = attrs.get("kernel_shape") or attrs.get("pooled_shape") or []
        k = _numel(kernel) if kernel else 1
        return out * k * (2 if op_type == "LpPool" else 1)
    if op_type in _GLOBAL_POOL_OPS:
        return n_in * (2 if op_type == "GlobalLpPool" else 1)
    if op_type in _REDUCE_1:
        return n_in
    if op_type in _REDUCE_2:
        return 2 * n_in
    if op_type in ("Sum", "Max", "Min"):
        return max(sum(present) - 1, 0) * out
    if op_type == "Mean":
        return sum(present) * out
    if op_type in ("Resize", "Upsample"):
        mode = attrs.get("mode", "nearest")
        if mode == "nearest" or x is None or not out_shapes:
            return 0
        k = sum(1 for a, b in zip(x, out_shapes[0]) if a != b)
        taps = 4**k if mode == "cubic" else 2**k
        return 2 * taps * out
    return out


def _einsum_flops(equation: str, in_shapes: Sequence[Shape | None], out: int) -> int:
    try:
        lhs = equation.replace(" ", "").split("->")[0]
        extents: dict[str, int] = {}
        for term, shape in zip(lhs.split(","), in_shapes):
            if shape is None or "..." in term:
                return 2 * out
            for letter, dim in zip(term, shape):
                extents[letter] = max(extents.get(letter, 1), dim)
        return 2 * math.prod(extents.values()) if extents else out
    except (ValueError, TypeError, IndexError):
        return 2 * out
