"""placer: auto-tuned placement of deep-learning graphs on heterogeneous targets.

The Python API (each imported on first use, so ``import placer`` stays cheap)::

    import placer
    pm = placer.plan("zoo:squeezenet", targets=["onnxruntime", "openvino"])  # a PlannedModel
    pm.explain(); pm.run("seed:0"); pm.save("plan_dir")
    result = placer.tune("zoo:squeezenet", budget_s=120, out_dir="placer-out")
    p = placer.Plan.load("plan_dir/plan.json")
"""

from __future__ import annotations

from placer.tvm_import import install as _install_tvm_import

__version__ = "0.1.0"

_install_tvm_import()  # TVM's import skips PyTorch (placer.tvm_import): seconds in each process importing TVM

__all__ = ["Plan", "plan", "tune", "prepare", "explain", "load"]


def __getattr__(name: str):
    if name in ("plan", "tune"):  # callable modules: placer.plan(...) / placer.tune(...)
        import importlib

        return importlib.import_module(f"placer.{name}")
    if name == "Plan":
        from placer.plan import Plan

        return Plan
    if name in ("prepare", "explain", "load"):
        from placer import api

        return getattr(api, name)
    raise AttributeError(f"module 'placer' has no attribute {name!r}")
