"""Profile zoo models and evaluate the cost model leave-one-model-out.

Two steps, so that a profile store is collected once and evaluated many times::

    # 1. measure (ops, chain segments, whole models, links, sampled op variants) into a store
    python experiments/eval_costmodel.py profile --db runs/costmodel/profiles.db \
        --models squeezenet,resnet50,inception_v1,shufflenet,bert-tiny,bert-h256 --variants 100 \
        --random-variants 200

    # 2. leave-one-model-out: report.md + scatter.png + rows.json under --out
    python experiments/eval_costmodel.py eval --db runs/costmodel/profiles.db \
        --models squeezenet,resnet50,inception_v1,shufflenet,bert-tiny,bert-h256 --out runs/costmodel/eval

    # a store's rows of some targets copied into another (the two-thread targets' store takes the
    # one-thread rows of the same signatures, which their op models read as a prior: costmodels.sibling)
    python experiments/eval_costmodel.py merge --db t2.db --from t1.db --targets onnxruntime,openvino

    # (test fixture) export the store's rows for some models as JSON
    python experiments/eval_costmodel.py export --db runs/costmodel/profiles.db --models ... --out fixture.json

Model names: any ``placer.zoo`` name (re-weighted, seed 0), plus ``bert-hH-sS`` for a 2-layer
BERT encoder of hidden size H (H/64 heads) and sequence S (``bert-h256-s128``; ``bert-h256``
means S=128). Targets default to onnxruntime, openvino, tvm-llvm (1 thread each).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_MODELS = "squeezenet,resnet50,inception_v1,shufflenet,bert-tiny,bert-h256"
DEFAULT_TARGETS = "onnxruntime,openvino,tvm-llvm"
#: family weights of the ``--wide-variants`` bank: convolutions are most of a CNN's distinct signatures
#: and have the most size parameters (channels, groups, kernel, stride, map), so they get the most rows
WIDE_FAMILY_WEIGHTS = {"conv": 6.0, "matmul": 2.0, "pool": 1.5, "eltwise": 1.5, "concat": 1.5, "transpose": 1.0,
                       "reshape": 1.0, "batchnorm": 1.0, "softmax": 0.7, "layernorm": 0.7, "gemm": 0.5, "lrn": 0.5}


def zoo_graph(name: str):
    """An OpGraph for a zoo name or ``bert-hH[-sS]``."""
    from placer import zoo
    from placer.graph import build_graph, load_model

    m = re.fullmatch(r"bert-h(\d+)(?:-s(\d+))?", name)
    if m:
        hidden, seq = int(m.group(1)), int(m.group(2) or 128)
        proto = zoo.bert_encoder(layers=2, hidden=hidden, heads=max(hidden // 64, 1), seq=seq)
    else:
        proto = zoo.resolve(f"zoo:{name}")
    return build_graph(load_model(proto))


def sampled_segments(graph, per_model: int, max_len: int, seed: int) -> list[list[str]]:
    """Up to ``per_model`` distinct chain windows (2..max_len ops), seeded, cheapest first-come."""
    from placer.profile.keys import chain_segments, segment_key

    windows = chain_segments(graph, max_len=max_len)
    rng = np.random.default_rng(seed)
    rng.shuffle(windows)
    seen, out = set(), []
    for w in windows:
        k = segment_key(graph, w)
        if k not in seen:
            seen.add(k)
            out.append(w)
        if len(out) >= per_model:
            break
    return out


def _windows(args):
    """``profile_graph``'s ``second_window``: "all" (one-thread targets with no probation), none, or the
    default (True: multi-thread targets always, one-thread ones on probation)."""
    if args.all_windows and args.one_window:
        raise SystemExit("--all-windows and --one-window contradict each other")
    return "all" if args.all_windows else not args.one_window


def cmd_profile(args) -> int:
    from placer.profile.campaign import profile_graph

    from costmodels.sampler import (balanced_grouped_variants, conv_variants, grouped_variants,
                                   light_variants, profile_variants, sample_variants)

    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    targets = args.targets.split(",")
    graphs = []
    for name in args.models.split(","):
        t0 = time.time()
        g = zoo_graph(name)
        graphs.append(g)
        segs = sampled_segments(g, args.segments, args.max_len, args.seed) if args.segments else None
        r = profile_graph(g, targets, args.db, progress=False, segments=segs, whole_model=not args.no_whole,
                          links=not args.no_links, seed=args.seed, second_window=_windows(args),
                          probes=args.probes)
        print(f"{name}: {len(g.ops)} ops, {r.unique_signatures} signatures, {len(segs or [])} segments: "
              f"measured {r.measured}, cached {r.cached}, unsupported {r.unsupported}, failed {r.failed}, "
              f"second windows {r.second_windows} ({r.slow_first_windows} slow first) "
              f"in {time.time() - t0:.0f}s {r.problems[:2]}", flush=True)
    manifest_path = Path(str(args.db) + ".variants.json")
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}

    def sampled(base, share, wide=False):  # variants around ``base``'s signatures, ``share`` drawn at random
        return lambda n: sample_variants(base, n=n, seed=args.seed, random_share=share, wide=wide,
                                         family_weights=WIDE_FAMILY_WEIGHTS if wide else None)

    # (bank name, how many, draw(n) -> specs); a bank asked for 0 is left out
    banks = [(f"variants-{g.name}", args.variants, sampled(list(g.ops), 0.0)) for g in graphs]
    banks += [("variants-random", args.random_variants, sampled([], 1.0)),
              ("variants-wide", args.wide_variants, sampled([], 1.0, wide=True)),
              ("variants-convs", args.conv_variants, lambda n: conv_variants(n, seed=args.seed)),
              ("variants-light", args.light_variants,
               lambda n: light_variants(n, seed=args.seed, max_channels=args.light_max_channels)),
              ("variants-grouped", args.grouped_variants, lambda n: grouped_variants(n, seed=args.seed)),
              ("variants-balanced", args.balanced_grouped_variants,
               lambda n: balanced_grouped_variants(n, seed=args.seed))]
    for name, n, draw in banks:
        if not n:
            continue
        t0 = time.time()
        specs = draw(n)
        res = profile_variants(targets, args.db, specs=specs, seed=args.seed, name=name, progress=False,
                               second_window=_windows(args), probes=args.probes)
        # every draw of a bank stays listed, so an evaluation names the model of each of their rows (a
        # second draw replacing the first left the first one's rows nameless: kept in every fold, a
        # per-model bank's with them); a draw of the same seed extends (so replaces) the earlier one
        manifest[name] = [d for d in _draws(manifest.get(name)) if d["seed"] != args.seed] + [
            {"seed": args.seed, "specs": specs}]
        manifest_path.write_text(json.dumps(manifest))
        print(f"{name}: {len(specs)} variants, {sum(r.measured for _, r in res)} measured, "
              f"{sum(r.cached for _, r in res)} cached in {time.time() - t0:.0f}s", flush=True)
    return 0


def variant_bank_graphs(db: str) -> list:
    """The variant bank graphs recorded next to the store by ``profile`` (rebuilt from their specs)."""
    from costmodels.sampler import variant_graphs

    path = Path(str(db) + ".variants.json")
    if not path.exists():
        return []
    return [g for name, v in json.loads(path.read_text()).items() for d in _draws(v)
            for g in variant_graphs(d["specs"], name=name, seed=d["seed"])]


def _draws(entry) -> list[dict]:
    """The draws of one bank in the manifest: a list, or one draw as sessions before 24 wrote it."""
    if entry is None:
        return []
    return [entry] if isinstance(entry, dict) else list(entry)


def _targets(args) -> list[str] | None:
    """The target names asked for (``--targets``), canonical; None = every target of the store."""
    if not args.targets:
        return None
    from placer.devices import make_target

    return [make_target(t).name for t in args.targets.split(",")]


def _data(args, siblings: bool = True):
    """The store's rows of the targets asked for (and of their one-thread siblings: costmodels.sibling)."""
    from costmodels.store import training_data_from_store

    graphs = [zoo_graph(n) for n in args.models.split(",")]
    banks = variant_bank_graphs(args.db)
    return training_data_from_store(args.db, graphs=graphs + banks, targets=_targets(args), siblings=siblings,
                                    drift=not getattr(args, "no_drift", False),
                                    pace=not getattr(args, "no_pace", False)), graphs


