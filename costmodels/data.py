"""Training data of the cost model: measured rows, independent of where they were stored.

:class:`TrainingData` holds what the cost model learns from, as plain rows:

- ``signatures``: signature key -> canonical signature dict (:func:`costmodels.features.normalize_signature`);
- ``ops``: :class:`OpRow` (target, signature key, median latency in ms or ``inf`` when the target
  cannot run it, the models the signature occurs in);
- ``partitions``: :class:`PartitionRow` (target, the signature keys of its ops in order, measured
  ms, boundary bytes, kind: "segment", "model" or "partition", the model it came from);
- ``overheads_ms``: target -> fixed call cost;
- ``links``: :class:`LinkRow` points (src, dst, nbytes, ms) and ``link_fits`` (``"src->dst"`` ->
  ``{"latency_ms", "bandwidth_gbs"}``) as the store fitted them;
- ``targets``: target -> fingerprint (runtime version, CPU, threads).

It is built from a profile store by :func:`costmodels.store.training_data_from_store`, or loaded
from JSON (:meth:`TrainingData.from_json`: the committed test fixture is one). :meth:`fingerprint`
hashes the rows, so a model card says exactly what a model was trained on.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from costmodels.errors import CostModelError
from costmodels.features import jsonable, normalize_signature
from placer.safe_io import loads, max_json_bytes, read_bytes

FORMAT = "placer-costmodel-data"
VERSION = 1


@dataclass(frozen=True)
class OpRow:
    target: str
    key: str
    latency_ms: float  # inf = unsupported on the target
    models: tuple[str, ...] = ()
    p10_ms: float | None = None
    p90_ms: float | None = None


@dataclass(frozen=True)
class PartitionRow:
    target: str
    op_keys: tuple[str, ...]
    measured_ms: float
    boundary_bytes: float = 0.0
    kind: str = "segment"
    model: str | None = None


@dataclass(frozen=True)
class LinkRow:
    src: str
    dst: str
    nbytes: float
    ms: float


def _num(x: float) -> Any:
    return x if math.isfinite(x) else "inf"


def _unnum(x: Any) -> float:
    return float("inf") if x in ("inf", None) else float(x)


@dataclass
class TrainingData:
    signatures: dict[str, dict] = field(default_factory=dict)
    ops: list[OpRow] = field(default_factory=list)
    partitions: list[PartitionRow] = field(default_factory=list)
    overheads_ms: dict[str, float] = field(default_factory=dict)
    links: list[LinkRow] = field(default_factory=list)
    link_fits: dict[str, dict] = field(default_factory=dict)
    targets: dict[str, dict] = field(default_factory=dict)
    #: target -> how many of its op rows a faster probe contradicted, read at the probe's time
    #: (:mod:`costmodels.store`)
    read_at_probe: dict[str, int] = field(default_factory=dict)

    # ---- views ---------------------------------------------------------------------------
    def target_names(self) -> list[str]:
        """Targets with op measurements, sorted."""
        return sorted({r.target for r in self.ops})

    def model_names(self) -> list[str]:
        """Models any op or partition row came from, sorted."""
        names = {m for r in self.ops for m in r.models} | {p.model for p in self.partitions if p.model}
        return sorted(names)

    def op_rows(self, target: str) -> list[OpRow]:
        return [r for r in self.ops if r.target == target]

    def add_signature(self, key: str, sig: Any) -> None:
        if key not in self.signatures:
            self.signatures[key] = {**normalize_signature(sig), "hash": key}

    def without_model(self, *models: str) -> "TrainingData":
        """The data ``models`` never saw: rows of signatures occurring only in them and their
        partitions are dropped (signatures they share with other models stay: those were measured
        for the other models too)."""
        drop = set(models)
        ops = []
        for r in self.ops:
            if drop & set(r.models):
                rest = tuple(m for m in r.models if m not in drop)
                if not rest:
                    continue
                r = OpRow(r.target, r.key, r.latency_ms, rest, r.p10_ms, r.p90_ms)
            ops.append(r)
        return TrainingData(dict(self.signatures), ops, [p for p in self.partitions if p.model not in drop],
                            dict(self.overheads_ms), list(self.links), dict(self.link_fits), dict(self.targets))

    def restricted_to(self, model: str) -> "TrainingData":
        """Only the rows of ``model``: its ops' signatures and its partitions."""
        return TrainingData(dict(self.signatures), [r for r in self.ops if model in r.models],
                            [p for p in self.partitions if p.model == model], dict(self.overheads_ms),
                            list(self.links), dict(self.link_fits), dict(self.targets))

    # ---- JSON ------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": FORMAT, "version": VERSION,
            "signatures": {k: jsonable(v) for k, v in sorted(self.signatures.items())},
            "ops": [{**asdict(r), "latency_ms": _num(r.latency_ms), "models": list(r.models)} for r in self.ops],
            "partitions": [{**asdict(p), "op_keys": list(p.op_keys)} for p in self.partitions],
            "overheads_ms": dict(sorted(self.overheads_ms.items())),
            "links": [asdict(r) for r in self.links],
            "link_fits": jsonable(self.link_fits),
            "targets": jsonable(self.targets),
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "TrainingData":
        if d.get("format") != FORMAT:
            raise ValueError(f"not {FORMAT} JSON (format={d.get('format')!r})")
        return TrainingData(
            signatures={k: {**normalize_signature(v), "hash": k} for k, v in d["signatures"].items()},
            ops=[OpRow(r["target"], r["key"], _unnum(r["latency_ms"]), tuple(r.get("models", ())),
                       r.get("p10_ms"), r.get("p90_ms")) for r in d["ops"]],
            partitions=[PartitionRow(p["target"], tuple(p["op_keys"]), float(p["measured_ms"]),
                                     float(p.get("boundary_bytes", 0.0)), p.get("kind", "segment"), p.get("model"))
                        for p in d.get("partitions", [])],
            overheads_ms={k: float(v) for k, v in d.get("overheads_ms", {}).items()},
            links=[LinkRow(r["src"], r["dst"], float(r["nbytes"]), float(r["ms"])) for r in d.get("links", [])],
            link_fits=dict(d.get("link_fits", {})),
            targets=dict(d.get("targets", {})),
        )

    def to_json(self, path: str | Path) -> None:
        """Write as JSON (gzip-compressed when the name ends in ``.gz``)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()
        p = Path(path)
        p.write_bytes(gzip.compress(blob, mtime=0) if p.suffix == ".gz" else blob)

    @staticmethod
    def from_json(path: str | Path) -> "TrainingData":
        import zlib

        p = Path(path)
        limit = max_json_bytes()
        blob = read_bytes(p, "the training data", CostModelError, limit)
        if p.suffix == ".gz":  # bounded: a small gzip bomb is refused, not inflated
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            try:
                blob = d.decompress(blob, limit + 1)
            except zlib.error as exc:
                raise CostModelError(f"{p}: not a gzip file ({exc})") from None
            if len(blob) > limit or d.unconsumed_tail:
                raise CostModelError(f"{p}: decompresses to more than {limit} bytes")
        return TrainingData.from_dict(loads(blob, str(p), CostModelError))

    def fingerprint(self, targets: Iterable[str] | None = None) -> str:
        """SHA-256 (16 hex) of the training rows (of ``targets`` only, if given)."""
        keep = set(targets) if targets is not None else None
        d = self.to_dict()
        if keep is not None:
            d["ops"] = [r for r in d["ops"] if r["target"] in keep]
            d["partitions"] = [p for p in d["partitions"] if p["target"] in keep]
            d["overheads_ms"] = {k: v for k, v in d["overheads_ms"].items() if k in keep}
            d.pop("links"), d.pop("link_fits"), d.pop("targets")
            used = {r["key"] for r in d["ops"]} | {k for p in d["partitions"] for k in p["op_keys"]}
            d["signatures"] = {k: v for k, v in d["signatures"].items() if k in used}
        blob = json.dumps(d, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
