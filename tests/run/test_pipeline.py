"""Pipeline executor: order, numerics over 100 requests, clean failure of a stage, replicated stages."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from mz_models import (
    FAIL_VALUE,
    SLEEPS,
    chain_model,
    graph_of,
    lpnorm_model,
    overlapping_sleeps,
    register_test_targets,
    zoo_graph,
)

from placer.errors import PlacerError
from placer.materialize import materialize
from placer.run import PipelineExecutor, PipelineStopped, StageError, compare, random_inputs
from placer.run.numerics import ReferenceRunner


def _placer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("placer-")]


@pytest.mark.slow
def test_two_stage_pipeline_keeps_order_and_matches_the_reference_over_100_requests():
    g = zoo_graph("squeezenet")
    half = len(g.ops) // 2
    stage_of = {op.id: int(op.index >= half) for op in g.ops}
    asg = {op.id: ("onnxruntime@cpu0" if stage_of[op.id] == 0 else "openvino@cpu1") for op in g.ops}
    mat = materialize(g, asg, stage_of=stage_of)
    assert [s.cores for s in mat.stage_config.stages] == [(0,), (1,)]
    reqs = [random_inputs(g, seed) for seed in range(100)]
    with PipelineExecutor(mat, queue_size=2) as pe:
        res = pe.run(reqs, warmup=2)
    assert res.ok and len(res.outputs) == 100
    ref = ReferenceRunner(g.model)
    for i, (feeds, out) in enumerate(zip(reqs, res.outputs)):
        rep = compare(out, ref.run(feeds))
        assert rep.passed, f"request {i}: {rep.summary()}"
    m = res.measurement
    assert m.n_requests == 100 and m.throughput_rps > 0
    assert [p.partition for p in m.partitions] == [p.id for p in mat.partitions]
    assert not _placer_threads()


def _flaky_pipeline():
    register_test_targets()
    g = graph_of(chain_model(6, shape=(1, 4, 8, 8)))
    stage_of = {op.id: op.index // 2 for op in g.ops}
    targets = ["flaky", "onnxruntime", "openvino"]  # flaky reads x: a request fails when x[0] == FAIL_VALUE
    asg = {op.id: targets[stage_of[op.id]] for op in g.ops}
    return g, materialize(g, asg, stage_of=stage_of)


def test_a_failing_stage_fails_its_request_names_the_stage_and_stops_cleanly():
    g, mat = _flaky_pipeline()
    reqs = [random_inputs(g, s) for s in range(30)]
    reqs[10]["x"][0, 0, 0, 0] = FAIL_VALUE
    pe = PipelineExecutor(mat, queue_size=2)
    pe.start()
    res = pe.run(reqs, warmup=1)
    assert not res.ok
    err = res.errors[10]
    assert isinstance(err, StageError) and err.stage == 0 and err.request == 10
    assert "stage 0" in str(err) and "flaky" in str(err) and "injected failure" in str(err)
    ref = ReferenceRunner(g.model)
    for i in range(10):  # earlier requests complete, in order, correctly
        assert res.errors[i] is None and compare(res.outputs[i], ref.run(reqs[i])).passed
    for i in range(11, 30):  # later requests are failed, not run
        assert res.outputs[i] is None and isinstance(res.errors[i], PipelineStopped)
        assert "stage 0 failed on request 10" in str(res.errors[i])
    assert res.measurement.n_failed == 20
    # stopped: all threads joined, further runs refused
    assert pe.alive_threads == 0 and not _placer_threads()
    with pytest.raises(PlacerError, match="closed"):
        pe.run(reqs[:2])
    with pytest.raises(StageError, match="stage 0"):
        res.raise_first()


def test_a_stage_that_cannot_build_its_sessions_fails_every_request_without_hanging():
    g = graph_of(lpnorm_model())
    stage_of = {op.id: (0 if op.index < 2 else 1) for op in g.ops}
    # stage 1 on TVM, which has no LpNormalization converter
    asg = {op.id: ("onnxruntime" if stage_of[op.id] == 0 else "tvm-llvm") for op in g.ops}
    mat = materialize(g, asg, stage_of=stage_of)
    reqs = [random_inputs(g, s) for s in range(5)]
    with PipelineExecutor(mat) as pe:
        res = pe.run(reqs, warmup=0)
    assert isinstance(res.errors[0], StageError) and res.errors[0].stage == 1
    assert "could not build its sessions" in str(res.errors[0]) and "LpNormalization" in str(res.errors[0])
    assert all(isinstance(e, PipelineStopped) for e in res.errors[1:])
    assert not _placer_threads()


def test_single_stage_pipeline_matches_sequential_outputs():
    g = graph_of(chain_model(4))
    mat = materialize(g, {op.id: "openvino" for op in g.ops}, stage_of={op.id: 0 for op in g.ops})
    reqs = [random_inputs(g, s) for s in range(10)]
    with PipelineExecutor(mat, queue_size=1) as pe:
        res = pe.run(reqs, warmup=0)
    ref = ReferenceRunner(g.model)
    assert all(compare(o, ref.run(r)).passed for o, r in zip(res.outputs, reqs))
    assert np.isfinite(res.measurement.latency_p90_ms)


# ---- replicated stages (stage config ``replicas``) ---------------------------------------------------
two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="replicas on cores 0 and 1 need 2 cores")
REPLICAS = {0: [[0], [1]]}


def _whole(g, target, **kw):
    return materialize(g, {op.id: target for op in g.ops}, stage_of={op.id: 0 for op in g.ops}, **kw)


@two_cores
@pytest.mark.parametrize("target", ["onnxruntime:t1", "openvino:t1"])
def test_replicated_stage_returns_every_output_in_request_order(target):
    g = zoo_graph("squeezenet") if target.startswith("openvino") else graph_of(chain_model(6))
    mat = _whole(g, target, replicas=REPLICAS)
    assert mat.stage_config.stages[0].workers == ((0,), (1,))
    n = 60 if target.startswith("openvino") else 200
    reqs = [random_inputs(g, seed) for seed in range(n)]
    with PipelineExecutor(mat, queue_size=1) as pe:
        assert sorted(_placer_threads()) == ["placer-stage0.0", "placer-stage0.1"]
        res = pe.run(reqs, warmup=2)
    assert res.ok and len(res.outputs) == n
    ref = ReferenceRunner(g.model)
    for i, (feeds, out) in enumerate(zip(reqs, res.outputs)):  # distinct inputs: a swap would show
        rep = compare(out, ref.run(feeds))
        assert rep.passed, f"request {i}: {rep.summary()}"
    m = res.measurement
    assert m.n_requests == n and m.throughput_rps > 0 and m.latency_p50_ms > 0
    served = m.extra["replica_requests"]["0"]
    assert len(served) == 2 and sum(served) == n
    assert m.extra["stages"][0]["replicas"] == [[0], [1]]
    # per-partition timings: every call of either replica
    assert [(p.partition, p.n) for p in m.partitions] == [("p0", n)]
    assert not _placer_threads()


@two_cores
def test_an_openvino_replica_thread_keeps_its_own_core():
    """A 1-thread OpenVINO target built in a thread pinned to one core of a 2-core process (a replica
    worker) must leave OpenVINO's own pinning off: with it on, every replica ran on the first core
    (two replicas measured 1.01x one). The whole-machine target keeps OpenVINO's default pinning."""
    from placer.devices import make_target

    assert "ENABLE_CPU_PINNING" not in make_target(f"openvino:t{len(os.sched_getaffinity(0))}").config()
    seen = {}

    def build(core):
        os.sched_setaffinity(0, {core})
        t = make_target("openvino:t1")
        seen[core] = (t.owns_machine(), t.config().get("ENABLE_CPU_PINNING"), t.fingerprint_hash())

    for core in sorted(os.sched_getaffinity(0))[:2]:
        th = threading.Thread(target=build, args=(core,))
        th.start()
        th.join()
    # the same fingerprint as in this unpinned thread: the profiles stored for the target still apply
    unpinned = make_target("openvino:t1").fingerprint_hash()
    assert seen and all(v == (False, False, unpinned) for v in seen.values()), seen


