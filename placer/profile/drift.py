"""How fast the machine ran in each block of stored rows, against the others: one factor per block.

A block is a profiling session: each measurement row's ``meta`` names the campaign that stored it.
Rows stored before sessions were recorded are split at gaps of more than :data:`LEGACY_GAP_S`
between consecutive rows (one block per campaign): ``legacy``, ``legacy#1``, ... in time order.

Two kinds of observation link blocks:

* **Probes.** Every campaign run with probes (:func:`placer.profile.campaign.profile_graph`,
  ``probes=N``) measures again, in its own session, the :mod:`~placer.profile.anchors` and up to
  ``N`` ops of its graph that the store already holds from other sessions
  (:meth:`ProfileStore.add_probe`; the rows themselves are left as they are, unless a probe
  contradicts one beyond noise, see :meth:`placer.profile.engine.Engine._refresh_contradicted`).
* **Twins** (:func:`twin_observations`): near-identical op signatures stored in different blocks,
  each time divided by its op's work. The random banks the cost model learns from share no key
  with the models profiled before them, but hundreds of near-twins.

:func:`drift_scale` fits, per target, ``log t(k, b) = log mu(k) + log f(b)`` over every key (or
twin pair) observed in more than one block, by alternating medians, which a few disturbed
measurements do not move: ``f(b)`` is how much slower block ``b`` ran than the reference block
(the one that measured first). A block linked to none keeps factor 1. Dividing a row's time by its
block's factor puts it on the reference block's scale (:func:`costmodels.store.training_data_from_store`
does, by default).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

__all__ = ["CONTRADICTED", "LEGACY", "DriftScale", "contradicts", "drift_scale", "fit_session_factors",
           "row_session", "session_factors", "twin_observations"]

#: the session of rows stored without one (before sessions were recorded)
LEGACY = "legacy"

#: a probe this much faster than the stored row it re-measures, both put on one scale by their
#: sessions' factors, contradicts it: the engine measures the row again, the store reader reads it at
#: the probe's time meanwhile. One-thread repeats agree within 25% for 99% of ops on the development
#: machine (docs/design.md, "Sessions drift")
CONTRADICTED = 1.25

#: rounds of alternating medians (they settle in 3-6 on the stores measured)
_ROUNDS = 20

#: rows stored without a session this many seconds after the previous one begin a new block (a campaign
#: stores a row every second or so; the campaigns of one evening were minutes to hours apart)
LEGACY_GAP_S = 300.0

#: twins (:func:`twin_observations`): every dimension within this ratio of the other's ...
TWIN_RATIO = 1.6
#: ... and each row paired with this many nearest twins in each other block
TWINS_PER_BLOCK = 3


def contradicts(probe_ms: float, row_ms: float, probe_factor: float = 1.0, row_factor: float = 1.0) -> bool:
    """Whether a probe of ``probe_ms`` contradicts a stored row of ``row_ms`` as faster beyond noise
    (:data:`CONTRADICTED`), each first divided by its block's factor (default 1: as measured). The one
    test of the engine's refresh (:meth:`placer.profile.engine.Engine._refresh_contradicted`, on one
    scale) and of the store reader (:func:`costmodels.store.training_data_from_store`, as measured
    and on one scale)."""
    return probe_ms / probe_factor * CONTRADICTED < row_ms / row_factor


def row_session(meta) -> str:
    """The session a stored row's ``meta`` names (:data:`LEGACY` when none)."""
    s = (meta or {}).get("session") if isinstance(meta, dict) else None
    return str(s) if s else LEGACY


def fit_session_factors(observations, reference: str | None = None) -> dict[str, float]:
    """``{session: factor}`` from ``(session, key, ms)`` observations (see the module docstring).

    ``reference`` (default: :data:`LEGACY` if observed, else the first session listed) has factor 1;
    so does every session that shares no key, directly or through others, with the reference."""
    obs = [(str(s), str(k), math.log(float(ms))) for s, k, ms in observations
           if ms is not None and math.isfinite(float(ms)) and float(ms) > 0]
    if not obs:
        return {}
    sessions = list(dict.fromkeys(s for s, _, _ in obs))
    ref = reference if reference in sessions else (LEGACY if LEGACY in sessions else sessions[0])
    by_key: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for s, k, v in obs:
        by_key[k].append((s, v))
    shared = {k: v for k, v in by_key.items() if len({s for s, _ in v}) > 1}
    linked = _linked(shared, ref)
    log_f = {s: 0.0 for s in sessions}
    for _ in range(_ROUNDS):
        mu = {k: float(np.median([v - log_f[s] for s, v in vals])) for k, vals in shared.items()}
        resid: dict[str, list[float]] = defaultdict(list)
        for k, vals in shared.items():
            for s, v in vals:
                resid[s].append(v - mu[k])
        new = {s: (float(np.median(resid[s])) if s in linked and resid.get(s) else 0.0) for s in sessions}
        shift = new[ref]
        new = {s: (v - shift if s in linked else 0.0) for s, v in new.items()}
        done = max(abs(new[s] - log_f[s]) for s in sessions) < 1e-6
        log_f = new
        if done:
            break
    return {s: math.exp(v) for s, v in log_f.items()}


