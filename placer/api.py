"""The Python plan API: profile what is missing, build the problem, solve.

>>> import placer                                                      # doctest: +SKIP
>>> plan = placer.plan("zoo:squeezenet", targets=["onnxruntime", "openvino"], db="profiles.db")
>>> print(plan.summary())
>>> placer.explain(plan, problem)      # why each op went where it went

Everything here is a thin composition of the layers (graph -> profile -> costing -> solve); the
CLI commands call these functions and nothing else.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

DEFAULT_DB = os.environ.get("PLACER_DB", str(Path.home() / ".cache" / "placer" / "profiles.db"))


@dataclass
class PlanningContext:
    """What planning produced besides the plan: reused by tune, run and the reports."""

    graph: Any
    targets: list
    store: Any
    table: Any
    links: Any
    problem: Any


def load(model, shapes: Mapping[str, Sequence[int]] | None = None):
    """An OpGraph from a path, a ModelProto or a zoo reference (``zoo:squeezenet``)."""
    from placer import zoo
    from placer.graph import load_graph

    if isinstance(model, (str, os.PathLike)) and str(model).startswith("zoo:"):
        graph = load_graph(zoo.resolve(str(model)), shapes=shapes)
        graph.source = str(model)
        return graph
    return load_graph(model, shapes=shapes)


def open_store(db: str | os.PathLike | None):
    from placer.profile import ProfileStore

    path = Path(db or DEFAULT_DB)
    path.parent.mkdir(parents=True, exist_ok=True)
    return ProfileStore(path)


def prepare(
    model,
    *,
    targets: Sequence[str] | None = None,
    db: str | os.PathLike | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    cost_model=None,
    profile: bool = True,
    whole_models: bool = True,
    calibrate: bool = True,
    progress: bool = False,
    timeout_s: float = 60.0,
    memory_cap_bytes: Mapping[str, float] | None = None,
    pinned: Mapping[str, str] | None = None,
    colocate: Sequence[Sequence[str]] = (),
) -> PlanningContext:
    """Load, profile what is missing (ops, whole model per target, links), build the problem."""
    from placer.costing import build_problem, cost_table_from_store
    from placer.devices import make_targets
    from placer.profile import profile_graph, profile_links, profile_whole_model

    graph = model if hasattr(model, "ops") else load(model, shapes)
    tgts = make_targets(targets)
    store = open_store(db)
    if profile:
        profile_graph(graph, tgts, store, timeout_s=timeout_s, progress=progress)
        if whole_models:
            profile_whole_model(graph, tgts, store, timeout_s=max(timeout_s, 120.0))
        if len(tgts) > 1:
            profile_links(tgts, store)
    table = cost_table_from_store(graph, tgts, store, cost_model=cost_model)
    links = store.link_model(tgts, missing="skip") if len(tgts) > 1 else None
    problem = build_problem(
        graph, table, links, calibrate=calibrate, memory_cap_bytes=memory_cap_bytes, pinned=pinned,
        colocate=colocate,
        provenance={
            "profile_store": store.store_id,
            "cost_model": getattr(cost_model, "model_id", None) if cost_model is not None else "measured",
            "target_fingerprints": {t.name: t.fingerprint_hash() for t in tgts},
        },
    )
    return PlanningContext(graph, tgts, store, table, links, problem)


def plan(
    model,
    *,
    targets: Sequence[str] | None = None,
    mode: str = "latency",
    solver: str = "cpsat",
    db: str | os.PathLike | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    time_limit: float = 10.0,
    num_stages: int | None = None,
    seed: int = 0,
    cost_model=None,
    **options: Any,
):
    """Plan ``model`` on ``targets``: returns the solver's :class:`placer.plan.Plan`."""
    from placer.solve import solve

    ctx = prepare(model, targets=targets, db=db, shapes=shapes, cost_model=cost_model)
    return solve(ctx.problem, mode, solver, time_limit=time_limit, num_stages=num_stages, seed=seed, **options)


def explain(plan, problem) -> list[dict]:
    """For each op: its cost on every target, where it went and why.

    ``reason`` is one of ``"pinned"``, ``"only supported target"``, ``"memory"`` (a cheaper
    target exists but its cap forbade it), ``"cheapest"`` (it went to its cheapest target), or
    ``"transfers"`` (a cheaper target exists; moving the op's tensors there would cost more than
    the gain).
    """
    rows = []
    caps = np.asarray(problem.memory_cap_bytes, dtype=float)
    used = {t: 0.0 for t in problem.targets}
    wb = np.asarray(problem.weight_bytes, dtype=float)
    for i, op in enumerate(problem.ops):
        used[plan.assignment[op]] += wb[i]
    for i, op in enumerate(problem.ops):
        costs = {t: float(problem.cost_ms[i, j]) for j, t in enumerate(problem.targets)}
        chosen = plan.assignment[op]
        finite = {t: c for t, c in costs.items() if math.isfinite(c)}
        cheapest = min(finite, key=finite.get)
        if op in problem.pinned:
            reason = "pinned"
        elif len(finite) == 1:
            reason = "only supported target"
        elif finite[chosen] <= finite[cheapest] + 1e-12:
            reason = "cheapest"
        elif used[cheapest] + wb[i] > caps[problem.targets.index(cheapest)]:
            reason = "memory"
        else:
            reason = "transfers"
        rows.append({"op": op, "target": chosen, "reason": reason, "cost_ms": costs,
                     "gain_forgone_ms": finite[chosen] - finite[cheapest]})
    return rows
