"""Targets known only by a spec (``placer.devices.sim``): specs, roofline, planning on the SoC."""

from __future__ import annotations

import json
import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from placer.devices import make_target, make_targets
from placer.devices.sim import SimTarget, bundled_specs, load_spec, parse_spec, register_spec, spec_link_fits
from placer.errors import TargetError

SOC = ["sim:ultra96/a53", "sim:ultra96/mali", "sim:ultra96/dpu"]


def _op(op_type="Conv", flops=2e9, bytes_in=4e6, bytes_out=4e6, weight=1e6, dtype="float32"):
    t = SimpleNamespace(dtype=dtype, is_constant=False)
    sig = SimpleNamespace(inputs=(t,), outputs=(t,))
    return SimpleNamespace(op_type=op_type, domain="", flops=flops, bytes_in=int(bytes_in), bytes_out=int(bytes_out),
                           weight_bytes=int(weight), signature=sig)


SPEC = """
[spec]
description = "test"
[defaults]
overhead_us = 10
[devices.cpu]
peak_gflops = { fp32 = 100 }
mem_bandwidth_gbs = 10
memory_gb = 1
[devices.cpu.efficiency]
default = 0.5
Conv = 0.25
[devices.npu]
peak_gflops = { int8 = 1000 }
precision = "int8"
mem_bandwidth_gbs = 10
overhead_us = 0
ops = ["Conv", "Relu"]
[default_link]
latency_us = 100
bandwidth_gbs = 1
[[links]]
src = "cpu"
dst = "npu"
latency_us = 20
bandwidth_gbs = 4
symmetric = false
"""


def test_bundled_specs_load():
    assert {"ultra96", "server"} <= set(bundled_specs())
    soc = load_spec("ultra96")
    assert soc.target_names() == SOC
    assert load_spec("server").target_names() == ["sim:server/cpu", "sim:server/gpu"]
    dpu = soc.device("dpu")
    assert dpu.precision == "int8" and dpu.peak("int8") == pytest.approx(691.2e9)
    assert dpu.supports("Conv")[0] and not dpu.supports("Softmax")[0]
    assert soc.device("mali").peak("fp16") == pytest.approx(21.34e9)


def test_roofline(tmp_path, monkeypatch):
    monkeypatch.delenv("PLACER_SPECS", raising=False)  # restored after the test
    path = tmp_path / "testsoc.toml"
    path.write_text(SPEC)
    assert register_spec(path) == "testsoc"
    cpu, npu = make_target("sim:testsoc/cpu"), make_target("sim:testsoc/npu")
    assert isinstance(cpu, SimTarget) and cpu.simulated and cpu.kind == "sim" and cpu.name == "sim:testsoc/cpu"
    op = _op()
    # compute bound: 2 GFLOP / (100 GFLOP/s * 0.25) = 80 ms; memory 9 MB / 10 GB/s = 0.9 ms; + 10 us
    assert cpu.estimate_op_ms(op) == pytest.approx(80.0 + 0.01)
    assert cpu.estimate(op)["bound"] == "compute"
    # memory bound: no FLOPs, 9 MB at 10 GB/s = 0.9 ms
    assert cpu.estimate_op_ms(_op("Relu", flops=0)) == pytest.approx(0.9 + 0.01)
    # int8 device: a fp32 op moves 1/4 of the bytes; 2 GFLOP at 1 TOP/s (efficiency 1.0) = 2 ms
    assert npu.estimate_op_ms(op) == pytest.approx(max(2.0, 9e6 / 4 / 10e9 * 1e3))
    assert math.isinf(npu.estimate_op_ms(_op("Softmax")))
    assert npu.supports("Softmax")[0] is False
    assert cpu.memory_cap_bytes == 1e9 and math.isinf(npu.memory_cap_bytes)
    with pytest.raises(TargetError, match="simulated target cannot run"):
        cpu.compile(None)
    fits = {(f.src, f.dst): f for f in spec_link_fits([cpu, npu])}
    assert fits[(cpu.name, npu.name)].latency_ms == pytest.approx(0.02)
    assert fits[(cpu.name, npu.name)].transfer_ms(4e6) == pytest.approx(0.02 + 1.0)
    assert fits[(npu.name, cpu.name)].latency_ms == pytest.approx(0.1)  # not symmetric: the default link
    fp = cpu.fingerprint()
    assert fp["simulated"] and fp["spec"] == "testsoc" and fp["device"] == "cpu" and len(fp["spec_sha"]) == 64


def test_register_spec_is_a_registry_not_the_environment(tmp_path, monkeypatch):
    import os

    from placer.devices.sim import registered_specs

    monkeypatch.delenv("PLACER_SPECS", raising=False)
    path = tmp_path / "regsoc.toml"
    path.write_text(SPEC)
    assert register_spec(path) == "regsoc" and register_spec(path) == "regsoc"  # the same file again: fine
    assert "PLACER_SPECS" not in os.environ and registered_specs()["regsoc"] == path.resolve()
    assert make_target("sim:regsoc/cpu").specfile.path == str(path.resolve())
    other = tmp_path / "other" / "regsoc.toml"
    other.parent.mkdir()
    other.write_text(SPEC)
    with pytest.raises(TargetError, match="'regsoc' is already registered as"):
        register_spec(other)