def cmd_eval(args) -> int:
    from costmodels.evaluate import leave_one_model_out, write_report

    data, graphs = _data(args)
    print(f"store: {len(data.ops)} op rows, {len(data.partitions)} partitions, targets {data.target_names()}, "
          f"models {data.model_names()}", flush=True)
    t0 = time.time()
    fit_kw = {"tune_trials": args.tune_trials, "seed": args.seed}
    if args.affine_weight is not None:  # the op model's second prior (costmodels.op_affine) weighed otherwise
        fit_kw["op_params"] = {"affine_weight": args.affine_weight}
    targets = _targets(args) or data.target_names()  # the siblings the data holds too are priors, not scored
    res = leave_one_model_out(data, [g.name for g in graphs], targets, fit_kw=fit_kw, progress=True)
    res.settings.update(db=str(args.db), command=" ".join(sys.argv), eval_seconds=round(time.time() - t0, 1))
    from costmodels.evaluate import sibling_line

    print(sibling_line(res), flush=True)
    if not args.no_drift:
        from placer.profile import ProfileStore
        from placer.profile.drift import session_factors

        with ProfileStore(args.db, readonly=True) as st:
            for t in targets:
                f = session_factors(st, t)
                if f:
                    print(f"session factors {t}: " + ", ".join(f"{s} {v:.3f}" for s, v in sorted(f.items())),
                          flush=True)
    if args.retest_db:
        from costmodels.evaluate import held_out_against, repeatability
        from costmodels.store import training_data_from_store

        retest = training_data_from_store(args.retest_db, graphs=graphs, targets=targets, siblings=False,
                                          pace=not args.no_pace)
        res.settings["repeatability"] = rep = repeatability(data, retest)
        scales = {t: r["scale"] for t, r in rep.items()}
        res.settings["held_out_vs_second"] = held_out_against(res, retest, scales)
    path = write_report(res, args.out)
    print(path.read_text())
    return 0


