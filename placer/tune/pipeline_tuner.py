"""``placer tune --objective throughput``: one pipeline stage per core, measured requests/s.

Targets are made per core (``onnxruntime@cpu0:t1``, ``openvino@cpu1:t1`` ...): a stage owns its
core. Their op costs come from the unpinned single-thread profiles of the same runtime (pinning
does not change an op's cost on a quiet core; it removes interference), and those are the only ops
:func:`placer.tune.tune` profiles for this objective (:func:`per_core_targets`): each runtime on all
cores is measured whole, as a baseline. The knobs are which
runtime runs on each core, the boundary cost and fusion groups; CP-SAT minimizes the bottleneck
stage (then latency); each candidate runs on the pipeline executor and is measured.

Replicated candidates (data parallelism): for every non-TVM runtime, the whole model as *one*
stage with one replica per core (``materialize(..., replicas={0: [[0], [1], ...]})``): each core
runs whole requests on its own single-thread session, no stage hand-off, no uneven split. They
are enumerated (one per runtime, nothing to sample) and measured before the study, like the
pipelines, on the pipeline executor with numerics checked against the reference.

Measuring (the machine is shared and noisy): every pipeline candidate runs enough requests to
take about :data:`MEASURE_S` seconds (at least :data:`MIN_REQUESTS`), in :data:`FIRST_ROUNDS`
rounds on one started executor; its figure is the median requests/s over the rounds. At the end
the finalists (the best :data:`N_FINALISTS` measured candidates and every runtime's replicas) are
measured again in :data:`FINAL_ROUNDS` interleaved rounds (past the budget if need be; the search
stops early to leave them their time where it can), with the baselines between them (pipeline
rounds of the same requests, one worker: one request at a time); their
figures (and the N-core limit) become the medians over these final rounds only, and the best of
them wins (the measured guard: a placement must beat the baselines measured beside it). While fewer
than :data:`MIN_QUIET_ROUNDS` rounds are free of a spell of the host (a runtime on all cores at about its
1-thread rate, :func:`placer.run.spells.spelled_rounds`), up to :data:`EXTRA_ROUNDS` rounds are
added; every round counts in the figures. A
candidate that was not a finalist keeps its first figure and cannot win: the load on a shared
machine drifts between phases, so only figures taken side by side are compared.

Baselines, measured in the same session: every runtime alone with all the cores as intra-op
threads (``KIND:tN``) and with one thread (``KIND:t1``), one request at a time. The N-core limit
quoted in the report is ``N x`` the best single-thread throughput, measured as the candidates are
(requests/s of a round, median over the final rounds).

Yardsticks (:mod:`placer.run.yardsticks`), what a user wanting requests/s would run: OpenVINO's
THROUGHPUT hint driven by an ``AsyncInferQueue``, and one 1-thread ONNX Runtime session per core
in as many threads; each in its own process, measured in the final rounds beside the finalists.
They are the yardstick of the verdict, not candidates (they have no plan).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from placer.costing import target_cores_of
from placer.errors import PlacerError, first_line
from placer.interrupts import raise_if_stopped
from placer.materialize import materialize
from placer.run import bench as run_bench
from placer.run.numerics import NumericsReport, ReferenceRunner, check_against_reference, compare, load_inputs
from placer.run.pipeline import PipelineExecutor, discard_outputs
from placer.run.spells import quiet_ratios, spelled_rounds
from placer.run.yardsticks import DESCRIPTIONS, YardstickSet, throughput_kinds
from placer.solve import solve
from placer.tune import space
from placer.tune.records import TrialRecord, TuneResult, assignment_key, write_outputs
from placer.tune import shared_study
from placer.tune.study import GRACE_PERIOD_S, asked_trial, fail_stale, open_study, storage_writes, tell_trial

#: a pipeline candidate's measurement round runs about this long (requests sized from the baselines)
MEASURE_S = 0.25
MIN_REQUESTS = 20
MAX_REQUESTS = 4000
FIRST_ROUNDS = 2
N_FINALISTS = 3
FINAL_ROUNDS = 3
#: the final rounds hold at least this many rounds no runtime read as a spell of the host
#: (:func:`placer.run.spells.spelled_rounds`), while rounds can be added ...
MIN_QUIET_ROUNDS = 2
#: ... at most this many, each after :func:`~placer.run.bench.quiet_wait_s` seconds, none begun more than
#: :data:`SPELL_WINDOW_S` past the budget
EXTRA_ROUNDS = 3
SPELL_WINDOW_S = 30.0


class _PipelineRuns:
    """One candidate on a started :class:`~placer.run.pipeline.PipelineExecutor`: measurement rounds
    over the same cycled inputs; each input run twice first, untimed, its outputs checked against the
    reference outputs (:meth:`check`)."""

    def __init__(self, mat, feeds, refs, n_requests: int, tolerance: Mapping[str, float] | None = None):
        self.mat = mat
        self.refs = refs
        self.tolerance = dict(tolerance or {})
        self.reqs = [feeds[i % len(feeds)] for i in range(n_requests)]
        self.pe = PipelineExecutor(mat, queue_size=2)
        self.rps: list[float] = []
        self.p50: list[float] = []
        self.last = None
        self.numerics = None

    def __enter__(self):
        self.pe.start()
        return self

    def __exit__(self, *exc):
        self.pe.close()

    def check(self, warmup: int = 0) -> None:
        """Run each input twice and two requests per worker at least (after ``warmup``), untimed, the
        outputs checked against the reference where they are produced: on the path the timed rounds
        take (the runtimes' own buffers, no copy)."""
        workers = max(len(s.workers) for s in self.mat.stage_config.stages)
        n = max(2 * len(self.refs), 2 * workers)
        refs, tol = self.refs, self.tolerance
        res = self.pe.run([self.reqs[i % len(refs)] for i in range(n)], warmup=warmup,
                          consume=lambda rid, out: compare(out, refs[rid % len(refs)], **tol))
        res.raise_first()
        self.numerics = functools.reduce(NumericsReport.merge, res.outputs)  # worst case per output

    def round(self, warmup: int = 0) -> float:
        """One timed round (the first call checks the outputs first): the outputs are dropped where
        they are produced, no copy made, as a serving loop's consumer takes them (and as the
        runtimes' own throughput yardsticks leave theirs)."""
        if self.numerics is None:
            self.check(warmup)
            warmup = 0
        res = self.pe.run(self.reqs, warmup=warmup, consume=discard_outputs)
        res.raise_first()
        m = res.measurement
        self.rps.append(m.throughput_rps)
        self.p50.append(m.latency_p50_ms)
        self.last = m
        return m.throughput_rps

    def fill(self, rec) -> None:
        """Write the median over all rounds (and the last round's spread and partitions) into ``rec``."""
        m = self.last
        rec.throughput_rps = float(np.median(self.rps))
        rec.measured_ms = float(np.median(self.p50))
        rec.p10_ms, rec.p90_ms = m.latency_min_ms, m.latency_p90_ms
        rec.numerics_ok = self.numerics.passed if self.numerics is not None else None
        rec.partitions = [p.to_dict() for p in m.partitions]


def one_thread_columns(targets) -> dict[str, int]:
    """Per runtime kind, the index in ``targets`` of its one-thread target, else of its first one: a
    pipeline stage owns one core, so its ops cost what they cost at one thread (the default targets
    list each runtime on all cores first: pricing stages from them priced them at two threads)."""
    cols: dict[str, int] = {}
    for j, t in enumerate(targets):
        if t.kind not in cols or (t.spec.threads == 1 and targets[cols[t.kind]].spec.threads != 1):
            cols[t.kind] = j
    return cols


def per_core_targets(targets) -> list:
    """The targets a throughput tune profiles: each runtime's one-thread target (else its first one),
    in the order given; untuned TVM only where no other runtime is given (no stage uses it then, as
    :attr:`ThroughputSearch.usable` says). A pipeline stage or a replica owns one core, so its ops are
    priced from that column only (:func:`one_thread_columns`); each runtime on all cores is measured
    whole, as a baseline, and never priced op by op: profiling it too spent about half of a
    throughput tune's profiling on columns no trial reads. One target per kind: of several
    simulated devices (``sim:SPEC/DEV``) or pinned copies of a runtime, the first (none of them runs
    in this objective's stages, which are made per core from the kind)."""
    cols = one_thread_columns(targets)
    keep = [t for j, t in enumerate(targets) if j in cols.values()]
    kinds = set(stage_kinds([t.kind for t in keep]))
    return [t for t in keep if t.kind in kinds]


def untuned_tvm(kind: str) -> bool:
    """Whether target kind ``kind`` is TVM, untuned here: 15-100x slower than the runtimes on a CPU, so
    no throughput baseline, and a stage's runtime only where nothing else is there."""
    return kind.startswith("tvm")


def stage_kinds(kinds: list[str]) -> list[str]:
    """The runtimes a pipeline stage or a replica may use, of ``kinds`` (in order, repeats kept):
    untuned TVM only where nothing else is there (:func:`untuned_tvm`)."""
    return [k for k in kinds if not untuned_tvm(k)] or list(kinds)


def retarget(problem, names: list[str], source_cols: list[int], link_fallback_ms: list[float]):
    """A problem over new target ``names`` whose column ``k`` copies ``source_cols[k]`` (costs, links,
    cut scale)."""
    src = np.asarray(source_cols)
    lat = np.array(problem.link_latency_ms)[np.ix_(src, src)]
    per_byte = np.array(problem.link_ms_per_byte)[np.ix_(src, src)]
    for a in range(len(names)):
        for b in range(len(names)):
            if a != b and src[a] == src[b]:  # same runtime on two cores: a hand-off = the call cost
                lat[a, b], per_byte[a, b] = link_fallback_ms[b], 0.0
    return dataclasses.replace(
        problem, targets=tuple(names), target_cores=target_cores_of(names),
        cost_ms=np.array(problem.cost_ms)[:, src], link_latency_ms=lat,
        link_ms_per_byte=per_byte, link_charge="both", memory_cap_bytes=None, pinned={}, partition_overhead_ms=None,
        cut_scale=np.asarray(problem.cut_scale)[src],
    )


def tune_throughput(ctx, *, budget_s: float | None, out: Path, storage: str | None, seed: int, t_start: float,
                    solver_time_limit: float, say: Callable[[str], None], n_trials: int | None,
                    stale_after_s: float = GRACE_PERIOD_S, study_targets=None):
    """The throughput objective of :func:`placer.tune.tune` once the model is profiled (on
    :func:`per_core_targets`): see this module. ``study_targets``: the targets the user gave, which
    name the study (default ``ctx.targets``)."""
    return ThroughputSearch(ctx, budget_s=budget_s, out=out, storage=storage, seed=seed, t_start=t_start,
                            solver_time_limit=solver_time_limit, say=say, n_trials=n_trials,
                            stale_after_s=stale_after_s, study_targets=study_targets).run()


class ThroughputSearch:
    """One throughput tuning run: baselines, yardsticks, replicated candidates, the study over the
    per-core runtimes, the final interleaved rounds, the output (:meth:`run`, step by step).

    It holds what the steps share: the bench the baselines run on, the records, the first-phase and
    final rounds' req/s of each candidate, the materialized pipelines, the N-core limit and the best
    single runtime (both updated by the final rounds), the requests per round, and the study."""

    def __init__(self, ctx, *, budget_s: float | None, out: Path, storage: str | None, seed: int, t_start: float,
                 solver_time_limit: float, say: Callable[[str], None], n_trials: int | None,
                 stale_after_s: float = GRACE_PERIOD_S, study_targets=None):
        self.ctx, self.graph = ctx, ctx.graph
        #: the targets that name the study and its workers: the user's, all-cores ones included
        self.study_targets = list(study_targets) if study_targets is not None else list(ctx.targets)
        self.cores = sorted(os.sched_getaffinity(0))
        self.n_cores = len(self.cores)
        if self.n_cores < 2:
            raise PlacerError("the throughput objective needs at least 2 cores (one pipeline stage per core)")
        self.budget_s, self.n_trials, self.t_start = budget_s, n_trials, t_start
        self.out, self.storage, self.stale_after_s = out, storage, stale_after_s
        self.storage_url = storage or f"sqlite:///{(out / 'study.db').resolve()}"
        self.seed, self.solver_time_limit, self.say = seed, solver_time_limit, say
        # from the user's targets, not the profiled per-core ones: a runtime listed on all cores and at one
        # thread is two choices of the study, as before (a resumed study keeps its distributions)
        self.kinds = [t.kind for t in self.study_targets]
        #: the runtimes a stage or a replica may use (untuned TVM only if nothing else is there); a kind
        #: is listed once per target of it (the study's choices, kept as they were for studies resumed)
        self.usable = stage_kinds(self.kinds)
        self.runtimes = list(dict.fromkeys(self.usable))  # each usable runtime once
        #: per runtime, the problem column a per-core stage is priced from: its one-thread target's
        self.cost_col = one_thread_columns(ctx.targets)
        self.feeds = load_inputs("seed:0", self.graph, 4)
        self.reference = ReferenceRunner(self.graph.model)
        self.refs = [self.reference.run(f) for f in self.feeds]
        self.records: list[TrialRecord] = []
        self.rounds_rps: dict[str, list[float]] = {}  # req/s of each first-phase round per pipeline candidate
        self.final_rps: dict[str, list[float]] = {}  # req/s of each final round per finalist
        self.ys_rps: dict[str, list[float]] = {}  # req/s of each final round per yardstick
        self.round_rps: list[dict[str, float]] = []  # per final round: req/s by key (runs and yardsticks)
        self.spelled: list[bool] = []  # per final round: read as a spell of the host (spelled_rounds)
        #: per runtime (its 1-thread and all-core keys): the all-core / 1-thread time of the baselines
        self.quiet_ratio: dict[tuple[str, str], float] = {}
        self.pipe_mats: dict[str, Any] = {}  # measured pipeline candidates, materialized
        self.compile_s: dict[str, float] = {}  # seconds each one's executor took to build its sessions
        self.by_key: dict[str, TrialRecord] = {}
        self.base_names: dict[str, Any] = {}  # baseline name -> its materialized plan
        self.bench = self.yardsticks = self.study = self.fusion = None
        self.best_single: TrialRecord | None = None
        self.single_thread_best = self.limit = math.nan
        self.n_requests = MIN_REQUESTS
        self.n_done = 0

    def run(self):
        """Every step, then the chosen candidate materialized into ``out`` with the output files."""
        # run_bench.PlanBench looked up when called (tests stand in a bench)
        self.bench = run_bench.PlanBench(self.feeds, rounds=3, per_round=4)
        stack_outer = contextlib.ExitStack()
        try:
            stats = self.measure_baselines()
            self.yardsticks = stack_outer.enter_context(
                YardstickSet(self.graph.model, self.feeds, throughput_kinds(), say=self.say))
            self.measure_yardsticks()
            self.measure_replicas(stats)
            self.open_study()
            self.search()
            eligible = self.final_rounds()
        finally:
            self.bench.close()
            stack_outer.close()
        return self.write(eligible)

    # ---- baselines: each runtime alone on all cores, and at 1 thread for the N-core limit ----------
    def measure_baselines(self) -> dict:
        """Check and measure each runtime alone at 1 and N threads; sets the N-core limit, the best
        single runtime and the requests per round. Returns the baselines' stats."""
        graph, bench, n_cores, say = self.graph, self.bench, self.n_cores, self.say
        for kind in dict.fromkeys(self.kinds):  # each runtime once (its t1 and tN targets share a kind)
            if untuned_tvm(kind):
                continue  # no throughput baseline
            for threads in (1, n_cores):
                name = f"{kind}:t{threads}"
                try:
                    mat = materialize(graph, {op.id: name for op in graph.ops})
                    bench.add(name, mat)
                    report = check_against_reference(graph.model, self.feeds, bench.outputs(name),
                                                     reference=self.reference, **self.ctx.tolerance)
                    if not report.passed:  # every measured candidate is checked, baselines included
                        raise PlacerError(f"numerics check failed: {report.failures()[0].name}")
                    self.base_names[name] = mat
                except PlacerError as exc:
                    say(f"baseline {name}: {exc}")
        if not self.base_names:
            untuned = [k for k in dict.fromkeys(self.kinds) if untuned_tvm(k)]
            why = f" ({', '.join(untuned)}: untuned TVM is none, 15-100x slower on a CPU)" if untuned else ""
            raise PlacerError(
                f"no runtime runs the whole of {graph.name!r} as a throughput baseline{why}"
                + ": nothing to compare a pipeline with; give --targets a runtime that runs it")
        stats = bench.measure(list(self.base_names))
        for name, st in stats.items():
            rec = TrialRecord(name, f"single:{name}", "baseline", {}, None, math.nan, measured_ms=st.median_ms,
                              p10_ms=st.p10_ms, p90_ms=st.p90_ms, throughput_rps=1000 / st.median_ms,
                              n_partitions=1, numerics_ok=True)
            self.records.append(rec)
            say(f"baseline {name}: {rec.throughput_rps:.1f} req/s ({st.median_ms:.3f} ms/request)")
        self.single_thread_best = max((1000 / st.median_ms for n, st in stats.items() if n.endswith(":t1")),
                                      default=math.nan)
        self.quiet_ratio = quiet_ratios({k: st.median_ms for k, st in stats.items()}, self._runtime_pairs())
        self.limit = limit = n_cores * self.single_thread_best
        multi = [r for r in self.records if r.key.endswith(f":t{n_cores}")]
        self.best_single = max(multi or self.records, key=lambda r: r.throughput_rps)
        say(f"best single runtime: {self.best_single.label} {self.best_single.throughput_rps:.1f} req/s; "
            f"{n_cores}-core limit {limit:.1f} req/s")
        # requests per measurement round: about MEASURE_S at the N-core limit
        self.n_requests = MIN_REQUESTS if not math.isfinite(limit) else int(
            min(MAX_REQUESTS, max(MIN_REQUESTS, math.ceil(MEASURE_S * limit))))
        return stats

    def measure_yardsticks(self) -> None:
        """The runtimes' own ways to serve many requests, each in its own process: a first figure each,
        and their outputs checked against the reference as the candidates' are."""
        for kind, y in self.yardsticks.ready.items():
            rec = TrialRecord(y.key, y.key, "yardstick", {"what": DESCRIPTIONS[kind], **y.info}, None, math.nan,
                              n_partitions=1)
            report = self.yardsticks.check(kind, self.graph.model, self.feeds, reference=self.reference,
                                           **self.ctx.tolerance)
            if report is not None:
                rec.take_numerics(report)
            y.throughput(max(4, self.n_requests // 4))  # warm-up at its own concurrency
            rps = rec.throughput_rps = y.throughput(self.n_requests)
            self.records.append(rec)
            self.ys_rps[y.key] = []
            self.say(f"{y.key}: {rps:.1f} req/s" if rps else f"{y.key}: failed ({y.error})")

    def measure(self, rec: TrialRecord, mat) -> None:
        """Measure a pipeline candidate into ``rec`` (FIRST_ROUNDS rounds); PlacerError -> rec.error."""
        try:
            rec.n_partitions = len(mat.partitions)
            with _PipelineRuns(mat, self.feeds, self.refs, self.n_requests, self.ctx.tolerance) as runs:
                self.compile_s[rec.key] = runs.pe.compiled_s or 0.0
                runs.round(warmup=4)
                for _ in range(FIRST_ROUNDS - 1):
                    runs.round()
            runs.fill(rec)
            self.rounds_rps[rec.key] = list(runs.rps)
            if rec.numerics_ok is False:
                raise PlacerError(f"numerics check failed: {runs.numerics.failures()[0].name}")
            self.pipe_mats[rec.key] = mat
        except PlacerError as exc:
            rec.error = first_line(exc)
            rec.throughput_rps = None

    # ---- replicated: the whole model on one runtime, one replica per core -------------------------
    def measure_replicas(self, stats: Mapping) -> None:
        """One replicated candidate per runtime that runs the whole model (``stats``: the baselines')."""
        graph, n_cores = self.graph, self.n_cores
        replicas = [[c] for c in self.cores]
        for kind in self.runtimes:  # each runtime's replicas once
            if f"{kind}:t1" not in self.base_names:
                continue  # the runtime cannot run the whole model (said above)
            key = f"replicas:{kind}:t1x{n_cores}"
            rec = TrialRecord(key, f"{kind}:t1 x{n_cores} replicas", "replicas",
                              {"runtime": kind, "replicas": replicas}, None,
                              stats[f"{kind}:t1"].median_ms / n_cores, solve_s=0.0)
            try:
                mat = materialize(graph, {op.id: f"{kind}:t1" for op in graph.ops},
                                  stage_of={op.id: 0 for op in graph.ops}, replicas={0: replicas})
            except PlacerError as exc:
                rec.error = first_line(exc)
            else:
                self.measure(rec, mat)
            self.records.append(rec)
            if rec.error:
                self.say(f"{rec.label}: failed ({rec.error})")
            else:
                self.say(f"{rec.label}: {rec.throughput_rps:.1f} req/s ({rec.throughput_rps / self.limit:.0%} of the "
                         f"{n_cores}-core limit; rounds {', '.join(f'{v:.0f}' for v in self.rounds_rps[key])})")

    # ---- study over the per-core runtime choice (one pipeline stage per core) ----------------------
    def open_study(self) -> None:
        """Open (or resume) the study; the first few per-core runtime combinations are its first trials."""
        cores = self.cores
        self.study = open_study(self.storage_url,
                                shared_study.study_name(self.graph.model_hash, self.study_targets,
                                                        "throughput"),
                                direction="maximize", stale_after_s=self.stale_after_s,
                                seed=self.seed, shared=self.storage is not None, n_startup_trials=3)
        self.fusion = space.fusion_groups(self.graph)
        # the first four of runtimes ** cores combinations, taken lazily (3 ** 16 on 16 cores with bf16)
        for combo in itertools.islice(itertools.product(self.runtimes, repeat=self.n_cores), 4):
            self.study.enqueue_trial({f"core{c}": k for c, k in zip(cores, combo)} | {"boundary_ms": 0.0, "fuse": True},
                                     skip_if_exists=True)

    def finalists(self) -> tuple[list[TrialRecord], list[TrialRecord]]:
        """Who runs pipeline rounds in the final rounds, from the figures so far: the best
        :data:`N_FINALISTS` measured candidates and every runtime's replicas; and each runtime alone on
        all cores and at one thread (baselines), measured there as the candidates are (a pipeline round
        of the same requests). On all cores, its figure from the latency bench, 1000 / median ms of
        single requests, beat OpenVINO's replicas on inception_v1 and hf-distilbert where a pipeline
        round of it then ran 0.76x / 0.91x OpenVINO's THROUGHPUT f32 (session 38). At one thread it is
        the N-core limit's unit: 1000 / median ms put the limit above what N sessions reach on N cores
        (a median of single requests leaves out the host's hiccups, which a round pays; squeezenet,
        session 54: one ONNX Runtime session per core read 90% of it, and 99% of the limit taken from
        rounds). Every runtime's replicas, not the best
        one's: two runtimes' replicas often measure within noise of each other before the finals, and
        once trials are measured the best first figures of two rounds are the luckiest ones (squeezenet,
        session 39: three pipelines at 321-357 req/s first, 243-278 in the finals, took the places;
        OpenVINO's replicas won by 0.2 req/s over ONNX Runtime's, and tune returned them at 0.854x the
        one-session-per-core yardstick that ONNX Runtime's replicas match)."""
        candidates = sorted((r for r in self.records if r.kind in ("trial", "replicas")
                             and r.throughput_rps is not None), key=lambda r: -r.throughput_rps)
        finalists = candidates[:N_FINALISTS]
        finalists += [r for r in candidates if r.kind == "replicas" and r not in finalists]
        alone = [r for r in self.records if r.kind == "baseline"
                 and (r.key.endswith(f":t{self.n_cores}") or r.key.endswith(":t1"))]
        return finalists, alone

    def final_rounds_s(self) -> float:
        """About how long the final rounds take, from the figures measured so far: per round, the
        requests of each finalist, runtime alone (on all cores and at one thread) and yardstick at its
        measured rate; once, each one's executor built again (as long as it took before) and its check."""
        finalists, alone = self.finalists()
        entrants = [r for r in finalists + alone if r.throughput_rps]
        rates = [r.throughput_rps for r in entrants]
        rates += [r.throughput_rps for r in self.records if r.kind == "yardstick" and r.throughput_rps]
        per_round = sum(self.n_requests / v for v in rates)
        # each one's executor is built again for them (its sessions compiled, its check run)
        setup = sum(self.compile_s.get(r.key, 0.0) + 12 / r.throughput_rps for r in entrants)
        return FINAL_ROUNDS * per_round + setup

    def search(self) -> None:
        """Ask, run and tell trials until the trial count, 80 % of the budget, or until one more trial
        (as long as the longest so far, the solver's limit before any) would leave the final rounds
        less than their time (:meth:`final_rounds_s`): a round cut by the budget leaves the verdict
        one sample per candidate. A stop request is checked before each trial."""
        durations: list[float] = []  # of this search's trials
        while True:
            longest = max(durations, default=float(self.solver_time_limit))
            if self.n_trials is not None and self.n_done >= self.n_trials:
                break
            if self.budget_s is not None:
                elapsed = time.monotonic() - self.t_start
                if elapsed > self.budget_s * 0.8:
                    break
                final_s = self.final_rounds_s()
                if elapsed + longest + final_s > self.budget_s:
                    self.say(f"search stopped at {elapsed:.1f} s of the {self.budget_s:.0f} s budget: about "
                             f"{final_s:.1f} s kept for {FINAL_ROUNDS} final rounds")
                    break
            raise_if_stopped()  # a stop request dropped inside a finalizer is not lost
            fail_stale(self.study, self.say, self.stale_after_s)
            t0 = time.monotonic()
            with asked_trial(self.study, lambda t: shared_study.mark_worker(t, self.study_targets)) as trial:
                self.n_done += int(self.run_trial(trial))
            durations.append(time.monotonic() - t0)

    def run_trial(self, trial) -> bool:
        """Solve one trial's pipeline, measure it (a placement measured before is not re-run) and tell
        the study; False if another worker had finished the trial."""
        ctx, cores = self.ctx, self.cores
        with storage_writes():
            choice = [trial.suggest_categorical(f"core{c}", self.usable) for c in cores]
            knobs: dict[str, Any] = {f"core{c}": k for c, k in zip(cores, choice)}
            knobs["boundary_ms"] = trial.suggest_categorical("boundary_ms", [0.0, 0.03, 0.1, 0.3])
            knobs["fuse"] = trial.suggest_categorical("fuse", [True, False])
        names = [f"{k}@cpu{c}:t1" for k, c in zip(choice, cores)]
        cols = [self.cost_col[k] for k in choice]
        overhead = [ctx.table.overhead_ms.get(ctx.targets[j].name, 0.01) for j in cols]
        nowhere = np.flatnonzero(~np.isfinite(np.asarray(ctx.problem.cost_ms)[:, cols]).any(axis=1))
        if nowhere.size:  # the runtimes drawn for the cores: none of them runs this op (no problem to make)
            op = self.graph.op(ctx.problem.ops[int(nowhere[0])])
            return self._unsolved(trial, choice, knobs,
                                  f"no runtime of {'+'.join(choice)} runs op {op.id!r} ({op.op_type})")
        t0 = time.monotonic()
        try:  # no problem the cores' runtimes can make, or no pipeline of it: the trial fails
            problem = retarget(ctx.problem, names, cols, overhead)
            # a fusion group stays one only where a core's runtime runs all of its ops
            colocate = tuple(tuple(g) for g in self.fusion
                             if space.co_supported(problem.cost_ms, problem.ops, g)) if knobs["fuse"] else ()
            problem = dataclasses.replace(problem, colocate=colocate,
                                          partition_overhead_ms=np.full(len(names), knobs["boundary_ms"]))
            plan = solve(problem, "pipeline", "cpsat", time_limit=self.solver_time_limit, seed=self.seed,
                         num_stages=self.n_cores)
        except PlacerError as exc:
            return self._unsolved(trial, choice, knobs, first_line(exc))
        solve_s = time.monotonic() - t0
        key = assignment_key(plan)
        if key in self.by_key:
            rec = self.by_key[key]
        else:
            rec = TrialRecord(key, f"trial {trial.number}", "trial", knobs, plan, plan.bottleneck_ms, solve_s=solve_s)
            try:
                mat = materialize(self.graph, plan)
            except PlacerError as exc:
                rec.error = first_line(exc)
            else:
                self.measure(rec, mat)
            self.by_key[key] = rec
            self.records.append(rec)
        return tell_trial(self.study, trial, rec, rec.throughput_rps, self.say,
                          f"{'+'.join(choice)} stages {plan.stage_targets}, predicted bottleneck "
                          f"{plan.bottleneck_ms:.3f} ms, measured {rec.throughput_rps or math.nan:.1f} req/s")

    def _unsolved(self, trial, choice: list[str], knobs: dict[str, Any], error: str) -> bool:
        """Tell the study that ``trial`` has no plan (``error`` says why); nothing is measured."""
        rec = TrialRecord(f"unsolved:{'+'.join(choice)}", f"trial {trial.number}", "trial", knobs, None,
                          math.nan, error=error)
        return tell_trial(self.study, trial, rec, None, self.say, "")

    # ---- final: finalists and baselines again, in interleaved rounds; only these rounds decide -------
    def final_rounds(self) -> list[TrialRecord]:
        """Measure the finalists, the baselines and the yardsticks again in interleaved rounds; their
        figures (and the N-core limit) become the medians over these rounds. Returns the records
        eligible to win."""
        records = self.records
        finalists, alone = self.finalists()
        if not finalists:
            return [r for r in records if r.throughput_rps is not None and r.kind != "yardstick"]
        for r in alone:
            self.pipe_mats.setdefault(r.key, self.base_names[r.key])
        runs = self._interleaved_rounds(finalists + alone)
        self._final_figures(finalists + alone, runs)
        # a candidate or a runtime alone that failed in the final rounds has no figure there: not eligible
        return [r for r in finalists + alone if r.key in self.final_rps and r.throughput_rps is not None]

    def _runtime_pairs(self) -> list[tuple[str, str]]:
        """Each runtime's 1-thread and all-core baseline keys, where it has both."""
        return [(f"{k}:t1", f"{k}:t{self.n_cores}") for k in dict.fromkeys(self.kinds)
                if f"{k}:t1" in self.base_names and f"{k}:t{self.n_cores}" in self.base_names]

    def _interleaved_rounds(self, finalists: list[TrialRecord]) -> dict[str, _PipelineRuns]:
        """FINAL_ROUNDS rounds, past the budget if it is spent (the search keeps their time where it can:
        :meth:`search`): the baselines, the yardsticks, then each finalist still eligible (alternating
        order); returns the finalists' runs (closed). One round per candidate, which a spent budget used
        to leave, picked the slower of two runtimes' replicas on 3 of 13 models on a host that swings
        by 1.3-2x (3-5% below the other, measured over 12 rounds: session 38).

        Then, while fewer than :data:`MIN_QUIET_ROUNDS` rounds read no spell of the host (a runtime on all
        cores at about its 1-thread rate: :func:`~placer.run.spells.spelled_rounds`), up to
        :data:`EXTRA_ROUNDS` more, each after a wait (the core probes read such spells quiet: waiting
        for them would not wait). Every round counts in the figures (medians): the added rounds only
        keep a spell that passes from being most of them. Squeezenet, session 54: two of three
        rounds taken in a spell put the chosen replicas at 75% of the N-core limit, 277 req/s in the
        third round against 192 and 208. Rounds are not left out: in such a round the one-thread
        replicas can run at their fastest while the runtimes on all cores stall (hf-bert, session 54:
        209 and 203 req/s in two rounds read as a spell, 168 and 192 in the others)."""
        budget_s, n_requests = self.budget_s, self.n_requests
        pairs = self._runtime_pairs()
        deadline = None if budget_s is None else self.t_start + budget_s + SPELL_WINDOW_S
        with contextlib.ExitStack() as stack:
            runs: dict[str, _PipelineRuns] = {}
            for r in finalists:
                try:
                    runs[r.key] = stack.enter_context(
                        _PipelineRuns(self.pipe_mats[r.key], self.feeds, self.refs, n_requests, self.ctx.tolerance))
                except PlacerError as exc:
                    r.error, r.throughput_rps = f"final rounds: {first_line(exc)}", None
            for rnd in range(FINAL_ROUNDS + run_bench.added_rounds(EXTRA_ROUNDS)):
                if rnd == 1 and budget_s is not None and time.monotonic() - self.t_start > budget_s:
                    self.say(f"final rounds past the {budget_s:.0f} s budget: {FINAL_ROUNDS} rounds, "
                             "the verdict's samples")
                if rnd >= FINAL_ROUNDS:  # enough rounds read no spell, or no time left to add one
                    self.spelled = spelled_rounds(self.round_rps, pairs, self.quiet_ratio)
                    wait = run_bench.quiet_wait_s()
                    if (self.spelled.count(False) >= MIN_QUIET_ROUNDS or not runs
                            or (deadline is not None and time.monotonic() + wait > deadline)):
                        break
                    self.say(f"final rounds: {self.spelled.count(True)} of {len(self.spelled)} read as a spell "
                             "of the host (a runtime on all cores at about its 1-thread rate); one more round")
                    time.sleep(wait)
                this_round: dict[str, float] = {}
                self.round_rps.append(this_round)
                order = list(runs) if rnd % 2 == 0 else list(runs)[::-1]
                for y in self.yardsticks.ready.values():
                    rps = y.throughput(n_requests)
                    if rps:
                        self.ys_rps[y.key].append(rps)
                        this_round[y.key] = rps
                for k in order:
                    try:
                        rps = this_round[k] = runs[k].round(warmup=4 if rnd == 0 else 0)
                        self.final_rps.setdefault(k, []).append(rps)
                    except PlacerError as exc:  # failed now after passing before: not eligible
                        rec = next(r for r in finalists if r.key == k)
                        rec.error, rec.throughput_rps = f"final rounds: {first_line(exc)}", None
                        runs.pop(k).pe.close()
                        self.final_rps.pop(k, None)
            self.spelled = spelled_rounds(self.round_rps, pairs, self.quiet_ratio)
        return runs

    def _final_figures(self, finalists: list[TrialRecord], runs: Mapping[str, _PipelineRuns]) -> None:
        """Every figure from the final rounds only: finalists and runtimes alone (pipeline rounds),
        yardsticks, then the N-core limit and the best single runtime. A runtime alone that failed in
        them has no figure (its error says why) and sets neither."""
        records, say = self.records, self.say
        if any(self.spelled):
            say(f"final rounds: {self.spelled.count(True)} of {len(self.spelled)} read as a spell of the host "
                "(marked *; every round counts)")
        for r in finalists:
            if r.key in runs and runs[r.key].rps:
                runs[r.key].fill(r)  # medians over the final rounds only
                r.final = True
                if r.numerics_ok is False:
                    r.error, r.throughput_rps = "numerics check failed (final rounds)", None
                    continue
                earlier = self.rounds_rps.get(r.key)
                say(f"final: {r.label} {r.throughput_rps:.1f} req/s (rounds "
                    f"{', '.join(f'{v:.0f}' + '*' * s for v, s in zip(self.final_rps[r.key], self.spelled))}"
                    + (f"; earlier {', '.join(f'{v:.0f}' for v in earlier)})" if earlier else ")"))
        for rec in records:  # yardsticks: medians over the final rounds only
            if rec.kind == "yardstick" and self.ys_rps.get(rec.key):
                rec.throughput_rps, rec.final = float(np.median(self.ys_rps[rec.key])), True
                say(f"final: {rec.key} {rec.throughput_rps:.1f} req/s")
        measured = [r for r in records if r.kind == "baseline" and r.final and r.throughput_rps is not None]
        self.single_thread_best = max((r.throughput_rps for r in measured if r.key.endswith(":t1")),
                                      default=math.nan)
        self.limit = self.n_cores * self.single_thread_best
        self.best_single = max((r for r in measured if r.key.endswith(f":t{self.n_cores}")),
                               key=lambda r: r.throughput_rps, default=self.best_single)

    # ---- output ------------------------------------------------------------------------------------
    def write(self, eligible: list[TrialRecord]) -> TuneResult:
        """The best eligible candidate materialized into ``out``, the result and its output files."""
        graph, out, limit = self.graph, self.out, self.limit
        best = max(eligible, key=lambda r: r.throughput_rps)
        fell_back = best.kind == "baseline"
        if fell_back:
            mat = materialize(graph, {op.id: best.key for op in graph.ops}, out)
        elif best.kind == "replicas":
            kind = best.knobs["runtime"]
            mat = materialize(graph, {op.id: f"{kind}:t1" for op in graph.ops}, out,
                              stage_of={op.id: 0 for op in graph.ops}, replicas={0: best.knobs["replicas"]})
        else:
            mat = materialize(graph, best.plan, out)
        # the limit is the best one-thread runtime's rate, one request at a time, times the cores: a loop that
        # also pays each request's call in Python, which replicas overlap with the other cores' work (past
        # 100% on models of a tenth of a millisecond)
        self.say(f"chosen {best.label}: {best.throughput_rps:.1f} req/s = {best.throughput_rps / limit:.0%} of the "
                 f"{self.n_cores}-core limit {limit:.1f} req/s ({self.n_cores} x the best one-thread runtime, "
                 f"{self.single_thread_best:.1f} req/s one request at a time)")
        result = TuneResult(best=best, best_single=self.best_single, records=self.records, objective="throughput",
                            out_dir=out, fell_back=fell_back, wall_s=time.monotonic() - self.t_start,
                            study_storage=self.storage_url,
                            extra={"core_limit_rps": limit, "single_thread_best_rps": self.single_thread_best,
                                   "core_limit_fraction": best.throughput_rps / limit,
                                   "requests_per_round": self.n_requests, "throughput_rounds": self.rounds_rps,
                                   "final_rounds": self.final_rps,
                                   "final_rounds_spelled": self.spelled,
                                   "final_candidates": [r.key for r in eligible],
                                   "chosen_layout": mat.summary(),
                                   "problem_provenance": dict(self.ctx.problem.provenance),
                                   "targets_given": [t.name for t in self.study_targets],
                                   "n_partitions": len(mat.partitions)})
        write_outputs(result, self.ctx, mat)
        return result
