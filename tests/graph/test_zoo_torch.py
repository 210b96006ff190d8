"""Zoo models exported from PyTorch: GPT-style decoders and a ResNet-style CNN, real ONNX that the
runtimes agree on under a mixed plan; cached; a clear error without torch."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("torch")

from placer import api, zoo  # noqa: E402
from placer.errors import GraphError  # noqa: E402


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    import placer.zoo.torch_models as zt

    monkeypatch.setattr(zt, "CACHE", tmp_path_factory.getbasetemp() / "zoo_cache")


@pytest.mark.parametrize("name, types", [
    ("gpt-tiny", {"MatMul", "Softmax", "LayerNormalization", "Gather", "Erf"}),
    ("resnet-mini", {"Conv", "Relu", "Add", "GlobalAveragePool", "Gemm"}),
])
def test_exported_model_runs_the_same_under_a_mixed_plan(name, types):
    from placer.materialize import materialize
    from placer.run import check_against_reference, random_inputs, run_plan

    g = api.load(f"zoo:{name}")
    assert types <= {op.op_type for op in g.ops}
    # every other op on OpenVINO: many partitions, all hand-offs exercised
    asg = {op.id: ("openvino" if i % 2 else "onnxruntime") for i, op in enumerate(g.ops)}
    mat = materialize(g, asg)
    assert len(mat.partitions) > 10
    res = run_plan(mat, "seed:0", requests=2, warmup=0)
    assert res.numerics.passed, res.numerics.summary()
    out = next(iter(res.outputs[0].values()))
    assert np.isfinite(out).all() and out.std() > 1e-3  # seeded weights: outputs depend on the input
    again = check_against_reference(g.model, [random_inputs(g, 1)], [res.outputs[0]])
    assert not again.passed  # another input gives another output


def test_export_is_cached_and_listed(tmp_path):
    import placer.zoo.torch_models as zt

    a = zoo.resolve("zoo:gpt-tiny")
    files = list(zt.cache_dir().glob("gpt-tiny-v*-s0-torch*.onnx"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    b = zoo.resolve("zoo:gpt-tiny")
    assert files[0].stat().st_mtime_ns == mtime and a.SerializeToString() == b.SerializeToString()
    assert {"gpt-tiny", "gpt-small", "resnet-mini"} <= set(zoo.available())


def test_without_torch_the_error_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(GraphError, match="pip install 'torch"):
        zoo.resolve("zoo:gpt-small")
