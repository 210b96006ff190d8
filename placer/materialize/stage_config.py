"""The stage config: a versioned JSON description of how a materialized plan runs.

Format ``placer.stage_config`` version 2 (schema: ``placer/schemas/stage_config.schema.json``)::

    {"format": "placer.stage_config", "version": 1 | 2,
     "model": {"name", "hash", "inputs": [...], "outputs": [...]},
     "plan": {"mode": "latency"|"pipeline", "assignment_hash", "n_partitions",
              "n_boundary_tensors", "boundary_bytes", "relax_vdevice"},
     "stages": [{"index", "target" (null when mixed), "targets", "cores" (null = unpinned), "threads",
                 "replicas" (version 2, optional): [[core, ...], ...],
                 "partitions": [{"id": "p0", "index", "target", "runtime", "stage", "ops",
                                 "inputs", "outputs", "symbol", "file"}]}],
     "tensors": {name: {"shape", "dtype", "nbytes"}},
     "connections": [{"tensor", "src": {"model_input": true} | {"stage", "partition"},
                      "dst": {"stage", "partition"} | {"model_output": true}}]}

A latency plan has one stage (index 0) holding every partition; a pipeline plan has one stage per
plan stage. Connections list every tensor hand-off: model input -> partition input, partition
output -> partition input (inside a stage or across stages), and -> model output.

**Replicas** (version 2). A stage may list ``replicas``: one entry per worker, each the cores that
worker is pinned to. The pipeline executor then runs that many data-parallel copies of the stage
(same partitions, each worker with its own runtime sessions) pulling requests from the stage's one
input queue. Absent (or ``null``) means one worker pinned to the stage's ``cores``, the version 1
behaviour. Rules, checked on build and load (PlanError naming the stage): at least one replica,
each with at least one core and at least as many cores as the stage's ``threads``, no core twice
in a stage's replicas, every core available to this process, and, when the stage's targets pin
cores (``cores`` not null), every replica's cores among them. Replicas are a resource of the stage
config, not of the plan: the plan (``plan.json``, ``assignment_hash``) is the same with or without
them. Give them with ``materialize(..., replicas={stage_index: [[cores], ...]})``.

Versions: the writer emits the lowest version that can express the config (1 when no stage has
replicas, so older readers still load it; 2 otherwise). The reader accepts 1 and 2; a version 1
config with ``replicas`` is rejected by the schema.

Loading (:func:`load_stage_config`) validates the JSON against the schema (``jsonschema`` when it
is installed, else a small structural check), then :func:`check_stage_config` checks it against
the model (hash, tensors exist, partitions cover every op once, partition I/O, every model output
produced, producers ordered before consumers, stages non-decreasing, stage resources and replicas)
and against the plan (each op's target and stage), raising :class:`PlanError` naming the first
mismatch.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from placer.devices.base import TargetSpec
from placer.devices.registry import target_class
from placer.errors import PlanError, TargetError
from placer.materialize.partition import (
    Partition,
    graph_input_names,
    graph_output_names,
    partition_io,
    partition_stats,
)
from placer.safe_io import load_json

FORMAT = "placer.stage_config"
VERSION = 2  # the newest version this module reads and writes (see the module docstring)
READ_VERSIONS = (1, 2)
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "stage_config.schema.json"


@dataclass(frozen=True)
class Stage:
    index: int
    target: str | None
    targets: tuple[str, ...]
    cores: tuple[int, ...] | None
    threads: int
    partitions: tuple[Partition, ...]
    #: one entry per data-parallel worker, the cores it is pinned to; None = one worker on ``cores``
    replicas: tuple[tuple[int, ...], ...] | None = None

    @property
    def workers(self) -> tuple[tuple[int, ...] | None, ...]:
        """The cores of each worker the pipeline executor starts for this stage (None = unpinned)."""
        return tuple(self.replicas) if self.replicas else (self.cores,)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "index": self.index,
            "target": self.target,
            "targets": list(self.targets),
            "cores": list(self.cores) if self.cores is not None else None,
            "threads": self.threads,
            "partitions": [p.to_dict() for p in self.partitions],
        }
        if self.replicas is not None:
            d["replicas"] = [list(r) for r in self.replicas]
        return d


@dataclass(frozen=True)
class StageConfig:
    model_name: str
    model_hash: str
    model_inputs: tuple[str, ...]
    model_outputs: tuple[str, ...]
    mode: str
    assignment_hash: str
    stages: tuple[Stage, ...]
    tensors: dict[str, dict[str, Any]]
    connections: tuple[dict[str, Any], ...]
    n_boundary_tensors: int = 0
    boundary_bytes: int = 0
    relax_vdevice: str = ""

    @property
    def partitions(self) -> tuple[Partition, ...]:
        return tuple(sorted((p for s in self.stages for p in s.partitions), key=lambda p: p.index))

    @property
    def version(self) -> int:
        """The format version this config is written as: 2 when a stage has replicas, else 1."""
        return 2 if any(s.replicas is not None for s in self.stages) else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": self.version,
            "model": {
                "name": self.model_name,
                "hash": self.model_hash,
                "inputs": list(self.model_inputs),
                "outputs": list(self.model_outputs),
            },
            "plan": {
                "mode": self.mode,
                "assignment_hash": self.assignment_hash,
                "n_partitions": len(self.partitions),
                "n_boundary_tensors": self.n_boundary_tensors,
                "boundary_bytes": self.boundary_bytes,
                "relax_vdevice": self.relax_vdevice,
            },
            "stages": [s.to_dict() for s in self.stages],
            "tensors": {k: dict(v) for k, v in sorted(self.tensors.items())},
            "connections": [dict(c) for c in self.connections],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "StageConfig":
        validate_schema(d)
        stages = tuple(
            Stage(
                index=int(s["index"]),
                target=s["target"],
                targets=tuple(s["targets"]),
                cores=tuple(s["cores"]) if s["cores"] is not None else None,
                threads=int(s.get("threads", 1)),
                partitions=tuple(Partition.from_dict(p) for p in s["partitions"]),
                replicas=(tuple(tuple(int(c) for c in r) for r in s["replicas"])
                          if s.get("replicas") is not None else None),
            )
            for s in d["stages"]
        )
        return StageConfig(
            model_name=d["model"]["name"],
            model_hash=d["model"]["hash"],
            model_inputs=tuple(d["model"]["inputs"]),
            model_outputs=tuple(d["model"]["outputs"]),
            mode=d["plan"]["mode"],
            assignment_hash=d["plan"]["assignment_hash"],
            stages=stages,
            tensors={k: dict(v) for k, v in d["tensors"].items()},
            connections=tuple(dict(c) for c in d["connections"]),
            n_boundary_tensors=int(d["plan"]["n_boundary_tensors"]),
            boundary_bytes=int(d["plan"]["boundary_bytes"]),
            relax_vdevice=d["plan"].get("relax_vdevice", ""),
        )

    def summary(self) -> str:
        lines = [
            f"model {self.model_name} ({self.model_hash[:12]}), {self.mode} plan: "
            f"{len(self.partitions)} partitions in {len(self.stages)} stage(s), "
            f"{self.n_boundary_tensors} boundary tensors ({self.boundary_bytes / 1e6:.2f} MB)"
        ]
        for s in self.stages:
            cores = ",".join(map(str, s.cores)) if s.cores else "any"
            reps = (f" replicas {len(s.replicas)} (cores " + " | ".join(",".join(map(str, r)) for r in s.replicas)
                    + ")") if s.replicas else ""
            lines.append(f"stage {s.index}: target {s.target or 'mixed'} cores {cores} threads {s.threads}{reps}")
            for p in s.partitions:
                lines.append(
                    f"  {p.id:>4} {p.target:<24} {len(p.ops):>4} ops  "
                    f"in {len(p.inputs)}  out {len(p.outputs)}"
                    f"  [{p.ops[0]} .. {p.ops[-1]}]"
                )
        return "\n".join(lines)


# ---- building -----------------------------------------------------------------------------------
def assignment_hash(assignment: Mapping[str, str], stage_of: Mapping[str, int] | None) -> str:
    stages = dict(sorted((k, int(v)) for k, v in stage_of.items())) if stage_of is not None else None
    blob = json.dumps({"assignment": dict(sorted(assignment.items())), "stage_of": stages}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _tensor_entry(graph, name: str) -> dict[str, Any]:
    info = graph.tensors[name]
    import numpy as np

    return {
        "shape": [int(d) for d in info.shape],
        "dtype": str(np.dtype(info.dtype)) if not isinstance(info.dtype, str) else info.dtype,
        "nbytes": int(info.nbytes),
    }


def _stage_resources(targets: Sequence[str]) -> tuple[tuple[int, ...] | None, int]:
    specs = [TargetSpec.parse(t) for t in targets]
    threads = max(s.threads for s in specs)
    if any(s.cores is None for s in specs):
        return None, threads
    return tuple(sorted({c for s in specs for c in s.cores})), threads


def build_stage_config(
    graph,
    partitions: Sequence[Partition],
    *,
    mode: str,
    assignment_hash: str,
    relax_vdevice: str = "",
    replicas: Mapping[int, Sequence[Sequence[int]]] | None = None,
) -> StageConfig:
    """The stage config of ``partitions``; ``replicas`` = ``{stage_index: [[cores], ...]}`` gives a
    stage that many data-parallel workers (see the module docstring; checked by
    :func:`check_stage_config`)."""
    by_stage: dict[int, list[Partition]] = {}
    for p in partitions:
        by_stage.setdefault(p.stage, []).append(p)
    reps = _normalize_replicas(replicas, sorted(by_stage))
    stages = []
    for idx in sorted(by_stage):
        parts = tuple(by_stage[idx])
        targets = tuple(dict.fromkeys(p.target for p in parts))
        cores, threads = _stage_resources(targets)
        stages.append(
            Stage(
                index=idx,
                target=targets[0] if len(targets) == 1 else None,
                targets=targets,
                cores=cores,
                threads=threads,
                partitions=parts,
                replicas=reps.get(idx),
            )
        )
    model_inputs = graph_input_names(graph)
    model_outputs = graph_output_names(graph)
    producer_part = {t: p for p in partitions for t in p.outputs}
    inputs_set = set(model_inputs)

    def src_of(t: str) -> dict[str, Any]:
        if t in producer_part:
            q = producer_part[t]
            return {"stage": q.stage, "partition": q.id}
        if t in inputs_set:
            return {"model_input": True}
        raise PlanError(f"tensor {t!r} is read by a partition but neither produced by one nor a model input")

    connections: list[dict[str, Any]] = []
    named: set[str] = set()
    for p in partitions:
        for t in p.inputs:
            connections.append({"tensor": t, "src": src_of(t), "dst": {"stage": p.stage, "partition": p.id}})
            named.add(t)
    for t in model_outputs:
        connections.append({"tensor": t, "src": src_of(t), "dst": {"model_output": True}})
        named.add(t)
    for p in partitions:
        named.update(p.outputs)
    stats = partition_stats(graph, partitions)
    return StageConfig(
        model_name=graph.name,
        model_hash=graph.model_hash,
        model_inputs=model_inputs,
        model_outputs=model_outputs,
        mode=mode,
        assignment_hash=assignment_hash,
        stages=tuple(stages),
        tensors={t: _tensor_entry(graph, t) for t in sorted(named)},
        connections=tuple(connections),
        n_boundary_tensors=stats.n_boundary_tensors,
        boundary_bytes=stats.boundary_bytes,
        relax_vdevice=relax_vdevice,
    )


def _normalize_replicas(replicas: Mapping[int, Sequence[Sequence[int]]] | None,
                        stage_indices: Sequence[int]) -> dict[int, tuple[tuple[int, ...], ...]]:
    """``{stage: ((cores), ...)}`` from what a caller gave; PlanError naming a stage the plan lacks or
    a value that is not a list of core lists (the rules are checked by :func:`_check_replicas`)."""
    if not replicas:
        return {}
    out: dict[int, tuple[tuple[int, ...], ...]] = {}
    for key, value in replicas.items():
        try:
            idx = int(key)
        except (TypeError, ValueError):
            raise PlanError(f"replicas: stage {key!r} is not a stage index") from None
        if idx not in stage_indices:
            raise PlanError(f"replicas given for stage {idx}, but the plan has stages {list(stage_indices)}")
        try:
            reps = tuple(tuple(int(c) for c in r) for r in value)
        except (TypeError, ValueError):
            raise PlanError(f"replicas of stage {idx}: expected a list of core lists, e.g. [[0], [1]], "
                            f"got {value!r}") from None
        out[idx] = reps
    return out


def _check_replicas(s: Stage) -> None:
    """A stage's replicas follow the rules of the module docstring (PlanError naming the stage)."""
    import os

    if s.replicas is None:
        return
    where = f"stage config, stage {s.index}: replicas"
    if len(s.replicas) < 1:
        raise PlanError(f"{where}: an empty list (leave replicas out for one worker)")
    avail = os.sched_getaffinity(0)
    seen: dict[int, int] = {}
    for j, r in enumerate(s.replicas):
        if not r:
            raise PlanError(f"{where}: replica {j} has no cores")
        if len(set(r)) != len(r):
            raise PlanError(f"{where}: replica {j} lists a core twice ({list(r)})")
        if len(r) < s.threads:
            raise PlanError(f"{where}: replica {j} has {len(r)} core(s) {list(r)} for {s.threads} threads")
        for c in r:
            if c in seen:
                raise PlanError(f"{where}: core {c} is in replica {seen[c]} and replica {j}")
            seen[c] = j
            if c not in avail:
                raise PlanError(f"{where}: replica {j}'s core {c} is not available (have {sorted(avail)})")
            if s.cores is not None and c not in s.cores:
                raise PlanError(f"{where}: replica {j}'s core {c} is not one of the stage's cores {list(s.cores)} "
                                "(its targets pin it there; use unpinned targets, e.g. 'openvino:t1', to "
                                "place replicas freely)")


