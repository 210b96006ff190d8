"""Plots for reports: Gantt chart, predicted vs measured, stage utilization.

Figures are built as :class:`matplotlib.figure.Figure` objects and written with ``fig.savefig``:
no pyplot, no global backend switch (``matplotlib.use``), so importing or calling these from an
application that has its own matplotlib backend changes nothing for it. Every plot has axis
labels with units, a legend where it shows more than one series, and ticks that do not collide
(log axes only where the data span more than a decade; then labelled 0.1, 1, 10 ... with unlabelled
minor ticks). :func:`scatter_predicted_measured` draws one predicted-vs-measured panel on a given
axes; :mod:`costmodels.evaluate` uses it for its own scatter plots.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

#: dots per inch of the written PNGs
DPI = 110
#: relative error band drawn around y = x on predicted-vs-measured plots
BAND = 0.25


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _save(fig, path: str | Path) -> Path:
    fig.savefig(path, dpi=DPI)
    return Path(path)


def _palette(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _fmt_ms(v: float, _pos=None) -> str:
    """Tick label for a time in ms: 0.01, 0.5, 3, 250, 1e+04 (no 10^x mathtext, no trailing zeros)."""
    if v <= 0 or not math.isfinite(v):
        return "0" if v == 0 else ""
    if v >= 1e4 or v < 1e-3:
        return f"{v:.0e}"
    return f"{v:.4g}"


def _set_time_scale(ax, axis: str, lo: float, hi: float) -> bool:
    """Log scale when [lo, hi] spans more than a decade (labelled at 1, 2, 5 x 10^k over less than 2.5
    decades, else at the decades; minor ticks unlabelled), else linear with at most 6 ticks. Returns
    whether the axis is logarithmic."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    a = ax.xaxis if axis == "x" else ax.yaxis
    log = lo > 0 and hi / lo > 10
    if log:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        decades = math.log10(hi / lo)  # label 1-2-5 steps over few decades, so that 3+ ticks carry numbers
        subs = (1.0, 2.0, 5.0) if decades < 2.5 else (1.0,)
        a.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
        a.set_major_formatter(FuncFormatter(_fmt_ms))
        a.set_minor_formatter(NullFormatter())
    else:
        a.set_major_locator(MaxNLocator(nbins=6))
        a.set_major_formatter(FuncFormatter(_fmt_ms))
    return log


# ---- Gantt chart --------------------------------------------------------------------------------
def gantt(plan, path: str | Path, title: str = "") -> Path:
    """Write :func:`gantt_figure` to ``path`` (PNG)."""
    return _save(gantt_figure(plan, title), path)


def gantt_figure(plan, title: str = ""):
    """One row per target: each op's predicted [start, end) as a bar in the target's colour, labelled
    with the op name where it fits; transfers into a target as thin grey bars under its row. The
    legend gives each target's op count and busy time."""
    from matplotlib.patches import Patch

    targets = list(plan.targets)
    colors = _palette(len(targets))
    makespan = max([plan.makespan_ms or 0.0] + [plan.end_ms.get(op, 0.0) for op in plan.assignment]
                   + [t.end_ms or 0.0 for t in plan.transfers]) or 1.0
    width = 11.0
    fig = _figure(width, 1.6 + 0.75 * max(len(targets), 1))
    ax = fig.add_subplot()
    px_per_ms = width * 0.78 * DPI / makespan  # the axes take roughly 78 % of the width
    char_px = 0.62 * 7 * DPI / 72  # a 7-pt character
    n_ops, busy = defaultdict(int), defaultdict(float)
    for op, tgt in plan.assignment.items():
        s, e = plan.start_ms.get(op, 0.0), plan.end_ms.get(op, 0.0)
        y = targets.index(tgt)
        n_ops[tgt] += 1
        if e > s:
            busy[tgt] += e - s
            ax.barh(y, e - s, left=s, height=0.6, color=colors[y], edgecolor="white", linewidth=0.6)
            if (e - s) * px_per_ms > (len(op) + 1) * char_px:
                ax.text(s + (e - s) / 2, y, op, ha="center", va="center", fontsize=7, clip_on=True)
    n_tr = 0
    for tr in plan.transfers:
        if tr.start_ms is not None and tr.end_ms is not None and tr.end_ms > tr.start_ms and tr.dst in targets:
            n_tr += 1
            ax.barh(targets.index(tr.dst) + 0.4, tr.end_ms - tr.start_ms, left=tr.start_ms, height=0.14,
                    color="0.45", edgecolor="none")
    ax.set_yticks(range(len(targets)), targets)
    ax.set_ylim(len(targets) - 0.4, -0.6)  # first target on top, room for its transfer lane
    ax.set_xlim(0, makespan * 1.01)
    ax.xaxis.set_major_formatter(_tick_formatter())
    ax.set_xlabel("predicted time (ms)")
    ax.set_ylabel("target")
    ax.grid(axis="x", color="0.88", linewidth=0.6)
    ax.set_axisbelow(True)
    bottleneck = f", bottleneck stage {plan.bottleneck_ms:.3f} ms" if plan.mode == "pipeline" else ""
    ax.set_title(title or f"{plan.solver} ({plan.mode}): makespan {plan.makespan_ms:.3f} ms{bottleneck}")
    handles = [Patch(color=colors[i], label=f"{t}: {n_ops[t]} op{'s' * (n_ops[t] != 1)}, {busy[t]:.3g} ms busy")
               for i, t in enumerate(targets)]
    if n_tr:
        handles.append(Patch(color="0.45", label=f"transfer into the row's target ({n_tr})"))
    if len(handles) > 1:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 3), fontsize=8,
                   frameon=False)
    return fig


