"""Measuring plans fairly on a noisy, shared machine: compiled once, timed in interleaved rounds.

Every candidate plan stays compiled in a :class:`PlanBench`; :meth:`PlanBench.measure` times the
requested candidates in rounds (A B C A B C ...), a few requests per candidate per round, so a
burst of load from another process hits all candidates alike. The figure kept per candidate is
the median request latency over all rounds, with p10/p90 for the spread. Between two candidates
the bench waits until the previous one's runtime threads have stopped spinning
(:func:`settle_own_threads`; yardsticks in their own processes are paused instead).

Between two candidates' turns the bench also times a reference loop on each core
(:func:`placer.devices.core_speed.core_slowdown`): the host of a virtual machine slows a core for
seconds at a time without the guest seeing it (1.6x, a third of the time over a minute on this
project's machines), and a 2-thread runtime then runs at the slow core's pace. A turn that began or
ended with a core :data:`~placer.devices.core_speed.SLOWED` is left out of the figures, as long as
at least half of the candidate's samples remain (else every sample counts); ``n_slowed`` says how
many were left out. Every candidate, yardsticks included, is judged alike. A spell can outlast a
whole measurement (the host's spells last up to about 20 s here, a final measurement a few);
:meth:`PlanBench.measure` with ``until_quiet`` then adds rounds, each after waiting for the cores to
read quiet, until every candidate has quiet samples to be judged by (bounded by a round count and a
deadline). Some spells read quiet to the probes (docs/design.md, session 19); the candidates' own
turns can tell them (:class:`RatioWatch`: a runtime on all cores at its 1-thread pace in a round), and
a round they tell is left out like a slowed one (session 22).

Two candidates are compared round by round (:meth:`PlanBench.paired_ms`): the median over the
rounds of the ratio of their turns' medians. Their own medians over all rounds can disagree with it
by 1.3x: a 2-thread runtime on this project's machines has spells of several seconds in which every
2-thread candidate runs 1.5x slower alike (3.6 -> 5.4 ms on squeezenet; 1-thread ones, and the core
probe, do not change: session 13), so a median over rounds lands on either side of the gap by the
luck of which rounds a candidate drew, while within one round both are in the same spell.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from placer.devices.core_speed import SLOWED, core_slowdown, warm_core_probe
from placer.interrupts import raise_if_stopped
from placer.run.executors import make_executor


#: a candidate's runtime threads count as parked once this process used under this share of a core
#: over one settle window (a spinning ONNX Runtime pool keeps a core busy for ~50 ms after its last run)
SETTLE_BUSY_SHARE = 0.2
SETTLE_WINDOW_S = 0.005
SETTLE_MAX_S = 0.25


#: :meth:`PlanBench.measure` with ``until_quiet``: the most seconds to wait for quiet cores before
#: each added round (the host's spells last 1-20 s here); ``$PLACER_QUIET_WAIT_S`` overrides it (the
#: test suite sets 0: its own parallel workers keep the cores busy, and its outcomes must not wait on
#: the machine)
QUIET_WAIT_S = 2.0
QUIET_WAIT_ENV = "PLACER_QUIET_WAIT_S"
#: ... and no added round begins later than this many seconds after the measurement's own rounds,
#: unless the caller gives a deadline (tune: the end of its budget)
QUIET_WINDOW_S = 30.0
#: ``$PLACER_ADDED_ROUNDS``: the most rounds a measurement adds for quiet samples or for a spell of the
#: host (:meth:`PlanBench.measure`'s ``until_quiet``, the throughput tune's spell rounds), whatever the
#: caller asks. The test suite sets 0: its own parallel workers keep the cores busy, so an added round
#: finds no quiet and only lengthens the suite (session 55: its three longest tune tests 41 / 32 / 21 s
#: -> 25 / 18 / 13 s); the tests of the added rounds turn them back on
ADDED_ROUNDS_ENV = "PLACER_ADDED_ROUNDS"
QUIET_POLL_S = 0.2

#: a turn times its requests once the candidate has run for this long (one request at least, left out):
#: the first requests after a switch run with the runtime's pools asleep and caches cold, which on a
#: model of a third of a millisecond lasts several requests (bert-tiny: the turn's second to fourth
#: requests at 1.13-1.29x a warm loop's time, the profile's regime, 1.04-1.08x after 2 ms of warm-up;
#: session 48), so that the bench measured small models in a regime neither the profile nor a serving
#: loop is in
TURN_WARM_MS = 5.0


def quiet_wait_s() -> float:
    """Seconds to wait for quiet cores before each round added for quiet samples: ``$PLACER_QUIET_WAIT_S``
    when set to a number >= 0, else :data:`QUIET_WAIT_S`."""
    try:
        value = float(os.environ.get(QUIET_WAIT_ENV, ""))
    except ValueError:
        return QUIET_WAIT_S
    return value if value >= 0 else QUIET_WAIT_S


def added_rounds(asked: int) -> int:
    """``asked``, capped by ``$PLACER_ADDED_ROUNDS`` when that is set to an integer >= 0."""
    try:
        cap = int(os.environ.get(ADDED_ROUNDS_ENV, ""))
    except ValueError:
        return asked
    return min(asked, cap) if cap >= 0 else asked


def wait_quiet(max_s: float, *, poll_s: float = QUIET_POLL_S) -> bool:
    """Wait, up to ``max_s``, until the cores read below :data:`SLOWED`
    (:func:`~placer.devices.core_speed.core_slowdown`, polled every ``poll_s``); whether they did."""
    deadline = time.monotonic() + max(0.0, max_s)
    while True:
        if (core_slowdown() or 1.0) < SLOWED:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(poll_s, left))


def _own_cpu_s() -> float:
    """CPU seconds used so far by every thread of this process (getrusage counts in microseconds;
    os.times, which the contention signal uses, in 10 ms ticks: coarser than one settle window)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def settle_own_threads(*, window_s: float = SETTLE_WINDOW_S, max_s: float = SETTLE_MAX_S,
                       cpu_s: Callable[[], float] = _own_cpu_s) -> float:
    """Wait until this process's own threads stop using the CPU (a runtime pool spinning after its
    last run), at most ``max_s``; returns the seconds waited. Without it, a candidate whose pool
    keeps spinning between requests (a one-partition ONNX Runtime plan, as ONNX Runtime's default
    does) steals a core from the candidate measured after it in the same process: measured 1.2-1.9x
    slower on bert-tiny, an artefact of the interleaving that no user sees. ``cpu_s`` is the
    process's CPU clock."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < max_s:
        c0, w0 = cpu_s(), time.perf_counter()
        time.sleep(window_s)
        if cpu_s() - c0 < SETTLE_BUSY_SHARE * (time.perf_counter() - w0):
            break
    return time.perf_counter() - t0


def time_between_partitions(plan_ms: float | None, partition_ms: Sequence[float]) -> float:
    """The executor's own time between a plan's partitions, shared equally among them: what a
    plan's request took (``plan_ms``) beyond the sum of its partitions' times, over their number;
    never negative (partitions that overlapped run in parallel). 0 without ``plan_ms``."""
    if not plan_ms or not partition_ms:
        return 0.0
    return max(float(plan_ms) - float(sum(partition_ms)), 0.0) / len(partition_ms)


@dataclass(frozen=True)
class LatencyStats:
    median_ms: float
    p10_ms: float
    p90_ms: float
    n: int
    #: samples left out: taken in a turn during which the host slowed a core (module docstring)
    n_slowed: int = 0
    #: of all the samples, the share taken in slowed turns, left out or not: with ``n_slowed`` 0, 0.0
    #: says none was slowed and 0.5 or more that too few were quiet to leave the slowed ones out
    slowed_share: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {"median_ms": self.median_ms, "p10_ms": self.p10_ms, "p90_ms": self.p90_ms, "n": self.n,
                "n_slowed": self.n_slowed, "slowed_share": self.slowed_share}


@dataclass(frozen=True)
class RatioWatch:
    """Two candidates whose turns in one round tell a spell the core probes miss: ``key``'s turn median
    over ``base``'s above ``limit``. E.g. a runtime on all cores (``key``) against the same runtime at
    1 thread (``base``), whose ratio on a quiet machine is ~0.65: in the spells the probes miss the
    host runs the cores one after the other and it nears 1.0 (docs/design.md, sessions 19-22).
    :meth:`PlanBench.measure` marks every turn of such a round slowed."""
    base: str
    key: str
    limit: float


@dataclass
class BenchMark:
    """Where a bench's figures stood (:meth:`PlanBench.mark`): per candidate, its counts of samples,
    turns and timed partition runs and of each partition's runs; and the bench's ``spell_rounds``."""
    candidates: dict[str, tuple[int, int, int, dict[str, int]]]
    spell_rounds: int


@dataclass
class Candidate:
    key: str
    materialized: Any
    executor: Any
    samples_ms: list[float] = field(default_factory=list)
    #: per sample: whether its turn began or ended with a slowed core
    samples_slowed: list[bool] = field(default_factory=list)
    partition_ms: dict[str, list[float]] = field(default_factory=dict)
    #: per timed-partitions run (one per turn, aligned with each list of ``partition_ms``): slowed
    partition_slowed: list[bool] = field(default_factory=list)
    #: per turn: (the bench's round number, the median of the turn's samples, slowed)
    turns: list[tuple[int, float, bool]] = field(default_factory=list)
    yardstick: Any = None  # a placer.run.yardsticks.Yardstick: runs in its own process


def quiet_samples(values: Sequence[float], slowed: Sequence[bool]) -> tuple[np.ndarray, int]:
    """The values not taken in a slowed turn when they are at least half of them (and at least 2),
    else all; and how many were left out."""
    v = np.asarray(values, dtype=float)
    flags = np.asarray(list(slowed) + [False] * (len(v) - len(slowed)), dtype=bool)[:len(v)]
    quiet = v[~flags]
    if quiet.size >= max(2, (v.size + 1) // 2) and quiet.size < v.size:
        return quiet, int(v.size - quiet.size)
    return v, 0


class PlanBench:
    """Compiled candidates for one model and one set of inputs, measured interleaved.

    Parameters
    ----------
    feeds : list of input dicts (requests cycle through them)
    rounds, per_round : interleaving shape of one :meth:`measure` call
    """

    def __init__(self, feeds: Sequence[Mapping[str, np.ndarray]], *, rounds: int = 5, per_round: int = 4):
        self.feeds = [dict(f) for f in feeds]
        self.rounds = rounds
        self.per_round = per_round
        self.candidates: dict[str, Candidate] = {}
        self._probed = False  # each core's reference time taken (before the first turn)
        self._round = 0  # rounds run so far (a turn's round number pairs it with the others' turns)
        self.extra_rounds = 0  # rounds the last measure() added to get quiet samples (until_quiet)
        #: pairs of candidates whose turns' ratio tells a spell (:class:`RatioWatch`); set by the caller
        self.watches: list[RatioWatch] = []
        self.spell_rounds = 0  # rounds a watch has read as a spell, since the bench was built
        self._spelled_last = False  # whether a watch read the last round as a spell

    def add(self, key: str, materialized) -> Candidate:
        """Compile the hybrid executor of ``materialized`` (once) and keep it under ``key``."""
        if key in self.candidates:
            return self.candidates[key]
        ex = make_executor(materialized, "hybrid")
        try:
            ex.compile()
            for f in self.feeds[:2]:  # warm-up
                ex.run(f)
        except BaseException:  # a candidate that cannot run releases its sessions and workers at once
            ex.close()
            raise
        cand = Candidate(key, materialized, ex)
        self.candidates[key] = cand
        return cand

    def add_yardstick(self, yardstick) -> Candidate:
        """Measure a :class:`placer.run.yardsticks.Yardstick` (a runtime in its own process) in the
        same interleaved rounds as the plans, under ``yardstick.key``."""
        cand = Candidate(yardstick.key, None, None, yardstick=yardstick)
        self.candidates[yardstick.key] = cand
        return cand

    def outputs(self, key: str) -> list[dict[str, np.ndarray]]:
        ex = self.candidates[key].executor
        return [ex.run(f) for f in self.feeds]

    def measure(self, keys: Sequence[str], *, rounds: int | None = None, fresh: bool = False,
                per_round: int | None = None, until_quiet: int = 0, deadline: float | None = None,
                quiet_wait: float | None = None) -> dict[str, LatencyStats]:
        """Interleaved rounds over ``keys`` (``per_round`` requests per candidate per round, default
        the bench's); returns the stats over *all* samples taken so far, or with ``fresh`` over the
        samples of these rounds only (figures to be compared side by side).

        ``until_quiet`` > 0: while some candidate has fewer quiet samples than slowed ones (its figure
        would then count the slowed ones too, :func:`quiet_samples`), up to that many more rounds,
        each after waiting up to ``quiet_wait`` seconds (default :func:`quiet_wait_s`) for the cores to
        read quiet (:func:`wait_quiet`; after a round a watch read as a spell, the whole wait), none
        begun after ``deadline`` (``time.monotonic()``; default :data:`QUIET_WINDOW_S` after the
        measurement's own rounds; at most ``$PLACER_ADDED_ROUNDS``: :func:`added_rounds`)."""
        keys = list(dict.fromkeys(keys))
        n_req = max(2, int(per_round or self.per_round))
        if fresh:
            for key in keys:
                self.candidates[key].samples_ms.clear()
                self.candidates[key].samples_slowed.clear()
                self.candidates[key].turns.clear()
        if not self._probed:
            warm_core_probe()  # each core's reference time, before the first turn
            self._probed = True
        before = core_slowdown() or 1.0
        for r in range(rounds or self.rounds):
            before = self._one_round(keys, r, n_req, before)
        extra = 0
        until_quiet = added_rounds(until_quiet)
        wait_s = quiet_wait_s() if quiet_wait is None else quiet_wait
        if deadline is None:
            deadline = time.monotonic() + QUIET_WINDOW_S
        while extra < until_quiet and self.mostly_slowed(keys) and time.monotonic() < deadline:
            wait = min(wait_s, max(0.0, deadline - time.monotonic()))
            if self._spelled_last:  # the probes read such a spell quiet: waiting for them would not wait
                time.sleep(wait)
            else:
                wait_quiet(wait)
            self._one_round(keys, (rounds or self.rounds) + extra, n_req, core_slowdown() or 1.0)
            extra += 1
        self.extra_rounds = extra
        return {k: self.stats(k) for k in keys}

    def mostly_slowed(self, keys: Sequence[str]) -> bool:
        """Whether some of ``keys`` has fewer quiet samples than :func:`quiet_samples` needs to leave the
        slowed ones out."""
        for key in keys:
            cand = self.candidates[key]
            slowed = cand.samples_slowed[:len(cand.samples_ms)]
            if any(slowed) and quiet_samples(cand.samples_ms, slowed)[1] == 0:
                return True
        return False

    def settled(self, keys: Sequence[str]) -> list[str]:
        """Those of ``keys`` whose figure stands on quiet samples (none slowed, or the slowed ones left
        out): not :meth:`mostly_slowed`. Only such a figure checks the store's row (the tuner's
        ``_session_whole_ms``); re-pricing takes the others too. Session 23 re-priced from settled
        figures only (squeezenet's ONNX Runtime t2 re-priced at 4.57 ms from rounds taken slowed
        throughout, measured 1.94 in the rounds after); on a host slowed in nearly every round
        (session 44) the store's quietest windows then priced the later rounds twice as far off as
        the slowed rounds did."""
        return [key for key in keys if not self.mostly_slowed([key])]

    def _plan_turn(self, cand: Candidate, start: int, n: int) -> bool:
        """One turn of an in-process candidate: a request timed partition by partition (its timers'
        overhead kept out of the samples), more untimed ones until :data:`TURN_WARM_MS` has passed (then
        the partitions timed again, warm), then ``n`` timed requests; whether partitions were timed.
        Outputs unread: views of a runtime's buffers do (as the yardsticks time theirs)."""
        ex, feeds = cand.executor, self.feeds
        warm_until = time.perf_counter_ns() + TURN_WARM_MS * 1e6
        _, times = ex.run_timed(feeds[start % len(feeds)], share_outputs=True)
        i = 1
        while time.perf_counter_ns() < warm_until:  # a small model: warm it up before timing anything
            ex.run(feeds[(start + i) % len(feeds)], share_outputs=True)
            i += 1
        if i > 1:  # warmed up: its partitions timed again, warm
            _, times = ex.run_timed(feeds[(start + i) % len(feeds)], share_outputs=True)
            i += 1
        for pid, ms in times.items():
            cand.partition_ms.setdefault(pid, []).append(ms)
        for k in range(n):
            f = feeds[(start + i + k) % len(feeds)]
            t0 = time.perf_counter_ns()
            ex.run(f, share_outputs=True)
            cand.samples_ms.append((time.perf_counter_ns() - t0) / 1e6)
        return bool(times)

    def _one_round(self, keys: list[str], r: int, n_req: int, before: float) -> float:
        """One turn of each of ``keys`` (reversed order on odd ``r``); returns the last core probe."""
        raise_if_stopped()  # a stop request dropped inside a finalizer is not lost
        self._round += 1
        order = keys if r % 2 == 0 else keys[::-1]
        spans: dict[str, tuple[int, bool]] = {}  # key -> (its first sample this round, partitions timed)
        for key in order:
            cand = self.candidates[key]
            n0 = len(cand.samples_ms)
            timed_partitions = False
            if cand.yardstick is not None:  # times its own requests in its process
                # after its warm-up (TURN_WARM_MS, one request at least), as a plan's: the first
                # requests after a switch are the slowest (pools asleep, caches cold), for both alike
                cand.samples_ms.extend(cand.yardstick.run_batch(n_req - 1, r * n_req, warm_ms=TURN_WARM_MS))
            else:
                timed_partitions = self._plan_turn(cand, r * n_req, n_req - 1)
                settle_own_threads()  # the next candidate starts on cores this one has let go
            after = core_slowdown() or 1.0
            slowed = max(before, after) >= SLOWED
            cand.samples_slowed.extend([slowed] * (len(cand.samples_ms) - n0))
            if len(cand.samples_ms) > n0:
                cand.turns.append((self._round, float(np.median(cand.samples_ms[n0:])), slowed))
            if timed_partitions:
                cand.partition_slowed.append(slowed)
            spans[key] = (n0, timed_partitions)
            before = after
        self._spelled_last = self._watched_spell(spans)
        if self._spelled_last:
            self.spell_rounds += 1
            for key, (n0, timed_partitions) in spans.items():
                cand = self.candidates[key]
                cand.samples_slowed[n0:] = [True] * (len(cand.samples_slowed) - n0)
                if cand.turns and cand.turns[-1][0] == self._round:
                    cand.turns[-1] = (*cand.turns[-1][:2], True)
                if timed_partitions:
                    cand.partition_slowed[-1] = True
        return before

    def _watched_spell(self, spans: Mapping[str, Any]) -> bool:
        """Whether a watch reads this round's turns as taken in a spell (:class:`RatioWatch`)."""
        def turn_ms(key: str) -> float | None:
            turns = self.candidates[key].turns if key in spans else None
            return turns[-1][1] if turns and turns[-1][0] == self._round else None

        for w in self.watches:
            base, ms = turn_ms(w.base), turn_ms(w.key)
            if base and ms is not None and ms / base > w.limit:
                return True
        return False

    def stats(self, key: str, since: int = 0) -> LatencyStats:
        """``key``'s figures over its samples from the ``since``-th on (:meth:`n_samples` taken earlier:
        the rounds measured after that point only)."""
        cand = self.candidates[key]
        values, flags = cand.samples_ms[since:], cand.samples_slowed[since:len(cand.samples_ms)]
        s, left_out = quiet_samples(values, flags)
        if not s.size:
            nan = float("nan")
            return LatencyStats(nan, nan, nan, 0)
        return LatencyStats(float(np.median(s)), float(np.percentile(s, 10)), float(np.percentile(s, 90)),
                            len(s), left_out, sum(flags) / len(values))

    def mark(self) -> BenchMark:
        """Where the figures stand now, for :meth:`rewind`: each candidate's samples, turns and timed
        partition runs, and the count of rounds read as a spell."""
        return BenchMark({key: (len(c.samples_ms), len(c.turns), len(c.partition_slowed),
                                {pid: len(v) for pid, v in c.partition_ms.items()})
                          for key, c in self.candidates.items()}, self.spell_rounds)

    def rewind(self, mark: BenchMark) -> None:
        """Forget every sample, turn and timed partition run taken since ``mark`` (:meth:`mark`), and
        the rounds read as a spell since: rounds run to decide something else (a spell's end) then
        leave the figures, and the count a report quotes, as they were."""
        self.spell_rounds = mark.spell_rounds
        for key, (n_samples, n_turns, n_parts, parts) in mark.candidates.items():
            cand = self.candidates.get(key)
            if cand is None:
                continue
            del cand.samples_ms[n_samples:], cand.samples_slowed[n_samples:], cand.turns[n_turns:]
            del cand.partition_slowed[n_parts:]
            for pid in list(cand.partition_ms):
                if pid in parts:
                    del cand.partition_ms[pid][parts[pid]:]
                else:
                    del cand.partition_ms[pid]

    def n_samples(self) -> dict[str, int]:
        """How many requests each candidate has timed so far: marks for :meth:`stats`' ``since``."""
        return {key: len(cand.samples_ms) for key, cand in self.candidates.items()}

    def paired_ratio(self, key: str, ref: str) -> float | None:
        """How many times longer ``key``'s requests take than ``ref``'s, judged round by round: the median
        over the rounds both took a turn in of the ratio of their turns' medians (rounds in which either
        turn was slowed left out while at least half remain, as :func:`quiet_samples` does). None
        without a shared round."""
        a, b = self.candidates[key].turns, self.candidates[ref].turns
        ref_turn = {rnd: (ms, slowed) for rnd, ms, slowed in b}
        pairs = [(ms / ref_turn[rnd][0], slowed or ref_turn[rnd][1]) for rnd, ms, slowed in a
                 if rnd in ref_turn and ref_turn[rnd][0] > 0]
        if not pairs:
            return None
        ratios, _ = quiet_samples([p[0] for p in pairs], [p[1] for p in pairs])
        return float(np.median(ratios))

    def paired_ms(self, keys: Sequence[str], anchor: str | None = None) -> dict[str, float]:
        """Each of ``keys`` as the same rounds see it: the anchor (default: the fastest of them by median)
        keeps its median; every other is the anchor's median times :meth:`paired_ratio` to it. These
        are the figures to compare candidates by (module docstring); a key with no round shared with
        the anchor is left out."""
        stats = {k: self.stats(k) for k in dict.fromkeys(keys)}
        timed = [k for k, s in stats.items() if s.n and np.isfinite(s.median_ms)]
        if not timed:
            return {}
        if anchor not in timed:
            anchor = min(timed, key=lambda k: stats[k].median_ms)
        out = {anchor: stats[anchor].median_ms}
        for k in timed:
            ratio = self.paired_ratio(k, anchor) if k != anchor else None
            if ratio is not None:
                out[k] = stats[anchor].median_ms * ratio
        return out

    def partition_medians(self, key: str) -> dict[str, float]:
        cand = self.candidates[key]
        return {pid: float(np.median(quiet_samples(v, cand.partition_slowed)[0]))
                for pid, v in cand.partition_ms.items()}

    def close(self) -> None:
        for cand in self.candidates.values():
            if cand.executor is None:  # a yardstick: its YardstickSet owns the process
                continue
            try:
                cand.executor.close()
            except Exception:  # closing is best effort; a runtime may already be gone
                pass
        self.candidates.clear()

    def __enter__(self) -> "PlanBench":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
