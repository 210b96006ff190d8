"""How the store prices each single target's whole model against what the comparison's bench measured:
the row as stored, divided by its pace over the median pace of every row of its target (session 49's
rule), over the pace the ops' line expects at its size, and over the median pace of the target's whole
models (session 50's rule). One-thread targets (the others carry no pace); all-core rows: the lower
window, the mean of the two, as stored.

    python experiments/report_s50/probes/whole_rows_vs_bench.py STORE.sqlite RESULTS.json
"""
import json
import math
import sqlite3
import sys

import numpy as np

from placer.profile.pace import _pace_line

store, results = sys.argv[1], sys.argv[2]
con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
names = dict(con.execute("SELECT hash, name FROM targets"))
rows = con.execute("SELECT key, kind, target, median_ms, meta FROM measurements WHERE status = 'ok'").fetchall()
by_target: dict[str, list] = {}
for key, kind, th, ms, meta in rows:
    m = json.loads(meta or "{}")
    by_target.setdefault(names[th], []).append((key, kind, ms, m))
res = json.load(open(results))
res = res if isinstance(res, list) else res.get("results", res)
errors: dict[str, list[float]] = {}


def err(rule: str, predicted: float, measured: float) -> None:
    errors.setdefault(rule, []).append(abs(predicted / measured - 1))


for model in res:
    for row in model["rows"]:
        place = row["placement"]
        if not place.startswith("single:") or not row.get("measured_ms"):
            continue
        target = place.split(":", 1)[1]
        measured = row.get("measured_after_ms") or row["measured_ms"]
        rows_t = by_target[target]
        wholes = [r for r in rows_t if r[1] == "model"]
        # this model's row: the one nearest its prediction (the models' whole times differ 1.4x and more)
        key, _, ms, meta = min(wholes, key=lambda r: abs(math.log(r[2] / row["predicted_ms"])))
        if target.endswith(":t1"):
            paced = [(math.log(m["pace_ms"]), math.log(v)) for k, kind, v, m in rows_t
                     if m.get("pace_ms") and v and kind != "model"]
            all_paces = [math.log(m["pace_ms"]) for *_, m in rows_t if m.get("pace_ms")]
            lp = math.log(meta["pace_ms"])
            ref = float(np.median(all_paces))
            line = _pace_line(paced, float(np.median([p for p, _ in paced])))
            at_line = line[0] + line[1] * math.log(ms) if line else ref
            whole_ref = float(np.median([math.log(m["pace_ms"]) for *_, m in wholes if m.get("pace_ms")]))
            err("t1 as stored", ms, measured)
            err("t1 / pace over the median pace (session 49)", ms / math.exp(lp - ref), measured)
            err("t1 / pace over the ops' line", ms / math.exp(lp - at_line), measured)
            err("t1 / pace over the whole models' median pace (session 50)", ms / math.exp(lp - whole_ref), measured)
        elif meta.get("windows_ms"):
            w = meta["windows_ms"]
            err("all cores: the lower window (session 49)", min(w), measured)
            err("all cores: the mean of the two (session 50)", sum(w) / len(w), measured)
for rule, e in errors.items():
    print(f"{rule:58s} n={len(e):2d}  median {100 * np.median(e):5.1f}%  p90 {100 * np.percentile(e, 90):5.1f}%")
