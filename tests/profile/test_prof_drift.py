"""Sessions and probes: rows of different profiling sessions put on one scale (placer.profile.drift)."""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pytest

from placer.profile import ProfileStore, profile_graph
from placer.profile.anchors import anchor_graph, anchor_model
from placer.profile.drift import (CONTRADICTED, LEGACY, contradicts, drift_scale, fit_session_factors,
                                 row_session, session_factors)


def _observations(factors: dict[str, float], keys_of: dict[str, range], noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    mu = {f"k{i}": float(np.exp(rng.normal(-3, 1))) for i in range(40)}
    return [(s, f"k{i}", mu[f"k{i}"] * factors[s] * float(np.exp(rng.normal(0, noise))))
            for s, keys in keys_of.items() for i in keys]


def test_session_factors_recover_each_sessions_speed_against_the_reference():
    true = {LEGACY: 1.0, "a": 1.045, "b": 0.97, "c": 1.3}
    # a shares keys with the legacy rows, b only with a, c with nobody (its factor stays 1)
    keys_of = {LEGACY: range(0, 30), "a": range(0, 12), "b": range(8, 20), "c": range(35, 40)}
    obs = _observations(true, keys_of, noise=0.01)
    got = fit_session_factors(obs)
    assert got[LEGACY] == 1.0 and got["c"] == 1.0
    assert got["a"] == pytest.approx(1.045, rel=0.01) and got["b"] == pytest.approx(0.97, rel=0.01)
    # another reference rescales every linked session alike
    other = fit_session_factors(obs, reference="a")
    assert other["a"] == 1.0 and other[LEGACY] == pytest.approx(1 / got["a"], rel=1e-6)
    assert other["b"] == pytest.approx(got["b"] / got["a"], rel=1e-6)


def test_a_few_disturbed_measurements_do_not_move_a_session_factor():
    true = {LEGACY: 1.0, "a": 1.04}
    obs = _observations(true, {LEGACY: range(0, 20), "a": range(0, 20)}, noise=0.005)
    clean = fit_session_factors(obs)["a"]
    disturbed = [(s, k, ms * (3.0 if s == "a" and k in ("k1", "k2", "k3") else 1.0)) for s, k, ms in obs]
    assert fit_session_factors(disturbed)["a"] == pytest.approx(clean, rel=0.01)
    assert fit_session_factors([]) == {}
    assert fit_session_factors([("a", "k", math.inf), ("a", "k2", 0.0)]) == {}


def test_row_session_reads_the_meta_and_calls_older_rows_legacy():
    assert row_session({"session": "abc"}) == "abc"
    assert row_session({}) == LEGACY and row_session(None) == LEGACY


def test_a_probe_contradicts_a_row_only_when_faster_beyond_noise_on_the_scale_given():
    # as measured: 1.25x faster is the line (a probe at the row's time or slower never contradicts)
    assert contradicts(0.79, 1.0) and not contradicts(0.81, 1.0) and not contradicts(2.0, 1.0)
    # on one scale: a probe of a session that ran 1.1x slower than the row's block (0.727 on its scale)
    assert contradicts(0.8, 1.0, probe_factor=1.1, row_factor=1.0)  # 0.727 x 1.25 < 1.0
    assert not contradicts(0.79, 1.0, probe_factor=1.0, row_factor=1.3)  # the row's block ran slow
    assert contradicts(0.5, 1.0, 1.0, 1.3) == (0.5 * CONTRADICTED < 1.0 / 1.3)


def test_the_anchors_are_small_independent_ops_of_the_usual_kinds():
    import onnx

    onnx.checker.check_model(anchor_model(), full_check=True)
    g = anchor_graph()
    assert len(g.ops) == len(g.unique_signatures()) == 9
    assert {o.op_type for o in g.ops} >= {"Conv", "MatMul", "Relu", "Add", "Transpose", "MaxPool", "Softmax"}


def test_a_campaign_with_probes_records_them_and_the_training_rows_take_its_session_factor(tmp_path, tiny,
                                                                                          fast_timing):
    """Every row names its campaign's session; a later campaign with probes measures the anchors and
    some stored ops again without touching their rows, and the training data divides each op row by
    its session's factor (or reads it as stored with ``drift=False``)."""
    from costmodels.store import training_data_from_store

    db = tmp_path / "d.db"
    first = profile_graph(tiny, ["onnxruntime"], db, progress=False, links=False, whole_model=False,
                          timing=fast_timing)
    assert first.session and first.probes == 0
    with ProfileStore(db) as st:
        rows = {op.signature.hash: st.get(op.signature.hash, "onnxruntime") for op in tiny.ops}
        assert {row_session(m.meta) for m in rows.values()} == {first.session}
        assert st.probe_rows("onnxruntime") == [] and session_factors(st, "onnxruntime") == {}
    second = profile_graph(tiny, ["onnxruntime"], db, progress=False, links=False, whole_model=False,
                           timing=fast_timing, probes=2)
    # nothing else was measured, unless a probe contradicted its row (a disturbance: then only that row)
    assert second.measured == second.refreshed <= 2 and second.session != first.session
    n_anchors = len(anchor_graph().ops)
    assert second.probes == n_anchors + 2  # the start only
    with ProfileStore(db) as st:
        now = {k: st.get(k, "onnxruntime") for k in rows}
        # a probe never replaces a row; a refreshed row is this session's own measurement
        kept = {k for k, m in now.items() if row_session(m.meta) == first.session}
        assert all(now[k] == rows[k] for k in kept)
        assert all(row_session(now[k].meta) == second.session for k in set(rows) - kept)
        assert len(set(rows) - kept) == second.refreshed
        probes = st.probe_rows("onnxruntime")
        assert {p["session"] for p in probes} == {second.session} and len(probes) == second.probes
        factors = session_factors(st, "onnxruntime")
    # the reference is the session that measured first: the one whose rows were probed
    # (unless a probe refreshed every row the first session had: then this session's alone)
    assert set(factors) == {second.session} | ({first.session} if kept else set())
    assert not kept or factors[first.session] == 1.0
    assert factors[second.session] > 0
    # read without the host's pace each row carries (placer.profile.pace, tested on its own): the drift alone
    scaled = {r.key: r.latency_ms for r in training_data_from_store(db, pace=False).ops}
    raw = {r.key: r.latency_ms for r in training_data_from_store(db, drift=False, pace=False).ops}
    assert set(scaled) == set(raw) == set(rows)
    mine = {p["key"]: p["median_ms"] for p in probes}
    for k, m in now.items():  # as stored, unless a faster probe contradicts the row (see the test below)
        probe, row = mine.get(k, math.inf), m.median_ms
        faster = probe * CONTRADICTED < row
        assert raw[k] == (probe if faster else row)
        probe, row = probe / factors[second.session], row / factors[row_session(m.meta)]
        assert scaled[k] == pytest.approx(probe if faster and probe * CONTRADICTED < row else row, rel=1e-12)


def _conv_rows(rng, n: int, kernel: int = 3) -> list[dict]:
    """Signature rows of ``n`` random convolutions (as the store registers them)."""
    rows = []
    for _ in range(n):
        c, co, hw = (int(rng.integers(16, 65)), int(rng.integers(16, 65)), int(rng.integers(8, 33)))
        sig = {"op_type": "Conv", "attrs": {"kernel_shape": [kernel, kernel]},
               "inputs": [{"shape": [1, c, hw, hw], "dtype": "float32", "const": False},
                          {"shape": [co, c, kernel, kernel], "dtype": "float32", "const": True}],
               "outputs": [{"shape": [1, co, hw, hw], "dtype": "float32", "const": False}]}
        key = f"conv{kernel}-{len(rows)}-{c}-{co}-{hw}"
        rows.append({"key": key, "kind": "op", "op_type": "Conv", "signature": sig,
                     "flops": 2.0 * c * co * kernel * kernel * hw * hw, "bytes": 4.0 * (c + co) * hw * hw})
    return rows


@pytest.mark.parametrize("drift", [True, False])
def test_a_row_a_faster_probe_contradicts_is_read_at_the_probes_time(tmp_path, drift):
    """A row measured in a slow spell (2.5x its op's time, as squeezenet's 1x1 convolutions were at
    two threads in session 26's store) that a later session's probe contradicts beyond noise
    (CONTRADICTED, as measured and on one scale) is read at the probe's time, its spread scaled
    alike: the lower median is kept, as between a measurement's two windows. A probe within noise, a
    slower probe and a failed row leave the row as stored; the count is kept per target. A probe
    that is faster only once its session's factor is applied does not count (k6: equal as measured,
    in a session whose other ops ran 1.3x slower)."""
    from costmodels.store import training_data_from_store
    from costmodels.train import fit_cost_model

    rows = _conv_rows(np.random.default_rng(5), 12)
    db = tmp_path / "p.db"
    slow_session = 1.3  # the probing session ran 1.3x slower as a whole
    probe_ratio = {0: 1 / 2.5, 1: 1 / 1.2, 2: 2.0, 6: 1 / slow_session}  # probe / row on one scale
    with ProfileStore(db) as st:
        st.register_signatures(rows)
        for i, r in enumerate(rows):
            ms = 0.5 + 0.1 * i
            status = "crash" if i == 3 else "ok"
            st.put(r["key"], "onnxruntime", kind="op", status=status,
                   median_ms=ms if status == "ok" else None, net_ms=ms, p10_ms=0.9 * ms, p90_ms=1.2 * ms,
                   n=5, meta={"session": "a"})
            st.add_probe("b", r["key"], "onnxruntime", (ms if i != 3 else 0.1) * slow_session
                         * probe_ratio.get(i, 1.0))
    data = training_data_from_store(db, drift=drift)
    got = {r.key: r for r in data.ops}
    name = data.target_names()[0]
    assert data.read_at_probe == {name: 1}
    k0 = rows[0]["key"]
    expected = 0.5 / 2.5 * (1.0 if drift else slow_session)  # on the first session's scale with drift
    assert got[k0].latency_ms == pytest.approx(expected, rel=1e-9)
    assert (got[k0].p10_ms, got[k0].p90_ms) == pytest.approx((0.9 * expected, 1.2 * expected), rel=1e-9)
    for i in (1, 2, 4, 5, 6):  # within noise of the row, slower, equal on one scale or as measured
        assert got[rows[i]["key"]].latency_ms == pytest.approx(0.5 + 0.1 * i, rel=1e-9)
    assert got[rows[3]["key"]].latency_ms == math.inf
    assert 1 / 1.2 * (1.0 if drift else slow_session) * CONTRADICTED > 1  # k1's probe: within noise
    cm = fit_cost_model(data, [name], op_params={"n_estimators": 10}, cv_metrics=False)
    assert cm.card["targets"][name]["n_read_at_probe"] == 1


def test_twins_put_blocks_that_share_no_key_on_one_scale(tmp_path):
    """Banks of random shapes share no key with the rows stored before them, but near-twin
    signatures: rows stored without a session split at gaps into blocks, and each block's speed
    is fitted from its twins in the others (a block with no twin keeps factor 1)."""
    from costmodels.store import training_data_from_store

    rng = np.random.default_rng(3)
    true = {LEGACY: 1.0, f"{LEGACY}#1": 1.08, "s2": 0.95}
    blocks = {LEGACY: _conv_rows(rng, 40), f"{LEGACY}#1": _conv_rows(rng, 40), "s2": _conv_rows(rng, 40),
              "s3": _conv_rows(rng, 10, kernel=5)}  # another kernel size: no twin anywhere
    db = tmp_path / "twins.db"
    with ProfileStore(db) as st:
        for block, rows in blocks.items():
            st.register_signatures(rows)
            for r in rows:  # a time proportional to the work, a per-shape efficiency, the block's speed
                ms = r["flops"] / 2e7 * float(np.exp(rng.normal(0, 0.05))) * true.get(block, 1.0)
                st.put(r["key"], "onnxruntime", kind="op", status="ok", median_ms=ms, net_ms=ms, n=5,
                       meta={"session": block} if block.startswith("s") else {})
        th = st.target_hash("onnxruntime")
    con = sqlite3.connect(db)  # the two blocks without a session: stored an hour apart
    for i, r in enumerate(blocks[f"{LEGACY}#1"]):
        con.execute("UPDATE measurements SET timestamp = timestamp + 3600 + ? WHERE key=? AND target=?",
                    (i, r["key"], th))
    con.commit()
    con.close()
    with ProfileStore(db, readonly=True) as st:
        scale = drift_scale(st, "onnxruntime")
        alone = drift_scale(st, "onnxruntime", twins=False)
    assert {scale.blocks[r["key"]] for r in blocks[f"{LEGACY}#1"]} == {f"{LEGACY}#1"}
    assert scale.factors[LEGACY] == 1.0 and "s3" not in scale.factors
    assert scale.factors[f"{LEGACY}#1"] == pytest.approx(1.08, rel=0.03)
    assert scale.factors["s2"] == pytest.approx(0.95, rel=0.03)
    assert alone.factors == {}  # no probes, no twins: nothing links the blocks
    raw = {r.key: r.latency_ms for r in training_data_from_store(db, drift=False).ops}
    scaled = {r.key: r.latency_ms for r in training_data_from_store(db).ops}
    for block, rows in blocks.items():
        for r in rows:
            assert scaled[r["key"]] == pytest.approx(raw[r["key"]] / scale.factors.get(block, 1.0), rel=1e-12)


def test_rows_stored_an_hour_ago_are_probed_by_default_and_fresh_ones_are_trusted(tmp_path, tiny,
                                                                                   fast_timing):
    from placer.profile.campaign import AUTO_PROBES, RECHECK_AFTER_S, auto_probes

    db = tmp_path / "auto.db"
    kw = dict(progress=False, links=False, whole_model=False, timing=fast_timing)
    profile_graph(tiny, ["onnxruntime"], db, **kw)
    fresh = profile_graph(tiny, ["onnxruntime"], db, probes=None, **kw)
    assert fresh.probes == 0 and fresh.measured == 0
    with ProfileStore(db) as st:
        th = st.target_hash("onnxruntime")
    con = sqlite3.connect(db)  # the rows were stored an hour and a minute ago
    con.execute("UPDATE measurements SET timestamp = timestamp - ? WHERE target=?",
                (RECHECK_AFTER_S + 60, th))
    con.commit()
    con.close()
    with ProfileStore(db) as st:
        assert auto_probes(st, tiny.unique_signatures(), ["onnxruntime"]) == AUTO_PROBES
        assert auto_probes(st, tiny.unique_signatures(), ["onnxruntime"], now=0.0) == 0
    again = profile_graph(tiny, ["onnxruntime"], db, probes=None, **kw)
    stored_probes = min(AUTO_PROBES, len(tiny.unique_signatures()))
    assert again.probes == len(anchor_graph().ops) + stored_probes  # the start only: nothing else to measure
    assert again.measured == again.refreshed  # a row is measured again only if its probe contradicts it


def test_a_store_from_before_probes_reads_as_having_none(tmp_path):
    db = tmp_path / "old.db"
    with ProfileStore(db):
        pass
    con = sqlite3.connect(db)
    con.execute("DROP TABLE probes")
    con.commit()
    con.close()
    with ProfileStore(db, readonly=True) as st:  # read-only: the table is not created
        assert st.probe_rows("onnxruntime") == [] and session_factors(st, "onnxruntime") == {}
    with ProfileStore(db) as st:  # opened for writing, it gets the table
        st.add_probe("s", "k", "onnxruntime", 1.0)
        assert [p["key"] for p in st.probe_rows("onnxruntime")] == ["k"]


def test_a_stored_row_a_probe_contradicts_is_measured_again_and_replaced(tmp_path, tiny, fast_timing):
    db = tmp_path / "r.db"
    first = profile_graph(tiny, ["onnxruntime"], db, progress=False, links=False, whole_model=False,
                          timing=fast_timing)
    bad = tiny.ops[0].signature.hash
    with ProfileStore(db) as st:
        good = st.get(bad, "onnxruntime").median_ms
        th = st.target_hash("onnxruntime")
    con = sqlite3.connect(db)  # a row stored in a disturbance: ten times its time
    con.execute("UPDATE measurements SET median_ms = median_ms * 10 WHERE key=? AND target=?", (bad, th))
    con.commit()
    con.close()
    again = profile_graph(tiny, ["onnxruntime"], db, progress=False, links=False, whole_model=False,
                          timing=fast_timing, probes=len(tiny.unique_signatures()))
    assert again.refreshed >= 1 and again.measured == again.refreshed
    with ProfileStore(db) as st:
        row = st.get(bad, "onnxruntime")
    assert row_session(row.meta) == again.session != first.session
    assert row.median_ms < 5 * good


def test_a_refresh_that_fails_leaves_the_row_it_was_to_replace(tmp_path, tiny, fast_timing, monkeypatch):
    """A row a probe contradicts is measured again; when that measurement fails (a timeout, a worker
    that died: the op's probe had just run) the row stays as stored, counted as failed: it was replaced
    by the failure, and the op then cost inf on that target until a run with --retry-failed."""
    from placer.profile.engine import Engine
    from placer.profile.supervisor import WorkerDied

    db = tmp_path / "f.db"
    profile_graph(tiny, ["onnxruntime"], db, progress=False, links=False, whole_model=False,
                  timing=fast_timing)
    bad = tiny.ops[0].signature.hash
    con = sqlite3.connect(db)  # a row stored in a disturbance: ten times its time
    con.execute("UPDATE measurements SET median_ms = median_ms * 10 WHERE key=?", (bad,))
    con.commit()
    con.close()
    with ProfileStore(db) as st:
        before = st.get(bad, "onnxruntime")
    run_one = Engine._run_one

    def refresh_times_out(self, worker, task, force=False, keep=None):
        if force:  # the refresh: its measurement gets no answer
            def no_answer(*args, **kwargs):
                raise WorkerDied("timeout", "no answer in 10 s")
            monkeypatch.setattr(self, "_measure_quietly", no_answer)
        return run_one(self, worker, task, force=force, keep=keep)

    monkeypatch.setattr(Engine, "_run_one", refresh_times_out)
    again = profile_graph(tiny, ["onnxruntime"], db, progress=False, links=False, whole_model=False,
                          timing=fast_timing, probes=len(tiny.unique_signatures()))
    assert again.refreshed >= 1 and again.failed == again.refreshed and again.measured == 0
    with ProfileStore(db) as st:
        assert st.get(bad, "onnxruntime") == before


def test_a_probe_slower_than_its_row_leaves_the_row(tmp_path, tiny, fast_timing):
    """A probe that ran in a spell is slower than the row: measured again in that spell the row
    would be stored slow, so it stays (and the reader keeps the lower of the two)."""
    from costmodels.store import training_data_from_store

    db = tmp_path / "s.db"
    profile_graph(tiny, ["onnxruntime"], db, progress=False, links=False, whole_model=False,
                  timing=fast_timing)
    fast = tiny.ops[0].signature.hash
    con = sqlite3.connect(db)  # the row a tenth of its time: every probe of it comes out 10x slower
    con.execute("UPDATE measurements SET median_ms = median_ms / 10 WHERE key=?", (fast,))
    con.commit()
    con.close()
    with ProfileStore(db) as st:
        before = st.get(fast, "onnxruntime")
    again = profile_graph(tiny, ["onnxruntime"], db, progress=False, links=False, whole_model=False,
                          timing=fast_timing, probes=len(tiny.unique_signatures()))
    with ProfileStore(db) as st:
        assert st.get(fast, "onnxruntime") == before
        assert any(p["key"] == fast for p in st.probe_rows("onnxruntime"))
    assert again.measured == again.refreshed  # nothing else to measure
    got = {r.key: r.latency_ms for r in training_data_from_store(db, drift=False, pace=False).ops}
    assert got[fast] == before.median_ms


def test_twins_of_different_sizes_are_compared_at_the_classs_own_elasticity(tmp_path):
    """On a two-thread target time grows slower than work (a small op pays the pool's hand-off):
    divided by the work itself, a block of smaller ops than its twins came out slow. The twins are
    compared at the slope of log time on log work measured inside the blocks."""
    rng = np.random.default_rng(5)
    big, small = _conv_rows(rng, 60), _conv_rows(rng, 60)
    for r in small:  # the same classes and near-twin shapes, the spatial size 0.8x: 0.64x the work
        hw = r["signature"]["inputs"][0]["shape"][2]
        new = max(int(round(hw * 0.8)), 2)
        for t in r["signature"]["inputs"][:1] + r["signature"]["outputs"]:
            t["shape"][2] = t["shape"][3] = new
        r["flops"] *= (new / hw) ** 2
        r["key"] += "-small"
    true = {"s1": 1.0, "s2": 1.1}
    db = tmp_path / "elastic.db"
    with ProfileStore(db) as st:
        for block, rows in (("s1", big), ("s2", small)):
            st.register_signatures(rows)
            for r in rows:  # time grows as the square root of the work
                ms = 0.02 * math.sqrt(r["flops"] / 1e6) * float(np.exp(rng.normal(0, 0.02))) * true[block]
                st.put(r["key"], "onnxruntime", kind="op", status="ok", median_ms=ms, net_ms=ms, n=5,
                       meta={"session": block})
    with ProfileStore(db, readonly=True) as st:
        factors = drift_scale(st, "onnxruntime").factors
    assert factors["s1"] == 1.0
    assert factors["s2"] == pytest.approx(1.1, rel=0.03)  # per unit of work it was 1.1 / 0.8 = 1.375


def test_twins_read_signatures_whose_optional_inputs_are_omitted(tmp_path):
    """An op that omits an optional input (a Resize without its roi: ``Resize(x, "", scales)``) is
    stored with None in its signature's inputs; the twins read it as a missing input (`placer tune` on
    a model with such a Resize stopped with a TypeError when the cost model was fitted)."""
    rng = np.random.default_rng(7)
    blocks = {"s1": _conv_rows(rng, 12), "s2": _conv_rows(rng, 12)}
    true = {"s1": 1.0, "s2": 1.3}
    for rows in blocks.values():
        for r in rows:
            r["signature"]["inputs"].append(None)  # an omitted optional input
    db = tmp_path / "omitted.db"
    with ProfileStore(db) as st:
        for block, rows in blocks.items():
            st.register_signatures(rows)
            for r in rows:
                ms = 1e-6 * r["flops"] * float(np.exp(rng.normal(0, 0.02))) * true[block]
                st.put(r["key"], "onnxruntime", kind="op", status="ok", median_ms=ms, net_ms=ms, n=5,
                       meta={"session": block})
    with ProfileStore(db, readonly=True) as st:
        factors = drift_scale(st, "onnxruntime").factors
    assert factors["s1"] == 1.0
    assert factors["s2"] == pytest.approx(1.3, rel=0.05)


def test_twins_of_ops_on_scalars_only_and_of_other_dtypes(tmp_path):
    """An op whose every tensor is a scalar (rank 0: an index counter's ``Add``) has no dimension to
    compare; two such signatures in different blocks are twins (the distance over no dimension is 0; it
    raised a ValueError, stopping `placer fit` and `tune`). Twins have one dtype: an int64 and a float32
    ``Add`` of scalars are not one kernel measured twice."""
    from placer.profile.drift import twin_observations

    def scalar_add(key: str, dtype: str, ms: float) -> dict:
        t = {"shape": [], "dtype": dtype, "const": False}
        return {"key": key, "op_type": "Add", "median_ms": ms, "bytes": 24.0, "flops": 1.0,
                "signature": {"op_type": "Add", "attrs": {}, "inputs": [dict(t), dict(t, const=True)],
                              "outputs": [dict(t)]}}

    rows = [scalar_add("a1", "int64", 0.010), scalar_add("a2", "int64", 0.012),
            scalar_add("f1", "float32", 0.011)]
    blocks = {"a1": "s1", "a2": "s2", "f1": "s2"}
    obs = twin_observations(rows, blocks)
    assert [(block, pair) for block, pair, _ in sorted(obs)] == [("s1", "twin0"), ("s2", "twin0")]
    assert [v for _, _, v in sorted(obs)] == pytest.approx([0.010, 0.012])  # beta 1: per unit of work


def test_a_target_that_refuses_an_anchors_op_is_not_sent_that_anchor(tmp_path, tiny):
    """The anchors a campaign probes on a target are those its static support check accepts
    (``Target.supports`` answers ``(supported, why)``: the tuple itself was read as the answer, always
    true, so a target that refuses an op type was sent it at the start and end of every campaign)."""
    from placer.devices import make_targets
    from placer.profile.campaign import _probe_tasks

    target = make_targets(["onnxruntime"])[0]
    target.supports = lambda op_type, domain="": (op_type != "Softmax", "no Softmax kernel")
    with ProfileStore(tmp_path / "a.db") as st:
        tasks = _probe_tasks(st, tiny, tiny.unique_signatures(), [target], 0, "s", 0, 10.0)[target.name]
    anchors = anchor_graph().ops
    assert {t.label.split()[1] for t in tasks} == {op.op_type for op in anchors} - {"Softmax"}
    assert len(tasks) == sum(op.op_type != "Softmax" for op in anchors)
