"""Target names with an argument (``sim:ultra96/dpu``, ``tvm-rpc:KEY``) next to the existing ones."""

from __future__ import annotations

import pytest

from placer.devices import TargetSpec
from placer.errors import TargetError


@pytest.mark.parametrize("text,canonical", [
    ("onnxruntime", "onnxruntime@cpu:t1"),
    ("openvino@cpu1", "openvino@cpu1:t1"),
    ("tvm-llvm:t2", "tvm-llvm@cpu:t2"),
    ("onnxruntime@cpu:t1", "onnxruntime@cpu:t1"),
    ("tvm-llvm-tuned:t1", "tvm-llvm-tuned@cpu:t1"),
    ("tvm-rpc", "tvm-rpc@cpu:t1"),
])
def test_existing_names_unchanged(text, canonical):
    spec = TargetSpec.parse(text)
    assert spec.name == canonical and spec.arg is None
    assert TargetSpec.parse(spec.name) == spec


@pytest.mark.parametrize("text,kind,arg,threads,canonical", [
    ("sim:ultra96/dpu", "sim", "ultra96/dpu", 1, "sim:ultra96/dpu"),
    ("sim:server/gpu", "sim", "server/gpu", 1, "sim:server/gpu"),
    ("tvm-rpc:rk3399", "tvm-rpc", "rk3399", 1, "tvm-rpc:rk3399"),
    ("tvm-rpc:rk3399:t2", "tvm-rpc", "rk3399", 2, "tvm-rpc:rk3399@cpu:t2"),
    ("tvm-rpc:t5x@cpu:t1", "tvm-rpc", "t5x", 1, "tvm-rpc:t5x"),
    ("sim:vendor/board.v2/npu_0", "sim", "vendor/board.v2/npu_0", 1, "sim:vendor/board.v2/npu_0"),
])
def test_names_with_an_argument(text, kind, arg, threads, canonical):
    spec = TargetSpec.parse(text)
    assert (spec.kind, spec.arg, spec.threads, spec.name) == (kind, arg, threads, canonical)
    assert TargetSpec.parse(spec.name) == spec


@pytest.mark.parametrize("bad", ["sim:", "sim:/dpu", "Sim:x", "tvm-rpc:t5@cpu:t1", "tvm-rpc:t5:t1", "sim:a b", "sim:x:y"])
def test_malformed(bad):
    with pytest.raises(TargetError, match="malformed target name"):
        TargetSpec.parse(bad)


def test_register_target_refuses_another_class_for_a_kind_and_lists_kinds():
    from placer.devices.registry import register_target, registered_kinds

    kinds = registered_kinds()
    assert kinds["onnxruntime"] == "placer.devices.onnxruntime_target:OnnxRuntimeTarget"
    kinds["onnxruntime"] = "elsewhere:Nothing"  # a copy: the registry is untouched
    assert registered_kinds()["onnxruntime"] == "placer.devices.onnxruntime_target:OnnxRuntimeTarget"
    register_target("onnxruntime", "placer.devices.onnxruntime_target:OnnxRuntimeTarget")  # same: no-op
    with pytest.raises(TargetError, match="'onnxruntime' is already registered as .*OnnxRuntimeTarget"):
        register_target("onnxruntime", "placer.devices.testing:CrashTarget")
    with pytest.raises(TargetError, match="invalid target kind"):
        register_target("Bad Kind", "placer.devices.testing:CrashTarget")
    with pytest.raises(TargetError, match="not 'module:Class'"):
        register_target("test-nocolon", "placer.devices.testing.CrashTarget")
    assert registered_kinds()["onnxruntime"] == "placer.devices.onnxruntime_target:OnnxRuntimeTarget"
