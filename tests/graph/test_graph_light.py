"""The nine ONNX light models: folding, static shapes, ORT equivalence, re-weighting."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from graph_testlib import run

from placer import zoo
from placer.graph import build_graph, load_graph

# Golden values: real ops after folding, unique signatures. Ops = file nodes minus every
# ConstantOfShape and every node computed from constants only (densenet121/inception_v2: the
# Unsqueeze of BatchNorm-affine constants; inception_v1: the Reshape of the classifier weight).
EXPECTED = {
    "squeezenet": (66, 38),
    "resnet50": (176, 57),
    "inception_v1": (143, 108),
    "inception_v2": (371, 144),
    "densenet121": (668, 390),
    "shufflenet": (203, 53),
    "vgg19": (46, 26),
    "bvlc_alexnet": (24, 21),
    "zfnet512": (22, 19),
}
BIG = {"vgg19", "bvlc_alexnet", "zfnet512"}  # 244-575 MB of weights after folding


def _constant_nodes(model: onnx.ModelProto) -> int:
    """Nodes whose inputs are all constants (transitively): an independent count of what folds."""
    const = {t.name for t in model.graph.initializer}
    n = 0
    for node in model.graph.node:
        if all((not t) or t in const for t in node.input):
            const.update(node.output)
            n += 1
    return n


@pytest.mark.parametrize("name", zoo.LIGHT_MODELS)
def test_light_model_folds_to_its_real_ops_and_matches_the_original(name):
    path = zoo.light_model_path(name)
    raw = onnx.load(str(path))
    t0 = time.perf_counter()
    g = load_graph(path)
    load_s = time.perf_counter() - t0
    n_ops, n_sigs = EXPECTED[name]
    assert len(g.ops) == n_ops == len(raw.graph.node) - _constant_nodes(raw)
    assert len(g.unique_signatures()) == n_sigs < n_ops
    assert "ConstantOfShape" not in g.op_type_counts()
    assert load_s < 30
    # every tensor static, every op input known, initializers out of the inputs, IR >= 4
    assert all(all(isinstance(d, int) and d >= 0 for d in t.shape) for t in g.tensors.values())
    assert all(t in g.tensors for op in g.ops for t in op.inputs if t)
    assert len(g.inputs) == 1 and not g.tensors[g.inputs[0]].is_constant
    assert not {vi.name for vi in g.model.graph.input} & {t.name for t in g.model.graph.initializer}
    assert g.model.ir_version >= 4
    assert [op.index for op in g.ops] == list(range(n_ops))
    # the folded model computes what the original computes (the light outputs ignore the input)
    x = np.random.default_rng(0).standard_normal(g.tensors[g.inputs[0]].shape).astype(np.float32)
    want = run(str(path), {g.inputs[0]: x})
    got = run(g.model, {g.inputs[0]: x})
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", zoo.LIGHT_MODELS)
def test_reweighted_model_has_input_dependent_well_behaved_outputs(name, zoo_models):
    m = zoo.reweighted(name) if name in BIG else zoo_models(name)  # big ones: not kept in the cache
    assert m.ir_version >= 4
    assert not any(n.op_type == "ConstantOfShape" for n in m.graph.node)
    assert not {vi.name for vi in m.graph.input} & {t.name for t in m.graph.initializer}
    assert len(m.graph.input) == 1
    if name in BIG:  # nothing to fold in them; skip the folded copy (575 MB for vgg19)
        model, out_name = m, m.graph.output[0].name
        last_op = m.graph.node[-1].op_type
    else:
        g = build_graph(m)
        assert len(g.ops) == EXPECTED[name][0]
        model, out_name = g.model, g.outputs[0]
        last_op = g.op(g.producer[out_name]).op_type
    feeds = [zoo.random_inputs(m, seed) for seed in (1, 2)]
    outs = [run(model, f)[out_name].reshape(-1) for f in feeds]
    for out in outs:
        assert np.isfinite(out).all()
        if last_op == "Softmax":
            assert out.sum() == pytest.approx(1.0, abs=1e-4)
            assert out.max() < 0.9  # not saturated to one class
            entropy = float(-(out * np.log(np.maximum(out, 1e-30))).sum())
            assert entropy > 0.5
        else:  # densenet121 ends with logits
            assert 0.5 < out.std() < 20
    assert np.abs(outs[0] - outs[1]).max() > 1e-3 * np.abs(outs[0]).max()  # depends on the input
    if name not in BIG:  # the raw re-weighted model (unfolded) agrees with the folded one
        raw = run(m, feeds[0])[out_name].reshape(-1)
        np.testing.assert_allclose(outs[0], raw, rtol=1e-4, atol=1e-6)


def test_reweighted_is_deterministic_per_seed(zoo_models):
    a, b, c = zoo_models("squeezenet"), zoo.reweighted("squeezenet", 0), zoo.reweighted("squeezenet", 1)
    ser = [m.SerializeToString(deterministic=True) for m in (a, b, c)]
    assert ser[0] == ser[1] != ser[2]


def test_ids_and_signature_hashes_are_stable_across_loads():
    path = zoo.light_model_path("resnet50")
    g1, g2 = load_graph(path), load_graph(path)
    assert [op.id for op in g1.ops] == [op.id for op in g2.ops]
    assert [op.signature.hash for op in g1.ops] == [op.signature.hash for op in g2.ops]
    assert len({op.id for op in g1.ops}) == len(g1.ops)
    assert all(op.id for op in g1.ops)
    sigs = g1.unique_signatures()
    assert 40 < len(sigs) < len(g1.ops)
    assert sorted(i for _, ids in sigs.values() for i in ids) == sorted(op.id for op in g1.ops)
    for h, (sig, ids) in sigs.items():
        assert sig.hash == h and all(g1.op(i).signature == sig for i in ids)
    # the model hash is a deterministic sha256 (squeezenet: cheaper to serialize than resnet50)
    sq = zoo.light_model_path("squeezenet")
    h1, h2 = load_graph(sq).model_hash, load_graph(sq).model_hash
    assert h1 == h2 and len(h1) == 64 and int(h1, 16) >= 0
    assert h1 != g1.model_hash


def test_resnet50_counts_and_flops_are_plausible():
    g = load_graph(zoo.light_model_path("resnet50"))
    assert g.op_type_counts() == {
        "BatchNormalization": 53, "Conv": 53, "Relu": 49, "Sum": 16, "AveragePool": 1, "Gemm": 1,
        "MaxPool": 1, "Reshape": 1, "Softmax": 1,
    }
    # ResNet-50: ~4.1 G multiply-adds = ~8.2 GFLOPs, 25.6 M parameters
    assert 7.5e9 < g.total_flops < 8.5e9
    params = sum(np.prod(t.shape) for t in g.tensors.values() if t.is_constant and t.dtype == "float32")
    assert 25.0e6 < params < 26.5e6
    assert "176 ops" in g.summary() and "GFLOPs" in g.summary()


def test_reweighted_batchnorm_statistics_fit_the_activations_that_reach_them():
    """Each BatchNorm's mean / var are drawn around the per-channel statistics of its actual input on
    the calibration input (the seed's first draw), computed with every weight before it in place:
    ONNX Runtime on the prefix graph. Checked here by running the finished model."""
    seed = 3
    m = zoo.reweighted("shufflenet", seed)
    bns = [n for n in m.graph.node if n.op_type == "BatchNormalization"]
    assert len(bns) > 40
    vi = m.graph.input[0]
    shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
    x = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in
                              dict.fromkeys(n.input[0] for n in bns) if t not in known)
    acts = run(probe, {vi.name: x})
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in bns:
        a = acts[n.input[0]].astype(np.float64)
        axes = (0,) + tuple(range(2, a.ndim))
        mean, std, var = a.mean(axis=axes), a.std(axis=axes), a.var(axis=axes)
        bn_mean, bn_var = weights[n.input[3]].astype(np.float64), weights[n.input[4]].astype(np.float64)
        assert std.min() > 1e-3, n.name  # the activations that reach it are alive
        # mean + N(0, 0.1 std): within 6 sigma; var * U(0.8, 1.25)
        assert np.all(np.abs(bn_mean - mean) <= 0.6 * std + 1e-6), n.name
        ratio = bn_var / np.maximum(var, 1e-6)
        assert np.all((ratio > 0.8 - 1e-3) & (ratio < 1.25 + 1e-3)), n.name
