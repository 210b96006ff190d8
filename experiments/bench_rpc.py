"""Benchmark: what profiling through TVM RPC costs, and whether remote timing agrees with local.

    python -m experiments.bench_rpc [--model zoo:squeezenet] [--max-ops N] [--json out.json]

Starts a tracker and one RPC server on loopback (free ports; the server runs on this machine, so
"remote" and local share the same CPU and must agree), then:

A. **Campaign overhead**: profiles every unique op signature of the model (plus the call
   overhead; no whole model, no links) with the normal campaign into two fresh stores, once on
   ``tvm-llvm`` (local) and once on ``tvm-rpc`` (through the tracker). Reports wall time per
   measured op for both (compile + export + upload + load + timing), and the per-op stored
   medians / net costs of RPC vs local (the campaign's ``time_compiled`` uses the compiled model's
   own ``time_run`` when it has one: for RPC the remote time_evaluator, transport left out).
B. **time_evaluator agreement**: for each unique signature (``--max-ops`` first ones), compiles the
   single-op model once for each side and times it with the local Relax VM ``time_evaluator`` and
   with the remote one (:meth:`RpcCompiled.time_run`, the device's clock), alternating sides;
   reports the remote/local ratio of medians (median, p10, p90 over ops) and the transport the
   remote ``run()`` adds (its wall median minus the remote time_evaluator median).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time


def _time_local(compiled, feeds, cfg):
    """The local Relax VM's time_evaluator, batched like RpcCompiled.time_run."""
    import numpy as np
    import tvm

    from placer.profile.timing import stats_from_samples

    args = [tvm.runtime.tensor(np.ascontiguousarray(feeds[n]), compiled.device) for n in compiled.input_names]
    vm = compiled.vm
    vm.set_input("main", *args)
    probe = vm.time_evaluator("invoke_stateful", compiled.device, number=1, repeat=1)("main")
    per_call = max(float(probe.mean), 1e-7)
    number = int(min(max(cfg.batch_s / per_call, 1), 10000))
    repeat = int(min(max(cfg.max_time_s / (number * per_call), cfg.hard_min_samples, 1), 30))
    res = vm.time_evaluator("invoke_stateful", compiled.device, number=number, repeat=repeat)("main")
    return stats_from_samples([float(r) * 1e9 for r in res.results])


def _pct(xs, q):
    import numpy as np

    return float(np.percentile(np.asarray(xs, dtype=float), q)) if xs else float("nan")


