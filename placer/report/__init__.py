"""Reports: the tune report (one model) and the shared pieces the experiments use."""

from placer.report.plots import gantt, predicted_vs_measured, stage_utilization
from placer.report.render import Document, fmt
from placer.report.tune_report import write_tune_report

__all__ = ["Document", "fmt", "gantt", "predicted_vs_measured", "stage_utilization", "write_tune_report"]
