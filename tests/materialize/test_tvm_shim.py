"""The one private TVM API placer uses (placer.devices.tvm_shim) still exists and still answers.

Fails on a TVM upgrade on purpose: re-check the shim (the Relax ONNX frontend's converter table)
against the new version, then update ``CHECKED_WITH``.
"""

from __future__ import annotations

import tvm

from placer.devices import tvm_shim
from placer.devices.tvm_target import tvm_convertible_ops


def test_installed_tvm_is_the_one_the_shim_was_checked_with():
    assert tvm.__version__ == tvm_shim.CHECKED_WITH, (
        f"TVM {tvm.__version__} is installed; placer/devices/tvm_shim.py was checked with "
        f"{tvm_shim.CHECKED_WITH}: re-check its private call against this version, then update CHECKED_WITH")


def test_the_converter_table_lists_ops_by_onnx_name():
    from tvm.relax.frontend.onnx import onnx_frontend

    table = onnx_frontend._get_convert_map()
    assert isinstance(table, dict)
    ops = tvm_shim.onnx_converter_ops()
    assert ops == frozenset(table) == tvm_convertible_ops()
    assert {"Conv", "MatMul", "Relu", "Softmax", "Gemm", "Add"} <= ops
    assert "LpNormalization" not in ops  # what zoo:lpnorm relies on (a TVM-rejected op)
