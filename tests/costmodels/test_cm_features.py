from __future__ import annotations

import numpy as np

from costmodels.features import FEATURE_NAMES, normalize_signature, signature_features, signature_key

from _cmdata import conv_sig


def test_forms_agree_and_unknown_ops_are_other():
    a = conv_sig(16, 32, 28)
    b = {**a, "inputs": [[(1, 16, 28, 28), "float32"], [(32, 16, 3, 3), "float32", True]],
         "outputs": [[(1, 32, 28, 28), "float32"]]}
    np.testing.assert_array_equal(signature_features(a), signature_features(b))
    assert signature_key(a) == signature_key(b)
    x = signature_features({"op_type": "FancyOp", "inputs": [[(4, 4), "float32"]], "outputs": [[(4, 4), "float32"]]})
    assert x[FEATURE_NAMES.index("op=other")] == 1.0 and x[FEATURE_NAMES.index("family=other")] == 1.0


def test_conv_dims_and_work():
    s = normalize_signature(conv_sig(16, 32, 28))
    assert s["flops"] == 2 * 32 * 28 * 28 * 16 * 9
    assert s["weight_bytes"] == 32 * 16 * 9 * 4
    f = dict(zip(FEATURE_NAMES, signature_features(s)))
    assert (f["C"], f["K"], f["H"], f["kernel_h"], f["groups"]) == (16, 32, 28, 3, 1)


def test_graph_op_signature_and_its_dict_share_the_key_and_numbers():
    from placer.graph import build_graph, load_model

    from costmodels.sampler import bank_model, random_spec

    rng = np.random.default_rng(0)
    g = build_graph(load_model(bank_model([random_spec(f, rng) for f in ("conv", "matmul", "layernorm")])))
    for op in g.ops:
        assert signature_key(op) == op.signature.hash == signature_key(op.signature.to_dict())
        s = normalize_signature(op)
        assert s["flops"] == op.flops and s["weight_bytes"] == op.weight_bytes
