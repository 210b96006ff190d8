"""materialize(): plan -> partitions, sub-models, stage config, Relax module; PLAN_DIR save/load."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from placer import trust as _trust  # as _trust: methods below take a `trust` flag
from placer.devices import make_target
from placer.devices.base import TargetSpec
from placer.errors import PlanError, TargetError, first_line
from placer.graph import build_graph
from placer.graph.load import check_prepared, is_folded
from placer.graph.opaque import describe_regions, is_opaque
from placer.materialize.partition import (
    Partition,
    PartitionStats,
    group_ops,
    partition_io,
    partition_stats,
)
from placer.materialize.relax_module import build_relax_program, partition_symbol, symbol_prefix
from placer.materialize.stage_config import (
    StageConfig,
    assignment_hash,
    build_stage_config,
    check_stage_config,
    load_stage_config,
)
from placer.plan import Plan
from placer.safe_io import load_json, read_bytes

PLAN_FILE = "plan.json"
STAGE_CONFIG_FILE = "stage_config.json"
MODEL_FILE = "model.onnx"
PARTITIONS_DIR = "partitions"
RELAX_FILE = "module.relax.txt"
COMPILED_FILE = "module.so"
COMPILED_INFO_FILE = "compiled.json"
ASSIGNMENT_FORMAT = "placer.assignment"
#: a compiled module bigger than this is refused (before it is read)
MAX_COMPILED_BYTES = 2**31


# ---- plan adapter -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanSpec:
    """What materialize needs from a plan: op -> target, op -> stage (pipeline plans), the plan's JSON."""

    assignment: dict[str, str]
    stage_of: dict[str, int] | None
    plan_json: dict[str, Any]

    @property
    def mode(self) -> str:
        return "pipeline" if self.stage_of is not None else "latency"


def _stage_of_from_plan(plan: Any) -> dict[str, int] | None:
    """``{op: stage}`` of a pipeline-mode solver Plan (``Plan.stage``), else None."""
    if getattr(plan, "mode", "pipeline") != "pipeline":
        return None
    so = getattr(plan, "stage", None) or getattr(plan, "stage_of", None)
    return {str(k): int(v) for k, v in dict(so).items()} if so else None


def _is_solver_plan_json(d: Mapping[str, Any]) -> bool:
    return "assignment" in d and "solver" in d and "mode" in d


def plan_spec(plan_or_assignment: Any, stage_of: Mapping[str, int] | None = None) -> PlanSpec:
    """Normalize a solver ``Plan`` (or its JSON dict), a ``placer.assignment`` dict or a plain
    ``{op: target}`` mapping (with ``stage_of`` for a pipeline plan) into a :class:`PlanSpec`."""
    if isinstance(plan_or_assignment, PlanSpec):
        return plan_or_assignment
    if isinstance(plan_or_assignment, Mapping):
        d = dict(plan_or_assignment)
        if _is_solver_plan_json(d):
            return plan_spec(Plan.from_json(d), stage_of)
        if d.get("format") == ASSIGNMENT_FORMAT:
            assignment = {str(k): str(v) for k, v in d["assignment"].items()}
            so = stage_of if stage_of is not None else d.get("stage_of")
            so = {str(k): int(v) for k, v in so.items()} if so else None
            return PlanSpec(assignment, so, d)
        if not all(isinstance(v, str) for v in d.values()):
            raise PlanError("a plan given as a mapping must be {op_id: target_name} or a plan JSON dict")
        assignment = {str(k): str(v) for k, v in d.items()}
        so = {str(k): int(v) for k, v in stage_of.items()} if stage_of is not None else None
        pj = {"format": ASSIGNMENT_FORMAT, "version": 1, "assignment": dict(sorted(assignment.items())),
              "stage_of": dict(sorted(so.items())) if so is not None else None}
        return PlanSpec(assignment, so, pj)
    assignment = getattr(plan_or_assignment, "assignment", None)
    if assignment is None:
        raise PlanError(f"cannot read an op -> target assignment from {type(plan_or_assignment).__name__}")
    so = {str(k): int(v) for k, v in stage_of.items()} if stage_of is not None else _stage_of_from_plan(
        plan_or_assignment)
    to_json = getattr(plan_or_assignment, "to_json", None)
    pj: Any = to_json() if callable(to_json) else None
    if isinstance(pj, str):
        pj = json.loads(pj)
    if not isinstance(pj, dict):
        pj = {"format": ASSIGNMENT_FORMAT, "version": 1, "assignment": dict(sorted(dict(assignment).items())),
              "stage_of": dict(sorted(so.items())) if so is not None else None}
    return PlanSpec({str(k): str(v) for k, v in dict(assignment).items()}, so, pj)


