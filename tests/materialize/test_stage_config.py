"""Stage config: schema, round trip through PLAN_DIR, checks against model and plan."""

from __future__ import annotations

import json
import os

import pytest
from mz_models import chain_model, diamond_model, graph_of

from placer.errors import PlanError
from placer.materialize import (
    StageConfig,
    check_stage_config,
    load_plan_dir,
    load_stage_config,
    materialize,
    validate_schema,
)
from placer.materialize.stage_config import SCHEMA_PATH

ASG = {"a": "onnxruntime", "b": "openvino", "c": "onnxruntime", "d": "onnxruntime", "e": "onnxruntime",
       "f": "openvino"}


@pytest.fixture
def diamond():
    return graph_of(diamond_model())


def test_schema_file_is_valid_json_schema():
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_PATH.read_text()))


def test_config_validates_and_round_trips(diamond):
    mat = materialize(diamond, ASG)
    d = mat.stage_config.to_dict()
    validate_schema(d)
    back = StageConfig.from_dict(json.loads(json.dumps(d)))
    assert back.to_dict() == d
    assert d["plan"]["mode"] == "latency"
    assert len(d["stages"]) == 1 and d["stages"][0]["target"] is None
    assert d["model"]["hash"] == diamond.model_hash
    # every connection: from a model input or a partition output, to a partition input or a model output
    kinds = {(next(iter(c["src"])) if "model_input" in c["src"] else "partition",
              "model_output" if "model_output" in c["dst"] else "partition") for c in d["connections"]}
    assert kinds == {("model_input", "partition"), ("partition", "partition"), ("partition", "model_output")}
    outs = [c["tensor"] for c in d["connections"] if "model_output" in c["dst"]]
    assert outs == ["y", "z"]


def test_pipeline_config_has_one_stage_per_plan_stage(diamond):
    stage_of = {"a": 0, "b": 0, "c": 0, "d": 1, "e": 1, "f": 1}
    asg = {o: ("onnxruntime" if s == 0 else "openvino") for o, s in stage_of.items()}
    mat = materialize(diamond, asg, stage_of=stage_of)
    cfg = mat.stage_config
    assert cfg.mode == "pipeline"
    assert [s.target for s in cfg.stages] == ["onnxruntime@cpu:t1", "openvino@cpu:t1"]
    cross = [c for c in cfg.connections if "stage" in c["src"] and "stage" in c["dst"]
             and c["src"]["stage"] != c["dst"]["stage"]]
    assert {c["tensor"] for c in cross} == {"b", "c"}


def test_schema_violations_name_the_path(diamond):
    d = materialize(diamond, ASG).stage_config.to_dict()
    d["stages"][0]["partitions"][0]["ops"] = []
    with pytest.raises(PlanError, match="stages/0/partitions/0/ops"):
        validate_schema(d)
    with pytest.raises(PlanError, match="version"):
        validate_schema({**d, "version": 99})


def test_plan_dir_round_trip(tmp_path, diamond):
    mat = materialize(diamond, ASG, tmp_path / "plan")
    root = tmp_path / "plan"
    for f in ("plan.json", "stage_config.json", "model.onnx", "module.relax.txt"):
        assert (root / f).is_file(), f
    assert sorted(p.name for p in (root / "partitions").iterdir()) == [
        "p0_onnxruntime.onnx", "p1_openvino.onnx", "p2_onnxruntime.onnx"]
    back = load_plan_dir(root)
    assert back.partitions == mat.partitions
    assert back.assignment == mat.assignment
    assert back.graph.model_hash == diamond.model_hash
    assert "Codegen" in (root / "module.relax.txt").read_text()


def _edit(root, fn):
    p = root / "stage_config.json"
    d = json.loads(p.read_text())
    fn(d)
    p.write_text(json.dumps(d))


def test_load_checks_model_hash(tmp_path, diamond):
    root = tmp_path / "plan"
    materialize(diamond, ASG, root)
    _edit(root, lambda d: d["model"].update(hash="0" * 64))
    with pytest.raises(PlanError, match="model hash 0000"):
        load_plan_dir(root)


def test_load_checks_tensors_and_outputs(tmp_path, diamond):
    root = tmp_path / "plan"
    materialize(diamond, ASG, root)
    cfg = load_stage_config(root / "stage_config.json")
    d = cfg.to_dict()
    d["connections"] = [c for c in d["connections"] if c["tensor"] != "z" or "model_output" not in c["dst"]]
    with pytest.raises(PlanError, match="model output 'z'"):
        check_stage_config(StageConfig.from_dict(d), diamond)
    d = cfg.to_dict()
    d["stages"][0]["partitions"][0]["inputs"] = ["ghost"]
    with pytest.raises(PlanError, match="'ghost'"):
        check_stage_config(StageConfig.from_dict(d), diamond)
    d = cfg.to_dict()
    d["stages"][0]["partitions"][1]["ops"].append("a")
    with pytest.raises(PlanError, match="op 'a' is in partitions"):
        check_stage_config(StageConfig.from_dict(d), diamond)


