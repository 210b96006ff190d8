"""Plots for reports (matplotlib, Agg backend): Gantt chart, predicted vs measured, stage utilization."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def gantt(plan, path: str | Path, title: str = "") -> Path:
    """One lane per target: each op's predicted [start, end), transfers as thin bars below."""
    plt = _plt()
    targets = list(plan.targets)
    colors = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.7 * len(targets)))
    for op, tgt in plan.assignment.items():
        s, e = plan.start_ms.get(op, 0.0), plan.end_ms.get(op, 0.0)
        if e > s:
            y = targets.index(tgt)
            ax.barh(y, e - s, left=s, height=0.6, color=colors(y % 10), edgecolor="black", linewidth=0.3)
    for tr in plan.transfers:
        if tr.start_ms is not None and tr.end_ms is not None and tr.end_ms > tr.start_ms:
            y = targets.index(tr.dst) - 0.4
            ax.barh(y, tr.end_ms - tr.start_ms, left=tr.start_ms, height=0.12, color="gray")
    ax.set_yticks(range(len(targets)), targets)
    ax.set_xlabel("predicted time (ms)")
    ax.set_title(title or f"{plan.solver} ({plan.mode}): makespan {plan.makespan_ms:.3f} ms")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return Path(path)


def predicted_vs_measured(points: Sequence[Mapping], path: str | Path, title: str = "predicted vs measured") -> Path:
    """Scatter of ``{"label", "predicted_ms", "measured_ms"}`` points with the y = x line."""
    plt = _plt()
    pts = [p for p in points if p.get("measured_ms") and p.get("predicted_ms")
           and math.isfinite(p["predicted_ms"]) and math.isfinite(p["measured_ms"])]
    fig, ax = plt.subplots(figsize=(5.5, 5))
    if pts:
        xs = [p["predicted_ms"] for p in pts]
        ys = [p["measured_ms"] for p in pts]
        ax.scatter(xs, ys, s=18)
        lo, hi = min(xs + ys) * 0.8, max(xs + ys) * 1.2
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("predicted (ms)")
    ax.set_ylabel("measured (ms)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return Path(path)


def stage_utilization(stage_ms: Mapping[str, float], path: str | Path, title: str = "stage utilization") -> Path:
    """Bars of each stage's time relative to the slowest (the bottleneck = 100%)."""
    plt = _plt()
    names = list(stage_ms)
    vals = [stage_ms[n] for n in names]
    top = max(vals) if vals else 1.0
    fig, ax = plt.subplots(figsize=(6, 1.0 + 0.6 * max(len(names), 1)))
    ax.barh(range(len(names)), [100 * v / top for v in vals], color="tab:blue")
    for i, v in enumerate(vals):
        ax.text(1, i, f"{v:.3f} ms", va="center", color="white", fontsize=8)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlim(0, 105)
    ax.set_xlabel("% of the bottleneck stage")
    ax.set_title(title)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return Path(path)
