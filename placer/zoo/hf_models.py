"""Zoo models built from Hugging Face ``transformers`` model classes (``pip install -e '.[hf]'``):
real architectures with seeded random weights (``Model(Config(...))`` after ``torch.manual_seed``,
never ``from_pretrained``: nothing is downloaded), exported to ONNX opset 17 with static shapes,
batch 1.

* ``zoo:hf-bert``: ``BertModel``, hidden 256, 4 layers, 4 heads, intermediate 1024, 128 tokens;
  inputs ``input_ids`` + ``attention_mask`` (int64 ``[1, 128]``), output ``last_hidden_state``.
* ``zoo:hf-gpt2``: ``GPT2LMHeadModel``, width 256, 4 layers, 4 heads, vocabulary 8192, 128 tokens,
  no KV cache; input ``input_ids``, output ``logits`` ``[1, 128, 8192]``.
* ``zoo:hf-vit``: ``ViTModel`` (ViT-S-like, 6 layers): 224x224 image, patch 16, hidden 384, 6 heads,
  intermediate 1536; input ``pixel_values`` ``[1, 3, 224, 224]``, output ``last_hidden_state``.
* ``zoo:hf-convnext``: ``ConvNextForImageClassification`` (ConvNeXt-atto-like): depths 2/2/6/2,
  widths 48/96/192/384, 1000 classes; input ``pixel_values``, output ``logits``. Layer scale
  starts at 0.1, not the library's 1e-6, so the blocks are not (numerically) the identity.
* ``zoo:hf-llama``: ``LlamaForCausalLM``: hidden 256, 4 layers, 4 query / 2 key-value heads
  (grouped-query attention), SwiGLU intermediate 688, vocabulary 8192, 128 tokens, no KV cache;
  input ``input_ids``, output ``logits``.
* ``zoo:hf-distilbert``: ``DistilBertModel``, dim 384, 6 layers, 6 heads, hidden 1536, 128 tokens;
  inputs ``input_ids`` + ``attention_mask``, output ``last_hidden_state``.
* ``zoo:hf-mobilenetv2``: ``MobileNetV2ForImageClassification`` (width 0.75): inverted residual
  blocks with depthwise convolutions and ReLU6, 224x224 image, 1000 classes; input
  ``pixel_values``, output ``logits``. Convolutions get He (fan-in) initial weights: with the
  library's std-0.02 init the output does not depend on the image.

Attention is ``attn_implementation="eager"`` (explicit MatMul/Softmax; the SDPA path is not what
a deployed ONNX graph has). Exports go through :func:`placer.zoo.torch_models.export_cached` (the
TorchScript exporter, constant folding on) and are cached next to the torch zoo models, keyed by
name, builder version, seed, torch and transformers versions.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from placer.errors import GraphError
from placer.zoo.torch_models import export_cached, seeded_build

__all__ = ["HF_MODELS", "hf_model", "hf_module"]

#: bumped whenever a builder below changes, so a stale cached export is not reused
BUILDERS_VERSION = 2
SEQ = 128
IMAGE = 224


def _transformers():
    # configs are built here (never from_pretrained): nothing is fetched, whatever HF_HUB_OFFLINE says
    try:
        import transformers
    except ImportError:
        raise GraphError("this zoo model is built with Hugging Face transformers, which is not installed: "
                         "pip install -e '.[hf]' (or pip install transformers 'torch==2.13.0')") from None
    return transformers


def _wrap(model, in_names: list[str], out_name: str, *, unpadded: bool = False):
    """The HF model as a module taking positional tensors and returning one tensor (its ``out_name``).

    ``unpadded``: the model gets an all-ones ``attention_mask`` made from ``input_ids`` (folded to a
    constant causal mask): without one, transformers' causal-mask code looks for packed sequences
    with ``torch.diff``, which the TorchScript exporter cannot convert.
    """
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *xs):
            kwargs = dict(zip(in_names, xs))
            if unpadded:
                kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
            return getattr(self.model(**kwargs, return_dict=True), out_name)

    return Wrapped().eval()


def _ids(vocab: int):
    import torch

    return torch.randint(0, vocab, (1, SEQ), dtype=torch.int64)


def _padded_encoder(model, vocab: int):
    """An encoder taking ``input_ids`` + ``attention_mask`` and returning ``last_hidden_state``, traced
    with padding (the last eighth of the positions masked), so the masking path is in the graph."""
    import torch

    mask = torch.ones((1, SEQ), dtype=torch.int64)
    mask[:, -SEQ // 8:] = 0
    names = ["input_ids", "attention_mask"]
    return _wrap(model, names, "last_hidden_state"), (_ids(vocab), mask), names, ["last_hidden_state"]


def _bert():
    tf = _transformers()
    cfg = tf.BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024, max_position_embeddings=512, attn_implementation="eager")
    return _padded_encoder(tf.BertModel(cfg), 30522)


def _gpt2():
    tf = _transformers()
    cfg = tf.GPT2Config(vocab_size=8192, n_positions=SEQ, n_embd=256, n_layer=4, n_head=4, use_cache=False,
                        bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    module = _wrap(tf.GPT2LMHeadModel(cfg), ["input_ids"], "logits", unpadded=True)
    return module, (_ids(8192),), ["input_ids"], ["logits"]


def _vit():
    import torch

    tf = _transformers()
    cfg = tf.ViTConfig(image_size=IMAGE, patch_size=16, hidden_size=384, num_hidden_layers=6,
                       num_attention_heads=6, intermediate_size=1536, attn_implementation="eager")
    model = tf.ViTModel(cfg, add_pooling_layer=False)
    x = torch.randn((1, 3, IMAGE, IMAGE))
    return _wrap(model, ["pixel_values"], "last_hidden_state"), (x,), ["pixel_values"], ["last_hidden_state"]


def _convnext():
    import torch

    tf = _transformers()
    cfg = tf.ConvNextConfig(depths=[2, 2, 6, 2], hidden_sizes=[48, 96, 192, 384], image_size=IMAGE,
                            num_labels=1000, layer_scale_init_value=0.1)
    x = torch.randn((1, 3, IMAGE, IMAGE))
    module = _wrap(tf.ConvNextForImageClassification(cfg), ["pixel_values"], "logits")
    return module, (x,), ["pixel_values"], ["logits"]


def _llama():
    tf = _transformers()
    cfg = tf.LlamaConfig(vocab_size=8192, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                         use_cache=False, attn_implementation="eager")
    module = _wrap(tf.LlamaForCausalLM(cfg), ["input_ids"], "logits", unpadded=True)
    return module, (_ids(8192),), ["input_ids"], ["logits"]


def _distilbert():
    tf = _transformers()
    cfg = tf.DistilBertConfig(vocab_size=30522, dim=384, n_layers=6, n_heads=6, hidden_dim=1536,
                              max_position_embeddings=512, attn_implementation="eager")
    return _padded_encoder(tf.DistilBertModel(cfg), 30522)


def _mobilenetv2():
    import torch

    tf = _transformers()
    cfg = tf.MobileNetV2Config(depth_multiplier=0.75, image_size=IMAGE, num_labels=1000)
    model = tf.MobileNetV2ForImageClassification(cfg)
    for m in model.modules():  # the library's std-0.02 init lets the signal die out by the last block
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
    x = torch.randn((1, 3, IMAGE, IMAGE))
    module = _wrap(model, ["pixel_values"], "logits")
    return module, (x,), ["pixel_values"], ["logits"]


#: zoo name -> builder returning (module, example args, input names, output names)
HF_MODELS: dict[str, Callable] = {
    "hf-bert": _bert,
    "hf-gpt2": _gpt2,
    "hf-vit": _vit,
    "hf-convnext": _convnext,
    "hf-llama": _llama,
    "hf-distilbert": _distilbert,
    "hf-mobilenetv2": _mobilenetv2,
}


def hf_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """The zoo model ``name`` (a key of :data:`HF_MODELS`) exported to ONNX (cached)."""
    if name not in HF_MODELS:
        raise GraphError(f"unknown transformers zoo model {name!r}; known: {', '.join(HF_MODELS)}")
    tf = _transformers()
    return export_cached(name, HF_MODELS[name], seed, BUILDERS_VERSION, tag=f"-tf{tf.__version__}")


def hf_module(name: str, seed: int = 0):
    """The torch module ``zoo:NAME`` is exported from (same seed, same weights), in eval mode, with
    its input and output names: ``(module, input names, output names)``. For checking the export."""
    if name not in HF_MODELS:
        raise GraphError(f"unknown transformers zoo model {name!r}; known: {', '.join(HF_MODELS)}")
    _transformers()
    module, _, in_names, out_names = seeded_build(HF_MODELS[name], seed)
    return module, in_names, out_names