def cmd_merge(args) -> int:
    """Copy the targets, op measurements, their signatures and the probes of ``--targets`` from
    ``--from`` into ``--db``: two placer stores of one schema version; a target ``--db`` already has
    is refused (rows are never mixed into a target's own), and so is one ``--from`` lacks."""
    import sqlite3

    from placer.profile import ProfileStore

    names = _targets(args)
    for path in (args.db, args.source):
        if not Path(path).is_file():
            raise SystemExit(f"merge: {path}: no such profile store")
    with ProfileStore(args.db, readonly=True) as a, ProfileStore(args.source, readonly=True) as b:
        if a.schema_version() != b.schema_version():
            raise SystemExit(f"merge: {args.db} is schema version {a.schema_version()}, {args.source} "
                             f"{b.schema_version()}")
    dst = sqlite3.connect(args.db)
    try:
        dst.execute("ATTACH DATABASE ? AS src", (str(args.source),))
        have = {n for (n,) in dst.execute("SELECT name FROM main.targets")}
        if clash := sorted(set(names) & have):
            raise SystemExit(f"merge: {args.db} already has targets {clash}; nothing copied")
        found = dict(dst.execute("SELECT name, hash FROM src.targets"))
        if missing := sorted(set(names) - set(found)):
            raise SystemExit(f"merge: {args.source} has no targets {missing}; nothing copied")
        hashes = [found[n] for n in names]
        marks = ",".join("?" * len(hashes))
        tcols = "hash, name, kind, runtime, fingerprint, created"
        scols = "key, kind, op_type, signature, flops, bytes, weight_bytes, created"
        mcols = "key, kind, target, status, reason, median_ms, net_ms, p10_ms, p90_ms, n, timestamp, meta"
        pcols = "session, key, target, median_ms, timestamp"
        with dst:
            dst.execute(f"INSERT INTO main.targets ({tcols}) SELECT {tcols} FROM src.targets "
                        f"WHERE hash IN ({marks})", hashes)
            dst.execute(f"INSERT OR IGNORE INTO main.signatures ({scols}) SELECT {scols} FROM src.signatures "
                        f"WHERE key IN (SELECT key FROM src.measurements WHERE target IN ({marks}))", hashes)
            n = dst.execute(f"INSERT INTO main.measurements ({mcols}) SELECT {mcols} FROM src.measurements "
                            f"WHERE target IN ({marks})", hashes).rowcount
            dst.execute(f"INSERT INTO main.probes ({pcols}) SELECT {pcols} FROM src.probes "
                        f"WHERE target IN ({marks})", hashes)
    finally:
        dst.close()
    print(f"merge: {n} measurements of {', '.join(names)} copied from {args.source} into {args.db}")
    return 0


