"""``placer tune``: search a plan's knobs against *measured* latency (or throughput).

The loop
--------
1. Profile what is missing (ops, whole model per target, links) and build the problem
   (:func:`placer.context.prepare`).
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

import math
import os
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from placer import context
from placer.costing import segment_ratio_stats
from placer.devices import make_targets
from placer.devices.registry import default_target_names
from placer.devices.sim import simulated_targets
from placer.errors import PlacerError, first_line
from placer.interrupts import raise_if_stopped
from placer.materialize import materialize
from placer.materialize.in_context import priced_as_run
from placer.run.bench import QUIET_WINDOW_S, PlanBench, time_between_partitions
from placer.run.numerics import check_against_reference, load_inputs
from placer.run.spells import quiet_choice, spell_watches, unread_spell, wait_spell_end
from placer.run.yardsticks import DESCRIPTIONS, YardstickSet, latency_kinds
from placer.solve import solve
from placer.tune import learned, shared_study, space
from placer.tune.pipeline_tuner import per_core_targets, tune_throughput, untuned_tvm
from placer.tune.records import TrialRecord, TuneResult, assignment_key, load_tune_result, write_outputs
from placer.tune.reprice import priced_assignment, priced_at
from placer.tune.study import (GRACE_PERIOD_S, asked_trial, fail_stale, open_study, storage_for, storage_writes,
                               tell_trial)

__all__ = ["LatencySearch", "TrialRecord", "TuneResult", "add_yardsticks", "fill", "final_requests",
           "load_tune_result", "tune"]


#: single-target baselines predicted this many times slower than the fastest are not measured
SKIP_BASELINE_FACTOR = 5.0
#: the final interleaved rounds measure the best this many candidates (plus every single target
#: and every yardstick); the others keep the figure of their trial and cannot win
FINAL_CANDIDATES = 8
FINAL_ROUNDS = 5
#: each candidate's share of a final round lasts about this long (more requests for small models:
#: a few sub-millisecond requests are at the mercy of one scheduler tick), within 4..64 requests
FINAL_ROUND_MS = 25.0
#: a runner-up within this share of the best candidate after the final rounds races it: both, and the
#: fastest yardstick that passes numerics, get up to DECIDE_ROUNDS more rounds (as the budget allows),
#: and the choice follows all their rounds. Two 2-thread runtimes 3-8% apart swapped places between
#: 5-round measurements (hf-convnext, session 13: tune kept ONNX Runtime, the comparison's 8 rounds
#: put OpenVINO 8% ahead)
DECIDE_MARGIN = 0.03
DECIDE_ROUNDS = 10
#: the final rounds and the race add up to this many rounds while some candidate's turns mostly began
#: or ended with the cores slowed (:meth:`PlanBench.measure` ``until_quiet``): a spell can outlast the
#: five final rounds. The final rounds' added rounds, and the polls for the end of a spell the probes
#: did not read, may run past the budget: none begins later than the bench's ``QUIET_WINDOW_S`` after
#: it (:meth:`LatencySearch.final_rounds`); the race's stay within the budget.
QUIET_ROUNDS = 10


def final_requests(best_ms: float) -> int:
    """Requests per candidate per final round for a model whose best candidate takes ``best_ms``."""
    if not (best_ms > 0 and math.isfinite(best_ms)):
        return 4
    return int(min(64, max(4, math.ceil(FINAL_ROUND_MS / best_ms))))
#: the search stops early (budget or not) after this many trials in a row proposed measured plans
CONVERGED_AFTER = 40
#: the budget when neither a budget nor a trial count is given
DEFAULT_BUDGET_S = 120.0
#: the longest budget tune() takes (the command line's --budget has the same bound: placer.cli, which
#: does not import this module to parse its options)
MAX_BUDGET_S = 30 * 24 * 3600.0
#: past this share of the budget, profiling measures nothing twice (no re-take of a disturbed
#: measurement, which stays flagged for a later run; no second window). In a busy period those
#: repeats made the 2-minute main job's profiling take 168 s (436 measurements taken again) and the
#: command 3 min 12 s.
PROFILE_HURRY_SHARE = 0.5


def fill(rec: TrialRecord, s) -> None:
    """Copy a :class:`~placer.run.bench.LatencyStats` into a record."""
    rec.measured_ms, rec.p10_ms, rec.p90_ms = s.median_ms, s.p10_ms, s.p90_ms
    rec.throughput_rps = 1000.0 / s.median_ms if s.median_ms == s.median_ms else None


def add_yardsticks(bench, yardsticks, records: list[TrialRecord], model, feeds, say,
                   tolerance: Mapping[str, float] | None = None) -> list[str]:
    """Put every yardstick that loaded into ``bench`` and ``records`` (numerics checked against the
    reference at ``tolerance``, as the candidates are); returns their keys."""
    keys = []
    for kind, y in yardsticks.ready.items():
        rec = TrialRecord(y.key, y.key, "yardstick", {"what": DESCRIPTIONS[kind], **y.info}, None, math.nan,
                          n_partitions=1)
        report = yardsticks.check(kind, model, feeds, **(tolerance or {}))
        if report is not None:
            rec.take_numerics(report)
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


def _partition_feedback(problem, plan, mat, measured: Mapping[str, float], plan_ms: float | None = None) -> list[dict]:
    """Measured vs predicted time of each partition of a measured plan, in the rows
    :func:`placer.costing.partition_pricing` learns the entry cost and the cut scale from.

    ``predicted_ms`` is the sum of its ops' costs in ``problem`` as the plan is priced (at the cut
    scale when it cuts; net of the call overhead, as the solver prices it); ``overhead_ms`` the
    target's profiled call overhead, which the measured time includes; ``prev`` the target of the
    partition before it in the plan's order (the one that ran just before it in the sequential
    executor). ``median_ms`` is the measured time plus an
    equal share of the executor's own time between partitions (``plan_ms`` minus the partitions'
    sum, when the plan ran them one after another)."""
    idx = {o: i for i, o in enumerate(problem.ops)}
    problem = problem.priced_for([problem.target_index[plan.assignment[o]] for o in problem.ops])
    overheads = problem.provenance.get("overhead_ms", {}) or {}
    between = time_between_partitions(plan_ms, [measured.get(p.id, 0.0) for p in mat.partitions])
    rows = []
    prev = None
    for p in mat.partitions:
        target = plan.assignment[p.ops[0]]
        j = problem.targets.index(target)
        predicted = float(sum(problem.cost_ms[idx[o], j] for o in p.ops))
        if p.id in measured:
            rows.append({"partition": p.id, "target": target, "prev": prev, "ops": list(p.ops),
                         "n_inputs": len(p.inputs), "predicted_ms": predicted, "measured_ms": measured[p.id],
                         "median_ms": measured[p.id] + between,
                         "overhead_ms": float(overheads.get(target, 0.0)),
                         "costs": problem.provenance.get("costs", "calibrated")})
        prev = target
    return rows


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
    ``"throughput"`` (maximize measured requests/s, pipeline executor, one stage per core; ops are
    profiled on the one-thread targets only, :func:`placer.tune.pipeline_tuner.per_core_targets`).
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

    ``storage``: an Optuna RDB URL shared by several workers (``postgresql://...`` across hosts, see
    docs/scale-out.md); the study is named per model, hardware and objective
    (:mod:`placer.tune.shared_study`). A trial whose worker sends no heartbeat for ``stale_after_s``
    seconds (killed, host down) is marked failed by the next worker that asks for a trial.
    """
    if budget_s is None and n_trials is None:
        budget_s = DEFAULT_BUDGET_S
    if objective not in ("latency", "throughput"):
        raise PlacerError(f"objective must be 'latency' or 'throughput', got {objective!r}")
    if not (2 <= stale_after_s <= 86400):
        raise PlacerError(f"stale-after {stale_after_s}: must be between 2 s and one day")
    if budget_s is not None and not (isinstance(budget_s, (int, float)) and 0 < budget_s <= MAX_BUDGET_S):
        # inf overflowed the final race's round count, NaN never ended the search, 0 skipped it
        raise PlacerError(f"budget {budget_s!r}: must be a number of seconds above 0 and at most 30 days "
                          "(None: the trials alone bound the search)")
    if objective == "throughput" and len(os.sched_getaffinity(0)) < 2:  # before the profiling, not after it
        raise PlacerError("the throughput objective needs at least 2 cores (one pipeline stage per core); "
                          f"this process may run on {len(os.sched_getaffinity(0))}")
    t_start = time.monotonic() if started is None else min(float(started), time.monotonic())
    say = progress or (lambda msg: None)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise PlacerError(f"--out {out}: exists and is not a directory")
    # cheap checks before any costly work: the targets parse, the model loads
    if targets is None:
        targets = default_target_names(precision)
    made = make_targets(targets)
    simulated = [t.name for t in simulated_targets(made)]
    if simulated:  # every trial that placed an op there failed, spending the budget on nothing
        raise PlacerError(
            f"--targets: {', '.join(simulated)} {'is' if len(simulated) == 1 else 'are'} known only by a spec and "
            "cannot run, and placer tune measures every plan on this machine: plan with simulated targets "
            "(placer plan MODEL --targets ...), tune on the ones that run")
    if objective == "throughput" and all(untuned_tvm(t.kind) for t in made):
        raise PlacerError(
            f"--targets: {', '.join(t.name for t in made)}: the throughput objective measures each runtime "
            "alone on all cores as its baseline, and untuned TVM is none (15-100x slower on a CPU): "
            "add onnxruntime or openvino")
    graph = context.load(model, shapes) if not hasattr(model, "ops") else model
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
        # a failed run leaves nothing behind it created, unless its study holds measured trials (they
        # resume; an error after the search, writing the report say, had deleted them)
        if created and not _has_finished_trials(out / "study.db"):
            shutil.rmtree(out, ignore_errors=True)
        raise


