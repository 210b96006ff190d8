"""Zoo models built from Hugging Face transformers (``pip install -e '.[hf]'``): the export loads in
placer and ONNX Runtime computes what the seeded torch model computes. Skipped without transformers
(the test extra does not have it)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("torch")
pytest.importorskip("transformers", reason="zoo:hf-* need transformers: pip install -e '.[hf]'")

from placer import api, zoo  # noqa: E402
from placer.errors import GraphError  # noqa: E402


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    import placer.zoo.torch_models as zt

    monkeypatch.setattr(zt, "CACHE", tmp_path_factory.getbasetemp() / "zoo_cache")


def _outputs_matching_torch(g, name: str, shape: tuple[int, ...]) -> list[np.ndarray]:
    """ONNX Runtime's output of ``zoo:name`` on two seeded inputs, each checked against the torch
    module it was exported from (same seed, same weights)."""
    import onnxruntime as ort
    import torch

    from placer.zoo.hf_models import hf_module

    module, in_names, _ = hf_module(name)
    sess = ort.InferenceSession(g.model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = []
    for seed in (0, 1):
        feeds = zoo.random_inputs(g.model, seed)  # an attention_mask in [0, 8): some positions masked
        with torch.no_grad():
            ref = module(*(torch.from_numpy(feeds[n]) for n in in_names)).numpy()
        out = sess.run(None, feeds)[0]
        assert out.shape == shape
        np.testing.assert_allclose(out, ref, atol=1e-4, rtol=1e-4)
        outs.append(out)
    return outs


def test_hf_bert_loads_and_onnxruntime_matches_torch():
    from placer.zoo.hf_models import hf_module

    g = api.load("zoo:hf-bert")
    assert {"MatMul", "Softmax", "LayerNormalization", "Erf", "Where"} <= {op.op_type for op in g.ops}
    assert len(g.ops) > 100 and len(g.unique_signatures()) > 10
    _, in_names, out_names = hf_module("hf-bert")
    assert in_names == ["input_ids", "attention_mask"] and out_names == ["last_hidden_state"]
    outs = _outputs_matching_torch(g, "hf-bert", (1, 128, 256))
    assert all(np.isfinite(out).all() and out.std() > 0.1 for out in outs)  # not degenerate
    assert np.abs(outs[0] - outs[1]).max() > 0.1  # the output depends on the input


@pytest.mark.parametrize("name, ops, shape", [
    ("hf-distilbert", {"MatMul", "Softmax", "LayerNormalization", "Where"}, (1, 128, 384)),
    ("hf-mobilenetv2", {"Conv", "Clip", "Gemm"}, (1, 1000)),
])
def test_exported_model_computes_what_torch_computes_and_depends_on_its_input(name, ops, shape):
    g = api.load(f"zoo:{name}")
    assert ops <= {op.op_type for op in g.ops} and len(g.ops) > 100
    outs = _outputs_matching_torch(g, name, shape)
    assert np.abs(outs[0] - outs[1]).max() > 0.05  # the output depends on the input


def test_hf_models_are_listed_and_unknown_names_are_refused():
    from placer.zoo.hf_models import hf_model

    assert {"hf-bert", "hf-gpt2", "hf-vit", "hf-convnext", "hf-llama", "hf-distilbert",
            "hf-mobilenetv2"} <= set(zoo.available())
    with pytest.raises(GraphError, match="unknown transformers zoo model"):
        hf_model("hf-nope")


def test_without_transformers_the_error_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now raises ImportError
    with pytest.raises(GraphError, match=r"pip install -e '\.\[hf\]'"):
        zoo.resolve("zoo:hf-llama")