def _tick_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(_fmt_ms)


# ---- predicted vs measured ----------------------------------------------------------------------
def _finite_pos(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def scatter_predicted_measured(ax, series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *,
                               title: str = "", unit: str = "ms", band: float = BAND,
                               what: str = "latency") -> int:
    """One panel: each series' ``(measured, predicted)`` points (x = measured, y = predicted), the
    y = x line and a +-``band`` relative error band, the same scale on both axes (log when the
    points span more than a decade), a legend with each series' point count and median error.
    Non-finite and non-positive points are left out. Returns the number of points drawn."""
    import numpy as np

    colors = _palette(max(len(series), 1))
    markers = "os^Dv<>Pp*"
    lo, hi, total = math.inf, 0.0, 0
    for i, (name, (xs, ys)) in enumerate(series.items()):
        pts = [(x, y) for x, y in zip(xs, ys) if _finite_pos(x) and _finite_pos(y)]
        if not pts:
            continue
        x, y = np.array(pts, dtype=float).T
        lo, hi = min(lo, x.min(), y.min()), max(hi, x.max(), y.max())
        total += len(pts)
        med = float(np.median(np.abs(y - x) / x)) * 100
        ax.scatter(x, y, s=22 if len(pts) < 200 else 8, alpha=0.75, color=colors[i], marker=markers[i % 10],
                   edgecolors="none", label=f"{name} (n={len(pts)}, median error {med:.0f} %)")
    if total:
        if hi / lo > 10:  # log axes: pad by a factor
            lo, hi = lo / 1.3, hi * 1.3
        else:  # linear axes: pad by 8 % of the range
            pad = 0.08 * (hi - lo) or 0.1 * hi
            lo, hi = max(lo - pad, hi * 1e-3), hi + pad
        line = np.geomspace(lo, hi, 50)
        ax.plot(line, line, color="black", linewidth=0.9, label="exact (predicted = measured)")
        ax.fill_between(line, line * (1 - band), line * (1 + band), color="0.5", alpha=0.12, linewidth=0,
                        label=f"within \N{PLUS-MINUS SIGN}{band:.0%}")
        _set_time_scale(ax, "x", lo, hi)
        _set_time_scale(ax, "y", lo, hi)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal", adjustable="box")
        ax.legend(fontsize=7, loc="upper left", framealpha=0.9)
    else:
        ax.text(0.5, 0.5, "no measured points", ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.grid(which="major", color="0.9", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_xlabel(f"measured {what} ({unit})")
    ax.set_ylabel(f"predicted {what} ({unit})")
    if title:
        ax.set_title(title, fontsize=10)
    return total


def predicted_vs_measured(points: Sequence[Mapping], path: str | Path, title: str = "predicted vs measured") -> Path:
    """Write :func:`predicted_vs_measured_figure` to ``path`` (PNG)."""
    return _save(predicted_vs_measured_figure(points, title), path)


def predicted_vs_measured_figure(points: Sequence[Mapping], title: str = "predicted vs measured"):
    """Scatter of ``{"label", "predicted_ms", "measured_ms"[, "series"]}`` points: one colour per
    ``series`` (default: all one series), y = x and a +-25 % band (see :func:`scatter_predicted_measured`)."""
    series: dict[str, tuple[list[float], list[float]]] = {}
    for p in points:
        xs, ys = series.setdefault(str(p.get("series") or "measured"), ([], []))
        xs.append(p.get("measured_ms"))
        ys.append(p.get("predicted_ms"))
    fig = _figure(6.4, 6.0)
    ax = fig.add_subplot()
    scatter_predicted_measured(ax, series, title=title)
    return fig


# ---- stage utilization --------------------------------------------------------------------------
def stage_utilization(stage_ms: Mapping[str, float], path: str | Path, title: str = "stage utilization") -> Path:
    """Write :func:`stage_utilization_figure` to ``path`` (PNG)."""
    return _save(stage_utilization_figure(stage_ms, title), path)


def stage_utilization_figure(stage_ms: Mapping[str, float], title: str = "stage utilization"):
    """Bars of each stage's time relative to the slowest (the bottleneck = 100 %), with the time in ms."""
    from matplotlib.patches import Patch

    names = list(stage_ms)
    vals = [float(stage_ms[n]) for n in names]
    top = max(vals) if vals and max(vals) > 0 else 1.0
    fig = _figure(7.5, 1.7 + 0.5 * max(len(names), 1))
    ax = fig.add_subplot()
    bottleneck, other = "tab:red", "tab:blue"
    pct = [100 * v / top for v in vals]
    ax.barh(range(len(names)), pct, height=0.6, color=[bottleneck if v == top else other for v in vals])
    for i, (p, v) in enumerate(zip(pct, vals)):
        label = f"{v:.3g} ms ({p:.0f} %)"
        if p > 55:
            ax.text(p - 1.5, i, label, va="center", ha="right", color="white", fontsize=8)
        else:
            ax.text(p + 1.5, i, label, va="center", ha="left", color="black", fontsize=8)
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlim(0, 105)
    ax.set_xlabel("stage time, % of the bottleneck (slowest) stage")
    ax.grid(axis="x", color="0.9", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(title)
    if len(names) > 1:
        fig.legend(handles=[Patch(color=bottleneck, label="bottleneck stage: sets the throughput"),
                            Patch(color=other, label="other stages (wait for the bottleneck)")],
                   loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return fig