def _linked(shared: dict[str, list[tuple[str, float]]], ref: str) -> set[str]:
    """Sessions connected to ``ref`` through keys measured in both."""
    adj: dict[str, set[str]] = defaultdict(set)
    for vals in shared.values():
        ss = {s for s, _ in vals}
        for s in ss:
            adj[s] |= ss
    seen, todo = {ref}, [ref]
    while todo:
        for t in adj[todo.pop()] - seen:
            seen.add(t)
            todo.append(t)
    return seen


@dataclass(frozen=True)
class DriftScale:
    """How fast the machine ran in each block of a target's rows, against the reference block.

    A block is a session (:func:`row_session`); rows stored without one are split into blocks at
    gaps of more than :data:`LEGACY_GAP_S` between consecutive rows (one per campaign), named
    ``legacy``, ``legacy#1``, ... in time order."""

    #: block -> factor (how much slower than the reference block); a block linked to none is absent
    factors: dict[str, float] = field(default_factory=dict)
    #: key of a stored op row -> its block
    blocks: dict[str, str] = field(default_factory=dict)

    def row_factor(self, key: str) -> float:
        """The factor of the block of the stored row ``key`` (1.0 when unknown or unlinked)."""
        return self.factors.get(self.blocks.get(key, LEGACY), 1.0)


def session_factors(store, target) -> dict[str, float]:
    """``{block: factor}`` of ``target`` in ``store`` (:func:`drift_scale`); ``{}`` when its rows form
    one block and no probe links it to another."""
    return drift_scale(store, target).factors


def drift_scale(store, target, *, twins: bool = True, rows=None, probes=None) -> DriftScale:
    """The :class:`DriftScale` of ``target`` in ``store`` (a :class:`~placer.profile.store.ProfileStore`).

    Observations: the probes and, for the keys probed, the stored rows' own times; with ``twins``,
    every pair of near-identical op signatures stored in different blocks (:func:`twin_observations`).
    The reference is the block that measured first. ``rows``: the target's op rows as
    :meth:`~placer.profile.store.ProfileStore.measurements` returns them, when the caller has read
    them already (default: read here); ``probes`` likewise, as
    :meth:`~placer.profile.store.ProfileStore.probe_rows` returns them."""
    if rows is None:
        rows = store.measurements(target, kind="op", status="ok")
    rows = [r for r in rows if r["status"] == "ok" and r["median_ms"] and r["median_ms"] > 0]
    blocks = _blocks(rows)
    first: dict[str, float] = {}  # block -> when it first measured something here
    for r in rows:
        b = blocks[r["key"]]
        first[b] = min(first.get(b, math.inf), r["timestamp"])
    obs = []
    # a key probed at the start and the end of a session counts once, at its lower time: a slow spell
    # of seconds on a multi-thread target (the reason for second windows) hits one pass, not both
    low: dict[tuple[str, str], float] = {}
    if probes is None:
        probes = store.probe_rows(target)
    for p in probes:
        k = (p["session"], p["key"])
        low[k] = min(low.get(k, math.inf), p["median_ms"])
        first[p["session"]] = min(first.get(p["session"], math.inf), p["timestamp"])
    obs += [(s, k, ms) for (s, k), ms in low.items()]
    stored = {r["key"]: r for r in rows}
    obs += [(blocks[k], k, stored[k]["median_ms"]) for k in {k for _, k in low} if k in stored]
    if twins:
        obs += twin_observations(rows, blocks)
    if not obs:
        return DriftScale({}, blocks)
    observed = {s for s, _, _ in obs}
    ref = min((b for b in first if b in observed), key=first.get, default=None)
    return DriftScale(fit_session_factors(obs, reference=ref), blocks)


def _blocks(rows) -> dict[str, str]:
    """key -> block of each stored op row (see :class:`DriftScale`)."""
    out: dict[str, str] = {}
    legacy = sorted((r["timestamp"], r["key"]) for r in rows if row_session(r["meta"]) == LEGACY)
    n, prev = 0, None
    for ts, key in legacy:
        if prev is not None and ts - prev > LEGACY_GAP_S:
            n += 1
        prev = ts
        out[key] = LEGACY if n == 0 else f"{LEGACY}#{n}"
    for r in rows:
        out.setdefault(r["key"], row_session(r["meta"]))
    return out


