"""Compare placements across the zoo: every single target, greedy offload, HEFT, CP-SAT, tuned.

    python -m experiments.compare --models squeezenet,inception_v1 --out experiments/report

For each model: profile (cached in the store), build the problem, solve with every placement
strategy, materialize each plan, check its outputs against ONNX Runtime, and measure all of them
*interleaved* in one bench (median of rounds), so they see the same machine load. Then a
``placer tune`` run (small budget) and its chosen plan re-measured in the same bench. With
``--pipeline``, the throughput tuner too (one stage per core vs the best runtime on all cores).

The yardsticks are measured in the same bench (:mod:`placer.run.yardsticks`): each runtime loaded
with its defaults (all cores) and at its best latency settings, each in a process of its own, and
(extra columns) each runtime at 1 thread. ``x best default`` / ``x ORT default`` say how many
times faster a placement is than the fastest yardstick / ONNX Runtime at its defaults.

Writes ``report.md`` + ``report.html`` + PNG plots (Gantt chart per CP-SAT plan, predicted vs
measured, stage utilization) and ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from placer.errors import PlacerError, first_line
from placer.report.comparison import rank_rows, unique_rows

MODELS = {
    "squeezenet": "zoo:squeezenet",
    "inception_v1": "zoo:inception_v1",
    "resnet50": "zoo:resnet50",
    "shufflenet": "zoo:shufflenet",
    "bert-tiny": "zoo:bert-tiny",
    "bert-small": "zoo:bert-small",
    "gpt-tiny": "zoo:gpt-tiny",  # exported from torch (pip install torch)
    "gpt-small": "zoo:gpt-small",
    "resnet-mini": "zoo:resnet-mini",
    # transformers architectures with seeded random weights (pip install -e '.[hf]')
    "hf-bert": "zoo:hf-bert",
    "hf-gpt2": "zoo:hf-gpt2",
    "hf-vit": "zoo:hf-vit",
    "hf-convnext": "zoo:hf-convnext",
    "hf-llama": "zoo:hf-llama",
    "hf-distilbert": "zoo:hf-distilbert",
    "hf-mobilenetv2": "zoo:hf-mobilenetv2",
}


def geomean(xs):
    xs = [x for x in xs if x and math.isfinite(x) and x > 0]
    return float(np.exp(np.mean(np.log(xs)))) if xs else math.nan


def _scale_text(scale: float | None) -> str:
    """A cut scale for the report; ``-`` where the results did not record it (earlier versions)."""
    return "-" if scale is None else f"{scale:.2f}"


def _relative_dir(info):
    """The tuner's cost-model record with its directory relative to the working directory when it
    lies inside it (a committed report names no path of the machine that made it)."""
    if not isinstance(info, dict) or not isinstance(info.get("dir"), str):
        return info
    rel = os.path.relpath(info["dir"])
    return {**info, "dir": rel} if not rel.startswith("..") else info

def compare_model(ref: str, targets, db, out: Path, *, tune_budget_s: float, solver_time_limit: float,
                  pipeline: bool, say, work: Path, label: str | None = None) -> dict:
    from placer import api
    from placer.costing import segment_ratio_stats
    from placer.materialize import materialize
    from placer.materialize.in_context import priced_as_run
    from placer.report import gantt
    from placer.run.bench import PlanBench
    from placer.run.numerics import check_against_reference, load_inputs
    from placer.run.spells import spell_watches
    from placer.run.yardsticks import YardstickSet, latency_kinds
    from placer.solve import solve
    from placer.tune import tune
    from placer.tune.records import assignment_key
    from placer.tune.reprice import priced_assignment, priced_at
    from placer.tune.tuner import SKIP_BASELINE_FACTOR, _partition_feedback

    t0 = time.monotonic()
    ctx = api.prepare(ref, targets=targets, db=db)
    prof_s = time.monotonic() - t0
    graph, problem = ctx.graph, ctx.problem
    stored_whole = dict(ctx.table.whole_model_ms)  # the store's, before this bench re-prices them
    name = label or graph.name  # the report's label (the --models name, not the ONNX graph's own)
    names = [t.name for t in ctx.targets]
    strategies = [f"single:{n}" for n in names] + ["greedy", "heft", "cpsat"]
    rows = []
    feeds = load_inputs("seed:0", graph, 4)
    tol = ctx.tolerance  # f32, or bf16 where a target computes in bf16
    yardsticks = YardstickSet(graph.model, feeds, latency_kinds(), say=say)
    with PlanBench(feeds, rounds=8, per_round=5) as bench, yardsticks:
        for kind, y in yardsticks.ready.items():  # what a user would run instead
            rep = yardsticks.check(kind, graph.model, feeds, **tol)
            bench.add_yardstick(y)
            rows.append({"model": name, "placement": y.key, "kind": "yardstick", "key": y.key, "partitions": 1,
                         "numerics_ok": bool(rep.passed) if rep is not None else None, "info": y.info})
        for kind in sorted({t.kind for t in ctx.targets if not t.kind.startswith("tvm")}):
            one = f"{kind}:t1"  # each runtime at 1 thread: extra columns, not the yardstick
            try:
                mat1 = materialize(graph, {op.id: one for op in graph.ops})
                bench.add(f"1-thread:{one}", mat1)
                rep = check_against_reference(graph.model, feeds, bench.outputs(f"1-thread:{one}"), **tol)
                rows.append({"model": name, "placement": f"1-thread:{kind}", "kind": "1-thread",
                             "key": f"1-thread:{one}", "partitions": 1, "numerics_ok": bool(rep.passed)})
            except Exception as exc:  # noqa: BLE001 - a runtime that cannot run the model is a row, not a crash
                rows.append({"model": name, "placement": f"1-thread:{kind}", "kind": "1-thread",
                             "error": f"{type(exc).__name__}: {first_line(exc, 200)}"})
        keyed = {}
        priced = {}  # key -> (plan, the problem it was priced on, its materialization): per-partition figures
        slowed: list[str] = []  # targets re-priced from rounds slowed in most turns
        # requests each candidate had timed when the problem was re-priced from them: a prediction is
        # judged on the rounds after it was made (the re-pricing's own rounds would grade it on itself)
        marks: dict[str, int] = {}
        for strat in strategies:
            if strat == "greedy":  # re-price from the single-target runs measured in this bench
                # all of the bench's rounds: 2-thread runs are bimodal, and three rounds once priced
                # hf-mobilenetv2's OpenVINO t2 above OpenVINO t1 (the untuned plan measured 0.58x);
                # rounds in which a runtime on all cores ran at its 1-thread pace read as spells
                # (placer.run.spells.spell_watches) and count as slowed from here on
                singles = {r["placement"].split(":", 1)[1]: r["key"] for r in rows if r.get("key") in keyed
                           and "note" not in r and r["placement"].startswith("single:")}
                bench.watches = spell_watches(ctx.targets, singles, stored_whole)
                # rounds for quiet samples as the final measurement takes them: session 22's hf-llama,
                # re-priced from rounds mostly in a spell (OpenVINO t2 at its 1-thread pace), had its
                # one-partition plans predicted at 6.8-7.3 ms, measured 4.0-4.5
                measured = bench.measure(list(keyed), until_quiet=8, deadline=time.monotonic() + 60.0)
                # from every single target, slowed in most rounds or not, as the tuner re-prices
                # (placer.tune.tuner, _session_whole_ms: the rounds just measured priced the later ones
                # better than the store's quietest windows on a host slowed most of the time)
                settled = set(bench.settled(list(singles.values())))
                whole = {name: measured[key].median_ms for name, key in singles.items()}
                slowed = sorted(n for n, key in singles.items() if key not in settled)
                if slowed:
                    say(f"{name}: re-priced from rounds slowed in most turns for {', '.join(slowed)}")
                ctx = api.recalibrate(ctx, whole)
                problem = ctx.problem
                marks = bench.n_samples()
                for r in rows:  # what each single target was priced at: against its later rounds, the floor
                    if r.get("key") in singles.values():
                        r["first_rounds_ms"] = measured[r["key"]].median_ms
            s0 = time.monotonic()
            plan = solve(problem, "latency", strat, time_limit=solver_time_limit)
            solve_s = time.monotonic() - s0
            plan = priced_as_run(problem, graph, plan)  # a cut plan: each partition by the target before it
            row = {"model": name, "placement": strat, "predicted_ms": plan.makespan_ms, "solve_s": solve_s,
                   "solver_predicted_ms": plan.provenance.get("solver_makespan_ms", plan.makespan_ms),
                   "assignment": dict(plan.assignment),  # to price it again offline
                   "status": plan.stats.status, "gap": plan.stats.gap}
            if strat == "greedy":
                row["repriced_slowed"] = slowed
            if strat.startswith("single:") and len(set(plan.assignment.values())) > 1:
                row["note"] = "falls back to another target for unsupported ops"
            key = assignment_key(plan)  # identical placements share one compiled candidate and one measurement
            row["key"] = key
            if strat.startswith("single:"):
                fastest = min(solve(problem, "latency", f"single:{n}").makespan_ms for n in names)
                if plan.makespan_ms > SKIP_BASELINE_FACTOR * fastest:
                    row["error"] = f"not measured: predicted {plan.makespan_ms / fastest:.0f}x slower"
                    rows.append(row)
                    continue
            try:
                mat = materialize(graph, plan)
                row["partitions"] = len(mat.partitions)
                bench.add(key, mat)
                rep = check_against_reference(graph.model, feeds, bench.outputs(key), **tol)
                row["numerics_ok"] = bool(rep.passed)
                keyed[key] = plan
                priced[key] = (plan, problem, mat)
            except Exception as exc:  # a plan that cannot run is a row with its error, not a crash
                row["error"] = f"{type(exc).__name__}: {first_line(exc, 200)}"
            rows.append(row)
            if strat == "cpsat":
                gantt(plan, out / f"gantt_{name}.png", f"{name}: CP-SAT plan (predicted)")
                # what `placer plan` returns (no tune): the CP-SAT plan, unless its predicted gain over
                # the best single target is within the pricing's error, or it measures slower than that
                # target (api.honest; the command measures a cut plan by default)
                try:
                    kept, note = api.honest(ctx, plan, measure=True)
                except PlacerError as exc:  # a plan whose outputs differ is a row with its error, not a crash
                    kept, note = plan, f"not measured: {first_line(exc, 120)}"
                prow = {"model": name, "placement": "plan", "predicted_ms": kept.makespan_ms,
                        "solver_predicted_ms": kept.provenance.get("solver_makespan_ms", kept.makespan_ms),
                        "assignment": dict(kept.assignment),
                        "key": assignment_key(kept),
                        "status": note[:80] if note else (
                            "cut plan kept" if len(set(kept.assignment.values())) > 1 else "one target")}
                if prow["key"] not in bench.candidates:
                    try:
                        pmat = materialize(graph, kept)
                        bench.add(prow["key"], pmat)
                        priced[prow["key"]] = (kept, problem, pmat)
                    except Exception as exc:  # noqa: BLE001 - a plan that cannot run is a row
                        prow["error"] = f"{type(exc).__name__}: {first_line(exc, 200)}"
                prow["partitions"] = len(bench.candidates[prow["key"]].materialized.partitions) \
                    if prow["key"] in bench.candidates else None
                prow["numerics_ok"] = next((r.get("numerics_ok") for r in rows if r.get("key") == prow["key"]), None)
                rows.append(prow)
        # the tuned plan (tune runs a session of its own), re-measured here with the others
        tuned = tune(graph, targets=targets, db=db, budget_s=tune_budget_s, out_dir=work / f"tune_{name}",
                     solver_time_limit=solver_time_limit, progress=say)
        # priced as every other plan of this table: on this comparison's problem (re-priced from the single
        # targets' first rounds), so the table reads one set of prices (issue 15, deliver 4); the price
        # tune gave it, on its own session's rounds minutes earlier, is kept beside it. Over four f32
        # runs that price missed by up to 39% (a spell in tune's rounds), the CP-SAT and `placer plan`
        # rows priced here by 15.8% p90
        predicted = solver_predicted = tuned.best.predicted_ms
        priced_here = True
        try:
            tuned_price = priced_assignment(problem, graph, tuned.best.plan.assignment)
            predicted = tuned_price.makespan_ms
            solver_predicted = tuned_price.provenance.get("solver_makespan_ms", predicted)
        except (KeyError, PlacerError):  # an op or target this problem lacks, or a pair it cannot run: tune's price
            priced_here = False
        trow = {"model": name, "placement": "tuned", "predicted_ms": predicted,
                "solver_predicted_ms": solver_predicted, "priced_here": priced_here,
                "tune_predicted_ms": tuned.best.predicted_ms,
                "assignment": dict(tuned.best.plan.assignment),
                "solve_s": sum(r.solve_s for r in tuned.records), "status": "measured guard" if tuned.fell_back else "",
                "partitions": tuned.best.n_partitions, "numerics_ok": tuned.best.numerics_ok,
                "tuned_choice": tuned.best.label}
        trow["key"] = assignment_key(tuned.best.plan)
        if trow["key"] not in bench.candidates:
            tmat = materialize(graph, tuned.best.plan)
            bench.add(trow["key"], tmat)
            priced[trow["key"]] = (tuned.best.plan, problem, tmat)
        trow["cost_model"] = _relative_dir(tuned.extra.get("cost_model"))
        rows.append(trow)
        # the tuned plan deployed as a user runs it (`placer run PLAN_DIR`, a process of its own, like the
        # yardsticks): shows whether sharing this process with the other candidates costs it anything
        deployed = yardsticks.add_plan(f"deployed:{trow['key']}", bench.candidates[trow["key"]].materialized)
        drow = {"model": name, "placement": "tuned, own process", "kind": "deployed", "key": deployed.key,
                "partitions": trow["partitions"], "numerics_ok": trow["numerics_ok"], "info": deployed.info}
        if deployed.ok:
            bench.add_yardstick(deployed)
        else:
            drow["error"] = deployed.error
        rows.append(drow)
        # up to 8 more rounds, each after waiting for quiet cores, while a row's turns mostly read slowed
        final = bench.n_samples()  # the single targets (and the plans sharing their keys) hold the
        # re-pricing's rounds too: every row's figures are taken over the final rounds alone, one set
        # of rounds for the whole table (the x columns pair rows over the rounds both ran in)
        everything = bench.measure(list(bench.candidates), until_quiet=8, deadline=time.monotonic() + 60.0)
        stats = {k: (s if (s := bench.stats(k, since=final.get(k, 0))).n else everything[k]) for k in everything}
        quiet_rounds = bench.extra_rounds
        paired = bench.paired_ms(list(bench.candidates))  # the figures to compare by, round by round
        paired_ratios = {(a, b): bench.paired_ratio(a, b) for a in bench.candidates for b in bench.candidates}
        for row in rows:
            s = stats.get(row.get("key"))
            if s is not None:
                row.update(measured_ms=s.median_ms, p10_ms=s.p10_ms, p90_ms=s.p90_ms, n=s.n,
                           n_slowed=s.n_slowed, slowed_share=s.slowed_share,
                           paired_ms=paired.get(row["key"], s.median_ms))
                later = bench.stats(row["key"], since=marks.get(row["key"], 0))
                row["measured_after_ms"] = later.median_ms if later.n else None
            if row.get("key") in priced:  # each partition: predicted (sum of its ops' costs) vs measured
                plan_, problem_, mat_ = priced[row["key"]]
                row["partition_detail"] = [
                    {k: v for k, v in d.items() if k != "ops"} | {"n_ops": len(d["ops"])}
                    for d in _partition_feedback(problem_, plan_, mat_, bench.partition_medians(row["key"]))]
    singles = [r for r in rows if r["placement"].startswith("single:") and "measured_ms" in r and "note" not in r]
    # every other plan priced again from the single targets measured in these same rounds (each
    # target's whole-model time: its paired figure): the host's pace over these rounds, which the plans
    # and the single targets share (1.3-2x between spells here), is then out of the comparison, and
    # what is left is how the plans' cuts and mixtures are priced
    anchors = {r["placement"].split(":", 1)[1]: paired[r["key"]] for r in singles if r["key"] in paired}
    anchor_keys = {r["key"] for r in singles}
    plans = [row for row in rows if row.get("assignment") and row.get("key") in paired
             and row["key"] not in anchor_keys]
    if anchors and plans:
        prices = priced_at(ctx, anchors, {row["key"]: row["assignment"] for row in plans})
        for row in plans:
            if prices[row["key"]] is not None:
                row["anchored_predicted_ms"] = prices[row["key"]]
            else:  # an assignment that does not cover this problem's ops
                row["anchored_error"] = "not priced: the assignment does not cover the model's ops"
    best_single, best_default, best_default_ok = rank_rows(rows, singles, paired_ratios)
    result = {"model": name, "ref": ref, "n_ops": len(graph.ops), "profile_s": prof_s, "rows": rows,
              "quiet_rounds": quiet_rounds,  # rounds the bench added for quiet samples
              "spell_rounds": bench.spell_rounds,  # rounds a runtime's two targets read as a spell
              "best_single": best_single["placement"] if best_single else None,
              "best_default": best_default["placement"] if best_default else None,
              "best_default_ok": best_default_ok["placement"] if best_default_ok else None,
              "precision": ctx.precision,
              "fusion_scale": problem.provenance.get("fusion_scale"),
              "segment_ratios": segment_ratio_stats(ctx.table),
              "whole_model_ms": problem.provenance.get("whole_model_ms"),
              "entry_ms": problem.provenance.get("entry_ms"), "cut_scale": problem.provenance.get("cut_scale")}
    if pipeline:
        tp = tune(graph, targets=targets, db=db, budget_s=tune_budget_s, objective="throughput",
                  out_dir=work / f"tune_tp_{name}", solver_time_limit=solver_time_limit)
        tp_default, tp_ok, ov_tp = tp.best_default, tp.best_default_passing, tp.yardstick("ov-throughput")
        result["pipeline"] = {
            "best_default": tp_default.label if tp_default else None,
            "best_default_rps": tp_default.throughput_rps if tp_default else None,
            "best_default_ok": tp_ok.label if tp_ok else None,
            "best_default_ok_rps": tp_ok.throughput_rps if tp_ok else None,
            "yardstick_numerics": {r.label: r.numerics_ok for r in tp.yardsticks},
            "ov_throughput_rps": ov_tp.throughput_rps if ov_tp else None,
            "best": tp.best.label, "throughput_rps": tp.best.throughput_rps,
            "best_single": tp.best_single.label, "best_single_rps": tp.best_single.throughput_rps,
            "core_limit_rps": tp.extra.get("core_limit_rps"),
            "fraction_of_limit": (tp.best.throughput_rps or 0) / tp.extra.get("core_limit_rps", math.nan),
            "stages": list(tp.best.plan.stage_targets) if tp.best.plan is not None else None,
            "candidates": [{"label": r.label, "rps": r.throughput_rps, "error": r.error} for r in tp.records],
        }
    say(f"{name}: done in {time.monotonic() - t0:.0f}s")
    return result


def prediction_accuracy(results: list[dict], key: str = "predicted_ms",
                        measured: str = "measured_after_ms") -> dict[str, dict]:
    """n, median and p90 of |predicted / measured - 1| over the placement rows of ``results``: all of
    them, single-partition ones, and plans cut into several partitions. ``key`` picks the prediction:
    ``predicted_ms`` (each partition priced by the target before it), ``solver_predicted_ms`` (the
    solver's per-target prices) or ``anchored_predicted_ms`` (priced as ``predicted_ms`` from the single
    targets measured in the same rounds, to compare with ``measured`` = ``paired_ms``). ``measured``
    defaults to the median of the rounds after the re-pricing (``measured_after_ms``), so that no plan
    is judged on the rounds it was priced from; results of older runs lack it and read ``measured_ms``."""
    groups: dict[str, list[float]] = {"all": [], "one partition": [], "cut plans": []}
    for res in results:
        for r in res["rows"]:
            got = _judged_ms(r) if measured == "measured_after_ms" else r.get(measured)
            if r.get("kind") in ("yardstick", "1-thread", "deployed") or not got or not r.get(key):
                continue
            err = abs(r[key] / got - 1)
            groups["all"].append(err)
            groups["one partition" if (r.get("partitions") or 1) <= 1 else "cut plans"].append(err)
    return {k: {"n": len(v), "median": float(np.median(v)) if v else None,
                "p90": float(np.percentile(v, 90)) if v else None} for k, v in groups.items()}


def _judged_ms(row: dict) -> float | None:
    """What a row's prediction is judged against: the rounds after the re-pricing, or all of them in
    the results of runs before session 45 (they lack ``measured_after_ms``)."""
    return row.get("measured_after_ms") or row.get("measured_ms")


def _pred(d: dict) -> float:
    """A partition's predicted time: its ops' costs plus the target's call overhead."""
    return float(d["predicted_ms"]) + float(d.get("overhead_ms", 0.0))