# ---- the result ---------------------------------------------------------------------------------
@dataclass
class Materialized:
    """A plan made runnable: partitions, their ONNX sub-models, the stage config, the Relax program."""

    graph: Any
    plan: PlanSpec
    partitions: tuple[Partition, ...]
    stage_config: StageConfig
    submodels: dict[str, Any]
    out_dir: Path | None = None
    _relax: Any = field(default=None, repr=False)

    @property
    def assignment(self) -> dict[str, str]:
        return self.plan.assignment

    @property
    def stage_of(self) -> dict[str, int] | None:
        return self.plan.stage_of

    @property
    def mode(self) -> str:
        return self.plan.mode

    @property
    def stats(self) -> PartitionStats:
        return partition_stats(self.graph, self.partitions)

    def partition(self, pid: str) -> Partition:
        for p in self.partitions:
            if p.id == pid:
                return p
        raise KeyError(pid)

    def relax_program(self):
        """The Relax program (built on first use: imports the TVM partitions)."""
        if self._relax is None:
            self._relax = build_relax_program(self.graph, self.partitions, self.submodels)
        return self._relax

    @property
    def relax_module(self):
        return self.relax_program().mod

    def relax_text(self) -> str:
        return self.relax_program().text()

    def summary(self) -> str:
        return self.stage_config.summary()

    def export_compiled(self, out_dir: str | Path | None = None) -> Path:
        """Compile the Relax module (``tvm.compile``) and write it to ``OUT/module.so`` with
        ``OUT/compiled.json`` (its SHA-256, the model and assignment hashes, the TVM version), the
        deployable artifact ``placer run --compiled`` loads. ``out_dir`` defaults to the directory
        this plan was saved to."""
        import hashlib

        import tvm

        out = Path(out_dir) if out_dir is not None else self.out_dir
        if out is None:
            raise PlanError("export_compiled: the plan was not saved to a directory; pass out_dir")
        compiled = self.relax_program().compile()
        try:
            compiled.export(out / COMPILED_FILE)
        except Exception as exc:  # export_library runs the system C compiler: missing or failing
            raise TargetError(f"{out / COMPILED_FILE}: exporting the compiled Relax module failed: "
                              f"{type(exc).__name__}: {first_line(exc, 200)}") from exc
        finally:
            compiled.close()

        digest = hashlib.sha256((out / COMPILED_FILE).read_bytes()).hexdigest()
        info = {"format": "placer.compiled", "version": 1, "file": COMPILED_FILE, "sha256": digest,
                "model_hash": self.stage_config.model_hash, "assignment_hash": self.stage_config.assignment_hash,
                "tvm": tvm.__version__, "compile_s": round(compiled.compile_s, 3)}
        info["hmac"] = _trust.tag(digest, _trust_context(info))  # made here, by this user: see placer.trust
        (out / COMPILED_INFO_FILE).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
        return out / COMPILED_FILE

    def compiled_path(self, *, trust: bool = False) -> Path:
        """``module.so`` of the plan directory, after checking it against ``compiled.json`` and the plan
        (PlanError naming the file otherwise). Loading it runs native code, so it must also be one this
        user's placer compiled (its HMAC, :mod:`placer.trust`), unless ``trust`` (``--trust``)."""
        return self.compiled_module(trust=trust)[0]

    def compiled_module(self, *, trust: bool = False) -> tuple[Path, bytes]:
        """``(path, bytes)`` of the checked ``module.so`` (see :meth:`compiled_path`): load these bytes
        (a private copy), not the path, which may change after the check."""
        import hashlib

        if self.out_dir is None:
            raise PlanError("this plan has no directory, so no compiled module")
        info_file, lib = self.out_dir / COMPILED_INFO_FILE, self.out_dir / COMPILED_FILE
        if not info_file.exists():
            raise PlanError(f"{info_file}: no compiled-module record; write one with "
                            "Materialized.export_compiled or placer tune")
        try:
            info = load_json(info_file, "the compiled-module record", PlanError)
        except PlanError as exc:
            raise PlanError(f"no usable compiled-module record: {exc}") from None
        if not isinstance(info, dict) or info.get("format") != "placer.compiled":
            raise PlanError(f"{info_file}: not a placer.compiled record")
        for key in ("model_hash", "assignment_hash"):
            if info.get(key) != getattr(self.stage_config, key):
                raise PlanError(f"{info_file}: {key} {str(info.get(key))[:24]!r} does not match the plan's "
                                f"{str(getattr(self.stage_config, key))[:24]!r}: the module was compiled for another plan")
        import tvm

        if info.get("tvm") != tvm.__version__:  # a library built by another TVM may crash instead of failing
            raise PlanError(f"{info_file}: compiled with TVM {info.get('tvm')!r}, this is TVM {tvm.__version__}: "
                            "recompile it (Materialized.export_compiled)")
        if info.get("file", COMPILED_FILE) != COMPILED_FILE:
            raise PlanError(f"{info_file}: names the file {info.get('file')!r}; a plan's compiled module is "
                            f"{COMPILED_FILE}")
        if lib.is_symlink() or not lib.resolve().is_relative_to(self.out_dir.resolve()):
            raise PlanError(f"{lib}: a symbolic link or outside the plan directory; refusing to load native "
                            "code from it")
        if not lib.exists():
            raise PlanError(f"{lib}: missing (named by {info_file})")
        data = read_bytes(lib, "the compiled module", PlanError, max_bytes=MAX_COMPILED_BYTES)
        digest = hashlib.sha256(data).hexdigest()
        if digest != info.get("sha256"):
            raise PlanError(f"{lib}: SHA-256 differs from {info_file}: the file changed, refusing to load it")
        try:
            made_here = _trust.verify(digest, _trust_context(info), info.get("hmac"))
        except _trust.TrustError as exc:
            raise PlanError(f"{lib}: cannot check where it was made: {exc}") from None
        if not (made_here or trust):
            raise PlanError(f"{lib}: not compiled by placer on this machine for this user (its compiled.json "
                            "has no valid HMAC under your trust key); loading it would run its native code. "
                            "Recompile it (placer tune, Materialized.export_compiled) or pass --trust if you "
                            "trust whoever made it")
        return lib, data

    def save(self, out_dir: str | Path, *, relax: bool = True) -> Path:
        """Write the PLAN_DIR layout (see placer.materialize)."""
        out = Path(out_dir)
        (out / PARTITIONS_DIR).mkdir(parents=True, exist_ok=True)
        for old in (out / PARTITIONS_DIR).glob("*.onnx"):
            old.unlink()
        (out / MODEL_FILE).write_bytes(self.graph.model.SerializeToString())
        plan_text = json.dumps(self.plan.plan_json, indent=1, sort_keys=True, default=str)
        (out / PLAN_FILE).write_text(plan_text + "\n")
        (out / STAGE_CONFIG_FILE).write_text(self.stage_config.to_json())
        for p in self.partitions:
            (out / p.file).write_bytes(self.submodels[p.id].SerializeToString())
        if relax:
            (out / RELAX_FILE).write_text(self.relax_text())
        self.out_dir = out
        return out