def test_load_checks_against_the_plan(tmp_path, diamond):
    root = tmp_path / "plan"
    materialize(diamond, ASG, root)
    plan = json.loads((root / "plan.json").read_text())
    plan["assignment"]["b"] = "onnxruntime"
    (root / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(PlanError, match="op 'b' is in partition p1 on openvino@cpu:t1, but the plan puts it"):
        load_plan_dir(root)


def test_load_rejects_a_config_for_another_model(tmp_path):
    root = tmp_path / "plan"
    g = graph_of(chain_model(4))
    materialize(g, {op.id: "onnxruntime" for op in g.ops}, root)
    other = graph_of(chain_model(5))
    with pytest.raises(PlanError, match="model hash"):
        load_plan_dir(root, graph=other)


# ---- replicas (stage config version 2) ----------------------------------------------------------
two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="replicas on cores 0 and 1 need 2 cores")


def _whole(g, target="onnxruntime:t1", **kw):
    return materialize(g, {op.id: target for op in g.ops}, stage_of={op.id: 0 for op in g.ops}, **kw)


@two_cores
def test_replicas_round_trip_through_schema_and_plan_dir(tmp_path, diamond):
    mat = materialize(diamond, {o: "openvino:t1" for o in ASG}, tmp_path / "plan",
                      stage_of={o: 0 for o in ASG}, replicas={0: [[1], [0]]})
    cfg = mat.stage_config
    assert cfg.stages[0].replicas == ((1,), (0,)) and cfg.stages[0].workers == ((1,), (0,))
    d = cfg.to_dict()
    assert d["version"] == 2 and d["stages"][0]["replicas"] == [[1], [0]]
    validate_schema(d)
    back = StageConfig.from_dict(json.loads(json.dumps(d)))
    assert back == cfg and back.to_dict() == d
    assert "replicas 2 (cores 1 | 0)" in cfg.summary()
    # replicas are not part of the plan: same assignment hash as without them
    assert cfg.assignment_hash == _whole(diamond, "openvino:t1").stage_config.assignment_hash
    loaded = load_plan_dir(tmp_path / "plan")
    assert loaded.stage_config.stages[0].replicas == ((1,), (0,))


def test_a_config_without_replicas_is_written_as_version_1_and_old_configs_load(tmp_path, diamond):
    root = tmp_path / "plan"
    mat = materialize(diamond, ASG, root)
    d = json.loads((root / "stage_config.json").read_text())
    assert d["version"] == 1 and all("replicas" not in s for s in d["stages"])
    assert mat.stage_config.stages[0].replicas is None and mat.stage_config.stages[0].workers == (None,)
    # exactly what the placer before replicas wrote (version 1, no key) loads and checks
    cfg = load_stage_config(root / "stage_config.json")
    assert cfg.version == 1 and cfg.stages[0].replicas is None
    assert load_plan_dir(root).stage_config == mat.stage_config
    # a version 2 config may leave replicas out, or give null
    d2 = {**d, "version": 2}
    d2["stages"] = [{**d["stages"][0], "replicas": None}]
    assert StageConfig.from_dict(d2).stages[0].replicas is None


@two_cores
def test_replicas_are_rejected_in_a_version_1_config_and_when_malformed(diamond):
    d = _whole(diamond, replicas={0: [[0], [1]]}).stage_config.to_dict()
    with pytest.raises(PlanError, match="stages/0"):
        validate_schema({**d, "version": 1})
    for bad, where in (([], "stages/0/replicas"), ([[]], "stages/0/replicas/0"), ([[0, 0]], "stages/0/replicas/0"),
                       ([[-1]], "stages/0/replicas/0/0"), ([0, 1], "stages/0/replicas/0")):
        e = json.loads(json.dumps(d))
        e["stages"][0]["replicas"] = bad
        with pytest.raises(PlanError, match=where):
            validate_schema(e)


