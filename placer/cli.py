"""The ``placer`` command: a table of thin commands over the public API.

User errors (:class:`placer.errors.PlacerError`, and an ``OSError`` on a path given on the command
line) print one line and exit 2; anything else is a bug and keeps its traceback. Each command is a
function ``cmd_NAME(args) -> int`` plus a parser builder ``add_NAME(subparsers)``; ``COMMANDS``
lists them.

Each ``cmd_NAME`` imports the layer it calls inside its body, not at the top of this module: that
is deliberate, so that ``placer --help`` and a command's ``--help`` start without importing ONNX,
the runtimes, OR-Tools, Optuna or scikit-learn (docs/architecture.md). This module is also the
process's entry point, the one place that sets process-wide state: SIGTERM handling, Optuna's log
level (:func:`quiet_optuna`), and the ``PLACER_RPC_*`` environment of ``placer profile --rpc-*``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from placer.errors import PlacerError
from placer.safe_io import printable

#: when this module was imported (before the commands' heavy imports): the process's start where
#: /proc does not tell it
IMPORTED_AT = time.monotonic()

DB_HELP = "profile store (SQLite); default $PLACER_DB, else ~/.cache/placer/profiles.db"
TARGETS_HELP = ("comma-separated targets, e.g. onnxruntime,openvino:t1,tvm-llvm "
                "(default: onnxruntime and openvino on all cores)")


def parse_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``["x=1x3x224x224", ...]`` -> ``{"x": (1, 3, 224, 224)}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or []:
        name, sep, dims = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise PlacerError(f"--shape {item!r}: expected NAME=D1xD2x..., e.g. input=1x3x224x224") from None
    return shapes


#: upper bounds of the counting options (beyond them a number is a typo, and would run for ever)
MAX_TRIALS = 100_000
MAX_SEED = 2**31 - 1  # CP-SAT and the samplers take 32-bit seeds
DEFAULT_CV_FOLDS, MAX_CV_FOLDS = 4, 20  # placer fit --cv-folds
MAX_BUDGET_S = 30 * 24 * 3600.0
MAX_SEGMENT_LEN = 64


def _ranged(convert: Callable[[str], Any], name: str, invalid: str, lo, hi, show: Callable[[Any], str]):
    """An argparse ``type``: ``convert(text)`` within ``[lo, hi]`` (argparse prints "argument --X: ..."
    and exits 2); ``show`` writes the bounds (and an integer value) in the error."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            shown = printable(text[:40], newlines=False)
            raise argparse.ArgumentTypeError(f"{invalid}: {shown!r}") from None
        if not lo <= value <= hi:  # NaN fails both comparisons
            what = show(value) if name == "int" else text[:40]
            raise argparse.ArgumentTypeError(f"{what} is out of range: expected {show(lo)} to {show(hi)}")
        return value

    parse.__name__ = name
    return parse


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``[lo, hi]``."""
    return _ranged(int, "int", "invalid int value", lo, hi, str)


def float_in(lo: float, hi: float) -> Callable[[str], float]:
    """An argparse ``type``: a finite number in ``[lo, hi]``."""
    return _ranged(float, "float", "invalid number", lo, hi, lambda x: f"{x:g}")


def db_path(text: str) -> str:
    """An argparse ``type`` for ``--db``: a file path (not empty, not SQLite's ``:memory:``, where nothing
    would be kept)."""
    if not text.strip() or text.strip() == ":memory:":
        raise argparse.ArgumentTypeError(f"{text!r}: expected the path of a profile store file "
                                         "(an in-memory or empty name keeps nothing)")
    return text


def nonempty_path(text: str) -> str:
    """An argparse ``type`` for an output or model path (``--out``, ``--cost-model``, ``--json``,
    ``--storage``'s URL): not empty nor blank, which would fall back to a default place (or the
    working directory) unasked."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected a path (an empty name names no place)")
    return text


def say_plain(console) -> Callable[[str], None]:
    """A progress callback printing each message dim, as plain text, control characters escaped."""
    return lambda msg: console.print(printable(msg), style="dim", markup=False, highlight=False)


def out(text: str) -> None:
    """Print text that may hold names from a user's file (op names, paths): control characters escaped."""
    print(printable(text))