def split_ceiling(res: dict, cores: int) -> float | None:
    """The best 1-thread row passing numerics (a 1-thread runtime or single target), split perfectly over
    ``cores`` with no hand-off cost, x the best default passing numerics: an upper bound on what running
    independent parts of the model on 1-thread runtimes pinned to each core (inter-op parallelism) could
    gain with these kernels. Fusion across a cut and the cut itself only cost more."""
    one = [r for r in res["rows"] if r.get("numerics_ok") and r.get("speedup_vs_best_default_ok")
           and (r.get("kind") == "1-thread" or re.fullmatch(r"single:.*:t1", r["placement"]))]
    return cores * max(r["speedup_vs_best_default_ok"] for r in one) if one else None


def write_report(results: list[dict], out: Path, meta: dict) -> Path:
    from placer.report import Document, predicted_vs_measured

    doc = Document("placer: placements compared on the zoo")
    n_all = sum(r.get("n") or 0 for res in results for r in unique_rows(res["rows"]))
    n_slow = sum(r.get("n_slowed") or 0 for res in results for r in unique_rows(res["rows"]))
    # samples taken in slowed turns, left out or not (a row with fewer than half quiet keeps them all)
    n_in_slowed = sum(round((r.get("slowed_share") or 0) * ((r.get("n") or 0) + (r.get("n_slowed") or 0)))
                      for res in results for r in unique_rows(res["rows"]))
    doc.p(f"Machine: {meta['cpu']}, {meta['cores']} cores; targets {', '.join(meta['targets'])}; generated "
          f"{meta['date']} by `{meta['command']}`. Every row of a model was measured in one interleaved bench "
          "(median over rounds of requests, p10/p90 shown); numerics checked against ONNX Runtime. Requests of "
          "turns that began or ended with a core the host had slowed (a reference loop 1.3x its best) are left "
          f"out while half of a row's requests remain: {n_slow} of {n_all + n_slow} here ({n_in_slowed} "
          "taken in slowed turns in all, the rest kept where fewer than half were quiet), the turns of "
          f"{sum(res.get('spell_rounds') or 0 for res in results)} rounds among them in which a runtime on "
          "all cores ran over 1.3x slower against its 1-thread time than the store has it (a spell the probe "
          "misses: the host running the cores one after the other). Every `x ...` "
          "figure is the two rows' ratio taken round by round: the median, over the rounds both ran in, of "
          "the ratio of their turns' medians (2-thread runtimes here have spells of seconds 1.5x slower "
          "alike; a median over all rounds lands on either side of that by which rounds a row drew). "
          "`paired ms`: the fastest row's median times each row's ratio to it.")
    summary = []
    for res in results:
        tuned = next((r for r in res["rows"] if r["placement"] == "tuned"), {})
        cps = next((r for r in res["rows"] if r["placement"] == "cpsat"), {})
        dep = next((r for r in res["rows"] if r.get("kind") == "deployed"), {})
        summary.append([res["model"], res["n_ops"], res.get("best_default"), tuned.get("tuned_choice"),
                        tuned.get("speedup_vs_best_default"), tuned.get("speedup_vs_ort_default"),
                        tuned.get("speedup_vs_best_single"), cps.get("speedup_vs_best_default"),
                        tuned.get("speedup_vs_best_1thread"), res.get("best_default_ok"),
                        tuned.get("speedup_vs_best_default_ok"), dep.get("speedup_vs_best_default_ok"),
                        split_ceiling(res, int(meta["cores"]))])
    doc.h2("Summary (latency mode)")
    doc.p("`x best default`: how many times faster than the fastest yardstick (each runtime loaded with its "
          "defaults or at its best latency settings, all cores, each in its own process, measured in the same "
          "rounds); `x ORT default`: than `onnxruntime.InferenceSession(path)`; `x best 1-thread`: than the best "
          "runtime at 1 thread (the old yardstick, an extra column). `best default passing numerics`: the "
          "fastest yardstick whose outputs pass the check at this run's precision (OpenVINO's default "
          "computes "
          "in bf16 on a CPU that has bf16, outside the f32 tolerance). `tuned in its own process`: the tuned "
          "plan run by `placer run`'s executor in a process of its own, as the yardsticks run, in the same "
          "rounds. `perfect split ceiling`: the best 1-thread runtime or target passing numerics, its time "
          "divided by the cores with no hand-off cost, x the best default passing numerics: what inter-op "
          "parallelism on 1-thread runtimes pinned to each core could at most gain with these kernels.")
    doc.table(["model", "ops", "best default", "tuned choice", "tuned x best default", "tuned x ORT default",
               "tuned x best single target", "CP-SAT (untuned) x best default", "tuned x best 1-thread",
               "best default passing numerics", "tuned x it", "tuned in its own process x it",
               "perfect split ceiling x it"], summary)
    doc.p(f"Geomean of the tuned plan: {geomean([s[4] for s in summary]):.3f}x the best default, "
          f"{geomean([s[10] for s in summary]):.3f}x the best default passing numerics "
          f"({geomean([s[11] for s in summary]):.3f}x deployed in a process of its own), "
          f"{geomean([s[5] for s in summary]):.3f}x ONNX Runtime's default, "
          f"{geomean([s[8] for s in summary]):.3f}x the best 1-thread runtime; a perfect split of the best "
          f"1-thread runtime over the cores would reach {geomean([s[12] for s in summary]):.3f}x the best "
          "default passing numerics.")
    pipe = [r for r in results if r.get("pipeline")]
    if pipe:
        doc.h2("Summary (pipeline mode, throughput)")
        doc.p("One stage per core (1-thread runtimes pinned), measured on the pipeline executor, against every "
              "runtime alone at 1 thread and with all cores as intra-op threads. Core limit = cores x the best "
              "1-thread throughput.")
        doc.p("Yardsticks for throughput: OpenVINO's THROUGHPUT hint driven by an AsyncInferQueue (and, on a "
              "CPU with bf16, where that hint computes in bf16, the same hint pinned to f32), and one "
              "1-thread ONNX Runtime session per core in as many threads, measured in the final rounds; "
              "their outputs are checked like the candidates'. `best default passing numerics`: the "
              "fastest of them whose outputs pass the check at this run's precision.")
        doc.table(["model", "chosen", "stages", "req/s", "best default", "its req/s", "x best default",
                   "x OV THROUGHPUT", "best default passing numerics", "x it", "best single runtime",
                   "x best single", "core limit req/s", "% of limit"],
                  [[r["model"], r["pipeline"]["best"], " + ".join(r["pipeline"]["stages"] or ["-"]),
                    r["pipeline"]["throughput_rps"], r["pipeline"].get("best_default"),
                    r["pipeline"].get("best_default_rps"),
                    (r["pipeline"]["throughput_rps"] or 0) / (r["pipeline"].get("best_default_rps") or float("nan")),
                    (r["pipeline"]["throughput_rps"] or 0) / (r["pipeline"].get("ov_throughput_rps") or float("nan")),
                    r["pipeline"].get("best_default_ok"),
                    (r["pipeline"]["throughput_rps"] or 0) / (r["pipeline"].get("best_default_ok_rps") or float("nan")),
                    r["pipeline"]["best_single"],
                    (r["pipeline"]["throughput_rps"] or 0) / (r["pipeline"]["best_single_rps"] or float("nan")),
                    r["pipeline"]["core_limit_rps"], 100 * r["pipeline"]["fraction_of_limit"]] for r in pipe])
    seg_rows = [[res["model"], t, st["n"], st["median"], st["p10"], st["p90"]]
                for res in results for t, st in sorted((res.get("segment_ratios") or {}).items())]
    if seg_rows:
        doc.h2("Fusion segments: measured whole vs the sum of their ops")
        doc.p("Per model and target, over the runtime fusion groups (conv/matmul + bias/BN/activation chains) "
              "profiled as one partition: segment time / sum of its ops' isolated net times. Below 1 the runtime "
              "fused them, so a cut inside a segment costs more than the sum of its ops says.")
        doc.table(["model", "target", "segments", "median ratio", "p10", "p90"], seg_rows)
    pts = []
    part_pts = []
    for res in results:
        doc.h2(f"{res['model']} ({res['n_ops']} ops)")
        rows = []
        for r in res["rows"]:
            rows.append([r["placement"], r.get("partitions"), r.get("predicted_ms"), r.get("measured_ms"),
                         r.get("measured_after_ms"),
                         r.get("p10_ms"), r.get("p90_ms"), r.get("paired_ms"), r.get("anchored_predicted_ms"),
                         r.get("speedup_vs_best_default"),
                         r.get("speedup_vs_ort_default"), r.get("speedup_vs_best_single"),
                         r.get("speedup_vs_best_1thread"), r.get("solve_s"), r.get("status"),
                         "yes" if r.get("numerics_ok") else r.get("error", "no")])
            if r.get("measured_ms") and r.get("predicted_ms"):
                pts.append({"label": f"{res['model']}:{r['placement']}", "predicted_ms": r["predicted_ms"],
                            "measured_ms": _judged_ms(r)})
        doc.table(["placement", "partitions", "predicted ms", "measured ms", "after the re-pricing", "p10",
                   "p90", "paired ms",
                   "predicted from the single targets' paired ms", "x best default",
                   "x ORT default", "x best single", "x best 1-thread", "solve s", "status", "numerics"], rows)
        if res.get("fusion_scale"):
            doc.p("Whole-model calibration (measured whole model / sum of isolated op costs): " + ", ".join(
                f"{t} {s:.2f}" for t, s in res["fusion_scale"].items()))
        doc.image(f"gantt_{res['model']}.png", f"{res['model']} CP-SAT plan")
        parts = [(r["placement"], d) for r in res["rows"] for d in r.get("partition_detail") or []
                 if len(r.get("partition_detail") or []) > 1 or r["placement"] in ("cpsat", "tuned")]
        if parts:
            doc.p("Partitions of the multi-partition plans (and of the CP-SAT and tuned plans), each measured inside "
                  "its plan's runs: predicted = the target's call overhead + the sum of its ops' costs in the "
                  "comparison's problem.")
            doc.table(["placement", "partition", "target", "ops", "inputs", "predicted ms", "measured ms",
                       "measured / predicted"],
                      [[pl, d["partition"], d["target"], d["n_ops"], d["n_inputs"], _pred(d), d["measured_ms"],
                        d["measured_ms"] / _pred(d) if _pred(d) else None] for pl, d in parts])
            for pl, d in parts:
                part_pts.append({"label": f"{res['model']}:{pl}:{d['partition']}", "predicted_ms": _pred(d),
                                 "measured_ms": d["measured_ms"]})
        if res.get("pipeline"):
            pp = res["pipeline"]
            doc.p(f"Pipeline mode: best {pp['best']} {pp['throughput_rps']:.1f} req/s "
                  f"(stages {pp['stages']}); best runtime on all cores {pp['best_single']} "
                  f"{pp['best_single_rps']:.1f} req/s; core limit (cores x best 1-thread) "
                  f"{pp['core_limit_rps']:.1f} req/s: {100 * pp['fraction_of_limit']:.0f}% of it.")
    doc.h2("Predictions: every candidate plan, predicted vs measured")
    doc.p("|predicted / measured - 1| over every placement row that has both (single targets, greedy, HEFT, "
          "CP-SAT, `placer plan`, tuned; yardsticks and 1-thread rows are not placer's predictions), "
          "measured as the median of the rounds after the problem was re-priced from the single targets (a "
          "plan is not judged on the rounds it was priced from). Single targets are priced from the profile "
          "store, every later plan, the tuned one too, from the single targets' first rounds (one set of "
          "prices for the table; the price tune gave its plan in its own session follows below, and stands "
          "in a tuned row this problem cannot price: `priced_here` false). "
          "Issue 15's goal: median <= 10%, p90 <= 20%; `placer plan` >= 0.95x the best single target.")
    acc = prediction_accuracy(results)
    solver_acc = prediction_accuracy(results, "solver_predicted_ms")
    doc.table(["plans", "n", "median |err|", "p90 |err|", "with the solver's per-target prices: median", "p90"],
              [[k, v["n"], v["median"], v["p90"], solver_acc[k]["median"], solver_acc[k]["p90"]]
               for k, v in acc.items()])
    floor = prediction_accuracy(results, "first_rounds_ms")
    if floor["all"]["n"]:
        doc.p(f"The floor on this host: each single target's first rounds (the figure the later plans were "
              f"priced from) against its rounds after them, the same plan measured twice in one process: "
              f"median {100 * floor['all']['median']:.1f}%, p90 {100 * floor['all']['p90']:.1f}% over "
              f"{floor['all']['n']} single targets.")
    tuned_rows = [{"rows": [r for r in res["rows"] if r["placement"] == "tuned"]} for res in results]
    own = prediction_accuracy(tuned_rows, "tune_predicted_ms")
    if own["all"]["n"]:
        here = prediction_accuracy(tuned_rows)
        doc.p(f"The tuned plans alone ({own['all']['n']}): priced here, median {100 * here['all']['median']:.1f}%, "
              f"p90 {100 * here['all']['p90']:.1f}%; at the price tune gave them, from its own session's rounds "
              f"minutes earlier, median {100 * own['all']['median']:.1f}%, p90 {100 * own['all']['p90']:.1f}%.")
    anchored = prediction_accuracy(results, "anchored_predicted_ms", "paired_ms")
    doc.p("The same plans (single targets aside: they are the anchors) priced again from the single targets "
          "measured in the same rounds, each target's whole-model time its paired figure, against their own "
          "paired figures: the host's pace over the rounds, shared by plans and single targets, is out of "
          "it; what is left is how cuts, hand-offs and mixtures of targets are priced.")
    doc.table(["plans", "n", "median |err|", "p90 |err|"],
              [[k, v["n"], v["median"], v["p90"]] for k, v in anchored.items()])
    doc.table(["model", "`placer plan` x best single", "plan partitions",
               "entry ms per input / cut scale, per target (learned from partitions timed as they ran)"],
              [[res["model"], next((r.get("speedup_vs_best_single") for r in res["rows"]
                                    if r["placement"] == "plan"), None),
                next((r.get("partitions") for r in res["rows"] if r["placement"] == "plan"), None),
                ", ".join(f"{t} {v:.3f} / {_scale_text((res.get('cut_scale') or {}).get(t))}"
                          for t, v in (res.get("entry_ms") or {}).items())] for res in results])
    predicted_vs_measured(pts, out / "predicted_vs_measured.png", "every placement: predicted vs measured")
    doc.h2("Predicted vs measured")
    doc.image("predicted_vs_measured.png", "predicted vs measured")
    if part_pts:
        predicted_vs_measured(part_pts, out / "partitions_predicted_vs_measured.png",
                              "partitions of the plans: predicted vs measured")
        doc.image("partitions_predicted_vs_measured.png", "partitions: predicted vs measured")
    return doc.write(out)


