"""Host spells the core probes do not read, seen in the model's own figures.

On the 2-core development machines the host sometimes runs the two cores one after the other for
seconds to minutes: every all-core runtime then runs at about its 1-thread pace. The bench's probes
(:func:`placer.devices.core_speed.core_slowdown`) read most such spells, not all (docs/design.md,
sessions 19 and 21). A verdict taken in one inverts the choice between a runtime at 1 thread and the
same runtime on all cores: in session 21's comparison tune kept OpenVINO at 1 thread for bert-tiny
(0.304 against 0.318 ms in its final rounds) and gpt-tiny (0.360 against 0.370), where the
comparison's rounds minutes later measured 0.330 against 0.235 and 0.393 against 0.369.

The model itself tells: the store's whole-model rows (taken with the probes, the quietest of three
windows) give each runtime's ratio of its all-core time to its 1-thread time on a quiet machine.
When, in the final rounds, that ratio is over :data:`SPELL_RATIO` times the store's for a runtime
measured both ways, its all-core target ran in a spell. :func:`unread_spell` says so;
:func:`wait_spell_end` polls a round of the two targets until their ratio is back near the store's.
Spells here last from seconds to many minutes (session 21: one outlasted tune's 20 s of polls and the
comparison's bench after it). When it lasts, :func:`quiet_choice` weighs the two regimes: a 1-thread
target that won in the spell by a few percent gives way to a runtime on all cores (its own or
another's) that the store has 1.5x faster on a quiet machine (losing little in a spell, gaining much
outside one).
:func:`spell_watches` applies the same reading to each round of a bench (:class:`~placer.run.bench.
RatioWatch`): a round in which a runtime's two targets read a spell is left out like one in which the
probes read slowed cores, while at least half of the samples remain.
:func:`spelled_rounds` reads throughput rounds alike, each runtime's two targets against the quietest
ratio they showed (the throughput tuner keeps no store row of a runtime on all cores); there a round
read so is not left out, rounds are added while most are (placer.tune.pipeline_tuner).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from placer.run.bench import PlanBench, RatioWatch, quiet_wait_s

#: the all-core / 1-thread ratio of a runtime in the final rounds over this many times the store's
#: reads as a spell (spells moved it 1.5-1.6x: OpenVINO 0.67 -> 1.05 on bert-tiny, 0.65 -> 1.03 on
#: gpt-tiny, session 21)
SPELL_RATIO = 1.3
#: a poll's ratio within this many times the store's ends the wait
SPELL_OVER = 1.15
#: a spell that lasted: the 1-thread target chosen gives way to an all-core target that was at most
#: this share slower in the spell (and that the store has faster on a quiet machine)
SPELL_GIVE = 0.10


@dataclass(frozen=True)
class SpellPair:
    """One runtime's 1-thread and all-core targets (their bench keys) and ratios."""
    kind: str
    one_key: str
    all_key: str
    stored_ratio: float  # all-core / 1-thread whole-model time in the store
    measured_ratio: float  # the same in the rounds just measured


