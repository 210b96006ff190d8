"""Output for people: the HTML report, the plots, the console tables and explain()'s table."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys

import numpy as np
import pytest

from placer.costing import CostTable, build_problem
from placer.graph import load_graph
from placer.problem import PlacementProblem, Tensor
from placer.report.plots import (
    gantt,
    gantt_figure,
    predicted_vs_measured_figure,
    scatter_predicted_measured,
    stage_utilization_figure,
)
from placer.report.render import Document
from placer.solve import solve

TARGETS = ("onnxruntime@cpu:t1", "openvino@cpu", "tvm-llvm")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _chain_plan(n: int = 18):
    """A heft plan of a chain-with-skips problem on 3 targets (ops alternate their cheapest target)."""
    rng = np.random.default_rng(1)
    ops = [f"/block{i // 3}/{('Conv', 'Relu', 'Add')[i % 3]}_{i}" for i in range(n)]
    cost = rng.uniform(0.1, 2.0, size=(n, 3))
    tensors = [Tensor(f"x{i}", ops[i], tuple(ops[i + 1:i + 3]), 20000) for i in range(n - 1)]
    tensors.append(Tensor("input", None, (ops[0],), 100000))
    lat = np.full((3, 3), 0.05) - 0.05 * np.eye(3)
    p = PlacementProblem(ops=ops, targets=TARGETS, cost_ms=cost, tensors=tensors, link_latency_ms=lat,
                         link_ms_per_byte=np.zeros((3, 3)))
    return solve(p, "latency", "heft", time_limit=2)


def _overlapping_tick_labels(fig) -> list[tuple[str, str]]:
    """Pairs of drawn tick labels (same axis) less than 4 px apart, after a real Agg draw; also
    asserts that every label lies inside the figure (nothing cut off at the edges)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    bad = []
    for ax in fig.axes:
        for axis, k in ((ax.xaxis, 0), (ax.yaxis, 1)):
            lo, hi = sorted(axis.get_view_interval())  # labels of ticks outside the view are not drawn
            labels = [t for t in axis.get_ticklabels(which="both") if t.get_visible() and t.get_text()
                      and lo - 1e-9 * abs(hi - lo) <= t.get_position()[k] <= hi + 1e-9 * abs(hi - lo)]
            boxes = [(t.get_text(), t.get_window_extent(renderer).padded(2)) for t in labels]  # 4 px apart
            for _, box in boxes:
                assert box.x0 >= 1 and box.y0 >= 1 and box.x1 <= fig.bbox.x1 - 1 and box.y1 <= fig.bbox.y1 - 1, box
            bad += [(a, b) for (a, ba), (b, bb) in itertools.combinations(boxes, 2) if ba.overlaps(bb)]
    return bad


def _legend_texts(fig) -> list[str]:
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return [t.get_text() for lg in legends for t in lg.get_texts()]


# ---- HTML report -------------------------------------------------------------------------------
def test_html_report_renders_the_markdown_with_tables_and_images(tmp_path):
    gantt(_chain_plan(), tmp_path / "gantt.png")
    doc = Document("placer tune: demo")
    doc.p("Chosen: **trial 3** (1.23x over `single:openvino@cpu`).")
    doc.h2("Candidates")
    error = "PartitionError: shape [1, 3] | mismatch <script>alert(1)</script>\nsecond line *not emphasis*"
    doc.table(["candidate", "measured ms", "error"], [["trial 3", 1.5, ""], ["trial 4", None, error]])
    doc.image("gantt.png", "Gantt chart of the chosen plan")
    doc.code("plan v1 mode=latency\n  ops=a,b")
    md = doc.write(tmp_path)
    html = (tmp_path / "report.html").read_text()

    assert "<table>" in html and html.count("<tr>") == 3  # header + 2 rows: the | in the error split nothing
    assert re.search(r"<img src=\"gantt\.png\" alt=\"Gantt chart of the chosen plan\"", html)
    assert (tmp_path / "gantt.png").read_bytes()[:8] == PNG_MAGIC  # the relative path resolves
    assert not re.search(r"^\s*\|?\s*:?-{3,}", html, re.M) and "|---" not in html  # no raw Markdown table
    assert "<strong>trial 3</strong>" in html and "<code>single:openvino@cpu</code>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html  # cell text is text, never HTML
    row = re.search(r"<td>trial 4</td>(.*?)</tr>", html, re.S).group(1)
    assert row.count("<td") == 2 and "shape [1, 3] | mismatch" in row and "*not emphasis*" in row
    assert 'style="text-align:right">1.500</td>' in html  # numbers right-aligned
    assert "border-collapse" in html and "<pre><code>plan v1" in html
    text = md.read_text()
    assert "| candidate | measured ms | error |" in text and "![Gantt chart of the chosen plan](gantt.png)" in text