def run_bench(model: str = "zoo:squeezenet", *, max_ops: int | None = None, json_path: str | None = None,
              timeout_s: float = 120.0) -> dict:
    from placer import api
    from placer.devices import make_target
    from placer.devices.rpc import LocalRpcCluster
    from placer.profile import ProfileStore, TimingConfig, profile_graph
    from placer.profile.timing import random_feeds, time_callable

    graph = api.load(model)
    uniq = list(graph.unique_signatures().items())
    tmp = tempfile.mkdtemp(prefix="placer-bench-rpc-")
    figures: dict = {"model": model, "ops": len(graph.ops), "unique_signatures": len(uniq),
                     "host": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                              "loadavg_start": os.getloadavg()}}
    with LocalRpcCluster("bench-rpc") as cluster:
        os.environ.update(cluster.config.to_env())  # this script's process (and its workers) use the cluster
        figures["tracker"] = cluster.tracker
        # ---- A. the campaign, local vs through RPC -------------------------------------------
        campaign = {}
        medians: dict[str, dict[str, tuple[float, float]]] = {}
        for name in ("tvm-llvm", "tvm-rpc"):
            t = make_target(name)
            db = os.path.join(tmp, f"{name}.db")
            t0 = time.perf_counter()
            res = profile_graph(graph, [t], db, whole_model=False, links=False, progress=False, timeout_s=timeout_s)
            wall = time.perf_counter() - t0
            with ProfileStore(db) as st:
                rows = st.measurements(target=t, kind="op", status="ok")
                medians[name] = {r["key"]: (r["median_ms"], r["net_ms"]) for r in rows}
                overhead = st.overhead_ms(t, default=float("nan"))
            n = max(res.measured, 1)
            campaign[name] = {"wall_s": round(wall, 2), "measured": res.measured,
                              "wall_per_measurement_ms": round(wall / n * 1e3, 1),
                              "overhead_row_ms": round(overhead, 4),
                              "sum_op_median_ms": round(sum(m for m, _ in medians[name].values()), 3)}
            print(f"[A] {name}: {res.measured} measurements in {wall:.1f} s "
                  f"({wall / n * 1e3:.0f} ms each); call overhead row {overhead * 1e3:.1f} us", flush=True)
        common = sorted(set(medians["tvm-llvm"]) & set(medians["tvm-rpc"]))
        d_med = [medians["tvm-rpc"][k][0] - medians["tvm-llvm"][k][0] for k in common]
        r_net = [medians["tvm-rpc"][k][1] / medians["tvm-llvm"][k][1] for k in common
                 if medians["tvm-llvm"][k][1] and medians["tvm-llvm"][k][1] > 0.05]
        campaign["per_op_median_rpc_minus_local_ms"] = {"median": round(statistics.median(d_med), 4),
                                                        "p10": round(_pct(d_med, 10), 4),
                                                        "p90": round(_pct(d_med, 90), 4)}
        campaign["per_op_net_ratio_rpc_over_local_ops_over_50us"] = {
            "n": len(r_net), "median": round(statistics.median(r_net), 3) if r_net else None,
            "p10": round(_pct(r_net, 10), 3), "p90": round(_pct(r_net, 90), 3)}
        campaign["wall_per_measurement_ratio"] = round(
            campaign["tvm-rpc"]["wall_per_measurement_ms"] / campaign["tvm-llvm"]["wall_per_measurement_ms"], 2)
        figures["campaign"] = campaign

        # ---- B. remote vs local time_evaluator on the same ops --------------------------------
        cfg = TimingConfig()
        local_t, remote_t = make_target("tvm-llvm"), make_target("tvm-rpc")
        rows = []
        for h, (sig, op_ids) in uniq[: max_ops or len(uniq)]:
            m = graph.single_op_model(op_ids[0])
            feeds = random_feeds(m, 0)
            t0 = time.perf_counter()
            lc = local_t.compile(m)
            t1 = time.perf_counter()
            rc = remote_t.compile(m)  # the same build + export_library + upload + remote load
            t2 = time.perf_counter()
            lc.run(feeds)
            t3 = time.perf_counter()
            rc.run(feeds)  # first remote run: inputs up, VM init, outputs back
            t4 = time.perf_counter()
            try:
                loc = _time_local(lc, feeds, cfg)
                rem = rc.time_run(feeds, cfg)
                loc2 = _time_local(lc, feeds, cfg)  # alternate: local, remote, local; keep the lower local
                loc_ms = min(loc.median_ms, loc2.median_ms)
                wall = time_callable(lambda rc=rc, feeds=feeds: rc.run(feeds), TimingConfig(max_time_s=0.2))  # round trips
            finally:
                lc.close()
                rc.close()
            rows.append({"op": graph.op(op_ids[0]).op_type, "key": h, "local_te_ms": loc_ms,
                         "remote_te_ms": rem.median_ms, "remote_run_wall_ms": wall.median_ms,
                         "ratio": rem.median_ms / loc_ms, "transport_ms": wall.median_ms - rem.median_ms,
                         "compile_local_s": t1 - t0, "compile_remote_s": t2 - t1,
                         "first_run_local_ms": (t3 - t2) * 1e3, "first_run_remote_ms": (t4 - t3) * 1e3})
        remote_t.close()
        ratios = [r["ratio"] for r in rows]
        big = [r["ratio"] for r in rows if r["local_te_ms"] >= 0.1]
        transport = [r["transport_ms"] for r in rows]
        figures["time_evaluator"] = {
            "ops": len(rows),
            "ratio_remote_over_local": {"median": round(statistics.median(ratios), 3),
                                        "p10": round(_pct(ratios, 10), 3), "p90": round(_pct(ratios, 90), 3)},
            "ratio_ops_over_100us": {"n": len(big), "median": round(statistics.median(big), 3) if big else None,
                                     "p10": round(_pct(big, 10), 3), "p90": round(_pct(big, 90), 3)},
            "compile_s_per_op": {"local_median": round(statistics.median(r["compile_local_s"] for r in rows), 3),
                                 "remote_median": round(statistics.median(r["compile_remote_s"] for r in rows), 3)},
            "first_run_ms_per_op": {
                "local_median": round(statistics.median(r["first_run_local_ms"] for r in rows), 2),
                "remote_median": round(statistics.median(r["first_run_remote_ms"] for r in rows), 2)},
            "run_transport_ms": {"median": round(statistics.median(transport), 4),
                                 "p10": round(_pct(transport, 10), 4), "p90": round(_pct(transport, 90), 4)},
            "rows": rows,
        }
    figures["host"]["loadavg_end"] = os.getloadavg()
    te = figures["time_evaluator"]
    print(f"[B] {te['ops']} ops: remote/local time_evaluator median ratio {te['ratio_remote_over_local']['median']} "
          f"(p10 {te['ratio_remote_over_local']['p10']}, p90 {te['ratio_remote_over_local']['p90']}); "
          f"ops >= 100 us: {te['ratio_ops_over_100us']}; remote run() transport median "
          f"{te['run_transport_ms']['median'] * 1e3:.0f} us; compile per op local "
          f"{te['compile_s_per_op']['local_median']} s, remote (+export, upload, load) "
          f"{te['compile_s_per_op']['remote_median']} s; first run local "
          f"{te['first_run_ms_per_op']['local_median']} ms, remote {te['first_run_ms_per_op']['remote_median']} ms",
          flush=True)
    print(json.dumps({k: v for k, v in figures.items() if k != "time_evaluator"}, indent=1))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(figures, f, indent=1)
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_rpc", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="zoo:squeezenet")
    ap.add_argument("--max-ops", type=int, default=None, help="only the first N unique signatures in part B")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    run_bench(args.model, max_ops=args.max_ops, json_path=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
