"""materialize() takes the solver's Plan (latency and pipeline mode) and writes it as plan.json."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mz_models import graph_of, lpnorm_model

from placer.materialize import load_plan_dir, materialize
from placer.run import run_plan

TARGETS = ["onnxruntime@cpu:t1", "openvino@cpu:t1", "tvm-llvm@cpu:t1"]


def _problem(g):
    from placer.problem import PlacementProblem, Tensor

    rng = np.random.default_rng(0)
    cost = rng.uniform(0.1, 1.0, size=(len(g.ops), len(TARGETS)))
    for i, op in enumerate(g.ops):
        if op.op_type == "LpNormalization":
            cost[i, 2] = np.inf  # no Relax converter
    tensors = []
    for t, src in g.producer.items():
        tensors.append(Tensor(t, src, tuple(g.consumers.get(t, ())), g.tensors[t].nbytes))
    for t in g.inputs:
        tensors.append(Tensor(t, None, tuple(g.consumers.get(t, ())), g.tensors[t].nbytes))
    return PlacementProblem(ops=[op.id for op in g.ops], targets=TARGETS, cost_ms=cost, tensors=tensors,
                            link_latency_ms=0.01)


@pytest.mark.parametrize("mode", ["latency", "pipeline"])
def test_solver_plan_materializes_and_runs(tmp_path, mode):
    solve = pytest.importorskip("placer.solve").solve
    g = graph_of(lpnorm_model())
    kw = {"num_stages": 2} if mode == "pipeline" else {}
    plan = solve(_problem(g), mode, "cpsat" if mode == "latency" else "dp", time_limit=5, **kw)
    mat = materialize(g, plan, tmp_path / "plan")
    assert mat.mode == mode
    assert {o: mat.partition(p.id).target for p in mat.partitions for o in p.ops} == plan.assignment
    if mode == "pipeline":
        assert {o: p.stage for p in mat.partitions for o in p.ops} == plan.stage
    saved = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert saved["solver"] == plan.solver and saved["assignment"] == plan.assignment
    back = load_plan_dir(tmp_path / "plan")
    assert back.partitions == mat.partitions and back.mode == mode
    res = run_plan(back, "seed:0", pipeline=(mode == "pipeline"), requests=3, warmup=0, check=True)
    assert res.ok and res.numerics.passed
