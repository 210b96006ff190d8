"""Shared helpers: synthetic training data with a known cost law (fast, no profiling)."""

from __future__ import annotations

import numpy as np
from costmodels.data import LinkRow, OpRow, PartitionRow, TrainingData
from costmodels.features import signature_key

TARGETS = ("fast@cpu:t1", "slow@cpu:t1")


def conv_sig(c: int, k: int, h: int, kernel: int = 3) -> dict:
    return {"op_type": "Conv", "attrs": {"kernel_shape": [kernel, kernel], "pads": [kernel // 2] * 4},
            "inputs": [{"shape": [1, c, h, h], "dtype": "float32"},
                       {"shape": [k, c, kernel, kernel], "dtype": "float32", "const": True}],
            "outputs": [{"shape": [1, k, h, h], "dtype": "float32"}]}


def relu_sig(c: int, h: int) -> dict:
    return {"op_type": "Relu", "inputs": [{"shape": [1, c, h, h], "dtype": "float32"}],
            "outputs": [{"shape": [1, c, h, h], "dtype": "float32"}]}


def lrn_sig(c: int, h: int) -> dict:
    return {"op_type": "LRN", "attrs": {"size": 5}, "inputs": [{"shape": [1, c, h, h], "dtype": "float32"}],
            "outputs": [{"shape": [1, c, h, h], "dtype": "float32"}]}


def law_ms(sig: dict, target: str) -> float:
    """The synthetic cost law: overhead + flops / peak + bytes / bandwidth."""
    from costmodels.features import normalize_signature

    s = normalize_signature(sig)
    peak, bw, ov = (20e9, 10e9, 0.004) if target == TARGETS[0] else (5e9, 4e9, 0.010)
    return ov + 1e3 * (s["flops"] / peak + (s["bytes_in"] + s["bytes_out"] + s["weight_bytes"]) / bw)


def make_data(seed: int = 0, noise: float = 0.02) -> TrainingData:
    """Three 'models' of convs and relus on two targets; LRN unsupported on the slow target; chained
    partitions measured at 0.7x the isolated sum (the fusion the correction should learn)."""
    rng = np.random.default_rng(seed)
    data = TrainingData()
    models = {"m_a": (8, 16, 32), "m_b": (24, 48, 96), "m_c": (12, 40, 80)}
    for m, chans in models.items():
        keys = []
        for c in chans:
            for h in (7, 14, 28, 56):
                for sig in (conv_sig(c, c, h), conv_sig(c, 2 * c, h, 1), relu_sig(c, h), lrn_sig(c, h)):
                    key = signature_key(sig)
                    data.add_signature(key, sig)
                    keys.append(key)
                    for t in TARGETS:
                        ms = law_ms(sig, t) * float(np.exp(rng.normal(0, noise)))
                        if sig["op_type"] == "LRN" and t == TARGETS[1]:
                            ms = float("inf")
                        data.ops.append(OpRow(t, key, ms, (m,)))
        for t in TARGETS:
            lat = {r.key: r.latency_ms for r in data.ops if r.target == t}
            ov = 0.004 if t == TARGETS[0] else 0.010
            ok = [k for k in keys if np.isfinite(lat[k])]
            for _ in range(15):
                ks = tuple(rng.choice(ok, size=int(rng.integers(2, 5)), replace=False))
                net = sum(max(lat[k] - ov, 0.1 * lat[k]) for k in ks)
                data.partitions.append(PartitionRow(t, ks, ov + 0.7 * net, 1e5, "segment", m))
    data.overheads_ms = {TARGETS[0]: 0.004, TARGETS[1]: 0.010}
    data.links = [LinkRow(TARGETS[0], TARGETS[1], n, 0.02 + n * 2e-7) for n in (1e3, 1e5, 1e6, 4e6)]
    data.targets = {t: {"kind": t.split("@")[0]} for t in TARGETS}
    return data


