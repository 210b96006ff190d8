"""Materialization: a plan becomes partitions, ONNX sub-models, a stage config and a Relax IRModule.

Entry point: :func:`materialize` ``(graph, plan_or_assignment, out_dir=None) -> Materialized``;
:func:`load_plan_dir` reads a PLAN_DIR back (checking it against its model and plan).

* Partitioning: :mod:`placer.materialize.partition` (algorithm in its docstring).
* Stage config (versioned JSON + JSON Schema ``placer/schemas/stage_config.schema.json``):
  :mod:`placer.materialize.stage_config`.
* The Relax module (BYOC-tagged partition functions + ``main``; TVM partitions compiled by TVM,
  the others called through registered packed functions): :mod:`placer.materialize.relax_module`.

PLAN_DIR layout
---------------
::

    PLAN_DIR/
      plan.json           the solver's Plan JSON (or {"format": "placer.assignment", "version": 1,
                          "assignment": {op: target}, "stage_of": {op: stage} | null} for a plain
                          assignment)
      stage_config.json   placer.stage_config v1 (v2 when a stage has replicas): stages (with their
                          optional replicas' cores), partitions (ops, inputs, outputs, target,
                          symbol, file), tensor connections, model hash
      model.onnx          the folded model (OpGraph.model) the plan was made for
      partitions/         one ONNX sub-model per partition: p<index>_<target kind>.onnx
                          (OpGraph.subgraph_model of its ops)
      module.relax.txt    the Relax module as TVMScript (constants elided), with a header that names
                          each partition function
      module.so           optional: the Relax module compiled by tvm.compile
                          (Materialized.export_compiled; placer tune writes it), with
      compiled.json       its SHA-256, model and assignment hashes, TVM version and an HMAC under this
                          user's key (placer.trust), checked before ``placer run --executor relax
                          --compiled`` loads it: native code made elsewhere is refused without --trust

Target names are canonicalized (``onnxruntime`` -> ``onnxruntime@cpu:t1``) before partitioning.
"""

from placer.materialize.core import (
    Materialized,
    PlanSpec,
    load_plan_dir,
    materialize,
    plan_spec,
    show_plan_dir,
)
from placer.materialize.partition import Partition, PartitionStats, group_ops, partition_io, partition_stats
from placer.materialize.stage_config import (
    Stage,
    StageConfig,
    build_stage_config,
    check_stage_config,
    load_stage_config,
    validate_schema,
)

__all__ = [
    "Materialized",
    "Partition",
    "PartitionStats",
    "PlanSpec",
    "Stage",
    "StageConfig",
    "build_stage_config",
    "check_stage_config",
    "group_ops",
    "load_plan_dir",
    "load_stage_config",
    "materialize",
    "partition_io",
    "partition_stats",
    "plan_spec",
    "show_plan_dir",
    "validate_schema",
]
