"""Models with If / Loop / NonZero: the static ops placed on TVM, OpenVINO and ONNX Runtime, the
dynamic region as one opaque partition on a framework runtime; outputs match ONNX Runtime on the
original (uncontracted) model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from opaque_models import MODELS

from placer.cli import main
from placer.errors import PlanError
from placer.graph import build_graph
from placer.materialize import materialize
from placer.run import check_against_reference, make_executor, random_inputs

def _mixed(g, opaque_target: str) -> dict[str, str]:
    """The opaque op on ``opaque_target``; the static ops alternate between TVM and the other
    framework runtime, so the region's partition holds it alone (same-target neighbours would
    share its partition)."""
    other = "onnxruntime" if opaque_target == "openvino" else "openvino"
    asg, k = {}, 0
    for op in g.ops:
        if op.domain == "placer.opaque":
            asg[op.id] = opaque_target
        else:
            asg[op.id] = ("tvm-llvm", other)[k % 2]
            k += 1
    return asg


@pytest.mark.parametrize("name,opaque_target,executor", [
    ("if", "openvino", "hybrid"),
    ("loop", "onnxruntime", "hybrid"),
    ("nonzero", "onnxruntime", "hybrid"),
    ("nonzero", "openvino", "relax"),
])
def test_opaque_partition_runs_between_static_partitions(name, opaque_target, executor):
    original = MODELS[name]()
    g = build_graph(original)
    (region,) = [op for op in g.ops if op.domain == "placer.opaque"]
    mat = materialize(g, _mixed(g, opaque_target))
    (part,) = [p for p in mat.partitions if region.id in p.ops]
    assert tuple(part.ops) == (region.id,) and part.target.startswith(opaque_target)
    assert {p.target.split("@")[0] for p in mat.partitions} == {"tvm-llvm", "onnxruntime", "openvino"}
    reqs = [random_inputs(g, s) for s in range(3)]
    ex = make_executor(mat, executor)
    ex.compile()
    try:
        res = ex.measure(reqs, warmup=0)
    finally:
        ex.close()
    # the reference is ONNX Runtime on the model as the user wrote it, not placer's contracted copy
    rep = check_against_reference(original, reqs, res.outputs)
    assert rep.passed, rep.summary()
    assert all(np.all(np.isfinite(o["y"])) for o in res.outputs)


def test_opaque_region_on_tvm_is_refused_naming_op_and_target():
    g = build_graph(MODELS["nonzero"]())
    asg = {op.id: "onnxruntime" for op in g.ops}
    asg["opaque_0"] = "tvm-llvm"
    with pytest.raises(PlanError, match="opaque_0.*tvm-llvm"):
        materialize(g, asg)


def test_cli_plan_places_the_static_rest_and_reports_the_opaque_region(tmp_path, capsys):
    path = tmp_path / "nonzero.onnx"
    onnx.save(MODELS["nonzero"](), str(path))
    code = main(["plan", str(path), "--targets", "onnxruntime:t1", "--solver", "greedy", "--db",
                 str(tmp_path / "p.db"), "--out", str(tmp_path / "plan")])
    text = capsys.readouterr().out
    assert code == 0
    assert "opaque region opaque_0" in text and "NonZero" in text and "onnxruntime@cpu:t1" in text
    assert main(["run", str(tmp_path / "plan"), "--check"]) == 0
    assert "PASS" in capsys.readouterr().out