def runtime_pairs(targets: Sequence, keys: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """``(kind, 1-thread target, all-core target)`` per runtime that has both among ``targets``
    (unpinned; ``keys``: target name -> bench key of its single-target plan, only those measured)."""
    by_kind: dict[str, dict[int, str]] = {}
    for t in targets:
        if t.spec.cores or t.name not in keys:
            continue
        by_kind.setdefault(t.kind, {})[int(t.spec.threads or 0)] = t.name
    return [(kind, th[1], th[max(th)]) for kind, th in sorted(by_kind.items()) if 1 in th and max(th) > 1]


def _stored_ratios(targets: Sequence, keys: Mapping[str, str],
                   stored_ms: Mapping[str, float]) -> list[tuple[str, str, str, float]]:
    """``(kind, 1-thread key, all-core key, stored all-core / 1-thread ratio)`` per runtime pair of
    :func:`runtime_pairs` whose two whole-model times the store has."""
    out = []
    for kind, one, many in runtime_pairs(targets, keys):
        s1, sn = stored_ms.get(one), stored_ms.get(many)
        if all(x is not None and math.isfinite(x) and x > 0 for x in (s1, sn)):
            out.append((kind, keys[one], keys[many], sn / s1))
    return out


def spell_watches(targets: Sequence, keys: Mapping[str, str],
                  stored_ms: Mapping[str, float]) -> list[RatioWatch]:
    """A :class:`~placer.run.bench.RatioWatch` per runtime measured at 1 thread and on all cores (bench
    ``keys`` by target name): a round whose all-core turn took over :data:`SPELL_RATIO` times the
    store's all-core / 1-thread ratio (``stored_ms`` by target name) reads as a spell."""
    return [RatioWatch(one, many, SPELL_RATIO * ratio)
            for _, one, many, ratio in _stored_ratios(targets, keys, stored_ms)]


def unread_spell(targets: Sequence, keys: Mapping[str, str], stored_ms: Mapping[str, float],
                 figure: Callable[[str], float | None]) -> list[SpellPair]:
    """The runtime pairs that read a spell ([] when none does): a runtime measured at 1 thread and on
    all cores (``figure``: a bench key's figure in the rounds just measured) whose all-core target ran
    over :data:`SPELL_RATIO` times slower, relative to its 1-thread target, than the store's
    whole-model times (``stored_ms`` by target name) say. One pair is enough: the other runtime's
    stored row may have been taken in a spell itself (session 21, gpt-tiny: ONNX Runtime's all-core
    row stored at 0.501 ms, 1.16x its 1-thread row, where quiet it runs at 0.65x)."""
    pairs = []
    for kind, one, many, ratio in _stored_ratios(targets, keys, stored_ms):
        f1, fn = figure(one), figure(many)
        if all(x is not None and math.isfinite(x) and x > 0 for x in (f1, fn)):
            pairs.append(SpellPair(kind, one, many, ratio, fn / f1))
    return [p for p in pairs if p.measured_ratio > SPELL_RATIO * p.stored_ratio]


def wait_spell_end(bench: PlanBench, pairs: Sequence[SpellPair], *, polls: int, per_round: int,
                   deadline: float | None = None) -> bool:
    """Poll, up to ``polls`` times, each :func:`~placer.run.bench.quiet_wait_s` seconds after the last
    (the probes read such a spell quiet: waiting for them would not wait), one round of each pair's
    two targets; True once every pair's ratio in a poll is within :data:`SPELL_OVER` of the store's.
    None begins after ``deadline`` (``time.monotonic()``). The polls' samples are forgotten when it
    returns (:meth:`~placer.run.bench.PlanBench.rewind`): they only tell whether the spell ended, and
    the figures stay those of the rounds measured before (one set of rounds for every candidate)."""
    keys = [k for p in pairs for k in (p.one_key, p.all_key)]
    before = bench.mark()
    try:
        for _ in range(max(0, int(polls))):
            wait = quiet_wait_s()
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            time.sleep(wait)
            if deadline is not None and time.monotonic() >= deadline:
                return False
            bench.measure(keys, rounds=1, per_round=per_round)
            last = {k: bench.candidates[k].turns[-1][1] for k in keys if bench.candidates[k].turns}
            if all(p.one_key in last and p.all_key in last and last[p.one_key] > 0
                   and last[p.all_key] / last[p.one_key] <= SPELL_OVER * p.stored_ratio for p in pairs):
                return True
        return False
    finally:
        bench.rewind(before)


def quiet_choice(best_key: str, pairs: Sequence[SpellPair],
                 figure: Callable[[str], float | None]) -> SpellPair | None:
    """The pair whose all-core target should replace ``best_key`` (a 1-thread target chosen in a spell
    that lasted), or None. Candidates are the pairs' all-core targets at most :data:`SPELL_GIVE` slower
    than ``best_key`` in the spell (``figure``) that the store has faster than that on a quiet machine
    (their 1-thread figure times the stored ratio): the same runtime's, or another's (session 31,
    shufflenet: ONNX Runtime at 1 thread chosen in a spell in which its all-core target ran 1.24x its
    1-thread time and OpenVINO's ran at its 1-thread pace, 3% slower than the winner; measured after,
    4.59 against 2.64 ms). Of those, the one the store has fastest when quiet."""
    f_best = figure(best_key)
    if not any(p.one_key == best_key for p in pairs) or f_best is None or not f_best > 0:
        return None
    found = []
    for p in pairs:
        f1, fn = figure(p.one_key), figure(p.all_key)
        if f1 is None or fn is None or not (f1 > 0 and fn > 0):
            continue
        quiet = f1 * p.stored_ratio
        if fn <= f_best * (1 + SPELL_GIVE) and quiet * (1 + SPELL_GIVE) < f_best:
            found.append((quiet, p))
    return min(found, key=lambda qp: qp[0])[1] if found else None


#: a throughput round whose all-core / 1-thread ratio is over this many times the quietest reads as a
#: spell: a spell moved it 1.9-2.4x (squeezenet, session 54: ONNX Runtime on 2 cores at 107 and 112
#: req/s in two rounds, 253 in the third, at 1 thread 126-141 throughout), while a 2-core runtime's
#: own noise moved it up to 1.31x in a round in which every other candidate ran at its fastest
THROUGHPUT_SPELL_RATIO = 1.5


def spelled_rounds(rounds: Sequence[Mapping[str, float]], pairs: Sequence[tuple[str, str]],
                   quiet: Mapping[tuple[str, str], float] | None = None,
                   ratio: float = THROUGHPUT_SPELL_RATIO) -> list[bool]:
    """Which of ``rounds`` (each: requests/s by key, over the same requests) were taken in a spell:
    for a pair ``(one_key, all_key)`` (a runtime at 1 thread and on all cores) the round's ratio
    ``rps[one_key] / rps[all_key]`` (the all-core time over the 1-thread time) over ``ratio`` times
    the quietest ratio of the pair: the lowest of every round's and of ``quiet`` (a figure taken
    before, e.g. the baselines')."""
    best = {p: v for p, v in (quiet or {}).items() if v > 0}
    ratios: list[dict[tuple[str, str], float]] = []
    for rnd in rounds:
        r: dict[tuple[str, str], float] = {}
        for pair in pairs:
            one, many = rnd.get(pair[0]), rnd.get(pair[1])
            if one and many and one > 0 and many > 0:
                r[pair] = one / many
                best[pair] = min(best.get(pair, math.inf), one / many)
        ratios.append(r)
    return [any(v > ratio * best[p] for p, v in r.items()) for r in ratios]


def quiet_ratios(median_ms: Mapping[str, float], pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], float]:
    """Per pair ``(one_key, all_key)`` with both in ``median_ms`` (each key's time per request): the
    all-core time over the 1-thread time, as :func:`spelled_rounds` reads a round's
    ``rps[one_key] / rps[all_key]`` (its ``quiet`` argument)."""
    return {(one, many): median_ms[many] / median_ms[one] for one, many in pairs
            if median_ms.get(one, 0) > 0 and median_ms.get(many, 0) > 0}