def main(argv=None) -> int:
    from placer.devices.base import cpu_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="squeezenet,inception_v1,resnet50,bert-tiny")
    ap.add_argument("--targets", default=None,
                    help="comma-separated targets (default: placer's defaults, each runtime on all cores)")
    ap.add_argument("--db", default="experiments/profiles.db")
    ap.add_argument("--out", default="experiments/report")
    ap.add_argument("--tune-budget", type=float, default=60.0)
    ap.add_argument("--solver-time-limit", type=float, default=10.0)
    ap.add_argument("--pipeline", action="store_true", help="also tune the throughput objective")
    ap.add_argument("--pipeline-models", default=None,
                    help="comma-separated subset of --models that also tune the throughput objective")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                    help="default targets' precision (bf16: OpenVINO in bf16, on a CPU that has it)")
    ap.add_argument("--work", default="runs/compare", help="tune output directories (models, partitions, studies)")
    ap.add_argument("--report-only", action="store_true", help="re-render OUT/report.* from OUT/results.json")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        saved = json.loads((out / "results.json").read_text())
        path = write_report(saved["results"], out, saved["meta"])
        print(f"report: {path}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # an application's choice: placer leaves it alone
    from placer.devices.registry import default_target_names

    targets = ([t for t in args.targets.split(",") if t] if args.targets
               else default_target_names(args.precision))
    pipe_models = set(args.pipeline_models.split(",")) if args.pipeline_models else None
    results = []
    meta = {"cpu": cpu_model(), "cores": len(os.sched_getaffinity(0)), "targets": targets,
            "precision": args.precision,
            "date": time.strftime("%Y-%m-%d"),
            "command": "python -m experiments.compare " + " ".join(argv if argv is not None else sys.argv[1:])}
    for name in args.models.split(","):
        ref = MODELS.get(name, name)
        results.append(compare_model(ref, targets, args.db, out, tune_budget_s=args.tune_budget,
                                     solver_time_limit=args.solver_time_limit,
                                     pipeline=args.pipeline or (pipe_models is not None
                                                                and name in pipe_models),
                                     say=lambda m: print(m, flush=True), work=Path(args.work), label=name if name in MODELS else None))
        (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    path = write_report(results, out, meta)
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
