"""Make a module callable, so ``placer.plan(...)`` and ``placer.tune(...)`` work although
``placer.plan`` / ``placer.tune`` are also modules (importing a submodule rebinds the package
attribute to the module, which would shadow a function of the same name)."""

from __future__ import annotations

import importlib
import sys
import types


def make_callable(module_name: str, target: str) -> None:
    """Calling module ``module_name`` calls ``target`` (``"package.module:function"``, imported on call)."""

    class _CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            mod, func = target.split(":")
            return getattr(importlib.import_module(mod), func)(*args, **kwargs)

    sys.modules[module_name].__class__ = _CallableModule
