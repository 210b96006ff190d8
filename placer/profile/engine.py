"""The task engine of the profiling campaigns: which measurements to take, taking them, storing them.

:class:`Engine` runs a list of :class:`Task` (a store key on a target, and how to build its model):

* a stored row is reused (``cached``) unless it failed and ``retry_failed`` is set, or it was
  flagged as measured on a busy machine and ``retry_contended`` is set; the store is checked
  again right before each measurement (another campaign may share it);
* a statically unsupported task is stored ``unsupported`` without running;
* the others go, grouped by target, to one worker per target (:mod:`placer.profile.supervisor`),
  one request at a time. A reply taken while other processes kept the machine busy
  (:data:`placer.profile.contention.CONTENDED`) or, on a multi-thread target, the host slowed one
  of its cores (:data:`placer.devices.core_speed.SLOWED`) is taken again, up to
  ``TimingConfig.contended_attempts`` times, and the least disturbed one kept (flagged if still
  disturbed);
* a worker that dies or times out stores ``crash`` / ``timeout``; one that cannot start twice in
  a row fails the target's remaining tasks (not stored: not the ops' fault); a target whose device
  became unreachable has its remaining tasks skipped (not stored) and is reported once, so that a
  later run resumes them.

Every result is written in its own transaction. The counts go into a
:class:`~placer.profile.results.CampaignResult`.
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placer.errors import PlacerError
from placer.profile.contention import (
    core_reference,
    disturbance,
    disturbed,
    is_contended,
    seed_core_reference,
)
from placer.profile.drift import contradicts, drift_scale
from placer.profile.pace import row_pace
from placer.profile.progress import progress_bar
from placer.profile.results import CampaignResult, TargetTotals
from placer.profile.store import WINDOW_DUE, Measurement, ProfileStore
from placer.profile.supervisor import InProcessWorker, WorkerDied, WorkerProcess
from placer.profile.timing import TimingConfig

__all__ = ["ATTEMPTS_ENV", "CONTENDED_ATTEMPTS", "FAILED", "ONE_THREAD_WINDOWS_ENV", "Engine", "Task",
           "attempts_cap", "one_thread_windows"]

#: the statuses of a measurement that failed (re-measured with ``retry_failed``)
FAILED = ("error", "timeout", "crash")

#: a measurement taken while other processes kept the machine busy is tried this many times in all
CONTENDED_ATTEMPTS = TimingConfig().contended_attempts  # the default (TimingConfig.contended_attempts)

#: ``$PLACER_CONTENDED_ATTEMPTS``: at most this many attempts per disturbed measurement, whatever the
#: timing asks (an integer >= 1): 1 on a machine kept busy on purpose (the test suite's own workers),
#: where a re-take cannot escape the load and only multiplies the profiling's work
ATTEMPTS_ENV = "PLACER_CONTENDED_ATTEMPTS"

#: ``$PLACER_ONE_THREAD_WINDOWS=0``: one-thread targets keep their first window (no second windows on
#: probation, :data:`ONE_THREAD_PROBATION`) unless a campaign asks for ``second_window="all"``. On a
#: machine kept busy on purpose (the test suite's own workers) every probation goes on, and a small
#: campaign never reaches its end: session 36's suite took 659 s with them, against 539 s before.
ONE_THREAD_WINDOWS_ENV = "PLACER_ONE_THREAD_WINDOWS"


def one_thread_windows() -> bool:
    """False when ``$PLACER_ONE_THREAD_WINDOWS`` is "0"."""
    return os.environ.get(ONE_THREAD_WINDOWS_ENV, "").strip() != "0"


def attempts_cap() -> int | None:
    """``$PLACER_CONTENDED_ATTEMPTS`` when set to an integer >= 1, else None (no cap)."""
    try:
        value = int(os.environ.get(ATTEMPTS_ENV, ""))
    except ValueError:
        return None
    return value if value >= 1 else None


#: re-takes stop for the rest of a campaign once RETAKE_PROBATION disturbed measurements were taken
#: again and fewer than RETAKE_MIN_ESCAPE of them came out undisturbed: a host that slows whole
#: processes in spells of seconds outlasts a re-take 0.05-0.1 s later (session 35's Intel Xeon:
#: `placer tune zoo:squeezenet --budget 2m` took 178 measurements again and still stored 79
#: disturbed; its profiling took 87 s of the 120 and no trial ran). The rows stay flagged, and a
#: later campaign measures them again.
RETAKE_PROBATION = 12
RETAKE_MIN_ESCAPE = 0.25


#: measurements taken in three windows, the lowest median kept: a target's call overhead, and a whole
#: model, whose one 0.03-0.4 s window a burst of other load can slow by 1.3-1.6x on both cores (t2
#: profiles in the zoo comparison: gpt-tiny on OpenVINO 1.05 ms profiled vs 0.64 measured later)
_REPEATED_KINDS = ("overhead", "model")

#: kinds a target measures again in a second window, later and in a fresh worker; the lower median is
#: kept (a one-thread target on probation: ONE_THREAD_PROBATION). OpenVINO on both cores ran some ops
#: 3-6x slow (a 1x256x56x56 Relu 1.38 ms against 0.22 ms), steadily within a measurement (p10-p90
#: within 5%) and with no other process busy, in bursts of seconds after some worker starts. The whole
#: model too (session 11): its three windows are consecutive, and a spell of the host slowing a core
#: lasts up to ~15 s (squeezenet's on ONNX Runtime t2 stored at 5.33 ms, 3.74 ms in the session after)
_SECOND_WINDOW_KINDS = ("op", "segment", "model")

#: a second window this much faster than the first means the first one was slow (counted, reported)
SLOW_FIRST_WINDOW = 1.25

#: one-thread targets take second windows on probation: ONE_THREAD_PROBATION of them, then more as long
#: as at least ONE_THREAD_MIN_DISAGREE of those taken disagreed with their first window by more than
#: WINDOWS_DISAGREE. A quiet host repeats a one-thread op within 10% for 96% of ops (the AMD
#: EPYC, session 10), so its first windows stand for the price of 16 measurements; session 36's Intel
#: Xeon, whose host slows whole processes in spells of seconds, disagreed for 53-72% of ops, and the
#: lower of two windows repeated within 10% from one campaign to the next for 52-63% of ops (ONNX
#: Runtime) and 36-46% (OpenVINO) against 20-46% and 16-38% with one window (six models, three
#: interleaved campaigns each; docs/design.md, "Second windows for one-thread targets").
ONE_THREAD_PROBATION = 16
ONE_THREAD_MIN_DISAGREE = 0.25
WINDOWS_DISAGREE = 0.10

#: a measurement whose compile took longer (ms) is not taken again in a second window (TVM builds each
#: signature in about a second on this CPU; OpenVINO and ONNX Runtime in 1-20 ms)
SECOND_WINDOW_MAX_COMPILE_MS = 1000.0


def _pace_meta(reply: Mapping[str, Any]) -> dict[str, Any]:
    """A row's pace field from a worker's reply (``pace_ms``: :mod:`placer.profile.pace`; a second
    window that keeps the first's figure keeps its pace too); none without a pace."""
    pace = reply.get("pace_ms")
    return {"pace_ms": pace} if pace else {}


@dataclass
class Task:
    """One measurement to take: ``key`` (a store key of ``kind`` op/overhead/segment/model) on ``target``;
    ``model_fn`` builds the ONNX model to send; ``static``: (supported, why not) known without running."""

    key: str
    kind: str
    target: Any
    label: str
    model_fn: Callable[[], Any]
    timeout_s: float
    static: tuple[bool, str] = (True, "")
    #: a probe of a row the store holds: measured again and replaced when the probe contradicts it
    stored_row: bool = False


class Engine:
    """Runs :class:`Task` lists against a store; the outcomes are counted into ``result``."""

    def __init__(self, store: ProfileStore, *, timeout_s: float, isolate: bool, progress: bool,
                 timing: TimingConfig | None, seed: int, retry_failed: bool, result: CampaignResult,
                 colocate: Sequence[str] = (), retry_contended: bool = False,
                 second_window: bool | str = True,
                 hurry_after: float | None = None, session: str = "",
                 probes: Mapping[str, Sequence[Task]] | None = None):
        self.store = store
        #: the campaign's session id, written into every row's meta (:mod:`placer.profile.drift`)
        self.session = session
        #: target name -> ops measured again at the start and the end of its work, kept as probes
        self.probes = {k: list(v) for k, v in (probes or {}).items()}
        self.second_window = second_window
        #: a ``time.monotonic()`` past which nothing is measured twice (see :meth:`_hurried`)
        self.hurry_after = hurry_after
        self.colocate = list(colocate)
        self.timeout_s = float(timeout_s)
        self.isolate = isolate
        self.progress = progress
        self.timing = timing or TimingConfig()
        self.seed = seed
        self.retry_failed = retry_failed
        self.retry_contended = retry_contended
        self.result = result
        self._bytes: dict[str, bytes] = {}
        self._start_failures: Counter = Counter()
        #: target name -> why its device became unreachable (its remaining tasks are skipped, not stored)
        self.unavailable: dict[str, str] = {}
        self._skipped: Counter = Counter()
        #: target name -> tasks measured ok in this run that a second window measures again (and stored
        #: rows marked due: an earlier campaign's hurry point left their second window out)
        self._again: dict[str, list[Task]] = defaultdict(list)
        #: (key, target name) of the rows queued for a second window an earlier campaign left due
        self._due_keys: set[tuple[str, str]] = set()
        self._targets: dict[str, object] = {}  # by name: every target a task of run() named
        #: the environment's switches, read once per campaign: one-thread second windows (on probation
        #: unless "all"), and the cap on the attempts at a disturbed measurement
        self._one_thread_windows = second_window == "all" or one_thread_windows()
        self._attempts_cap = attempts_cap()
        #: disturbed measurements taken again, and how many of them came out undisturbed (:meth:`_futile`)
        self._retaken = self._escaped = 0

    def _totals(self, target) -> TargetTotals:
        return self.result.per_target.setdefault(target.name, TargetTotals(target.name))

    def _count(self, task: Task, outcome: str, m: Measurement | None) -> None:
        self._totals(task.target).counts[(task.kind, outcome)] += 1
        setattr(self.result, outcome, getattr(self.result, outcome) + 1)
        if m is not None:
            self.result.results[(task.key, task.target.name)] = m

    def _is_done(self, m: Measurement | None) -> bool:
        """A stored row is reused unless it failed (with ``retry_failed``) or was flagged as measured on
        a busy machine (with ``retry_contended``)."""
        if m is None:
            return False
        return not ((self.retry_failed and m.status in FAILED) or (self.retry_contended and is_contended(m.meta)))

    def _measure_quietly(self, worker, header: dict, payload: bytes, task: Task) -> dict:
        """Measure; while other processes keep the machine busy or the host slows a core
        (:func:`placer.profile.contention.disturbed`), wait a moment and measure again, up to
        ``timing.contended_attempts`` times (once past ``hurry_after``; at most :func:`attempts_cap`), and
        keep the least disturbed reply (flagged ``contended`` if even that one was)."""
        best = None
        hurried = self._hurried()
        attempts = 1 if hurried else max(1, int(self.timing.contended_attempts))
        attempts = min(attempts, self._attempts_cap or attempts)
        futile = attempts > 1 and self._futile()
        if futile:
            attempts = 1
        for attempt in range(1, attempts + 1):
            header = {**header, "core_reference": core_reference()}  # a new worker's reference too
            reply = worker.request(header, payload, task.timeout_s,
                                   what=f"while measuring {task.label} on {task.target.name}")
            seed_core_reference(reply.get("core_reference"))
            if reply.get("status") != "ok":
                return reply
            reply["attempts"] = attempt
            if best is None or self._badness(task, reply) < self._badness(task, best):
                best = reply
            if not disturbed(reply.get("contention"), self._slowdown(task, reply)):
                self._escaped += attempt > 1
                break
            if hurried:
                self.result.hurried += 1  # flagged below: a later campaign takes it again
                break
            if futile:
                self.result.futile += 1  # flagged below, as hurried
                break
            if attempt == attempts:
                break  # flagged below (no pause after the last attempt, and it is not counted as taken again)
            self._retaken += attempt == 1
            self.result.remeasured += 1
            time.sleep(0.05 * attempt)
        best["contended"] = disturbed(best.get("contention"), self._slowdown(task, best))
        best["attempts"] = attempt
        return best

    def _futile(self) -> bool:
        """Whether re-takes stopped escaping the disturbance in this campaign (:data:`RETAKE_PROBATION`,
        :data:`RETAKE_MIN_ESCAPE`): then a disturbed measurement is kept flagged at its first attempt."""
        return self._retaken >= RETAKE_PROBATION and self._escaped < RETAKE_MIN_ESCAPE * self._retaken

    def _hurried(self) -> bool:
        """Past ``hurry_after`` (a caller's budget, e.g. ``placer tune``'s): a disturbed measurement is
        kept flagged (a later campaign takes it again) instead of being taken again now, and the second
        windows are left out (the first window's rows stand). On a busy machine those repeats had made
        a 2-minute tune's profiling take 168 s (436 measurements taken again)."""
        return self.hurry_after is not None and time.monotonic() > self.hurry_after

    @staticmethod
    def _slowdown(task: Task, reply: dict) -> float | None:
        """The core slowdown that disturbs ``task``'s measurement: a multi-thread target runs at its
        slowest core's pace; a one-thread one runs on one core, and its rows repeated within 10% for
        96% of ops through the spells that moved 2-thread rows (session 10), so it is not judged by
        the other core."""
        return reply.get("slowdown") if task.target.spec.threads > 1 else None

    def _badness(self, task: Task, reply: dict) -> float:
        return disturbance(reply.get("contention"), self._slowdown(task, reply))

    def _payload(self, task: Task) -> bytes:
        b = self._bytes.get(task.key)
        if b is None:
            b = task.model_fn().SerializeToString()
            if task.kind != "model":
                self._bytes[task.key] = b
        return b

    def _mark_unavailable(self, task: Task, reason: str) -> None:
        """The device behind ``task``'s target is unreachable: this task and the target's remaining ones
        are skipped (nothing stored: not the ops' fault); :meth:`run` reports it once."""
        self.unavailable.setdefault(task.target.name, reason)
        self._skipped[task.target.name] += 1
        self._count(task, "failed", None)

    def run(self, tasks: list[Task], *, second_windows: bool = True) -> None:
        """Run tasks (grouped by target, in order); skip those the store has. Then the second windows
        of what it measured, and of stored rows an earlier campaign's hurry point left without theirs,
        unless ``second_windows`` is False: the caller then must call :meth:`run_second_windows` (which
        also reports the targets that became unavailable), after the measurements a plan cannot do
        without."""
        by_target: dict[str, list[Task]] = defaultdict(list)
        targets = self._targets
        for t in tasks:
            by_target[t.target.name].append(t)
            targets[t.target.name] = t.target
        # what is cached, up front (for the progress total)
        todo: dict[str, list[Task]] = {}
        for name, ts in by_target.items():
            have = self.store.get_many([t.key for t in ts], targets[name])
            todo[name] = []
            for t in ts:
                m = have.get(t.key)
                if self._is_done(m):
                    self._count(t, "cached", m)
                    # an earlier campaign's hurry point left it out, or the campaign was stopped first
                    due = m.ok and m.meta.get(WINDOW_DUE)
                    if due and self._takes_second_window(t, m.meta.get("compile_ms")):
                        self._again[name].append(t)
                        self._due_keys.add((t.key, name))
                elif not t.static[0]:
                    m = self.store.put(t.key, t.target, kind=t.kind, status="unsupported", reason=t.static[1],
                                       meta={"static": True})
                    self._count(t, "unsupported", m)
                else:
                    todo[name].append(t)
        total = sum(len(v) for v in todo.values())
        with progress_bar(self.progress, total) as bar:
            for name, ts in todo.items():
                probes = self.probes.get(name, [])
                if not ts and not probes:
                    continue
                t0 = time.perf_counter()
                worker = self._worker(targets[name])
                try:
                    self._refresh_contradicted(worker, probes, self._probe(worker, probes, bar))
                    for i, task in enumerate(ts):
                        bar.describe(f"{name} {task.label}")
                        self._run_one(worker, task)
                        bar.advance()
                    if ts:  # and at the end: the machine may change speed within a long campaign
                        self._probe(worker, probes, bar)
                finally:
                    worker.stop()
                self._totals(targets[name]).wall_s += time.perf_counter() - t0
        if second_windows:
            self.run_second_windows()

    def run_second_windows(self) -> None:
        """The second windows of the rows :meth:`run` measured or found due (each target's in one fresh
        worker; a one-thread target's on probation, :data:`ONE_THREAD_PROBATION`; past ``hurry_after``
        the rest are left out), then the targets that became unavailable put in the result's problems.
        A refinement: a campaign that runs them after its links
        (:func:`~placer.profile.campaign.profile_graph`) lets the hurry point cut them rather than
        what a plan needs."""
        for name, ts in self._again.items():
            if not ts or name in self.unavailable:
                continue
            t0 = time.perf_counter()
            self._second_window(self._targets[name], ts)
            self._totals(self._targets[name]).wall_s += time.perf_counter() - t0
        self._again.clear()
        for name, why in self.unavailable.items():
            self.result.problems.append(
                f"{name} became unavailable ({why}): {self._skipped[name]} measurement(s) skipped, nothing stored "
                "for them; run the campaign again once the device is back to resume")

    def _probe(self, worker, tasks: Sequence[Task], bar) -> dict[str, float]:
        """Measure ``tasks`` again, whatever the store holds, and record them as this session's probes
        (:meth:`~placer.profile.store.ProfileStore.add_probe`); a probe that fails to run is left out.
        Returns the medians recorded, by key."""
        got: dict[str, float] = {}
        for task in tasks:
            if task.target.name in self.unavailable:
                break
            bar.describe(f"{task.target.name} probe {task.label}")
            try:
                reply = self._measure_quietly(worker, self._header(task, repeat=1), self._payload(task), task)
            except (WorkerDied, PlacerError):
                continue
            # one disturbed in every attempt is kept too: the factors' medians leave it out, and a row
            # it seems to contradict is only measured again
            if reply.get("status") == "ok":
                got[task.key] = float(reply["stats"]["median_ms"])
                self.store.add_probe(self.session, task.key, task.target, got[task.key])
                self.result.probes += 1
        return got

    def _refresh_contradicted(self, worker, probes: Sequence[Task], mine: Mapping[str, float]) -> None:
        """A stored op row that this session's probe (``mine``: key -> median) contradicts beyond noise
        as faster, once both are put on one scale (:func:`~placer.profile.drift.drift_scale`), is
        measured again and replaced (``CampaignResult.refreshed``): a row measured in a disturbance
        is not trusted. A slower probe leaves the row: session 26's last two-thread campaign ran in
        a spell (factor 1.465), its probes of squeezenet's 1x1 convolutions came out 2.3x the
        earlier sessions' and its refresh stored them so."""
        stored = [t for t in probes if t.stored_row]
        if not stored:
            return
        target = stored[0].target
        scale = drift_scale(self.store, target)
        now = scale.factors.get(self.session)
        if now is None:
            return
        for task in stored:
            m = self.store.get(task.key, target)
            if task.key not in mine or m is None or not m.ok or not m.median_ms:
                continue
            # a slower probe ran in a spell itself: measured again in it, the row would be stored slow
            if contradicts(mine[task.key], m.median_ms, now, scale.row_factor(task.key)):
                self.result.refreshed += 1
                self._run_one(worker, task, force=True, keep=m)

    def _run_one(self, worker, task: Task, force: bool = False, keep: Measurement | None = None) -> None:
        """Measure ``task`` and store the outcome (unless stored already, or ``force``). ``keep``: the
        good row a refresh measures again; a failure now (a timeout, a worker that died, in a spell
        the op's probe had just run through) leaves it stored, counted as failed."""
        # another campaign may have measured it meanwhile
        m = self.store.get(task.key, task.target)
        if self._is_done(m) and not force:
            self._count(task, "cached", m)
            return
        if self._start_failures[task.target.name] >= 2:
            self._count(task, "failed", None)
            return
        if task.target.name in self.unavailable:  # its device is gone: nothing stored, a later run resumes
            self._skipped[task.target.name] += 1
            self._count(task, "failed", None)
            return
        header = self._header(task, repeat=3 if task.kind in _REPEATED_KINDS else 1)
        try:
            payload = self._payload(task)
        except PlacerError as exc:
            m = self.store.put(task.key, task.target, kind=task.kind, status="unsupported",
                               reason=f"cannot build the {task.kind} model: {exc}")
            self._count(task, "unsupported", m)
            return
        t0 = time.perf_counter()
        try:
            reply = self._measure_quietly(worker, header, payload, task)
        except WorkerDied as exc:
            if exc.status == "unavailable":
                self._mark_unavailable(task, exc.reason)
                return
            if exc.status == "error":  # the worker could not start: not the op's fault, not stored
                self._start_failures[task.target.name] += 1
                self.result.problems.append(exc.reason)
                self._count(task, "failed", None)
                return
            if keep is not None:
                self._count(task, "failed", keep)
                return
            m = self.store.put(task.key, task.target, kind=task.kind, status=exc.status, reason=exc.reason,
                               meta={"timeout_s": task.timeout_s, "wall_s": time.perf_counter() - t0})
            self._count(task, "failed", m)
            return
        self._start_failures[task.target.name] = 0
        status = reply.get("status", "error")
        if status == "unavailable":
            self._mark_unavailable(task, str(reply.get("reason", "")))
            return
        if status != "ok" and keep is not None:
            self._count(task, "failed", keep)
            return
        if status != "ok":
            m = self.store.put(task.key, task.target, kind=task.kind, status=status if status in FAILED + ("unsupported",) else "error",
                               reason=str(reply.get("reason", "")), meta={"wall_s": time.perf_counter() - t0})
            self._count(task, "unsupported" if status == "unsupported" else "failed", m)
            return
        st = reply["stats"]
        if task.kind == "overhead":
            overhead = 0.0
        else:
            overhead = self.store.overhead_ms(task.target, default=0.0)
        median = float(st["median_ms"])
        meta = {
            "mad_ms": st["mad_ms"], "mean_ms": st["mean_ms"], "warmup_n": st["warmup_n"], "sample_s": st["sample_s"],
            "stable": st["stable"], "compile_ms": reply.get("compile_ms"), "first_run_ms": reply.get("first_run_ms"),
            "overhead_ms": overhead, "wall_s": time.perf_counter() - t0, "seed": self.seed,
            "isolated": self.isolate, "timing": self.timing.to_dict(),
            "colocated": [n for n in self.colocate if n != task.target.name],
            # measurement conditions: the share of the machine other processes used meanwhile
            "contention": reply.get("contention"), "loadavg": reply.get("loadavg"),
            # and the worst slowdown of a core as the window opened and closed (the host's contention)
            "slowdown": reply.get("slowdown"),
            "attempts": reply.get("attempts", 1), "contended": bool(reply.get("contended")),
            # the host's pace over the same window (placer.profile.pace: rows are read at the usual pace)
            **_pace_meta(reply),
        }
        if self.session:
            meta["session"] = self.session
        if meta["contended"]:
            self.result.contended += 1
        again = self._takes_second_window(task, reply.get("compile_ms"))
        if again:  # stored due until its second window is taken: a campaign stopped before then leaves it due
            meta[WINDOW_DUE] = True
        self._due_keys.discard((task.key, task.target.name))  # measured afresh (a refresh): this run's own
        m = self.store.put(task.key, task.target, kind=task.kind, status="ok", median_ms=median,
                           net_ms=max(median - overhead, 0.0), p10_ms=st["p10_ms"], p90_ms=st["p90_ms"], n=st["n"],
                           meta=meta)
        self._count(task, "measured", m)
        if again:
            self._again[task.target.name].append(task)

    def _takes_second_window(self, task: Task, compile_ms: float | None) -> bool:
        """Whether ``task``'s row, stored ok, is measured again in a second window."""
        return bool(self.second_window and task.kind in _SECOND_WINDOW_KINDS
                    and (task.target.spec.threads > 1 or self._one_thread_windows)
                    and (compile_ms or 0.0) <= SECOND_WINDOW_MAX_COMPILE_MS)

    def _worker(self, target):
        """A worker for ``target``: its own process (importing the colocated runtimes) when isolated."""
        return WorkerProcess([target], preload=self.colocate) if self.isolate else InProcessWorker([target])

    def _header(self, task: Task, repeat: int) -> dict:
        """The request that measures ``task`` (``repeat`` windows in one request, the lowest median kept)."""
        return {"cmd": "measure", "target": task.target.name, "key": task.key, "seed": self.seed,
                "timing": self.timing.to_dict(), "repeat": repeat, "alone": task.kind == "model"}

    def _second_window(self, target, tasks: list[Task]) -> None:
        """Measure ``tasks`` (stored ok by this run, or marked due by an earlier one: each key once) again in
        a fresh worker, in reverse order, so that a slow spell hits other ops than the first time; keep the
        lower median, record both (``windows``) and clear the mark.
        Past ``hurry_after`` the rest are left out (counted in ``hurried``; their rows are marked
        :data:`~placer.profile.store.WINDOW_DUE`, and a later campaign takes them): the budget's hurry point
        is checked before each, not only before the batch (session 35's main job took 114 second
        windows, two batches begun before its hurry point, and left its search no time). No worker is
        started for a batch that begins past it. A one-thread target stops, past
        :data:`ONE_THREAD_PROBATION` windows, once under a quarter of those taken disagreed with their
        first ones (``steady`` counts the rest), unless ``second_window`` is ``"all"``."""
        worker = None
        on_probation = target.spec.threads == 1 and self.second_window != "all"
        taken = disagreed = 0
        try:
            # each key once (a due row a probe then refreshed was queued twice), in reverse order
            queue = list({t.key: t for t in reversed(tasks)}.values())
            for i, task in enumerate(queue):
                if self._hurried():
                    self.result.hurried += len(queue) - i  # the first windows' rows stand, marked due
                    self.store.flag_window_due([t.key for t in queue[i:]], target)
                    break
                if (on_probation and taken >= ONE_THREAD_PROBATION
                        and disagreed < ONE_THREAD_MIN_DISAGREE * taken):
                    self.result.steady += len(queue) - i  # the first windows agreed: they stand
                    self.store.flag_window_due([t.key for t in queue[i:]], target, due=False)
                    break
                if worker is None:
                    worker = self._worker(target)
                first = self.store.get(task.key, target)
                if first is None or not first.ok or first.median_ms is None:
                    continue
                try:
                    reply = self._measure_quietly(worker, self._header(task, repeat=1), self._payload(task), task)
                except WorkerDied as exc:  # the first window's row stands
                    if exc.status == "unavailable":  # its device is gone: the rest stay due for a later run
                        self.unavailable.setdefault(target.name, exc.reason)
                        self.store.flag_window_due([t.key for t in queue[i:]], target)
                        break
                    if exc.status == "error":  # the worker could not start (each try up to its start timeout)
                        self._start_failures[target.name] += 1
                        self.result.problems.append(exc.reason)
                        if self._start_failures[target.name] >= 2:
                            self.store.flag_window_due([t.key for t in queue[i:]], target)
                            break
                    continue
                except PlacerError:  # the first window's row stands
                    continue
                self._start_failures[target.name] = 0
                if reply.get("status") != "ok":
                    continue
                self.result.second_windows += 1
                st, meta = reply["stats"], dict(first.meta)
                meta.pop(WINDOW_DUE, None)
                self.result.windows_due += (task.key, target.name) in self._due_keys
                second = float(st["median_ms"])
                taken += 1
                lo, hi = sorted((first.median_ms, second))
                disagreed += hi > (1.0 + WINDOWS_DISAGREE) * lo  # either way: off by more than 10%
                meta["windows_ms"] = [first.median_ms, second]
                if second * SLOW_FIRST_WINDOW < first.median_ms:
                    self.result.slow_first_windows += 1
                median, net, p10, p90, n = first.median_ms, first.net_ms, first.p10_ms, first.p90_ms, first.n
                # the lower of the two at one pace where both windows timed it (a window that ran in a
                # spell the pace saw is not the lower one for that), else as measured
                pace_first, pace_second = row_pace(first), reply.get("pace_ms")
                lower = second < first.median_ms
                if pace_first and pace_second:
                    meta["windows_pace_ms"] = [pace_first, pace_second]
                    lower = second / pace_second < first.median_ms / pace_first
                if task.kind == "model" and getattr(target.spec, "threads", 1) > 1:
                    # a whole model on several cores: the mean of the two windows, not the lower (session
                    # 50, 12 such rows against the bench's rounds minutes later: the lower |error| median
                    # 18%, p90 34%, every one below; the mean 6% / 21%): on all cores the host's spells are
                    # part of what a request meets, not a disturbance a second window can wait out
                    meta["windows_kept"] = "mean"
                    # a window disturbed by other processes' work (not the host's spells) flags the row
                    meta["contended"] = bool(meta.get("contended")) or bool(reply.get("contended"))
                    median = (first.median_ms + second) / 2
                    net = max(median - float(meta.get("overhead_ms") or 0.0), 0.0)
                    tails = [v for v in (first.p10_ms, first.p90_ms, st["p10_ms"], st["p90_ms"]) if v is not None]
                    p10, p90 = (min(tails), max(tails)) if tails else (None, None)
                    n = (first.n or 0) + (st["n"] or 0)
                elif lower:
                    # the row is now this window's: its pace (none if this window had none: the first's
                    # would divide it by a pace it was not measured at) and this campaign's session
                    meta.pop("pace_ms", None)
                    meta["session"] = self.session
                    meta.update(mad_ms=st["mad_ms"], mean_ms=st["mean_ms"], contention=reply.get("contention"),
                                loadavg=reply.get("loadavg"), slowdown=reply.get("slowdown"),
                                contended=bool(reply.get("contended")), **_pace_meta(reply))
                    median, p10, p90, n = second, st["p10_ms"], st["p90_ms"], st["n"]
                    net = max(second - float(meta.get("overhead_ms") or 0.0), 0.0)
                m = self.store.put(task.key, target, kind=task.kind, status="ok", median_ms=median, net_ms=net,
                                   p10_ms=p10, p90_ms=p90, n=n, meta=meta)
                self.result.results[(task.key, target.name)] = m
        finally:
            if worker is not None:
                worker.stop()
