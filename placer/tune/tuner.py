"""``placer tune``: search a plan's knobs against *measured* latency (or throughput).

The loop
--------
1. Profile what is missing (ops, whole model per target, links) and build the problem
   (:func:`placer.api.prepare`).
2. Baselines, measured in this session: every single-target plan (the whole model on one
   runtime, run by the same executor) — the yardstick every placement must beat.
3. An Optuna study (TPE, seeded, persistent SQLite storage by default) over the plan's knobs
   (:mod:`placer.tune.space`): each trial builds a problem variant, solves it with CP-SAT,
   materializes the plan, checks its outputs against ONNX Runtime, and measures it interleaved
   with the best baseline (:class:`placer.run.bench.PlanBench`). The trial's value is the
   measured median latency (latency objective) or the measured requests/s (throughput
   objective, pipeline executor). Plans already measured (same assignment) are not re-run.
4. Feedback: after each trial, the measured partition times are compared with the problem's
   predicted partition costs; the per-target excess becomes the partition entry cost of later
   trials (``PlacementProblem.partition_overhead_ms``), and the records are handed to the cost
   model when it has ``add_partition_measurements``.
5. Yardsticks (what a user would run instead, :mod:`placer.run.yardsticks`): ONNX Runtime and
   OpenVINO loaded with their defaults and at their best latency settings, each in a process of
   its own, measured in the same interleaved rounds as the candidates from the baselines on.
6. The measured guard: at the end every measured candidate and every yardstick are measured
   again, side by side, in the same final rounds, and every figure of the final table comes from
   those rounds; the best placer candidate is the result. If no placement beats the best single
   target, that target's plan is the result, and the verdict says how it compares with the best
   yardstick.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from placer.costing import segment_ratio_stats
from placer.errors import PlacerError, first_line
from placer.interrupts import deferred, raise_if_stopped
from placer.tune import shared_study


@dataclass
class TrialRecord:
    """One measured candidate (a baseline or a trial)."""

    key: str
    label: str
    kind: str  # "baseline" | "trial" | "yardstick" (a runtime loaded as a user would, no plan)
    knobs: dict[str, Any]
    plan: Any
    predicted_ms: float
    measured_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    throughput_rps: float | None = None
    n_partitions: int = 0
    numerics_ok: bool | None = None
    max_abs_err: float | None = None
    solve_s: float = 0.0
    error: str | None = None
    partitions: list[dict] = field(default_factory=list)
    #: True when ``measured_ms`` comes from the final interleaved rounds (the ones the verdict uses)
    final: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["plan"] = self.plan.to_json() if self.plan is not None else None
        return d


@dataclass
class TuneResult:
    """What ``tune`` found: the chosen record, every record, and where the outputs went."""

    best: TrialRecord
    best_single: TrialRecord
    records: list[TrialRecord]
    objective: str
    out_dir: Path
    fell_back: bool
    wall_s: float
    report_path: Path | None = None
    study_storage: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def speedup_vs_best_single(self) -> float:
        return self.speedup_vs(self.best_single)

    @property
    def yardsticks(self) -> list[TrialRecord]:
        return [r for r in self.records if r.kind == "yardstick" and (r.measured_ms or r.throughput_rps)]

    @property
    def best_default(self) -> TrialRecord | None:
        """The fastest yardstick (what a user would run instead), or None if none was measured."""
        ys = self.yardsticks
        if not ys:
            return None
        if self.objective == "throughput":
            return max(ys, key=lambda r: r.throughput_rps or 0.0)
        return min(ys, key=lambda r: r.measured_ms or math.inf)

    def yardstick(self, kind: str) -> TrialRecord | None:
        from placer.run.yardsticks import label

        return next((r for r in self.yardsticks if r.key == label(kind)), None)

    def verdict(self) -> list[str]:
        """The result in plain sentences, every figure from the final interleaved rounds."""
        best, single, default = self.best, self.best_single, self.best_default
        tp = self.objective == "throughput"
        fig = (lambda r: f"{r.throughput_rps:.1f} req/s") if tp else (lambda r: f"{r.measured_ms:.3f} ms")
        lines = []
        if self.extra.get("n_trials") == 0 and not tp:
            lines.append("No trial ran: the budget was spent before the search (profiling, baselines). "
                         "Give it a larger --budget, or run it again now that the profiles are stored.")
        lines.append(f"Chosen: {best.label}, {fig(best)}"
                     + (" (no placement measured faster than the best single target)" if self.fell_back else ""))
        if default is not None:
            ort = self.yardstick("ort-default")
            lines.append(f"vs the best runtime default ({default.label}, {fig(default)}): "
                         f"{self.speedup_vs(default):.2f}x"
                         + (f"; vs ONNX Runtime at its defaults ({fig(ort)}): {self.speedup_vs(ort):.2f}x"
                            if ort is not None and ort is not default else ""))
            if default.numerics_ok is False:
                prec = default.knobs.get("INFERENCE_PRECISION_HINT")
                lines.append(f"{default.label} does not pass the numerics check against the f32 reference"
                             + (f" (it computes in {prec} on this CPU)" if prec else "")
                             + "; it stays the yardstick all the same: it is what runs by default"
                             + (" (`--precision bf16` tunes at that precision)." if prec == "bf16" else "."))
            if self.speedup_vs(default) < 0.97:
                lines.append(f"{default.label} was faster than every placement measured: "
                             f"use it ({default.knobs.get('what', '')}), or tune longer.")
        if single is not best:
            lines.append(f"vs the best single target ({single.label}, {fig(single)}): "
                         f"{self.speedup_vs(single):.2f}x")
        return lines

    def speedup_vs(self, other: TrialRecord | None) -> float:
        """How many times faster the result is than ``other`` (> 1: the result wins); NaN without it."""
        if other is None:
            return math.nan
        if self.objective == "throughput":
            return (self.best.throughput_rps or 0.0) / max(other.throughput_rps or 1e-12, 1e-12)
        return (other.measured_ms or math.nan) / (self.best.measured_ms or math.nan)


#: single-target baselines predicted this many times slower than the fastest are not measured
SKIP_BASELINE_FACTOR = 5.0
#: the final interleaved rounds measure the best this many candidates (plus every single target
#: and every yardstick); the others keep the figure of their trial and cannot win
FINAL_CANDIDATES = 8
FINAL_ROUNDS = 5
#: each candidate's share of a final round lasts about this long (more requests for small models:
#: a few sub-millisecond requests are at the mercy of one scheduler tick), within 4..64 requests
FINAL_ROUND_MS = 25.0


def final_requests(best_ms: float) -> int:
    """Requests per candidate per final round for a model whose best candidate takes ``best_ms``."""
    if not (best_ms > 0 and math.isfinite(best_ms)):
        return 4
    return int(min(64, max(4, math.ceil(FINAL_ROUND_MS / best_ms))))
#: the search stops early (budget or not) after this many trials in a row proposed measured plans
CONVERGED_AFTER = 40
#: the budget when neither a budget nor a trial count is given
DEFAULT_BUDGET_S = 120.0


def fill(rec: TrialRecord, s) -> None:
    """Copy a :class:`~placer.run.bench.LatencyStats` into a record."""
    rec.measured_ms, rec.p10_ms, rec.p90_ms = s.median_ms, s.p10_ms, s.p90_ms
    rec.throughput_rps = 1000.0 / s.median_ms if s.median_ms == s.median_ms else None


def add_yardsticks(bench, yardsticks, records: list[TrialRecord], model, feeds, say,
                   tolerance: Mapping[str, float] | None = None) -> list[str]:
    """Put every yardstick that loaded into ``bench`` and ``records`` (numerics checked against the
    reference at ``tolerance``, as the candidates are); returns their keys."""
    from placer.run.numerics import check_against_reference
    from placer.run.yardsticks import DESCRIPTIONS

    keys = []
    for kind, y in yardsticks.ready.items():
        rec = TrialRecord(y.key, y.key, "yardstick", {"what": DESCRIPTIONS[kind], **y.info}, None, math.nan,
                          n_partitions=1)
        outs = y.outputs(len(feeds), yardsticks.output_names)
        if outs is not None:
            report = check_against_reference(model, feeds, outs, **(tolerance or {}))
            rec.numerics_ok = bool(report.passed)
            rec.max_abs_err = float(max((o.max_abs for o in report.outputs), default=0.0))
        if not y.ok:
            say(f"yardstick {kind}: failed ({y.error})")
            continue
        bench.add_yardstick(y)
        records.append(rec)
        keys.append(y.key)
    for kind, y in yardsticks.all.items():
        if not y.ok:
            records.append(TrialRecord(y.key, y.key, "yardstick", {"what": DESCRIPTIONS[kind]}, None, math.nan,
                                       error=f"not available: {y.error}"))
    return keys


def assignment_key(plan) -> str:
    blob = json.dumps([sorted(plan.assignment.items()), sorted((plan.stage or {}).items())], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _partition_feedback(problem, plan, mat, measured: Mapping[str, float]) -> list[dict]:
    """Measured vs predicted time of each partition of a measured plan.

    ``predicted_ms`` is the sum of its ops' costs in ``problem`` (net of the call overhead, as the
    solver prices it); ``overhead_ms`` the target's profiled call overhead, which the measured
    time includes. The tuner's entry-cost feedback learns the difference, overhead included."""
    idx = {o: i for i, o in enumerate(problem.ops)}
    overheads = problem.provenance.get("overhead_ms", {}) or {}
    rows = []
    for p in mat.partitions:
        j = problem.targets.index(plan.assignment[p.ops[0]])
        predicted = float(sum(problem.cost_ms[idx[o], j] for o in p.ops))
        if p.id in measured:
            rows.append({"partition": p.id, "target": plan.assignment[p.ops[0]], "ops": list(p.ops),
                         "n_inputs": len(p.inputs), "predicted_ms": predicted, "measured_ms": measured[p.id],
                         "overhead_ms": float(overheads.get(plan.assignment[p.ops[0]], 0.0)),
                         "costs": problem.provenance.get("costs", "calibrated")})
    return rows


