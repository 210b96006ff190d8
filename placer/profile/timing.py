"""Timing a compiled model the way the executor runs it.

The executor calls ``CompiledModel.run(feeds)`` in-process on numpy arrays, so that is exactly
what is timed here: one ``time.perf_counter_ns`` pair around each call, garbage collection off
while sampling. Sampling goes in batches until the median is stable:

1. warm-up: at least ``warmup_runs`` calls and at least ``warmup_s`` of calls (capped);
2. batches of calls, each sized to take about ``batch_s``; after each batch the median of all
   samples so far is compared with the previous batch's median;
3. stop when ``n >= min_samples`` and the median moved less than ``rel_tol`` (relative), or when
   ``max_time_s`` of samples were taken and ``n >= hard_min_samples`` (slow ops: an 85 ms TVM
   conv gets 3 samples), or at ``max_samples``.

Results are a :class:`TimingStats`: median, p10/p90, MAD (all ms) and n.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping

import numpy as np

from placer.devices.timing import TimingConfig, TimingStats, stats_from_samples
from placer.errors import ProfileError

__all__ = ["TimingConfig", "TimingStats", "random_feeds", "stats_from_samples", "time_callable", "time_compiled"]


def time_callable(fn: Callable[[], object], config: TimingConfig | None = None, *, prewarmed_s: float = 0.0,
                  between: Callable[[], object] | None = None) -> TimingStats:
    """Time ``fn()`` (one call = one sample) until its median is stable; see the module doc.

    ``prewarmed_s``: the caller already ran ``fn`` once and it took this long; a slow first call
    (>= ``warmup_s``) then counts as the warm-up (a 3 s whole model is not run twice for nothing).
    ``between``: called after each batch, untimed (the profiler times the host's pace there, over the
    same window as the samples: :mod:`placer.profile.pace`).
    """
    cfg = config or TimingConfig()
    pc = time.perf_counter_ns
    gc_was_enabled = gc.isenabled()
    # no collection first: the worker collects after each measurement (the compiled model freed),
    # and a full collection in a process with a large heap (an in-process campaign) cost 50 ms a call
    gc.disable()
    try:
        # warm-up
        warm = 0
        t_start = pc()
        last = 0
        skip = prewarmed_s >= max(cfg.warmup_s, 0.05) and cfg.warmup_runs <= 1
        if skip:
            warm, last = 1, int(prewarmed_s * 1e9)
        while not skip:
            t0 = pc()
            fn()
            last = pc() - t0
            warm += 1
            elapsed = (pc() - t_start) / 1e9
            if warm >= cfg.warmup_runs and (elapsed >= cfg.warmup_s or elapsed >= cfg.max_time_s / 2):
                break
        per_call_s = max(last / 1e9, 1e-7)
        batch = int(min(max(cfg.batch_s / per_call_s, 1), 10000))
        samples: list[int] = []
        prev_med = None
        stable = False
        sample_ns = 0
        while True:
            for _ in range(batch):
                t0 = pc()
                fn()
                dt = pc() - t0
                samples.append(dt)
                sample_ns += dt
                if len(samples) >= cfg.max_samples:
                    break
            if between is not None:
                between()
            n = len(samples)
            med = float(np.median(samples))
            sample_s = sample_ns / 1e9
            if prev_med is not None and n >= cfg.min_samples and sample_s >= cfg.min_time_s:
                if abs(med - prev_med) <= cfg.rel_tol * prev_med:
                    stable = True
                    break
            if n >= cfg.max_samples:
                break
            if sample_s >= cfg.max_time_s and n >= cfg.hard_min_samples:
                break
            prev_med = med
            # slow ops: one call per batch so that the time cap is honoured
            remaining = max(cfg.max_time_s - sample_s, 0.0)
            batch = int(min(max(min(cfg.batch_s, remaining) / max(med / 1e9, 1e-7), 1), 10000))
        return stats_from_samples(samples, warm, sample_ns / 1e9, stable)
    finally:
        if gc_was_enabled:
            gc.enable()


def time_compiled(compiled, feeds: Mapping[str, np.ndarray], config: TimingConfig | None = None, *,
                  prewarmed_s: float = 0.0, between: Callable[[], object] | None = None) -> TimingStats:
    """Time ``compiled.run_shared(feeds)`` (a :class:`placer.devices.CompiledModel`; outputs left in the
    runtime's buffers, as the executor hands them to the next partition), or ``run`` where a
    compiled model has no ``run_shared``.

    A compiled model may time itself: if it has ``time_run(feeds, config) -> TimingStats`` (remote
    TVM RPC targets: the device's own clock, transport left out), that is used instead.
    """
    own = getattr(compiled, "time_run", None)
    if callable(own):
        return own(feeds, config or TimingConfig())
    run = getattr(compiled, "run_shared", compiled.run)
    return time_callable(lambda: run(feeds), config, prewarmed_s=prewarmed_s, between=between)


def random_feeds(model, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs for every non-constant graph input of an ONNX model.

    Floats: standard normal; integers: zeros (valid indices for Gather/embeddings, harmless
    elsewhere); bools: random. Shapes must be static (the graph layer binds every dim).
    """
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        shape = []
        for d in tt.shape.dim:
            if not d.HasField("dim_value"):
                raise ProfileError(f"input {vi.name!r} of {model.graph.name!r} has a symbolic dim; bind it with --shape")
            shape.append(int(d.dim_value))
        if dtype.kind == "f":
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[vi.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feeds[vi.name] = np.zeros(shape, dtype=dtype)
    return feeds
