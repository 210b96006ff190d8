"""What a partition costs as it runs in a plan: probe plans that alternate two targets.

Op profiles time each op alone, in a warm loop of its own runtime, and the whole-model calibration
scales them to the fused whole. A partition of a hybrid plan runs differently: right after another
runtime's partition (whose thread pool may still be waking down), on a small piece of the model
(fusion lost at both ends), with its own call, input binding and output copy. Measured in the
session-4 zoo comparison, small partitions took 2-4x their op-sum prediction, about 0.1 ms more
per partition, so cut plans measured 1.4-2.9x what the solver predicted for them.

This module measures that the way it happens: for each pair of targets a *probe plan* cuts the
model's topological order into contiguous pieces, large and small (``DEFAULT_CHUNKS``), and places
them alternately on the two targets (``a b a b ...``); the probes are compiled once and run in the
sequential hybrid executor, in interleaved rounds, timing every partition. Each partition's time
(plus its share of the executor's own time between partitions) is one row: its target, the
target that ran just before it, its ops and its inputs. :func:`placer.costing.partition_pricing`
turns the rows into the per-target entry cost the solver charges for each tensor a partition
receives, i.e. measured minus predicted, so partitions are priced as they measure.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from placer.devices.core_speed import SLOWED, core_slowdown, warm_core_probe
from placer.errors import PlacerError, first_line
from placer.interrupts import raise_if_stopped
from placer.materialize import materialize
from placer.run.bench import quiet_samples, time_between_partitions
from placer.run.executors import HybridExecutor

__all__ = ["DEFAULT_CHUNKS", "measure_probes", "probe_assignments", "probe_pairs"]

#: the pieces each probe plan cuts the model into, as shares of its work (``len - 1`` boundaries per
#: probe): large and small pieces, each target getting both, so that the cost of entering a
#: partition (what a small piece measures) and the scale on the ops of a cut plan (what a large one
#: measures) can be told apart (:func:`placer.costing.partition_pricing`); pieces of equal work
#: measure only their sum
DEFAULT_CHUNKS = (3.0, 0.2, 0.2, 3.0, 3.0, 0.2, 0.2, 3.0)
#: a target whose single-target prediction is this many times the fastest (plus :data:`SLACK_MS`) is
#: not probed (untuned TVM on a CPU: no plan would give it more than a few ops)
MAX_SLOWDOWN = 3.0
#: absolute slack on :data:`MAX_SLOWDOWN`: a model whose ops all cost about nothing (priced at 0 ms
#: below the call overhead) is probed on every target; its probes cost about nothing too
SLACK_MS = 1.0


def _single_target_ms(problem) -> np.ndarray:
    cost = np.asarray(problem.cost_ms, dtype=float)
    out = np.full(cost.shape[1], math.inf)
    for j in range(cost.shape[1]):
        col = cost[:, j]
        if np.isfinite(col).mean() >= 0.5:  # most ops run there: the rest fall back in a probe
            fallback = np.where(np.isfinite(col), col, np.nanmin(np.where(np.isfinite(cost), cost, np.nan), axis=1))
            out[j] = float(np.nansum(fallback))
    return out


def probe_pairs(problem, targets: Sequence[str] | None = None, max_slowdown: float = MAX_SLOWDOWN
                ) -> list[tuple[str, str]]:
    """Unordered pairs of ``targets`` (default: all of the problem's) worth probing: each runs most
    ops and is predicted within ``max_slowdown`` times the fastest single target plus :data:`SLACK_MS`."""
    names = list(problem.targets)
    single = _single_target_ms(problem)
    best = float(np.min(single)) if np.isfinite(single).any() else math.inf
    keep = [n for n in (targets or names)
            if n in names and math.isfinite(single[names.index(n)]) and single[names.index(n)] <= max_slowdown * best + SLACK_MS]
    return list(itertools.combinations(keep, 2))


def probe_assignments(problem, pairs: Sequence[tuple[str, str]],
                      chunks: int | Sequence[float] = DEFAULT_CHUNKS) -> dict[str, dict[str, str]]:
    """``{probe name: {op: target}}``: per pair ``(a, b)``, the problem's (topological) op order cut
    into pieces placed ``a b a b ...``: ``chunks`` pieces of about equal work, or, for a sequence,
    one piece per entry with that share of the work. An op the chunk's target cannot run goes to
    the pair's other target, else to its cheapest target; pinned ops stay pinned and each colocated
    group follows its first member."""
    equal = isinstance(chunks, (int, np.integer))
    shares = np.ones(int(chunks)) if equal else np.asarray(chunks, dtype=float)
    if len(shares) < 2 or not np.all(np.isfinite(shares) & (shares > 0)):
        raise ValueError(f"chunks: expected at least 2 pieces of positive work, got {chunks!r}")
    cost = np.asarray(problem.cost_ms, dtype=float)
    names = list(problem.targets)
    finite = np.where(np.isfinite(cost), cost, np.nan)
    work = np.nan_to_num(np.nanmean(finite, axis=1), nan=0.0) + 1e-6  # every op counts a little
    edges = np.cumsum(work) / float(np.sum(work))
    bounds = np.cumsum(shares) / float(np.sum(shares))
    # an op belongs to the piece its cumulative work ends in
    chunk_of = np.minimum(np.searchsorted(bounds, edges - 1e-9), len(shares) - 1)
    out = {}
    for a, b in pairs:
        ja, jb = names.index(a), names.index(b)
        asg = {}
        for i, op in enumerate(problem.ops):
            j, other = (ja, jb) if chunk_of[i] % 2 == 0 else (jb, ja)
            if not math.isfinite(cost[i, j]):
                j = other if math.isfinite(cost[i, other]) else int(np.nanargmin(finite[i]))
            asg[op] = names[j]
        asg.update(dict(problem.pinned))
        idx = {op: i for i, op in enumerate(problem.ops)}
        for group in problem.colocate:
            rows = [idx[op] for op in group]
            # the first member's target if every member runs there, else the pair's or any target that runs them all
            choices = [names.index(asg[group[0]]), ja, jb] + list(range(len(names)))
            j = next((c for c in choices if np.isfinite(cost[rows, c]).all()), names.index(asg[group[0]]))
            for op in group:
                asg[op] = names[j]
        out[f"probe:{a}|{b}"] = asg
    return out


def measure_probes(graph, problem, feeds: Sequence[Mapping[str, np.ndarray]], *,
                   chunks: int | Sequence[float] = DEFAULT_CHUNKS,
                   pairs: Sequence[tuple[str, str]] | None = None, rounds: int = 5, per_round: int = 3,
                   time_limit_s: float | None = None, say: Callable[[str], None] | None = None) -> list[dict]:
    """Compile the probe plans of ``problem`` (:func:`probe_assignments`) and time their partitions
    in the sequential hybrid executor, interleaved over ``rounds`` rounds of ``per_round`` requests.

    Returns one row per partition: ``probe``, ``partition``, ``target``, ``prev`` (the target of
    the partition run just before it; None for the first), ``ops``, ``n_inputs``, ``median_ms`` /
    ``p10_ms`` / ``p90_ms`` / ``n`` (its time in context plus an equal share of the executor's time
    between partitions). ``time_limit_s`` bounds compiling (probes left are skipped, said); a probe
    a target cannot compile or run (a PlacerError) is left out, said, and the others are timed.
    """
    say = say or (lambda msg: None)
    pairs = probe_pairs(problem) if pairs is None else list(pairs)
    assignments = probe_assignments(problem, pairs, chunks)
    t0 = time.monotonic()
    probes: dict[str, Any] = {}
    try:
        for name, asg in assignments.items():
            if time_limit_s is not None and time.monotonic() - t0 > time_limit_s:
                say(f"partition probes: time limit reached after {len(probes)} of {len(assignments)}")
                break
            raise_if_stopped()
            ex = None
            try:
                ex = HybridExecutor(materialize(graph, asg), parallel=False)
                ex.compile()
                for f in feeds[:2]:
                    ex.run(f)
            except PlacerError as exc:  # a probe a target cannot run is left out; the others still count
                say(f"partition probe {name} left out: {first_line(exc)}")
                if ex is not None:
                    ex.close()
                continue
            probes[name] = ex
        return _time_probes(probes, feeds, rounds, per_round)
    finally:
        for ex in probes.values():
            ex.close()


def _time_probes(probes: Mapping[str, HybridExecutor], feeds, rounds: int, per_round: int) -> list[dict]:
    """Interleaved rounds over the probe plans; a turn that began or ended with a core the host slowed
    is left out while at least half of a probe's requests remain (as :class:`~placer.run.bench.PlanBench`
    does)."""
    part_ms: dict[str, dict[str, list[float]]] = {k: {} for k in probes}
    total_ms: dict[str, list[float]] = {k: [] for k in probes}
    slowed: dict[str, list[bool]] = {k: [] for k in probes}
    keys = list(probes)
    warm_core_probe()
    before = core_slowdown() or 1.0
    for r in range(rounds):
        raise_if_stopped()
        for k in keys if r % 2 == 0 else keys[::-1]:
            for i in range(per_round):
                s = time.perf_counter_ns()
                _, times = probes[k].run_timed(feeds[(r * per_round + i) % len(feeds)], share_outputs=True)
                total_ms[k].append((time.perf_counter_ns() - s) / 1e6)
                for pid, ms in times.items():
                    part_ms[k].setdefault(pid, []).append(ms)
            after = core_slowdown() or 1.0
            slowed[k] += [max(before, after) >= SLOWED] * per_round
            before = after
    for k in keys:  # each probe's requests, less those of slowed turns
        kept = quiet_samples(range(len(total_ms[k])), slowed[k])[0].astype(int)
        total_ms[k] = [total_ms[k][i] for i in kept]
        part_ms[k] = {pid: [v[i] for i in kept] for pid, v in part_ms[k].items()}
    rows = []
    for k, ex in probes.items():
        med = {pid: float(np.median(v)) for pid, v in part_ms[k].items()}
        between = time_between_partitions(float(np.median(total_ms[k])), list(med.values()))
        prev = None
        for p in ex.partitions:  # the sequential executor runs them in this order
            v = np.asarray(part_ms[k][p.id]) + between
            rows.append({"probe": k, "partition": p.id, "target": p.target, "prev": prev, "ops": list(p.ops),
                         "n_inputs": len(p.inputs), "median_ms": float(np.median(v)),
                         "p10_ms": float(np.percentile(v, 10)), "p90_ms": float(np.percentile(v, 90)),
                         "n": int(v.size)})
            prev = p.target
    return rows