@two_cores
def test_replicated_later_stage_keeps_order_and_closes_all_workers():
    g = graph_of(chain_model(6))
    stage_of = {op.id: int(op.index >= 3) for op in g.ops}
    asg = {op.id: ("onnxruntime" if stage_of[op.id] == 0 else "openvino") for op in g.ops}
    mat = materialize(g, asg, stage_of=stage_of, replicas={1: [[0], [1]]})
    reqs = [random_inputs(g, seed) for seed in range(80)]
    pe = PipelineExecutor(mat, queue_size=2)
    pe.start()
    assert pe.alive_threads == 3 and sorted(_placer_threads()) == ["placer-stage0", "placer-stage1.0",
                                                                      "placer-stage1.1"]
    ref = ReferenceRunner(g.model)
    for _ in range(2):  # two batches on the same workers
        res = pe.run(reqs, warmup=1)
        assert res.ok and all(compare(o, ref.run(r)).passed for o, r in zip(res.outputs, reqs))
    assert sum(res.measurement.extra["replica_requests"]["1"]) == 80
    pe.close()  # a stop token per worker, passed on stage by stage: every thread joins
    assert pe.alive_threads == 0 and not _placer_threads()
    with pytest.raises(PlacerError, match="closed"):
        pe.run(reqs[:2])