def _has_finished_trials(study_db: Path) -> bool:
    """Whether the Optuna study file ``study_db`` holds a finished trial (False if it cannot be read)."""
    if not study_db.is_file():
        return False
    try:
        con = sqlite3.connect(f"file:{study_db}?mode=ro", uri=True)
        try:
            return bool(con.execute("SELECT 1 FROM trials WHERE state = 'COMPLETE' LIMIT 1").fetchone())
        finally:
            con.close()
    except sqlite3.Error:
        return False


def _tune_in(out: Path, graph, *, targets, objective, budget_s, storage, db, n_trials, seed, solver_time_limit,
             cost_model, cost_model_dir, say, t_start, stale_after_s=GRACE_PERIOD_S) -> TuneResult:
    """:func:`tune` once its arguments are checked and ``out`` exists."""
    storage_url = storage or f"sqlite:///{(out / 'study.db').resolve()}"
    try:  # a bad --storage fails now, not after profiling and the baselines
        storage_for(storage_url, stale_after_s)
    except Exception as exc:  # noqa: BLE001 - sqlalchemy / optuna errors of every kind
        msg = first_line(exc, 200)
        raise PlacerError(f"--storage {storage_url!r}: cannot open the Optuna storage ({type(exc).__name__}: {msg})") \
            from None

    say(f"model {graph.name}: {len(graph.ops)} ops, {len(graph.unique_signatures())} unique signatures")
    hurry = None if budget_s is None else t_start + PROFILE_HURRY_SHARE * budget_s
    given = make_targets(targets)
    # throughput: stages and replicas own one core each, priced from each runtime's one-thread profile
    # only; each runtime on all cores is measured whole (a baseline), so it is not profiled op by op
    profiled = per_core_targets(given) if objective == "throughput" else given
    if len(profiled) < len(given):
        say("throughput: ops profiled on the per-core targets " + ", ".join(t.name for t in profiled)
            + " (each runtime on all cores is measured whole, as a baseline)")
    ctx = context.prepare(graph, targets=[t.name for t in profiled], db=db, cost_model=cost_model,
                          progress=False, say=say, hurry_after=hurry)
    say(f"profiling done ({time.monotonic() - t_start:.1f} s"
        + (f" of the {budget_s:.0f} s budget)" if budget_s is not None else ")"))
    if objective == "throughput":  # per-core pipeline stages, measured; the learned model is a latency-mode knob
        return tune_throughput(ctx, budget_s=budget_s, out=out, storage=storage, seed=seed, t_start=t_start,
                               solver_time_limit=solver_time_limit, say=say, n_trials=n_trials,
                               stale_after_s=stale_after_s, study_targets=given)
    model_dir = learned.default_model_dir(db) if cost_model_dir is True else (cost_model_dir or None)
    if cost_model is not None and cost_model_dir is True:
        model_dir = None  # a model the caller passed is saved only where the caller says, never over the default
    if cost_model is None and model_dir is not None and any(not getattr(t, "simulated", False) for t in ctx.targets):
        cost_model = learned.fit_or_update(ctx, model_dir, say, seed=seed)
    search = LatencySearch(out, ctx, storage=storage, storage_url=storage_url, budget_s=budget_s, n_trials=n_trials,
                           seed=seed, solver_time_limit=solver_time_limit, cost_model=cost_model, model_dir=model_dir,
                           say=say, t_start=t_start, stale_after_s=stale_after_s)
    return search.run()


