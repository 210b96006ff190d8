"""Reading a :class:`placer.profile.store.ProfileStore` into :class:`~costmodels.data.TrainingData`.

What is read, per target *name*. A name measured under several fingerprints (a new runtime or
adapter version changes the fingerprint) uses the rows of its newest fingerprint only: rows of an
older one measured a different target (``all_fingerprints=True`` mixes them, newest row per key).

- ``op`` rows: the median latency (with the call overhead in it), ``inf`` for any failed status
  (unsupported, error, timeout, crash: the store prices those ``inf`` too), and the signature
  dict with the store's ``flops``/``bytes``/``weight_bytes``; a row that one of the store's probes
  contradicts as faster (``placer.profile.drift.CONTRADICTED``, as measured and on one scale) is
  read at that probe's time (``TrainingData.read_at_probe`` counts them);
- ``segment`` rows (op sets profiled as one unit): member signature keys, measured median,
  boundary bytes and the model the example came from;
- ``model`` rows (a whole model as one partition): only for the ``graphs`` given, since the row
  does not list the model's ops;
- ``overhead`` rows -> ``overheads_ms``; links -> points and fits of the *hand-off alone*: the
  store's link points include the destination's call overhead (``dst_overhead_ms``), which this
  cost model charges per partition (:meth:`CostModel.overhead_ms`), so it is taken out here.

Which model each op signature belongs to (for leave-one-model-out evaluation) comes from the
``graphs`` passed in; without them op rows carry no model.
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterable, Mapping, Sequence

from costmodels.data import LinkRow, OpRow, PartitionRow, TrainingData
from costmodels.sibling import sibling_candidates
from costmodels.transfer import link_key
from placer.profile.drift import DriftScale, contradicts, drift_scale
from placer.profile.pace import pace_factors
from placer.profile.store import ProfileStore, open_store


def _latest(rows: Iterable[dict], use: dict[str, str] | None) -> dict[tuple[str, str], dict]:
    """Newest row per (key, target name); only rows of fingerprint ``use[name]`` when given."""
    out: dict[tuple[str, str], dict] = {}
    for r in rows:
        if use is not None and use.get(r["target_name"]) != r["target"]:
            continue
        k = (r["key"], r["target_name"])
        if k not in out or r["timestamp"] >= out[k]["timestamp"]:
            out[k] = r
    return out


def _probes_by_key(probes: Iterable[dict]) -> dict[str, list[tuple[str, float]]]:
    """key -> (session, median ms) of probe rows (:meth:`ProfileStore.probe_rows`)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for p in probes:
        if p["median_ms"] > 0:
            out.setdefault(p["key"], []).append((p["session"], p["median_ms"]))
    return out


#: the scale of rows read as stored (every factor 1)
_AS_STORED = DriftScale()


def _signature_row(row: dict) -> dict:
    return {"signature": row["signature"], "flops": row.get("flops"), "bytes": row.get("bytes"),
            "weight_bytes": row.get("weight_bytes")}


def training_data_from_store(store: Any, graphs: Sequence[Any] = (), targets: Iterable[str] | None = None,
                             all_fingerprints: bool = False, drift: bool = True,
                             siblings: bool = True, pace: bool = True,
                             fingerprints: Mapping[str, str] | None = None) -> TrainingData:
    """Training rows of ``store`` (a ProfileStore or a path) for ``targets`` (names; default all), and
    with ``siblings`` those of each one's one-thread siblings the store has (:mod:`costmodels.sibling`:
    a multi-thread target's op model is fitted with the best of them that has rows).

    ``graphs`` (OpGraphs) name the models the op signatures occur in and make their whole-model
    measurements usable as partitions. ``drift``: op times are divided by their block's factor
    (:func:`placer.profile.drift.drift_scale`: how much slower the machine ran in the session, or
    campaign, that measured the row than in the one that measured first, from probes and from
    near-twin signatures measured in both), which puts rows measured at different times on one
    scale. Leave-one-model-out on a store of six models and banks profiled over a day, the held-out
    share within 10% rose by 1.5-5.5 points per target against the rows as stored
    (experiments/costmodel_report_s17; docs/design.md, "Blocks and twins"). ``pace``: first, every
    row measured with the host's pace beside it (:mod:`placer.profile.pace`: one-thread op and
    segment rows) is divided by its pace factor, which reads it at its target's usual pace.

    A target name the store holds under several fingerprints (another runtime version, another
    machine sharing the store) is read at one of them: ``fingerprints[name]`` (a fingerprint hash:
    the caller's targets as they are now, which the store's own pricing reads too), else the one
    registered last. A name whose given fingerprint the store lacks has no rows. ``all_fingerprints``
    reads every fingerprint's rows (the newest row of each key), ``fingerprints`` aside.
    """
    if isinstance(store, (str, os.PathLike)):
        st, owned = ProfileStore(store, readonly=True), True
    else:
        st, owned = open_store(store)
    try:
        keep = None if targets is None else set(targets)
        if keep is not None and siblings:
            names = [t["name"] for t in st.targets()]
            keep |= {s for t in keep for s in sibling_candidates(t, names)}  # the fit picks one with rows
        return _read(st, list(graphs), keep, all_fingerprints, drift, pace, fingerprints)
    finally:
        if owned:
            st.close()


def _at_pace(rows: list[dict]) -> list[dict]:
    """``rows`` with the times of those measured with the host's pace divided by their pace factor
    (:func:`placer.profile.pace.pace_factors`, over all of them); the others as they are."""
    factors = pace_factors(rows)
    out = []
    for r in rows:
        f = factors.get((r["target"], r["key"]))
        if f is not None and r["status"] == "ok":
            times = {c: r[c] / f for c in ("median_ms", "net_ms", "p10_ms", "p90_ms") if r.get(c) is not None}
            r = {**r, **times, "pace_factor": f}
        out.append(r)
    return out


