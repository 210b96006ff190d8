"""The Relax module: BYOC-tagged partition functions + main, compiled by tvm.compile, run on the VM."""

from __future__ import annotations

import numpy as np
import pytest
from mz_models import FAIL_VALUE, chain_model, graph_of, lpnorm_model, register_test_targets

from placer.devices.tvm_target import tvm_convertible_ops
from placer.errors import TargetError
from placer.materialize import materialize
from placer.run import PartitionError, RelaxExecutor, compare
from placer.run.numerics import ReferenceRunner


def _functions(mod):
    return {gv.name_hint: f for gv, f in mod.functions.items()}


def test_lpnormalization_is_rejected_by_the_tvm_importer_and_run_by_onnxruntime():
    assert "LpNormalization" not in tvm_convertible_ops()
    g = graph_of(lpnorm_model())
    with pytest.raises(TargetError, match="LpNormalization"):
        materialize(g, {op.id: "tvm-llvm" for op in g.ops}, relax=True)


@pytest.mark.parametrize("hw", [16, 96])  # 96: outputs >= 256 KiB take ONNX Runtime's IO-binding path
def test_unsupported_op_runs_in_onnxruntime_and_the_rest_in_tvm_through_relax(hw):
    m = lpnorm_model(hw)
    g = graph_of(m)
    asg = {op.id: "tvm-llvm" for op in g.ops}
    asg["lpnorm"] = "onnxruntime"
    mat = materialize(g, asg)
    assert [p.runtime for p in mat.partitions] == ["tvm", "onnxruntime", "tvm"]
    prog = mat.relax_program()
    funcs = _functions(prog.mod)
    ext = funcs[mat.partitions[1].symbol]
    assert ext.attrs["Codegen"] == "onnxruntime"
    assert ext.attrs["global_symbol"] == mat.partitions[1].symbol
    assert ext.attrs["placer.target"] == "onnxruntime@cpu:t1"
    assert int(ext.attrs["placer.stage"]) == 0
    tvm_fn = funcs[mat.partitions[0].symbol]
    assert "Codegen" not in tvm_fn.attrs and tvm_fn.attrs["placer.runtime"] == "tvm"
    assert 'vdevice="llvm:0' in prog.text()
    ex = RelaxExecutor(mat)
    ex.compile()
    try:
        x = {"x": np.random.default_rng(3).standard_normal((1, 3, hw, hw)).astype(np.float32)}
        out = ex.run(x)
        rep = compare(out, ReferenceRunner(g.model).run(x))
        assert rep.passed, rep.summary()
        # the ONNX Runtime session behind the packed function was built once and is cached
        (callout,) = ex.rc.callouts.values()
        sess = callout.compiled
        ex.run(x)
        assert callout.compiled is sess
        # per-partition times come from the VM instrument
        _, times = ex.run_timed(x)
        assert set(times) == {p.id for p in mat.partitions}
    finally:
        ex.close()


def test_main_calls_partitions_in_order_and_text_names_them():
    g = graph_of(chain_model(6))
    asg = {op.id: ("openvino" if op.index in (2, 3) else "tvm-llvm") for op in g.ops}
    mat = materialize(g, asg)
    text = mat.relax_text()
    pos = [text.index(f"cls.{p.symbol}(") for p in mat.partitions]
    assert pos == sorted(pos)
    assert 'R.func_attr({"Codegen": "openvino"' in text
    for p in mat.partitions:
        assert f"{p.symbol}: {p.id} stage 0 on {p.target}" in text


def test_failing_external_partition_names_the_partition():
    register_test_targets()
    g = graph_of(lpnorm_model())
    asg = {op.id: "tvm-llvm" for op in g.ops}
    asg["conv1"] = "flaky"
    asg["lpnorm"] = "onnxruntime"
    mat = materialize(g, asg)
    ex = RelaxExecutor(mat)
    ex.compile()
    try:
        x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
        ex.run({"x": x})
        x[0, 0, 0, 0] = FAIL_VALUE
        with pytest.raises(PartitionError, match="partition p0 .* on flaky@cpu:t1 .*injected failure"):
            ex.run({"x": x})
    finally:
        ex.close()
