"""Leave-one-model-out evaluation of the cost model.

For each model ``m`` of the training data, a cost model is fitted on everything except ``m``
(:meth:`TrainingData.without_model`: signatures only ``m`` has and ``m``'s partitions are dropped;
signatures ``m`` shares with other models stay, as they were measured for those) and asked about
``m``; variant banks sampled around ``m``'s signatures (named ``variants-<m>-<i>``, see
:func:`costmodels.sampler.profile_variants`) are dropped with it. Two scenarios:

``unseen``
    ``m`` was never profiled: op latencies of ``m``'s own signatures are predicted by the
    regressors, its partitions by the predicted ops + partition correction.
``ops-profiled``
    ``m``'s single ops were profiled (the usual case before solving) but none of its partitions:
    op costs are exact, partitions (segments, the whole model) are predicted by the correction
    learned on the other models. This isolates the "partition is not the sum of its ops" error.

Op metrics are on the *isolated* latency (what the profiler measured: the median of a single-op
run, the call overhead included) over the held-out model's own signatures (one row per signature
x target: each distinct signature is one prediction). Partition metrics compare the predicted and
measured latency of each measured segment / whole model of ``m``, next to the naive
``overhead + sum of net op costs``.

:func:`write_report` writes ``report.md`` and ``report.html`` (a :class:`placer.report.Document`, as every
placer report), ``rows.json`` and ``scatter.png``.
"""

from __future__ import annotations

import copy
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from costmodels.data import TrainingData
from costmodels.partition import net_isolated_ms
from costmodels.train import fit_cost_model
from placer.report import Document
from placer.report.plots import DPI, scatter_predicted_measured


def ape(pred: float, meas: float) -> float:
    """Absolute percentage error |pred - meas| / meas (inf where unsupported disagrees)."""
    if not math.isfinite(meas) or not math.isfinite(pred):
        return 0.0 if math.isfinite(meas) == math.isfinite(pred) else math.inf
    return abs(pred - meas) / max(meas, 1e-12)


def summarize(errors: Sequence[float]) -> dict:
    """MAPE (%), share within +-10% and +-25%, median APE (%), n."""
    e = np.asarray([x for x in errors if math.isfinite(x)] + [1e9 for x in errors if not math.isfinite(x)], dtype=float)
    if e.size == 0:
        return {"n": 0, "mape_pct": float("nan"), "within10": float("nan"), "within25": float("nan"),
                "median_ape_pct": float("nan")}
    return {"n": int(e.size), "mape_pct": float(np.mean(np.minimum(e, 10.0)) * 100),
            "within10": float(np.mean(e <= 0.10)), "within25": float(np.mean(e <= 0.25)),
            "median_ape_pct": float(np.median(e) * 100)}


@dataclass
class EvalResult:
    """Rows of a leave-one-model-out run: ``op_rows`` (one per held-out signature x target) and
    ``partition_rows`` (one per measured segment/model partition x target x scenario)."""

    op_rows: list[dict] = field(default_factory=list)
    partition_rows: list[dict] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def op_summary(self, by: Sequence[str] = ("target",)) -> dict[tuple, dict]:
        groups: dict[tuple, list[float]] = defaultdict(list)
        for r in self.op_rows:
            groups[tuple(r[k] for k in by)].append(r["ape"])
        return {k: summarize(v) for k, v in sorted(groups.items())}

    def partition_summary(self, by: Sequence[str] = ("scenario", "kind", "target")) -> dict[tuple, dict]:
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for r in self.partition_rows:
            groups[tuple(r[k] for k in by)].append(r)
        out = {}
        for k, rows in sorted(groups.items()):
            s = summarize([r["ape"] for r in rows])
            s["naive_mape_pct"] = summarize([r["naive_ape"] for r in rows])["mape_pct"]
            s["naive_within10"] = summarize([r["naive_ape"] for r in rows])["within10"]
            out[k] = s
        return out


def _held_out_models(data: TrainingData, models: Iterable[str] | None, skip_prefix: Sequence[str]) -> list[str]:
    names = list(models) if models is not None else data.model_names()
    return [m for m in names if not any(m.startswith(p) for p in skip_prefix)]


