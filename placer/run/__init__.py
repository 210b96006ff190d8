"""Executors for materialized plans, their measurements and numeric checks.

* :class:`HybridExecutor` (``executor="hybrid"``): partitions compiled on their own targets, run
  in dependency order, independent partitions on different targets at the same time.
* :class:`RelaxExecutor` (``executor="relax"``): the plan's Relax module compiled by
  ``tvm.compile`` and run by ``relax.VirtualMachine`` (external partitions via packed functions).
* :class:`PipelineExecutor`: one pinned worker thread per stage, bounded queues, request order.
* :class:`Measurement`: latency p50/p90, throughput, per-partition medians; ``to_json``.
* :func:`compare` / :func:`check_against_reference`: numerics vs the whole model in ONNX Runtime.
* :func:`run_plan`: the one call behind ``placer run``.
"""

from placer.run.api import NumericsMismatch, run_plan
from placer.run.executors import HybridExecutor, PartitionError, RelaxExecutor, RunResult, make_executor
from placer.run.measurement import Measurement, PartitionTime, summarize
from placer.run.numerics import (
    DegenerateReferenceWarning,
    NumericsReport,
    OutputCheck,
    ReferenceRunner,
    check_against_reference,
    compare,
    load_inputs,
    random_inputs,
)
from placer.run.pipeline import PipelineExecutor, PipelineStopped, StageError, discard_outputs

__all__ = [
    "DegenerateReferenceWarning",
    "HybridExecutor",
    "Measurement",
    "NumericsMismatch",
    "NumericsReport",
    "OutputCheck",
    "PartitionError",
    "PartitionTime",
    "PipelineExecutor",
    "PipelineStopped",
    "ReferenceRunner",
    "RelaxExecutor",
    "RunResult",
    "StageError",
    "check_against_reference",
    "compare",
    "discard_outputs",
    "load_inputs",
    "make_executor",
    "random_inputs",
    "run_plan",
    "summarize",
]
