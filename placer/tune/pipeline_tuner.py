"""``placer tune --objective throughput``: one pipeline stage per core, measured requests/s.

Targets are made per core (``onnxruntime@cpu0:t1``, ``openvino@cpu1:t1`` ...): a stage owns its
core. Their op costs come from the unpinned single-thread profiles of the same runtime (pinning
does not change an op's cost on a quiet core; it removes interference). The knobs are which
runtime runs on each core, the boundary cost and fusion groups; CP-SAT minimizes the bottleneck
stage (then latency); each candidate runs on the pipeline executor and is measured.

Baselines, measured in the same session: every runtime alone with all the cores as intra-op
threads (``KIND:tN``), one request at a time. The 2-core limit quoted in the report is
``N x`` the best single-thread throughput.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from placer.errors import PlacerError


def retarget(problem, names: list[str], source_cols: list[int], link_fallback_ms: list[float]):
    """A problem over new target ``names`` whose column ``k`` copies ``source_cols[k]``."""
    import dataclasses

    src = np.asarray(source_cols)
    lat = np.array(problem.link_latency_ms)[np.ix_(src, src)]
    per_byte = np.array(problem.link_ms_per_byte)[np.ix_(src, src)]
    for a in range(len(names)):
        for b in range(len(names)):
            if a != b and src[a] == src[b]:  # same runtime on two cores: a hand-off = the call cost
                lat[a, b], per_byte[a, b] = link_fallback_ms[b], 0.0
    return dataclasses.replace(
        problem, targets=tuple(names), cost_ms=np.array(problem.cost_ms)[:, src], link_latency_ms=lat,
        link_ms_per_byte=per_byte, link_charge="both", memory_cap_bytes=None, pinned={}, partition_overhead_ms=None,
    )


def tune_throughput(ctx, *, budget_s: float, out: Path, storage: str | None, seed: int, t_start: float,
                    solver_time_limit: float, say: Callable[[str], None], n_trials: int | None):
    import dataclasses

    import optuna

    from placer.materialize import materialize
    from placer.run.api import run_plan
    from placer.solve import solve
    from placer.tune import space
    from placer.tune.bench import PlanBench
    from placer.tune.tuner import (TrialRecord, TuneResult, _write_outputs, assignment_key, open_storage,
                                   sampler_seed, tell_trial)
    from placer.run.numerics import check_against_reference, load_inputs

    graph = ctx.graph
    cores = sorted(os.sched_getaffinity(0))
    n_cores = len(cores)
    if n_cores < 2:
        raise PlacerError("the throughput objective needs at least 2 cores (one pipeline stage per core)")
    kinds = [t.kind for t in ctx.targets]
    feeds = load_inputs("seed:0", graph, 4)
    records: list[TrialRecord] = []
    n_requests = 40

    # ---- baselines: each runtime alone on all cores, and at 1 thread for the N-core limit ----
    with PlanBench(feeds, rounds=3, per_round=4) as bench:
        base_names = {}
        for kind in kinds:
            if kind.startswith("tvm"):
                continue  # untuned TVM is 15-100x slower here; it is no throughput baseline
            for threads in (1, n_cores):
                name = f"{kind}:t{threads}"
                try:
                    mat = materialize(graph, {op.id: name for op in graph.ops})
                    bench.add(name, mat)
                    report = check_against_reference(graph.model, feeds, bench.outputs(name))
                    if not report.passed:  # every measured candidate is checked, baselines included
                        raise PlacerError(f"numerics check failed: {report.failures()[0].name}")
                    base_names[name] = mat
                except PlacerError as exc:
                    say(f"baseline {name}: {exc}")
        stats = bench.measure(list(base_names))
    single_thread_best = max((1000 / s.median_ms for n, s in stats.items() if n.endswith(":t1")), default=math.nan)
    for name, s in stats.items():
        rec = TrialRecord(name, f"single:{name}", "baseline", {}, None, math.nan, measured_ms=s.median_ms,
                          p10_ms=s.p10_ms, p90_ms=s.p90_ms, throughput_rps=1000 / s.median_ms, n_partitions=1)
        records.append(rec)
        say(f"baseline {name}: {rec.throughput_rps:.1f} req/s ({s.median_ms:.3f} ms/request)")
    multi = [r for r in records if r.key.endswith(f":t{n_cores}")]
    best_single = max(multi or records, key=lambda r: r.throughput_rps)
    limit = n_cores * single_thread_best
    say(f"best single runtime: {best_single.label} {best_single.throughput_rps:.1f} req/s; "
        f"{n_cores}-core limit {limit:.1f} req/s")

    # ---- study over the per-core runtime choice ---------------------------------------------
    storage_url = storage or f"sqlite:///{(out / 'study.db').resolve()}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=sampler_seed(seed, shared=storage is not None), n_startup_trials=3)
    study = optuna.create_study(storage=open_storage(storage_url),
                                study_name=f"placer-{graph.model_hash[:12]}-throughput",
                                direction="maximize", sampler=sampler, load_if_exists=True)
    fusion = space.fusion_groups(graph)
    usable = [k for k in kinds if not k.startswith("tvm")] or kinds
    by_key: dict[str, TrialRecord] = {}
    n_done = 0
    combos = list(itertools.product(usable, repeat=n_cores))
    for combo in combos[: max(1, min(len(combos), 4))]:
        study.enqueue_trial({f"core{c}": k for c, k in zip(cores, combo)} | {"boundary_ms": 0.0, "fuse": True},
                            skip_if_exists=True)
    while True:
        if n_trials is not None and n_done >= n_trials:
            break
        if n_trials is None and time.monotonic() - t_start > budget_s * 0.85:
            break
        trial = study.ask()
        choice = [trial.suggest_categorical(f"core{c}", usable) for c in cores]
        knobs: dict[str, Any] = {f"core{c}": k for c, k in zip(cores, choice)}
        knobs["boundary_ms"] = trial.suggest_categorical("boundary_ms", [0.0, 0.03, 0.1, 0.3])
        knobs["fuse"] = trial.suggest_categorical("fuse", [True, False])
        names = [f"{k}@cpu{c}:t1" for k, c in zip(choice, cores)]
        cols = [kinds.index(k) for k in choice]
        overhead = [ctx.table.overhead_ms.get(ctx.targets[j].name, 0.01) for j in cols]
        problem = retarget(ctx.problem, names, cols, overhead)
        colocate = tuple(tuple(g) for g in fusion) if knobs["fuse"] else ()
        problem = dataclasses.replace(problem, colocate=colocate,
                                      partition_overhead_ms=np.full(len(names), knobs["boundary_ms"]))
        t0 = time.monotonic()
        plan = solve(problem, "pipeline", "cpsat", time_limit=solver_time_limit, seed=seed, num_stages=n_cores)
        solve_s = time.monotonic() - t0
        key = assignment_key(plan)
        if key in by_key:
            rec = by_key[key]
        else:
            rec = TrialRecord(key, f"trial {trial.number}", "trial", knobs, plan, plan.bottleneck_ms, solve_s=solve_s)
            try:
                mat = materialize(graph, plan)
                rec.n_partitions = len(mat.partitions)
                res = run_plan(mat, "seed:0", pipeline=True, requests=n_requests, warmup=4)
                res.raise_first()
                m = res.measurement
                rec.throughput_rps, rec.measured_ms = m.throughput_rps, m.latency_p50_ms
                rec.p10_ms, rec.p90_ms = m.latency_min_ms, m.latency_p90_ms
                rec.numerics_ok = res.numerics.passed if res.numerics is not None else None
                if rec.numerics_ok is False:
                    raise PlacerError("numerics check failed")
                rec.partitions = [p.to_dict() for p in m.partitions]
            except PlacerError as exc:
                rec.error = str(exc).splitlines()[0]
            by_key[key] = rec
            records.append(rec)
        told = tell_trial(study, trial, rec, rec.throughput_rps, say,
                          f"{'+'.join(choice)} stages {plan.stage_targets}, predicted bottleneck "
                          f"{plan.bottleneck_ms:.3f} ms, measured {rec.throughput_rps or math.nan:.1f} req/s")
        n_done += int(told)

    measured = [r for r in records if r.throughput_rps is not None]
    best = max(measured, key=lambda r: r.throughput_rps)
    fell_back = best.kind == "baseline"
    if fell_back:
        mat = materialize(graph, {op.id: best.key for op in graph.ops}, out)
    else:
        mat = materialize(graph, best.plan, out)
    result = TuneResult(best=best, best_single=best_single, records=records, objective="throughput", out_dir=out,
                        fell_back=fell_back, wall_s=time.monotonic() - t_start, study_storage=storage_url,
                        extra={"core_limit_rps": limit, "single_thread_best_rps": single_thread_best,
                               "problem_provenance": dict(ctx.problem.provenance),
                               "n_partitions": len(mat.partitions)})
    _write_outputs(result, ctx, mat)
    return result