def leave_one_model_out(data: TrainingData, models: Iterable[str] | None = None, targets: Sequence[str] | None = None,
                        *, skip_prefix: Sequence[str] = ("variants",), fit_kw: Mapping[str, Any] | None = None,
                        progress: bool = False) -> EvalResult:
    """Fit without each model in turn and score the predictions for it (see the module doc).

    ``models``: the models to hold out (default: every model in ``data`` except names starting
    with ``skip_prefix``, the sampler's variant banks, which always stay in training).
    """
    fit_kw = dict(fit_kw or {})
    fit_kw.setdefault("cv_metrics", False)
    targets = list(targets) if targets is not None else data.target_names()
    res = EvalResult(settings={"targets": targets, "fit_kw": {k: v for k, v in fit_kw.items()}})
    held = _held_out_models(data, models, skip_prefix)
    res.settings["models"] = held
    for m in held:
        # variant banks derived from m's signatures (sampler naming "variants-<model>-<i>") go with it
        derived = [x for x in data.model_names() if x.startswith(f"variants-{m}-")]
        train = data.without_model(m, *derived)
        if not train.ops:
            continue
        cm = fit_cost_model(train, targets, **fit_kw)
        for t in targets:  # the one-thread sibling each fold fitted the target with (None: without one)
            sib = cm.card["targets"].get(t, {}).get("sibling")
            seen = res.settings.setdefault("siblings", {}).setdefault(t, [])
            if sib not in seen:
                seen.append(sib)
        trained_keys = {(r.target, r.key) for r in train.ops}
        test = data.restricted_to(m)
        # ---- ops: the held-out model's own signatures ---------------------------------------
        for r in test.ops:
            if r.target not in targets or (r.target, r.key) in trained_keys:
                continue
            sig = data.signatures[r.key]
            pred = cm.predict_op_ms(sig, r.target, include_overhead=True)
            res.op_rows.append({"model": m, "target": r.target, "key": r.key, "op_type": sig["op_type"],
                                "measured_ms": r.latency_ms, "predicted_ms": pred, "ape": ape(pred, r.latency_ms),
                                "flops": sig.get("flops", 0.0)})
        # ---- partitions, in both scenarios -----------------------------------------------------
        profiled = copy.copy(cm)  # the same fitted model, knowing m's single-op measurements
        profiled.measured_ms = {t: {**cm.measured_ms.get(t, {}),
                                    **{r.key: r.latency_ms for r in test.ops if r.target == t}} for t in targets}
        for scenario, model in (("unseen", cm), ("ops-profiled", profiled)):
            for p in test.partitions:
                if p.target not in targets:
                    continue
                sigs = [data.signatures[k] for k in p.op_keys]
                iso = model.predict_ops(sigs, [p.target], include_overhead=True)[:, 0]
                if not np.all(np.isfinite(iso)):
                    continue
                pred = model.predict_partition_ms(sigs, p.target, boundary_bytes=p.boundary_bytes)
                ov = model.overhead_ms(p.target)
                naive = float(ov + net_isolated_ms(iso, ov).sum())
                res.partition_rows.append({
                    "model": m, "target": p.target, "kind": p.kind, "scenario": scenario, "n_ops": len(p.op_keys),
                    "measured_ms": p.measured_ms, "predicted_ms": pred, "naive_ms": naive,
                    "ape": ape(pred, p.measured_ms), "naive_ape": ape(naive, p.measured_ms)})
        if progress:
            n_ops = sum(1 for r in res.op_rows if r["model"] == m)
            print(f"  held out {m}: {n_ops} op predictions, "
                  f"{sum(1 for r in res.partition_rows if r['model'] == m)} partition predictions", flush=True)
    return res


