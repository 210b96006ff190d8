"""What makes a study safe to share between tune workers on several hosts.

A study's objective values are measured latencies (or throughputs): they compare only between
trials measured on the same hardware and runtimes. The study name therefore carries a hardware
tag, a hash of the fingerprints of the targets the workers measure on (CPU model, runtime versions,
threads and cores): workers on identical machines join one study; a worker on different hardware
(another CPU, another ONNX Runtime) gets its own study in the same database instead of mixing its
measurements into another's objective. Each trial records who measured it (host, pid, hardware tag,
per-target fingerprint hashes) when it starts, so a study can always be audited.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from typing import Any, Sequence

from placer.errors import PlacerError
from placer.plan import Plan

#: a plan larger than this (canonical JSON) is not stored with its trial (its key always is)
MAX_PLAN_CHARS = 2_000_000


def hardware_tag(targets: Sequence[Any]) -> str:
    """8 hex digits naming the hardware and runtimes of ``targets`` (independent of their order)."""
    blob = "\n".join(sorted(f"{t.name}={t.fingerprint_hash()}" for t in targets))
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


def study_name(model_hash: str, targets: Sequence[Any], objective: str) -> str:
    """``placer-<model>-<hardware>-<objective>``: one study per model, hardware and objective."""
    return f"placer-{model_hash[:12]}-{hardware_tag(targets)}-{objective}"


def worker_attrs(targets: Sequence[Any]) -> dict[str, Any]:
    """What a trial records about the worker that measures it (set when the trial starts)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "hardware": hardware_tag(targets),
            "fingerprints": {t.name: t.fingerprint_hash() for t in targets}}


def mark_worker(trial, targets: Sequence[Any]) -> None:
    """Record :func:`worker_attrs` on ``trial`` (a user attribute named ``worker``)."""
    trial.set_user_attr("worker", worker_attrs(targets))


def plan_attrs(plan) -> dict[str, Any]:
    """The trial attributes that make its plan reproducible from the study alone: the plan's
    canonical JSON (``plan``), unless it is larger than :data:`MAX_PLAN_CHARS`."""
    if plan is None:
        return {}
    text = plan.dumps()
    return {"plan": text} if len(text) <= MAX_PLAN_CHARS else {}


def best_plan(study):
    """``(trial, Plan)`` of the best finished trial of ``study`` (a plan re-read from the study, e.g.
    by another host); PlacerError when no finished trial stored its plan."""
    import optuna


    done = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if isinstance(t.user_attrs.get("plan"), str)]
    if not done:
        raise PlacerError(f"study {study.study_name!r}: no finished trial stored its plan")
    sign = -1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
    best = min(done, key=lambda t: (sign * t.value, t.number))
    return best, Plan.from_json(json.loads(best.user_attrs["plan"]))