def _read(st: Any, graphs: list, keep: set[str] | None, all_fingerprints: bool,
          drift: bool = True, pace: bool = True, fingerprints: Mapping[str, str] | None = None) -> TrainingData:
    data = TrainingData()
    ok = lambda name: keep is None or name in keep  # noqa: E731
    given = dict(fingerprints or {})
    chosen: dict[str, str] = {}
    for t in st.targets():  # ordered by creation: the last one of a name is its newest fingerprint
        name = t["name"]
        if ok(name) and given.get(name, t["hash"]) == t["hash"]:
            data.targets[name] = {**t["fingerprint"], "hash": t["hash"]}
            chosen[name] = t["hash"]
    for name, h in given.items():  # a fingerprint the store lacks: none of the name's rows are its
        if ok(name) and name not in chosen:
            chosen[name] = h
    use = None if all_fingerprints else chosen

    every = st.measurements()
    if pace:
        every = _at_pace(every)

    def latest(kind: str, status: str | None = None, rows=None) -> list[tuple[tuple[str, str], dict]]:
        if rows is None:
            rows = [r for r in every if r["kind"] == kind and (status is None or r["status"] == status)]
        return sorted(_latest(rows, use).items())

    sig_models: dict[str, set[str]] = {}
    for g in graphs:
        for op in g.ops:
            sig_models.setdefault(op.signature.hash, set()).add(g.name)
    scales: dict[str, DriftScale] = {}  # target hash -> how fast each block of its rows ran (drift)
    probes: dict[str, dict[str, list[tuple[str, float]]]] = {}  # target hash -> key -> (session, ms)
    op_rows = [r for r in every if r["kind"] == "op"]
    for (key, name), r in latest("op", rows=op_rows):
        if not ok(name) or r["signature"] is None:
            continue
        data.add_signature(key, _signature_row(r))
        lat = float(r["median_ms"]) if r["status"] == "ok" and r["median_ms"] is not None else math.inf
        p10, p90 = r.get("p10_ms"), r.get("p90_ms")
        th = r["target"]
        if th not in probes:  # read once: the drift scale reads the same probes
            probe_rows = st.probe_rows(th)
            probes[th] = _probes_by_key(probe_rows)
            scales[th] = _AS_STORED
            if drift:
                scales[th] = drift_scale(st, th, rows=[x for x in op_rows if x["target"] == th],
                                         probes=probe_rows)
        scale = scales[th]
        f = scale.row_factor(key)
        # a probe faster beyond noise, as measured and on one scale, is read instead: the row ran in a
        # slow spell, as a first window slower than its second does (placer.profile.engine). As
        # measured too: a session's factor is a median over its ops, and a spell slows some ops only
        faster = [ms / scale.factors.get(s, 1.0) for s, ms in probes[th].get(key, ())
                  if lat < math.inf and contradicts(ms, lat)]
        g = f
        if faster and contradicts(min(faster), lat, row_factor=f):
            g = lat / min(faster)
            data.read_at_probe[name] = data.read_at_probe.get(name, 0) + 1
        lat, p10, p90 = (x / g if x is not None else None for x in (lat, p10, p90))
        data.ops.append(OpRow(name, key, lat, tuple(sorted(sig_models.get(key, ()))), p10, p90))
    for (key, name), r in latest("overhead", "ok"):
        if ok(name):
            data.overheads_ms[name] = float(r["median_ms"])
    for (key, name), r in latest("segment", "ok"):
        sig = r["signature"] or {}
        members = sig.get("sigs") or []
        if not ok(name) or not members:
            continue
        for k, s in zip(members, sig.get("signatures") or []):
            data.add_signature(k, s)
        if not all(k in data.signatures for k in members):
            continue
        example = sig.get("example") or {}
        data.partitions.append(PartitionRow(name, tuple(members), float(r["median_ms"]),
                                            float(sig.get("io_bytes", r.get("bytes") or 0.0)), "segment",
                                            example.get("model")))
    by_hash = {g.model_hash: g for g in graphs}
    for (key, name), r in latest("model", "ok"):
        g = by_hash.get(key.split(":", 1)[1])
        if g is None or not ok(name):
            continue
        members = tuple(op.signature.hash for op in g.ops)
        if not all(k in data.signatures for k in members):
            continue
        data.partitions.append(PartitionRow(name, members, float(r["median_ms"]), float(r.get("bytes") or 0.0),
                                            "model", g.name))
    for link in st.link_rows():
        src, dst = link["src_name"], link["dst_name"]
        if src == dst:  # a target's cut cost (placer.profile.links.measure_cut_points), not a hand-off
            continue
        if not (ok(src) and ok(dst)) or (use is not None
                                         and (use.get(src), use.get(dst)) != (link["src"], link["dst"])):
            continue
        for p in link["points"]:
            ms = float(p["handoff_ms"]) - float(p.get("dst_overhead_ms", 0.0))
            data.links.append(LinkRow(src, dst, float(p["nbytes"]), ms))
        meta = link.get("meta") or {}
        lat = meta.get("handoff_only_latency_ms",
                       max(float(link["latency_ms"]) - float(meta.get("dst_overhead_ms", 0.0)), 0.0))
        data.link_fits[link_key(src, dst)] = {"latency_ms": float(lat), "ms_per_byte": float(link["ms_per_byte"])}
    return data