def repeatability(first: TrainingData, second: TrainingData, common_scale: bool = True) -> dict[str, dict]:
    """How well two measurements of the same op signatures agree, per target (the noise floor).

    ``first`` and ``second`` are two profiles of the same models taken at different times; the
    error of ``second`` against ``first`` is summarized like a prediction's (:func:`summarize`).
    A predictor cannot be expected to beat it on data measured this way.

    With ``common_scale`` (the default) each target's ``second`` rows are first divided by their
    median ratio to ``first`` (reported as ``scale``). The held-out predictions are compared with
    rows that :mod:`placer.profile.drift` put on one scale, so a session that ran a few percent
    faster or slower as a whole is no error of theirs either: the two shares then measure the same
    thing, the scatter of single ops (without it the share falls to nothing where the sessions
    differ by more than the tolerance).
    """
    a = {(r.target, r.key): r.latency_ms for r in first.ops}
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in second.ops:
        if (r.target, r.key) in a and math.isfinite(a[(r.target, r.key)]) and math.isfinite(r.latency_ms):
            pairs[r.target].append((r.latency_ms, a[(r.target, r.key)]))
    out = {}
    for t, v in sorted(pairs.items()):
        ratios = [x / y for x, y in v if y > 0]
        scale = float(np.median(ratios)) if common_scale and ratios else 1.0
        out[t] = {**summarize([ape(x / scale, y) for x, y in v]), "scale": scale}
    return out


def held_out_against(res: EvalResult, second: TrainingData, scales: Mapping[str, float] | None = None
                     ) -> dict[str, dict]:
    """The held-out predictions scored against a second profile of the same ops, per target: each
    prediction's error against ``second``'s row of its signature, that row divided by its target's
    ``scales`` entry first (:func:`repeatability`'s scale: the second session put on the first's).

    A second reading of the same accuracy, as independent of the first profile as the repeat share
    is: a held-out model's rows in the first profile share the host's pace of the seconds they were
    taken in (a spell that slowed all of one model's ops), an error no signature feature explains;
    the repeat share carries such offsets between the two profiles too. Reported beside the first
    reading; the goal stays on the first."""
    scales = scales or {}
    other = {(r.target, r.key): r.latency_ms for r in second.ops}
    errs: dict[str, list[float]] = defaultdict(list)
    for r in res.op_rows:
        ms = other.get((r["target"], r["key"]))
        if ms is not None:  # scored as the first reading is (ape: unsupported on one side only, a miss)
            errs[r["target"]].append(ape(r["predicted_ms"], ms / scales.get(r["target"], 1.0)))
    return {t: summarize(v) for t, v in sorted(errs.items())}


# ---- report ------------------------------------------------------------------------------------------
#: columns of an error summary (:func:`summarize`), after its grouping columns
_SUMMARY = ["n", "MAPE %", "within 10 %", "within 25 %", "median APE %"]


def _cells(s: Mapping) -> list[str]:
    return [str(s["n"]), f"{s['mape_pct']:.1f}", f"{100 * s['within10']:.1f}", f"{100 * s['within25']:.1f}",
            f"{s['median_ape_pct']:.1f}"]


def sibling_line(res: EvalResult) -> str:
    """Which one-thread sibling (:mod:`costmodels.sibling`) each target's op model was fitted with,
    over the folds: a two-thread target evaluated on a store without its one-thread rows is fitted
    without one, and only this line tells."""
    def said(sibs: list) -> str:
        named = [s for s in sibs if s]
        return (", ".join(named) + (" (none in some folds)" if None in sibs else "")) if named else "none"
    return "One-thread sibling of each target's op model: " + "; ".join(
        f"{t}: {said(sibs)}" for t, sibs in sorted(res.settings.get("siblings", {}).items())) + "."


