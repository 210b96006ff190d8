"""Yardsticks (a runtime in its own process, as a user would load it) on models that trip them up."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.materialize import materialize
from placer.run import random_inputs
from placer.run.bench import PlanBench
from placer.run.yardsticks import YardstickSet


def _renamed_input_model() -> onnx.ModelProto:
    """x -> Reshape (to its own shape) -> Relu: OpenVINO folds the Reshape and its input port then
    carries two tensor names, ``x`` and the Reshape's output (as in GPT-2's exported graph), and
    ``get_any_name()`` returns the internal one."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["/m/Reshape_output_0"]),
             helper.make_node("Relu", ["/m/Reshape_output_0"], ["y"])]
    graph = helper.make_graph(nodes, "renamed_input",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(np.array([1, 4], dtype=np.int64), "s")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_openvino_yardsticks_feed_an_input_port_that_has_several_names():
    model = _renamed_input_model()
    feeds = [{"x": np.array([[-1.0, 2.0, -3.0, 4.0]], dtype=np.float32) * (i + 1)} for i in range(2)]
    with YardstickSet(model, feeds, ("ov-default", "ov-throughput")) as ys:
        assert set(ys.ready) == {"ov-default", "ov-throughput"}, {k: y.error for k, y in ys.all.items()}
        outs = ys["ov-default"].outputs(len(feeds), ys.output_names)
        assert outs is not None
        for f, o in zip(feeds, outs):
            # bf16 where the CPU has it
            np.testing.assert_allclose(o["y"], np.maximum(f["x"], 0.0), rtol=1e-2)
        assert len(ys["ov-default"].run_batch(3)) == 3
        assert len(ys["ov-default"].run_batch(3, warm_ms=5.0)) == 3  # untimed requests first, then 3
        assert (ys["ov-throughput"].throughput(8) or 0) > 0


def test_a_model_without_inputs_gets_its_yardsticks():
    """No inputs, so no ``{request}__{name}`` member in the worker's feeds file: the worker read the
    number of requests from those and failed every yardstick (max() of nothing)."""
    nodes = [helper.make_node("RandomUniform", [], ["r"], name="rnd", shape=[4], dtype=TensorProto.FLOAT),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "no_inputs", [],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with YardstickSet(model, [{}, {}], ("ort-default",)) as ys:
        assert set(ys.ready) == {"ort-default"}, {k: y.error for k, y in ys.all.items()}
        assert len(ys["ort-default"].run_batch(2)) == 2


def test_yardstick_workers_die_with_a_killed_parent(tmp_path):
    """Workers are frozen between batches, so a SIGKILLed parent (placer tune killed, or OOM) used to
    leave them stopped forever; the kernel now kills them with it (Linux PR_SET_PDEATHSIG).

    No clock: the kernel sends the signal while the parent exits, before ``wait`` returns it, so at
    that point every worker is gone, a zombie, or has SIGKILL pending."""
    import os
    import signal
    import subprocess
    import sys

    code = (
        "import numpy as np, sys\n"
        "sys.path.insert(0, %r)\n"
        "from test_yardsticks import _renamed_input_model\n"
        "from placer.run.yardsticks import YardstickSet\n"
        "ys = YardstickSet(_renamed_input_model(), [{'x': np.ones((1, 4), np.float32)}],\n"
        "                  ('ort-default', 'ov-default'))\n"
        "print(' '.join(str(y.proc.pid) for y in ys.all.values()), flush=True)\n"
        "sys.stdin.read()\n"  # until this test closes the pipe (or kills us)
    ) % os.path.dirname(__file__)
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2
        assert all(not _dead_or_dying(pid) for pid in pids)  # alive (frozen) while their parent lives
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        alive = [pid for pid in pids if not _dead_or_dying(pid)]
        assert not alive, f"yardstick workers {alive} outlived their killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _dead_or_dying(pid: int) -> bool:
    """Gone, a zombie, or with SIGKILL pending (delivered as soon as the kernel schedules it)."""
    import signal

    try:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    except OSError:
        return True
    if status["State"].strip()[:1] in ("Z", "X"):
        return True
    pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
    return bool(pending & (1 << (signal.SIGKILL - 1)))


def test_a_plan_deployed_in_its_own_process_computes_what_it_computes_here_and_shares_the_rounds():
    """``YardstickSet.add_plan``: placer's plan run by the hybrid executor in a process of its own, as
    ``placer run PLAN_DIR`` runs it, measured in the same rounds as the same plan here."""
    # mz_models (tests/run/conftest.py) is imported here: the killed-parent test's child process
    # imports this module without that path
    from mz_models import diamond_model, graph_of

    g = graph_of(diamond_model())
    mat = materialize(g, {"a": "onnxruntime", "b": "openvino", "c": "onnxruntime", "d": "onnxruntime",
                          "e": "onnxruntime", "f": "openvino"})
    feeds = [random_inputs(g, seed=s) for s in range(2)]
    with YardstickSet(g.model, feeds, ("ort-default",)) as ys, \
            PlanBench(feeds, rounds=3, per_round=3) as bench:
        deployed = ys.add_plan("deployed", mat)
        assert deployed.ok, deployed.error
        assert deployed.info["partitions"] == 3 and mat.out_dir is None  # saved from a copy
        assert ys.add_plan("deployed", mat) is deployed and "deployed" not in ys.all
        bench.add("here", mat)
        bench.add_yardstick(deployed)
        outs = deployed.outputs(len(feeds), ys.output_names)
        for here, there in zip(bench.outputs("here"), outs):
            for name in ys.output_names:
                np.testing.assert_array_equal(here[name], there[name])
        stats = bench.measure(["here", "deployed"])
        # every turn took two timed requests (the first left out), some perhaps set aside as slowed
        assert all(s.n + s.n_slowed == 3 * 2 for s in stats.values())
        rounds = {k: [t[0] for t in bench.candidates[k].turns] for k in ("here", "deployed")}
        assert rounds["here"] == rounds["deployed"] == [1, 2, 3]
        assert bench.paired_ratio("deployed", "here") > 0
    assert deployed.proc is None  # closed with the set


def test_a_plan_that_cannot_load_in_its_process_says_why():
    from mz_models import diamond_model, graph_of

    g = graph_of(diamond_model())
    mat = materialize(g, {op.id: "onnxruntime" for op in g.ops})
    feeds = [random_inputs(g, seed=0)]
    with YardstickSet(g.model, feeds, ()) as ys:
        mat.submodels[mat.partitions[0].id].graph.node[0].op_type = "NoSuchOp"  # saved as it is: refused
        deployed = ys.add_plan("broken", mat)
        assert not deployed.ok and "p0" in deployed.error and deployed.run_batch(2) == []


@pytest.mark.parametrize("shape", ["stages", "replicas"])
def test_a_plan_is_served_in_its_own_process_by_the_pipeline_executor(shape):
    """``add_plan(..., pipeline=True)``: a throughput tune's plan (stages, or one stage of replicas)
    deployed as ``placer run PLAN_DIR --pipeline`` serves it: the pipeline executor, one worker per
    stage or replica, alone in its process; its outputs are the in-process pipeline's, and its
    throughput batches run on it."""
    from mz_models import diamond_model, graph_of

    from placer.run.pipeline import PipelineExecutor

    g = graph_of(diamond_model())
    if shape == "stages":
        asg = {"a": "onnxruntime", "b": "onnxruntime", "c": "onnxruntime", "d": "openvino", "e": "openvino",
               "f": "openvino"}
        mat = materialize(g, asg, stage_of={o: int(t == "openvino") for o, t in asg.items()})
        workers = [1, 1]
    else:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            pytest.skip("one core: no replicas")
        mat = materialize(g, {op.id: "openvino:t1" for op in g.ops}, stage_of={op.id: 0 for op in g.ops},
                          replicas={0: [[c] for c in cores]})
        workers = [len(cores)]
    feeds = [random_inputs(g, seed=s) for s in range(3)]
    with YardstickSet(g.model, feeds, ()) as ys, PipelineExecutor(mat) as pe:
        deployed = ys.add_plan("deployed", mat, pipeline=True)
        assert deployed.ok, deployed.error
        assert deployed.info["runtime"] == "placer pipeline executor" and deployed.info["workers"] == workers
        here = pe.run(feeds, warmup=0)
        here.raise_first()
        there = deployed.outputs(len(feeds), ys.output_names)
        assert there is not None
        for h, t in zip(here.outputs, there):
            for name in ys.output_names:
                np.testing.assert_allclose(t[name], h[name], rtol=1e-5, atol=1e-6)
        assert ys.check("deployed", g.model, feeds).passed  # a plan's key, checked as a yardstick is
        assert (deployed.throughput(12) or 0) > 0
        plain = ys.add_plan("hybrid", mat)  # as `placer run PLAN_DIR` runs it
        assert plain.ok and plain.info["runtime"] == "placer hybrid executor"
    assert deployed.proc is None


def test_a_yardstick_worker_imports_its_runtime_alone(fresh_python):
    """A yardstick worker (``python -m placer.run.yardstick_worker``) does not import the executors or
    ONNX: ``placer.run`` exports its names lazily, and the plan kinds import what they need."""
    code = ("import sys, placer.run.yardstick_worker\n"
            "heavy = ('onnx', 'tvm', 'placer.run.executors', 'placer.materialize')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n"
            "from placer.run import make_executor, random_inputs\n"
            "print(callable(make_executor) and callable(random_inputs))")
    lines = fresh_python(code)
    assert lines[:2] == ["[]", "True"], lines


def test_a_set_that_fails_to_start_leaves_no_directory_behind(monkeypatch, tmp_path):
    """Feeds numpy cannot save (a ragged list) raised out of the constructor: the caller never got the set
    to close, and its temp directory with a full copy of the model stayed."""
    import tempfile

    from placer import zoo

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model = zoo.load_model("zoo:tiny")
    ok = zoo.random_inputs(model, seed=0)
    with pytest.raises(ValueError):
        YardstickSet(model, [ok, {"x": [[1.0], [1.0, 2.0]]}], ())
    assert not list(tmp_path.glob("placer-yardsticks-*"))
