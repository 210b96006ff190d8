"""Training ops beyond the zoo: variants of real op signatures, as ONNX the profiler can measure.

A *variant spec* is a small JSON-able dict naming an op family and its sizes, e.g.
``{"family": "conv", "N": 1, "C": 64, "H": 56, "W": 56, "K": 128, "kernel": 3, "stride": 1,
"group": 1}``. Specs come from real signatures (:func:`spec_from_signature`: the zoo's ops) and
are perturbed (:func:`perturb`: channels, spatial sizes, sequence lengths, batch, x0.5..x2), or
drawn at random per family (:func:`random_spec`). :func:`spec_model` builds a single-op ONNX
model of a spec (weights as initializers); :func:`bank_model` puts many specs side by side in one
model (independent ops, one input each), so that one profiling campaign
(:func:`placer.profile.campaign.profile_graph`) measures every variant as a single op:
:func:`profile_variants` does that.

Families: conv (incl. depthwise/grouped, strided), matmul (batched, constant or activation B:
attention-style), gemm, pool (Max/Average/GlobalAverage), eltwise (Relu, Add, Mul, Sigmoid,
Clip, Erf, Tanh, Div, Sub, Sqrt), batchnorm, softmax, layernorm, concat, lrn, transpose (heads, NCHW <->
NHWC, 5-D channel shuffle), reshape (heads, channel groups, flatten: alone in a model it copies its
input, and ONNX Runtime's costs as many bytes as it moves).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from costmodels.features import family_of, normalize_signature
from placer.graph import build_graph, load_model
from placer.profile.campaign import profile_graph

FAMILIES = ("conv", "matmul", "gemm", "pool", "eltwise", "batchnorm", "softmax", "layernorm", "concat", "lrn",
            "transpose", "reshape")
ELTWISE_UNARY = ("Relu", "Sigmoid", "Clip", "Erf", "Tanh", "Sqrt")
ELTWISE_BINARY = ("Add", "Mul", "Div", "Sub")
#: op types that copy their input at inference: the light bank's element-wise family adds them
ELTWISE_PASS = ("Identity", "Dropout")
OPSET = 17


# ---- specs from real signatures -------------------------------------------------------------------
def spec_from_signature(sig: Any) -> dict | None:
    """The variant spec of a signature (Op, Signature or dict), or None for an op type not covered."""
    s = normalize_signature(sig)
    op, a = s["op_type"], s["attrs"]
    ins = [t["shape"] for t in s["inputs"]]
    if not ins:
        return None
    x = ins[0]
    if op == "Conv" and len(x) == 4 and len(ins) >= 2 and len(ins[1]) == 4:
        w = ins[1]
        strides = a.get("strides", [1, 1]) or [1, 1]
        return {"family": "conv", "N": x[0], "C": x[1], "H": x[2], "W": x[3], "K": w[0], "kernel": w[2],
                "stride": int(strides[0]), "group": int(a.get("group", 1) or 1), "bias": len(ins) > 2}
    if op == "MatMul" and len(ins) == 2 and len(x) >= 2:
        b = ins[1]
        const = bool(s["inputs"][1].get("const"))
        return {"family": "matmul", "batch": list(x[:-2]), "M": x[-2], "K": x[-1], "N": b[-1], "b_const": const}
    if op == "Gemm" and len(x) == 2 and len(ins) >= 2:
        tb = int(a.get("transB", 0) or 0)
        n = ins[1][0] if tb else ins[1][1]
        return {"family": "gemm", "M": x[0], "K": x[1], "N": n, "transB": tb}
    if op in ("MaxPool", "AveragePool") and len(x) == 4:
        k = (a.get("kernel_shape") or [2])[0]
        st = (a.get("strides") or [1])[0]
        pads = a.get("pads") or [0, 0, 0, 0]
        return {"family": "pool", "op": op, "N": x[0], "C": x[1], "H": x[2], "W": x[3], "kernel": int(k),
                "stride": int(st), "pad": int(pads[0])}
    if op == "GlobalAveragePool" and len(x) == 4:
        return {"family": "pool", "op": op, "N": x[0], "C": x[1], "H": x[2], "W": x[3]}
    if op in ELTWISE_UNARY or op in ELTWISE_BINARY or op in ELTWISE_PASS:
        other = list(ins[1]) if op in ELTWISE_BINARY and len(ins) > 1 else None
        return {"family": "eltwise", "op": op, "shape": list(x), "other": other}
    if op == "Sum" and len(ins) >= 2 and all(list(t) == list(x) for t in ins):
        return {"family": "sum", "shape": list(x), "n": len(ins)}
    if op == "BatchNormalization" and len(x) == 4:
        return {"family": "batchnorm", "N": x[0], "C": x[1], "H": x[2], "W": x[3]}
    if op == "Softmax":
        return {"family": "softmax", "shape": list(x), "axis": int(a.get("axis", -1))}
    if op == "LayerNormalization":
        return {"family": "layernorm", "shape": list(x)}
    if op == "Concat" and len(x) == 4 and int(a.get("axis", 1)) == 1:
        return {"family": "concat", "N": x[0], "Cs": [int(t[1]) for t in ins], "H": x[2], "W": x[3]}
    if op == "LRN" and len(x) == 4:
        return {"family": "lrn", "N": x[0], "C": x[1], "H": x[2], "W": x[3], "size": int(a.get("size", 5))}
    if op == "Transpose":
        perm = a.get("perm") or list(range(len(x)))[::-1]
        return {"family": "transpose", "shape": list(x), "perm": [int(p) for p in perm]}
    if op == "Reshape" and s["outputs"]:
        return {"family": "reshape", "shape": list(x), "to": list(s["outputs"][0]["shape"])}
    return None


def _scale(v: int, f: float, lo: int = 1, multiple: int = 1) -> int:
    return max(lo, int(round(v * f / multiple)) * multiple)


def perturb(spec: Mapping[str, Any], rng: np.random.Generator) -> dict:
    """A nearby variant: channels/sizes/sequence x0.5..x2, sometimes batch 2 (shapes stay valid)."""
    s = {k: (list(v) if isinstance(v, list) else v) for k, v in spec.items()}
    f = lambda: float(2.0 ** rng.uniform(-1, 1))  # noqa: E731
    fam = s["family"]
    batch = 2 if rng.random() < 0.15 else None
    if fam == "conv":
        g = s["group"]
        depthwise = g > 1 and g == s["C"]
        s["C"] = _scale(s["C"], f(), 1, 8 if s["C"] >= 16 else 1)
        s["K"] = s["C"] if depthwise else _scale(s["K"], f(), 1, 8 if s["K"] >= 16 else 1)
        s["group"] = s["C"] if depthwise else (g if s["C"] % g == 0 and s["K"] % g == 0 else 1)
        hw = _scale(s["H"], f(), max(s["kernel"], 1))
        s["H"] = s["W"] = hw
    elif fam == "matmul":
        s["M"] = _scale(s["M"], f())
        s["K"] = _scale(s["K"], f(), 1, 8 if s["K"] >= 16 else 1)
        s["N"] = _scale(s["N"], f(), 1, 8 if s["N"] >= 16 else 1)
        if s["batch"] and rng.random() < 0.3:
            s["batch"] = [_scale(d, f()) for d in s["batch"]]
    elif fam == "gemm":
        s["K"] = _scale(s["K"], f(), 1, 8 if s["K"] >= 16 else 1)
        s["N"] = _scale(s["N"], f(), 1, 8 if s["N"] >= 16 else 1)
        s["M"] = batch or s["M"]
    elif fam in ("pool", "batchnorm", "lrn"):
        s["C"] = _scale(s["C"], f(), 1, 8 if s["C"] >= 16 else 1)
        k = s.get("kernel", 1)
        s["H"] = s["W"] = _scale(s["H"], f(), max(k, 1))
    elif fam == "concat":
        s["Cs"] = [_scale(c, f(), 1, 8 if c >= 16 else 1) for c in s["Cs"]]
        s["H"] = s["W"] = _scale(s["H"], f())
    elif fam == "reshape":
        k = int(rng.choice([2, 4])) if rng.random() < 0.5 else 1
        even = s["shape"][-1] % 2 == 0 and s["to"][-1] % 2 == 0
        if rng.random() < 0.5 and even:  # halve the last dim of both shapes: same element count on each side
            s["shape"][-1] //= 2
            s["to"][-1] //= 2
        elif len(s["shape"]) > 1 and len(s["to"]) > 1 and s["shape"][0] == s["to"][0]:
            s["shape"][0] *= k  # a larger batch on both sides
            s["to"][0] *= k
    elif fam in ("eltwise", "softmax", "layernorm", "transpose", "sum"):
        shape = list(s["shape"])
        i = int(rng.integers(0, len(shape))) if shape else 0
        if shape:
            shape[i] = _scale(shape[i], f())
        if fam == "eltwise" and s.get("other") is not None:
            other = list(s["other"])
            # keep broadcasting valid: a broadcast operand keeps 1s, a full one follows the shape
            off = len(shape) - len(other)
            if 0 <= i - off < len(other) and other[i - off] != 1:
                other[i - off] = shape[i]
            s["other"] = other
        s["shape"] = shape
    if batch and fam in ("conv", "pool", "batchnorm", "lrn", "concat"):
        s["N"] = batch
    return s


#: the largest convolution (FLOPs) :func:`random_spec` draws with ``wide=True``
WIDE_MAX_FLOPS = 4e8


def _conv_flops(spec: Mapping[str, Any]) -> float:
    out = -(-spec["H"] // spec["stride"])  # "same" padding's output size (an upper bound without padding)
    return 2.0 * spec["C"] // spec["group"] * spec["K"] * spec["kernel"] ** 2 * out * out


def _cap_conv_flops(spec: dict) -> None:
    """Shrink a conv spec to at most WIDE_MAX_FLOPS: the map first, then the channels (groups kept)."""
    while _conv_flops(spec) > WIDE_MAX_FLOPS:
        if spec["H"] > max(spec["kernel"], 4):
            spec["H"] = max(spec["kernel"], 4, int(spec["H"] * 0.8))
        elif spec["group"] == spec["C"] and spec["C"] > 1:  # depthwise: channels and groups together
            spec["C"] = spec["K"] = spec["group"] = max(1, spec["C"] // 2)
        else:
            g = spec["group"]
            spec["K"] = max(g, spec["K"] // 2 // g * g)
            spec["C"] = max(g, spec["C"] // 2 // g * g) if spec["K"] == g else spec["C"]


def _log_uniform_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(round(float(np.exp(rng.uniform(np.log(lo), np.log(hi))))))


#: the most channels the wide size prior draws by default
WIDE_MAX_CHANNELS = 1024


def _wide_channels(rng: np.random.Generator, hi: int = WIDE_MAX_CHANNELS) -> int:
    """Channels log-uniform in 3..hi: mostly multiples of 8, some of 4, some any count (3, 36, 60, 1000)."""
    c = _log_uniform_int(rng, 3, hi)
    u = rng.random()
    multiple = 8 if u < 0.6 else (4 if u < 0.8 else 1)
    return max(multiple, int(round(c / multiple)) * multiple)


def _wide_size(rng: np.random.Generator) -> int:
    """A spatial size of the wide prior: 7, 14, 28 or 56 three times in ten, else log-uniform in 4..112."""
    return int(rng.choice([7, 14, 28, 56])) if rng.random() < 0.3 else _log_uniform_int(rng, 4, 112)


def random_spec(family: str, rng: np.random.Generator, wide: bool = False,
                max_channels: int = WIDE_MAX_CHANNELS) -> dict:
    """A random spec of ``family`` with sizes typical of CNNs and transformers.

    ``wide=False`` draws from short lists of the usual sizes (channels 16..512 in the usual steps,
    spatial 7..112 in powers of two); ``wide=True`` from log-uniform ranges (channels 3..1024 not
    always multiples of 8, spatial 4..112 at any size, sequences 8..512, hidden sizes 64..1024),
    grouped as well as depthwise and dense convolutions, and unpadded ones: sizes and kinds of ops
    that real models have and a short list never reaches (ShuffleNet's 4-group convolutions on 136
    to 544 channels, AlexNet's 13x13 and 27x27 maps); ``max_channels`` bounds the wide prior's
    channels (ResNet-50's last stage has 2,048).
    """
    if wide:
        ch = lambda: _wide_channels(rng, max_channels)  # noqa: E731
        hw = lambda: _wide_size(rng)  # noqa: E731
        seq = lambda: _log_uniform_int(rng, 8, 512)  # noqa: E731
        hid = lambda: 32 * _log_uniform_int(rng, 2, 32)  # noqa: E731
    else:
        ch = lambda: int(rng.choice([16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]))  # noqa: E731
        hw = lambda: int(rng.choice([7, 14, 28, 56, 112]))  # noqa: E731
        seq = lambda: int(rng.choice([16, 32, 64, 128, 256]))  # noqa: E731
        hid = lambda: int(rng.choice([64, 128, 256, 384, 512, 768]))  # noqa: E731
    if family == "conv":
        c, k = ch(), ch()
        kernel = int(rng.choice([1, 1, 3, 3, 5, 7]))
        u = rng.random()
        dw = u < 0.2
        group = c if dw else 1
        if wide and not dw and u < 0.35:  # grouped: 2..8 groups, channels rounded to a multiple of them
            group = int(rng.choice([2, 3, 4, 8]))
            c, k = max(group, c // group * group), max(group, k // group * group)
        spec = {"family": "conv", "N": 1, "C": c, "H": hw(), "W": 0, "K": c if dw else k, "kernel": kernel,
                "stride": int(rng.choice([1, 1, 2])), "group": group, "bias": True}
        if wide:
            if kernel > 1 and rng.random() < 0.2:
                spec["pad"] = 0
            _cap_conv_flops(spec)
        return spec
    if family == "matmul":
        if rng.random() < 0.5:
            s = seq()
            heads = int(rng.choice([2, 4, 8, 12]))
            d = int(rng.choice([16, 32, 64]))
            if rng.random() < 0.5:
                return {"family": "matmul", "batch": [1, heads], "M": s, "K": d, "N": s, "b_const": False}
            return {"family": "matmul", "batch": [1, heads], "M": s, "K": s, "N": d, "b_const": False}
        return {"family": "matmul", "batch": [1], "M": seq(), "K": hid(), "N": hid(), "b_const": True}
    if family == "gemm":
        return {"family": "gemm", "M": int(rng.choice([1, 1, 2, 4])), "K": int(rng.choice([256, 512, 1024, 2048])),
                "N": int(rng.choice([10, 100, 1000])), "transB": 1}
    if family == "pool":
        op = str(rng.choice(["MaxPool", "AveragePool", "GlobalAveragePool"]))
        return {"family": "pool", "op": op, "N": 1, "C": ch(), "H": hw(), "W": 0, "kernel": int(rng.choice([2, 3])),
                "stride": int(rng.choice([1, 2])), "pad": int(rng.choice([0, 1]))}
    if family == "eltwise":
        op = str(rng.choice(ELTWISE_UNARY + ELTWISE_BINARY))
        if rng.random() < 0.5:
            shape = [1, ch(), hw()]
            shape.append(shape[2])
        else:
            shape = [1, seq(), hid()]
        other = None
        if op in ELTWISE_BINARY:
            # a second tensor of the same shape, a vector along the last axis (a bias), or a scalar
            # constant (GELU's halves, attention's scale, LayerNorm's epsilon). They run at different
            # paces: ONNX Runtime at one thread, 0.25 / 0.38 / 0.17 ns per output element (50k-1M)
            u = rng.random()
            other = list(shape) if u < 0.5 else [shape[-1]] if u < 0.75 else []
        return {"family": "eltwise", "op": op, "shape": shape, "other": other}
    if family == "batchnorm":
        return {"family": "batchnorm", "N": 1, "C": ch(), "H": hw(), "W": 0}
    if family == "softmax":
        return {"family": "softmax", "shape": [1, int(rng.choice([2, 4, 8, 12])), seq(), seq()], "axis": -1}
    if family == "layernorm":
        return {"family": "layernorm", "shape": [1, seq(), hid()]}
    if family == "concat":
        n = int(rng.integers(2, 5))
        return {"family": "concat", "N": 1, "Cs": [ch() for _ in range(n)], "H": hw(), "W": 0}
    if family == "lrn":
        return {"family": "lrn", "N": 1, "C": ch(), "H": hw(), "W": 0, "size": 5}
    if family == "transpose":
        kind = int(rng.integers(0, 4))
        if kind == 0:  # attention heads
            return {"family": "transpose", "shape": [1, seq(), int(rng.choice([4, 8, 12])), 64], "perm": [0, 2, 1, 3]}
        if kind == 1:  # channel shuffle (ShuffleNet)
            g = int(rng.choice([2, 4]))
            return {"family": "transpose", "shape": [1, g, ch() // g, hw(), 0], "perm": [0, 2, 1, 3, 4]}
        perm = [0, 2, 3, 1] if kind == 2 else [0, 3, 1, 2]  # NCHW <-> NHWC
        h = hw()
        return {"family": "transpose", "shape": [1, ch(), h, h] if kind == 2 else [1, h, h, ch()], "perm": perm}
    if family == "reshape":
        kind = int(rng.integers(0, 3))
        if kind == 0:  # split the hidden size into heads
            s, h, heads = seq(), hid(), int(rng.choice([4, 8, 12]))
            h -= h % heads
            return {"family": "reshape", "shape": [1, s, h], "to": [1, s, heads, h // heads]}
        c, h = ch(), hw()
        if kind == 1:  # channel shuffle's groups, split (4-d to 5-d) or joined again (5-d to 4-d)
            g = int(rng.choice([2, 4]))
            split = [1, g, c // g, h, h] if rng.random() < 0.5 else [1, c // g, g, h, h]
            joined = [1, c - c % g, h, h]
            return ({"family": "reshape", "shape": joined, "to": split} if rng.random() < 0.5
                    else {"family": "reshape", "shape": split, "to": joined})
        return {"family": "reshape", "shape": [1, c, h, h], "to": [1, c * h * h]}  # flatten
    raise ValueError(f"unknown family {family!r}; valid: {', '.join(FAMILIES)}")


def _fix(spec: dict) -> dict:
    if spec.get("W") == 0:
        spec["W"] = spec["H"]
    return spec


# ---- ONNX building --------------------------------------------------------------------------------
def _vi(name: str, shape: Sequence[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [int(d) for d in shape])


def _const(name: str, shape: Sequence[int], rng: np.random.Generator, positive: bool = False) -> onnx.TensorProto:
    a = rng.standard_normal([int(d) for d in shape]).astype(np.float32) * 0.1
    if positive:
        a = np.abs(a) + 0.5
    return numpy_helper.from_array(a, name)


def spec_nodes(spec: Mapping[str, Any], prefix: str, rng: np.random.Generator):
    """(nodes, graph inputs, initializers, graph outputs) of one spec, names prefixed by ``prefix``."""
    s = _fix(dict(spec))
    fam = s["family"]
    x, y = f"{prefix}_x", f"{prefix}_y"
    inits: list = []
    ins: list = []
    if fam == "conv":
        c, k, g, ker = s["C"], s["K"], s["group"], s["kernel"]
        ins.append(_vi(x, [s["N"], c, s["H"], s["W"]]))
        inits.append(_const(f"{prefix}_w", [k, c // g, ker, ker], rng))
        inputs = [x, f"{prefix}_w"]
        if s.get("bias", True):
            inits.append(_const(f"{prefix}_b", [k], rng))
            inputs.append(f"{prefix}_b")
        p = int(s.get("pad", ker // 2))
        node = helper.make_node("Conv", inputs, [y], name=f"{prefix}_conv", kernel_shape=[ker, ker],
                                strides=[s["stride"]] * 2, pads=[p] * 4, group=g)
    elif fam == "matmul":
        a_shape = list(s["batch"]) + [s["M"], s["K"]]
        ins.append(_vi(x, a_shape))
        if s["b_const"]:
            inits.append(_const(f"{prefix}_b", [s["K"], s["N"]], rng))
        else:
            ins.append(_vi(f"{prefix}_b", list(s["batch"]) + [s["K"], s["N"]]))
        node = helper.make_node("MatMul", [x, f"{prefix}_b"], [y], name=f"{prefix}_matmul")
    elif fam == "gemm":
        ins.append(_vi(x, [s["M"], s["K"]]))
        wshape = [s["N"], s["K"]] if s["transB"] else [s["K"], s["N"]]
        inits += [_const(f"{prefix}_w", wshape, rng), _const(f"{prefix}_c", [s["N"]], rng)]
        node = helper.make_node("Gemm", [x, f"{prefix}_w", f"{prefix}_c"], [y], name=f"{prefix}_gemm",
                                transB=s["transB"])
    elif fam == "pool":
        ins.append(_vi(x, [s["N"], s["C"], s["H"], s["W"]]))
        if s["op"] == "GlobalAveragePool":
            node = helper.make_node("GlobalAveragePool", [x], [y], name=f"{prefix}_gap")
        else:
            node = helper.make_node(s["op"], [x], [y], name=f"{prefix}_pool", kernel_shape=[s["kernel"]] * 2,
                                    strides=[s["stride"]] * 2, pads=[s.get("pad", 0)] * 4)
    elif fam == "eltwise":
        op = s["op"]
        ins.append(_vi(x, s["shape"]))
        inputs = [x]
        if op in ELTWISE_BINARY:
            other = s["shape"] if s.get("other") is None else s["other"]  # [] is a scalar
            if list(other) == list(s["shape"]):
                ins.append(_vi(f"{prefix}_o", other))
            else:
                inits.append(_const(f"{prefix}_o", other, rng, positive=True))
            inputs.append(f"{prefix}_o")
        if op == "Clip":
            inits += [numpy_helper.from_array(np.array(0.0, np.float32), f"{prefix}_lo"),
                      numpy_helper.from_array(np.array(6.0, np.float32), f"{prefix}_hi")]
            inputs += [f"{prefix}_lo", f"{prefix}_hi"]
        node = helper.make_node(op, inputs, [y], name=f"{prefix}_{op.lower()}")
    elif fam == "sum":
        names = [f"{prefix}_x{i}" for i in range(int(s["n"]))]
        ins += [_vi(n, s["shape"]) for n in names]
        node = helper.make_node("Sum", names, [y], name=f"{prefix}_sum")
    elif fam == "batchnorm":
        c = s["C"]
        ins.append(_vi(x, [s["N"], c, s["H"], s["W"]]))
        names = [f"{prefix}_{n}" for n in ("scale", "bias", "mean", "var")]
        inits += [_const(n, [c], rng, positive=(i == 3)) for i, n in enumerate(names)]
        node = helper.make_node("BatchNormalization", [x] + names, [y], name=f"{prefix}_bn")
    elif fam == "softmax":
        ins.append(_vi(x, s["shape"]))
        node = helper.make_node("Softmax", [x], [y], name=f"{prefix}_softmax", axis=s.get("axis", -1))
    elif fam == "layernorm":
        ins.append(_vi(x, s["shape"]))
        h = s["shape"][-1]
        inits += [_const(f"{prefix}_g", [h], rng, positive=True), _const(f"{prefix}_be", [h], rng)]
        node = helper.make_node("LayerNormalization", [x, f"{prefix}_g", f"{prefix}_be"], [y],
                                name=f"{prefix}_ln", axis=-1, epsilon=1e-5)
    elif fam == "concat":
        names = [f"{prefix}_x{i}" for i in range(len(s["Cs"]))]
        ins += [_vi(n, [s["N"], c, s["H"], s["W"]]) for n, c in zip(names, s["Cs"])]
        node = helper.make_node("Concat", names, [y], name=f"{prefix}_concat", axis=1)
    elif fam == "lrn":
        ins.append(_vi(x, [s["N"], s["C"], s["H"], s["W"]]))
        node = helper.make_node("LRN", [x], [y], name=f"{prefix}_lrn", size=s.get("size", 5), alpha=1e-4,
                                beta=0.75, bias=1.0)
    elif fam == "transpose":
        shape = [d if d else s["shape"][3] for d in s["shape"]]  # a 0 (5-D shuffle's W) is H: square maps
        ins.append(_vi(x, shape))
        node = helper.make_node("Transpose", [x], [y], name=f"{prefix}_transpose", perm=s["perm"])
    elif fam == "reshape":
        ins.append(_vi(x, s["shape"]))
        inits.append(numpy_helper.from_array(np.array(s["to"], np.int64), f"{prefix}_to"))
        node = helper.make_node("Reshape", [x, f"{prefix}_to"], [y], name=f"{prefix}_reshape")
    else:
        raise ValueError(f"unknown family {fam!r}; valid: {', '.join(FAMILIES + ('sum',))}")
    out = helper.make_tensor_value_info(y, TensorProto.FLOAT, None)
    return [node], ins, inits, [out]


def bank_model(specs: Sequence[Mapping[str, Any]], name: str = "variants", seed: int = 0) -> onnx.ModelProto:
    """One ONNX model holding every spec as an independent op (inputs/outputs of their own)."""
    rng = np.random.default_rng(seed)
    nodes, ins, inits, outs = [], [], [], []
    for i, spec in enumerate(specs):
        n, gi, ini, go = spec_nodes(spec, f"v{i}", rng)
        nodes += n
        ins += gi
        inits += ini
        outs += go
    g = helper.make_graph(nodes, name, ins, outs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def spec_model(spec: Mapping[str, Any], seed: int = 0) -> onnx.ModelProto:
    """A single-op ONNX model of one spec."""
    return bank_model([spec], name=f"variant_{spec['family']}", seed=seed)


# ---- sampling -------------------------------------------------------------------------------------
def _spec_key(spec: Mapping[str, Any]) -> str:
    import json

    return json.dumps(_fix(dict(spec)), sort_keys=True)


def sample_variants(base: Iterable[Any] = (), n: int = 200, seed: int = 0, random_share: float = 0.3,
                    families: Sequence[str] = FAMILIES, family_weights: Mapping[str, float] | None = None,
                    wide: bool = False) -> list[dict]:
    """``n`` distinct specs: perturbations of ``base`` signatures (Ops, Signatures, dicts or specs)
    and a ``random_share`` of random specs over ``families`` (drawn by ``family_weights``, equal
    weights where missing; ``wide``: the wide size prior of :func:`random_spec`)."""
    rng = np.random.default_rng(seed)
    families = list(families)
    weights = np.array([float((family_weights or {}).get(f, 1.0)) for f in families])
    if not np.all(np.isfinite(weights)) or (weights < 0).any() or weights.sum() <= 0:
        raise ValueError(f"family_weights must be finite, non-negative and not all zero: {family_weights}")
    weights = weights / weights.sum()
    seeds = []
    for b in base:
        spec = dict(b) if isinstance(b, Mapping) and "family" in b else spec_from_signature(b)
        if spec is not None and spec["family"] in families:
            seeds.append(_fix(spec))
    out: dict[str, dict] = {}
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        if seeds and rng.random() >= random_share:
            spec = perturb(seeds[int(rng.integers(0, len(seeds)))], rng)
        else:
            # without weights, the draw that earlier banks were sampled with (the same stream, the same specs)
            family = rng.choice(families, p=weights) if family_weights else rng.choice(families)
            spec = random_spec(str(family), rng, wide=wide)
        spec = _fix(spec)
        if _valid(spec):
            out.setdefault(_spec_key(spec), spec)
    return list(out.values())


def conv_variants(n: int, seed: int = 0) -> list[dict]:
    """``n`` distinct convolutions from the usual-size prior of :func:`random_spec` (dense and
    depthwise; channels 16..512 in the usual steps, maps 7..112), each at most WIDE_MAX_FLOPS: a bank
    of the convolution shapes real CNNs use, for the family where most held-out misses are."""
    only_conv = {f: (1.0 if f == "conv" else 0.0) for f in FAMILIES}
    kept: list[dict] = []
    for draws in (3 * n, 12 * n):  # the same stream, longer: a larger bank extends a smaller one
        drawn = sample_variants(n=draws, seed=seed, random_share=1.0, family_weights=only_conv)
        kept = [s for s in drawn if _conv_flops(s) <= WIDE_MAX_FLOPS][:n]
        if len(kept) == n:
            break
    return kept


#: the group counts of the grouped bank (ShuffleNet's 3 and 4, ResNeXt's 32) and its kernel sizes
GROUPED_GROUPS = (2, 3, 4, 4, 8, 16, 32)
GROUPED_KERNELS = (1, 1, 1, 3, 3)


def grouped_variants(n: int, seed: int = 0) -> list[dict]:
    """``n`` distinct grouped convolutions that are not depthwise (2..32 groups of at least two
    channels each; mostly 1x1 as in ShuffleNet, 3x3 as in ResNeXt) from the wide size prior of
    :func:`random_spec`, with and without a bias, each at most WIDE_MAX_FLOPS. ONNX Runtime runs
    one small GEMM per group, whose shapes no dense or depthwise row shows; the wide bank draws a
    grouped convolution in about one case of seven, so a held-out grouped model found a score of
    them, of all kernel sizes. A larger bank extends a smaller one drawn with the same seed."""
    def draw(rng: np.random.Generator) -> dict | None:
        g = int(rng.choice(GROUPED_GROUPS))
        c = max(2 * g, _wide_channels(rng) // g * g)
        k = max(g, _wide_channels(rng) // g * g)
        return {"family": "conv", "N": 1, "C": c, "H": _wide_size(rng), "W": 0, "K": k,
                "kernel": int(rng.choice(GROUPED_KERNELS)), "stride": int(rng.choice([1, 1, 2])), "group": g,
                "bias": bool(rng.random() < 0.5)}

    return _grouped_bank(n, seed, draw)


def _grouped_bank(n: int, seed: int, draw) -> list[dict]:
    """``n`` distinct grouped convolutions from ``draw(rng)`` (a spec, or None to draw again), each
    shrunk to WIDE_MAX_FLOPS, at least two input channels a group; at most ``50 n`` draws."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict] = {}
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        spec = draw(rng)
        if spec is None:
            continue
        _cap_conv_flops(spec)
        spec = _fix(spec)
        if spec["C"] // spec["group"] >= 2 and _valid(spec):
            out.setdefault(_spec_key(spec), spec)
    return list(out.values())


#: group counts of the balanced bank (ShuffleNet: 2-8, RegNet / ResNeXt: up to 32 and more)
BALANCED_GROUPS = (2, 3, 4, 4, 8, 8, 16, 32)
#: output over input channels per group (a bottleneck's squeeze, 1, its expansion)
BALANCED_RATIOS = (0.25, 0.5, 1.0, 1.0, 2.0, 4.0)
BALANCED_KERNELS = (1, 1, 1, 3)
#: the most channels in or out of a balanced-bank convolution (ResNet-50's last stage has 2,048)
BALANCED_MAX_CHANNELS = 2048


def balanced_grouped_variants(n: int, seed: int = 0) -> list[dict]:
    """``n`` distinct grouped convolutions whose groups have 1/4 to 4 times as many output channels
    as input channels (4-256 input channels a group, 2-32 groups, at most 2,048 channels, mostly
    1x1, spatial sizes of the wide prior, each at most WIDE_MAX_FLOPS): the pointwise group
    convolutions of ShuffleNet, ResNeXt and RegNet. :func:`grouped_variants` draws input and output
    channels apart, so a group's GEMM there is mostly long and thin, and a held-out ShuffleNet's
    4-group 1x1 convolutions (6-136 channels a group in, 28-136 out, maps of 7x7 to 56x56) found
    few rows near them: one-thread ONNX Runtime over-predicted them by 9-27%. A larger bank extends
    a smaller one drawn with the same seed."""
    def draw(rng: np.random.Generator) -> dict | None:
        g = int(rng.choice(BALANCED_GROUPS))
        c_g = _log_uniform_int(rng, 4, 256)
        k_g = max(2, int(round(c_g * float(rng.choice(BALANCED_RATIOS)))))
        if max(c_g, k_g) * g > BALANCED_MAX_CHANNELS:
            return None
        return {"family": "conv", "N": 1, "C": c_g * g, "H": _wide_size(rng), "W": 0, "K": k_g * g,
                "kernel": int(rng.choice(BALANCED_KERNELS)), "stride": int(rng.choice([1, 1, 1, 2])),
                "group": g, "bias": bool(rng.random() < 0.5)}

    return _grouped_bank(n, seed, draw)


#: the light bank's families and their weights ("pass": Identity and Dropout, "sum": n-ary Sum)
LIGHT_FAMILY_WEIGHTS = {"eltwise": 4.0, "pass": 1.0, "sum": 1.0, "transpose": 2.0, "reshape": 2.0,
                        "pool": 2.0, "concat": 1.0, "softmax": 1.0, "batchnorm": 1.0, "layernorm": 1.0}
#: the largest tensor (elements) of a light-bank op: 4 MB of float32
LIGHT_MAX_ELEMS = 1 << 20


def light_variants(n: int, seed: int = 0, max_channels: int = WIDE_MAX_CHANNELS) -> list[dict]:
    """``n`` distinct cheap ops from the wide size prior of :func:`random_spec`, no tensor over
    LIGHT_MAX_ELEMS: element-wise (Identity, Dropout and n-ary Sum too), movement, pooling,
    concatenation and normalization ops, the ops between a model's convolutions and matmuls. They
    run in 4-100 us, where a call's fixed cost and the tensor sizes decide the time, and the other
    banks hold few of them (two Identity rows, no Sum). A larger bank extends a smaller one drawn
    with the same seed and ``max_channels`` (the wide prior's channel bound; its default draws the
    banks of sessions 24-26, whose largest channel count is 1,024)."""
    rng = np.random.default_rng(seed)
    families = list(LIGHT_FAMILY_WEIGHTS)
    weights = np.array([LIGHT_FAMILY_WEIGHTS[f] for f in families])
    weights = weights / weights.sum()
    out: dict[str, dict] = {}
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        family = str(rng.choice(families, p=weights))
        if family in ("pass", "sum"):
            shape = random_spec("eltwise", rng, wide=True, max_channels=max_channels)["shape"]
            if family == "pass":
                op = str(rng.choice(ELTWISE_PASS))
                spec = {"family": "eltwise", "op": op, "shape": shape, "other": None}
            else:
                spec = {"family": "sum", "shape": shape, "n": int(rng.choice([2, 2, 3]))}
        else:
            spec = random_spec(family, rng, wide=True, max_channels=max_channels)
        spec = _fix(spec)
        if _valid(spec, max_elems=LIGHT_MAX_ELEMS):
            out.setdefault(_spec_key(spec), spec)
    return list(out.values())


#: :func:`_valid`'s answers by spec key (:func:`_spec_key`) and element cap: building a spec's model draws
#: its weights (14 ms for a wide convolution), and banks draw the same stream again to extend it
_VALID: dict[tuple[str, int], bool] = {}
_VALID_MAX = 100_000


def _valid(spec: Mapping[str, Any], max_elems: int = 8 << 20) -> bool:
    """Keep ops that build and stay small enough to time quickly (<= 8M elements per tensor)."""
    key = (_spec_key(spec), int(max_elems))
    known = _VALID.get(key)
    if known is None:
        if len(_VALID) >= _VALID_MAX:
            _VALID.clear()
        known = _VALID[key] = _builds_small(spec, max_elems)
    return known


def _builds_small(spec: Mapping[str, Any], max_elems: int) -> bool:
    try:
        m = spec_model(spec)
    except Exception:
        return False
    for vi in list(m.graph.input) + list(m.graph.output):
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if not dims or any(d <= 0 for d in dims) or int(np.prod(dims)) > max_elems:
            return False
    return True


def variant_signatures(specs: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Signature-like dicts of specs (what :func:`costmodels.features.normalize_signature` reads),
    without building an OpGraph: for tests and for pricing variants before profiling."""
    out = []
    for spec in specs:
        m = spec_model(spec)
        shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
                  for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info)}
        consts = {t.name: list(t.dims) for t in m.graph.initializer}
        node = m.graph.node[0]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        out.append({
            "op_type": node.op_type, "attrs": attrs,
            "inputs": [{"shape": consts.get(i, shapes.get(i)), "dtype": "float32", "const": i in consts}
                       for i in node.input],
            "outputs": [{"shape": shapes[o], "dtype": "float32"} for o in node.output],
        })
    return out


def variant_graphs(specs: Sequence[Mapping[str, Any]], name: str = "variants", seed: int = 0,
                   chunk: int = 100) -> list:
    """OpGraphs of bank models holding ``specs`` (``chunk`` per graph), named ``{name}-{i}``."""
    return [build_graph(load_model(bank_model(specs[i : i + chunk], name=f"{name}-{i // chunk}", seed=seed)))
            for i in range(0, len(specs), chunk)]


def profile_variants(targets: Iterable[Any] | None, store: Any, n: int = 200, *, base: Iterable[Any] = (),
                     seed: int = 0, chunk: int = 100, name: str = "variants", random_share: float = 0.3,
                     specs: Sequence[Mapping[str, Any]] | None = None, **campaign_kw) -> list[tuple[Any, Any]]:
    """Profile ``n`` sampled variants (around ``base`` signatures; or the given ``specs``) on
    ``targets`` into ``store``.

    The variants go into bank models (:func:`variant_graphs`, named ``{name}-{i}``: the name
    records which signatures they were derived from, so that an evaluation can leave them out
    with their model), and each bank is profiled with
    :func:`placer.profile.campaign.profile_graph` (ops only: no whole model, no links, no
    segments). Returns ``[(graph, campaign result), ...]``.
    """
    if specs is None:
        specs = sample_variants(base, n=n, seed=seed, random_share=random_share)
    campaign_kw.setdefault("whole_model", False)
    campaign_kw.setdefault("links", False)
    return [(g, profile_graph(g, targets, store, **campaign_kw))
            for g in variant_graphs(specs, name=name, seed=seed, chunk=chunk)]


__all__ = ["FAMILIES", "spec_from_signature", "perturb", "random_spec", "spec_nodes", "bank_model", "spec_model",
           "sample_variants", "conv_variants", "grouped_variants", "balanced_grouped_variants",
           "light_variants", "variant_signatures",
           "variant_graphs", "profile_variants", "family_of", "ELTWISE_PASS", "LIGHT_FAMILY_WEIGHTS",
           "LIGHT_MAX_ELEMS", "GROUPED_GROUPS", "GROUPED_KERNELS", "WIDE_MAX_CHANNELS"]
