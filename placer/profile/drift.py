"""How fast the machine ran in each profiling session, against the others: one factor per session.

Every campaign run with probes (:func:`placer.profile.campaign.profile_graph`, ``probes=N``)
measures again, in its own session, the :mod:`~placer.profile.anchors` and up to ``N`` ops of
its graph that the store already holds from other sessions (:meth:`ProfileStore.add_probe`;
the rows themselves are left as they are, unless a probe contradicts one beyond noise, see
:meth:`placer.profile.engine.Engine._refresh_contradicted`). Each measurement row's ``meta``
names its session; rows stored before sessions were recorded form one session, :data:`LEGACY`.

:func:`session_factors` fits, per target, ``log t(k, s) = log mu(k) + log f(s)`` over every key
measured in more than one session (the probes, and the stored rows of the keys probed) by
alternating medians, which a few disturbed measurements do not move: ``f(s)`` is how much slower
session ``s`` ran than the reference session (:data:`LEGACY` when it has observations, else the
session that measured first: the one that stored the rows a later session probed). A session linked to no other by a common key keeps factor 1. Dividing a
row's time by its session's factor puts it on the reference session's scale
(:func:`costmodels.store.training_data_from_store` does, by default).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

__all__ = ["LEGACY", "fit_session_factors", "row_session", "session_factors"]

#: the session of rows stored without one (before sessions were recorded)
LEGACY = "legacy"

#: rounds of alternating medians (they settle in 3-6 on the stores measured)
_ROUNDS = 20


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


def session_factors(store, target) -> dict[str, float]:
    """The session factors of ``target`` in ``store`` (a :class:`~placer.profile.store.ProfileStore`):
    its probes and, for the keys probed, the stored rows' own times and sessions. ``{}`` without probes."""
    probes = store.probe_rows(target)
    if not probes:
        return {}
    # a key probed at the start and the end of a session counts once, at its lower time: a slow spell
    # of seconds on a multi-thread target (the reason for second windows) hits one pass, not both
    low: dict[tuple[str, str], float] = {}
    for p in probes:
        k = (p["session"], p["key"])
        low[k] = min(low.get(k, math.inf), p["median_ms"])
    obs = [(s, k, ms) for (s, k), ms in low.items()]
    seen = {}  # session -> when it first measured something here
    for p in probes:
        seen[p["session"]] = min(seen.get(p["session"], math.inf), p["timestamp"])
    stored = store.get_many({p["key"] for p in probes}, target)
    for k, m in stored.items():
        if m.ok and m.median_ms:
            s = row_session(m.meta)
            obs.append((s, k, m.median_ms))
            seen[s] = min(seen.get(s, math.inf), m.timestamp)
    return fit_session_factors(obs, reference=LEGACY if LEGACY in seen else min(seen, key=seen.get))
