"""Heuristic pipelines for the pipeline-mode solvers (CP-SAT's hints and fallbacks, the ideals DP's
fallback): balanced contiguous splits, then the latency heuristics' assignments made into pipelines."""

from __future__ import annotations

import time

import numpy as np

from placer.problem import PlacementProblem
from placer.solve.cpsat_latency import latency_candidates
from placer.solve.evaluate import is_contiguous, stage_order
from placer.solve.heuristics import HeuristicError, repair_pipeline, split_pipeline

__all__ = ["pipeline_candidates"]


def pipeline_candidates(problem: PlacementProblem, num_stages: int, contiguous: bool,
                        deadline: float | None = None) -> list[tuple[str, np.ndarray, list[int]]]:
    """Heuristic pipelines ``(name, assign, stage_targets)`` valid for ``num_stages`` / ``contiguous``:
    balanced contiguous splits, then the latency heuristics' assignments (repaired if needed)."""
    p = problem
    out: list[tuple[str, np.ndarray, list[int]]] = []
    seen: set[bytes] = set()

    def add(name: str, assign: np.ndarray, order: list[int]) -> None:
        key = np.asarray(assign, dtype=np.int64).tobytes() + np.asarray(order, dtype=np.int64).tobytes()
        if key not in seen:
            seen.add(key)
            out.append((name, assign, order))

    for a, o in split_pipeline(p, num_stages, deadline=deadline):
        add("split", a, o)
    for name, assign, _ in latency_candidates(p, deadline):
        if deadline is not None and len(out) > 1 and time.monotonic() > deadline:
            break
        order = stage_order(p, assign)
        if order is not None and len(order) <= num_stages and (not contiguous or is_contiguous(assign)):
            add(name, assign, order)
            continue
        try:
            a2, o2 = repair_pipeline(p, assign, num_stages, contiguous)
            add(name + "+repair", a2, o2)
        except HeuristicError:
            pass
    return out