class LatencySearch:
    """One latency tuning run once the model is profiled (steps 2-6 of this module's loop).

    It holds what the steps share: the bench and yardsticks every candidate is measured on, the
    records (``by_key``: one per placement, so a plan proposed again is not re-run), the partition
    feedback, the best single target and yardstick measured so far, the budget's split between the
    search and the final rounds, and the study. :meth:`run` goes through the steps:
    :meth:`measure_baselines`, :meth:`search` (:meth:`run_trial` each trial), :meth:`final_rounds`,
    :meth:`write`."""

    def __init__(self, out: Path, ctx, *, storage: str | None, storage_url: str, budget_s: float | None,
                 n_trials: int | None, seed: int, solver_time_limit: float, cost_model, model_dir,
                 say: Callable[[str], None], t_start: float, stale_after_s: float = GRACE_PERIOD_S):
        self.out, self.ctx, self.graph = out, ctx, ctx.graph
        self.storage, self.storage_url, self.stale_after_s = storage, storage_url, stale_after_s
        self.budget_s, self.n_trials, self.t_start = budget_s, n_trials, t_start
        self.seed, self.solver_time_limit = seed, solver_time_limit
        self.cost_model, self.model_dir = cost_model, model_dir
        self.say = say
        self.names = [t.name for t in ctx.targets]
        self.feeds = None
        self.records: list[TrialRecord] = []
        self.by_key: dict[str, TrialRecord] = {}
        self.feedback_rows: list[dict] = []
        self.bench = self.yardsticks = None
        self.ys_keys: list[str] = []
        #: the fastest single target and yardstick once the baselines are measured: each candidate is
        #: measured interleaved with them
        self.best_single: TrialRecord | None = None
        self.best_default_key: str | None = None
        #: the store's whole-model times per target, as they were before this session's measurements
        #: re-priced the problem (the quiet reference of :func:`placer.run.spells.unread_spell`)
        self.stored_whole_ms: dict[str, float] = {}
        self.spell_note = ""  # why the verdict kept an all-core target over a 1-thread one (a spell)
        self.reserve = 0.15  # the share of the budget kept for the final rounds (set from the baselines)
        self.write_s = 2.0  # seconds kept after the final rounds for the outputs (set from the baselines)
        self.study = self.fusion = None
        self.n_done = 0

    # ---- the steps -------------------------------------------------------------------------------
    def run(self) -> TuneResult:
        """Baselines, search, final rounds; then the cost model saved and the outputs written."""
        graph = self.graph
        self.feeds = load_inputs("seed:0", graph, 4)
        self.bench = PlanBench(self.feeds, rounds=3, per_round=4)
        self.yardsticks = YardstickSet(graph.model, self.feeds, latency_kinds(), say=self.say)
        try:
            self.ys_keys = add_yardsticks(self.bench, self.yardsticks, self.records, graph.model, self.feeds,
                                          self.say, self.ctx.tolerance)
            self.measure_baselines()
            self.open_study()
            self.search()
            best, best_single = self.final_rounds()
            mat = materialize(graph, best.plan, self.out)
        except BaseException:  # interrupted or failed: the partitions measured so far still reach the store
            self._record_feedback()
            raise
        finally:
            self.bench.close()
            self.yardsticks.close()
        return self.write(best, best_single, mat)

    def _record_feedback(self) -> None:
        """What this session's plans measured, partition by partition, into the store (the next session's
        entry costs); once."""
        ctx, rows = self.ctx, self.feedback_rows
        self.feedback_rows = []
        real = [t for t in ctx.targets if not getattr(t, "simulated", False)]
        if rows and len(real) > 1 and len(real) == len(ctx.targets):
            context.record_partitions(ctx.store, ctx.graph, real, rows, "tune")

    def measure_plan(self, plan, label: str, kind: str, knobs: dict, problem, solve_s: float) -> TrialRecord:
        """Materialize, check and measure ``plan`` (interleaved with the best single target and yardstick)
        into a new record; a placement measured before returns its record."""
        key = assignment_key(plan)
        if key in self.by_key:  # same placement as an earlier candidate: reuse its measurement
            return self.by_key[key]
        graph, bench = self.graph, self.bench
        plan = priced_as_run(problem, graph, plan)  # a cut plan: each partition by the target before it
        rec = TrialRecord(key, label, kind, knobs, plan, plan.makespan_ms, solve_s=solve_s)
        try:
            mat = materialize(graph, plan)
            rec.n_partitions = len(mat.partitions)
            bench.add(key, mat)
            outs = bench.outputs(key)
            report = check_against_reference(graph.model, self.feeds, outs, **self.ctx.tolerance)
            rec.take_numerics(report)
            if not report.passed:
                raise PlacerError(f"numerics check failed: {report.failures()[0].name}")
            keys = [key] + ([self.best_single.key] if self.best_single is not None and self.best_single.key != key
                            else [])
            keys += [self.best_default_key] if self.best_default_key is not None else []
            stats = bench.measure(keys)
            s = stats[key]
            rec.measured_ms, rec.p10_ms, rec.p90_ms = s.median_ms, s.p10_ms, s.p90_ms
            rec.throughput_rps = 1000.0 / s.median_ms
            rec.partitions = _partition_feedback(problem, plan, mat, bench.partition_medians(key), s.median_ms)
            self.feedback_rows.extend(rec.partitions)
            if self.cost_model is not None and hasattr(self.cost_model, "add_partition_measurements"):
                learned.feed(self.cost_model, rec.partitions, graph)
        except PlacerError as exc:
            rec.error = first_line(exc)
        self.records.append(rec)
        self.by_key[key] = rec
        return rec

    # ---- baselines: each single target, measured -------------------------------------------------
    def measure_baselines(self) -> None:
        """Measure every single-target plan, then again interleaved with the yardsticks; sets the best
        single target and yardstick, the budget's reserve for the final rounds, and re-prices the
        problem from the whole-model times just measured."""
        ok = self._measure_singles()
        # the store's whole-model times, before this session's replace them: rounds in which a runtime on
        # all cores ran at its 1-thread pace against them read as spells from here on (placer.run.spells)
        self.stored_whole_ms = dict(self.ctx.table.whole_model_ms)
        keys_of = {r.label.split(":", 1)[1]: r.key for r in ok}
        self.bench.watches = spell_watches(self.ctx.targets, keys_of, self.stored_whole_ms)
        # re-measure all baselines interleaved with the yardsticks so they share the same conditions
        t_guard = time.monotonic()
        stats = self.bench.measure([r.key for r in ok] + self.ys_keys)
        # the final rounds measure the same kind of list again, fresh, then the outputs are written:
        # the search leaves them twice this measurement's time, three Relax builds, half TVM's import
        # and two seconds (closing the yardsticks' processes, writing the outputs: at least 15 % of the
        # budget, at most half), so the whole command ends near its budget
        guard_s = time.monotonic() - t_guard
        self.reserve = self._reserve_for_the_end(guard_s, min(ok, key=lambda r: stats[r.key].median_ms))
        paired = self.bench.paired_ms([r.key for r in ok] + self.ys_keys)  # round by round (placer.run.bench)
        for r in ok + [r for r in self.records if r.key in self.ys_keys]:
            fill(r, stats[r.key])
        self.best_single = min(ok, key=lambda r: paired.get(r.key, r.measured_ms))
        if self.ys_keys:
            self.best_default_key = min(self.ys_keys, key=lambda k: paired.get(k, stats[k].median_ms))
        # re-price the problem from the whole-model times just measured (interleaved, same executor);
        # a stored whole-model time these contradict is flagged for re-measurement
        session_ms, settled_ms = self._session_whole_ms(ok)
        context.check_store(self.ctx, settled_ms, self.say)
        self.ctx = context.recalibrate(self.ctx, session_ms)
        # every candidate priced on one problem: the single targets too, on the one just re-priced from
        # them (the trials' problem), so that the verdict's table reads one set of prices; the store's kept
        for r in ok:
            r.store_predicted_ms = r.predicted_ms
            r.predicted_ms = priced_assignment(self.ctx.problem, self.graph, r.plan.assignment).makespan_ms
        self.say(f"best single target: {self.best_single.label} {self.best_single.measured_ms:.3f} ms"
                 + (f"; best yardstick {self.best_default_key} {stats[self.best_default_key].median_ms:.3f} ms"
                    if self.best_default_key is not None else ""))

    def _session_whole_ms(self, ok: list[TrialRecord]) -> tuple[dict[str, float], dict[str, float]]:
        """Target name -> whole-model time just measured: of every single target, to re-price the
        problem from, and of those whose figures stand on quiet samples
        (:meth:`~placer.run.bench.PlanBench.settled`), to check the store against.

        A target slowed in most rounds is re-priced from those rounds too: the store's time, taken in
        the quietest of its profile windows, is faster than the host runs when it is slowed most of
        the time, and the rounds just measured are the better price of the rounds to come (session 44,
        44 single targets of 11 models, none settled: the later rounds' median against the earlier
        rounds' 4.9% / 12.1% apart, median / p90, against the store's 9.0% / 25.1%;
        ``experiments/reprice_vs_store.py``). The store is not flagged from such figures: at the
        host's usual pace its row may hold."""
        settled = set(self.bench.settled([r.key for r in ok]))
        slowed = [r.label for r in ok if r.key not in settled]
        if slowed:
            self.say(f"re-pricing: {', '.join(slowed)} ran slowed in most rounds; priced from them all the "
                     "same (the rounds to come run on the same host), the store left as it is")
        every = {r.label.split(":", 1)[1]: r.measured_ms for r in ok}
        return every, {r.label.split(":", 1)[1]: r.measured_ms for r in ok if r.key in settled}

    def _measure_singles(self) -> list[TrialRecord]:
        """Solve and measure each single-target plan (those predicted far slower than the fastest are
        recorded, not measured); the measured ones, PlacerError if none is."""
        ctx, say = self.ctx, self.say
        singles = {}
        for name in self.names:
            plan = solve(ctx.problem, "latency", f"single:{name}", time_limit=self.solver_time_limit)
            if set(plan.assignment.values()) != {name}:  # a target that runs no op: all of it elsewhere
                say(f"baseline {name}: does not run every op, skipped")
                continue
            singles[name] = plan
        fastest = min((p.makespan_ms for p in singles.values()), default=math.inf)
        for name, plan in singles.items():
            if fastest > 0 and plan.makespan_ms > SKIP_BASELINE_FACTOR * fastest:
                # e.g. untuned TVM, 15-100x slower here: measuring it would eat the budget (a target
                # priced at 0 ms, ops all below its call overhead, gives no ratio: everything is measured)
                ratio = plan.makespan_ms / fastest
                rec = TrialRecord(assignment_key(plan), f"single:{name}", "baseline", {}, plan,
                                  plan.makespan_ms, n_partitions=1,
                                  error=f"not measured: predicted {ratio:.0f}x slower than the fastest target")
                # a trial that places every op there meets this record, as it would a measured one: one
                # record per placement (two with one key both took the final rounds' figures, and the
                # baseline's, never checked, was reported measured)
                self.records.append(rec)
                self.by_key[rec.key] = rec
                say(f"baseline {name}: predicted {plan.makespan_ms:.1f} ms, not measured")
                continue
            rec = self.measure_plan(plan, f"single:{name}", "baseline", {}, ctx.problem, plan.stats.wall_s)
            if rec.measured_ms is not None:
                say(f"baseline {name}: {rec.measured_ms:.3f} ms measured ({plan.makespan_ms:.3f} predicted)")
        ok = [r for r in self.records if r.kind == "baseline" and r.measured_ms is not None]
        if not ok:
            raise PlacerError(f"no target runs the whole of {self.graph.name!r}: nothing to compare a plan with")
        return ok

    def _reserve_for_the_end(self, guard_s: float, best_ok: TrialRecord) -> float:
        """The share of the budget kept for what follows the search (see :meth:`measure_baselines`).
        Without a budget (a trial count alone) nothing is kept and nothing is timed for it."""
        if not self.budget_s:
            return 0.15
        # after the final rounds the best plan's Relax program is built and compiled, the outputs
        # written, and the process ends (0.35 s since placer.process_exit; half TVM's import time is
        # kept for it, a margin): TVM imported now (seconds, spent anyway) and the best single target's
        # program built, both timed
        t_import = time.monotonic()
        import tvm  # noqa: F401

        t_build = time.monotonic()
        try:
            materialize(self.graph, best_ok.plan, relax=True)
        except PlacerError:
            pass  # the final build reports it, where it matters
        build_s = time.monotonic() - t_build
        self.write_s = 3 * build_s + 0.5 * (t_build - t_import) + 2.0
        tail_s = 2 * guard_s + self.write_s
        return min(0.5, max(0.15, tail_s / self.budget_s))

    # ---- the study -------------------------------------------------------------------------------
    def open_study(self) -> None:
        """Open (or resume) the study; the default knobs are its first trial."""
        self.study = open_study(self.storage_url,
                                shared_study.study_name(self.graph.model_hash, self.ctx.targets, "latency"),
                                direction="minimize", seed=self.seed, shared=self.storage is not None,
                                n_startup_trials=4, stale_after_s=self.stale_after_s)
        self.fusion = space.fusion_groups(self.graph)
        self.study.enqueue_trial(space.default_knobs(self.names), skip_if_exists=True)

    def search(self) -> None:
        """Ask, run and tell trials until the trial count, the search's share of the budget or
        convergence ends it; a stop request is checked before each trial."""
        budget_s, n_trials = self.budget_s, self.n_trials
        search_share = 1.0 - self.reserve
        self.say("search: " + " or ".join(
            ([f"trials until {budget_s * search_share:.0f} s of the {budget_s:.0f} s budget"]
             if budget_s is not None else [])
            + ([f"{n_trials} trials"] if n_trials is not None else []))
            + f" ({time.monotonic() - self.t_start:.0f} s spent)")
        repeats = 0  # trials in a row whose plan was already measured
        while True:
            elapsed = time.monotonic() - self.t_start
            if n_trials is not None and self.n_done >= n_trials:
                break
            if budget_s is not None and elapsed > budget_s * search_share:
                break
            if n_trials is None and repeats >= CONVERGED_AFTER:
                self.say(f"search converged: the last {repeats} trials proposed plans already measured")
                break
            raise_if_stopped()  # a stop request dropped inside a finalizer is not lost
            fail_stale(self.study, self.say, self.stale_after_s)
            n_plans = len(self.by_key)
            with asked_trial(self.study, lambda t: shared_study.mark_worker(t, self.ctx.targets)) as trial:
                # an interrupted or killed worker's trial is failed, never left RUNNING
                self.n_done += int(self.run_trial(trial))
            repeats = repeats + 1 if len(self.by_key) == n_plans else 0
        if self.n_done == 0:
            self.say("no trial ran: the budget was spent before the search (profiling, baselines); "
                     "the result is the best single target")

    def run_trial(self, trial) -> bool:
        """Solve, measure and tell one trial; False if another worker had finished it."""
        ctx, best_single = self.ctx, self.best_single
        with storage_writes():
            knobs = space.suggest_latency(trial, self.names)
        priced = (learned.learned_costs(ctx, self.cost_model)
                  if knobs["costs"] == "learned" and self.cost_model is not None else None)
        # the entry cost from every partition timed as it ran: the context's probe plans (and earlier
        # sessions' plans) and this session's, priced on this trial's cost variant
        problem = space.latency_problem(ctx, knobs, self.fusion, None, priced,
                                        partition_rows=list(ctx.partition_rows) + self.feedback_rows)
        t0 = time.monotonic()
        plan = space.solve_trial(problem, knobs, time_limit=self.solver_time_limit, seed=self.seed)
        solve_s = time.monotonic() - t0
        cached = self.by_key.get(assignment_key(plan))
        if cached is None and best_single.measured_ms > 0 \
                and plan.makespan_ms > SKIP_BASELINE_FACTOR * best_single.measured_ms:
            # e.g. everything on untuned TVM: measuring it would eat the budget; tell TPE the prediction
            cached = TrialRecord(assignment_key(plan), f"trial {trial.number}", "trial", knobs, plan,
                                 plan.makespan_ms, solve_s=solve_s,
                                 error=f"not measured: predicted {plan.makespan_ms / best_single.measured_ms:.0f}x "
                                       f"slower than the best single target")
            self.records.append(cached)
            self.by_key[cached.key] = cached
        if cached is not None and cached.measured_ms is None and (cached.error or "").startswith("not measured"):
            return tell_trial(self.study, trial, cached, cached.predicted_ms, self.say, cached.error)  # same value
        rec = self.measure_plan(plan, f"trial {trial.number}", "trial", knobs, problem, solve_s)
        return tell_trial(self.study, trial, rec, rec.measured_ms, self.say,
                          f"{rec.n_partitions} partitions, predicted {rec.predicted_ms:.3f} ms, "
                          f"measured {rec.measured_ms or math.nan:.3f} ms (best single {best_single.measured_ms:.3f})")

    # ---- the measured guard: every candidate and yardstick again, in the same final rounds -------------
    def final_rounds(self) -> tuple[TrialRecord, TrialRecord]:
        """Measure the best candidates, every single target and every yardstick again in the same final
        rounds (their figures replace the earlier ones); returns the best candidate and the best single
        target by these rounds."""
        measured = sorted((r for r in self.records if r.measured_ms is not None and r.kind != "yardstick"),
                          key=lambda r: r.measured_ms)
        finalists = measured[:FINAL_CANDIDATES]
        # every single target too: its trial-time figure may come from a noisier moment than the others'
        finalists += [r for r in measured if r.kind == "baseline" and r not in finalists]
        if self.best_single not in finalists:
            finalists.append(self.best_single)
        self.say(f"final rounds: {len(finalists)} candidate(s) and {len(self.ys_keys)} yardstick(s), interleaved")
        final_keys = [r.key for r in finalists] + self.ys_keys
        per_round = final_requests(min((r.measured_ms for r in finalists), default=math.nan))
        # a spell the probes did not read: all-core targets at their 1-thread pace (placer.run.spells);
        # a round that shows one is left out like a slowed one, and rounds are added for quiet samples
        keys_of = {r.label.split(":", 1)[1]: r.key for r in finalists if r.kind == "baseline"}
        self.bench.watches = spell_watches(self.ctx.targets, keys_of, self.stored_whole_ms)
        stats, paired, turn_s = self._final_measure(final_keys, per_round)
        spell = unread_spell(self.ctx.targets, keys_of, self.stored_whole_ms, paired.get)
        if spell:
            self.say("final rounds: " + ", ".join(
                f"{p.kind} on all cores ran {p.measured_ratio:.2f}x its 1-thread time (the store: "
                f"{p.stored_ratio:.2f}x)" for p in spell) + ": the host slowed the cores unread by the "
                "probes; waiting for it to end")
            if wait_spell_end(self.bench, spell, polls=QUIET_ROUNDS, per_round=per_round,
                              deadline=self._overrun_end()):
                self.say("final rounds: the spell ended; measured again")
                stats, paired, turn_s = self._final_measure(final_keys, per_round)
                spell = []
            else:
                self.say("final rounds: the spell lasted; the figures are from rounds taken in it")
        ranked = sorted(finalists, key=lambda r: paired.get(r.key, stats[r.key].median_ms))
        first = ranked[0]
        if len(ranked) > 1 and self._close(ranked[0], ranked[1], paired, stats):
            first = self._race(ranked[0], ranked[1], turn_s, per_round,
                               lambda k: paired.get(k, stats[k].median_ms))
            stats = {k: self.bench.stats(k) for k in final_keys}
        # anchored on the leader: every ratio to it (the verdict's) is then one taken round by round
        paired = self.bench.paired_ms(final_keys, anchor=first.key)
        for r in self.records:
            if r.key in stats:
                fill(r, stats[r.key])
                r.paired_ms = paired.get(r.key)
                r.final = True
        self._price_at_session_pace()
        best = min(finalists, key=lambda r: r.compare_ms)
        best_single = min((r for r in finalists if r.kind == "baseline"), key=lambda r: r.compare_ms)
        known = self.by_key
        give = quiet_choice(best.key, spell, lambda k: known[k].compare_ms if k in known else None)
        if give is not None:
            other = self.by_key[give.all_key]
            slower = other.compare_ms / best.compare_ms - 1
            self.spell_note = (
                f"{other.label} kept instead of {best.label}, the fastest in final rounds taken in a spell "
                f"of the host (all-core runtimes at their 1-thread pace): {slower:.1%} slower there, "
                f"{1 / give.stored_ratio:.2f}x its 1-thread speed on a quiet machine (the store).")
            self.say("final rounds: " + self.spell_note)
            best = other
        return best, best_single

    def _price_at_session_pace(self) -> None:
        """Each final trial's plan priced again from the single targets measured in the same final rounds
        (:attr:`TrialRecord.anchored_predicted_ms`): the host's pace over those rounds, which moves 1.3-2x
        between spells here and which a plan shares with the single targets measured beside it, is then
        in the prediction, and what it still misses is how the plan's cuts are priced."""
        anchors = {r.label.split(":", 1)[1]: r.paired_ms for r in self.records
                   if r.kind == "baseline" and r.final and r.paired_ms}
        trials = [r for r in self.records
                  if r.final and r.kind == "trial" and r.plan is not None and r.plan.mode == "latency"]
        if not anchors or not trials:
            return
        prices = priced_at(self.ctx, anchors, {r.key: r.plan.assignment for r in trials})
        for r in trials:
            r.anchored_predicted_ms = prices[r.key]

    def _final_measure(self, keys: list[str], per_round: int) -> tuple[dict, dict, float]:
        """The final rounds over ``keys``, fresh: (stats, paired figures, seconds per turn)."""
        t0 = time.monotonic()
        # rounds added for quiet samples may run past the budget (none begun QUIET_WINDOW_S after it):
        # a verdict taken in a spell of the host inverts 1-thread and all-core targets (session 21,
        # bert-tiny: OpenVINO at 1 thread chosen, 0.304 against 0.318 ms in tune's final rounds, where
        # every 2-thread runtime ran as fast as at 1 thread; in the comparison's rounds just after,
        # 0.330 against 0.235 ms)
        end = self._budget_end()
        spelled = self.bench.spell_rounds
        stats = self.bench.measure(keys, rounds=FINAL_ROUNDS, fresh=True, per_round=per_round,
                                   until_quiet=QUIET_ROUNDS, deadline=self._overrun_end())
        extra = self.bench.extra_rounds
        spelled = self.bench.spell_rounds - spelled
        if spelled:
            self.say(f"final rounds: {spelled} round(s) read as a spell of the host (a runtime on all cores "
                     "at its 1-thread pace, against the store), counted as slowed")
        if extra:
            over = time.monotonic() - end if end is not None else 0.0
            self.say(f"final rounds: {extra} more round(s), each after waiting for quiet cores: most "
                     "turns of a candidate had begun or ended with the cores slowed"
                     + (f" ({over:.1f} s past the budget)" if over > 0 else ""))
        turn_s = (time.monotonic() - t0) / ((FINAL_ROUNDS + extra) * len(keys))
        return stats, self.bench.paired_ms(keys), turn_s  # paired: round by round (placer.run.bench)

    def _overrun_end(self) -> float | None:
        """When the final rounds' waiting for quiet cores or a spell's end must stop: QUIET_WINDOW_S
        past the budget (None without a budget: the bench's own window after each measurement)."""
        end = self._budget_end()
        return None if end is None else end + QUIET_WINDOW_S

    def _budget_end(self) -> float | None:
        """When measuring must stop (``time.monotonic()``): the budget less the outputs' time; None
        without a budget."""
        return self.t_start + self.budget_s - self.write_s if self.budget_s else None

    @staticmethod
    def _close(a: TrialRecord, b: TrialRecord, paired: Mapping[str, float], stats) -> bool:
        fa, fb = (paired[r.key] if r.key in paired else stats[r.key].median_ms for r in (a, b))
        return bool(fa > 0 and fb < fa * (1 + DECIDE_MARGIN))

    def _race(self, a: TrialRecord, b: TrialRecord, turn_s: float, per_round: int,
              figure: Callable[[str], float]) -> TrialRecord:
        """More rounds of ``a`` and ``b`` (and the fastest yardstick that passes numerics by ``figure``), as
        many as the budget leaves (at most :data:`DECIDE_ROUNDS`, none under 3; ``turn_s``: one turn's
        seconds); returns the faster of the two over all their final rounds, round by round."""
        passing = [r.key for r in self.records if r.kind == "yardstick" and r.numerics_ok and r.key in self.ys_keys]
        keys = [a.key, b.key] + ([min(passing, key=figure)] if passing else [])
        n = DECIDE_ROUNDS
        end = self._budget_end()
        if end is not None:
            n = min(n, int((end - time.monotonic()) / max(turn_s * len(keys), 1e-6)))
        if n < 3:
            return a
        self.say(f"final rounds: {a.label} and {b.label} within {DECIDE_MARGIN:.0%} of each other, "
                 f"{n} more rounds")
        # added to the final rounds' samples
        self.bench.measure(keys, rounds=n, per_round=per_round, until_quiet=QUIET_ROUNDS, deadline=end)
        ratio = self.bench.paired_ratio(b.key, a.key)
        return b if ratio is not None and ratio < 1.0 else a

    # ---- output ----------------------------------------------------------------------------------
    def cost_model_info(self) -> dict | None:
        """Save the learned cost model (where it has a folder) and describe it for the report."""
        cost_model, model_dir = self.cost_model, self.model_dir
        if cost_model is None or not hasattr(cost_model, "partition_records"):
            return None
        if model_dir is not None:
            learned.save(cost_model, model_dir, self.say)
        return {"id": cost_model.model_id, "dir": str(model_dir) if model_dir else None,
                "partition_ratio": learned.partition_ratios(cost_model,
                                                            [n for n in self.names if n in cost_model.targets]),
                "tune_partitions": len(learned.tune_records(cost_model)),
                "carried_over": cost_model.card.get("tune_partitions_carried", 0)}

    def write(self, best: TrialRecord, best_single: TrialRecord, mat) -> TuneResult:
        """The result (``best`` materialized as ``mat`` in the output folder) and its output files."""
        ctx = self.ctx
        cm_info = self.cost_model_info()
        fell_back = best.kind == "baseline"  # no placement measured faster than one target alone
        result = TuneResult(best=best, best_single=best_single, records=self.records, objective="latency",
                            out_dir=self.out, fell_back=fell_back, wall_s=time.monotonic() - self.t_start,
                            study_storage=self.storage_url,
                            extra={"problem_provenance": dict(ctx.problem.provenance),
                                   "n_partitions": len(mat.partitions), "cost_model": cm_info,
                                   "segment_ratios": segment_ratio_stats(ctx.table), "n_trials": self.n_done,
                                   "final_rounds": FINAL_ROUNDS, "spell": self.spell_note})
        write_outputs(result, ctx, mat)
        self._record_feedback()
        return result