def _trust_context(info: Mapping[str, Any]) -> dict[str, str]:
    """What a compiled module's HMAC binds besides its bytes: the plan and TVM it was built for."""
    return {k: str(info.get(k)) for k in ("model_hash", "assignment_hash", "tvm")}


def _check_opaque_targets(graph, assignment: Mapping[str, str]) -> None:
    """An opaque region (control flow, data-dependent shapes: placer.graph.opaque) runs only on a
    target whose runtime runs its nodes itself (ONNX Runtime, OpenVINO), never on TVM."""

    regions = None
    for op in graph.ops:
        if not is_opaque(getattr(op, "domain", "")):
            continue
        target = assignment[op.id]
        ok, why = make_target(target).supports(op.op_type, op.domain)
        if not ok:
            regions = regions or describe_regions(graph)
            raise PlanError(f"op '{op.id}' is an opaque region ({regions.get(op.id, op.op_type)}) that target "
                            f"{target} cannot run: {why}; place it on onnxruntime or openvino")


def _runtime_of(target: str) -> str:
    return make_target(target).runtime


def _ordered_io(sub, ins: tuple[str, ...], outs: tuple[str, ...], pid: str):
    """The sub-model's own I/O order (what its runtime session expects), checked against ours."""
    inits = {i.name for i in sub.graph.initializer}
    s_ins = tuple(i.name for i in sub.graph.input if i.name not in inits)
    s_outs = tuple(o.name for o in sub.graph.output)
    if set(s_ins) != set(ins) or set(s_outs) != set(outs):
        raise PlanError(
            f"partition {pid}: sub-model I/O {list(s_ins)} -> {list(s_outs)} differs from the partition's "
            f"{list(ins)} -> {list(outs)}"
        )
    return s_ins, s_outs


