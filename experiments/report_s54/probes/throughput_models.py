"""``placer tune --objective throughput`` on several models, one after the other, on a fresh store:
the chosen candidate against every throughput yardstick and the N-core limit, all from the same final
rounds (session 54, issue 14).

    PYTHONPATH=. python experiments/report_s54/probes/throughput_models.py OUT_DIR MODEL[,MODEL...] [BUDGET_S] [f32|bf16]
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import optuna

from placer.tune import tune


def row(name: str, tp) -> dict:
    ys = {r.key: r for r in tp.yardsticks}

    def rps(key):
        r = ys.get(key)
        return r.throughput_rps if r is not None else None

    ok = tp.best_default_passing
    best = tp.best_default
    return {"model": name, "chosen": tp.best.label, "kind": tp.best.kind, "rps": tp.best.throughput_rps,
            "ort_sessions_rps": rps("yardstick:ort-sessions"),
            "ov_throughput_f32_rps": rps("yardstick:ov-throughput-f32") or (
                rps("yardstick:ov-throughput") if ys.get("yardstick:ov-throughput") is not None
                and ys["yardstick:ov-throughput"].numerics_ok else None),
            "ov_throughput_rps": rps("yardstick:ov-throughput"),
            "ov_throughput_ok": ys["yardstick:ov-throughput"].numerics_ok if "yardstick:ov-throughput" in ys else None,
            "best_default": best.label if best else None, "best_default_rps": best.throughput_rps if best else None,
            "best_default_ok": ok.label if ok else None, "best_default_ok_rps": ok.throughput_rps if ok else None,
            "core_limit_rps": tp.extra.get("core_limit_rps"),
            "core_limit_fraction": tp.extra.get("core_limit_fraction"),
            "final_rounds": tp.extra.get("final_rounds"),
            "yardstick_numerics": {r.key: r.numerics_ok for r in tp.yardsticks}}


def main() -> int:
    out = Path(sys.argv[1])
    models = sys.argv[2].split(",")
    budget = float(sys.argv[3]) if len(sys.argv) > 3 else 90.0
    precision = sys.argv[4] if len(sys.argv) > 4 else "f32"
    out.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for m in models:
        t0 = time.monotonic()
        tp = tune(f"zoo:{m}", db=out / "profiles.db", out_dir=out / f"tune_{m}", objective="throughput",
                  budget_s=budget, solver_time_limit=5, progress=lambda s: print(s, flush=True),
                  precision=precision)
        r = row(m, tp)
        r["wall_s"] = time.monotonic() - t0
        rows.append(r)
        (out / "results.json").write_text(json.dumps(rows, indent=1, default=str))
        print(f"ROW {json.dumps({k: v for k, v in r.items() if k != 'final_rounds'}, default=str)}", flush=True)
    lines = [("| model | chosen | req/s | x ORT sessions | x OV THROUGHPUT f32 | x OV THROUGHPUT (default) | "
              "x best default passing | x best default | of the core limit |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]

    def x(a, b):
        return f"{a / b:.3f}" if a and b else "-"

    for r in rows:
        lines.append(f"| {r['model']} | {r['chosen']} | {r['rps']:.1f} | {x(r['rps'], r['ort_sessions_rps'])} | "
                     f"{x(r['rps'], r['ov_throughput_f32_rps'])} | {x(r['rps'], r['ov_throughput_rps'])}"
                     f"{'' if r['ov_throughput_ok'] else ' (fails the check)'} | {x(r['rps'], r['best_default_ok_rps'])} | "
                     f"{x(r['rps'], r['best_default_rps'])} | {r['core_limit_fraction']:.0%} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