def report_document(res: EvalResult, title: str = "Cost model: leave-one-model-out"):
    """The report as a :class:`placer.report.Document` (the one report path: Markdown and HTML)."""
    doc = Document(title)
    doc.p(f"Targets: {', '.join(res.settings.get('targets', []))}. "
          f"Held-out models: {', '.join(res.settings.get('models', []))}.")
    if res.settings.get("siblings"):
        doc.p(sibling_line(res))
    doc.h2("Ops of the held-out model (its own signatures, isolated latency)")
    by_target = {t: s for (t,), s in res.op_summary(("target",)).items()}
    doc.table(["target"] + _SUMMARY, [[t] + _cells(s) for t, s in by_target.items()])
    rep = res.settings.get("repeatability")
    if rep:
        doc.h3("Noise floor: the same ops measured twice (second profile vs first)")
        doc.p("The second profile is divided by its median ratio to the first on each target (scale), "
              "as the held-out rows are put on one scale.")
        doc.table(["target"] + _SUMMARY + ["scale"],
                  [[t] + _cells(s) + [f"{s.get('scale', 1.0):.3f}"] for t, s in rep.items()])
        doc.h3("Held-out predictions against the noise floor (share within 10 %)")
        doc.p(f"Goal: held-out share at least the repeat share minus {REPEAT_SLACK_POINTS} points, per target.")
        doc.p("The interval is the gap's 90% sampling interval with each op an independent draw "
              "(`costmodels.evaluate.gap_interval`): ops of one model are not, so the true one is wider.")
        rows = []
        for t, h, r, met in against_noise_floor(res):
            lo, hi = gap_interval(h, by_target[t]["n"], r, rep[t]["n"])
            rows.append([t, f"{100 * h:.1f}", f"{100 * r:.1f}", f"{100 * (h - r):+.1f}",
                         f"{100 * lo:+.1f} to {100 * hi:+.1f}", "yes" if met else "no"])
        doc.table(["target", "held-out ops %", "same op measured twice %", "gap (points)", "90% interval",
                   "goal met"], rows)
        second = res.settings.get("held_out_vs_second")
        if second:
            doc.h3("The held-out predictions against the second profile")
            doc.p("The same predictions scored against the second profile's rows of the same signatures (put "
                  "on the first's scale as above): a second reading, as independent of the first profile as "
                  "the repeat share is (`costmodels.evaluate.held_out_against`). The goal stays on the "
                  "first.")
            doc.table(["target", "against the first profile, within 10 %", "against the second, within 10 %",
                       "n (second)", "median APE % (second)", "same op measured twice %"],
                      [[t, f"{100 * by_target[t]['within10']:.1f}", f"{100 * s2['within10']:.1f}",
                        str(s2["n"]), f"{s2['median_ape_pct']:.1f}",
                        f"{100 * rep[t]['within10']:.1f}" if t in rep else ""]
                       for t, s2 in second.items() if t in by_target])
    doc.h3("Per held-out model and target")
    doc.table(["model", "target"] + _SUMMARY,
              [[m, t] + _cells(s) for (m, t), s in res.op_summary(("model", "target")).items()])
    doc.h3("Per op type (all targets)")
    doc.table(["op type"] + _SUMMARY, [[o] + _cells(s) for (o,), s in
                                       sorted(res.op_summary(("op_type",)).items(), key=lambda kv: -kv[1]["n"])])
    doc.h2("Partitions (segments and whole models) of the held-out model")
    doc.p("Predicted = overhead + partition-corrected sum of net op costs; naive = overhead + plain sum.")
    doc.table(["scenario", "kind", "target"] + _SUMMARY + ["naive MAPE %", "naive within 10 %"],
              [[sc, k, t] + _cells(s) + [f"{s['naive_mape_pct']:.1f}", f"{100 * s['naive_within10']:.1f}"]
               for (sc, k, t), s in res.partition_summary().items()])
    models = [r for r in res.partition_rows if r["kind"] == "model"]
    sums = op_sum_errors(res)
    if sums:
        doc.h3("Whole-model sum of op costs: predicted (unseen) vs measured ops")
        doc.p("Sum over every op of the model (with repeats) of the isolated net costs: the part of a plan's "
              "latency the op regressors are responsible for (no fusion, no transfers).")
        doc.table(["target", "models", "mean abs error %", "max abs error %"],
                  [[t, str(len(errs)), f"{100 * np.mean(np.abs(errs)):.1f}", f"{100 * np.max(np.abs(errs)):.1f}"]
                   for t, errs in sorted(sums.items())])
    if models:
        doc.h3("Whole models")
        doc.table(["model", "target", "scenario", "measured ms", "predicted ms", "error %", "naive ms"],
                  [[r["model"], r["target"], r["scenario"], f"{r['measured_ms']:.3f}", f"{r['predicted_ms']:.3f}",
                    f"{100 * (r['predicted_ms'] - r['measured_ms']) / r['measured_ms']:+.1f}", f"{r['naive_ms']:.3f}"]
                   for r in sorted(models, key=lambda r: (r["model"], r["target"], r["scenario"]))])
    return doc


