"""How busy the machine was with *other* work while a measurement ran.

A profile taken while another process held a core can be 1.5-3x slow (docs/design.md, "Profiles
under contention"), and a slow row silently steers the solver. Every measurement therefore
records the share of the machine's CPU time that went to other processes during its sampling
window: from ``/proc/stat`` (all CPUs: busy time, including a hypervisor's steal) minus this
process's own CPU time (:func:`os.times`, all its threads), over wall time x cores.

It is a ratio in [0, 1]: 0 on a quiet machine, 0.5 when other work kept one of two cores busy
throughout. It counts in clock ticks (10 ms), so a window of a few tens of ms reads coarsely; the
campaign judges a row by it and re-measures contended rows (:data:`CONTENDED`).
"""

from __future__ import annotations

import os
import time

#: a measurement during which other processes used at least this share of the machine is contended
CONTENDED = 0.25


def _busy_ticks() -> int | None:
    """Busy clock ticks of all CPUs since boot (None where /proc/stat is not there)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    vals = [int(v) for v in fields[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    guest = sum(vals[8:10]) if len(vals) > 9 else 0  # guest time is already counted in user
    return sum(vals) - idle - guest


class CpuWindow:
    """``with CpuWindow() as w: ...`` then ``w.others``: the share of the machine's CPU time other
    processes used during the block (None where the platform does not tell)."""

    def __init__(self) -> None:
        self.others: float | None = None
        self.loadavg: float | None = None

    def __enter__(self) -> "CpuWindow":
        self._t0 = time.perf_counter()
        self._busy0 = _busy_ticks()
        t = os.times()
        self._own0 = t.user + t.system
        return self

    def __exit__(self, *exc) -> None:
        busy1 = _busy_ticks()
        wall = time.perf_counter() - self._t0
        t = os.times()
        own = t.user + t.system - self._own0
        try:
            self.loadavg = os.getloadavg()[0]
        except OSError:
            self.loadavg = None
        if self._busy0 is None or busy1 is None or wall <= 0:
            return
        hz = os.sysconf("SC_CLK_TCK")
        busy = (busy1 - self._busy0) / hz
        cores = os.cpu_count() or 1  # /proc/stat's first line sums every CPU of the machine
        # both counters tick at 1/hz: discount two ticks of rounding, so that a short window is not
        # judged contended on one stray tick
        self.others = min(1.0, max(0.0, (busy - own - 2.0 / hz) / (wall * cores)))


def is_contended(meta: dict | None) -> bool:
    """True if a stored row's conditions say it was measured on a busy machine."""
    return bool(meta) and bool(meta.get("contended"))


def quiet_now(seconds: float = 0.3) -> bool:
    """Whether other processes leave the machine alone right now (a short idle probe): a campaign
    re-measures rows flagged as contended only then, or it would take them again as badly."""
    with CpuWindow() as w:
        time.sleep(seconds)
    return w.others is not None and w.others < CONTENDED
