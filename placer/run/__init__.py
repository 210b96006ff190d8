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

import importlib
from typing import TYPE_CHECKING

#: each name this package exports, by the module that defines it: imported when first asked for
#: (PEP 562), so a process that needs one module of the package (a yardstick worker:
#: ``placer.run.yardstick_worker``) does not import the executors, ONNX and TVM with it
_WHERE = {
    "NumericsMismatch": "api", "run_plan": "api",
    "HybridExecutor": "executors", "PartitionError": "executors", "RelaxExecutor": "executors",
    "RunResult": "executors", "make_executor": "executors",
    "Measurement": "measurement", "PartitionTime": "measurement", "summarize": "measurement",
    "DegenerateReferenceWarning": "numerics", "NumericsReport": "numerics", "OutputCheck": "numerics",
    "ReferenceRunner": "numerics", "check_against_reference": "numerics", "compare": "numerics",
    "load_inputs": "numerics", "random_inputs": "numerics",
    "PipelineExecutor": "pipeline", "PipelineStopped": "pipeline", "StageError": "pipeline",
    "discard_outputs": "pipeline",
}
__all__ = sorted(_WHERE)

if TYPE_CHECKING:
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


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