def materialize(
    graph,
    plan_or_assignment: Any,
    out_dir: str | Path | None = None,
    *,
    stage_of: Mapping[str, int] | None = None,
    relax: bool | None = None,
    replicas: Mapping[int, Any] | None = None,
) -> Materialized:
    """Partition a plan, cut its sub-models, build its stage config (and Relax module).

    Parameters
    ----------
    graph : OpGraph
        The model (``placer.graph``).
    plan_or_assignment : Plan | Mapping[str, str] | dict
        A solver ``Plan`` (``.assignment``, stage info for pipeline plans), a plan JSON dict, or a
        plain ``{op_id: target_name}`` mapping.
    out_dir : path, optional
        Write the PLAN_DIR layout there.
    stage_of : Mapping[str, int], optional
        ``{op_id: stage}`` for pipeline plans given as a plain mapping (overrides the plan's).
    relax : bool, optional
        Build the Relax program now (default: when writing ``out_dir``; otherwise on first use).
    replicas : Mapping[int, list[list[int]]], optional
        ``{stage_index: [[cores of worker 0], [cores of worker 1], ...]}``: run that stage as several
        data-parallel workers in the pipeline executor (stage config version 2, see
        :mod:`placer.materialize.stage_config`). Not part of the plan: ``plan.json`` and the
        assignment hash are the same with or without. E.g. the whole model on one runtime, one
        worker per core: ``materialize(g, {op.id: "openvino:t1" for op in g.ops},
        replicas={0: [[0], [1]]})``.

    Example
    -------
    >>> mat = materialize(graph, {op.id: "onnxruntime" for op in graph.ops})  # doctest: +SKIP
    >>> mat.stats.n_partitions  # doctest: +SKIP
    1
    """
    spec = plan_spec(plan_or_assignment, stage_of)
    # canonical target names (onnxruntime -> onnxruntime@cpu:t1) so that equal targets compare equal
    canon: dict[str, str] = {}
    for t in sorted(set(spec.assignment.values())):
        canon[t] = TargetSpec.parse(t).name
    assignment = {o: canon[t] for o, t in spec.assignment.items()}
    pj = spec.plan_json
    if isinstance(pj, dict) and pj.get("format") == ASSIGNMENT_FORMAT:  # a plain assignment: record its model
        pj = {**pj, "model_hash": graph.model_hash}
    spec = PlanSpec(assignment, spec.stage_of, pj)
    groups = group_ops(graph, spec.assignment, spec.stage_of)
    _check_opaque_targets(graph, assignment)
    ahash = assignment_hash(spec.assignment, spec.stage_of)
    prefix = symbol_prefix(graph.model_hash, ahash)
    runtimes = {t: _runtime_of(t) for t in sorted(set(assignment.values()))}

    partitions: list[Partition] = []
    submodels: dict[str, Any] = {}
    for i, ops in enumerate(groups):
        pid = f"p{i}"
        target = assignment[ops[0]]
        stage = int(spec.stage_of[ops[0]]) if spec.stage_of is not None else 0
        ins, outs = partition_io(graph, ops)
        sub = graph.subgraph_model(ops, name=f"{graph.name}_{pid}")
        ins, outs = _ordered_io(sub, ins, outs, pid)
        draft = Partition(pid, i, target, runtimes[target], stage, tuple(ops), ins, outs)
        sym = partition_symbol(prefix, draft)
        kind = target.split("@")[0].split(":")[0]
        p = Partition(pid, i, target, runtimes[target], stage, tuple(ops), ins, outs, symbol=sym,
                      file=f"{PARTITIONS_DIR}/{pid}_{kind}.onnx")
        partitions.append(p)
        submodels[pid] = sub
    cfg = build_stage_config(graph, partitions, mode=spec.mode, assignment_hash=ahash, replicas=replicas)
    check_stage_config(cfg, graph, spec.assignment, spec.stage_of)
    mat = Materialized(graph=graph, plan=spec, partitions=tuple(partitions), stage_config=cfg,
                       submodels=submodels)
    if relax or (relax is None and out_dir is not None):
        prog = mat.relax_program()
        if prog.vdevice and cfg.relax_vdevice != prog.vdevice:
            mat.stage_config = _with_vdevice(cfg, prog.vdevice)
    if out_dir is not None:
        mat.save(out_dir, relax=True)
    return mat


