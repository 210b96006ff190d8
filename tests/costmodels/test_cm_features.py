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


def test_a_convolution_is_also_described_as_its_per_group_gemm():
    # ShuffleNet's 4-group 1x1: 272 -> 272 channels on 14x14, 68 input and output channels per group
    sig = {"op_type": "Conv", "attrs": {"group": 4},
           "inputs": [[(1, 272, 14, 14), "float32"], [(272, 68, 1, 1), "float32", True]],
           "outputs": [[(1, 272, 14, 14), "float32"]]}
    f = dict(zip(FEATURE_NAMES, signature_features(sig)))
    assert np.isclose(f["log_C_per_group"], np.log1p(68)) and np.isclose(f["log_K_per_group"], np.log1p(68))
    assert np.isclose(f["log_gemm_depth"], np.log1p(68)) and np.isclose(f["log_gemm_M"], np.log1p(196))
    assert (f["align_C_per_group"], f["align_K_per_group"], f["K_per_group_mod16"]) == (4, 4, 4)
    dense = dict(zip(FEATURE_NAMES, signature_features(conv_sig(16, 32, 28))))
    assert np.isclose(dense["log_gemm_depth"], np.log1p(16 * 9)) and dense["align_K_per_group"] == 32
    relu = dict(zip(FEATURE_NAMES, signature_features(
        {"op_type": "Relu", "inputs": [[(1, 272, 14, 14), "float32"]], "outputs": [[(1, 272, 14, 14), "float32"]]})))
    assert relu["log_gemm_depth"] == relu["log_groups"] == 0.0  # convolutions only


def test_graph_op_signature_and_its_dict_share_the_key_and_numbers():
    from placer.graph import build_graph, load_model

    from costmodels.sampler import bank_model, random_spec

    rng = np.random.default_rng(0)
    g = build_graph(load_model(bank_model([random_spec(f, rng) for f in ("conv", "matmul", "layernorm")])))
    for op in g.ops:
        assert signature_key(op) == op.signature.hash == signature_key(op.signature.to_dict())
        s = normalize_signature(op)
        assert s["flops"] == op.flops and s["weight_bytes"] == op.weight_bytes


def _one_op_model(op_type: str, opset: int):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 13, 13])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 13, 13])
    graph = helper.make_graph([helper.make_node(op_type, ["x"], ["y"])], op_type, [x], [y])
    return helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])


def test_a_dropout_from_before_opset_12_is_featurized_as_the_identity_its_runtimes_run():
    from placer.graph import build_graph

    def features(op_type, opset):
        (op,) = build_graph(_one_op_model(op_type, opset)).ops
        return dict(zip(FEATURE_NAMES, signature_features(op))), op.signature.attrs

    old, old_attrs = features("Dropout", 10)
    new, new_attrs = features("Dropout", 13)
    identity, _ = features("Identity", 13)
    assert "ratio" in old_attrs and "ratio" not in new_attrs  # the ratio became an input in opset 12
    assert old == identity  # ONNX Runtime registers Dropout 7-11 as its Identity kernel
    assert new["op=Dropout"] == 1.0 and new["op=Identity"] == 0.0  # the later Dropout has its own kernel
    assert new["family=movement"] == old["family=movement"] == 1.0


def test_broadcast_operands_and_a_transposes_contiguous_run_are_features():
    def f(op_type, shapes, out, attrs=None):
        sig = {"op_type": op_type, "attrs": attrs or {}, "inputs": [[s, "float32"] for s in shapes],
               "outputs": [[out, "float32"]]}
        return dict(zip(FEATURE_NAMES, signature_features(sig)))

    x = (1, 64, 512)
    same, scalar, bias = f("Add", [x, x], x), f("Mul", [x, ()], x), f("Add", [x, (512,)], x)
    assert (same["bcast_scalar"], same["bcast_partial"]) == (0.0, 0.0)
    assert (scalar["bcast_scalar"], scalar["bcast_partial"]) == (1.0, 0.0)
    assert (bias["bcast_scalar"], bias["bcast_partial"]) == (0.0, 1.0)
    assert f("Relu", [x], x)["bcast_scalar"] == 0.0
    assert f("Concat", [x, (1, 1, 512)], (1, 65, 512))["bcast_partial"] == 0.0  # element-wise ops only
    # BERT's head split keeps the 32-float head dim in place; the key transpose moves it
    heads = f("Transpose", [(1, 64, 4, 32)], (1, 4, 64, 32), {"perm": [0, 2, 1, 3]})
    keys = f("Transpose", [(1, 64, 4, 32)], (1, 4, 32, 64), {"perm": [0, 2, 3, 1]})
    assert np.isclose(heads["log_inner_run"], np.log1p(32)) and heads["inner_moved"] == 0.0
    assert np.isclose(keys["log_inner_run"], np.log1p(1)) and keys["inner_moved"] == 1.0
    assert f("Reshape", [(1, 64, 4, 32), (3,)], (1, 64, 128))["log_inner_run"] == 0.0


def test_the_largest_data_input_is_a_feature_weights_left_out():
    def f(op_type, inputs, out):
        sig = {"op_type": op_type, "attrs": {"axis": 1}, "inputs": inputs, "outputs": [[out, "float32"]]}
        return dict(zip(FEATURE_NAMES, signature_features(sig)))["log_max_in_elems"]

    # inception's 4-way Concat: 86,528 elements out, none of its inputs over 43,264 (the pool's split
    # decision is per input); the first input alone would say 21,632
    branches = [[(1, c, 13, 13), "float32"] for c in (128, 256, 64, 64)]
    assert np.isclose(f("Concat", branches, (1, 512, 13, 13)), np.log1p(256 * 13 * 13))
    # a convolution's weight is no data input, however large
    conv = [[(1, 8, 7, 7), "float32"], [(512, 8, 3, 3), "float32", True]]
    assert np.isclose(f("Conv", conv, (1, 512, 7, 7)), np.log1p(8 * 7 * 7))
    assert f("Shape", [], (4,)) == 0.0
