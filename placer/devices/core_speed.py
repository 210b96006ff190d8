"""How fast each core runs right now, against the best this process has seen it run.

The host of a virtual machine can give one of its cores to other work (a busy hyperthread sibling,
an oversubscribed host) without the guest seeing it: ``/proc/stat`` shows neither busy nor steal
time. On this project's 2-core machines a fixed pure-Python loop pinned to one core, on an idle
machine, took 4.4 ms or 7.0 ms (1.6x) in spells of 1 to 15 s, on either core, a third of the time
over a minute (session 11); a 2-thread runtime then runs at the slow core's pace.
:func:`core_slowdown` times that loop (about 1 ms) on each core from a helper thread pinned there.
Used by the profile's measurement windows (:mod:`placer.profile.contention`) and by the plan bench
(:mod:`placer.run.bench`), both above this layer.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["SLOWED", "core_reference", "core_slowdown", "process_cores", "seed_core_reference",
           "warm_core_probe"]

#: a core whose reference loop takes this many times its best time in this process is slowed by the
#: host (:func:`core_slowdown`): measurements on it are disturbed
SLOWED = 1.3
#: iterations of the reference loop (about 1 ms of pure Python on the development machine)
_PROBE_ITERATIONS = 20_000
#: the best time of the reference loop seen on each core in this process (seconds)
_best_probe_s: dict[int, float] = {}
_probe_lock = threading.Lock()


def _reference_loop_s() -> float:
    t0 = time.perf_counter()
    acc = 0
    for i in range(_PROBE_ITERATIONS):
        acc += i * i
    return time.perf_counter() - t0


def core_slowdown(cores: frozenset[int] | None = None, repeat: int = 1) -> float | None:
    """How much slower the slowest of ``cores`` (default: this process's) runs a fixed pure-Python
    loop than the fastest this process has seen it run there: 1.0 when every core runs at its best.

    The loop runs in a helper thread pinned to each core in turn (the caller's own affinity is left
    alone), ``repeat`` times each, keeping the fastest; the first probe of a core is its reference,
    so the figure means something once a quiet moment has been seen (:func:`warm_core_probe`).
    None where threads cannot be pinned."""
    cores = sorted(cores if cores is not None else process_cores())
    if not cores or not hasattr(os, "sched_setaffinity"):
        return None
    times: dict[int, float] = {}

    def probe() -> None:
        for c in cores:
            try:
                os.sched_setaffinity(0, {c})  # 0: this (helper) thread
            except OSError:
                continue
            times[c] = min(_reference_loop_s() for _ in range(max(1, repeat)))

    with _probe_lock:
        t = threading.Thread(target=probe, name="placer-core-probe", daemon=True)
        t.start()
        t.join()
        if not times:
            return None
        worst = 1.0
        for c, s in times.items():
            best = min(_best_probe_s.get(c, s), s)
            _best_probe_s[c] = best
            worst = max(worst, s / best if best > 0 else 1.0)
    return worst


def core_reference() -> dict[str, float]:
    """Each core's best reference-loop time seen in this process (JSON-ready: core id as a string),
    to hand to another process (:func:`seed_core_reference`): a worker that starts in a slow spell
    would otherwise take the spell as its reference."""
    with _probe_lock:
        return {str(c): s for c, s in _best_probe_s.items()}


def seed_core_reference(reference) -> None:
    """Merge another process's :func:`core_reference` into this one's (the faster time wins)."""
    if not isinstance(reference, dict):
        return
    with _probe_lock:
        for c, s in reference.items():
            try:
                core, best = int(c), float(s)
            except (TypeError, ValueError):
                continue
            if best > 0:
                _best_probe_s[core] = min(_best_probe_s.get(core, best), best)


def warm_core_probe(rounds: int = 5) -> None:
    """Take each core's reference time a few times (its best is the reference of later probes)."""
    for _ in range(rounds):
        core_slowdown(repeat=2)


def process_cores() -> frozenset[int]:
    """The CPUs this process may run on."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))
