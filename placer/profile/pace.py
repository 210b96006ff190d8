"""The host's pace, timed beside every measurement, and the factor that takes it out of a row.

The host of this project's 2-core machines slows whole processes by 1.3-2x in spells of seconds to
minutes, and none of the contention signals sees all of them (the core probes of
:mod:`placer.devices.core_speed` time pure Python and hashing, :mod:`placer.profile.contention`
the other processes' CPU use). A model's ops, profiled within seconds of each other, share the
pace of those seconds: per model, the second profile's rows ran 0.88-1.12x the first's
(session 39), an error no feature of an op explains.

What does see it is a runtime's own kernels. The worker times a fixed model, the
:mod:`~placer.profile.anchors` (nine small ops, about 1 ms at one thread), on a one-thread target
over the window of each op or segment measurement (:func:`paced`; :class:`PaceMeter`:
:data:`PACE_EDGE_CALLS` calls just before, one after each ~20 ms batch of the measurement's samples,
:data:`PACE_EDGE_CALLS` just after) and the row keeps the median as ``pace_ms``. Over 150 s on each
one-thread target (session 41: the anchors and nine other ops timed in turn), the anchors' pace and
each op's time correlated 0.86-0.99 over 0.5-2 s windows. Between two profiles of the same ops, the
ratio of an op's two times and of their two paces correlated 0.79-0.80 with the pace taken over the
window, 0.64-0.68 with a pace read only before and after it, and 0.45-0.51 with the median pace of
the rows measured within 3 s: the host's pace moves within a second, so a row is read at its own.

Reading a row (:func:`pace_factors`): its pace over the median pace of its target's rows in the
store; the row's times divided by that factor are its times at the target's usual pace. The cost
model's reader (``costmodels.store``) and the solver's cost table (``ProfileStore.op_costs``, and
the whole-model and segment rows of ``placer.costing``) read rows so. Rows without a pace (stored
by older versions, or by targets that are not timed so: :func:`paced`) keep factor 1.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from placer.profile.anchors import anchor_model
from placer.profile.timing import random_feeds

__all__ = ["PACE_EDGE_CALLS", "PACE_ENV", "PaceMeter", "pace_factors", "paced", "row_pace"]

#: calls of the pace model timed just before and just after each measurement (about 1 ms each at one
#: thread); one more after each batch of the measurement's samples (every ~20 ms)
PACE_EDGE_CALLS = 3
#: the kinds of target that time the pace model (in-process CPU runtimes: the anchors compile in
#: 30-150 ms and run in about 1 ms; untuned TVM would take seconds to build them, remote targets time
#: themselves). Kinds, not runtimes: a plug-in built on one of them (the test targets that crash on
#: one op type on purpose) is not trusted to run the anchors, whose crash would end every measurement
PACED_KINDS = ("onnxruntime", "openvino", "openvino-bf16")


#: ``$PLACER_PACE=0``: no pace timed beside measurements (the test suite's own: its profiles run on a
#: machine its parallel workers keep busy, with timing windows of a few ms, where the anchors' compile
#: and calls had added 6% to its summed test time; the pace's own tests turn it on)
PACE_ENV = "PLACER_PACE"


def paced(target: Any) -> bool:
    """Whether measurements on ``target`` are timed with the pace model beside them: its kind is one of
    :data:`PACED_KINDS`, it runs one thread, and ``$PLACER_PACE`` is not "0". One thread: what was
    measured (session 41). On more, the anchors' own thread pool and the measured session's take turns
    on the same cores: beside a whole model timed as a one-partition plan runs it (ONNX Runtime's pool
    spinning between runs, ``Target.compile_alone``) the anchors ran 2-3x their usual time, which read
    squeezenet's two-thread row at a third of what it measured. A one-thread whole model timed alone
    has no pool to spin, and carries the pace as an op does (session 42)."""
    threads = getattr(getattr(target, "spec", None), "threads", 1)
    return (getattr(target, "kind", "") in PACED_KINDS and threads == 1
            and os.environ.get(PACE_ENV, "").strip() != "0")


class PaceMeter:
    """Times the anchors model on one target over a measurement's window: :meth:`start` (a few calls),
    :meth:`sample` after each batch of the measurement's samples (one call), :meth:`finish` (a few
    more) -> the median ms of every call, or None where the target cannot run the anchors (then never
    tried again)."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self._compiled = None
        self._feeds: dict | None = None
        self.failed = not paced(target)
        self.readings: list[float] = []

    def _ready(self) -> bool:
        if self._compiled is None and not self.failed:
            try:
                model = anchor_model()
                self._compiled = self.target.compile(model)
                self._feeds = random_feeds(model, 0)
                run = getattr(self._compiled, "run_shared", self._compiled.run)
                for _ in range(2):  # first calls allocate
                    run(self._feeds)
            except Exception:  # noqa: BLE001 - no pace on this target; the measurement goes on without it
                self.failed, self._compiled = True, None
        return self._compiled is not None

    def _take(self, calls: int) -> None:
        if not self._ready():
            return
        run = getattr(self._compiled, "run_shared", self._compiled.run)
        try:
            for _ in range(calls):
                t0 = time.perf_counter_ns()
                run(self._feeds)
                self.readings.append((time.perf_counter_ns() - t0) / 1e6)
        except Exception:  # noqa: BLE001 - as above
            self.close()
            self.failed, self.readings = True, []

    def start(self) -> None:
        """A new measurement's window opens: :data:`PACE_EDGE_CALLS` calls."""
        self.readings = []
        self._take(PACE_EDGE_CALLS)

    def sample(self) -> None:
        """One call, between two batches of the measurement's samples."""
        self._take(1)

    def finish(self) -> float | None:
        """The window closes: :data:`PACE_EDGE_CALLS` more calls; the median ms of all of them, or None."""
        self._take(PACE_EDGE_CALLS)
        return float(np.median(self.readings)) if self.readings and not self.failed else None

    def close(self) -> None:
        compiled, self._compiled = self._compiled, None
        if compiled is not None:
            with contextlib.suppress(Exception):  # closing is best effort
                compiled.close()


