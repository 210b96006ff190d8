"""Zoo models exported from PyTorch (``pip install torch``; CPU build is enough): a GPT-style decoder
and a ResNet-style CNN, built with seeded random weights and exported to ONNX opset 17.

* ``zoo:gpt-tiny``: a GPT-2-style decoder (token + position embeddings, pre-LayerNorm blocks of
  causal multi-head self-attention and a GELU MLP, final LayerNorm, tied LM head): vocabulary 1024,
  2 blocks, width 128, 4 heads, 64 tokens. ``zoo:gpt-small``: 4 blocks, width 256, 128 tokens.
  Input ``input_ids`` int64 ``[1, seq]``, output ``logits`` ``[1, seq, vocab]``.
* ``zoo:resnet-mini``: a ResNet-style CNN (stem, three stages of two basic residual blocks with
  BatchNorm at widths 32/64/128, global average pool, 100-class head) on ``[1, 3, 128, 128]``.

Exports use the TorchScript exporter (``dynamo=False``: the torch.export-based one needs
``onnxscript``, which is not installed here) in eval mode, so BatchNorm uses running statistics
(seeded non-trivial ones are set). Exported files are cached under ``~/.cache/placer/zoo/``
(``PLACER_ZOO_CACHE``), keyed by name, builder version, seed and torch version, and written
atomically.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import onnx

from placer.errors import GraphError, first_line

__all__ = ["TORCH_MODELS", "cache_dir", "export_cached", "seeded_build", "torch_model"]

#: where exports are cached; None: ``PLACER_ZOO_CACHE`` or ``~/.cache/placer/zoo``, read at each call
CACHE: Path | None = None
#: bumped whenever a builder below changes, so a stale cached export is not reused
BUILDERS_VERSION = 1


def cache_dir() -> Path:
    if CACHE is not None:
        return Path(CACHE)
    return Path(os.environ.get("PLACER_ZOO_CACHE", str(Path.home() / ".cache" / "placer" / "zoo")))


def _torch():
    try:
        import torch
    except ImportError:
        raise GraphError("this zoo model is exported from PyTorch, which is not installed: "
                         "pip install 'torch==2.13.0' (a CPU build is enough)") from None
    return torch


def _gpt(layers: int, width: int, heads: int, seq: int, vocab: int = 1024):
    torch = _torch()
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
            self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1), persistent=False)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
            q, k, v = (z.reshape(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / (c // heads) ** 0.5) + self.mask[:t, :t]
            y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(seq, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(width)

        def forward(self, ids):
            x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
            for blk in self.blocks:
                x = blk(x)
            return self.ln(x) @ self.tok.weight.t()

    return GPT(), (torch.zeros((1, seq), dtype=torch.int64),), ["input_ids"], ["logits"]


def _resnet_mini(hw: int = 128, widths=(32, 64, 128), classes: int = 100):
    torch = _torch()
    nn = torch.nn

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.down(x))

    layers: list = [nn.Conv2d(3, widths[0], 3, 2, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()]
    cin = widths[0]
    for i, w in enumerate(widths):
        layers += [Basic(cin, w, 1 if i == 0 else 2), Basic(w, w, 1)]
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    net = nn.Sequential(*layers)
    return net, (torch.zeros((1, 3, hw, hw)),), ["data"], ["logits"]


#: zoo name -> builder returning (module, example args, input names, output names)
TORCH_MODELS: dict[str, Callable] = {
    "gpt-tiny": lambda: _gpt(layers=2, width=128, heads=4, seq=64),
    "gpt-small": lambda: _gpt(layers=4, width=256, heads=4, seq=128),
    "resnet-mini": lambda: _resnet_mini(),
}


def _seeded(module, seed: int) -> None:
    """Seeded weights, and BatchNorm running statistics that are not the identity."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
                m.weight.copy_(0.5 + 0.5 * torch.rand(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))


def torch_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """The zoo model ``name`` (a key of :data:`TORCH_MODELS`) exported to ONNX (cached)."""
    if name not in TORCH_MODELS:
        raise GraphError(f"unknown torch zoo model {name!r}; known: {', '.join(TORCH_MODELS)}")
    return export_cached(name, TORCH_MODELS[name], seed, BUILDERS_VERSION)


def seeded_build(build: Callable, seed: int):
    """``build()`` with torch seeded by ``seed`` (the caller's RNG untouched), the module in eval mode:
    the module an export with this seed comes from, and its example args."""
    torch = _torch()
    with torch.random.fork_rng(devices=[]):  # seeded weights without touching the caller's RNG
        torch.manual_seed(seed)
        module, args, in_names, out_names = build()
        _seeded(module, seed)
    module.eval()
    return module, args, in_names, out_names


def export_cached(
    name: str, build: Callable, seed: int, version: int | str, *, tag: str = ""
) -> onnx.ModelProto:
    """``build()`` (module, example args, input names, output names) with torch seeded by ``seed``,
    exported to ONNX opset 17 in eval mode, cached as
    ``NAME-vVERSION-sSEED-torchVERSION[TAG].onnx`` (``tag``: what else the export depends on)."""
    torch = _torch()
    cache = cache_dir()
    path = cache / f"{name}-v{version}-s{seed}-torch{torch.__version__.replace('+', '_')}{tag}.onnx"
    if path.is_file():
        return onnx.load(str(path))
    import warnings

    module, args, in_names, out_names = seeded_build(build, seed)
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, suffix=".onnx.tmp")
    os.close(fd)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
            torch.onnx.export(module, args, tmp, dynamo=False, opset_version=17, input_names=in_names,
                              output_names=out_names, do_constant_folding=True)
        model = onnx.load(tmp)
        model.graph.name = name
        onnx.save(model, tmp)
        os.replace(tmp, path)
    except GraphError:
        raise
    except Exception as exc:
        raise GraphError(f"exporting zoo:{name} from torch {torch.__version__} failed: "
                         f"{type(exc).__name__}: {first_line(exc, 200)}") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return model
