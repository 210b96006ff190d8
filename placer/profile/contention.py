"""How busy the machine was with *other* work while a measurement ran.

A profile taken while another process held a core can be 1.5-3x slow (docs/design.md, "Profiles
under contention"), and a slow row silently steers the solver. Every measurement therefore
records the share of CPU time on *the cores this process may run on* (its affinity) that went to
other processes during its sampling window: from ``/proc/stat``'s per-CPU lines for those cores
(busy time, including a hypervisor's steal) minus this process's own CPU time (:func:`os.times`,
all its threads), over wall time x cores. Work on cores outside the affinity does not count: a
worker pinned to core 0 (a one-core "host", experiments/bench_scaleout.py) is not disturbed by
another worker pinned to core 1, and is not told it was.

It is a ratio in [0, 1]: 0 on quiet cores, 0.5 when other work kept one of two cores busy
throughout. It counts in clock ticks (10 ms), so a window of a few tens of ms reads coarsely; the
campaign judges a row by it and re-measures contended rows (:data:`CONTENDED`).

A virtual machine's cores can also slow down with nothing in ``/proc/stat`` to show it: the host
gives the physical core to another machine's work (a busy hyperthread sibling, oversubscription),
and the guest reports neither busy nor steal time. On this project's 2-core machines a fixed
pure-Python loop pinned to one core, idle machine, took 4.4 ms or 7.0 ms (1.6x) in spells of 1 to
15 s, on either core, a third of the time over a minute (session 11); a 2-thread runtime then runs
at the slow core's pace, which is what the "slow spells" of 2-thread profiles and benches were. So
the window also times that loop on each of its cores as it opens and closes
(:func:`placer.devices.core_speed.core_slowdown`): ``slowdown`` is the worst core's time over the
best this process has seen on it, and a window whose slowdown reaches :data:`SLOWED` is disturbed
like a contended one.
"""

from __future__ import annotations

import os
import time

from placer.devices.core_speed import (
    SLOWED,
    core_reference,
    core_slowdown,
    process_cores,
    seed_core_reference,
    warm_core_probe,
)

__all__ = ["CONTENDED", "SLOWED", "CpuWindow", "busy_ticks_of", "core_reference", "core_slowdown", "disturbance",
           "disturbed", "is_contended", "quiet_now", "seed_core_reference", "warm_core_probe"]

#: a measurement during which other processes used at least this share of the machine is contended
CONTENDED = 0.25


def disturbed(contention: float | None, slowdown: float | None) -> bool:
    """Whether a measurement's conditions make it untrustworthy: other processes took
    :data:`CONTENDED` of the machine, or the host slowed a core by :data:`SLOWED`."""
    return (contention or 0.0) >= CONTENDED or (slowdown or 1.0) >= SLOWED


def disturbance(contention: float | None, slowdown: float | None) -> float:
    """How disturbed a measurement was, for keeping the least disturbed of several: each signal over
    its threshold, the worse of the two (1.0 = at a threshold)."""
    return max((contention or 0.0) / CONTENDED, ((slowdown or 1.0) - 1.0) / (SLOWED - 1.0))


def _busy(vals: list[int]) -> int:
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    guest = sum(vals[8:10]) if len(vals) > 9 else 0  # guest time is already counted in user
    return sum(vals) - idle - guest


def _busy_ticks(cores: frozenset[int]) -> int | None:
    """Busy clock ticks since boot of the CPUs in ``cores`` (None where /proc/stat does not list
    them: not Linux, or a CPU missing from the file)."""
    try:
        with open("/proc/stat") as f:
            return busy_ticks_of(f.read(), cores)
    except OSError:
        return None


def busy_ticks_of(proc_stat: str, cores: frozenset[int]) -> int | None:
    """Busy ticks of the CPUs in ``cores`` in the text of ``/proc/stat`` (None if one is missing)."""
    total, seen = 0, set()
    for line in proc_stat.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu") or fields[0] == "cpu":
            continue
        try:
            cpu = int(fields[0][3:])
        except ValueError:
            continue
        if cpu in cores:
            total += _busy([int(v) for v in fields[1:]])
            seen.add(cpu)
    return total if seen == set(cores) else None


class CpuWindow:
    """``with CpuWindow() as w: ...`` then ``w.others``: the share of CPU time on this process's
    cores that other processes used during the block (None where the platform does not tell)."""

    def __init__(self) -> None:
        self.others: float | None = None
        self.loadavg: float | None = None
        #: the worst core slowdown seen as the window opened and closed (:func:`core_slowdown`)
        self.slowdown: float | None = None

    def __enter__(self) -> "CpuWindow":
        self._cores = process_cores()
        self._slow0 = core_slowdown(self._cores)
        self._t0 = time.perf_counter()
        self._busy0 = _busy_ticks(self._cores)
        t = os.times()
        self._own0 = t.user + t.system
        return self

    def __exit__(self, *exc) -> None:
        busy1 = _busy_ticks(self._cores)
        wall = time.perf_counter() - self._t0
        t = os.times()
        own = t.user + t.system - self._own0
        ends = [x for x in (self._slow0, core_slowdown(self._cores)) if x is not None]
        self.slowdown = max(ends) if ends else None
        try:
            self.loadavg = os.getloadavg()[0]
        except OSError:
            self.loadavg = None
        if self._busy0 is None or busy1 is None or wall <= 0:
            return
        hz = os.sysconf("SC_CLK_TCK")
        busy = (busy1 - self._busy0) / hz
        cores = len(self._cores)
        # both counters tick at 1/hz: discount two ticks of rounding, so that a short window is not
        # judged contended on one stray tick
        self.others = min(1.0, max(0.0, (busy - own - 2.0 / hz) / (wall * cores)))


def is_contended(meta: dict | None) -> bool:
    """True if a stored row's conditions say it was measured on a busy machine."""
    return bool(meta) and bool(meta.get("contended"))


def quiet_now(seconds: float = 0.3) -> bool:
    """Whether other processes leave the machine alone and no core is slowed right now (a short idle
    probe): a campaign re-measures rows flagged as contended only then, or it would take them again
    as badly."""
    with CpuWindow() as w:
        time.sleep(seconds)
    return w.others is not None and not disturbed(w.others, w.slowdown)