def _with_vdevice(cfg: StageConfig, vdevice: str) -> StageConfig:
    from dataclasses import replace

    return replace(cfg, relax_vdevice=vdevice)


def _read_onnx(path: Path, what: str):
    """An ONNX file of a plan directory, read without following external-data references."""
    import onnx

    if not path.exists():
        raise PlanError(f"{path}: {what} is missing")
    if not path.is_file():
        raise PlanError(f"{path}: {what} is not a regular file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - truncated, random bytes, not a protobuf ...
        raise PlanError(f"{path}: {what} is not a valid ONNX model ({type(exc).__name__})") from None
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        raise PlanError(f"{path}: {what} refers to external data; plan directories hold their weights inline")
    return model


def _load_graph(model_path: Path):
    model = _read_onnx(model_path, "the plan directory's model (model.onnx)")
    if is_folded(model):  # used as is: checked as loading checks a model
        check_prepared(model, str(model_path))
    return build_graph(model, source=str(model_path))


def _check_plan_identity(root: Path, plan_json: Any, spec: PlanSpec, graph) -> None:
    """The plan must be the one made for this model: its recorded model hash (solver plans:
    ``provenance.model_hash``; plain assignments: ``model_hash``) equals the model's, and every
    target it assigns is one of its own ``targets``."""
    where = root / PLAN_FILE
    prov = plan_json.get("provenance") if isinstance(plan_json, Mapping) else None
    recorded = prov.get("model_hash") if isinstance(prov, Mapping) else None
    if recorded is None and isinstance(plan_json, Mapping):
        recorded = plan_json.get("model_hash")
    if recorded is not None and recorded != graph.model_hash:
        raise PlanError(
            f"{where}: the plan was made for model hash {str(recorded)[:16]}, but the plan directory's model "
            f"{graph.name!r} has {graph.model_hash[:16]} (a plan for another model?)"
        )
    targets = plan_json.get("targets") if _is_solver_plan_json(plan_json) else None
    if targets is not None:
        try:
            own = {TargetSpec.parse(str(t)).name for t in targets}
        except TargetError as exc:
            raise PlanError(f"{where}: plan targets: {exc}") from None
        for o, t in sorted(spec.assignment.items()):
            if t not in own:
                raise PlanError(f"{where}: op {o!r} is placed on {t}, which is not one of the plan's targets "
                                f"{sorted(own)}")


def _partition_file(root: Path, p) -> Path:
    """The partition's sub-model path, which must lie inside ``root/partitions``."""
    base = (root / PARTITIONS_DIR).resolve()
    rel = Path(p.file) if p.file else None
    f = (root / rel).resolve() if rel is not None and not rel.is_absolute() else None
    if f is None or not f.is_relative_to(base):
        raise PlanError(f"stage config: partition {p.id}'s file {p.file!r} is not inside {root / PARTITIONS_DIR}")
    return root / rel


def load_plan_dir(path: str | Path, graph=None) -> Materialized:
    """Load a PLAN_DIR, checking the stage config against the model and the plan (PlanError)."""
    root = Path(path)
    if not root.is_dir():
        raise PlanError(f"{root}: not a plan directory")
    if graph is None:
        graph = _load_graph(root / MODEL_FILE)
    if not (root / PLAN_FILE).exists():
        raise PlanError(f"{root / PLAN_FILE}: no plan in the plan directory")
    plan_json = load_json(root / PLAN_FILE, "the plan", PlanError)
    try:
        spec = _plan_spec_from_json(plan_json)
    except PlanError as exc:
        raise PlanError(f"{root / PLAN_FILE}: {exc}") from None

    canon = {}
    for o, t in spec.assignment.items():
        try:
            canon[o] = TargetSpec.parse(t).name
        except TargetError as exc:
            raise PlanError(f"{root / PLAN_FILE}: op {o!r}: {exc}") from None
    spec = PlanSpec(canon, spec.stage_of, spec.plan_json)
    _check_plan_identity(root, plan_json, spec, graph)
    cfg = load_stage_config(root / STAGE_CONFIG_FILE)
    check_stage_config(cfg, graph, spec.assignment, spec.stage_of)
    ahash = assignment_hash(spec.assignment, spec.stage_of)
    if cfg.assignment_hash != ahash:  # the compiled module.so is bound to the plan by this hash
        raise PlanError(f"{root / STAGE_CONFIG_FILE}: assignment hash {str(cfg.assignment_hash)[:16]!r} is not "
                        f"the plan's {ahash} (a stage config of another plan?); materialize the plan again")
    prefix = symbol_prefix(graph.model_hash, ahash)
    submodels: dict[str, Any] = {}
    for p in cfg.partitions:
        f = _partition_file(root, p)
        if not f.is_file():
            raise PlanError(f"{f}: partition {p.id}'s sub-model is missing")
        # A sub-model is a function of model.onnx and the partition's ops: it must be exactly what
        # materialize() writes (an edited or swapped file would run other weights or ops).
        want = graph.subgraph_model(p.ops, name=f"{graph.name}_{p.id}")
        if f.read_bytes() != want.SerializeToString():
            sub = _read_onnx(f, f"partition {p.id}'s sub-model")
            _ordered_io(sub, p.inputs, p.outputs, p.id)
            raise PlanError(f"{f}: partition {p.id}'s sub-model is not ops {list(p.ops)[:4]} of model.onnx "
                            "(edited or swapped?); materialize the plan again")
        # the Relax executor passes a partition's tensors by position: they must be in the sub-model's
        # order, and its symbol (registered as a global function) the one materialize() names it
        ins, outs = _ordered_io(want, p.inputs, p.outputs, p.id)
        if (ins, outs) != (tuple(p.inputs), tuple(p.outputs)):
            raise PlanError(f"{root / STAGE_CONFIG_FILE}: partition {p.id} lists its tensors as {list(p.inputs)} "
                            f"-> {list(p.outputs)}, its sub-model takes {list(ins)} -> {list(outs)}")
        if p.symbol != partition_symbol(prefix, p):
            raise PlanError(f"{root / STAGE_CONFIG_FILE}: partition {p.id}'s symbol {p.symbol[:60]!r} is not "
                            f"{partition_symbol(prefix, p)!r}; materialize the plan again")
        submodels[p.id] = want
    return Materialized(graph=graph, plan=spec, partitions=cfg.partitions, stage_config=cfg,
                        submodels=submodels, out_dir=root)


def _plan_spec_from_json(d: Any) -> PlanSpec:
    if not isinstance(d, Mapping) or "assignment" not in d:
        raise PlanError("plan.json has no op -> target assignment")
    if not isinstance(d["assignment"], Mapping):
        raise PlanError("assignment must map op -> target")
    for o, t in d["assignment"].items():
        if not isinstance(t, str):
            raise PlanError(f"assignment: op {o!r} is placed on {str(t)[:60]!r}, which is not a target "
                            "name")
    try:
        return plan_spec(d)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:  # e.g. a list where a stage is
        raise PlanError(f"malformed ({type(exc).__name__}: {str(exc)[:160]})") from None


def show_plan_dir(path: str | Path, *, ir: bool = False, as_json: bool = False) -> str:
    """Text for ``placer show``: the stage config summary (checked against model and plan), the
    stage config JSON (``as_json``) or the Relax module (``ir``; rebuilt when the file is missing)."""
    mat = load_plan_dir(path)
    if as_json:
        return mat.stage_config.to_json().rstrip("\n")
    if ir:
        f = Path(path) / RELAX_FILE
        return f.read_text().rstrip("\n") if f.is_file() else mat.relax_text()
    st = mat.stats
    by = ", ".join(f"{t} {n}" for t, n in st.by_target.items())
    return f"{mat.summary()}\npartitions per target: {by}"
