"""Reports: the tune report (one model) and the shared pieces the experiments use."""

from placer.report.console import add_row, make_console, make_table
from placer.report.explain import Explanation
from placer.report.plots import gantt, predicted_vs_measured, scatter_predicted_measured, stage_utilization
from placer.report.render import Document, fmt, markdown_table, markdown_to_html
from placer.report.tune_report import write_tune_report

__all__ = ["Document", "Explanation", "add_row", "fmt", "gantt", "make_console", "make_table", "markdown_table",
           "markdown_to_html", "predicted_vs_measured", "scatter_predicted_measured", "stage_utilization",
           "write_tune_report"]
