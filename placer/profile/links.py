"""Measuring links: what handing a tensor from one target to another costs, and what a cut costs.

The model these measurements are fitted into (:class:`~placer.devices.links.LinkFit`,
:class:`~placer.devices.links.LinkModel`, :func:`~placer.devices.links.fit_link`) is in
:mod:`placer.devices.links`; the profiling worker runs these functions in its own process.

What a partition boundary is at run time
-----------------------------------------
The executor runs partitions in one process: the numpy output of one ``CompiledModel.run`` is
fed to the next target's ``run``. So the hand-off is: the source runtime's output copy into a
numpy array (OpenVINO copies its request buffer, TVM ``.numpy()`` copies, ONNX Runtime returns
a fresh array), the destination's copy-in (TVM ``tvm.runtime.tensor`` copies; ONNX Runtime and
OpenVINO with ``share_inputs`` read numpy memory directly), cache effects of reading a freshly
written buffer, and one more call into a runtime (its fixed call cost).

How it is measured (:func:`measure_link_points`)
------------------------------------------------
For each size ``N`` bytes (default 1 KB .. 16 MB) two tiny models on a float32 vector of N/4
elements, ``Relu`` on the source target and ``Relu`` on the destination target (a target that
refuses Relu runs the next of :data:`LINK_OPS`), are timed in interleaved rounds, in one process,
with the same ``perf_counter_ns`` loop as op profiles:

* ``chain``: ``y = src.run({x}); dst.run({y})`` (the real hand-off: y is the source's output);
* ``src``: ``src.run({x})`` alone; ``dst``: ``dst.run({x0})`` alone on a fixed array.

``handoff(N) = median(chain) - median(src) - median(dst) + overhead(dst)``, where
``overhead(dst)`` is the destination's fixed call cost (1-element Add, timed in the same way).
The two Relu computations and both runtimes' own copies cancel out; what remains is what the
boundary adds on top of the ops' *net* costs (op profiles are stored net of the call overhead):
entering one more partition plus the hand-off itself. So a plan costs about
``overhead(first target) + sum(net op costs) + sum(transfer_ms over cross-target boundaries)``;
when several tensors cross one boundary charge the latency once (:meth:`LinkModel.boundary_ms
<placer.devices.links.LinkModel.boundary_ms>`).
``LinkFit.meta["handoff_only_latency_ms"]`` is the latency without the destination's call cost,
for cost models that charge call overheads per partition themselves.

The fit (:func:`fit_points`): the excess ``chain - src - dst`` is fitted by non-negative weighted
least squares as ``excess + nbytes * ms_per_byte`` (both >= 0, so the fit is monotone in bytes;
each point weighted by its noise, 2% of the chain time + 2 us), and ``latency_ms = overhead(dst)
+ excess``. Same-target pairs cost 0 (same partition).

Measured on the 2-core reference box (ORT / OpenVINO / TVM, 1 thread each): the hand-off is
the destination's call cost plus ~0: the copies are already inside each runtime's own ``run``
(and inside the op profiles), so no per-byte term shows above the noise (the fitted slope is ~0).

What the hand-off misses: the cut itself (:func:`measure_cut_points`)
----------------------------------------------------------------------
That cancellation hides what a cut costs each runtime: op profiles time each op alone, its
conversions into and out of the runtime's internal layout included, and the whole-model
calibration scales them down to the fused whole; a plan cut into partitions pays, at every
boundary, what the fused whole did not (OpenVINO's blocked-layout reorders, fusion lost). Timed
on a 4-conv chain, whole vs cut after every conv (2-core AMD EPYC, session 4): ONNX Runtime
17-126 us per boundary for 196-784 KiB activations, OpenVINO 60-210 us, against a fitted
hand-off of ~6-16 us: CP-SAT plans of 13-39 partitions measured 2-3x their prediction. The
profiler stores each target's cut cost per byte as a link from the target to itself, and
:meth:`placer.profile.store.ProfileStore.link_model` adds half of each side's to every boundary
(``meta["cut_ms_per_byte"]``).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping, Sequence

import numpy as np

from placer.devices.links import LinkFit, fit_link
from placer.profile.keys import overhead_model

DEFAULT_LINK_SIZES = (1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)


# ---- measuring (in-process; the profiler runs this inside a worker subprocess) -------------------
def interleaved_rounds(steps: Sequence, *, rounds_s: float, min_rounds: int, max_rounds: int
                       ) -> tuple[list[list[int]], int]:
    """Call every step once per round, in order, timing each (ns), garbage collection off, for at
    least ``min_rounds`` rounds and ``rounds_s`` seconds, at most ``max_rounds`` rounds. Returns the
    samples of each step and the number of rounds."""
    pc = time.perf_counter_ns
    samples: list[list[int]] = [[] for _ in steps]
    # no collection first: none can start while the collector is off, and the worker collects what
    # each request made after it (placer.gc_scope); a full one here walked the whole process (0.5 s in
    # the test suite's workers)
    gc.disable()
    try:
        t_start = pc()
        rounds = 0
        while rounds < max_rounds:
            for step, out in zip(steps, samples):
                t0 = pc()
                step()
                out.append(pc() - t0)
            rounds += 1
            if rounds >= min_rounds and (pc() - t_start) / 1e9 >= rounds_s:
                break
    finally:
        gc.enable()
    return samples, rounds


#: the element-wise op each side of a timed link runs, the first its target compiles and runs (its own
#: time cancels out: each side is timed alone too); a target without Relu failed every link, and
#: with them its whole campaign
LINK_OPS = ("Relu", "Abs", "Neg")


def elementwise_model(n_elems: int, name: str = "link", op: str = "Relu"):
    """One element-wise ``op`` (Relu by default) over ``n_elems`` floats."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n_elems])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n_elems])
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], name=f"{name}_{op.lower()}")], name, [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _link_side(target, n: int, name: str, x: np.ndarray, ops: Sequence[str] = LINK_OPS):
    """``target`` compiled on the first of ``ops`` (:data:`LINK_OPS`) it compiles and runs (on ``x``);
    the first op's error where none does."""
    first = None
    for op in ops:
        compiled = None
        try:
            compiled = target.compile(elementwise_model(n, name, op))
            compiled.run({"x": x})
            return compiled
        except Exception as exc:  # noqa: BLE001 - a target's refusal comes in its own exception types
            if compiled is not None:
                compiled.close()
            first = first or exc
    raise first


def measure_link_points(src, dst, sizes: Sequence[int] = DEFAULT_LINK_SIZES, *, rounds_s: float = 0.25,
                        min_rounds: int = 7, max_rounds: int = 400, overhead_ms: Mapping[str, float] | None = None,
                        seed: int = 0, ops: Sequence[str] = LINK_OPS) -> list[dict]:
    """Time the hand-off ``src -> dst`` (Target objects, both in this process) at each size, each side
    running the first of ``ops`` it can (a campaign passes the later ones after a crash on the first).

    Returns one dict per size: ``nbytes, chain_ms, src_ms, dst_ms, dst_overhead_ms, handoff_ms, rounds``
    (medians over interleaved rounds; see the module doc for the method).
    """
    pc = time.perf_counter_ns
    rng = np.random.default_rng(seed)
    overhead_ms = dict(overhead_ms or {})
    if dst.name not in overhead_ms:
        ov = dst.compile(overhead_model())
        one = {"x": np.ones([1], np.float32)}
        for _ in range(20):
            ov.run(one)
        samples = []
        for _ in range(400):
            t0 = pc()
            ov.run_shared(one)
            samples.append(pc() - t0)
        overhead_ms[dst.name] = float(np.median(samples)) / 1e6
        ov.close()
    points = []
    for nbytes in sizes:
        n = max(int(nbytes) // 4, 1)
        x = rng.standard_normal(n).astype(np.float32)
        s_c = _link_side(src, n, "link_src", x, ops)
        d_c = _link_side(dst, n, "link_dst", x, ops)
        x0 = s_c.run({"x": x})["y"]  # a real source output, reused for dst-alone timing
        for _ in range(3):  # warm-up
            d_c.run_shared({"x": s_c.run_shared({"x": x})["y"]})
        # the executor hands a partition's outputs to the next as they come (views, no copy)
        (chain, s_t, d_t), rounds = interleaved_rounds(
            [lambda: d_c.run_shared({"x": s_c.run_shared({"x": x})["y"]}),  # the chain: the real hand-off
             lambda: s_c.run_shared({"x": x}), lambda: d_c.run_shared({"x": x0})],
            rounds_s=rounds_s, min_rounds=min_rounds, max_rounds=max_rounds)
        med = lambda a: float(np.median(a)) / 1e6
        c_ms, s_ms, d_ms = med(chain), med(s_t), med(d_t)
        points.append({
            "nbytes": int(n * 4), "chain_ms": c_ms, "src_ms": s_ms, "dst_ms": d_ms,
            "dst_overhead_ms": overhead_ms[dst.name], "handoff_ms": c_ms - s_ms - d_ms + overhead_ms[dst.name],
            "rounds": rounds,
        })
        s_c.close()
        d_c.close()
    return points


def fit_points(src_name: str, dst_name: str, points: Sequence[Mapping]) -> LinkFit:
    """Fit measured points: ``latency = overhead(dst) + excess``, excess and slope by NNLS.

    The hand-off excess ``chain - src - dst`` (what the boundary adds beyond the destination's
    call) is fitted as ``excess_ms + nbytes * ms_per_byte`` with both >= 0; the destination's
    call cost (measured apart) is then added to the latency, so ``latency_ms >= overhead(dst) > 0``.
    """
    ov = float(points[0].get("dst_overhead_ms", 0.0)) if points else 0.0
    excess, slope = fit_link([p["nbytes"] for p in points], [p["handoff_ms"] - p.get("dst_overhead_ms", 0.0) for p in points],
                             [0.02 * p["chain_ms"] + 0.002 for p in points])
    return LinkFit(src_name, dst_name, ov + excess, slope, tuple(dict(p) for p in points),
                   {"method": "overhead(dst) + NNLS of (chain - src - dst), sigma = 2% chain + 2us",
                    "dst_overhead_ms": ov, "handoff_only_latency_ms": excess})


def measure_link(src, dst, sizes: Sequence[int] = DEFAULT_LINK_SIZES, **kw) -> LinkFit:
    """Measure and fit one ordered pair in this process (no isolation; the profiler isolates)."""
    if src.name == dst.name:
        return LinkFit(src.name, dst.name, 0.0, 0.0)
    return fit_points(src.name, dst.name, measure_link_points(src, dst, sizes, **kw))


# ---- cut cost: what a runtime loses when a model is cut into more partitions ---------------------
#: activations of the conv chains timed by :func:`measure_cut_points`: (channels, height = width);
#: 1x16x56x56 and 1x16x112x112 float32 tensors (196 KiB, 784 KiB)
CUT_SHAPES = ((16, 56), (16, 112))
#: convolutions in each chain; the chain is timed whole and as this many one-conv partitions
CUT_LAYERS = 4


def conv_chain_model(layers: int, channels: int, hw: int, seed: int = 0):
    """``layers`` 1x1 convolutions on a 1 x channels x hw x hw activation (seeded weights)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((channels, channels, 1, 1)) / np.sqrt(channels)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        out = f"t{i}" if i < layers - 1 else "y"
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [out], name=f"conv{i}"))
        prev = out
    shape = [1, channels, hw, hw]
    g = helper.make_graph(nodes, f"cutchain{layers}x{channels}x{hw}",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _single_convs(model):
    """The chain cut after every convolution: one model per conv (input x, output y)."""
    from onnx import helper

    g = model.graph
    shape = g.input[0].type
    out = []
    for i, node in enumerate(g.node):
        n = helper.make_node("Conv", ["x", node.input[1]], ["y"], name=node.name)
        init = [t for t in g.initializer if t.name == node.input[1]]
        x = helper.make_value_info("x", shape)
        y = helper.make_value_info("y", shape)
        sub = helper.make_graph([n], f"{g.name}_part{i}", [x], [y], initializer=init)
        out.append(helper.make_model(sub, opset_imports=list(model.opset_import),
                                     ir_version=model.ir_version))
    return out


def measure_cut_points(target, shapes: Sequence[tuple[int, int]] = CUT_SHAPES, layers: int = CUT_LAYERS, *,
                       rounds_s: float = 0.3, min_rounds: int = 7, max_rounds: int = 200) -> list[dict]:
    """Time a chain of ``layers`` convolutions on ``target`` whole and cut into ``layers``
    partitions, in interleaved rounds, for each activation shape. Per point: ``nbytes`` (one
    activation), ``whole_ms``, ``cut_ms``, ``per_boundary_ms = (cut - whole) / (layers - 1)``.

    Op profiles time each op alone (its own layout conversions in and out included) and the
    whole-model calibration scales them to the fused whole; a plan cut into partitions pays, at
    every boundary, what the runtime's fused whole did not: converting the activation out of and
    back into its internal layout (OpenVINO's blocked formats), fusion lost, one more call. The
    cross-runtime hand-off (:func:`measure_link_points`) cancels these out by construction, so
    they are measured here, on the runtime alone, and added to every boundary's price.
    """
    points = []
    for channels, hw in shapes:
        model = conv_chain_model(layers, channels, hw)
        whole = target.compile(model)
        parts = [target.compile(m) for m in _single_convs(model)]
        x = np.random.default_rng(0).standard_normal((1, channels, hw, hw)).astype(np.float32)

        def run_cut():
            y = x
            for p in parts:
                y = p.run_shared({"x": y})["y"]
            return y

        for _ in range(3):  # warm-up
            whole.run_shared({"x": x})
            run_cut()
        (w_t, c_t), rounds = interleaved_rounds([lambda: whole.run_shared({"x": x}), run_cut], rounds_s=rounds_s,
                                                min_rounds=min_rounds, max_rounds=max_rounds)
        w_ms, c_ms = float(np.median(w_t)) / 1e6, float(np.median(c_t)) / 1e6
        points.append({"nbytes": int(x.nbytes), "whole_ms": w_ms, "cut_ms": c_ms, "rounds": rounds,
                       "per_boundary_ms": (c_ms - w_ms) / max(layers - 1, 1)})
        whole.close()
        for p in parts:
            p.close()
    return points


def fit_cut_points(points: Sequence[Mapping], overhead_ms: float = 0.0) -> float:
    """``ms_per_byte`` of a boundary on this runtime beyond its call overhead (charged apart, as the
    destination's call in the link latency): least squares through the origin of
    ``per_boundary_ms - overhead_ms`` over ``nbytes``, never negative."""
    x = np.array([float(p["nbytes"]) for p in points])
    y = np.array([float(p["per_boundary_ms"]) - overhead_ms for p in points])
    if not x.size or float(np.sum(x * x)) <= 0:
        return 0.0
    return max(float(np.sum(x * y) / np.sum(x * x)), 0.0)
