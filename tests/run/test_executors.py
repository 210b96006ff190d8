"""Hybrid and Relax executors on real runtimes: zoo models under plans that alternate targets."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest
from mz_models import (
    SLEEPS,
    alternating_plan,
    diamond_model,
    graph_of,
    overlapping_sleeps,
    register_test_targets,
    zoo_graph,
)

from placer.materialize import materialize
from placer.run import (
    HybridExecutor,
    Measurement,
    RelaxExecutor,
    check_against_reference,
    compare,
    make_executor,
    random_inputs,
    run_plan,
)

_MATS: dict[str, object] = {}


def _zoo_mat(name: str):
    if name not in _MATS:
        g = zoo_graph(name)  # the logits are an extra output: a near one-hot softmax hides errors
        _MATS[name] = materialize(g, alternating_plan(g))
    return _MATS[name]


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["hybrid", "relax"])
@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "resnet50"])
def test_zoo_model_under_an_alternating_plan_matches_the_reference(name, executor):
    mat = _zoo_mat(name)
    st = mat.stats
    assert st.n_partitions >= 20
    assert set(st.by_target) == {"onnxruntime@cpu:t1", "openvino@cpu:t1", "tvm-llvm@cpu:t1"}
    reqs = [random_inputs(mat.graph, s) for s in range(2)]
    ex = make_executor(mat, executor)
    ex.compile()
    try:
        res = ex.measure(reqs, warmup=1, **({"partition_runs": 1} if executor == "relax" else {}))
    finally:
        ex.close()
    rep = check_against_reference(mat.graph.model, reqs, res.outputs)
    assert rep.passed, rep.summary()
    m = res.measurement
    assert m.n_requests == 2 and m.latency_p50_ms > 0 and m.throughput_rps > 0
    assert {p.partition for p in m.partitions} == {p.id for p in mat.partitions}


def test_independent_partitions_on_different_targets_run_at_the_same_time():
    register_test_targets()
    g = graph_of(diamond_model())
    # b and c are independent and sit on two (sleepy, 50 ms) targets pinned to different cores
    asg = {"a": "onnxruntime", "b": "sleepy@cpu0", "c": "sleepy@cpu1", "d": "onnxruntime", "e": "onnxruntime",
           "f": "onnxruntime"}
    mat = materialize(g, asg)
    feeds = random_inputs(g, 0)
    sleepers = {"sleepy@cpu0:t1", "sleepy@cpu1:t1"}
    SLEEPS.clear()
    with HybridExecutor(mat) as ex:
        assert ex.parallel and ex.has_parallelism
        res = ex.measure([feeds] * 3, warmup=1)
    # b's and c's sleeps overlap in every request (recorded intervals, not a wall-clock total)
    assert {c[0] for c in SLEEPS} == sleepers and overlapping_sleeps(sleepers) >= 4
    SLEEPS.clear()
    with HybridExecutor(mat, parallel=False) as ex:
        seq = ex.measure([feeds] * 2, warmup=0)
    assert len(SLEEPS) == 4 and overlapping_sleeps() == 0
    assert seq.measurement.latency_p50_ms >= 100  # two 50 ms sleeps one after the other: a floor, not a race
    assert compare(res.outputs[0], seq.outputs[0]).passed


def test_partitions_on_targets_that_share_a_core_never_run_at_once():
    register_test_targets()
    g = graph_of(diamond_model())
    # b and c are independent, but sleepy:t2 uses every core, sleepy@cpu1 one of them
    asg = {"a": "onnxruntime", "b": "sleepy:t2", "c": "sleepy@cpu1", "d": "onnxruntime", "e": "onnxruntime",
           "f": "onnxruntime"}
    mat = materialize(g, asg)
    feeds = random_inputs(g, 0)
    SLEEPS.clear()
    with HybridExecutor(mat) as ex:
        assert not ex.has_parallelism
        assert len({ex.group_of[t] for t in ("sleepy@cpu:t2", "sleepy@cpu1:t1")}) == 1
        res = ex.measure([feeds] * 2, warmup=0)
    assert len(SLEEPS) == 4 and overlapping_sleeps() == 0  # never at once
    assert res.measurement.latency_p50_ms >= 100, res.measurement.summary()  # 2 x 50 ms, one after the other


def test_one_runtime_plan_is_one_partition_run_inline():
    g = graph_of(diamond_model())
    mat = materialize(g, {op.id: "onnxruntime" for op in g.ops})
    with HybridExecutor(mat) as ex:
        assert not ex.parallel and len(mat.partitions) == 1
        out = ex.run(random_inputs(g, 1))
    assert set(out) == {"y", "z"}


def _parks_after_run(session) -> bool:
    try:
        return session.get_session_options().get_session_config_entry("session.force_spinning_stop") == "1"
    except Exception:  # ONNX Runtime raises when the entry was never set
        return False


def test_a_one_partition_plan_keeps_its_pool_hot_and_a_cut_plan_parks_it():
    """One partition: nothing else runs, so the 2-thread pool spins between requests as ONNX Runtime's
    default does; with two partitions on core-sharing targets each session parks its pool after a run."""
    g = graph_of(diamond_model())
    alone = materialize(g, {op.id: "onnxruntime:t2" for op in g.ops})
    order = [op.id for op in g.ops]
    cut = materialize(g, {i: ("onnxruntime:t2" if k < 2 else "openvino:t2") for k, i in enumerate(order)})
    feeds = random_inputs(g, 1)
    with HybridExecutor(alone) as ex_alone, HybridExecutor(cut) as ex_cut:
        ex_alone.run(feeds)
        ex_cut.run(feeds)
        (only,) = ex_alone.compiled.values()
        assert not _parks_after_run(only.session)
        ort_parts = [c for p, c in ex_cut.compiled.items() if hasattr(c, "session")]
        assert ort_parts and all(_parks_after_run(c.session) for c in ort_parts)


def test_measurement_json_round_trip():
    g = graph_of(diamond_model())
    mat = materialize(g, {"a": "onnxruntime", "b": "openvino", "c": "onnxruntime", "d": "onnxruntime",
                          "e": "onnxruntime", "f": "openvino"})
    res = run_plan(mat, "seed:3", requests=5, warmup=1)
    m = res.measurement
    d = json.loads(m.to_json())
    assert d["n_requests"] == 5 and d["format"] == "placer.measurement"
    assert [p["partition"] for p in d["partitions"]] == ["p0", "p1", "p2"]
    assert all(p["median_ms"] > 0 and p["target"] and p["ops"] for p in d["partitions"])
    assert Measurement.from_json(m.to_json()) == m
    assert res.numerics.passed


def test_relax_and_hybrid_agree_on_a_small_plan():
    g = graph_of(diamond_model())
    mat = materialize(g, {"a": "tvm-llvm", "b": "openvino", "c": "tvm-llvm", "d": "onnxruntime",
                          "e": "tvm-llvm", "f": "openvino"})
    feeds = random_inputs(g, 2)
    with HybridExecutor(mat) as h, RelaxExecutor(mat) as r:
        a, b = h.run(feeds), r.run(feeds)
    assert compare(a, b, rtol=1e-6, atol=1e-7).passed


def test_compare_scales_atol_with_output_magnitude_and_names_mismatches():
    ref = {"big": np.linspace(50.0, 100.0, 4, dtype=np.float32),
           "small": np.linspace(0.5e-3, 1e-3, 4, dtype=np.float32), "idx": np.arange(4)}
    out = {"big": ref["big"] + 0.05, "small": ref["small"] + 5e-7, "idx": np.arange(4)}
    assert compare(out, ref).passed  # big: 0.05 <= 1e-4 * 100 + 1e-3 * 50; small: 5e-7 <= 1e-4 * 1e-3 + 1e-3 * 5e-4
    out["small"] = ref["small"] + 5e-5  # 5-10 % off: an absolute atol of 1e-4 would have let it pass
    rep = compare(out, ref)
    assert not rep.passed and [o.name for o in rep.failures()] == ["small"]
    assert rep.failures()[0].atol_eff == pytest.approx(1e-7, rel=1e-3)
    out["small"] = ref["small"]
    out["idx"] = np.array([0, 1, 2, 4])
    assert [o.name for o in compare(out, ref).failures()] == ["idx"]
    assert not compare({"big": ref["big"][:2]}, {"big": ref["big"]}).passed


def test_exported_compiled_module_runs_and_a_changed_one_is_refused(tmp_path):
    """module.so (tvm.compile's output, TVM partitions compiled in, the others called back) runs the
    plan like a fresh compile; a changed file or one compiled for another plan is refused, by name."""
    from placer.errors import PlanError
    from placer.materialize import load_plan_dir

    g = graph_of(diamond_model())
    asg = {"a": "tvm-llvm", "b": "openvino", "c": "tvm-llvm", "d": "onnxruntime", "e": "tvm-llvm", "f": "openvino"}
    mat = materialize(g, asg, tmp_path / "plan")
    lib = mat.export_compiled()
    assert lib.name == "module.so" and json.loads((tmp_path / "plan" / "compiled.json").read_text())["sha256"]
    loaded = load_plan_dir(tmp_path / "plan")
    feeds = random_inputs(g, 4)
    with HybridExecutor(loaded) as h, RelaxExecutor(loaded, compiled=True) as r:
        assert compare(r.run(feeds), h.run(feeds), rtol=1e-6, atol=1e-7).passed
    res = run_plan(tmp_path / "plan", "seed:1", executor="relax", compiled=True, check=True)
    assert res.numerics.passed
    with pytest.raises(Exception, match="executor='relax'"):
        run_plan(tmp_path / "plan", "seed:1", compiled=True)
    # a module compiled for another assignment is not this plan's
    other = materialize(g, {**asg, "a": "onnxruntime"}, tmp_path / "other")
    (tmp_path / "other" / "module.so").write_bytes(lib.read_bytes())
    (tmp_path / "other" / "compiled.json").write_text((tmp_path / "plan" / "compiled.json").read_text())
    with pytest.raises(PlanError, match="assignment_hash"):
        other.compiled_path()
    # a module built by another TVM is refused (it could crash the process instead of failing)
    info_file = tmp_path / "plan" / "compiled.json"
    good = info_file.read_text()
    info_file.write_text(good.replace(json.loads(good)["tvm"], "0.0.0-other"))
    with pytest.raises(PlanError, match="compiled with TVM"):
        load_plan_dir(tmp_path / "plan").compiled_path()
    info_file.write_text(good)
    # a changed library is refused before it is loaded
    with open(lib, "ab") as f:
        f.write(b"\0")
    with pytest.raises(PlanError, match="SHA-256 differs"):
        RelaxExecutor(load_plan_dir(tmp_path / "plan"), compiled=True).compile()
    # resealed by whoever changed it: the SHA-256 matches, but it is not one this user's placer compiled
    # (no valid HMAC under the trust key): refused, unless the user says --trust
    import hashlib

    info = json.loads(good)
    assert info["hmac"]
    info["sha256"] = hashlib.sha256(lib.read_bytes()).hexdigest()
    info_file.write_text(json.dumps(info))
    with pytest.raises(PlanError, match="module.so: not compiled by placer on this machine"):
        RelaxExecutor(load_plan_dir(tmp_path / "plan"), compiled=True).compile()
    res = run_plan(tmp_path / "plan", "seed:1", executor="relax", compiled=True, trust=True, check=True)
    assert res.numerics.passed


def test_an_int64_tensor_from_onnxruntime_feeds_an_openvino_partition():
    # ONNX Runtime returns int64 as numpy's longlong ('q'), which OpenVINO's binding refused
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.INT64, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [1, 8])
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="a"), helper.make_node("Mul", ["a", "x"], ["y"], name="b")]
    model = helper.make_model(helper.make_graph(nodes, "i64", [x], [y]), opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    g = graph_of(model)
    first, second = (op.id for op in g.ops)
    mat = materialize(g, {first: "onnxruntime", second: "openvino"})
    feeds = {"x": np.arange(8, dtype=np.int64).reshape(1, 8)}
    res = run_plan(mat, [feeds], requests=1, warmup=0)
    np.testing.assert_array_equal(res.outputs[0]["y"], 2 * feeds["x"] * feeds["x"])



def test_openvino_outputs_are_the_callers_unless_shared_and_shared_ones_are_views_until_the_next_run():
    # the executor hands a partition's outputs to the next partition as views of OpenVINO's buffers
    # (no copy), and copies the model's outputs unless the caller says it is done with them before
    # the next request (a timed run, as the yardsticks time theirs)
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])
    nodes = [helper.make_node("Mul", ["x", "x"], ["a"], name="a"),
             helper.make_node("Add", ["a", "x"], ["y"], name="b")]
    model = helper.make_model(helper.make_graph(nodes, "ov2", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    g = graph_of(model)
    first, second = (op.id for op in g.ops)
    a = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    with HybridExecutor(materialize(g, {first: "openvino", second: "openvino"})) as ex:
        ex.compile()
        assert ex._shared_outputs == {"y"}
        owned = ex.run({"x": a})["y"]
        kept = owned.copy()
        shared = ex.run({"x": 2 * a}, share_outputs=True)["y"]
        np.testing.assert_array_equal(owned, kept)  # the caller's copy is untouched by the next run
        np.testing.assert_allclose(shared, 4 * a * a + 2 * a, rtol=1e-5)
        ex.run({"x": 3 * a}, share_outputs=True)
        np.testing.assert_allclose(shared, 9 * a * a + 3 * a, rtol=1e-5)  # a view: the next run wrote it
        np.testing.assert_allclose(kept, a * a + a, rtol=1e-5)


def test_tvm_refills_its_input_tensors_each_run_and_only_shared_outputs_are_views():
    # TVM's inputs are tensors kept on the device and filled by a copy per run (no allocation per
    # call); run_shared reads the outputs in place (DLPack), run hands the caller copies
    from onnx import TensorProto, helper

    from placer.devices import make_target

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [])  # a 0-d input stays 0-d
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])
    nodes = [helper.make_node("Mul", ["x", "x"], ["a"], name="a"),
             helper.make_node("Mul", ["a", "s"], ["y"], name="b")]
    model = helper.make_model(helper.make_graph(nodes, "tvm2", [x, s], [y]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = make_target("tvm-llvm").compile(model)
    a = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    two = np.asarray(2.0, dtype=np.float32)
    owned = compiled.run({"x": a, "s": two})["y"]
    assert owned.flags.owndata
    shared = compiled.run_shared({"x": 2 * a, "s": two})["y"]
    assert not shared.flags.owndata  # a view of the VM's tensor
    np.testing.assert_allclose(shared, 8 * a * a, rtol=1e-6)
    compiled.run_shared({"x": 3 * a, "s": np.asarray(0.5, dtype=np.float32)})
    np.testing.assert_allclose(owned, 2 * a * a, rtol=1e-6)  # the caller's copy is untouched by later runs
    np.testing.assert_array_equal(compiled.run({"x": a, "s": two})["y"], owned)  # refilled, not stale


def test_a_constant_model_output_is_written_by_an_op_and_every_executor_returns_it():
    """An initializer listed as a graph output (ONNX Runtime runs such a model) became a stage config
    source that is neither a partition nor a model input, and materialize refused it; the loader now
    writes it with an Identity node (read by the other nodes too), placed like any op."""
    import onnx
    from mz_models import const, make_model, vi
    from onnx import helper as h

    c = np.arange(4, dtype=np.float32)
    model = make_model([h.make_node("Relu", ["x"], ["r"], name="relu"),
                        h.make_node("Add", ["r", "c"], ["y"], name="add")],
                       [vi("x", [4])], [vi("y", [4]), vi("c", [4])], inits=[const("c", c)])
    g = graph_of(model)
    ident = [op for op in g.ops if op.op_type == "Identity"]
    assert len(ident) == 1 and ident[0].outputs == ("c",)
    onnx.checker.check_model(g.model)
    mat = materialize(g, {op.id: ("openvino" if op.op_type == "Identity" else "onnxruntime") for op in g.ops})
    assert mat.stats.n_partitions == 2
    feeds = {"x": np.array([-1, 2, -3, 4], np.float32)}
    for kind in ("hybrid", "relax"):
        with make_executor(mat, kind) as ex:
            out = ex.run(feeds)
        np.testing.assert_array_equal(out["c"], c)
        np.testing.assert_array_equal(out["y"], np.maximum(feeds["x"], 0) + c)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_an_unpinned_target_sharing_a_worker_with_a_pinned_one_runs_on_every_core(monkeypatch):
    """An unpinned runtime on every core shares one worker with a pinned one (they share a core): its
    partition ran in that worker still pinned to the other target's core."""
    g = graph_of(diamond_model())
    n = len(os.sched_getaffinity(0))
    asg = {"a": "onnxruntime@cpu0", "b": f"onnxruntime:t{n}", "c": f"onnxruntime:t{n}",
           "d": f"onnxruntime:t{n}", "e": f"onnxruntime:t{n}", "f": f"onnxruntime:t{n}"}
    mat = materialize(g, asg)
    seen: dict[str, set[int]] = {}
    with HybridExecutor(mat) as ex:
        run_part = ex._run_part

        def spy(p, feeds):
            seen[p.target] = set(os.sched_getaffinity(0))
            return run_part(p, feeds)
        monkeypatch.setattr(ex, "_run_part", spy)
        ex.compile()
        assert len(ex.pools) == 1  # one worker: the two targets share core 0
        ex.run(random_inputs(g, 0))
    assert seen["onnxruntime@cpu0:t1"] == {0}
    assert seen[f"onnxruntime@cpu:t{n}"] == set(os.sched_getaffinity(0))


def test_a_plan_that_fails_to_compile_closes_the_sessions_it_built(monkeypatch):
    """A partition that cannot compile: the bench closes the sessions the other partitions had built
    (the parallel compile dropped them with the first error, and the bench never closed the executor)."""
    from placer.devices.onnxruntime_target import OrtCompiled
    from placer.devices.testing import FAULT_ENV
    from placer.devices.testing import register_test_targets as register_faulty
    from placer.errors import PlacerError
    from placer.run.bench import PlanBench

    register_faulty()
    monkeypatch.setenv(FAULT_ENV, "Neg")
    closed = []
    close = OrtCompiled.close
    monkeypatch.setattr(OrtCompiled, "close", lambda self: (closed.append(self), close(self))[1])
    g = graph_of(diamond_model())  # f is the Neg: on the failing target; b and c on two pinned cores
    asg = {"a": "onnxruntime", "b": "onnxruntime@cpu0", "c": "onnxruntime@cpu1", "d": "onnxruntime",
           "e": "onnxruntime", "f": "test-error"}
    mat = materialize(g, asg)
    feeds = random_inputs(g, 0)
    with PlanBench([feeds]) as bench, pytest.raises(PlacerError, match="test-error|Neg"):
        bench.add("k", mat)
    assert len(closed) == len(mat.partitions) - 1  # every session that was built
    # the executor as a context manager: a compile that fails in __enter__ closes what it built too
    # (__exit__ does not run then: its sessions and its cores' pool threads stayed)
    from placer.run.executors import make_executor

    closed.clear()
    with pytest.raises(PlacerError, match="test-error|Neg"), make_executor(mat, "hybrid"):
        pass
    assert len(closed) == len(mat.partitions) - 1
    assert not [t for t in threading.enumerate() if t.name.startswith("placer-cores")]