# ---- plots -------------------------------------------------------------------------------------
def test_gantt_has_a_row_per_target_a_legend_and_readable_ticks(tmp_path):
    plan = _chain_plan()
    fig = gantt_figure(plan)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(TARGETS)
    legend = _legend_texts(fig)
    used = sorted(set(plan.assignment.values()))
    for t in TARGETS:
        n = sum(1 for v in plan.assignment.values() if v == t)
        assert any(re.match(rf"{re.escape(t)}: {n} ops?, [0-9.e+-]+ ms busy$", x) for x in legend), legend
    assert len(used) >= 2  # the legend is there because the plan uses several targets
    assert any(x.startswith("transfer") for x in legend) == any(tr.end_ms for tr in plan.transfers)
    assert ax.get_xlabel() == "predicted time (ms)" and "makespan" in ax.get_title()
    assert _overlapping_tick_labels(fig) == []
    assert gantt(plan, tmp_path / "g.png").read_bytes()[:8] == PNG_MAGIC


def test_predicted_vs_measured_log_axes_across_decades_legend_per_series():
    rng = np.random.default_rng(0)
    meas = rng.lognormal(0, 1.6, 60)  # ~4 decades
    pts = [{"label": f"p{i}", "measured_ms": float(m), "predicted_ms": float(m * rng.uniform(0.8, 1.3)),
            "series": "whole plans" if i % 3 == 0 else "partitions on openvino@cpu"} for i, m in enumerate(meas)]
    pts += [{"label": "failed", "measured_ms": None, "predicted_ms": 1.0},
            {"label": "unsupported", "measured_ms": 2.0, "predicted_ms": float("inf")}]
    fig = predicted_vs_measured_figure(pts, "plans and partitions")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "measured latency (ms)" and ax.get_ylabel() == "predicted latency (ms)"
    legend = _legend_texts(fig)
    assert any(x.startswith("whole plans (n=20,") for x in legend)
    assert any(x.startswith("partitions on openvino@cpu (n=40,") for x in legend)
    assert any(x.startswith("exact") for x in legend) and any("25%" in x for x in legend)
    assert _overlapping_tick_labels(fig) == []
    # a narrow range stays linear (log ticks over less than a decade are the ones that collide)
    narrow = [{"measured_ms": 2.0 + 0.1 * i, "predicted_ms": 2.1 + 0.09 * i} for i in range(12)]
    fig2 = predicted_vs_measured_figure(narrow)
    assert fig2.axes[0].get_xscale() == "linear" and _overlapping_tick_labels(fig2) == []


@pytest.mark.parametrize("lo,hi", [(1.1, 12.0), (0.3, 8.0), (0.01, 50.0), (1e-3, 2e3), (2.0, 3.5)])
def test_predicted_vs_measured_ticks_are_readable_over_any_range(lo, hi):
    meas = np.geomspace(lo, hi, 15)
    fig = predicted_vs_measured_figure([{"measured_ms": float(m), "predicted_ms": float(m * 1.1)} for m in meas])
    ax = fig.axes[0]
    assert ax.get_xscale() == ("log" if hi / lo > 10 else "linear")
    assert _overlapping_tick_labels(fig) == []
    for axis, lim in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        shown = [t.get_text() for t in axis.get_ticklabels() if t.get_text()
                 and lim[0] <= t.get_position()[axis is ax.yaxis] <= lim[1]]
        assert len(shown) >= 3, shown  # enough numbers to read a value off
        assert not any("times" in t or "^" in t for t in shown), shown  # 0.5, 2, 10: no 5x10^-1 mathtext