def learned_entry_ms(rows: Sequence[Mapping[str, Any]], targets: Sequence[str], costs: str | None = None) -> np.ndarray:
    """Per target: median of (measured - predicted) per received tensor over measured partitions,
    clipped at 0. This is the partition entry cost later trials are charged (feedback step).
    ``costs``: only rows predicted with that cost-model variant (their predictions differ in scale)."""
    out = np.zeros(len(targets))
    if costs is not None:
        rows = [r for r in rows if r.get("costs", "calibrated") == costs]
    for j, t in enumerate(targets):
        excess = [(r["measured_ms"] - r["predicted_ms"]) / max(r["n_inputs"], 1) for r in rows if r["target"] == t]
        if excess:
            out[j] = max(float(np.median(excess)), 0.0)
    return out


def tell_once(study, trial, value: float | None = None, attrs: Mapping[str, Any] | None = None) -> bool:
    """Store ``attrs`` on ``trial`` and tell Optuna its value (``None``: FAIL); False if another worker
    already finished it.

    Two workers on one SQLite study can ``ask()`` the same enqueued (WAITING) trial: Optuna's
    pop of a waiting trial is not atomic there (SQLite has no ``SELECT ... FOR UPDATE``). The
    second one to finish must not crash ("Cannot tell a COMPLETE trial"): its measurement is
    dropped and the caller asks for another trial, so no trial is lost or counted twice.
    """
    import optuna

    try:
        for k, v in (attrs or {}).items():
            trial.set_user_attr(k, v)
        if value is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    except ValueError as exc:
        if "Cannot tell" not in str(exc):
            raise
        return False
    return True