#: how far (percentage points) the held-out share within 10 % may stay below the repeat share
REPEAT_SLACK_POINTS = 5


def against_noise_floor(res: EvalResult) -> list[tuple[str, float, float, bool]]:
    """Per target with a repeat profile: ``(target, held-out share within 10 %, repeat share within
    10 %, goal met)``; the goal is the held-out share at least the repeat share minus
    :data:`REPEAT_SLACK_POINTS` points."""
    rep = res.settings.get("repeatability") or {}
    held = {t: s["within10"] for (t,), s in res.op_summary(("target",)).items()}
    return [(t, held[t], r["within10"], held[t] >= r["within10"] - REPEAT_SLACK_POINTS / 100)
            for t, r in sorted(rep.items()) if t in held]


#: z of a two-sided 90% normal interval
Z90 = 1.6449


def gap_interval(held: float, n_held: int, repeat: float, n_repeat: int,
                 z: float = Z90) -> tuple[float, float]:
    """Sampling interval of ``held - repeat`` (two shares within 10 %), each share read as the mean of
    independent draws (normal approximation of two binomials). Ops of one model are not independent
    draws, so the true spread is wider: a gap inside this interval of the goal's is no evidence either
    way. On 270 and 288 ops a share near 80% has a standard error near 2.4 points."""
    se = math.sqrt(held * (1 - held) / max(n_held, 1) + repeat * (1 - repeat) / max(n_repeat, 1))
    return held - repeat - z * se, held - repeat + z * se


def report_markdown(res: EvalResult, title: str = "Cost model: leave-one-model-out") -> str:
    """The report's Markdown text (:func:`report_document`)."""
    return report_document(res, title).markdown()


def op_sum_errors(res: EvalResult) -> dict[str, list[float]]:
    """Per target: relative error of a held-out model's summed predicted op costs against its
    summed measured ones (the "naive" sums of its whole-model partition in both scenarios)."""
    naive = {(r["model"], r["target"], r["scenario"]): r["naive_ms"] for r in res.partition_rows if r["kind"] == "model"}
    out: dict[str, list[float]] = defaultdict(list)
    for (m, t, sc), v in sorted(naive.items()):
        if sc == "unseen" and (m, t, "ops-profiled") in naive:
            out[t].append(v / naive[(m, t, "ops-profiled")] - 1.0)
    return dict(out)


def scatter_png(res: EvalResult, path: str | Path) -> None:
    """Predicted vs measured, one colour per target: ops of the held-out models (left) and their
    partitions with the ops profiled (right); y = x and a +-10 % band (the "within 10 %" metric).

    Drawn by :func:`placer.report.plots.scatter_predicted_measured` (the same panel as the tune
    report's), on a :class:`matplotlib.figure.Figure`: no pyplot, no backend switch.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 6.4), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, rows, title in ((axes[0], res.op_rows, "ops of held-out models (isolated latency)"),
                            (axes[1], [r for r in res.partition_rows if r["scenario"] == "ops-profiled"],
                             "partitions of held-out models (ops profiled)")):
        series = {t: ([r["measured_ms"] for r in rows if r["target"] == t],
                      [r["predicted_ms"] for r in rows if r["target"] == t])
                  for t in sorted({r["target"] for r in rows})}
        scatter_predicted_measured(ax, series, title=title, band=0.10)
    fig.savefig(path, dpi=DPI)


def write_report(res: EvalResult, out_dir: str | Path, title: str = "Cost model: leave-one-model-out") -> Path:
    """Write ``report.md`` / ``report.html`` (the one report path, :class:`placer.report.Document`),
    ``rows.json`` and ``scatter.png`` under ``out_dir``; returns the Markdown report's path."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    doc = report_document(res, title)
    doc.image("scatter.png", "predicted vs measured: ops and partitions of the held-out models")
    (d / "rows.json").write_text(json.dumps({"settings": res.settings, "ops": res.op_rows,
                                             "partitions": res.partition_rows}, indent=1, default=str))
    scatter_png(res, d / "scatter.png")
    return doc.write(d)
