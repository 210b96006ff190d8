"""A placement plan: the frozen, versioned output of every solver.

A :class:`Plan` says where each op runs (``assignment``), when (``start_ms`` / ``end_ms``, the
predicted schedule of one inference), which tensors cross targets (``transfers``), and, in
pipeline mode, the stages. It carries the solver statistics and the problem's provenance, has one
canonical JSON form (sorted keys, ``"version": 1``) and a short text form (:meth:`Plan.summary`).

Semantics (shared with every solver through :mod:`placer.semantics`)
--------------------------------------------------------------------
Latency mode
    ``makespan_ms`` = max op end. An op starts after each input tensor is available on its target:
    at the producer's end on the same target, else ``link_ms + partition_overhead_ms[dst]`` later
    (one copy per (tensor, destination target); copies occupy no target, links are concurrent).
    A target runs one op at a time (an op of cost 0 is instantaneous and occupies no time on its
    target), and targets that share a core (``PlacementProblem.target_cores``) never run ops at
    the same time. ``bottleneck_ms`` = the largest per-resource busy time (sum of the costs of
    the ops placed on the targets using it; the largest per-target busy time when no core is
    shared).
Pipeline mode
    Each stage runs on its own target; ``stage(u) <= stage(v)`` on every edge. A stage's time is
    ``compute + send + recv``: ``compute`` = its ops' costs; for each (tensor, destination target)
    copy ``a -> b`` the link time goes to the sender stage's ``send`` if ``link_charge[a][b]`` is
    ``"sender"``/``"both"`` and to the receiver's ``recv`` if ``"receiver"``/``"both"``; the
    receiver also pays ``partition_overhead_ms[b]`` per tensor received (with
    ``link_broadcast`` the sender pays a tensor once, its slowest destination's link time, however
    many targets read it). ``bottleneck_ms`` = the
    slowest stage (1 / throughput), or rather the busiest resource: stages on targets sharing a
    core add their times up on it; ``makespan_ms`` = the latency of one request through the idle
    pipeline = the sum of the stage times (the stages run one after the other, each receiving,
    computing its ops in topological order, then sending). ``start_ms`` / ``end_ms`` follow that
    timeline.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from placer import semantics as sem
from placer._callable_module import make_callable as _make_callable
from placer.errors import PlanError
from placer.problem import PlacementProblem
from placer.safe_io import load_json, loads

__all__ = ["PLAN_VERSION", "Plan", "SolverStats", "StageCost", "Transfer"]

PLAN_VERSION = 1


@dataclass(frozen=True)
class Transfer:
    """One copy of a tensor to a destination target.

    ``ms`` is the link time, ``entry_ms`` the destination's partition overhead; in latency mode
    ``start_ms`` is the producer's end and ``end_ms = start_ms + ms + entry_ms``; in pipeline
    mode both are ``None`` (the copy's time is part of the stage times).
    """

    tensor: str
    src: str
    dst: str
    ms: float
    entry_ms: float = 0.0
    start_ms: float | None = None
    end_ms: float | None = None


def latency_transfers(problem: PlacementProblem, assign: np.ndarray, end: np.ndarray) -> tuple[Transfer, ...]:
    """The copies a latency-mode ``assign`` needs, each timed from its producer's ``end``."""
    end_l = np.asarray(end).tolist()
    prod, tensors, targets = problem.tensor_producer, problem.tensors, problem.targets
    return tuple(
        Transfer(tensors[k].name, targets[a], targets[b], ms, en, end_l[prod[k]], end_l[prod[k]] + ms + en)
        for k, a, b, ms, en in sem.needed_transfers(problem, assign))


@dataclass(frozen=True)
class StageCost:
    """Time of one pipeline stage: ``total_ms = compute_ms + send_ms + recv_ms``."""

    target: str
    compute_ms: float
    send_ms: float
    recv_ms: float
    total_ms: float


@dataclass(frozen=True)
class SolverStats:
    """What the solver knows about the plan's quality.

    ``status`` is ``"OPTIMAL"`` (proved, for the solver's rounded costs), ``"FEASIBLE"`` (no
    proof), ``"HEURISTIC"`` (a baseline) or ``"EXACT"`` (enumeration / DP). ``objective`` is the
    primary objective in ms (makespan in latency mode, bottleneck in pipeline mode),
    ``best_bound`` a proven lower bound on it (``None`` if unknown) and ``gap`` =
    ``(objective - best_bound) / objective``.
    """

    status: str
    objective: float | None = None
    best_bound: float | None = None
    gap: float | None = None
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def _close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


@dataclass(frozen=True)
class Plan:
    """A placement plan (see the module docstring for the cost semantics).

    Attributes
    ----------
    mode : {"latency", "pipeline"}
    solver : str
        Registered solver name that produced it (e.g. ``"cpsat"``, ``"single:cpu"``).
    targets : tuple of str
        The problem's targets, in problem order.
    assignment : dict op -> target
    start_ms, end_ms, op_cost_ms : dict op -> float
        Predicted schedule of one inference and each op's cost on its target.
    stage : dict op -> int
        Stage of each op (pipeline mode; empty in latency mode).
    stage_targets : tuple of str
        Target of each stage, in stage order (pipeline mode).
    stages : tuple of StageCost
        Per-stage costs (pipeline mode).
    transfers : tuple of Transfer
        Every (tensor, destination target) copy, sorted by (tensor, dst).
    makespan_ms, bottleneck_ms : float
    stats : SolverStats
    provenance : dict
        Copied from ``problem.provenance``.
    coarsening : dict or None
        ``{"n_ops": .., "n_coarse_ops": .., "groups": {name: [ops]}}`` when the solver ran on a
        coarsened graph.
    options : dict
        The options the plan was solved with (seed, time_limit, num_stages, contiguous, ...).
    version : int
    """

    mode: str
    solver: str
    targets: tuple[str, ...]
    assignment: dict[str, str]
    start_ms: dict[str, float]
    end_ms: dict[str, float]
    op_cost_ms: dict[str, float]
    transfers: tuple[Transfer, ...]
    makespan_ms: float
    bottleneck_ms: float
    stats: SolverStats
    stage: dict[str, int] = field(default_factory=dict)
    stage_targets: tuple[str, ...] = ()
    stages: tuple[StageCost, ...] = ()
    provenance: dict[str, Any] = field(default_factory=dict)
    coarsening: dict[str, Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    version: int = PLAN_VERSION

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        """Canonical JSON-able dict (the file form is ``json.dumps(..., sort_keys=True)``)."""
        # asdict deep-copies every value: only the small fields go through it (the per-op maps of
        # str / number values are copied by the JSON round trip below anyway; seconds at 100,000 ops)
        per_op = ("assignment", "start_ms", "end_ms", "op_cost_ms", "stage")
        d = asdict(replace(self, transfers=(), **{k: {} for k in per_op}))
        d.update({k: getattr(self, k) for k in per_op})
        d["targets"] = list(self.targets)
        d["stage_targets"] = list(self.stage_targets)
        names = [f.name for f in fields(Transfer)]
        d["transfers"] = [{k: getattr(t, k) for k in names} for t in self.transfers]
        d["stages"] = [asdict(s) for s in self.stages]
        return json.loads(json.dumps(d, sort_keys=True, default=_json_default))

    def dumps(self) -> str:
        """The canonical JSON text (sorted keys, indented)."""
        return json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n"

    def save(self, path: str | os.PathLike) -> None:
        """Write :meth:`dumps` to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.dumps())

    @classmethod
    def load(cls, path: str | os.PathLike) -> Plan:
        """Read a plan written by :meth:`save`."""
        return cls.from_json(load_json(path, "the plan", PlanError))

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> Plan:
        """Build a plan from :meth:`to_json` output (a dict or its JSON text)."""
        if isinstance(data, str):
            data = loads(data, "plan JSON", PlanError)
        if not isinstance(data, Mapping):
            raise PlanError("plan JSON must be an object")
        if data.get("version") != PLAN_VERSION:
            raise PlanError(f"unsupported plan version {data.get('version')!r} (expected {PLAN_VERSION})")
        for key, want in _FIELD_TYPES.items():
            if key in data and not isinstance(data[key], want):
                raise PlanError(f"malformed plan JSON: {key!r} must be a JSON {_JSON_NAME[want]}, not "
                                f"{type(data[key]).__name__}")
        try:
            plan = cls(
                mode=data["mode"], solver=data["solver"], targets=tuple(data["targets"]),
                assignment=dict(data["assignment"]),
                start_ms={k: float(v) for k, v in data["start_ms"].items()},
                end_ms={k: float(v) for k, v in data["end_ms"].items()},
                op_cost_ms={k: float(v) for k, v in data["op_cost_ms"].items()},
                transfers=tuple(Transfer(**t) for t in data["transfers"]),
                makespan_ms=float(data["makespan_ms"]), bottleneck_ms=float(data["bottleneck_ms"]),
                stats=SolverStats(**data["stats"]),
                stage={k: int(v) for k, v in data.get("stage", {}).items()},
                stage_targets=tuple(data.get("stage_targets", ())),
                stages=tuple(StageCost(**s) for s in data.get("stages", ())),
                provenance=dict(data.get("provenance", {})),
                coarsening=data.get("coarsening"),
                options=dict(data.get("options", {})),
                version=int(data["version"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise PlanError(f"malformed plan JSON: {exc!r}") from None
        _check_names(plan)
        for what, x in [("makespan_ms", plan.makespan_ms), ("bottleneck_ms", plan.bottleneck_ms),
                        *((f"{key}[{o!r}]", v) for key in ("start_ms", "end_ms", "op_cost_ms")
                          for o, v in getattr(plan, key).items())]:
            if not (math.isfinite(x) and x >= -1e-9):
                raise PlanError(f"plan JSON: {what} = {x}: times must be finite and >= 0")
        return plan

    # ------------------------------------------------------------------ text form
    def summary(self) -> str:
        """A short, deterministic text form (no wall time), for logs, diffs and golden tests."""
        s = self.stats
        head = (f"plan v{self.version} mode={self.mode} solver={self.solver} status={s.status} "
                f"makespan={self.makespan_ms:.4f}ms bottleneck={self.bottleneck_ms:.4f}ms")
        if s.gap is not None:
            head += f" gap={100 * s.gap:.2f}%"
        lines = [head]
        if self.mode == "pipeline":
            for i, (tgt, sc) in enumerate(zip(self.stage_targets, self.stages)):
                ops = [o for o, st in self.stage.items() if st == i]
                lines.append(f"  stage {i} @ {tgt}: {sc.total_ms:.4f}ms (compute {sc.compute_ms:.4f} "
                             f"send {sc.send_ms:.4f} recv {sc.recv_ms:.4f}) ops={_short(ops)}")
        else:
            for tgt in self.targets:
                ops = [o for o, d in self.assignment.items() if d == tgt]
                if ops:
                    busy = sum(self.op_cost_ms[o] for o in ops)
                    lines.append(f"  {tgt}: {len(ops)} ops, busy {busy:.4f}ms ops={_short(ops)}")
        total = sum(t.ms + t.entry_ms for t in self.transfers)
        lines.append(f"  transfers: {len(self.transfers)} ({total:.4f}ms)")
        if self.coarsening:
            lines.append(f"  coarsened: {self.coarsening.get('n_ops')} -> "
                         f"{self.coarsening.get('n_coarse_ops')} ops")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    # ------------------------------------------------------------------ validation
    def validate(self, problem: PlacementProblem, tol: float = 1e-6) -> None:
        """Check this plan against ``problem``; raise :class:`PlanError` naming the op at fault.

        Checks: every op placed exactly once on a supporting target; pins; colocation; memory
        caps; op costs; in latency mode the stored schedule (precedence with transfer delays, one
        op at a time per resource: a target, or a core shared by targets; ``end = start + cost``);
        in pipeline mode stage monotonicity, distinct stage targets, contiguity / stage count if
        the plan was solved with them, and
        the stage costs; the transfers list; and that ``makespan_ms`` / ``bottleneck_ms``
        recompute from the problem (relative tolerance ``tol``).
        """
        p = problem
        if self.mode not in ("latency", "pipeline"):
            raise PlanError(f"unknown plan mode {self.mode!r}")
        if tuple(self.targets) != tuple(p.targets):
            raise PlanError(f"plan targets {list(self.targets)} differ from the problem's {list(p.targets)}")
        missing = [o for o in p.ops if o not in self.assignment]
        if missing:
            raise PlanError(f"op {missing[0]!r} is not placed")
        extra = [o for o in self.assignment if o not in p.op_index]
        if extra:
            raise PlanError(f"plan places unknown op {extra[0]!r}")
        assign = np.empty(p.n_ops, dtype=int)
        for o, tgt in self.assignment.items():
            if tgt not in p.target_index:
                raise PlanError(f"op {o!r} placed on unknown target {tgt!r}")
            i, d = p.op_index[o], p.target_index[tgt]
            if not np.isfinite(p.cost_ms[i, d]):
                raise PlanError(f"op {o!r} placed on {tgt!r}, which does not support it")
            assign[i] = d
        p = problem.priced_for(assign)  # a plan that cuts the model pays the problem's cut scale
        for o, tgt in p.pinned.items():
            if self.assignment[o] != tgt:
                raise PlanError(f"op {o!r} is pinned to {tgt!r} but placed on {self.assignment[o]!r}")
        for g in p.colocate:
            where = {self.assignment[o] for o in g}
            if len(where) > 1:
                bad = next(o for o in g if self.assignment[o] != self.assignment[g[0]])
                raise PlanError(f"op {bad!r} must be colocated with {g[0]!r} (group {list(g)})")
        for d, tgt in enumerate(p.targets):
            load = float(p.weight_bytes[assign == d].sum())
            if load > p.memory_cap_bytes[d] * (1 + 1e-12):
                heavy = max((o for o in p.ops if self.assignment[o] == tgt),
                            key=lambda o: p.weight_bytes[p.op_index[o]])
                raise PlanError(f"memory cap of {tgt!r} exceeded ({load:.6g} > {p.memory_cap_bytes[d]:.6g} "
                                f"bytes; heaviest op {heavy!r})")
        for o in p.ops:
            c = float(p.cost_ms[p.op_index[o], p.target_index[self.assignment[o]]])
            if not _close(self.op_cost_ms.get(o, math.nan), c, tol):
                raise PlanError(f"op {o!r}: op_cost_ms {self.op_cost_ms.get(o)} != problem cost {c}")
            if o not in self.start_ms or o not in self.end_ms:
                raise PlanError(f"op {o!r} has no start/end time")
            if not _close(self.end_ms[o], self.start_ms[o] + c, tol):
                raise PlanError(f"op {o!r}: end {self.end_ms[o]} != start {self.start_ms[o]} + cost {c}")
            if self.start_ms[o] < -tol:
                raise PlanError(f"op {o!r} starts before 0 ({self.start_ms[o]})")

        # transfers: exactly the needed (tensor, src, dst) copies with the problem's times
        needed = {(p.tensors[k].name, p.targets[a], p.targets[b]): (ms, en)
                  for k, a, b, ms, en in sem.needed_transfers(p, assign)}
        got = {(t.tensor, t.src, t.dst): t for t in self.transfers}
        if len(got) != len(self.transfers):
            raise PlanError("duplicate entries in transfers")
        for key in needed.keys() - got.keys():
            raise PlanError(f"transfer of tensor {key[0]!r} {key[1]!r} -> {key[2]!r} is missing")
        for key in got.keys() - needed.keys():
            raise PlanError(f"transfer of tensor {key[0]!r} {key[1]!r} -> {key[2]!r} is not needed")
        for key, (ms, en) in needed.items():
            t = got[key]
            if not (_close(t.ms, ms, tol) and _close(t.entry_ms, en, tol)):
                raise PlanError(f"transfer of tensor {key[0]!r} {key[1]!r} -> {key[2]!r}: "
                                f"{t.ms}+{t.entry_ms} ms, problem says {ms}+{en} ms")

        start = np.array([self.start_ms[o] for o in p.ops])
        end = np.array([self.end_ms[o] for o in p.ops])
        if self.mode == "latency":
            self._validate_latency(p, assign, start, end, tol)
        else:
            self._validate_pipeline(p, assign, start, end, tol)

    def _validate_latency(self, p: PlacementProblem, assign: Any, start: Any, end: Any, tol: float) -> None:
        for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)):
            if u < 0:
                continue
            for v in cs:
                ready = sem.arrival_ms(p, k, end[u], assign[u], assign[v])
                if start[v] < ready - tol * max(1.0, abs(ready)):
                    raise PlanError(f"op {p.ops[v]!r} starts at {start[v]:.6g} ms before its input "
                                    f"{p.tensors[k].name!r} from {p.ops[u]!r} is ready on "
                                    f"{p.targets[assign[v]]!r} at {ready:.6g} ms")
        for users in p.resource_users:  # instantaneous (cost 0) ops occupy no time on their target
            idx = np.flatnonzero(np.isin(assign, users) & (end > start))
            idx = idx[np.lexsort((end[idx], start[idx]))]
            for a, b in itertools.pairwise(idx):
                if start[b] < end[a] - tol * max(1.0, abs(end[a])):
                    if assign[a] == assign[b]:
                        raise PlanError(f"ops {p.ops[a]!r} and {p.ops[b]!r} overlap on "
                                        f"{p.targets[assign[a]]!r}")
                    raise PlanError(f"ops {p.ops[a]!r} on {p.targets[assign[a]]!r} and {p.ops[b]!r} on "
                                    f"{p.targets[assign[b]]!r} overlap, but the targets share a core")
        for t in self.transfers:
            u = p.tensor_producer[p.tensor_index[t.tensor]]
            if t.start_ms is None or not _close(t.start_ms, end[u], tol) or t.end_ms is None or \
                    not _close(t.end_ms, end[u] + t.ms + t.entry_ms, tol):
                raise PlanError(f"transfer of {t.tensor!r} to {t.dst!r}: times do not match op {p.ops[u]!r}")
        makespan = float(end.max()) if p.n_ops else 0.0
        if not _close(self.makespan_ms, makespan, tol):
            raise PlanError(f"makespan_ms {self.makespan_ms} != recomputed {makespan} (op "
                            f"{p.ops[int(end.argmax())]!r} ends last)")
        busy = sem.resource_busy_ms(p, assign)
        if not _close(self.bottleneck_ms, float(busy.max()), tol):
            raise PlanError(f"bottleneck_ms {self.bottleneck_ms} != recomputed {float(busy.max())}")

    def _validate_pipeline(self, p: PlacementProblem, assign: Any, start: Any, end: Any, tol: float) -> None:
        if len(set(self.stage_targets)) != len(self.stage_targets):
            raise PlanError(f"stage targets are not distinct: {list(self.stage_targets)}")
        if any(t not in p.target_index for t in self.stage_targets):
            raise PlanError(f"unknown stage target in {list(self.stage_targets)}")
        stage = np.empty(p.n_ops, dtype=int)
        for o in p.ops:
            if o not in self.stage:
                raise PlanError(f"op {o!r} has no stage")
            s = self.stage[o]
            if not 0 <= s < len(self.stage_targets):
                raise PlanError(f"op {o!r} in stage {s}, plan has {len(self.stage_targets)} stages")
            if self.stage_targets[s] != self.assignment[o]:
                raise PlanError(f"op {o!r} in stage {s} on {self.stage_targets[s]!r} but placed on "
                                f"{self.assignment[o]!r}")
            stage[p.op_index[o]] = s
        for u, v in p.edges:
            if stage[u] > stage[v]:
                raise PlanError(f"op {p.ops[v]!r} (stage {stage[v]}) consumes from {p.ops[u]!r} in a later "
                                f"stage {stage[u]}")
        if self.options.get("contiguous"):
            # runs of the canonical order when the plan says so (placer.solve.solve), else of the listing
            seq = p.canonical_order if self.options.get("op_order") == "canonical" else range(p.n_ops)
            seq = list(seq)
            for i, j in zip(seq, seq[1:]):
                if stage[i] > stage[j]:
                    raise PlanError(f"op {p.ops[j]!r} breaks stage contiguity (stage {stage[j]} after "
                                    f"{p.ops[i]!r} in stage {stage[i]})")
        k = self.options.get("num_stages")
        if k is not None and len(self.stage_targets) > int(k):
            raise PlanError(f"plan has {len(self.stage_targets)} stages, more than num_stages={k}")
        order = [p.target_index[t] for t in self.stage_targets]
        ref = sem.pipeline_eval(p, assign, order)
        if len(self.stages) != len(order):
            raise PlanError(f"plan lists {len(self.stages)} stage costs for {len(order)} stages")
        for s, (sc, tgt) in enumerate(zip(self.stages, self.stage_targets)):
            d = p.target_index[tgt]
            want = (ref.compute[d], ref.send[d], ref.recv[d], ref.total[d])
            have = (sc.compute_ms, sc.send_ms, sc.recv_ms, sc.total_ms)
            if sc.target != tgt or not all(_close(a, b, tol) for a, b in zip(have, want)):
                raise PlanError(f"stage {s} on {tgt!r}: costs {have} != recomputed {tuple(map(float, want))}")
        for i, o in enumerate(p.ops):
            if not (_close(start[i], ref.start[i], tol) and _close(end[i], ref.end[i], tol)):
                raise PlanError(f"op {o!r}: start/end {start[i]}/{end[i]} differ from the pipeline timeline "
                                f"{ref.start[i]}/{ref.end[i]}")
        if not _close(self.bottleneck_ms, ref.bottleneck, tol):
            raise PlanError(f"bottleneck_ms {self.bottleneck_ms} != recomputed {ref.bottleneck}")
        if not _close(self.makespan_ms, ref.latency, tol):
            raise PlanError(f"makespan_ms {self.makespan_ms} != recomputed {ref.latency}")


def _short(ops: list[str], limit: int = 8) -> str:
    if len(ops) <= limit:
        return ",".join(ops)
    return ",".join(ops[:limit]) + f",...(+{len(ops) - limit})"


_FIELD_TYPES: dict[str, type] = {
    "targets": list, "stage_targets": list, "transfers": list, "stages": list, "assignment": dict,
    "start_ms": dict, "end_ms": dict, "op_cost_ms": dict, "stage": dict, "stats": dict, "provenance": dict,
    "options": dict,
}
_JSON_NAME = {list: "array", dict: "object"}


def _check_names(plan: Plan) -> None:
    """Op, target and tensor names of a plan read from JSON are strings (a list where a name is
    expected would surface later as an unhashable-type crash)."""
    for what, names in (("targets", plan.targets), ("stage_targets", plan.stage_targets),
                        ("assignment", [*plan.assignment, *plan.assignment.values()]),
                        ("stage", plan.stage), ("start_ms", plan.start_ms), ("end_ms", plan.end_ms),
                        ("op_cost_ms", plan.op_cost_ms)):
        bad = next((x for x in names if not isinstance(x, str)), None)
        if bad is not None:
            raise PlanError(f"plan JSON: {what}: {bad!r} is not a name")
    for tr in plan.transfers:
        if not all(isinstance(x, str) for x in (tr.tensor, tr.src, tr.dst)):
            raise PlanError(f"plan JSON: transfer {tr.tensor!r} {tr.src!r} -> {tr.dst!r}: names must be "
                            "strings")
    if not isinstance(plan.mode, str) or not isinstance(plan.solver, str):
        raise PlanError("plan JSON: mode and solver must be strings")


def _json_default(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


# ``placer.plan(model, ...)`` plans a model (placer.api.plan, imported when called: the one upward
# reference of this layer, listed in docs/architecture.md); the module stays importable as usual.
_make_callable(__name__, "placer.api:plan")
