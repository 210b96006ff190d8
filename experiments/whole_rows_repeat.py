"""The same whole model profiled in several stores: how far apart its rows are, as stored and read at
the host's pace (issue 15, session 42).

Profile each store first (fresh, the same models and targets), e.g. for stores A, B, C:

    placer profile zoo:M --targets onnxruntime:t1,openvino:t1 --db runs/A.db --no-links

then

    python -m experiments.whole_rows_repeat --stores runs/A.db,runs/B.db,runs/C.db \\
        --models squeezenet,bert-tiny,shufflenet,resnet50,inception_v1,densenet121

For every pair of stores and every (model, target) measured in both, |row B / row A - 1|: as
stored, and with each row divided by its pace factor (``ProfileStore.pace_factors``: its pace over
the median pace of its target's rows in its store), as ``placer.costing`` prices it.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import numpy as np


def main(argv: list[str] | None = None) -> int:
    from placer import zoo
    from placer.graph import build_graph, load_model
    from placer.profile import ProfileStore
    from placer.profile.keys import model_key

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", required=True, help="comma-separated profile stores (SQLite)")
    ap.add_argument("--models", required=True, help="comma-separated zoo names")
    ap.add_argument("--targets", default="onnxruntime@cpu:t1,openvino@cpu:t1")
    args = ap.parse_args(argv)
    targets = args.targets.split(",")
    stores = {p: ProfileStore(p, readonly=True) for p in args.stores.split(",")}
    factors = {p: {t: s.pace_factors(t) for t in targets} for p, s in stores.items()}
    keys = {m: model_key(build_graph(load_model(zoo.resolve(f"zoo:{m}")))) for m in args.models.split(",")}
    errors: dict[str, list[float]] = {"as stored": [], "at pace": []}
    for a, b in itertools.combinations(stores, 2):
        for m, key in keys.items():
            for t in targets:
                x, y = stores[a].get(key, t), stores[b].get(key, t)
                if not (x is not None and y is not None and x.ok and y.ok):
                    continue
                fx, fy = factors[a][t].get(key, 1.0), factors[b][t].get(key, 1.0)
                errors["as stored"].append(abs(y.median_ms / x.median_ms - 1))
                errors["at pace"].append(abs((y.median_ms / fy) / (x.median_ms / fx) - 1))
                print(f"{a} / {b} {m:14s} {t:20s} as stored {y.median_ms / x.median_ms:.3f} "
                      f"at pace {(y.median_ms / fy) / (x.median_ms / fx):.3f}")
    for how, e in errors.items():
        if not e:
            continue
        v = np.array(e)
        print(f"{how:9s}: n={len(v)}  within 10% {np.mean(v <= 0.10):.0%}  median {np.median(v):.1%}  "
              f"p90 {np.quantile(v, 0.9):.1%}  max {v.max():.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
