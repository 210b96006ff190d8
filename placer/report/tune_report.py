"""The report ``placer tune`` writes: candidates table, chosen plan, plots."""

from __future__ import annotations

import math
from pathlib import Path

from placer.report.plots import gantt, predicted_vs_measured, stage_utilization
from placer.report.render import Document


def write_tune_report(result, ctx) -> Path:
    """Write report.md / report.html (and their plots) of a tune result into its output folder, one
    section after the other; returns the Markdown file's path."""
    out = Path(result.out_dir)
    doc = Document(f"placer tune: {ctx.graph.name}")
    _verdict(doc, result, ctx)
    _candidates(doc, result)
    _yardsticks(doc, result)
    _final_comparison(doc, result)
    _calibration(doc, result)
    _segments(doc, result)
    _cost_model(doc, result)
    _chosen(doc, result, out)
    _predicted_vs_measured(doc, result, out)
    _files(doc, result)
    return doc.write(out)


def _verdict(doc: Document, result, ctx) -> None:
    graph, best = ctx.graph, result.best
    doc.h2("Verdict")
    for line in result.verdict():
        doc.p(line)
    if result.objective == "throughput":
        limit = result.extra.get('core_limit_rps', math.nan)
        doc.p(f"{len(ctx.targets)}-runtime, {limit:.1f} req/s core limit "
              f"({best.throughput_rps / limit if limit else math.nan:.0%} of it).")
    doc.p(f"Model {graph.source}: {len(graph.ops)} ops, hash {graph.model_hash[:16]}. Tuning took "
          f"{result.wall_s:.1f} s. Study: {result.study_storage}.")


def _times(r, ref, tp: bool) -> float | None:
    """How many times faster (or, throughput, more req/s) ``r`` is than ``ref``; None if unknown."""
    if ref is None:
        return None
    if tp:
        return (r.throughput_rps / ref.throughput_rps) if r.throughput_rps and ref.throughput_rps else None
    return (ref.compare_ms / r.compare_ms) if r.compare_ms and ref.compare_ms else None


def _candidates(doc: Document, result) -> None:
    tp = result.objective == "throughput"
    doc.h2("Candidates and yardsticks (measured in this session, interleaved)")
    doc.p("Yardsticks are what a user would run instead: each runtime loaded with its defaults (all cores) and at "
          "its best settings, each in a process of its own. `x best default` and `x ORT default` are how many "
          "times faster a candidate is than the fastest yardstick and than ONNX Runtime at its defaults; "
          "`x best single` compares with the best single placer target. Figures come from the final "
          "interleaved rounds unless the note says otherwise. The ratios compare `paired ms`: the chosen "
          "candidate's median, times each other's median ratio to it over the final rounds both ran in (a "
          "machine's slow spells then hit both sides of a ratio alike). `predicted ms`: every candidate "
          "priced on the problem re-priced from the single targets' first rounds in this session (a single "
          "target's is then those rounds' figure; `the store's price` is what the profile store said "
          "before them); `predicted at the final rounds' pace` prices a final trial's plan again "
          "from the single targets measured in the same rounds (their `paired ms`), to read against its "
          "`paired ms`.")
    ref_default, ref_ort, ref_single = result.best_default, result.yardstick("ort-default"), result.best_single
    rows = []
    order = {"yardstick": 0, "baseline": 1}
    for r in sorted(result.records, key=lambda r: (not r.final, order.get(r.kind, 2), r.label)):
        note = r.error or ("" if r.final or r.kind == "yardstick" else "measured in its trial, not in the final rounds")
        rows.append([r.label, r.kind, r.n_partitions, r.predicted_ms, r.store_predicted_ms,
                     r.anchored_predicted_ms, r.measured_ms,
                     r.p10_ms, r.p90_ms, r.paired_ms, r.throughput_rps, _times(r, ref_default, tp),
                     _times(r, ref_ort, tp),
                     _times(r, ref_single, tp),
                     "yes" if r.numerics_ok else ("no" if r.numerics_ok is False else "-"), note])
    doc.table(["candidate", "kind", "partitions", "predicted ms", "the store's price",
               "predicted at the final rounds' pace",
               "measured p50 ms", "p10", "p90", "paired ms",
               "req/s",
               "x best default", "x ORT default", "x best single", "numerics ok", "note"], rows)


def _yardsticks(doc: Document, result) -> None:
    ys = [r for r in result.records if r.kind == "yardstick"]
    if ys:
        doc.h2("Yardsticks: how each runtime was loaded")
        doc.table(["yardstick", "what", "as the runtime reports it"],
                  [[r.label, r.knobs.get("what", ""),
                    ", ".join(f"{k}={v}" for k, v in r.knobs.items() if k != "what") or (r.error or "")]
                   for r in ys])