@two_cores
def test_replica_rules_name_the_stage(diamond):
    stage_of = {"a": 0, "b": 0, "c": 0, "d": 1, "e": 1, "f": 1}
    asg = {o: ("onnxruntime@cpu0:t1" if s == 0 else "openvino:t1") for o, s in stage_of.items()}
    with pytest.raises(PlanError, match="replicas given for stage 2, but the plan has stages \\[0, 1\\]"):
        materialize(diamond, asg, stage_of=stage_of, replicas={2: [[0], [1]]})
    with pytest.raises(PlanError, match="stage 1: replicas: core 0 is in replica 0 and replica 1"):
        materialize(diamond, asg, stage_of=stage_of, replicas={1: [[0], [0, 1]]})
    with pytest.raises(PlanError, match="stage 0: replicas: replica 1's core 1 is not one of the stage's cores \\[0\\]"):
        materialize(diamond, asg, stage_of=stage_of, replicas={0: [[0], [1]]})
    with pytest.raises(PlanError, match="stage 1: replicas: replica 0's core 999 is not available"):
        materialize(diamond, asg, stage_of=stage_of, replicas={1: [[999]]})
    t2 = {o: ("onnxruntime:t1" if s == 0 else "openvino:t2") for o, s in stage_of.items()}
    with pytest.raises(PlanError, match="stage 1: replicas: replica 0 has 1 core\\(s\\) \\[0\\] for 2 threads"):
        materialize(diamond, t2, stage_of=stage_of, replicas={1: [[0], [1]]})
    with pytest.raises(PlanError, match="replicas of stage 1: expected a list of core lists"):
        materialize(diamond, asg, stage_of=stage_of, replicas={1: [0, 1]})
    # a stage pinned to both cores may split them among its replicas
    both = {o: "openvino@cpu0,1:t1" for o in stage_of}
    mat = materialize(diamond, both, stage_of={o: 0 for o in stage_of}, replicas={0: [[0], [1]]})
    assert mat.stage_config.stages[0].cores == (0, 1)
    # an edited stage config is checked on load as well
    d = mat.stage_config.to_dict()
    d["stages"][0]["replicas"] = [[0], [0]]
    with pytest.raises(PlanError, match="stage config, stage 0: replicas: core 0 is in replica 0 and replica 1"):
        check_stage_config(StageConfig.from_dict(d), diamond)


def test_load_refuses_reordered_tensors_a_foreign_symbol_and_another_plan_s_hash(tmp_path, diamond):
    """The Relax executor passes a partition's tensors by position and registers its symbol as a global
    function; the compiled module is bound to the plan by the assignment hash: an edited stage config
    that changes any of them is refused (reordered inputs had loaded and run with the tensors swapped)."""
    root = tmp_path / "plan"
    mat = materialize(diamond, ASG, root)
    two = next(i for i, p in enumerate(mat.stage_config.stages[0].partitions) if len(p.inputs) >= 2)

    def reorder(d):
        d["stages"][0]["partitions"][two]["inputs"].reverse()
    _edit(root, reorder)
    with pytest.raises(PlanError, match="lists its tensors as"):
        load_plan_dir(root)
    materialize(diamond, ASG, root)
    _edit(root, lambda d: d["stages"][0]["partitions"][0].update(symbol="tvm.runtime.some_global"))
    with pytest.raises(PlanError, match="symbol 'tvm.runtime.some_global' is not"):
        load_plan_dir(root)
    materialize(diamond, ASG, root)
    _edit(root, lambda d: d["plan"].update(assignment_hash="0" * 16))
    with pytest.raises(PlanError, match="assignment hash '0000000000000000' is not the plan's"):
        load_plan_dir(root)
    load_plan_dir(materialize(diamond, ASG, root).out_dir)  # as written, it loads


def test_stages_listed_out_of_order_are_refused(diamond):
    stage_of = {"a": 0, "b": 1, "c": 1, "d": 1, "e": 2, "f": 2}
    cfg = materialize(diamond, ASG, stage_of=stage_of).stage_config
    d = cfg.to_dict()
    d["stages"].reverse()
    with pytest.raises(PlanError, match="increasing order"):
        check_stage_config(StageConfig.from_dict(d), diamond)


def test_partitions_listed_out_of_order_within_a_stage_are_refused(diamond):
    """The hybrid executor runs partitions by index, the pipeline's stage worker as listed: a stage
    config with a stage's partitions reversed loaded, ran under the hybrid executor, and failed every
    pipeline request (KeyError on a tensor not produced yet)."""
    cfg = materialize(diamond, ASG, stage_of={op: 0 for op in ("a", "b", "c", "d", "e", "f")}).stage_config
    assert len(cfg.stages[0].partitions) >= 2
    d = cfg.to_dict()
    d["stages"][0]["partitions"].reverse()
    with pytest.raises(PlanError, match=r"stage 0 lists partitions .* out of their order"):
        check_stage_config(StageConfig.from_dict(d), diamond)
    check_stage_config(cfg, diamond)  # as written, it holds


@pytest.mark.parametrize("edit, expect", [
    (lambda g: g.node[1].input.__setitem__(0, "ghost"), r"reads tensor 'ghost'.*dangling input"),
    (lambda g: setattr(g.node[1], "name", g.node[0].name), r"node names must be given once each.*repeated"),
    (lambda g: g.value_info.__delitem__(0), r"has no type or shape: not the model placer prepared"),
])
def test_an_edited_model_in_a_plan_directory_is_checked_though_marked_prepared(tmp_path, diamond, edit, expect):
    """model.onnx carries the 'prepared' mark, so it is not folded again: it was not checked either, and an
    edited one raised a bare KeyError (or ran with one node's name shadowing another's)."""
    import onnx

    from placer.errors import GraphError

    root = tmp_path / "plan"
    materialize(diamond, ASG, root)
    m = onnx.load(str(root / "model.onnx"))
    edit(m.graph)
    onnx.save(m, str(root / "model.onnx"))
    with pytest.raises(GraphError, match=expect) as e:
        load_plan_dir(root)
    assert "model.onnx" in str(e.value)
