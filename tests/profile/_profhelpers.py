"""Helpers shared by the profiler tests (a uniquely named module: tests/conftest.py exists too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from placer.profile import TimingConfig

ROOT = Path(__file__).resolve().parents[2]

# Fewer samples than the default (0.4 s cap per op): enough for stable medians of test models.
FAST = TimingConfig(warmup_s=0.005, min_samples=5, hard_min_samples=3, batch_s=0.005, rel_tol=0.05,
                    min_time_s=0.005, max_time_s=0.08, max_samples=500,
                    contended_attempts=1)  # the suite may run beside itself (pytest -n 2): no re-takes
THREE = ["onnxruntime", "openvino", "tvm-llvm"]
def run_py(code: str, *, env: dict | None = None, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python -c code`` from the repo root (a separate process: a real campaign)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.update(env or {})
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=e, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"subprocess failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def campaign_code(db: str, model: str, targets: list[str], *, extra: str = "") -> str:
    """Source of a script that profiles ``model`` into ``db`` with the fast timing config."""
    return (
        "from placer.zoo import load_graph\n"
        "from placer.profile import profile_graph, TimingConfig\n"
        f"cfg = TimingConfig(**{FAST.to_dict()!r})\n"
        f"g = load_graph({model!r})\n"
        f"{extra}\n"
        f"r = profile_graph(g, {targets!r}, {db!r}, progress=False, links=False, whole_model=False, timing=cfg)\n"
        "print('RESULT', r.measured, r.cached, r.unsupported, r.failed)\n"
    )