def _final_comparison(doc: Document, result) -> None:
    final = result.extra.get("final_candidates")
    if result.objective == "throughput" and final:
        doc.h2("Final comparison (interleaved rounds)")
        doc.p("Only these were measured side by side at the end (the best candidates, every runtime's "
              "replicated one and the baselines, in alternating order); the choice is made among them. Other "
              "candidates keep the figure of their own, earlier rounds.")
        by_key = {r.key: r for r in result.records}
        rounds = result.extra.get("final_rounds", {})
        spelled = list(result.extra.get("final_rounds_spelled") or [])
        if any(spelled):
            doc.p(f"{sum(spelled)} of {len(spelled)} rounds read as a spell of the host (a runtime on all cores "
                  "at about its one-thread rate), marked *; every round counts in the medians.")
        limit = result.extra.get("core_limit_rps") or math.nan

        def listed(values) -> str:
            return ", ".join(f"{v:.0f}" + ("*" if i < len(spelled) and spelled[i] else "")
                             for i, v in enumerate(values)) or "-"

        doc.table(["candidate", "kind", "req/s", "of core limit", "rounds req/s"],
                  [[by_key[k].label, by_key[k].kind, by_key[k].throughput_rps,
                    f"{(by_key[k].throughput_rps or math.nan) / limit:.0%}", listed(rounds.get(k, []))]
                   for k in sorted(final, key=lambda k: -(by_key[k].throughput_rps or 0)) if k in by_key])


def _calibration(doc: Document, result) -> None:
    prov = result.extra.get("problem_provenance", {})
    if prov.get("fusion_scale"):
        doc.h2("Cost calibration")
        doc.p("Per target: measured whole-model time, and the scale applied to isolated op costs so that the "
              "single-target plan predicts it (partition-aware pricing).")
        doc.table(["target", "whole model ms", "fusion scale", "call overhead ms"],
                  [[t, prov.get("whole_model_ms", {}).get(t), prov["fusion_scale"][t], prov.get("overhead_ms", {}).get(t)]
                   for t in prov["fusion_scale"]])


def _segments(doc: Document, result) -> None:
    seg = result.extra.get("segment_ratios") or {}
    if seg:
        doc.h2("Fusion segments: measured whole vs sum of their ops")
        doc.p("Per target, over the runtime fusion groups of this model (conv/matmul + bias/BN/activation "
              "chains) profiled as one partition: segment time / sum of its ops' isolated net times. Below 1 "
              "the runtime fused them; this is why cutting inside a segment costs more than its ops' sum says.")
        doc.table(["target", "segments", "median ratio", "p10", "p90"],
                  [[t, s["n"], s["median"], s["p10"], s["p90"]] for t, s in sorted(seg.items())])


def _cost_model(doc: Document, result) -> None:
    cm = result.extra.get("cost_model")
    if cm:
        doc.h2("Learned cost model")
        doc.p(f"Model {cm['id']} (saved to {cm.get('dir') or 'nowhere'}): fitted on the profile store; "
              f"{cm.get('carried_over', 0)} partition(s) measured by earlier tune runs carried over, "
              f"{cm.get('tune_partitions', 0)} in total now. Its learned partition ratio per target prices the "
              "`costs=learned` trials (partition = call overhead + ratio x sum of net op costs).")
        doc.table(["target", "learned partition ratio"], [[t, r] for t, r in sorted(cm.get("partition_ratio", {}).items())])


def _chosen(doc: Document, result, out: Path) -> None:
    best = result.best
    if best.plan is not None:
        doc.h2("Chosen plan")
        doc.code(best.plan.summary())
        gantt(best.plan, out / "gantt.png")
        doc.image("gantt.png", "Gantt chart of the chosen plan (predicted)")
        if best.plan.mode == "pipeline" and best.plan.stages:
            measured = {}
            for p in best.partitions:
                measured.setdefault(p.get("target"), 0.0)
                measured[p.get("target")] += p.get("median_ms", 0.0)
            stage_ms = {f"stage {i} {s.target}": measured.get(s.target, s.total_ms) for i, s in enumerate(best.plan.stages)}
            stage_utilization(stage_ms, out / "stages.png")
            doc.image("stages.png", "stage utilization (measured partition times per stage)")
    elif result.extra.get("chosen_layout"):
        doc.h2("Chosen layout")
        if best.kind == "replicas":
            doc.p("The whole model as one stage, one replica per core: each core runs whole requests on its own "
                  "single-thread session (data parallelism; stage config `replicas`).")
        doc.code(result.extra["chosen_layout"])


def _predicted_vs_measured(doc: Document, result, out: Path) -> None:
    tp = result.objective == "throughput"
    pts = [{"label": r.label, "predicted_ms": r.predicted_ms, "measured_ms": r.measured_ms,
            "series": "whole plans"} for r in result.records if not tp]
    for r in result.records:
        pts += [{"label": p["partition"], "predicted_ms": p["predicted_ms"] + p.get("overhead_ms", 0.0),
                 "measured_ms": p.get("measured_ms"),
                 "series": f"partitions on {p['target']}" if p.get("target") else "partitions"}
                for p in r.partitions if "predicted_ms" in p]
    if pts:
        predicted_vs_measured(pts, out / "predicted_vs_measured.png",
                              "plans and partitions: predicted vs measured")
        doc.image("predicted_vs_measured.png", "predicted vs measured")


def _files(doc: Document, result) -> None:
    doc.h2("Files")
    compiled = (f"{result.extra['compiled_module']} + compiled.json (the Relax module compiled by tvm.compile: "
                "`placer run DIR --executor relax --compiled`), " if result.extra.get("compiled_module") else
                f"no compiled module ({result.extra.get('compiled_module_error', 'not exported')}), ")
    doc.p("plan.json (the plan), stage_config.json, module.relax.txt (the Relax module), " + compiled +
          "partitions/*.onnx, model.onnx, trials.json, tune.json, study.db (Optuna).")