def tell_trial(study, trial, rec: TrialRecord, value: float | None, say: Callable[[str], None], message: str) -> bool:
    """Store the trial's plan key and prediction with it, then tell Optuna its measured value (or FAIL).

    Returns False (and says so) when another worker had already finished the same trial (see
    :func:`tell_once`): the caller then does not count it."""
    attrs = {"plan_key": rec.key, "predicted": rec.predicted_ms, "n_partitions": rec.n_partitions,
             **shared_study.plan_attrs(rec.plan)}
    if not tell_once(study, trial, value, attrs):
        say(f"trial {trial.number}: another worker finished it first; its result is kept, this one dropped")
        return False
    if value is None:
        say(f"trial {trial.number}: failed ({rec.error})")
    else:
        say(f"trial {trial.number}: {message}")
    return True


#: a running trial records a heartbeat this often (s); one silent for GRACE_PERIOD_S is failed
HEARTBEAT_INTERVAL_S = 10
GRACE_PERIOD_S = 60


def open_storage(url: str, *, heartbeat_interval: int = HEARTBEAT_INTERVAL_S, grace_period: int = GRACE_PERIOD_S):
    """The Optuna RDB storage at ``url``, safe when several ``placer tune`` workers open a fresh one at once.

    Optuna creates its schema on first use without a lock, so two processes starting on an empty
    database race ("table ... already exists", "UNIQUE constraint failed: alembic_version";
    optuna#1092, #4621). The loser retries and then finds the schema. SQLite waits up to 60 s for
    the write lock instead of the default 5 s (trials of several workers commit concurrently).

    Heartbeats: a worker records one every ``heartbeat_interval`` s while it runs a trial
    (:func:`trial_heartbeat`); :func:`fail_stale` marks FAIL a RUNNING trial silent for
    ``grace_period`` s, i.e. one whose worker was killed, so the study does not keep it forever.
    """
    import random

    import optuna
    import sqlalchemy.exc

    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    for attempt in range(8):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_interval,
                                                  grace_period=grace_period)
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            # SQLite: "table ... already exists" / locked; PostgreSQL: DuplicateTable, UniqueViolation
            if attempt == 7:
                raise
            time.sleep(0.1 + 0.4 * random.random())
    raise AssertionError("unreachable")


