"""What a tuning run produces: its measured candidates, its result, and the files it writes.

Shared by both tuners (:mod:`placer.tune.tuner`, latency; :mod:`placer.tune.pipeline_tuner`,
throughput) and by ``placer report``, which reads a finished output directory back
(:func:`load_tune_result`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from placer.errors import PlacerError, PlanError, first_line
from placer.graph import load_graph
from placer.plan import Plan
from placer.report import write_tune_report
from placer.run.yardsticks import label
from placer.safe_io import load_json
from placer.tune.saved import check_summary, checked_record

__all__ = ["TrialRecord", "TuneResult", "assignment_key", "load_tune_result", "write_outputs"]


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
    #: the final rounds' figure to compare candidates by, round by round
    #: (:meth:`placer.run.bench.PlanBench.paired_ms`); None outside the final rounds
    paired_ms: float | None = None
    #: a final trial's plan priced again from the single targets measured in the same final rounds
    #: (each target's whole-model time: its paired figure), the host's pace over those rounds in it:
    #: what ``predicted_ms`` (at the store's usual pace) reads as then; None for the single targets
    #: (the anchors), yardsticks and records outside the final rounds
    anchored_predicted_ms: float | None = None
    #: a single target's price from the profile store, before the session re-priced the problem from the
    #: single targets' own rounds (its ``predicted_ms`` is then its price on that problem, as the trials'
    #: are); None for the other records
    store_predicted_ms: float | None = None

    @property
    def compare_ms(self) -> float | None:
        """The latency to compare this record with others by: :attr:`paired_ms` where the final rounds
        gave one, else the median (:attr:`measured_ms`)."""
        return self.paired_ms if self.paired_ms is not None else self.measured_ms

    def take_numerics(self, report) -> None:
        """Record a :class:`~placer.run.numerics.NumericsReport`: passed, and the worst absolute error."""
        self.numerics_ok = bool(report.passed)
        self.max_abs_err = float(max((o.max_abs for o in report.outputs), default=0.0))

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
        """The yardsticks measured (a figure > 0: one whose process died mid-run has NaN, which must not
        become the best default)."""
        def measured(x) -> bool:
            return x is not None and math.isfinite(x) and x > 0

        return [r for r in self.records if r.kind == "yardstick"
                and (measured(r.measured_ms) or measured(r.throughput_rps))]

    def _fastest(self, records: list[TrialRecord]) -> TrialRecord | None:
        if not records:
            return None
        if self.objective == "throughput":
            return max(records, key=lambda r: r.throughput_rps or 0.0)
        return min(records, key=lambda r: r.compare_ms or math.inf)

    @property
    def best_default(self) -> TrialRecord | None:
        """The fastest yardstick (what a user would run instead), or None if none was measured."""
        return self._fastest(self.yardsticks)

    @property
    def best_default_passing(self) -> TrialRecord | None:
        """The fastest yardstick whose outputs passed the numerics check (OpenVINO's defaults compute in
        bf16 on a CPU that has it, outside an f32 tolerance), or None."""
        return self._fastest([r for r in self.yardsticks if r.numerics_ok])

    def yardstick(self, kind: str) -> TrialRecord | None:
        return next((r for r in self.yardsticks if r.key == label(kind)), None)

    def verdict(self) -> list[str]:
        """The result in plain sentences, every figure from the final interleaved rounds."""
        best, single, default = self.best, self.best_single, self.best_default
        tp = self.objective == "throughput"
        fig = (lambda r: f"{r.throughput_rps:.1f} req/s") if tp else (lambda r: f"{r.compare_ms:.3f} ms")
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
                passing = self.best_default_passing
                if passing is not None:  # the yardstick of this run's precision: what it can match
                    lines.append(f"vs the best runtime default that passes the check ({passing.label}, "
                                 f"{fig(passing)}): {self.speedup_vs(passing):.2f}x")
            # advice to run a default only where its outputs pass the check tune held every plan to
            advice = default if default.numerics_ok is not False else self.best_default_passing
            if advice is not None and self.speedup_vs(advice) < 0.97:
                lines.append(f"{advice.label} was faster than every placement measured: "
                             f"use it ({advice.knobs.get('what', '')}), or tune longer.")
        if single is not best:
            lines.append(f"vs the best single target ({single.label}, {fig(single)}): "
                         f"{self.speedup_vs(single):.2f}x")
        if self.extra.get("spell"):
            lines.append(self.extra["spell"])
        return lines

    def speedup_vs(self, other: TrialRecord | None) -> float:
        """How many times faster the result is than ``other`` (> 1: the result wins); NaN without it."""
        if other is None:
            return math.nan
        if self.objective == "throughput":
            return (self.best.throughput_rps or 0.0) / max(other.throughput_rps or 1e-12, 1e-12)
        return (other.compare_ms or math.nan) / (self.best.compare_ms or math.nan)


def assignment_key(plan) -> str:
    blob = json.dumps([sorted(plan.assignment.items()), sorted((plan.stage or {}).items())], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def write_outputs(result: TuneResult, ctx, mat) -> None:
    """Write a finished run to ``result.out_dir``: the compiled Relax module, ``trials.json``,
    ``tune.json`` and the report (``mat``: the chosen plan, materialized there)."""
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