# ---- loading and checking -----------------------------------------------------------------------
def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def validate_schema(d: Any) -> None:
    """Check a stage-config dict against the JSON Schema; PlanError with the failing path."""
    if not isinstance(d, Mapping):
        raise PlanError("stage config: expected a JSON object")
    if d.get("format") != FORMAT:
        raise PlanError(f"stage config: format is {d.get('format')!r}, expected {FORMAT!r}")
    if d.get("version") not in READ_VERSIONS:
        raise PlanError(
            f"stage config: version {d.get('version')!r} is not supported (this placer reads "
            f"{', '.join(map(str, READ_VERSIONS))})")
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - jsonschema is present here; keep a structural fallback
        _structural_check(d)
        return
    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(validator.iter_errors(d), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(str(x) for x in e.absolute_path) or "<root>"
        raise PlanError(f"stage config does not match its schema at {where}: {e.message[:200]}")


def _structural_check(d: Mapping[str, Any]) -> None:  # pragma: no cover - fallback only
    for key in ("model", "plan", "stages", "tensors", "connections"):
        if key not in d:
            raise PlanError(f"stage config does not match its schema: missing {key!r}")
    for s in d["stages"]:
        for key in ("index", "target", "targets", "cores", "partitions"):
            if key not in s:
                raise PlanError(f"stage config does not match its schema: stage missing {key!r}")
        if s.get("replicas") is not None:
            if d.get("version") == 1:
                raise PlanError(f"stage config does not match its schema: stage {s.get('index')} has replicas "
                                "in a version 1 config")
            if not isinstance(s["replicas"], list) or not all(isinstance(r, list) and r for r in s["replicas"]):
                raise PlanError(f"stage config does not match its schema: stage {s.get('index')}'s replicas "
                                "must be a list of non-empty core lists")
        for p in s["partitions"]:
            for key in ("id", "index", "target", "runtime", "stage", "ops", "inputs", "outputs"):
                if key not in p:
                    raise PlanError(f"stage config does not match its schema: partition missing {key!r}")


def load_stage_config(path: str | Path) -> StageConfig:
    path = Path(path)
    if not path.exists():
        raise PlanError(f"{path}: no stage config")
    return StageConfig.from_dict(load_json(path, "the stage config", PlanError))


def _check_stage_resources(cfg: StageConfig) -> None:
    """Each stage's targets, cores and threads, and each partition's runtime, are what its partitions'
    targets imply (``build_stage_config``): an edited value would pin, size or dispatch wrongly."""
    for s in cfg.stages:
        targets = tuple(dict.fromkeys(p.target for p in s.partitions))
        try:
            cores, threads = _stage_resources(targets)
            runtimes = {t: getattr(target_class(TargetSpec.parse(t).kind), "runtime", None) for t in targets}
        except TargetError as exc:
            raise PlanError(f"stage config, stage {s.index}: {exc}") from None
        if tuple(s.targets) != targets or s.target != (targets[0] if len(targets) == 1 else None):
            raise PlanError(f"stage config, stage {s.index}: targets {list(s.targets)} (target {s.target!r}) "
                            f"do not match its partitions' {list(targets)}")
        if (tuple(s.cores) if s.cores is not None else None) != cores or s.threads != threads:
            raise PlanError(f"stage config, stage {s.index}: cores {s.cores} / threads {s.threads} do not match "
                            f"its targets {list(targets)} (cores {list(cores) if cores else None}, threads {threads})")
        _check_replicas(s)
        for p in s.partitions:
            rt = runtimes[p.target]
            if rt and p.runtime != rt:
                raise PlanError(f"stage config: partition {p.id} on {p.target} says runtime {p.runtime!r}, "
                                f"the target's runtime is {rt!r}")


def check_stage_config(
    cfg: StageConfig,
    graph,
    assignment: Mapping[str, str] | None = None,
    stage_of: Mapping[str, int] | None = None,
) -> None:
    """Check a stage config against its model (and plan); PlanError naming the first mismatch.

    The checks run in this order: the model (hash, inputs, outputs), the partitions (ids, indices,
    stages, the ops they cover, their inputs and outputs), the tensors, the stages' resources, the
    connections, and the plan (``assignment``, ``stage_of``) when given."""
    _check_model(cfg, graph)
    known_ops = _check_partition_ops(cfg, graph)
    _check_partition_io(cfg, graph)
    _check_tensor_entries(cfg, graph)
    _check_stage_resources(cfg)
    _check_connections(cfg, graph)
    if assignment is not None:
        _check_assignment(cfg, graph, known_ops, assignment)
    if stage_of is not None:
        _check_stage_of(cfg, stage_of)


def _check_model(cfg: StageConfig, graph) -> None:
    """The config is for this model: its hash, its inputs and outputs in order."""
    if cfg.model_hash != graph.model_hash:
        raise PlanError(
            f"stage config is for model hash {cfg.model_hash[:16]}, the model {graph.name!r} has "
            f"{graph.model_hash[:16]}"
        )
    if tuple(cfg.model_inputs) != graph_input_names(graph):
        raise PlanError(
            f"stage config model inputs {list(cfg.model_inputs)} != model's {list(graph_input_names(graph))}")
    if tuple(cfg.model_outputs) != graph_output_names(graph):
        raise PlanError(
            f"stage config model outputs {list(cfg.model_outputs)} != "
            f"model's {list(graph_output_names(graph))}"
        )


def _check_partition_ops(cfg: StageConfig, graph) -> set[str]:
    """Partition ids distinct, indices 0..n-1, each listed under its own stage, and every op of the
    model in exactly one partition. Returns the model's op ids."""
    parts = cfg.partitions
    ids = [p.id for p in parts]
    if len(set(ids)) != len(ids):
        raise PlanError("stage config lists a partition id twice")
    if [p.index for p in parts] != list(range(len(parts))):
        raise PlanError("stage config partition indices are not 0..n-1")
    idx = [s.index for s in cfg.stages]
    if any(b <= a for a, b in itertools.pairwise(idx)):  # the pipeline runs its stages in the listed order
        raise PlanError(f"stage config lists stages {idx}: they must be in increasing order, each once")
    for s in cfg.stages:
        for p in s.partitions:
            if p.stage != s.index:
                raise PlanError(f"partition {p.id} says stage {p.stage} but is listed under stage {s.index}")
        ix = [p.index for p in s.partitions]
        if any(b <= a for a, b in itertools.pairwise(ix)):  # the pipeline runs them in the listed order
            raise PlanError(f"stage {s.index} lists partitions {[p.id for p in s.partitions]} out of their "
                            f"order (indices {ix}): a stage runs its partitions as listed, each after those "
                            "it reads from, in increasing index")
    known_ops = {op.id for op in graph.ops}
    where: dict[str, str] = {}
    for p in parts:
        for o in p.ops:
            if o not in known_ops:
                raise PlanError(f"partition {p.id} names op {o!r}, which is not in model {graph.name!r}")
            if o in where:
                raise PlanError(f"op {o!r} is in partitions {where[o]} and {p.id}")
            where[o] = p.id
    missing = [o for o in known_ops if o not in where]
    if missing:
        raise PlanError(f"stage config places no partition on op(s) {sorted(missing)[:3]}")
    return known_ops


def _check_partition_io(cfg: StageConfig, graph) -> None:
    """Each partition's inputs and outputs are tensors of the model, exactly those its ops read and
    write across its boundary."""
    for p in cfg.partitions:
        for t in (*p.inputs, *p.outputs):
            if t not in graph.tensors:
                raise PlanError(f"partition {p.id} names tensor {t!r}, which is not in model {graph.name!r}")
        ins, outs = partition_io(graph, p.ops)
        if set(ins) != set(p.inputs) or set(outs) != set(p.outputs):
            raise PlanError(
                f"partition {p.id}: inputs/outputs {sorted(p.inputs)}/{sorted(p.outputs)} "
                "do not match its ops "
                f"(expected {sorted(ins)}/{sorted(outs)})"
            )


def _check_tensor_entries(cfg: StageConfig, graph) -> None:
    """Every tensor the config describes is the model's, with its shape, dtype and size."""
    for t, entry in cfg.tensors.items():
        if t not in graph.tensors:
            raise PlanError(f"stage config names tensor {t!r}, which is not in model {graph.name!r}")
        if dict(entry) != _tensor_entry(graph, t):
            raise PlanError(f"stage config describes tensor {t!r} as {dict(entry)}, the model has "
                            f"{_tensor_entry(graph, t)}")


def _check_connections(cfg: StageConfig, graph) -> None:
    """Each connection goes forwards from a producer of its tensor (a model input or a partition
    output) to a reader (a partition input or a model output); every partition input and model
    output is delivered by one and produced by someone."""
    parts = cfg.partitions
    producer = {t: p for p in parts for t in p.outputs}
    by_id = {p.id: p for p in parts}
    model_inputs = set(cfg.model_inputs)
    fed: set[tuple[str, str]] = set()
    produced_outputs: set[str] = set()
    for c in cfg.connections:
        t, src, dst = c["tensor"], c["src"], c["dst"]
        if t not in graph.tensors:
            raise PlanError(f"connection names tensor {t!r}, which is not in model {graph.name!r}")
        src_stage, src_index = _connection_source(t, src, by_id, model_inputs)
        if "model_output" in dst:
            produced_outputs.add(t)
        elif "partition" in dst:
            q = by_id.get(dst["partition"])
            if q is None or t not in q.inputs:
                raise PlanError(
                    f"connection feeds {t!r} to partition {dst['partition']}, which does not read it")
            if src_index >= q.index or src_stage > q.stage:
                raise PlanError(f"connection of {t!r} goes backwards (into {q.id}, stage {q.stage})")
            fed.add((q.id, t))
        else:
            raise PlanError(f"connection of {t!r} has a model input as its destination")
    for p in parts:
        for t in p.inputs:
            if (p.id, t) not in fed:
                raise PlanError(f"no connection feeds input {t!r} of partition {p.id}")
            if t not in producer and t not in model_inputs:
                raise PlanError(
                    f"input {t!r} of partition {p.id} is produced by no partition and is not a model input")
    for t in cfg.model_outputs:
        if t not in produced_outputs:
            raise PlanError(f"no connection delivers model output {t!r}")
        if t not in producer and t not in model_inputs:
            raise PlanError(f"model output {t!r} is produced by no partition")


def _connection_source(t: str, src: Mapping[str, Any], by_id: Mapping[str, Partition],
                       model_inputs: set[str]) -> tuple[int, int]:
    """``(stage, index)`` of a connection's source (``(-1, -1)`` for a model input), which must
    produce ``t``."""
    if "model_input" in src:
        if t not in model_inputs:
            raise PlanError(f"connection takes {t!r} from the model inputs, but it is not a model input")
        return -1, -1
    if "partition" in src:
        q = by_id.get(src["partition"])
        if q is None or t not in q.outputs:
            raise PlanError(
                f"connection takes {t!r} from partition {src['partition']}, which does not produce it")
        return q.stage, q.index
    raise PlanError(f"connection of {t!r} has a model output as its source")


def _check_assignment(cfg: StageConfig, graph, known_ops: set[str], assignment: Mapping[str, str]) -> None:
    """The plan places only the model's ops, each on its partition's target."""
    unknown = sorted(o for o in assignment if o not in known_ops)
    if unknown:
        raise PlanError(f"the plan places op {unknown[0]!r}, which is not in model {graph.name!r}")
    for p in cfg.partitions:
        for o in p.ops:
            if o not in assignment:
                raise PlanError(f"the plan assigns no target to op {o!r} (partition {p.id})")
            if assignment[o] != p.target:
                raise PlanError(
                    f"op {o!r} is in partition {p.id} on {p.target}, "
                    f"but the plan puts it on {assignment[o]}"
                )


def _check_stage_of(cfg: StageConfig, stage_of: Mapping[str, int]) -> None:
    """The plan puts each op in its partition's stage."""
    for p in cfg.partitions:
        for o in p.ops:
            if int(stage_of.get(o, -1)) != p.stage:
                raise PlanError(
                    f"op {o!r} is in partition {p.id} in stage {p.stage}, but the plan puts it in stage "
                    f"{stage_of.get(o)}"
                )


__all__ = [
    "Stage",
    "StageConfig",
    "assignment_hash",
    "build_stage_config",
    "check_stage_config",
    "load_stage_config",
    "validate_schema",
]
