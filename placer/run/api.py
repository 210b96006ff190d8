"""run_plan(): load or take a materialized plan, run it, measure it, check its numerics."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from placer.errors import PlacerError
from placer.materialize import Materialized, load_plan_dir
from placer.run.executors import RunResult, make_executor
from placer.run.numerics import DEFAULT_ATOL, DEFAULT_RTOL, check_against_reference, load_inputs
from placer.run.pipeline import PipelineExecutor


class NumericsMismatch(PlacerError):
    """``check=True`` and an output differs from the reference beyond its tolerance (output named)."""


#: most requests (and warm-up requests) one run takes: each is held in memory with its outputs
MAX_REQUESTS = 100_000


def run_plan(
    plan: Any,
    inputs: str | Sequence[Mapping[str, np.ndarray]] | Mapping[str, np.ndarray] = "seed:0",
    *,
    executor: str = "hybrid",
    pipeline: bool = False,
    requests: int | None = None,
    warmup: int = 2,
    check: bool = False,
    numerics: bool = True,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    tolerances: Mapping[str, tuple[float, float]] | None = None,
    queue_size: int = 2,
    compiled: bool = False,
    trust: bool = False,
) -> RunResult:
    """Run a plan (a PLAN_DIR path or a :class:`~placer.materialize.Materialized`).

    ``inputs``: ``"seed:N"``, an ``.npz`` path, one feeds dict, or a list of them. ``requests``
    defaults to 1 (100 with ``pipeline=True`` when inputs come from a seed). ``numerics`` compares
    every completed request with the whole model in ONNX Runtime; ``check`` raises
    :class:`NumericsMismatch` naming the first output outside tolerance, and re-raises the first
    failed request's error. ``compiled`` (Relax executor only) loads the plan directory's exported
    ``module.so`` (after checking its SHA-256 against ``compiled.json``) instead of compiling; it
    must be one this user's placer compiled (:mod:`placer.trust`) unless ``trust``: it is native code.
    """
    import math

    if requests is not None and not 1 <= requests <= MAX_REQUESTS:
        raise PlacerError(f"requests must be >= 1 and at most {MAX_REQUESTS}, got {requests}")
    if not 0 <= warmup <= MAX_REQUESTS:
        raise PlacerError(f"warmup must be >= 0 and at most {MAX_REQUESTS}, got {warmup}")
    for what, tol in (("rtol", rtol), ("atol", atol)):
        if not (math.isfinite(tol) and tol >= 0):
            raise PlacerError(f"{what} must be finite and >= 0, got {tol}")
    if pipeline and (executor != "hybrid" or compiled or trust):  # they were ignored: the pipeline ran
        raise PlacerError("pipeline=True runs the pipeline executor (one worker per stage): executor='relax', "
                          "compiled and trust apply to running the plan in one process")
    if compiled and executor != "relax":
        raise PlacerError("compiled=True loads the exported Relax module: it needs executor='relax'")
    mat = plan if isinstance(plan, Materialized) else load_plan_dir(Path(plan))
    n = requests if requests is not None else (100 if pipeline else 1)
    if isinstance(inputs, str):
        reqs = load_inputs(inputs, mat.graph, n)
    elif isinstance(inputs, Mapping):
        reqs = [dict(inputs)] * n
    else:
        reqs = [dict(r) for r in inputs]
    if not reqs:
        raise PlacerError("run: no inputs")
    if pipeline:
        with PipelineExecutor(mat, queue_size=queue_size) as pe:
            result = pe.run(reqs, warmup=warmup)
    else:
        ex = make_executor(mat, executor, **({"compiled": True, "trust": trust} if compiled else {}))
        try:
            ex.compile()
            result = ex.measure(reqs, warmup=warmup)
        finally:
            ex.close()
    if numerics and any(o is not None for o in result.outputs):
        result.numerics = check_against_reference(mat.graph.model, reqs, result.outputs, rtol=rtol, atol=atol,
                                                  tolerances=tolerances)
    if check:
        result.raise_first()
        if result.numerics is not None and not result.numerics.passed:
            bad = result.numerics.failures()[0]
            raise NumericsMismatch(
                f"output {bad.name!r} differs from the reference: max abs {bad.max_abs:.3g} "
                f"(tolerance {bad.atol_eff:.3g} + {bad.rtol:g}|ref|), {bad.reason}"
            )
    return result