def row_pace(row: Mapping[str, Any]) -> float | None:
    """The pace a stored row (a store row dict or a :class:`~placer.profile.store.Measurement`) was
    measured at, or None."""
    meta = row.get("meta") if isinstance(row, Mapping) else getattr(row, "meta", None)
    v = (meta or {}).get("pace_ms")
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if v > 0 and math.isfinite(v) else None


#: rows of a target needed to fit how its pace grows with the size of what was measured beside it
#: (:func:`pace_factors`); with fewer, or sizes within a decade, the reference is the median pace
PACE_FIT_MIN_ROWS = 20


def pace_factors(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """``{(target hash, key): factor}`` for the rows (store row dicts: ``target``, ``key``, ``meta``,
    ``median_ms``) that carry a pace: the row's pace over the pace its target's rows read beside a
    measurement of its size. Divide a row's times by its factor to read them at the target's usual
    pace. A row's own pace, not its neighbours': the median of the rows measured within 3 s of it
    followed the op's time less (the second profile's time over the first's correlated 0.45-0.51 with
    it, against 0.79-0.80 with the row's own pace: session 41), as the host's pace moves within a second.

    Of its size: the anchors run between batches of the measurement's samples, and a bigger workload
    leaves them colder caches. On session 50's AMD EPYC the log of the pace grew with the log of the
    row's time (correlation 0.15-0.50 per target; whole models read paces 1.53-2.29 ms against 1.42-1.96
    for the median op), so dividing by the pace over the median pace priced every one-thread whole
    model 10-17% below what the bench then measured (12 rows: median |error| 10.0%, 3.8% undivided).
    The reference is therefore a line fitted, per target, to log pace against log time (least squares
    over the rows within 3 MADs of the median pace, the slope at least 0): 4.5% on those rows. Rows
    without a time, targets with fewer than :data:`PACE_FIT_MIN_ROWS` rows or with times within one
    decade: the median pace, as before.

    Whole models (``kind`` "model") lie beyond the ops' sizes, where the line extrapolates: their
    reference is the median pace of the target's whole-model rows (one row: factor 1). On the two
    comparisons of session 50 (27 one-thread whole models against the bench) that was 4.7% / 8.3% and
    5.3% / 10.0% (median / p90 |error|), against 3.8% / 11.0% and 8.2% / 13.8% undivided and 4.5% /
    11.8% and 9.4% / 16.5% on the line of the ops."""
    by_target: dict[tuple[str, bool], list[tuple[str, float, float | None]]] = defaultdict(list)
    for r in rows:
        p = row_pace(r)
        if p is not None:
            ms = r.get("median_ms")
            lm = math.log(ms) if isinstance(ms, (int, float)) and ms > 0 and math.isfinite(ms) else None
            by_target[(r["target"], r.get("kind") == "model")].append((r["key"], math.log(p), lm))
    out: dict[tuple[str, str], float] = {}
    for (target, whole), pts in by_target.items():
        ref = float(np.median([lp for _, lp, _ in pts]))
        line = None if whole else _pace_line([(lp, lm) for _, lp, lm in pts if lm is not None], ref)
        for key, lp, lm in pts:
            expected = ref if line is None or lm is None else line[0] + line[1] * lm
            out[(target, key)] = float(math.exp(lp - expected))
    return out


def _pace_line(pts: list[tuple[float, float]], ref: float) -> tuple[float, float] | None:
    """``(intercept, slope)`` of log pace against log time over ``pts`` (log pace, log ms), or None
    where they cannot tell (:func:`pace_factors`)."""
    if len(pts) < PACE_FIT_MIN_ROWS:
        return None
    lp = np.array([p for p, _ in pts])
    lm = np.array([m for _, m in pts])
    if lm.max() - lm.min() < math.log(10.0):
        return None
    mad = float(np.median(np.abs(lp - ref))) or 1e-9
    keep = np.abs(lp - ref) <= 3 * 1.4826 * mad  # a spell's readings do not tilt the line
    if keep.sum() < PACE_FIT_MIN_ROWS or np.ptp(lm[keep]) < math.log(10.0):
        return None
    slope, intercept = np.polyfit(lm[keep], lp[keep], 1)
    if slope <= 0:
        return None
    return float(intercept), float(slope)