@two_cores
def test_replicas_serve_requests_at_once():
    """Two replicas of a stage that sleeps 50 ms per call serve calls at the same time (their sleeps
    overlap: checked on the recorded intervals, not on a wall-clock total)."""
    register_test_targets()
    g = graph_of(chain_model(2))
    reqs = [random_inputs(g, s) for s in range(12)]
    SLEEPS.clear()
    with PipelineExecutor(_whole(g, "sleepy", replicas=REPLICAS)) as pe:
        res = pe.run(reqs, warmup=0)
    assert res.ok and all(n > 0 for n in res.measurement.extra["replica_requests"]["0"])
    assert len(SLEEPS) == 12 and overlapping_sleeps() > 0


@two_cores
def test_a_failing_replica_follows_the_error_policy():
    register_test_targets()
    g = graph_of(chain_model(6, shape=(1, 4, 8, 8)))
    stage_of = {op.id: int(op.index >= 3) for op in g.ops}
    asg = {op.id: ("flaky" if stage_of[op.id] == 0 else "onnxruntime") for op in g.ops}
    mat = materialize(g, asg, stage_of=stage_of, replicas={0: [[0], [1]]})
    reqs = [random_inputs(g, s) for s in range(40)]
    reqs[10]["x"][0, 0, 0, 0] = FAIL_VALUE
    reqs[13]["x"][0, 0, 0, 0] = FAIL_VALUE  # a later failure (possibly seen first by the other replica)
    pe = PipelineExecutor(mat, queue_size=2)
    res = pe.run(reqs, warmup=1)
    err = res.errors[10]
    assert isinstance(err, StageError) and err.stage == 0 and err.request == 10 and "injected failure" in str(err)
    ref = ReferenceRunner(g.model)
    for i in range(10):
        assert res.errors[i] is None and compare(res.outputs[i], ref.run(reqs[i])).passed
    for i in range(11, 40):
        assert res.outputs[i] is None and isinstance(res.errors[i], PipelineStopped)
        assert "stage 0 failed on request 10" in str(res.errors[i])
    assert res.measurement.n_failed == 30
    assert pe.alive_threads == 0 and not _placer_threads()


@two_cores
def test_a_replicated_stage_that_cannot_build_its_sessions_fails_every_request():
    g = graph_of(lpnorm_model())
    stage_of = {op.id: (0 if op.index < 2 else 1) for op in g.ops}
    asg = {op.id: ("onnxruntime" if stage_of[op.id] == 0 else "tvm-llvm") for op in g.ops}
    mat = materialize(g, asg, stage_of=stage_of, replicas={1: [[0], [1]]})
    reqs = [random_inputs(g, s) for s in range(6)]
    with PipelineExecutor(mat) as pe:
        res = pe.run(reqs, warmup=0)
    assert isinstance(res.errors[0], StageError) and res.errors[0].stage == 1
    assert "could not build its sessions" in str(res.errors[0]) and "replica" in str(res.errors[0])
    assert all(isinstance(e, PipelineStopped) for e in res.errors[1:])
    assert not _placer_threads()


@two_cores
def test_a_consumer_gets_each_request_s_own_outputs_without_a_copy():
    """``run(consume=fn)``: the last stage hands each request's outputs to ``fn`` in its worker, as
    views of OpenVINO's own output buffers (no copy), and the result keeps what ``fn`` returned, in
    request order: every request's outputs are its own (two replicas, distinct inputs, no result
    overwritten by the replica's next request before its consumer read it)."""
    g = graph_of(chain_model(6))
    reqs = [random_inputs(g, s) for s in range(24)]
    ref = ReferenceRunner(g.model)
    seen: dict[int, bool] = {}

    def consume(rid, outputs):
        (y,) = outputs.values()
        seen[rid] = y.flags.owndata  # a copy owns its data; a view of the request's buffer does not
        return compare(outputs, ref.run(reqs[rid])).passed, float(np.sum(y))

    with PipelineExecutor(_whole(g, "openvino:t1", replicas=REPLICAS)) as pe:
        res = pe.run(reqs, warmup=2, consume=consume)
        kept = pe.run(reqs[:2], warmup=0)  # without a consumer: arrays the caller owns, as before
    assert res.ok and res.measurement.n_requests == 24
    assert [ok for ok, _ in res.outputs] == [True] * 24
    sums = [float(np.sum(next(iter(ref.run(r).values())))) for r in reqs]
    assert [s for _, s in res.outputs] == pytest.approx(sums, rel=1e-4)
    assert sorted(seen) == list(range(24)) and not any(seen.values())
    assert all(next(iter(o.values())).flags.owndata for o in kept.outputs)