@pytest.mark.parametrize("old,new,needle", [
    ("peak_gflops = { fp32 = 100 }", "", "needs peak_gflops"),
    ("mem_bandwidth_gbs = 10\nmemory_gb = 1", "", "needs mem_bandwidth_gbs"),
    ("Conv = 0.25", "Conv = 2.5", "efficiency of Conv is 2.5"),
    ('ops = ["Conv", "Relu"]', 'ops = "some"', "ops must be"),
    ('dst = "npu"', 'dst = "gpu"', "unknown device 'gpu'"),
    ("[spec]", "[spec", "invalid TOML"),
    ("overhead_us = 10", "overhead_us = 10\nspeed = 3", "unknown keys"),
    ('precision = "int8"', 'precision = "fp16"', "precision 'fp16' has no peak"),
])
def test_spec_errors(old, new, needle):
    assert old in SPEC
    with pytest.raises(TargetError, match=needle):
        parse_spec(SPEC.replace(old, new, 1), "bad", "bad.toml")


def test_unknown_spec_and_device():
    with pytest.raises(TargetError, match="no devices.toml for spec 'nope'"):
        make_target("sim:nope/x")
    with pytest.raises(TargetError, match="has no device 'tpu'"):
        make_target("sim:ultra96/tpu")
    with pytest.raises(TargetError, match="sim:SPEC/DEVICE"):
        make_target("sim")


def test_soc_plans_squeezenet(tmp_path):
    """The edge SoC plans a real zoo model in pipeline mode; the DPU runs the convs; costs are simulated."""
    from placer import api
    from placer.solve import solve

    ctx = api.prepare("zoo:squeezenet", targets=SOC, db=tmp_path / "p.db")
    assert set(ctx.table.source.ravel()) <= {"simulated", "unsupported"}
    assert (ctx.table.source == "simulated").sum() > 0
    j_dpu = SOC.index("sim:ultra96/dpu")
    softmax = [i for i, op in enumerate(ctx.graph.ops) if op.op_type == "Softmax"]
    assert softmax and all(math.isinf(ctx.table.cost_ms[i, j_dpu]) for i in softmax)  # not on the DPU
    prov = ctx.problem.provenance
    assert prov["simulated_targets"] == SOC
    assert prov["cost_sources"]["simulated"] == int((ctx.table.source == "simulated").sum())
    assert prov["cost_sources"]["measured"] == 0
    assert ctx.problem.memory_cap_bytes[j_dpu] == pytest.approx(2 * 2**30)
    # links come from the spec: a53 -> dpu is its own entry, mali -> dpu the default link
    a53, mali, dpu = SOC
    assert ctx.links.fit(a53, dpu).latency_ms == pytest.approx(0.1)
    assert ctx.links.fit(mali, dpu).latency_ms == pytest.approx(0.3)

    plan = solve(ctx.problem, "pipeline", "cpsat", num_stages=3, time_limit=20)
    plan.validate(ctx.problem)
    assert plan.stats.status in ("OPTIMAL", "FEASIBLE")
    placed = Counter((ctx.graph.op(o).op_type, t) for o, t in plan.assignment.items())
    convs = sum(n for (op_type, _), n in placed.items() if op_type == "Conv")
    assert placed[("Conv", dpu)] >= 0.9 * convs, placed  # the DPU runs (nearly) every conv
    assert placed[("Softmax", dpu)] == 0
    assert plan.provenance["simulated_targets"] == SOC
    assert 0.5 < plan.bottleneck_ms < 50.0, plan.summary()  # a few ms on the DPU, not the A53's ~90 ms
    # the single-target baselines agree with the roofline: the A53 alone is far slower
    a53_only = float(np.sum(ctx.problem.cost_ms[:, SOC.index(a53)]))
    assert a53_only > 5 * plan.bottleneck_ms


def test_plan_cli(run_placer, tmp_path):
    out = tmp_path / "plan.json"
    p = run_placer("plan", "zoo:squeezenet", "--targets", ",".join(SOC), "--mode", "pipeline", "--stages", "3",
                   "--time-limit", "10", "--db", tmp_path / "p.db", "--out", out)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "stage 0 @ sim:ultra96/" in p.stdout
    plan = json.loads(out.read_text())
    assert plan["mode"] == "pipeline"
    assert plan["provenance"]["simulated_targets"] == SOC
    assert plan["provenance"]["cost_sources"]["simulated"] > 0
    assert sum(1 for t in plan["assignment"].values() if t == "sim:ultra96/dpu") >= 26


def test_real_and_simulated_targets(tmp_path):
    """What if this host had an H100: ONNX Runtime is profiled, the GPU is simulated, the link between
    them comes from the server spec's default (PCIe) link."""
    from placer import api
    from placer.solve import solve

    ctx = api.prepare("zoo:tiny", targets=["onnxruntime", "sim:server/gpu"], db=tmp_path / "p.db", whole_models=False)
    ort, gpu = (t.name for t in ctx.targets)
    src = dict(zip(ctx.table.targets, ctx.table.source.T))
    assert set(src[ort]) == {"measured"} and set(src[gpu]) == {"simulated"}
    assert ctx.problem.provenance["simulated_targets"] == [gpu]
    assert ctx.links.fit(ort, gpu).latency_ms == pytest.approx(0.01)
    assert ctx.links.fit(gpu, ort).ms_per_byte == pytest.approx(1e3 / 50e9)
    from placer.profile import ProfileStore

    with ProfileStore(tmp_path / "p.db") as st:  # the simulated target was never profiled
        assert {t["name"] for t in st.targets()} == {ort}
    plan = solve(ctx.problem, "latency", "cpsat", time_limit=10)
    plan.validate(ctx.problem)
    assert make_targets([gpu])[0].fingerprint()["simulated"]
