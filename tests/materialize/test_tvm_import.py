"""TVM imported without PyTorch (``placer.tvm_import``): a process that imports placer and then TVM does not
import PyTorch (where it is installed, as the test extra installs it), compiles and runs an ONNX model
with TVM all the same, and imports PyTorch afterwards as usual; ``PLACER_TVM_WITH_TORCH=1`` keeps TVM's
own import. Each case is a fresh process: the import happens once per process."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="PyTorch is not installed: TVM's import has none to skip")

_RUN = """
import sys
import numpy as np
import placer
from placer.zoo import resolve
import tvm
print("torch" in sys.modules)
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx
import onnxruntime as ort
model = resolve("zoo:tiny")
mod = from_onnx(model, keep_params_in_input=False)
vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu(0))
name = model.graph.input[0].name
shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
got = vm["main"](tvm.runtime.tensor(x))
got = (got[0] if isinstance(got, tvm.ir.Array) else got).numpy()
session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
want = session.run(None, {name: x})[0]
print(bool(np.allclose(got, want, rtol=1e-4, atol=1e-5)))
import torch
print(torch.ones(2).sum().item())
"""


def test_tvm_imports_without_pytorch_and_still_compiles_and_runs_a_model(fresh_python):
    # PyTorch not imported by TVM's import; the model compiled by TVM agrees with ONNX Runtime; torch
    # imports afterwards and works
    assert fresh_python(_RUN, PLACER_TVM_WITH_TORCH="0") == ["False", "True", "2.0"]


def test_the_opt_out_keeps_tvms_own_import(fresh_python):
    assert fresh_python(_RUN, PLACER_TVM_WITH_TORCH="1")[0] == "True"
