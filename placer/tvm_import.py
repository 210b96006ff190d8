"""TVM imported without PyTorch: TVM's import imports ``torch`` wherever PyTorch is installed.

``tvm_ffi`` and ``tvm.relax.base_py_module`` import ``torch`` when they are imported, if PyTorch is
installed, to exchange tensors with it (DLPack); placer hands TVM NumPy arrays only, so those seconds
buy it nothing: 2.3 s of a 4 s ``import tvm`` on a quiet 2-core host, 4 of 5-6 s on a busy one
(docs/design.md, session 47). :func:`install` (called by ``placer/__init__``) puts a finder before the
others that, while the ``tvm`` (or ``tvm_ffi``) package itself executes, answers ``import torch`` with
ImportError, as if PyTorch were absent; TVM takes the path it takes on a machine without PyTorch.
Nothing else changes: ``import torch`` afterwards imports it as usual, and a process that imported
PyTorch first (a model exported from PyTorch, say) imports TVM as TVM would. What is lost is TVM's own
hand-off of PyTorch tensors in a process that imported TVM first; ``PLACER_TVM_WITH_TORCH=1`` keeps
TVM's import as it is.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

__all__ = ["WITH_TORCH_ENV", "install"]

#: set to 1 to let TVM's FFI import PyTorch as it would without placer
WITH_TORCH_ENV = "PLACER_TVM_WITH_TORCH"

#: the packages whose own import runs with PyTorch hidden (TVM imports tvm_ffi and its Relax base first)
_MODULES = ("tvm", "tvm_ffi")


class _TorchHiddenLoader(importlib.abc.Loader):
    """Runs the real loader of ``tvm`` (or ``tvm_ffi``) with ``torch`` marked absent in ``sys.modules``."""

    def __init__(self, loader: importlib.abc.Loader):
        self._loader = loader

    def __getattr__(self, name: str):  # get_filename, get_resource_reader, ...: the real loader's
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        hidden = "torch" not in sys.modules
        if hidden:
            sys.modules["torch"] = None  # ``import torch`` raises ImportError while this holds
        try:
            self._loader.exec_module(module)
        finally:
            if hidden and "torch" in sys.modules and sys.modules["torch"] is None:
                del sys.modules["torch"]


class _TvmWithoutTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _MODULES or "torch" in sys.modules or os.environ.get(WITH_TORCH_ENV) == "1":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _TorchHiddenLoader(spec.loader)
        return spec


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once; a no-op once TVM is imported)."""
    if any(m in sys.modules for m in _MODULES) or any(isinstance(f, _TvmWithoutTorch) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _TvmWithoutTorch())
