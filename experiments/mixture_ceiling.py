"""How much mixing runtimes op by op could gain, from a profile store: per model, each runtime's ops
summed, the best mixture (each op on the runtime that runs it faster, isolated, no hand-off cost) and
each runtime's whole model as stored (its fusions included).

A mixture below every whole model is what a placement between the runtimes could at best gain in
latency at that thread count; above one, no cut plan between them can win there (the question of
issue 14's latency goals)::

    python -m experiments.mixture_ceiling --db STORE [--models squeezenet,hf-bert] \\
        [--targets onnxruntime:t1,openvino:t1] [--out table.md]

Every model must be profiled in the store on every target (``placer profile`` or a tune), op rows
and whole-model rows; a model that is not is listed with what is missing. A runtime that cannot run
some op sums to ``inf``; an op no runtime runs makes the model an error row. The op rows are net of
a call's overhead and the whole-model rows are not, so the comparison leans toward the mixture: a
whole model faster than it is faster than any mixture priced this way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from experiments.compare import MODELS, geomean

DEFAULT_MODELS = ("squeezenet,inception_v1,resnet50,shufflenet,bert-tiny,gpt-tiny,hf-bert,hf-gpt2,hf-vit,"
                  "hf-convnext,hf-llama,hf-distilbert,hf-mobilenetv2")


def model_row(name: str, store, targets) -> dict:
    """One model's figures (ms), or ``{"model", "error"}`` where the store lacks something."""
    from placer.costing import cost_table_from_store
    from placer.errors import PlacerError
    from placer.zoo import load_graph

    try:
        graph = load_graph(MODELS.get(name, name))
        table = cost_table_from_store(graph, targets, store)
    except PlacerError as exc:
        return {"model": name, "error": str(exc).splitlines()[0]}
    cost = np.asarray(table.cost_ms, dtype=float)
    missing = [t for t in table.targets if t not in table.whole_model_ms]
    if missing:
        return {"model": name, "error": f"no whole-model row on {', '.join(missing)}"}
    nowhere = [op for op, row in zip(table.ops, cost) if not np.isfinite(row).any()]
    if nowhere:
        return {"model": name, "error": f"op {nowhere[0]!r} runs on none of the targets"}
    sums = {t: float(cost[:, j].sum()) for j, t in enumerate(table.targets)}  # inf: an op it cannot run
    mixture = float(cost.min(axis=1).sum())
    whole = {t: float(table.whole_model_ms[t]) for t in table.targets}
    return {"model": name, "ops": len(graph.ops), "op_sums": sums, "mixture": mixture, "whole": whole,
            "best_whole": min(whole.values()), "mixture_x_best_whole": min(whole.values()) / mixture}


def render(rows: list[dict], targets: list[str]) -> str:
    short = [t.split("@")[0] for t in targets]
    head = (["model", "ops"] + [f"{s} ops summed" for s in short] + ["best mixture"]
            + [f"{s} whole model" for s in short] + ["best whole / mixture"])
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['error']} |" + " |" * (len(head) - 2))
            continue
        cells = ([r["model"], str(r["ops"])] + [f"{r['op_sums'][t]:.3f}" for t in targets]
                 + [f"{r['mixture']:.3f}"] + [f"{r['whole'][t]:.3f}" for t in targets]
                 + [f"{r['mixture_x_best_whole']:.3f}"])
        lines.append("| " + " | ".join(cells) + " |")
    ok = [r for r in rows if "error" not in r]
    if ok:
        ratios = [r["mixture_x_best_whole"] for r in ok]
        wins = sum(x > 1 for x in ratios)
        lines.append("")
        lines.append(f"Best whole model / best mixture: geomean {geomean(ratios):.3f}, {min(ratios):.3f}-"
                     f"{max(ratios):.3f}; the mixture is faster than every whole model on {wins} of "
                     f"{len(ok)} (above 1), before any hand-off between the runtimes.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="a profile store (placer's SQLite file)")
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--targets", default="onnxruntime:t1,openvino:t1")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    from placer.devices import make_target
    from placer.profile import ProfileStore

    if not Path(args.db).is_file():
        print(f"{args.db}: no such profile store", file=sys.stderr)
        return 2
    targets = [make_target(t) for t in args.targets.split(",")]
    with ProfileStore(args.db, readonly=True) as store:
        rows = [model_row(m, store, targets) for m in args.models.split(",")]
    text = render(rows, [t.name for t in targets])
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0 if any("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
