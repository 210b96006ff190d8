"""Small ONNX models and OpGraphs shared by tests/materialize and tests/run."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h



def graph_of(model: onnx.ModelProto):
    """The OpGraph of a model (folded by placer.graph)."""
    from placer.graph import build_graph

    return build_graph(model)


def make_model(nodes, inputs, outputs, inits=(), name="m", opset=17):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=10)


def vi(name, shape, dtype=TP.FLOAT):
    return h.make_tensor_value_info(name, dtype, list(shape))


def const(name, arr):
    return onnx.numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def chain_model(n: int = 6, shape=(1, 8, 16, 16)) -> onnx.ModelProto:
    """x -> [Relu, Add c, Mul c, ...] n elementwise ops -> y."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    kinds = ["Relu", "Add", "Mul", "Sigmoid", "Add", "Mul"]
    for i in range(n):
        k = kinds[i % len(kinds)]
        out = f"t{i}" if i < n - 1 else "y"
        if k in ("Add", "Mul"):
            c = f"c{i}"
            base = 1.0 if k == "Mul" else 0.0
            inits.append(const(c, rng.standard_normal((1, shape[1], 1, 1)) * 0.5 + base))
            nodes.append(h.make_node(k, [prev, c], [out], name=f"n{i}_{k.lower()}"))
        else:
            nodes.append(h.make_node(k, [prev], [out], name=f"n{i}_{k.lower()}"))
        prev = out
    return make_model(nodes, [vi("x", shape)], [vi("y", shape)], inits, name="chain")


def diamond_model() -> onnx.ModelProto:
    """x -> a(Relu) -> {b(Sigmoid), c(Tanh)} -> d(Add) -> e(Relu) -> y ; plus a second output z = b."""
    nodes = [
        h.make_node("Relu", ["x"], ["a"], name="a"),
        h.make_node("Sigmoid", ["a"], ["b"], name="b"),
        h.make_node("Tanh", ["a"], ["c"], name="c"),
        h.make_node("Add", ["b", "c"], ["d"], name="d"),
        h.make_node("Relu", ["d"], ["y"], name="e"),
        h.make_node("Neg", ["b"], ["z"], name="f"),
    ]
    s = (2, 4)
    return make_model(nodes, [vi("x", s)], [vi("y", s), vi("z", s)], name="diamond")


def lpnorm_model(hw: int = 16) -> onnx.ModelProto:
    """A conv net with an LpNormalization (no Relax ONNX converter; ONNX Runtime runs it) in the middle."""
    rng = np.random.default_rng(1)
    w1 = const("w1", rng.standard_normal((8, 3, 3, 3)) * 0.2)
    b1 = const("b1", rng.standard_normal((8,)) * 0.1)
    w2 = const("w2", rng.standard_normal((8, 8, 3, 3)) * 0.2)
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        h.make_node("LpNormalization", ["r1"], ["n1"], name="lpnorm", axis=1, p=2),
        h.make_node("Conv", ["n1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        h.make_node("Add", ["c2", "r1"], ["s"], name="add"),
        h.make_node("Relu", ["s"], ["y"], name="relu2"),
    ]
    return make_model(nodes, [vi("x", (1, 3, hw, hw))], [vi("y", (1, 8, hw, hw))], [w1, b1, w2],
                      name="lpnorm_net")


CHEAP_TVM_OPS = ("Sum", "Add", "MaxPool", "AveragePool", "GlobalAveragePool")


def alternating_plan(graph, relu_every: int = 3) -> dict[str, str]:
    """A plan that alternates targets on purpose: heavy ops (Conv, Gemm) alternate between ONNX
    Runtime and OpenVINO, cheap ops (Sum/Add, pools, every ``relu_every``-th Relu) go to untuned
    TVM, everything else follows its first producer."""
    asg: dict[str, str] = {}
    heavy = relu = 0
    for op in graph.ops:
        if op.op_type in ("Conv", "Gemm", "MatMul"):
            t = ("onnxruntime", "openvino")[heavy % 2]
            heavy += 1
        elif op.op_type in CHEAP_TVM_OPS:
            t = "tvm-llvm"
        elif op.op_type == "Relu":
            t = "tvm-llvm" if relu % relu_every == 0 else None
            relu += 1
        else:
            t = None
        if t is None:
            src = next((graph.producer[x] for x in op.inputs if x in graph.producer), None)
            t = asg[src] if src is not None else "onnxruntime"
        asg[op.id] = t
    return asg


def with_logits_output(model: onnx.ModelProto) -> onnx.ModelProto:
    """The folded model with the input of its last Softmax added as a model output: a near one-hot
    softmax hides numeric errors, the logits do not."""
    from placer.graph import load_model

    m = load_model(model)
    sm = [n for n in m.graph.node if n.op_type == "Softmax"][-1]
    vi = next(v for v in m.graph.value_info if v.name == sm.input[0])
    m.graph.output.append(vi)
    return m


def zoo_graph(name: str):
    from placer import zoo

    return graph_of(with_logits_output(zoo.reweighted(name)))


# ---- a target that fails on request: runs ONNX Runtime, raises when an input holds FAIL_VALUE ----
FAIL_VALUE = 12345.0

from placer.devices.onnxruntime_target import OnnxRuntimeTarget  # noqa: E402


class _FlakyCompiled:
    def __init__(self, inner):
        self.inner = inner
        self.input_names = inner.input_names
        self.output_names = inner.output_names

    def run(self, feeds):
        for v in feeds.values():
            if v.size and float(np.asarray(v).flat[0]) == FAIL_VALUE:
                raise RuntimeError("flaky target: injected failure")
        return self.inner.run(feeds)

    def close(self):
        self.inner.close()


class FlakyTarget(OnnxRuntimeTarget):
    """``flaky``: ONNX Runtime that raises when the first element of an input equals FAIL_VALUE."""

    kind = "flaky"
    runtime = "flaky"

    def compile(self, model):
        return _FlakyCompiled(super().compile(model))


class _SleepyCompiled(_FlakyCompiled):
    def __init__(self, inner, label):
        super().__init__(inner)
        self.label = label

    def run(self, feeds):
        import time

        t0 = time.monotonic()
        time.sleep(SLEEP_S)
        SLEEPS.append((self.label, t0, time.monotonic()))
        return self.inner.run(feeds)


SLEEP_S = 0.05
#: every sleep of a ``sleepy`` target: (target name, start, end), monotonic seconds. Tests check
#: concurrency on these intervals (do two calls overlap?), never on wall-clock totals.
SLEEPS: list[tuple[str, float, float]] = []


def overlapping_sleeps(labels: set[str] | None = None) -> int:
    """How many pairs of recorded sleeps (of targets in ``labels``, all if None) overlap in time."""
    calls = sorted((c for c in SLEEPS if labels is None or c[0] in labels), key=lambda c: c[1])
    return sum(1 for i, a in enumerate(calls) for b in calls[i + 1:] if b[1] < a[2])


class SleepyTarget(OnnxRuntimeTarget):
    """``sleepy``: ONNX Runtime plus a 50 ms sleep per call (makes concurrency visible)."""

    kind = "sleepy"
    runtime = "sleepy"

    def compile(self, model):
        return _SleepyCompiled(super().compile(model), self.name)


def register_test_targets() -> None:
    from placer.devices import register_target

    register_target("flaky", "mz_models:FlakyTarget")
    register_target("sleepy", "mz_models:SleepyTarget")