def cmd_export(args) -> int:
    data, graphs = _data(args, siblings=False)  # the models' rows and those of the banks sampled around them
    names = {g.name for g in graphs}
    keep_ops = [r for r in data.ops if r.models]
    data.ops = keep_ops
    data.partitions = [p for p in data.partitions if p.model in names]
    used = {r.key for r in keep_ops} | {k for p in data.partitions for k in p.op_keys}
    data.signatures = {k: v for k, v in data.signatures.items() if k in used}
    data.to_json(args.out)
    print(f"wrote {args.out}: {len(data.ops)} op rows, {len(data.partitions)} partitions, "
          f"fingerprint {data.fingerprint()}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("profile")
    pp.add_argument("--db", required=True)
    pp.add_argument("--models", default=DEFAULT_MODELS)
    pp.add_argument("--targets", default=DEFAULT_TARGETS)
    pp.add_argument("--segments", type=int, default=40, help="chain segments per model (0: none)")
    pp.add_argument("--max-len", type=int, default=5)
    pp.add_argument("--variants", type=int, default=0, help="variants sampled around each model's signatures")
    pp.add_argument("--random-variants", type=int, default=0, help="variants drawn at random per op family")
    pp.add_argument("--wide-variants", type=int, default=0,
                    help="variants drawn from the wide size prior (costmodels.sampler.random_spec(wide=True)), "
                         "convolutions weighted up (WIDE_FAMILY_WEIGHTS)")
    pp.add_argument("--conv-variants", type=int, default=0,
                    help="convolutions of the usual sizes, at most 0.4 GFLOP each (costmodels.sampler.conv_variants)")
    pp.add_argument("--light-variants", type=int, default=0,
                    help="cheap ops (element-wise, Identity/Dropout/Sum, movement, pooling, concat, "
                         "norms) from the wide size prior, at most 1M elements a tensor "
                         "(costmodels.sampler.light_variants)")
    pp.add_argument("--light-max-channels", type=int, default=1024,
                    help="the light bank's channel bound (1024: the banks of sessions 24-26)")
    pp.add_argument("--grouped-variants", type=int, default=0,
                    help="grouped convolutions that are not depthwise, 2-32 groups, mostly 1x1 "
                         "(costmodels.sampler.grouped_variants)")
    pp.add_argument("--balanced-grouped-variants", type=int, default=0,
                    help="grouped convolutions with as many channels a group out as in, within 4x, mostly "
                         "1x1 (costmodels.sampler.balanced_grouped_variants)")
    pp.add_argument("--probes", type=int, default=0,
                    help="measure the anchors and up to N stored ops again in each campaign, so that rows of "
                         "different sessions are put on one scale (placer.profile.drift)")
    pp.add_argument("--no-whole", action="store_true")
    pp.add_argument("--no-links", action="store_true")
    pp.add_argument("--seed", type=int, default=0)
    pp.add_argument("--one-window", action="store_true",
                    help="measure every target once (no second window; before session 10, multi-thread "
                         "targets were measured so)")
    pp.add_argument("--all-windows", action="store_true",
                    help="a second window for every one-thread measurement, with no probation (session "
                         "36's experiment on a host in slow spells)")
    pp.set_defaults(func=cmd_profile)
    pe = sub.add_parser("eval")
    pe.add_argument("--db", required=True)
    pe.add_argument("--models", default=DEFAULT_MODELS)
    pe.add_argument("--targets", default=None)
    pe.add_argument("--out", required=True)
    pe.add_argument("--tune-trials", type=int, default=0)
    pe.add_argument("--retest-db", default=None, help="a second profile of the same models (noise floor)")
    pe.add_argument("--affine-weight", type=float, default=None,
                    help="OpLatencyModel's affine_weight (default: its own; 0 = the roofline prior alone)")
    pe.add_argument("--seed", type=int, default=0)
    pe.add_argument("--no-drift", action="store_true",
                    help="read rows as stored, without dividing them by their block's factor (a session "
                         "or campaign: placer.profile.drift)")
    pe.add_argument("--no-pace", action="store_true",
                    help="read rows without dividing them by the host's pace measured beside each "
                         "(placer.profile.pace)")
    pe.set_defaults(func=cmd_eval)
    pm = sub.add_parser("merge")
    pm.add_argument("--db", required=True, help="the store the rows are copied into")
    pm.add_argument("--from", dest="source", required=True, help="the store the rows are copied from")
    pm.add_argument("--targets", required=True, help="the targets whose rows are copied")
    pm.set_defaults(func=cmd_merge)
    px = sub.add_parser("export")
    px.add_argument("--db", required=True)
    px.add_argument("--models", required=True)
    px.add_argument("--targets", default=None)
    px.add_argument("--out", required=True)
    px.set_defaults(func=cmd_export)
    args = p.parse_args(argv)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # an application's choice: costmodels leaves it alone
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
