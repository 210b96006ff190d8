"""Trace the host's slow spells: a 2-thread runtime against the probes that should see them.

Times, over and over for ``--seconds``: squeezenet (the onnx package's copy) through ONNX Runtime
at 2 threads and at 1 thread, the per-core reference loop (:func:`placer.devices.core_speed.
per_core_slowdown`) and the parallel probe (:func:`~placer.devices.core_speed.parallel_slowdown`).
A sample is "in a spell" when the 2-thread session took over 0.75x the 1-thread one's time (it
normally takes about 0.53x). Prints how often each probe reads
:data:`~placer.devices.core_speed.SLOWED` or more in and out of the spells, and writes the samples
(``--out``, .npy: seconds, per-core slowdown, parallel slowdown, 2-thread ms, 1-thread ms).

    PYTHONPATH=. python experiments/spell_trace.py --seconds 200 --out /tmp/spells.npy

Run it on an otherwise idle machine: another process's load is a different disturbance.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _session(path: str, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _median_ms(session, feeds, n: int) -> float:
    session.run(None, feeds)
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        session.run(None, feeds)
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return float(np.median(out))


def main(argv=None) -> None:
    import onnx

    from placer.devices import core_speed

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=200.0)
    ap.add_argument("--out", default=None, help="write the samples here (.npy)")
    args = ap.parse_args(argv)
    path = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_squeezenet.onnx")
    two, one = _session(path, 2), _session(path, 1)
    inp = two.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in inp.shape]
    feeds = {inp.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    cores = core_speed.process_cores()
    core_speed.warm_core_probe()
    rows = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < args.seconds:
        par = core_speed.parallel_slowdown(cores) or 1.0
        per_core = core_speed.per_core_slowdown(cores) or 1.0
        ms2 = _median_ms(two, feeds, 5)
        time.sleep(0.06)  # the 2-thread pool parks before the 1-thread session runs
        ms1 = _median_ms(one, feeds, 3)
        rows.append((time.monotonic() - t0, per_core, par, ms2, ms1))
        time.sleep(0.05)
    r = np.array(rows)
    if args.out:
        np.save(args.out, r)
    spell = r[:, 3] / r[:, 4] > 0.75
    print(f"{len(r)} samples over {args.seconds:.0f} s; 2-thread / 1-thread time median "
          f"{np.median(r[:, 3] / r[:, 4]):.2f}; in a spell (over 0.75): {spell.mean():.1%} of the samples")
    inside_ms = np.median(r[spell, 3]) if spell.any() else float("nan")
    print(f"2-thread ms: {np.median(r[~spell, 3]):.3f} outside the spells, {inside_ms:.3f} in them; "
          f"1-thread ms: {np.median(r[:, 4]):.3f}")
    for col, name in ((1, "per_core_slowdown"), (2, "parallel_slowdown")):
        q = r[:, col]
        inside = f"{(q[spell] >= core_speed.SLOWED).mean():.0%}" if spell.any() else "-"
        in_pct = ", ".join(f"{v:.2f}" for v in np.percentile(q[spell], [5, 10, 50])) if spell.any() else "-"
        out_pct = ", ".join(f"{v:.2f}" for v in np.percentile(q[~spell], [50, 90, 95]))
        print(f"{name}: reads {core_speed.SLOWED} or more in {inside} of the spell samples and "
              f"{(q[~spell] >= core_speed.SLOWED).mean():.1%} of the others; percentiles 5/10/50 in the "
              f"spells {in_pct}; 50/90/95 outside {out_pct}")


if __name__ == "__main__":
    main()