def test_scatter_panel_counts_only_drawable_points_and_stage_plot_names_the_bottleneck():
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    n = scatter_predicted_measured(ax, {"a": ([1.0, 2.0, float("nan"), 0.0], [1.1, 2.2, 1.0, 1.0])}, band=0.1)
    assert n == 2 and any("10%" in t for t in [x.get_text() for x in ax.get_legend().get_texts()])
    fig = stage_utilization_figure({"stage 0 onnxruntime": 3.2, "stage 1 openvino": 1.1, "stage 2 tvm": 0.2})
    assert any(t.startswith("bottleneck") for t in _legend_texts(fig))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["3.2 ms (100 %)", "1.1 ms (34 %)", "0.2 ms (6 %)"]
    assert "% of the bottleneck" in fig.axes[0].get_xlabel() and _overlapping_tick_labels(fig) == []


def test_costmodel_scatter_uses_the_shared_panel(tmp_path):
    from costmodels.evaluate import EvalResult, scatter_png
    from matplotlib.image import imread

    rng = np.random.default_rng(0)
    ops = [{"target": t, "measured_ms": float(v), "predicted_ms": float(v * 1.1)}
           for t in ("onnxruntime", "openvino") for v in rng.lognormal(-2, 1.5, 30)]
    parts = [{"target": "onnxruntime", "scenario": "ops-profiled", "measured_ms": 3.0, "predicted_ms": 2.5}]
    scatter_png(EvalResult(op_rows=ops, partition_rows=parts), tmp_path / "scatter.png")
    img = imread(tmp_path / "scatter.png")
    assert img.shape[:2] == (704, 1430)  # 13 x 6.4 in at the reports' DPI (110): two panels side by side