def quiet_optuna() -> None:
    """Optuna's INFO log (a line per trial, the study's creation) off: the commands print their own
    progress. It is process-wide, so the entry point decides it, never the library."""
    import optuna  # here, not at the top: only the commands that search need it (0.3 s)

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def parse_targets(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise PlacerError(f"--targets {text!r}: no target names (expected e.g. onnxruntime,openvino)")
    return names


def one_thread_note(names: list[str] | None) -> str | None:
    """A line for targets given on the command line that all run on fewer threads than this process
    has cores, none pinned (a bare kind, ``onnxruntime``, is one thread): their plans cannot use the
    whole machine, while ONNX Runtime and OpenVINO at their defaults do. None otherwise."""
    if not names:
        return None
    from placer.devices import make_targets
    from placer.devices.sim import is_simulated

    n_cores = len(os.sched_getaffinity(0))
    real = [t for t in make_targets(names) if not is_simulated(t)]
    if n_cores < 2 or not real or any(t.spec.cores or t.spec.threads >= n_cores for t in real):
        return None
    example = real[0].name.split("@")[0]
    return (f"note: every target given runs on fewer threads than this machine's {n_cores} cores (a bare kind is "
            f"one thread), while ONNX Runtime and OpenVINO at their defaults use them all: write "
            f"{example}:t{n_cores} for all cores, or leave --targets out (the default targets cover both)")


# ---- devices ---------------------------------------------------------------------------------
def add_devices(sub) -> None:
    p = sub.add_parser("devices", help="list the targets this machine has, with versions",
                       description="List every kind of target placer knows (ONNX Runtime, OpenVINO, TVM, "
                                   "...): whether this machine has it, its version, or why it is missing.")
    p.set_defaults(func=cmd_devices)


def cmd_devices(args) -> int:
    from placer.devices import available_targets
    from placer.report.console import add_row, make_console, make_table

    table = make_table(("kind", "name", "available", "version / reason"), title="placer targets on this machine")
    for row in available_targets():
        add_row(table, (row["kind"], row["name"], "yes" if row["available"] else "no", row["version"]))
    make_console().print(table)
    return 0


# ---- plan ------------------------------------------------------------------------------------
def add_plan(sub) -> None:
    p = sub.add_parser("plan",
                       help="solve a placement: from a model (profiling what is missing) or a problem JSON",
                       description="Decide where each op of a model runs. From a model: profile the op "
                                   "signatures the store lacks, build the cost table, solve. From --problem: "
                                   "solve a placement problem JSON with your own costs. Prints the plan "
                                   "(solver status, predicted makespan, ops per target, transfers); --out "
                                   "saves it as JSON.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("model", nargs="?", help="ONNX file or zoo:NAME (zoo:squeezenet, zoo:bert-tiny, ...)")
    src.add_argument("--problem", help="a PlacementProblem JSON file (docs/problem_json.md): bring your own costs")
    p.add_argument("--targets", help=TARGETS_HELP)
    p.add_argument("--mode", choices=["latency", "pipeline"], default="latency",
                   help="latency: minimize one inference's time; pipeline: cut into stages for throughput "
                        "(default latency)")
    p.add_argument("--solver", default="cpsat",
                   help="cpsat (default), heft, greedy, dp, ideals, single:<target> (single:onnxruntime)")
    p.add_argument("--stages", type=int, default=None, help="pipeline stages (default: solver's choice)")
    p.add_argument("--time-limit", type=float, default=10.0, help="solver time limit, seconds (default 10)")
    p.add_argument("--db", default=None, type=db_path, help=DB_HELP)
    p.add_argument("--shape", action="append", help="bind an input shape: NAME=1x3x224x224 (repeatable)")
    p.add_argument("--out", default=None, metavar="DIR", type=nonempty_path,
                   help="write a runnable plan directory here (plan.json, stage_config.json, Relax module, "
                        "partitions: `placer run DIR`); a path ending in .json gets the plan JSON alone")
    p.add_argument("--seed", type=int_in(0, MAX_SEED), default=0, help="solver random seed (default 0)")
    p.add_argument("--measure", action=argparse.BooleanOptionalAction, default=True,
                   help="latency mode: run a plan that cuts the model against the best single target "
                        "(interleaved, outputs checked) and keep the faster (default; --no-measure returns "
                        "the priced plan unmeasured)")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args) -> int:
    from placer.problem import PlacementProblem
    from placer.solve import solve

    out_path = Path(args.out) if args.out else None
    if out_path is not None and out_path.suffix == ".json" and not out_path.parent.is_dir():
        # found before the profiling, solving and measuring, not by the write at their end
        raise PlacerError(f"--out {out_path}: directory {str(out_path.parent)!r} does not exist")
    if args.problem:
        given = [opt for opt, v in (("--targets", args.targets), ("--shape", args.shape), ("--db", args.db))
                 if v is not None]
        if given:  # a problem JSON carries its own targets and costs: these were ignored
            raise PlacerError(f"{', '.join(given)}: not used with --problem (the problem JSON names its targets "
                              "and costs); drop them, or plan a model instead")
        problem = PlacementProblem.from_json(args.problem)
        plan = solve(problem, args.mode, args.solver, time_limit=args.time_limit, num_stages=args.stages,
                     seed=args.seed)
        out(plan.summary())
        if out_path:  # no model to materialize: the plan JSON is the whole output
            plan.save(out_path)
            out(f"plan written to {out_path}")
        return 0
    from placer import api
    from placer.report.console import make_console

    if out_path is not None and out_path.exists() and not out_path.is_dir() and out_path.suffix != ".json":
        raise PlacerError(f"--out {out_path}: exists and is not a directory")
    console = make_console(stderr=True)
    targets = parse_targets(args.targets)
    if args.mode == "latency" and (note := one_thread_note(targets)):
        console.print(note, highlight=False, markup=False)
    planned = api.plan(args.model, targets=targets, mode=args.mode, solver=args.solver,
                       db=args.db, shapes=parse_shapes(args.shape), time_limit=args.time_limit,
                       num_stages=args.stages, seed=args.seed, measure=args.measure, say=say_plain(console))
    out(planned.plan.summary())
    from placer.graph.opaque import describe_regions

    for op_id, what in describe_regions(planned.ctx.graph).items():
        out(f"opaque region {op_id} ({what}) runs whole on {planned.plan.assignment[op_id]}")
    if out_path is not None and out_path.suffix == ".json":
        planned.plan.save(out_path)
        out(f"plan written to {out_path} (give --out a directory for a plan you can `placer run`)")
    elif out_path is not None:
        mat = planned.save(out_path)
        out(f"plan directory written to {mat.out_dir}: run it with `placer run {out_path} --check`")
    return 0


# ---- tune ------------------------------------------------------------------------------------
def parse_budget(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1h`` -> seconds."""
    t = text.strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], None)
    try:
        seconds = float(t[:-1]) * mult if mult else float(t)
    except ValueError:
        raise PlacerError(f"--budget {text!r}: expected seconds or a duration like 90s, 10m, 1h") from None
    if not (0 < seconds <= MAX_BUDGET_S):
        raise PlacerError(f"--budget {text!r}: must be a positive duration of at most 30 days, like 90s, "
                          "10m, 1h")
    return seconds


def add_tune(sub) -> None:
    p = sub.add_parser("tune",
                       help="profile, solve, run and tune a placement against measured latency/throughput",
                       description="The whole loop: profile what the store lacks, fit the cost model, then "
                                   "search the plan's knobs with Optuna, measuring every candidate plan (and "
                                   "every single target) on this machine. Writes the best plan, ready for "
                                   "`placer run` / `placer show`, and report.md / report.html to --out.")
    p.add_argument("model", help="ONNX file or zoo:NAME (zoo:squeezenet, zoo:bert-tiny, ...)")
    p.add_argument("--targets", help=TARGETS_HELP)
    p.add_argument("--objective", choices=["latency", "throughput"], default="latency",
                   help="latency: one request at a time; throughput: pipeline stages and replicas "
                        "(default latency)")
    p.add_argument("--budget", default=None,
                   help="time budget, e.g. 90s, 10m (default 2m, or none when --trials is given)")
    p.add_argument("--trials", type=int_in(1, MAX_TRIALS), default=None,
                   help="stop after this many trials (with --budget: whichever comes first)")
    p.add_argument("--out", default="placer-out", type=nonempty_path, help="output directory (default placer-out)")
    p.add_argument("--storage", default=None, type=nonempty_path,
                   help="Optuna storage URL (default sqlite:///OUT/study.db); several workers, on several "
                        "hosts, share one study through postgresql://USER@HOST/DB (pip install "
                        "'placer[postgres]'; docs/scale-out.md)")
    p.add_argument("--stale-after", type=float_in(2, 86400), default=60.0, metavar="SECONDS",
                   help="a trial whose worker sent no heartbeat for this long (killed, host down) is marked "
                        "failed by the next worker (default 60)")
    p.add_argument("--db", default=None, type=db_path, help=DB_HELP)
    p.add_argument("--shape", action="append", help="bind an input shape: NAME=1x3x224x224 (repeatable)")
    learned = p.add_mutually_exclusive_group()
    learned.add_argument("--cost-model", default=None, metavar="DIR", type=nonempty_path,
                         help="learned cost model to update (default: costmodel/ next to the profile store)")
    learned.add_argument("--no-cost-model", action="store_true",
                         help="do not fit, use or save the learned cost model (measured costs only)")
    p.add_argument("--seed", type=int_in(0, MAX_SEED), default=0, help="random seed (default 0)")
    p.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                   help="f32 (default): every output within the f32 tolerance of the reference; bf16: the "
                        "default targets add OpenVINO in bf16, as OpenVINO's own default computes on a CPU "
                        "with bf16 (refused on one without), outputs checked at the bf16 tolerance")
    p.set_defaults(func=cmd_tune)


def cmd_tune(args) -> int:
    from placer.report.console import add_row, make_console, make_table
    from placer.tune import tune

    console = make_console()
    if args.trials is not None and args.trials < 1:
        raise PlacerError(f"--trials {args.trials}: must be >= 1")
    quiet_optuna()
    targets = parse_targets(args.targets)
    if args.objective == "latency" and (note := one_thread_note(targets)):
        console.print(note, highlight=False, markup=False)
    result = tune(args.model, targets=targets, objective=args.objective,
                  budget_s=parse_budget(args.budget) if args.budget is not None else None, out_dir=args.out,
                  storage=args.storage, db=args.db,
                  shapes=parse_shapes(args.shape), n_trials=args.trials, seed=args.seed,
                  cost_model_dir=False if args.no_cost_model else (args.cost_model or True),
                  precision=args.precision, stale_after_s=args.stale_after,
                  progress=say_plain(console), started=getattr(args, "started", None))
    tp = result.objective == "throughput"
    table = make_table(("candidate", "kind", "partitions", "predicted ms", "measured ms" if not tp else "req/s",
                        "p10-p90", "paired ms", "x best default", "numerics", "note"),
                       title=f"placer tune {args.model} ({result.objective}); "
                             "figures from the final interleaved rounds unless noted",
                       justify=("partitions", "predicted ms", "measured ms", "req/s", "paired ms", "x best default"))
    def order(r):  # the final rounds first, fastest first
        if tp:
            figure = -r.throughput_rps if r.throughput_rps is not None else None
        else:
            figure = r.compare_ms
        return (not r.final, figure is None, figure or 0)

    for r in sorted(result.records, key=order):
        add_row(table, tune_table_row(r, result))
    console.print(table)
    for line in result.verdict():
        console.print(printable(line), highlight=False, markup=False)
    console.print(f"({result.wall_s:.0f} s)")
    console.print(printable(f"report: {result.report_path}  (and {result.out_dir}/report.html)"),
                  markup=False)
    return 0


def tune_table_row(r, result) -> tuple[str, ...]:
    """One record's row of tune's table: its figure in the objective's unit (req/s for throughput, ms
    for latency), "-" for any figure the record lacks (a throughput trial whose outputs failed the
    check keeps the latency of its check run, and no req/s)."""
    tp = result.objective == "throughput"
    default = result.best_default

    def num(x: float | None, fmt: str) -> str:
        return format(x, fmt) if x is not None and x == x else "-"

    if tp:
        figure, spread, paired = num(r.throughput_rps, ".1f"), "-", "-"
        ok = r.throughput_rps is not None and default is not None and default.throughput_rps
        ratio = f"{r.throughput_rps / default.throughput_rps:.2f}" if ok else "-"
    else:
        figure, paired = num(r.measured_ms, ".3f"), num(r.paired_ms, ".3f")
        spread = f"{r.p10_ms:.3f}-{r.p90_ms:.3f}" if r.p10_ms is not None and r.p90_ms is not None else "-"
        ok = default is not None and default.compare_ms and r.compare_ms
        ratio = f"{default.compare_ms / r.compare_ms:.2f}" if ok else "-"
    note = r.error or ("" if r.final or r.kind == "yardstick" else "measured in its trial, not in the final rounds")
    return (r.label + (" *" if r is result.best else ""), r.kind, str(r.n_partitions), num(r.predicted_ms, ".3f"),
            figure, spread, paired, ratio, {True: "ok", False: "MISMATCH", None: "-"}[r.numerics_ok], note)


# ---- report ----------------------------------------------------------------------------------
def add_report(sub) -> None:
    p = sub.add_parser("report", help="re-render the report of a placer tune output directory",
                       description="Rewrite report.md and report.html of a `placer tune` output directory "
                                   "from what it saved (no measuring).")
    p.add_argument("out_dir", help="a directory written by placer tune")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from placer.report import write_tune_report
    from placer.tune.records import load_tune_result

    result, ctx = load_tune_result(args.out_dir)  # types of the records and summary checked
    try:
        path = write_tune_report(result, ctx)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:  # a nested value of tune.json edited
        raise PlacerError(f"{args.out_dir}: tune.json / trials.json hold a value the report cannot use "
                          f"({type(exc).__name__}: {str(exc)[:160]}); was the directory edited?") from None
    out(f"report: {path}  (and {path.with_suffix('.html')})")
    return 0


# ---- command table (helpers add their add_/cmd_ pairs above and list them here) ----------------
COMMANDS: list[Callable] = [add_devices, add_plan, add_tune, add_report]


# ---- fit (costmodels) ---------------------------------------------------------------------------
def add_fit(sub) -> None:
    p = sub.add_parser("fit", help="fit the cost model on a profile store and save it",
                       description="Fit the learned cost model (per-op cost per target, call overheads, "
                                   "partition correction) on a profile store and save it where "
                                   "`placer tune` starts from it (or to --out DIR, for `--cost-model DIR`).")
    p.add_argument("--db", default=None, type=db_path, help=DB_HELP)
    p.add_argument("--out", default=None, type=nonempty_path,
                   help="directory for the model (skops + JSON + card.json); default: costmodel/ next to the "
                        "profile store, where placer tune finds it")
    p.add_argument("--targets", default=None, help="comma-separated targets (default: all in the store)")
    p.add_argument("--tune-trials", type=int_in(0, MAX_TRIALS), default=0,
                   help="Optuna hyper-parameter trials per target (default 0: fixed defaults)")
    p.add_argument("--seed", type=int_in(0, MAX_SEED), default=0, help="random seed (default 0)")
    p.add_argument("--cv-folds", type=int_in(0, MAX_CV_FOLDS), default=DEFAULT_CV_FOLDS,
                   help=f"folds of the cross-validated log-MAE recorded on the model card (default "
                        f"{DEFAULT_CV_FOLDS}; 0: none, the fit alone, a few times faster; at least 2 with "
                        "--tune-trials, whose search scores its trials by them)")
    p.set_defaults(func=cmd_fit)


def cmd_fit(args) -> int:
    from placer.profile.store import default_db
    from placer.safe_io import check_regular_file
    from placer.tune.learned import default_model_dir, fit_store

    db = args.db or default_db()
    if Path(db).exists():  # a directory, FIFO or device is refused here, never opened
        check_regular_file(db, "the profile store (--db)")
    if not Path(db).is_file():
        raise PlacerError(f"--db {db}: no profile store there (run `placer profile MODEL` first)")
    out_dir = args.out or default_model_dir(db)
    if args.tune_trials:
        quiet_optuna()
    cm = fit_store(db, out_dir, targets=parse_targets(args.targets), tune_trials=args.tune_trials,
                   seed=args.seed, cv_folds=args.cv_folds)
    for t, c in sorted(cm.card["targets"].items()):
        m = c.get("metrics", {})
        cv = f", cv log-MAE {m['cv_log_mae']:.3f}" if "cv_log_mae" in m else ""
        probed = (f", {c['n_read_at_probe']} read at a faster probe's time (measured in a slow spell)"
                  if c.get("n_read_at_probe") else "")
        out(f"{t}: {c['n_rows']} op rows ({c['n_unsupported']} unsupported{probed}){cv}")
    out(f"saved {cm.model_id} to {out_dir}")
    return 0


COMMANDS.append(add_fit)


# ---- run / show (materialized plans: placer.materialize, placer.run) -------------------------------
def add_run(sub) -> None:
    p = sub.add_parser("run", help="run a materialized plan (PLAN_DIR), measure it, check its numerics",
                       description="Run a materialized plan on its runtimes, print its latency (or "
                                   "throughput with --pipeline) and, with --check, compare every output "
                                   "with ONNX Runtime running the whole model.")
    p.add_argument("plan_dir", help="a plan directory: the --out of `placer tune`, or one written by "
                                    "placer.materialize (plan.json, stage_config.json, ...)")
    p.add_argument("--inputs", default="seed:0", help="FILE.npz or seed:N (default seed:0)")
    p.add_argument("--check", action="store_true", help="exit 1 if an output differs from ONNX Runtime's")
    p.add_argument("--pipeline", action="store_true", help="use the pipeline executor (one worker per stage)")
    p.add_argument("--requests", type=int, default=None, help="requests (default 1; 100 with --pipeline)")
    p.add_argument("--executor", choices=("hybrid", "relax"), default="hybrid",
                   help="hybrid: partitions on their runtimes; relax: the Relax module on the TVM VM")
    p.add_argument("--compiled", action="store_true",
                   help="with --executor relax: load PLAN_DIR/module.so instead of compiling. It is native "
                        "code: only a module placer compiled on this machine for this user is loaded (an "
                        "HMAC under ~/.config/placer/trust.key, checked with its SHA-256 against "
                        "compiled.json)")
    p.add_argument("--trust", action="store_true",
                   help="with --compiled: load a module.so this machine did not make (it runs its native "
                        "code: only for a plan directory from someone you trust)")
    p.add_argument("--warmup", type=int, default=2, help="untimed requests first (default 2)")
    p.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance of the numerics check")
    p.add_argument("--atol", type=float, default=1e-4,
                   help="absolute tolerance, relative to max|reference| per output")
    p.add_argument("--json", default=None, type=nonempty_path, help="write the measurement and numerics report here")
    p.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    import json as _json

    from placer.run import NumericsMismatch, PartitionError, run_plan

    if args.json and not Path(args.json).resolve().parent.is_dir():  # before the run, not after it
        raise PlacerError(f"--json {args.json}: directory {str(Path(args.json).parent)!r} does not exist")
    try:
        res = run_plan(args.plan_dir, args.inputs, executor=args.executor, pipeline=args.pipeline,
                       requests=args.requests, warmup=args.warmup, check=args.check, rtol=args.rtol,
                       atol=args.atol, compiled=args.compiled, trust=args.trust)
    except (NumericsMismatch, PartitionError) as exc:
        print(f"placer run: error: {printable(exc, newlines=False)}", file=sys.stderr)
        return 1
    out(res.measurement.summary())
    if res.numerics is not None:
        out(res.numerics.summary())
    failed = [(i, e) for i, e in enumerate(res.errors) if e is not None]
    if args.json:
        blob = {"measurement": res.measurement.to_dict(),
                "numerics": res.numerics.to_dict() if res.numerics is not None else None,
                "errors": {str(i): str(e) for i, e in failed}}
        with open(args.json, "w") as f:
            _json.dump(blob, f, indent=1, sort_keys=True)
    if failed:
        i, e = failed[0]
        why = printable(e, newlines=False)
        print(f"placer run: error: {len(failed)} request(s) failed; request {i}: {why}", file=sys.stderr)
        return 1
    return 0


def add_show(sub) -> None:
    p = sub.add_parser("show", help="show a materialized plan: stages, partitions (--ir: the Relax module)",
                       description="Print a materialized plan: its stages and partitions per target, its "
                                   "stage config (--json) or its TVM Relax module (--ir).")
    p.add_argument("plan_dir", help="a plan directory (the --out of `placer tune`, ...)")
    p.add_argument("--ir", action="store_true", help="print the Relax IRModule")
    p.add_argument("--json", action="store_true", help="print the stage config JSON")
    p.set_defaults(func=cmd_show)


def cmd_show(args) -> int:
    from placer.materialize import show_plan_dir

    out(show_plan_dir(args.plan_dir, ir=args.ir, as_json=args.json))
    return 0


COMMANDS += [add_run, add_show]


# ---- profile / bench profile (placer.profile) ------------------------------------------------------
def add_profile(sub) -> None:
    p = sub.add_parser("profile",
                       help="profile a model's ops (and whole model, links) on targets into a store",
                       description="Time every unique op signature of a model on every target, plus the "
                                   "whole model and the hand-off cost between targets, in worker "
                                   "subprocesses, into a SQLite store. Resumable: what the store already "
                                   "holds is not measured again. An op a target fails on is marked "
                                   "unsupported there and the campaign goes on; the exit status is 1 "
                                   "when a target ran none of the model's ops (unavailable, or none ran "
                                   "and one failed there).")
    p.add_argument("model", help="ONNX file or zoo:NAME (zoo:squeezenet, zoo:bert-tiny, ...)")
    p.add_argument("--targets", default=None, help=TARGETS_HELP)
    p.add_argument("--db", default=None, type=db_path, help=DB_HELP)
    p.add_argument("--shape", action="append", default=None, help="bind an input shape, NAME=1x3x224x224 (repeatable)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per measurement (default 60)")
    p.add_argument("--segments", nargs="?", type=int_in(0, MAX_SEGMENT_LEN), const=3, default=0,
                   metavar="MAX_LEN",
                   help="also profile chain segments of 2..MAX_LEN ops as units (default 3)")
    p.add_argument("--no-links", action="store_true", help="skip the target-to-target hand-off measurements")
    p.add_argument("--no-whole-model", action="store_true", help="skip the whole-model run per target")
    p.add_argument("--retry-failed", action="store_true", help="re-measure rows that errored, timed out or crashed")
    p.add_argument("--retry-contended", action="store_true",
                   help="re-measure rows flagged as taken while other processes kept the machine busy")
    p.add_argument("--probes", type=int_in(0, 1000), default=None, metavar="N",
                   help="measure the anchor ops and up to N stored ops again, at the start and the end of "
                        "each target's work, so that the cost model puts rows of different sessions on one "
                        "scale and a stored row they contradict is measured again (default: 8 when rows of "
                        "this model were stored an hour or more ago, else none; 0: off)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--rpc-tracker", default=None, metavar="HOST:PORT", help="TVM RPC tracker for tvm-rpc targets")
    p.add_argument("--rpc-key", default=None, help="TVM RPC device key for tvm-rpc targets")
    p.set_defaults(func=cmd_profile)
    if "bench" not in sub.choices:  # `placer bench profile` (placer.profile.bench)
        b = sub.add_parser("bench", help="benchmarks: `placer bench profile` times a profiling campaign",
                           description="Benchmarks of placer itself. `placer bench profile` times a "
                                       "profiling campaign of a model into a fresh store, then reruns it "
                                       "on the same store (which must measure nothing).")
        b.add_argument("what", choices=["profile"], help="what to benchmark (profile: a profiling campaign)")
        b.add_argument("--model", default="zoo:resnet50", help="ONNX file or zoo:NAME (default zoo:resnet50)")
        b.add_argument("--targets", default=None, help=TARGETS_HELP)
        b.add_argument("--db", default=None, type=db_path,
                       help="store to use (default: a fresh temporary one)")
        # in range as `placer profile --timeout` (0 or -1 stored every op as timed out, nan was a traceback)
        b.add_argument("--timeout", type=float_in(1e-3, 86400.0), default=60.0,
                       help="seconds per measurement (default 60; at most a day)")
        b.add_argument("--json", default=None, type=nonempty_path, help="write the figures here")
        b.set_defaults(func=cmd_bench)


def cmd_profile(args) -> int:
    from placer.profile.report import profile_command

    if args.rpc_tracker or args.rpc_key:  # tvm-rpc targets (placer.devices.rpc): the entry point sets the
        from placer.devices.rpc import rpc_config  # environment of its process; its workers inherit it

        os.environ.update(rpc_config(args.rpc_tracker, args.rpc_key).to_env())
    return profile_command(args.model, targets=parse_targets(args.targets), db=args.db,
                           shapes=parse_shapes(args.shape), timeout_s=args.timeout, segments=args.segments,
                           links=not args.no_links, whole_model=not args.no_whole_model,
                           retry_failed=args.retry_failed, progress=not args.quiet,
                           retry_contended=args.retry_contended, probes=args.probes)


def cmd_bench(args) -> int:
    from placer.profile.bench import run_bench

    run_bench(args.model, targets=parse_targets(args.targets), db=args.db, timeout_s=args.timeout,
              json_path=args.json)
    return 0


COMMANDS.append(add_profile)


DESCRIPTION = """\
Place the ops of a deep-learning model across runtimes (ONNX Runtime, OpenVINO, TVM) and tune the
placement against measured latency: profile every op on every target, solve where each op runs
and where the pipeline cuts go, run the plan as a TVM Relax module and check it against the
reference."""

EPILOG = """\
examples:
  placer devices                                     which targets this machine has
  placer tune zoo:squeezenet --budget 2m --out placer-out
                                                     the whole loop on a bundled model
  placer run placer-out --check                      run the tuned plan, check its outputs
  placer plan model.onnx --mode pipeline --out plan.json
                                                     solve a placement without tuning

Models are ONNX files or zoo:NAME (zoo:squeezenet, zoo:resnet50, zoo:bert-tiny, ...).
`placer COMMAND --help` describes a command."""


def version() -> str:
    """The installed package's version (its metadata), else ``placer.__version__``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _dist_version

    try:
        return _dist_version("placer")
    except PackageNotFoundError:  # run from a source tree that is not installed
        from placer import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="placer", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"placer {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="commands")
    for add in COMMANDS:
        add(sub)
    return parser


def process_started() -> float:
    """The ``time.monotonic()`` at which this process started: its start time in ``/proc/self/stat``
    (clock ticks since boot) against ``CLOCK_BOOTTIME``, so that the interpreter's start and the
    imports count; where that is not available (not Linux) or not plausible, when this module was
    imported."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, after the command name
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return IMPORTED_AT
    # a clock tick (10 ms) of rounding either way; an age far beyond the import is not this run's start
    if not 0.0 <= age <= now - IMPORTED_AT + 60.0:
        return IMPORTED_AT
    return min(now - age, IMPORTED_AT)


def main(argv: list[str] | None = None) -> int:
    """Run the ``placer`` command line ``argv`` (default ``sys.argv[1:]``: the process's own command,
    whose time budgets then count from the process's start, imports included)."""
    from placer import interrupts
    from placer.process_exit import freeze_before_exit

    started = process_started() if argv is None else time.monotonic()
    args = build_parser().parse_args(argv)
    args.started = started
    # SIGTERM stops placer like Ctrl-C: the same clean stop (stores consistent, exit 130)
    interrupts.install()
    try:
        return int(args.func(args) or 0)
    except PlacerError as exc:  # one line, whatever names from a file it holds
        print(f"placer {args.command}: error: {printable(exc, newlines=False)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path given on the command line cannot be read or written (missing folder,
        # a file where a folder is expected, permissions, disk full): the user's to fix, not a bug
        where = f": {exc.filename}" if exc.filename else ""
        print(f"placer {args.command}: error: {printable(f'{exc.strerror or exc}{where}', newlines=False)}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        resume = " (its study is kept: run the same command again to resume)" if args.command == "tune" else ""
        print(f"placer {args.command}: interrupted{resume}", file=sys.stderr)
        return 130
    finally:
        if argv is None:  # this process's own command: it exits next
            freeze_before_exit()


if __name__ == "__main__":
    sys.exit(main())
