"""The cost model the solver side uses: op, transfer, overhead and partition costs per target.

:class:`CostModel` puts the fitted pieces behind one small API:

- ``predict_op_ms(op, target)``: the op's *net* cost (isolated latency minus the target's call
  overhead, the store's ``net_ms`` convention): the exact measured median when the store measured
  that signature on that target (``inf`` when the measurement said unsupported), else the
  target's :class:`~costmodels.op_model.OpLatencyModel` (``inf`` for op types the target never
  ran), else the target's roofline spec (``sim:`` targets);
- ``predict_ops(graph, targets)``: the ``[n_ops, n_targets]`` matrix of those, optionally with a
  mask of which entries are exact measurements;
- ``overhead_ms(target)``: the fixed cost of one call, paid once per partition, and
  ``transfer_ms(nbytes, src, dst)``: the hand-off alone (the destination's call overhead is not
  in it: it is the next partition's ``overhead_ms``). So a plan without partition correction
  costs ``sum over partitions (overhead_ms + sum of op costs) + sum of transfers``;
- ``predict_partition_ms(ops, target)``: overhead once plus the partition-corrected sum of the ops
  (:mod:`costmodels.partition`), and ``add_partition_measurements(records)`` to learn from
  partitions measured while tuning.

Build one with :func:`costmodels.train.fit_cost_model`; save/load with :meth:`CostModel.save` /
:meth:`CostModel.load` (:mod:`costmodels.persistence`: skops + JSON + a hashed model card).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from sklearn.base import clone

from costmodels.errors import CostModelError
from costmodels.features import normalize_signature, signature_key
from costmodels.op_model import OpLatencyModel
from costmodels.partition import PartitionCorrection, net_isolated_ms
from costmodels.persistence import load_cost_model_parts, save_cost_model
from costmodels.roofline import RooflineModel
from costmodels.transfer import TransferModel


def _ops_of(graph_or_ops: Any) -> list:
    return list(graph_or_ops.ops) if hasattr(graph_or_ops, "ops") else list(graph_or_ops)


def boundary_bytes(graph: Any, op_ids: Iterable[str]) -> float:
    """Bytes entering plus leaving a set of ops of an OpGraph (its non-constant inputs, its outputs)."""
    ins, outs = graph.subgraph_io(list(op_ids))
    total = 0.0
    for t in list(ins) + list(outs):
        name = t if isinstance(t, str) else getattr(t, "name", t)
        info = graph.tensors.get(name) if isinstance(name, str) else t
        total += float(getattr(info, "nbytes", 0) or 0)
    return total


class CostModel:
    """Fitted costs of ops, partitions and transfers on a set of targets.

    Parameters
    ----------
    op_models : mapping target -> fitted OpLatencyModel
    roofline : mapping target -> fitted RooflineModel
        Targets known only by their spec (used when a target has no op model).
    transfer : fitted TransferModel or None
    partition : fitted PartitionCorrection or None
    overheads_ms : mapping target -> fixed call cost (ms)
    measured_ms : mapping target -> {signature key: isolated median ms or inf}
        Exact measurements (with the call overhead in them), preferred over predictions.
    partition_records : list of (record, measured_ms)
        What ``partition`` was fitted on (kept so that new measurements refit on all of them).
    card : dict
        The model card (training fingerprint, metrics, versions).
    """

    def __init__(self, op_models: Mapping[str, OpLatencyModel] | None = None,
                 roofline: Mapping[str, RooflineModel] | None = None,
                 transfer: TransferModel | None = None, partition: PartitionCorrection | None = None,
                 overheads_ms: Mapping[str, float] | None = None,
                 measured_ms: Mapping[str, Mapping[str, float]] | None = None,
                 partition_records: Sequence[tuple[Mapping, float]] | None = None, card: Mapping | None = None):
        self.op_models = dict(op_models or {})
        self.roofline = dict(roofline or {})
        self.transfer = transfer if transfer is not None else TransferModel().fit([], [])
        self.partition = partition
        self.overheads_ms = dict(overheads_ms or {})
        self.measured_ms = {t: dict(v) for t, v in (measured_ms or {}).items()}
        self.partition_records = [(dict(r), float(m)) for r, m in (partition_records or [])]
        self.card = dict(card or {})

    def __repr__(self) -> str:
        return f"<CostModel targets={self.targets} id={self.model_id}>"

    @property
    def targets(self) -> list[str]:
        """Every target this model can price."""
        return sorted(set(self.op_models) | set(self.roofline) | set(self.measured_ms))

    @property
    def model_id(self) -> str:
        """Identity recorded in plans' provenance (training-data fingerprint + seed)."""
        return str(self.card.get("id", "unsaved"))

    def _check_target(self, target: str) -> None:
        if target not in self.op_models and target not in self.roofline and target not in self.measured_ms:
            raise CostModelError(f"cost model has no data for target {target!r}; it knows: {', '.join(self.targets)}")

    # ---- ops ---------------------------------------------------------------------------------
    def is_measured(self, op: Any, target: str) -> bool:
        """Whether ``op``'s signature was measured on ``target`` (its cost is then exact)."""
        return signature_key(op) in self.measured_ms.get(target, {})

    def _predict_unmeasured(self, sigs: list[dict], target: str) -> np.ndarray:
        if not sigs:
            return np.zeros(0)
        if target in self.op_models:
            return self.op_models[target].predict(sigs)
        if target in self.roofline:
            return self.roofline[target].predict(sigs)
        raise CostModelError(f"target {target!r} has measurements but no op model to predict unmeasured ops")

    def _net(self, isolated: np.ndarray, target: str) -> np.ndarray:
        return np.maximum(isolated - self.overhead_ms(target), 0.0)

    def predict_op_ms(self, op: Any, target: str, include_overhead: bool = False) -> float:
        """Net latency (ms) of one op (Op, Signature or signature dict) on ``target``; inf if unsupported.

        Net = isolated latency minus the target's call overhead (paid once per partition, see
        :meth:`overhead_ms`), as the profile store keeps ``net_ms``; ``include_overhead=True``
        gives the isolated single-op latency.
        """
        return float(self.predict_ops([op], [target], include_overhead=include_overhead)[0, 0])

    def predict_ops(self, graph: Any, targets: Sequence[str], return_measured: bool = False,
                    include_overhead: bool = False):
        """Net cost matrix ``[n_ops, n_targets]`` (ms; inf = unsupported) for a graph or op list.

        Exact measurements are used where the store has them, predictions elsewhere. With
        ``return_measured=True`` also returns a bool matrix, True where the entry is a measurement.
        ``include_overhead=True`` gives isolated single-op latencies instead of net costs.
        """
        ops = _ops_of(graph)
        keys = [signature_key(op) for op in ops]
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        uniq = list(first)
        col = {k: i for i, k in enumerate(uniq)}
        rows = np.array([col[k] for k in keys], dtype=np.int64)
        costs = np.zeros((len(ops), len(targets)))
        exact = np.zeros((len(ops), len(targets)), dtype=bool)
        for j, target in enumerate(targets):
            self._check_target(target)
            measured = self.measured_ms.get(target, {})
            u_exact = np.array([k in measured for k in uniq], dtype=bool)
            u_cost = np.array([measured.get(k, np.nan) for k in uniq], dtype=np.float64)
            todo = np.flatnonzero(~u_exact)
            if len(todo):
                u_cost[todo] = self._predict_unmeasured(
                    [normalize_signature(ops[first[uniq[i]]]) for i in todo], target)
            if not include_overhead:
                u_cost = self._net(u_cost, target)
            if len(rows):
                costs[:, j] = u_cost[rows]
                exact[:, j] = u_exact[rows]
        return (costs, exact) if return_measured else costs

    # ---- transfers and overhead ----------------------------------------------------------------
    def transfer_ms(self, nbytes: float, src: str, dst: str) -> float:
        """Time (ms) to move ``nbytes`` from ``src`` to ``dst`` (0 within a target)."""
        return self.transfer.transfer_ms(nbytes, src, dst)

    def overhead_ms(self, target: str) -> float:
        """Fixed cost (ms) of one call into ``target`` (once per partition)."""
        if target in self.overheads_ms:
            return float(self.overheads_ms[target])
        if target in self.op_models:
            return float(self.op_models[target].prior_.call_overhead_ms_)
        if target in self.roofline:
            return float(self.roofline[target].call_overhead_ms_)
        self._check_target(target)
        return 0.0

    # ---- partitions ------------------------------------------------------------------------------
    def partition_record(self, ops: Sequence[Any], target: str, boundary_bytes: float = 0.0,
                         isolated_ms: Sequence[float] | None = None) -> dict:
        """The record :class:`PartitionCorrection` reads, for ops run as one partition on ``target``."""
        sigs = [normalize_signature(op) for op in ops]
        if isolated_ms is None:
            isolated_ms = self.predict_ops(list(ops), [target], include_overhead=True)[:, 0] if ops else []
        return {"target": target, "op_types": [s["op_type"] for s in sigs],
                "isolated_ms": [float(c) for c in isolated_ms], "overhead_ms": self.overhead_ms(target),
                "boundary_bytes": float(boundary_bytes)}

    def predict_partition_ms(self, ops: Sequence[Any], target: str, boundary_bytes: float | None = None,
                             graph: Any = None) -> float:
        """Latency (ms) of ``ops`` run as one partition on ``target`` (inf if any op is unsupported).

        ``boundary_bytes`` (bytes in + out) is computed from ``graph`` when given and not passed.
        """
        if not ops:
            return 0.0
        if boundary_bytes is None:
            boundary_bytes = boundary_bytes_of(graph, ops) if graph is not None else 0.0
        rec = self.partition_record(ops, target, boundary_bytes)
        if not all(math.isfinite(c) for c in rec["isolated_ms"]):
            return math.inf
        if self.partition is None:
            overhead = rec["overhead_ms"]
            return float(overhead + net_isolated_ms(rec["isolated_ms"], overhead).sum())
        return float(self.partition.predict([rec])[0])

    def add_partition_measurements(self, records: Iterable[Mapping[str, Any]], graph: Any = None,
                                   refit: bool = True) -> int:
        """Learn from measured partitions and refit the partition correction; returns how many were used.

        Each record has ``target``, ``measured_ms`` (the partition's own run time, its call
        overhead included) and either ``ops`` (Ops, signature dicts, or op ids of ``graph``; with
        optional ``boundary_bytes``, computed from ``graph`` when missing) or a ready record
        (``op_types``, ``isolated_ms``, ...). Records with an unsupported op or a non-finite
        measurement are skipped, and so are records naming ops by id when no ``graph`` is given
        (with a warning: the tuner's rows name op ids). Optional ``model`` (groups the
        correction's cross-validation) and ``origin`` (who measured it) are kept with the record.
        ``refit=False`` only records them; :meth:`refit_partition` fits later (the fit costs ~1 s
        per few hundred records, so a caller adding rows often refits when it needs the model).
        """
        added = 0
        skipped_ids = 0
        for r in records:
            measured = float(r["measured_ms"])
            if "op_types" in r and "isolated_ms" in r:
                rec = {"target": r["target"], "op_types": list(r["op_types"]),
                       "isolated_ms": [float(c) for c in r["isolated_ms"]],
                       # a ready record carries its overhead (of a target this model may not know)
                       "overhead_ms": float(r["overhead_ms"] if "overhead_ms" in r
                                            else self.overhead_ms(r["target"])),
                       "boundary_bytes": float(r.get("boundary_bytes", 0.0))}
            else:
                ops = list(r["ops"])
                if ops and isinstance(ops[0], str):
                    if graph is None:
                        skipped_ids += 1
                        continue
                    ops = [graph.op(i) for i in ops]
                bb = r.get("boundary_bytes")
                if bb is None:
                    bb = boundary_bytes_of(graph, ops) if graph is not None else 0.0
                rec = self.partition_record(ops, r["target"], float(bb))
            if not (math.isfinite(measured) and all(math.isfinite(c) for c in rec["isolated_ms"])):
                continue
            for key in ("model", "origin"):  # CV grouping and provenance, kept with the record
                if key in r:
                    rec[key] = str(r[key])
            self.partition_records.append((rec, measured))
            added += 1
        if skipped_ids:
            warnings.warn(f"add_partition_measurements: {skipped_ids} record(s) name ops by id but no graph was "
                          "given (pass graph=...); they were not used", stacklevel=2)
        if added and refit:
            self.refit_partition()
        return added

    def refit_partition(self) -> None:
        """Fit the partition correction on every recorded partition (no-op without records)."""
        if not self.partition_records:
            return
        base = self.partition if self.partition is not None else PartitionCorrection()
        X = [r for r, _ in self.partition_records]
        self.partition = clone(base).fit(X, [m for _, m in self.partition_records])

    # ---- persistence ---------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write the model (skops + JSON + card.json with SHA-256 of each file) to ``directory``."""
        return save_cost_model(self, directory)

    @staticmethod
    def load(directory: str | Path) -> "CostModel":
        """Load a saved model; refuses files whose hash or types do not match (ArtifactIntegrityError)."""
        return CostModel(**load_cost_model_parts(directory))


def load_cost_model(directory: str | Path) -> CostModel:
    """:meth:`CostModel.load`: a saved model, verified (hashes, type allowlist) and loaded."""
    return CostModel.load(directory)


def boundary_bytes_of(graph: Any, ops: Sequence[Any]) -> float:
    """Boundary bytes of Ops (objects with ``id``) of ``graph``; 0 when they are plain signatures."""
    ids = [getattr(op, "id", None) for op in ops]
    if any(i is None for i in ids):
        return 0.0
    return boundary_bytes(graph, ids)