def test_a_consumer_that_raises_fails_its_request_and_stops_the_later_ones():
    g = graph_of(chain_model(2))
    reqs = [random_inputs(g, s) for s in range(12)]

    def consume(rid, outputs):
        if rid == 5:
            raise ValueError("no room for this one")
        return rid

    pe = PipelineExecutor(_whole(g, "onnxruntime:t1"))
    res = pe.run(reqs, warmup=0, consume=consume)
    assert res.outputs[:5] == [0, 1, 2, 3, 4] and all(e is None for e in res.errors[:5])
    assert isinstance(res.errors[5], PlacerError) and "request 5" in str(res.errors[5])
    assert "ValueError: no room for this one" in str(res.errors[5])
    assert all(isinstance(e, PipelineStopped) for e in res.errors[6:])
    assert res.measurement.n_failed == 7
    assert pe.alive_threads == 0 and not _placer_threads()


def test_stages_with_gaps_in_their_indices_are_named_by_their_own_index():
    """stage_of may skip indices ({0, 2}): a failure, the stage times and the replica counts name the
    stage as the partitions and the stage config do (they named its position, 1)."""
    register_test_targets()
    g = graph_of(chain_model(4, shape=(1, 4, 8, 8)))
    stage_of = {op.id: 0 if op.index < 2 else 2 for op in g.ops}
    asg = {op.id: ("onnxruntime" if stage_of[op.id] == 0 else "flaky") for op in g.ops}
    mat = materialize(g, asg, stage_of=stage_of)
    assert [s.index for s in mat.stage_config.stages] == [0, 2]
    reqs = [random_inputs(g, s) for s in range(4)]
    with PipelineExecutor(mat) as pe:
        ok = pe.run(reqs[:2], warmup=0)
        assert set(ok.measurement.extra["stage_median_ms"]) == {"0", "2"}
        assert set(ok.measurement.extra["replica_requests"]) == {"0", "2"}
        with pytest.raises(PlacerError, match="no requests"):
            pe.run([], warmup=1)
    bad = graph_of(chain_model(4, shape=(1, 4, 8, 8)))
    # the flaky target fails a request whose first element is FAIL_VALUE when it reads x: put it first
    asg = {op.id: ("flaky" if op.index < 2 else "onnxruntime") for op in bad.ops}
    mat = materialize(bad, asg, stage_of={op.id: 1 if op.index < 2 else 3 for op in bad.ops})
    reqs[1]["x"][0, 0, 0, 0] = FAIL_VALUE
    with PipelineExecutor(mat) as pe:
        res = pe.run(reqs, warmup=0)
    err = res.errors[1]
    assert isinstance(err, StageError) and err.stage == 1 and "stage 1 failed on request 1" in str(err)


def test_runs_from_two_threads_each_get_their_own_outputs_and_close_during_a_run_ends_it():
    """Two run() calls at once: the last stage delivered to whichever batch was current, so one call
    returned the other's outputs and the other never returned. Now they run one after the other. And
    close() from another thread while a run waits ended the workers but left run() waiting forever."""
    g = graph_of(chain_model(4, shape=(1, 4, 8, 8)))
    stage_of = {op.id: op.index // 2 for op in g.ops}
    mat = materialize(g, {op.id: "onnxruntime" for op in g.ops}, stage_of=stage_of)
    batches = [[random_inputs(g, 100 * b + i) for i in range(60)] for b in range(2)]
    results: list = [None, None]
    with PipelineExecutor(mat, queue_size=2) as pe:
        threads = [threading.Thread(target=lambda b=b: results.__setitem__(b, pe.run(batches[b], warmup=0)))
                   for b in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        ref = ReferenceRunner(g.model)
        for b in range(2):
            assert results[b].ok
            for feeds, out in zip(batches[b], results[b].outputs):
                assert compare(out, ref.run(feeds)).passed
    # close() while a run is in flight: run() raises instead of waiting on workers that are gone
    pe = PipelineExecutor(mat, queue_size=2)
    pe.start()
    real_batch, calls = pe._batch, []

    def batch_then_close(requests, consume=None):
        calls.append(1)
        if len(calls) == 2:  # between the warm-up batch and the measured one
            closer = threading.Thread(target=pe.close)
            closer.start()
            closer.join(timeout=60)
        return real_batch(requests, consume)

    pe._batch = batch_then_close
    outcome: list = []

    def runner():
        try:
            outcome.append(pe.run(batches[0], warmup=2))
        except PlacerError as exc:
            outcome.append(exc)

    t = threading.Thread(target=runner)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive(), "run() still waiting after close()"
    assert isinstance(outcome[0], PlacerError) and "closed" in str(outcome[0])