def ask(study):
    """``study.ask()`` without Optuna's warning that heartbeats are meant for ``optimize``: with
    ask/tell placer records them itself (:func:`trial_heartbeat`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed", category=UserWarning)
        return study.ask()


@contextlib.contextmanager
def trial_heartbeat(study, trial):
    """Context manager: a thread records the trial's heartbeat while the block runs (ask/tell has
    none of its own; ``study.optimize`` does this internally). The first heartbeat is recorded
    before the block starts: Optuna never counts a RUNNING trial without one as stale, so a worker
    killed before its thread's first beat would leave the trial RUNNING forever."""
    from optuna.storages._heartbeat import get_heartbeat_thread, is_heartbeat_enabled

    storage = study._storage
    if is_heartbeat_enabled(storage):
        storage.record_heartbeat(trial._trial_id)
    with get_heartbeat_thread(trial._trial_id, storage):
        yield


@contextlib.contextmanager
def asked_trial(study, on_ask: Callable[[Any], None] = lambda trial: None):
    """Ask ``study`` for a trial and run the block with it: heartbeats while it runs
    (:func:`trial_heartbeat`), and if it is interrupted (Ctrl-C, SIGTERM) or fails before telling
    Optuna, the trial is told FAIL, so the study keeps no RUNNING trial and a later run resumes it
    cleanly. A stop request arriving while the trial is being asked for (``on_ask`` included) is
    held until the trial is known (:func:`placer.interrupts.deferred`): the trial is then failed."""
    trial = heartbeat = None
    try:
        with deferred():
            trial = ask(study)
            on_ask(trial)
            heartbeat = trial_heartbeat(study, trial)
            heartbeat.__enter__()
        raise_if_stopped()
        yield trial
    except BaseException:
        if trial is not None:
            tell_once(study, trial, None)
        raise
    finally:
        if heartbeat is not None:
            heartbeat.__exit__(None, None, None)


