"""Plan precision: f32 by default; bf16 only where the CPU has it, checked at the bf16 tolerance."""

from __future__ import annotations

import pytest

from placer.devices import openvino_target
from placer.devices.registry import default_target_names
from placer.errors import PlacerError, TargetError
from placer.run.numerics import TOLERANCES, compare, tolerance_for

HAS_BF16 = openvino_target.cpu_has_bf16()


def test_tolerances_f32_is_the_default_and_bf16_is_looser():
    assert tolerance_for("f32") == TOLERANCES["f32"]
    rtol32, atol32 = tolerance_for("f32")
    rtol16, atol16 = tolerance_for("bf16")
    assert rtol16 > rtol32 and atol16 > atol32
    with pytest.raises(PlacerError, match="unknown precision 'fp8'"):
        tolerance_for("fp8")


def test_default_targets_follow_the_precision_and_the_cpu(monkeypatch):
    f32 = default_target_names()
    assert f32 == default_target_names("f32") and not any("bf16" in n for n in f32)
    # the capability is what OpenVINO reports; pretend each kind of CPU in turn
    openvino_target.cpu_capabilities.cache_clear()
    monkeypatch.setattr(openvino_target, "cpu_capabilities", lambda: ("FP32", "INT8"))
    with pytest.raises(TargetError, match="this CPU has no bf16.*FP32, INT8"):
        default_target_names("bf16")
    monkeypatch.setattr(openvino_target, "cpu_capabilities", lambda: ("BF16", "FP32", "INT8"))
    bf16 = default_target_names("bf16")
    # bf16 adds OpenVINO in bf16 and keeps the f32 runtimes (a model whose bf16 outputs fail the check
    # still has OpenVINO in f32)
    kinds = list(dict.fromkeys(n.split(":")[0] for n in bf16))
    assert kinds == ["onnxruntime", "openvino-bf16", "openvino"]
    with pytest.raises(TargetError, match="unknown precision"):
        default_target_names("f16")


def test_the_context_precision_follows_its_targets(tmp_path):
    from placer import api

    ctx = api.prepare("zoo:tiny", targets=["onnxruntime"], db=tmp_path / "p.db")
    assert ctx.precision == "f32" and ctx.tolerance == dict(zip(("rtol", "atol"), TOLERANCES["f32"]))
    from placer.devices import make_target

    ctx.targets.append(make_target("openvino-bf16"))
    assert ctx.precision == "bf16" and ctx.tolerance["rtol"] == TOLERANCES["bf16"][0]


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no bf16 (OpenVINO's OPTIMIZATION_CAPABILITIES)")
def test_bf16_outputs_pass_at_the_bf16_tolerance_only():
    import numpy as np

    from placer import api
    from placer.devices import make_target
    from placer.run.numerics import ReferenceRunner, load_inputs

    g = api.load("zoo:squeezenet")
    feeds = load_inputs("seed:0", g, 1)[0]
    ref = ReferenceRunner(g.model).run(feeds)
    out = make_target("openvino-bf16").compile(g.model).run(feeds)
    err = max(float(np.abs(out[k] - ref[k]).max()) for k in ref)
    assert err > 0  # computed in bf16, not f32
    assert compare(out, ref, **dict(zip(("rtol", "atol"), tolerance_for("bf16")))).passed