def twin_observations(rows, blocks: dict[str, str]) -> list[tuple[str, str, float]]:
    """``(block, pair, ms per unit of work)`` for near-identical op signatures stored in different blocks.

    Two signatures are twins when they have the same op type, attributes, tensor ranks and dtypes, and
    every dimension within :data:`TWIN_RATIO` of the other's; each row is paired with its
    :data:`TWINS_PER_BLOCK` nearest twins in each other block. A pair's two times, each divided by its
    op's work (FLOPs, else bytes moved) to the power ``beta``, are two measurements of one thing in
    two blocks: the banks of random shapes that the cost model learns from share no key with the
    models profiled before them, but they share near-twins by the hundred.

    ``beta`` is the class's elasticity of time in work, the slope of log time on log work inside
    each block (where the machine's speed cancels), clipped to 0-1 (1 where no block has two
    members). Time is not proportional to work: on a two-thread target a small op pays the pool's
    hand-off, so dividing by the work itself biased every pair whose two ops differ in size, and a
    block of smaller ops than its twins came out slow (session 26: 10-20% on a two-thread store)."""
    # class -> (key, log1p of every dimension, (log work, log ms)) of each member
    by_class: dict[tuple, list[tuple[str, np.ndarray, tuple[float, float]]]] = defaultdict(list)
    for r in rows:
        sig = r.get("signature")
        if not isinstance(sig, dict) or "inputs" not in sig or "outputs" not in sig:
            continue
        # an optional input the op omits (a Resize without its roi) is stored as None: rank -1, no dims
        ins = [t if isinstance(t, dict) else None for t in sig["inputs"]]
        tensors = [t for t in ins if t is not None] + list(sig["outputs"])
        cls = (r.get("op_type"), json.dumps(sig.get("attrs", {}), sort_keys=True, default=str),
               tuple((len(t["shape"]), bool(t.get("const")), str(t.get("dtype"))) if t is not None
                     else (-1, False, "") for t in ins),
               tuple((len(t["shape"]), str(t.get("dtype"))) for t in sig["outputs"]))
        work = float(r.get("flops") or 0.0) or float(r.get("bytes") or 0.0)
        dims = np.log1p(np.array([max(int(d), 0) for t in tensors for d in t["shape"]], dtype=float))
        if work > 0:
            by_class[cls].append((r["key"], dims, (math.log(work), math.log(r["median_ms"]))))
    radius = math.log(TWIN_RATIO)
    obs: list[tuple[str, str, float]] = []
    for members in by_class.values():
        if len({blocks[k] for k, _, _ in members}) < 2:
            continue
        beta = _elasticity([(blocks[k], xy) for k, _, xy in members])
        per_work = [math.exp(log_ms - beta * log_work) for _, _, (log_work, log_ms) in members]
        dims = np.stack([d for _, d, _ in members])
        seen: set[tuple[int, int]] = set()  # pairs of this class, each counted once
        for i, (key, d, _) in enumerate(members):
            dist = np.abs(dims - d).max(axis=1, initial=0.0)  # ops of scalars only: no dimension, twins
            taken: dict[str, int] = defaultdict(int)
            for j in np.argsort(dist, kind="stable"):
                if dist[j] > radius:
                    break
                other = blocks[members[j][0]]
                if other == blocks[key] or taken[other] >= TWINS_PER_BLOCK:
                    continue
                taken[other] += 1
                pair = (min(i, int(j)), max(i, int(j)))
                if pair in seen:
                    continue
                seen.add(pair)
                name = f"twin{len(obs) // 2}"
                obs += [(blocks[members[a][0]], name, per_work[a]) for a in pair]
    return obs


def _elasticity(points: list[tuple[str, tuple[float, float]]]) -> float:
    """The pooled within-block slope of log time on log work of ``(block, (log work, log ms))``
    points, clipped to 0-1; 1 when no block has two points of different work."""
    by_block: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for b, xy in points:
        by_block[b].append(xy)
    sxy = sxx = 0.0
    for pts in by_block.values():
        if len(pts) < 2:
            continue
        x, y = np.array(pts).T
        sxy += float(((x - x.mean()) * (y - y.mean())).sum())
        sxx += float(((x - x.mean()) ** 2).sum())
    return min(max(sxy / sxx, 0.0), 1.0) if sxx > 1e-9 else 1.0