def storage_for(url: str, stale_after_s: float = GRACE_PERIOD_S):
    """:func:`open_storage` with heartbeats every sixth of ``stale_after_s`` (at least 1 s) and a
    trial silent for ``stale_after_s`` counted as its worker's death."""
    grace = max(2, int(round(stale_after_s)))
    return open_storage(url, heartbeat_interval=max(1, grace // 6), grace_period=grace)


def fail_stale(study, say: Callable[[str], None] = lambda m: None, grace_s: float = GRACE_PERIOD_S) -> int:
    """Mark FAIL the RUNNING trials whose worker stopped sending heartbeats; returns how many."""
    import optuna

    before = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
    if not before:
        return 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    after = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
    failed = sorted(before - after)
    if failed:
        say(f"trial(s) {', '.join(map(str, failed))}: their worker stopped (no heartbeat for "
            f"{grace_s:.0f} s): marked failed")
    return len(failed)


def sampler_seed(seed: int, *, shared: bool) -> int:
    """The TPE seed: ``seed`` for a private study (reproducible); for a shared study (``--storage``)
    mixed with the process id, so concurrent workers do not replay one random startup sequence."""
    return seed if not shared else (int(seed) * 1_000_003 + os.getpid()) % (2**32)


def tune(
    model,
    *,
    targets: Sequence[str] | None = None,
    objective: str = "latency",
    budget_s: float | None = None,
    out_dir: str | os.PathLike = "placer-out",
    storage: str | None = None,
    db: str | os.PathLike | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    n_trials: int | None = None,
    seed: int = 0,
    solver_time_limit: float = 5.0,
    cost_model=None,
    cost_model_dir: str | os.PathLike | None | bool = True,
    progress: Callable[[str], None] | None = None,
    precision: str = "f32",
    stale_after_s: float = GRACE_PERIOD_S,
    started: float | None = None,
) -> TuneResult:
    """Tune the placement of ``model``; write plan, stage config, Relax module and report to ``out_dir``.

    ``objective``: ``"latency"`` (minimize measured median latency, hybrid executor) or
    ``"throughput"`` (maximize measured requests/s, pipeline executor, one stage per core).
    ``budget_s`` bounds the whole call (profiling counts against it; the final rounds come after);
    ``n_trials`` bounds the search. Given both, whichever comes first ends it; given neither, the
    budget is :data:`DEFAULT_BUDGET_S`. The budget counts from ``started`` (a ``time.monotonic()``
    value; default: this call): ``placer tune`` passes its process's start, so that the whole
    command, imports included, keeps to it.

    The learned cost model (:mod:`placer.tune.learned`): ``cost_model`` (a fitted
    :class:`costmodels.CostModel`) is used and updated as given (saved only to an explicit
    ``cost_model_dir``); otherwise one is fitted on the
    profile store, with the partitions earlier runs measured carried over from
    ``cost_model_dir`` (``True``: next to the profile store; ``None``/``False``: no learned
    model at all, measured costs only). Measured partitions are fed to it between trials (it prices the
    ``costs="learned"`` variant) and it is saved back to ``cost_model_dir`` at the end.

    ``precision`` picks the default targets (``targets`` None): ``f32`` (every output within the f32
    tolerance of the reference) or ``bf16`` (OpenVINO in bf16 where the CPU has it, as OpenVINO's own
    default does there; outputs checked at the bf16 tolerance). Given targets, the precision follows
    them (a ``openvino-bf16`` target makes the plans bf16).
    """
    from placer import api

    if budget_s is None and n_trials is None:
        budget_s = DEFAULT_BUDGET_S
    if objective not in ("latency", "throughput"):
        raise PlacerError(f"objective must be 'latency' or 'throughput', got {objective!r}")
    if not (2 <= stale_after_s <= 86400):
        raise PlacerError(f"stale-after {stale_after_s}: must be between 2 s and one day")
    t_start = time.monotonic() if started is None else min(float(started), time.monotonic())
    say = progress or (lambda msg: None)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise PlacerError(f"--out {out}: exists and is not a directory")
    # cheap checks before any costly work: the targets parse, the model loads
    from placer.devices import make_targets
    from placer.devices.registry import default_target_names

    if targets is None:
        targets = default_target_names(precision)
    make_targets(targets)
    graph = api.load(model, shapes) if not hasattr(model, "ops") else model
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _tune_in(out, graph, targets=targets, objective=objective, budget_s=budget_s, storage=storage,
                        db=db, n_trials=n_trials, seed=seed, solver_time_limit=solver_time_limit,
                        cost_model=cost_model, cost_model_dir=cost_model_dir, say=say, t_start=t_start,
                        stale_after_s=stale_after_s)
    except KeyboardInterrupt:  # interrupted: the study stays, so that the next run resumes it
        raise
    except BaseException:
        if created:  # a failed run leaves nothing behind it created
            shutil.rmtree(out, ignore_errors=True)
        raise


def _tune_in(out: Path, graph, *, targets, objective, budget_s, storage, db, n_trials, seed, solver_time_limit,
             cost_model, cost_model_dir, say, t_start, stale_after_s=GRACE_PERIOD_S) -> TuneResult:
    """:func:`tune` once its arguments are checked and ``out`` exists."""
    import optuna

    from placer import api
    from placer.materialize import materialize
    from placer.run.bench import PlanBench
    from placer.run.numerics import check_against_reference, load_inputs
    from placer.run.yardsticks import YardstickSet, latency_kinds
    from placer.solve import solve
    from placer.tune import learned, space

    storage_url = storage or f"sqlite:///{(out / 'study.db').resolve()}"
    try:  # a bad --storage fails now, not after profiling and the baselines
        storage_for(storage_url, stale_after_s)
    except Exception as exc:  # noqa: BLE001 - sqlalchemy / optuna errors of every kind
        msg = first_line(exc, 200)
        raise PlacerError(f"--storage {storage_url!r}: cannot open the Optuna storage ({type(exc).__name__}: {msg})") \
            from None

    say(f"model {graph.name}: {len(graph.ops)} ops, {len(graph.unique_signatures())} unique signatures")
    ctx = api.prepare(graph, targets=targets, db=db, cost_model=cost_model, progress=False, say=say)
    say(f"profiling done ({time.monotonic() - t_start:.1f} s"
        + (f" of the {budget_s:.0f} s budget)" if budget_s is not None else ")"))
    if objective == "throughput":  # per-core pipeline stages, measured; the learned model is a latency-mode knob
        from placer.tune.pipeline_tuner import tune_throughput

        return tune_throughput(ctx, budget_s=budget_s, out=out, storage=storage, seed=seed, t_start=t_start,
                               solver_time_limit=solver_time_limit, say=say, n_trials=n_trials,
                               stale_after_s=stale_after_s)
    model_dir = learned.default_model_dir(db) if cost_model_dir is True else (cost_model_dir or None)
    if cost_model is not None and cost_model_dir is True:
        model_dir = None  # a model the caller passed is saved only where the caller says, never over the default
    if cost_model is None and model_dir is not None and any(not getattr(t, "simulated", False) for t in ctx.targets):
        cost_model = learned.fit_or_update(ctx, model_dir, say, seed=seed)

    feeds = load_inputs("seed:0", graph, 4)
    records: list[TrialRecord] = []
    by_key: dict[str, TrialRecord] = {}
    feedback_rows: list[dict] = []
    names = [t.name for t in ctx.targets]

    bench = PlanBench(feeds, rounds=3, per_round=4)
    yardsticks = YardstickSet(graph.model, feeds, latency_kinds(), say=say)
    try:
        ys_keys = add_yardsticks(bench, yardsticks, records, graph.model, feeds, say, ctx.tolerance)
        best_default_key: list[str] = []  # the fastest yardstick, once the baselines are measured

        def measure_plan(plan, label: str, kind: str, knobs: dict, problem, solve_s: float) -> TrialRecord:
            key = assignment_key(plan)
            if key in by_key:  # same placement as an earlier candidate: reuse its measurement
                return by_key[key]
            rec = TrialRecord(key, label, kind, knobs, plan, plan.makespan_ms, solve_s=solve_s)
            try:
                mat = materialize(graph, plan)
                rec.n_partitions = len(mat.partitions)
                bench.add(key, mat)
                outs = bench.outputs(key)
                report = check_against_reference(graph.model, feeds, outs, **ctx.tolerance)
                rec.numerics_ok = bool(report.passed)
                rec.max_abs_err = float(max((o.max_abs for o in report.outputs), default=0.0))
                if not report.passed:
                    raise PlacerError(f"numerics check failed: {report.failures()[0].name}")
                keys = [key] + ([best_single.key] if best_single_holder and best_single.key != key else [])
                keys += [best_default_key[0]] if best_default_key else []
                stats = bench.measure(keys)
                s = stats[key]
                rec.measured_ms, rec.p10_ms, rec.p90_ms = s.median_ms, s.p10_ms, s.p90_ms
                rec.throughput_rps = 1000.0 / s.median_ms
                rec.partitions = _partition_feedback(problem, plan, mat, bench.partition_medians(key))
                feedback_rows.extend(rec.partitions)
                if cost_model is not None and hasattr(cost_model, "add_partition_measurements"):
                    learned.feed(cost_model, rec.partitions, graph)
            except PlacerError as exc:
                rec.error = first_line(exc)
            records.append(rec)
            by_key[key] = rec
            return rec

        # ---- baselines: each single target, measured ---------------------------------------
        best_single_holder: list[TrialRecord] = []
        reserve_holder: list[float] = []  # the share of the budget kept for the final rounds
        best_single = None
        singles = {}
        for name in names:
            plan = solve(ctx.problem, "latency", f"single:{name}", time_limit=solver_time_limit)
            if len(set(plan.assignment.values())) != 1:
                say(f"baseline {name}: does not run every op, skipped")
                continue
            singles[name] = plan
        fastest = min((p.makespan_ms for p in singles.values()), default=math.inf)
        for name, plan in singles.items():
            if plan.makespan_ms > SKIP_BASELINE_FACTOR * fastest:
                # e.g. untuned TVM, 15-100x slower here: measuring it would eat the budget
                records.append(TrialRecord(assignment_key(plan), f"single:{name}", "baseline", {}, plan,
                                           plan.makespan_ms, n_partitions=1,
                                           error=f"not measured: predicted {plan.makespan_ms / fastest:.0f}x "
                                                 "slower than the fastest target"))
                say(f"baseline {name}: predicted {plan.makespan_ms:.1f} ms, not measured")
                continue
            rec = measure_plan(plan, f"single:{name}", "baseline", {}, ctx.problem, plan.stats.wall_s)
            if rec.measured_ms is not None:
                say(f"baseline {name}: {rec.measured_ms:.3f} ms measured ({plan.makespan_ms:.3f} predicted)")
        ok = [r for r in records if r.kind == "baseline" and r.measured_ms is not None]
        if not ok:
            raise PlacerError(f"no target runs the whole of {graph.name!r}: nothing to compare a plan with")
        # re-measure all baselines interleaved with the yardsticks so they share the same conditions
        t_guard = time.monotonic()
        stats = bench.measure([r.key for r in ok] + ys_keys)
        # the final rounds measure the same kind of list again, fresh, then the outputs are written:
        # the search leaves them twice this measurement's time, three Relax builds, half TVM's import
        # and a second (at least 15 % of the budget, at most half), so the whole command ends near its
        # budget
        guard_s = time.monotonic() - t_guard
        # after the final rounds the best plan's Relax program is built and compiled, the outputs
        # written, and TVM's teardown ends the process (about half its import time): TVM imported now
        # (seconds, spent anyway) and the best single target's program built, both timed
        t_import = time.monotonic()
        import tvm  # noqa: F401

        t_build = time.monotonic()
        best_ok = min(ok, key=lambda r: stats[r.key].median_ms)
        try:
            materialize(graph, best_ok.plan, relax=True)
        except PlacerError:
            pass  # the final build reports it, where it matters
        build_s = time.monotonic() - t_build
        tail_s = 2 * guard_s + 3 * build_s + 0.5 * (t_build - t_import) + 1.0
        reserve_holder.append(min(0.5, max(0.15, tail_s / budget_s)) if budget_s else 0.15)
        for r in ok + [r for r in records if r.key in ys_keys]:
            fill(r, stats[r.key])
        best_single = min(ok, key=lambda r: r.measured_ms)
        best_single_holder.append(best_single)
        if ys_keys:
            best_default_key.append(min(ys_keys, key=lambda k: stats[k].median_ms))
        # re-price the problem from the whole-model times just measured (interleaved, same executor);
        # a stored whole-model time these contradict is flagged for re-measurement
        session_ms = {r.label.split(":", 1)[1]: r.measured_ms for r in ok}
        api.check_store(ctx, session_ms, say)
        ctx = api.recalibrate(ctx, session_ms)
        say(f"best single target: {best_single.label} {best_single.measured_ms:.3f} ms"
            + (f"; best yardstick {best_default_key[0]} {stats[best_default_key[0]].median_ms:.3f} ms"
               if best_default_key else ""))

        # ---- the study ---------------------------------------------------------------------
        sampler = optuna.samplers.TPESampler(seed=sampler_seed(seed, shared=storage is not None), n_startup_trials=4)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(storage=storage_for(storage_url, stale_after_s),
                                    study_name=shared_study.study_name(graph.model_hash, ctx.targets, "latency"),
                                    direction="minimize", sampler=sampler, load_if_exists=True)
        fusion = space.fusion_groups(graph)
        default_knobs = space.default_knobs(names)
        study.enqueue_trial(default_knobs, skip_if_exists=True)

        def run_trial(trial) -> bool:
            """Solve, measure and tell one trial; False if another worker had finished it."""
            knobs = space.suggest_latency(trial, names)
            entry = learned_entry_ms(feedback_rows, names, knobs["costs"])
            priced = (learned.learned_costs(ctx, cost_model)
                      if knobs["costs"] == "learned" and cost_model is not None else None)
            problem = space.latency_problem(ctx, knobs, fusion, entry, priced)
            t0 = time.monotonic()
            plan = space.solve_trial(problem, knobs, time_limit=solver_time_limit, seed=seed)
            solve_s = time.monotonic() - t0
            cached = by_key.get(assignment_key(plan))
            if cached is None and plan.makespan_ms > SKIP_BASELINE_FACTOR * best_single.measured_ms:
                # e.g. everything on untuned TVM: measuring it would eat the budget; tell TPE the prediction
                cached = TrialRecord(assignment_key(plan), f"trial {trial.number}", "trial", knobs, plan,
                                     plan.makespan_ms, solve_s=solve_s,
                                     error=f"not measured: predicted {plan.makespan_ms / best_single.measured_ms:.0f}x "
                                           f"slower than the best single target")
                records.append(cached)
                by_key[cached.key] = cached
            if cached is not None and cached.measured_ms is None and (cached.error or "").startswith("not measured"):
                return tell_trial(study, trial, cached, cached.predicted_ms, say, cached.error)  # same value each time
            rec = measure_plan(plan, f"trial {trial.number}", "trial", knobs, problem, solve_s)
            return tell_trial(study, trial, rec, rec.measured_ms, say,
                              f"{rec.n_partitions} partitions, predicted {rec.predicted_ms:.3f} ms, "
                              f"measured {rec.measured_ms or math.nan:.3f} ms (best single {best_single.measured_ms:.3f})")

        n_done = 0
        search_share = 1.0 - (reserve_holder[-1] if reserve_holder else 0.15)
        say("search: " + " or ".join(
            ([f"trials until {budget_s * search_share:.0f} s of the {budget_s:.0f} s budget"]
             if budget_s is not None else [])
            + ([f"{n_trials} trials"] if n_trials is not None else []))
            + f" ({time.monotonic() - t_start:.0f} s spent)")
        repeats = 0  # trials in a row whose plan was already measured
        while True:
            elapsed = time.monotonic() - t_start
            if n_trials is not None and n_done >= n_trials:
                break
            if budget_s is not None and elapsed > budget_s * search_share:
                break
            if n_trials is None and repeats >= CONVERGED_AFTER:
                say(f"search converged: the last {repeats} trials proposed plans already measured")
                break
            raise_if_stopped()  # a stop request dropped inside a finalizer is not lost
            fail_stale(study, say, stale_after_s)
            n_plans = len(by_key)
            with asked_trial(study, lambda t: shared_study.mark_worker(t, ctx.targets)) as trial:
                # an interrupted or killed worker's trial is failed, never left RUNNING
                n_done += int(run_trial(trial))
            repeats = repeats + 1 if len(by_key) == n_plans else 0

        if n_done == 0:
            say("no trial ran: the budget was spent before the search (profiling, baselines); "
                "the result is the best single target")
        # ---- the measured guard: every candidate and yardstick again, in the same final rounds ----
        measured = sorted((r for r in records if r.measured_ms is not None and r.kind != "yardstick"),
                          key=lambda r: r.measured_ms)
        finalists = measured[:FINAL_CANDIDATES]
        # every single target too: its trial-time figure may come from a noisier moment than the others'
        finalists += [r for r in measured if r.kind == "baseline" and r not in finalists]
        if best_single not in finalists:
            finalists.append(best_single)
        say(f"final rounds: {len(finalists)} candidate(s) and {len(ys_keys)} yardstick(s), interleaved")
        final_keys = [r.key for r in finalists] + ys_keys
        fastest = min((r.measured_ms for r in finalists), default=math.nan)
        stats = bench.measure(final_keys, rounds=FINAL_ROUNDS, fresh=True, per_round=final_requests(fastest))
        for r in records:
            if r.key in stats:
                fill(r, stats[r.key])
                r.final = True
        best = min(finalists, key=lambda r: r.measured_ms)
        singles_final = [r for r in finalists if r.kind == "baseline"]
        best_single = min(singles_final, key=lambda r: r.measured_ms)
        fell_back = best.kind == "baseline"  # no placement measured faster than one target alone
        mat = materialize(graph, best.plan, out)
    finally:
        bench.close()
        yardsticks.close()
    cm_info = None
    if cost_model is not None and hasattr(cost_model, "partition_records"):
        if model_dir is not None:
            learned.save(cost_model, model_dir, say)
        cm_info = {"id": cost_model.model_id, "dir": str(model_dir) if model_dir else None,
                   "partition_ratio": learned.partition_ratios(cost_model, [n for n in names if n in cost_model.targets]),
                   "tune_partitions": len(learned.tune_records(cost_model)),
                   "carried_over": cost_model.card.get("tune_partitions_carried", 0)}

    result = TuneResult(best=best, best_single=best_single, records=records, objective="latency", out_dir=out,
                        fell_back=fell_back, wall_s=time.monotonic() - t_start, study_storage=storage_url,
                        extra={"problem_provenance": dict(ctx.problem.provenance), "n_partitions": len(mat.partitions),
                               "cost_model": cm_info, "segment_ratios": segment_ratio_stats(ctx.table),
                               "n_trials": n_done, "final_rounds": FINAL_ROUNDS})
    _write_outputs(result, ctx, mat)
    return result


def _write_outputs(result: TuneResult, ctx, mat) -> None:
    from placer.report import write_tune_report

    out = result.out_dir
    try:  # the deployable artifact: the Relax module compiled (placer run --executor relax --compiled)
        result.extra["compiled_module"] = mat.export_compiled(out).name
    except PlacerError as exc:
        result.extra["compiled_module_error"] = first_line(exc, 300)
    (out / "trials.json").write_text(json.dumps([r.to_dict() for r in result.records], indent=1, default=str))
    summary = {"format": "placer.tune", "version": 1, "objective": result.objective, "best": result.best.key,
               "best_label": result.best.label, "best_single": result.best_single.key, "fell_back": result.fell_back,
               "wall_s": result.wall_s, "study_storage": result.study_storage, "extra": result.extra,
               "targets": [t.name for t in ctx.targets], "model": ctx.graph.source}
    (out / "tune.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=str))
    result.report_path = write_tune_report(result, ctx)


def load_tune_result(out_dir: str | os.PathLike):
    """A finished tune directory back as ``(TuneResult, context)`` for re-rendering its report."""
    from types import SimpleNamespace

    from placer.errors import PlanError
    from placer.graph import load_graph
    from placer.plan import Plan
    from placer.safe_io import load_json
    from placer.tune.saved import check_summary, checked_record

    out = Path(out_dir)
    if not out.is_dir():
        raise PlacerError(f"{out}: not a placer tune output directory (not a directory)")
    for name in ("tune.json", "trials.json"):
        if not (out / name).exists():
            raise PlacerError(f"{out}: not a placer tune output directory ({name} is missing)")
    summary = load_json(out / "tune.json", "the tune summary")
    rows = load_json(out / "trials.json", "the tune trials")
    check_summary(summary, out / "tune.json")
    if not isinstance(rows, list):
        raise PlacerError(f"{out / 'trials.json'}: expected a list of trial records")
    records = []
    for i, r in enumerate(rows):
        r = checked_record(r, f"{out / 'trials.json'}: record {i}")
        try:
            r["plan"] = Plan.from_json(r["plan"]) if r.get("plan") else None
        except PlanError as exc:
            raise PlacerError(f"{out / 'trials.json'}: record {i}: {exc}") from None
        records.append(TrialRecord(**r))
    by_key = {r.key: r for r in records}
    if summary.get("best") not in by_key or summary.get("best_single") not in by_key:
        raise PlacerError(f"{out}/tune.json names a candidate that trials.json does not hold")
    graph = load_graph(out / "model.onnx")
    graph.source = summary.get("model") or graph.source
    result = TuneResult(best=by_key[summary["best"]], best_single=by_key[summary["best_single"]], records=records,
                        objective=summary["objective"], out_dir=out, fell_back=summary["fell_back"],
                        wall_s=summary["wall_s"], study_storage=summary.get("study_storage"),
                        extra=summary.get("extra", {}))
    return result, SimpleNamespace(graph=graph, targets=summary.get("targets", []))