def test_plotting_leaves_the_matplotlib_backend_alone(tmp_path):
    code = (
        "import sys, matplotlib\n"
        "before = matplotlib.rcParams._get_backend_or_none()\n"
        "from placer.report.plots import predicted_vs_measured, stage_utilization\n"
        f"predicted_vs_measured([{{'measured_ms': 1.0, 'predicted_ms': 2.0}}], {str(tmp_path / 'p.png')!r})\n"
        f"stage_utilization({{'a': 1.0, 'b': 2.0}}, {str(tmp_path / 's.png')!r})\n"
        "print('pyplot' if 'matplotlib.pyplot' in sys.modules else 'no pyplot',\n"
        "      matplotlib.rcParams._get_backend_or_none() == before)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "MPLBACKEND": ""})
    assert out.stdout.split() == ["no", "pyplot", "True"]
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG_MAGIC


# ---- console tables ----------------------------------------------------------------------------
def test_console_tables_are_wide_when_piped_and_never_cut_a_cell(capsys):
    from placer.report.console import add_row, make_console, make_table

    console = make_console()
    assert not console.is_terminal and console.width >= 160  # pytest captures stdout: not a terminal
    words = [f"w{i:03d}" for i in range(80)]
    error = "PartitionError: input [x] of [/foo] " + " ".join(words)  # 400+ characters, rich-markup lookalikes
    table = make_table(["candidate", "measured ms", "error"], title="t", justify=["measured ms"])
    add_row(table, ["trial 1", None, error])
    console.print(table)
    out = capsys.readouterr().out
    flat = " ".join(re.sub(r"[│┃]", " ", out).split())
    assert "…" not in out and "input [x] of [/foo]" in flat
    assert all(w in flat for w in words)  # folded over several lines, every word there
    assert max(len(line) for line in out.splitlines()) > 100  # used the width, not 80 columns


# ---- explain -----------------------------------------------------------------------------------
def test_explain_is_a_list_of_rows_that_prints_as_a_table(tiny_model):
    from placer.api import explain
    from placer.report.console import make_console, render_text

    graph = load_graph(tiny_model)
    n = len(graph.ops)
    names = ("onnxruntime", "openvino")
    cost = np.array([[1.0, 2.0]] * n)
    cost[1, 1] = np.inf  # relu0: only onnxruntime
    table = CostTable(tuple(op.id for op in graph.ops), names, cost,
                      np.where(np.isfinite(cost), "measured", "unsupported").astype(object), {}, {})
    problem = build_problem(graph, table, pinned={"fc": "openvino"}, calibrate=False, use_segments=False)
    plan = solve(problem, "latency", "heft", time_limit=2)
    ex = explain(plan, problem, graph=graph)

    assert isinstance(ex, list) and ex.rows == list(ex) and len(ex) == n
    by = {r["op"]: r for r in ex}
    assert by["fc"]["reason"] == "pinned" and by["fc"]["target"] == "openvino"
    assert by["relu0"]["reason"] == "only supported target"
    assert by["conv0"]["op_type"] == "Conv" and by["conv0"]["cost_ms"] == {"onnxruntime": 1.0, "openvino": 2.0}
    assert ex.header() == ["op", "op type", "onnxruntime ms", "openvino ms", "chosen", "why"]

    text = str(ex)
    lines = text.splitlines()
    assert lines[0].strip().startswith(f"placement of {n} ops on 2 targets")
    assert all(any(op.id in ln and op.op_type in ln for ln in lines) for op in graph.ops)
    relu = next(ln for ln in lines if "relu0" in ln)
    assert "n/a" in relu and "only target that supports it" in relu
    fc = next(ln for ln in lines if " fc " in ln)
    assert "2 *" in fc and "pinned" in fc  # the chosen target's cost is starred
    assert render_text(make_console() and ex.__rich__()) == text

    md = ex.to_markdown()
    md_rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert md_rows[0] == "| op | op type | onnxruntime ms | openvino ms | chosen | why |"
    assert len(md_rows) == n + 1 and "|---|---|---:|---:|---|---|" in md
    assert ex._repr_markdown_() == md

    # without a graph the op-type column is left out, the rows stay the same
    bare = explain(plan, problem)
    assert "op type" not in bare.header() and [r["op"] for r in bare] == [r["op"] for r in ex]


def test_cost_model_report_is_written_by_the_one_report_path(tmp_path):
    """costmodels' evaluation report is a placer.report.Document: Markdown and HTML, escaped cells."""
    from costmodels.evaluate import EvalResult, write_report

    ops = [{"target": t, "model": "m|1", "op_type": op, "measured_ms": 1.0, "predicted_ms": 1.0 + e, "ape": e}
           for t in ("onnxruntime", "openvino") for op, e in (("Conv", 0.05), ("Add", 0.2), ("Relu", 0.5))]
    parts = [{"target": "onnxruntime", "model": "m|1", "scenario": "ops-profiled", "kind": "model",
              "measured_ms": 2.0, "predicted_ms": 2.2, "naive_ms": 3.0, "ape": 0.1, "naive_ape": 0.5}]
    res = EvalResult(op_rows=ops, partition_rows=parts, settings={"targets": ["onnxruntime", "openvino"],
                                                                  "models": ["m|1"]})
    md_path = write_report(res, tmp_path)
    md = md_path.read_text()
    assert md_path.name == "report.md" and (tmp_path / "report.html").exists() and (tmp_path / "scatter.png").exists()
    assert "### Per held-out model and target" in md
    assert "| onnxruntime | 3 | 25.0 | 33.3 | 66.7 | 20.0 |" in md  # MAPE, within 10/25 %, median APE
    assert r"m\|1" in md  # a model name cannot break the table
    assert "+10.0" in md and "<table>" in (tmp_path / "report.html").read_text()


def test_cost_model_report_sets_the_held_out_share_against_the_noise_floor(tmp_path):
    """With a repeat profile, the report gives per target the held-out share within 10 %, the repeat share,
    the gap and whether the goal (held-out >= repeat - 5 points) is met."""
    from costmodels.evaluate import EvalResult, against_noise_floor, summarize, write_report

    ops = [{"target": t, "model": "m", "op_type": "Conv", "measured_ms": 1.0, "predicted_ms": 1.0 + e, "ape": e}
           for t in ("a", "b") for e in (0.05, 0.05, 0.05, 0.3)]  # 75 % within 10 % on each
    rep = {"a": summarize([0.01, 0.02, 0.03, 0.2]), "b": summarize([0.01] * 10)}  # 75 % and 100 %
    res = EvalResult(op_rows=ops, settings={"targets": ["a", "b"], "models": ["m"], "repeatability": rep})
    assert against_noise_floor(res) == [("a", 0.75, 0.75, True), ("b", 0.75, 1.0, False)]
    md = write_report(res, tmp_path).read_text()
    # with 4 and 10 ops a share is worth little: the gap's 90% sampling interval says how little
    assert "| a | 75.0 | 75.0 | +0.0 | -50.4 to +50.4 | yes |" in md
    assert "| b | 75.0 | 100.0 | -25.0 | -60.6 to +10.6 | no |" in md
