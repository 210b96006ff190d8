"""How fast each core runs right now, against the best this process has seen it run.

The host of a virtual machine can give one of its cores to other work (a busy hyperthread sibling,
an oversubscribed host) without the guest seeing it: ``/proc/stat`` shows neither busy nor steal
time. On this project's 2-core machines a fixed pure-Python loop pinned to one core, on an idle
machine, took 4.4 ms or 7.0 ms (1.6x) in spells of 1 to 15 s, on either core, a third of the time
over a minute (session 11); a 2-thread runtime then runs at the slow core's pace.
:func:`per_core_slowdown` times that loop (about 1 ms) on each core from a helper thread pinned there.

The host can also stop running the cores *at the same time* while each, probed alone, is as fast as
ever: in such spells ONNX Runtime at 2 threads ran squeezenet in 3.1-3.4 ms, its 1-thread time,
against 1.6-1.7 ms outside them (session 19; session 13 saw them and found no probe). So
:func:`parallel_slowdown` times fixed native work (SHA-256 of a 128 KiB buffer, which releases the
GIL) on every core at once, one pinned thread each (about 0.3 ms), against the best time this
process has seen for it. Both run their work untimed first (:data:`_WARM_RUNS`): a core that was
idle runs its first milliseconds slower, and the bench probes right after letting the cores go idle
(session 44, a probe 30 ms after a sleep over the same work timed back to back just after it,
median / p90: the loop 1.15x / 1.52x cold, 1.04x / 1.23x after one untimed loop, 1.02x / 1.10x after
three; the parallel probe 1.20x / 2.04x cold, 1.05x / 1.34x after two untimed rounds).
:func:`core_slowdown`, the worse of the two, is what the profile's measurement windows
(:mod:`placer.profile.contention`) and the plan bench (:mod:`placer.run.bench`), both above this
layer, read.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

__all__ = ["SLOWED", "core_reference", "core_slowdown", "parallel_slowdown", "per_core_slowdown",
           "process_cores", "seed_core_reference", "warm_core_probe"]

#: a core whose reference loop takes this many times its best time in this process is slowed by the
#: host (:func:`core_slowdown`): measurements on it are disturbed
SLOWED = 1.3
#: iterations of the reference loop (about 1 ms of pure Python on the development machine)
_PROBE_ITERATIONS = 20_000
#: untimed runs of a probe's work before it is timed: an idle core wakes up slow (module docstring)
_WARM_RUNS = 2
#: the best time of the reference loop seen on each core in this process (seconds)
_best_probe_s: dict[int, float] = {}
_probe_lock = threading.Lock()
#: the parallel probe's work per core: SHA-256 of this buffer (hashlib releases the GIL over 2 KiB),
#: :data:`_PARALLEL_REPS` times (about 0.3 ms on the development machine)
_PARALLEL_BUFFER = bytes(128 * 1024)
_PARALLEL_REPS = 4
#: the best time of the parallel probe seen on each set of cores in this process (seconds)
_best_parallel_s: dict[frozenset[int], float] = {}


def _reference_loop_s() -> float:
    t0 = time.perf_counter()
    acc = 0
    for i in range(_PROBE_ITERATIONS):
        acc += i * i
    return time.perf_counter() - t0


def core_slowdown(cores: frozenset[int] | None = None, repeat: int = 1) -> float | None:
    """How much slower ``cores`` (default: this process's) run than the fastest this process has seen
    them run: the worse of :func:`per_core_slowdown` (the slowest core, probed alone) and, with two
    cores or more, :func:`parallel_slowdown` (the cores together). 1.0 when they run at their best;
    None where threads cannot be pinned."""
    alone = per_core_slowdown(cores, repeat)
    if alone is None:
        return None
    return max(alone, parallel_slowdown(cores, repeat) or 1.0)


def per_core_slowdown(cores: frozenset[int] | None = None, repeat: int = 1) -> float | None:
    """How much slower the slowest of ``cores`` (default: this process's) runs a fixed pure-Python
    loop than the fastest this process has seen it run there: 1.0 when every core runs at its best.

    The loop runs in a helper thread pinned to each core in turn (the caller's own affinity is left
    alone), :data:`_WARM_RUNS` times untimed, then ``repeat`` times, keeping the fastest; the first
    probe of a core is its reference, so the figure means something once a quiet moment has been
    seen (:func:`warm_core_probe`).
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
            for _ in range(_WARM_RUNS):
                _reference_loop_s()
            times[c] = min(_reference_loop_s() for _ in range(max(1, repeat)))

    with _probe_lock:
        t = threading.Thread(target=probe, name="placer-core-probe", daemon=True)
        t.start()
        t.join()
        if not times:
            return None
        return max([1.0] + [_against_best(_best_probe_s, c, s) for c, s in times.items()])


def _keep_best(table: dict, key, seconds: float) -> float:
    """Record ``seconds`` in ``table`` under ``key`` when it beats the best there; the best."""
    best = min(table.get(key, seconds), seconds)
    table[key] = best
    return best


def _against_best(table: dict, key, seconds: float) -> float:
    """``seconds`` over the best time in ``table`` under ``key`` (``seconds`` included): >= 1.0."""
    best = _keep_best(table, key, seconds)
    return seconds / best if best > 0 else 1.0


def _parallel_probe_s(cores: list[int]) -> float | None:
    """Seconds until every one of ``cores`` has done the parallel probe's work, all started at once
    (one helper thread pinned to each; each times its own work from a shared start); None where a
    thread cannot be pinned."""
    took: dict[int, float] = {}
    start = threading.Barrier(len(cores))

    def work(c: int) -> None:
        try:
            os.sched_setaffinity(0, {c})  # 0: this (helper) thread
        except OSError:
            start.abort()
            return
        for _ in range(_WARM_RUNS * _PARALLEL_REPS):
            hashlib.sha256(_PARALLEL_BUFFER).digest()
        try:
            start.wait()
        except threading.BrokenBarrierError:
            return
        t0 = time.perf_counter()
        for _ in range(_PARALLEL_REPS):
            hashlib.sha256(_PARALLEL_BUFFER).digest()
        took[c] = time.perf_counter() - t0

    threads = [threading.Thread(target=work, args=(c,), name="placer-parallel-probe", daemon=True)
               for c in cores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return max(took.values()) if len(took) == len(cores) else None


def parallel_slowdown(cores: frozenset[int] | None = None, repeat: int = 1) -> float | None:
    """How much slower ``cores`` (default: this process's) do fixed native work all at once than the
    fastest this process has seen them do it: 1.0 when they run side by side at their best.

    A multi-thread runtime needs its cores at the same time; this reads high when the host runs them
    one after the other (each, probed alone by :func:`per_core_slowdown`'s loop, at its usual speed).
    On the development machine, in a 200-s trace (``experiments/spell_trace.py``): 1.21 / 1.34 / 1.43
    (5th, 10th percentile, median) while ONNX Runtime at 2 threads ran at its 1-thread pace, under
    1.27 for 90% of the rest. ``repeat`` times, keeping the fastest. None with fewer than two cores
    or where threads cannot be pinned."""
    cores = frozenset(cores if cores is not None else process_cores())
    if len(cores) < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    with _probe_lock:
        runs = [_parallel_probe_s(sorted(cores)) for _ in range(max(1, repeat))]
        runs = [r for r in runs if r is not None]
        if not runs:
            return None
        return _against_best(_best_parallel_s, cores, min(runs))


def core_reference() -> dict[str, float]:
    """Each core's best reference-loop time seen in this process (JSON-ready: core id as a string),
    and each set of cores' best parallel-probe time (key: the core ids joined by ``+``), to hand to
    another process (:func:`seed_core_reference`): a worker that starts in a slow spell would
    otherwise take the spell as its reference."""
    with _probe_lock:
        return {**{str(c): s for c, s in _best_probe_s.items()},
                **{"+".join(map(str, sorted(cs))): s for cs, s in _best_parallel_s.items()}}


def seed_core_reference(reference) -> None:
    """Merge another process's :func:`core_reference` into this one's (the faster time wins)."""
    if not isinstance(reference, dict):
        return
    with _probe_lock:
        for c, s in reference.items():
            try:
                cores, best = frozenset(int(x) for x in str(c).split("+")), float(s)
            except (TypeError, ValueError):
                continue
            if best <= 0:
                continue
            if len(cores) == 1:
                _keep_best(_best_probe_s, next(iter(cores)), best)
            else:
                _keep_best(_best_parallel_s, cores, best)


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
