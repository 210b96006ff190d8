"""From a real (tiny) profile store to a saved model: store reader, `placer fit`, variants."""

from __future__ import annotations

import math

import numpy as np
import pytest

from costmodels.cost_model import CostModel
from costmodels.store import training_data_from_store
from placer.profile.pace import PACE_ENV

# two cheap targets (ONNX Runtime at 1 and 2 threads): the reader does not care which runtimes
TARGETS = ["onnxruntime", "onnxruntime:t2"]
ORT, OV = "onnxruntime@cpu:t1", "onnxruntime@cpu:t2"


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory):
    from placer import zoo
    from placer.graph import build_graph, load_model
    from placer.profile.campaign import profile_graph
    from placer.profile.keys import chain_segments
    from placer.profile.timing import TimingConfig

    db = tmp_path_factory.mktemp("store") / "p.db"
    g = build_graph(load_model(zoo.tiny_branchy()))
    quick = TimingConfig(max_time_s=0.05, min_time_s=0.01, rel_tol=0.1, contended_attempts=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(PACE_ENV, "1")  # the pace beside each row, as by default (the suite turns it off: conftest)
        profile_graph(g, TARGETS, db, isolate=False, progress=False, segments=chain_segments(g, max_len=2)[:4],
                      timing=quick, link_sizes=[1 << 10, 1 << 16, 1 << 20])
    return db, g


def test_store_rows_become_training_data(tiny_store):
    db, g = tiny_store
    data = training_data_from_store(db, graphs=[g])
    assert data.target_names() == [ORT, OV]
    assert {r.key for r in data.ops} == {op.signature.hash for op in g.ops}
    assert all(r.models == (g.name,) for r in data.ops)
    assert set(data.overheads_ms) == {ORT, OV}
    kinds = {p.kind for p in data.partitions}
    assert kinds == {"segment", "model"}
    assert all(p.model == g.name for p in data.partitions)
    assert {(r.src, r.dst) for r in data.links} == {(ORT, OV), (OV, ORT)}
    # the op rows are the store's medians at their target's usual pace (the campaign timed the host's
    # pace beside each: placer.profile.pace), unsupported/failed ones inf; as stored without the pace
    from placer.profile.pace import pace_factors
    from placer.profile.store import ProfileStore

    stored = training_data_from_store(db, graphs=[g], pace=False)
    as_stored = {(r.target, r.key): r.latency_ms for r in stored.ops}
    with ProfileStore(db, readonly=True) as st:
        factors = pace_factors(st.measurements())
        assert {t for t, _ in factors} == {st.target_hash(ORT)}  # timed beside one-thread rows only
        for r in data.ops:
            m = st.get(r.key, r.target)
            assert as_stored[(r.target, r.key)] == (m.median_ms if m.ok else math.inf)
            f = factors.get((m.target, r.key), 1.0)
            assert r.latency_ms == pytest.approx(m.median_ms / f if m.ok else math.inf)


def test_a_two_thread_targets_rows_come_with_its_one_thread_siblings_as_a_prior(tiny_store):
    from costmodels.train import fit_cost_model

    db, g = tiny_store
    data = training_data_from_store(db, graphs=[g], targets=[OV])
    assert data.target_names() == [ORT, OV]
    assert training_data_from_store(db, graphs=[g], targets=[OV], siblings=False).target_names() == [OV]
    cm = fit_cost_model(data, [OV], op_params={"n_estimators": 20}, cv_metrics=False)
    assert cm.targets == [OV] and cm.card["targets"][OV]["sibling"] == ORT
    assert cm.op_models[OV].sibling_prior_.sibling.target == ORT


def test_placer_fit_cli_saves_a_loadable_model(tiny_store, tmp_path, capsys):
    from placer.cli import main

    db, g = tiny_store
    out = tmp_path / "model"
    # without cross-validated metrics (--cv-folds 0: the fit alone; the corpus's control fits with them)
    assert main(["fit", "--db", str(db), "--out", str(out), "--cv-folds", "0"]) == 0
    said = capsys.readouterr().out
    assert "saved costmodel-" in said and "cv log-MAE" not in said
    cm = CostModel.load(out)
    assert not any("cv_log_mae" in c.get("metrics", {}) for c in cm.card["targets"].values())
    costs, exact = cm.predict_ops(g, [ORT, OV], return_measured=True)
    assert exact.all() and costs.shape == (len(g.ops), 2)
    # the exact costs are the store's net costs
    from placer.profile.store import ProfileStore

    with ProfileStore(db, readonly=True) as st:
        store_costs = st.op_costs(g, [ORT, OV])
    for i, op in enumerate(g.ops):
        for j, t in enumerate((ORT, OV)):
            assert costs[i, j] == pytest.approx(store_costs[(op.id, t)], abs=1e-9)
    # the hand-off between two ONNX Runtime sessions is near 0 once the call overhead is taken out
    assert cm.transfer.links_[f"{ORT}->{OV}"]["n_points"] == 3
    assert 0.0 <= cm.transfer_ms(1 << 20, ORT, OV) < 1.0


def test_placer_fit_reports_user_errors_in_one_line(tmp_path, capsys, tiny_store):
    from placer.cli import main

    assert main(["fit", "--db", str(tmp_path / "missing.db"), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("placer fit: error:") and "missing.db" in err and "\n" not in err
    db, _ = tiny_store
    fit = ["fit", "--db", str(db), "--out", str(tmp_path / "m")]
    for folds, trials in (("1", "0"), ("0", "1")):  # no fold count to cross-validate with
        assert main(fit + ["--cv-folds", folds, "--tune-trials", trials]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("placer fit: error:") and "--cv-folds" in err and "\n" not in err, err
    for folds in ("21", "-1"):  # out of range: argparse's usage and error, exit status 2
        with pytest.raises(SystemExit) as stop:
            main(fit + ["--cv-folds", folds])
        assert stop.value.code == 2 and "--cv-folds" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_variants_build_and_profile(tmp_path):
    from costmodels.sampler import FAMILIES, bank_model, profile_variants, random_spec, sample_variants
    from costmodels.sampler import spec_from_signature, variant_signatures

    rng = np.random.default_rng(0)
    specs = [random_spec(f, rng) for f in FAMILIES]
    for spec, sig in zip(specs, variant_signatures(specs)):
        back = spec_from_signature(sig)
        assert back is not None and back["family"] == spec["family"]
    near = sample_variants(variant_signatures(specs), n=30, seed=1, random_share=0.0)
    assert len(near) == 30 and len({str(s) for s in near}) == 30
    import onnx

    onnx.checker.check_model(bank_model(near), full_check=True)
    from placer.profile.timing import TimingConfig

    db = tmp_path / "v.db"
    res = profile_variants(["onnxruntime"], db, n=6, seed=2, isolate=False, progress=False,
                           timing=TimingConfig(max_time_s=0.03, min_time_s=0.01, rel_tol=0.2, contended_attempts=1))
    assert sum(r.measured for _, r in res) >= 6
    graphs = [g for g, _ in res]
    assert [g.name for g in graphs] == ["variants-0"]
    data = training_data_from_store(db, graphs=graphs)
    assert len(data.ops) == 6 and all(r.models == ("variants-0",) for r in data.ops)


def test_wide_variants_reach_grouped_unpadded_and_odd_sized_convs_within_the_flop_cap():
    import onnx

    from costmodels.sampler import FAMILIES, WIDE_MAX_FLOPS, bank_model, sample_variants, spec_from_signature
    from costmodels.sampler import variant_signatures

    specs = sample_variants(n=300, seed=3, random_share=1.0, wide=True,
                            family_weights={"conv": 5.0, "lrn": 0.0})
    assert len(specs) == 300 and len({str(s) for s in specs}) == 300
    convs = [s for s in specs if s["family"] == "conv"]
    assert not any(s["family"] == "lrn" for s in specs)
    assert len(convs) > len(specs) / 4  # 5/15 of the draws, against 1/12 at equal weights
    assert any(1 < s["group"] < s["C"] for s in convs)  # grouped, neither dense nor depthwise
    assert any(s.get("pad") == 0 for s in convs)
    assert any(s["C"] % 8 for s in convs) and any(s["H"] not in (7, 14, 28, 56, 112) for s in convs)
    for s in convs:
        assert s["C"] % s["group"] == 0 and s["K"] % s["group"] == 0
        out = -(-s["H"] // s["stride"])
        assert 2 * s["C"] // s["group"] * s["K"] * s["kernel"] ** 2 * out * out <= WIDE_MAX_FLOPS
    onnx.checker.check_model(bank_model(convs[:40]), full_check=True)
    for spec, sig in zip(convs[:40], variant_signatures(convs[:40])):
        back = spec_from_signature(sig)
        assert (back["C"], back["K"], back["group"], back["kernel"]) == (spec["C"], spec["K"], spec["group"],
                                                                          spec["kernel"])
    with pytest.raises(ValueError, match="family_weights"):
        sample_variants(n=5, random_share=1.0, family_weights={f: 0.0 for f in FAMILIES})


def test_conv_variants_are_usual_sized_convolutions_within_the_flop_cap_and_seeded():
    from costmodels.sampler import WIDE_MAX_FLOPS, _conv_flops, conv_variants

    bank = conv_variants(40, seed=4)
    assert len(bank) == 40 and bank == conv_variants(40, seed=4) and bank != conv_variants(40, seed=5)
    assert all(s["family"] == "conv" and _conv_flops(s) <= WIDE_MAX_FLOPS for s in bank)
    assert all(s["group"] in (1, s["C"]) and s["H"] in (7, 14, 28, 56, 112) for s in bank)
    assert conv_variants(20, seed=4) == bank[:20]  # a larger bank extends a smaller one of the same seed


def test_light_variants_are_small_cheap_ops_including_identity_dropout_and_sum_and_seeded():
    import onnx

    from costmodels.sampler import LIGHT_MAX_ELEMS, bank_model, light_variants, spec_from_signature
    from costmodels.sampler import variant_signatures

    bank = light_variants(120, seed=4)
    assert len(bank) == 120 and bank == light_variants(120, seed=4) and bank != light_variants(120, seed=5)
    assert light_variants(60, seed=4) == bank[:60]  # a larger bank extends a smaller one of the same seed
    assert not any(s["family"] in ("conv", "matmul", "gemm") for s in bank)
    ops = {s.get("op") for s in bank if s["family"] == "eltwise"}
    assert {"Identity", "Dropout"} <= ops and any(s["family"] == "sum" for s in bank)
    onnx.checker.check_model(bank_model(bank), full_check=True)
    sigs = variant_signatures(bank)
    for spec, sig in zip(bank, sigs):
        assert all(int(np.prod(t["shape"])) <= LIGHT_MAX_ELEMS for t in sig["inputs"] + sig["outputs"])
        if spec["family"] in ("sum", "eltwise"):
            assert spec_from_signature(sig) == {k: v for k, v in spec.items()}
    assert {s["op_type"] for s in sigs} >= {"Identity", "Dropout", "Sum", "Transpose", "Reshape"}


def test_balanced_grouped_variants_have_groups_as_wide_out_as_in_and_are_seeded():
    import onnx

    from costmodels.sampler import (BALANCED_MAX_CHANNELS, WIDE_MAX_FLOPS, _conv_flops,
                                    balanced_grouped_variants, bank_model, spec_from_signature,
                                    variant_signatures)

    bank = balanced_grouped_variants(60, seed=5)
    assert len(bank) == 60 and bank == balanced_grouped_variants(60, seed=5)
    assert bank != balanced_grouped_variants(60, seed=6)
    assert balanced_grouped_variants(30, seed=5) == bank[:30]  # a larger bank extends a smaller one
    assert all(s["family"] == "conv" and _conv_flops(s) <= WIDE_MAX_FLOPS for s in bank)
    assert all(s["group"] > 1 and s["C"] % s["group"] == 0 and s["K"] % s["group"] == 0
               and max(s["C"], s["K"]) <= BALANCED_MAX_CHANNELS for s in bank)
    # a group's output channels are 1/4 to 4 times its input channels, rounded to whole channels
    assert all(0.2 <= s["K"] / s["C"] <= 4 for s in bank) and any(s["K"] == s["C"] for s in bank)
    assert sum(s["kernel"] == 1 for s in bank) > len(bank) / 2 and {1, 3} == {s["kernel"] for s in bank}
    onnx.checker.check_model(bank_model(bank), full_check=True)
    for spec, sig in zip(bank[:10], variant_signatures(bank[:10])):
        back = spec_from_signature(sig)
        assert (back["C"], back["K"], back["group"]) == (spec["C"], spec["K"], spec["group"])


def test_grouped_variants_are_grouped_convolutions_that_are_not_depthwise_and_seeded():
    import onnx
    import onnxruntime as ort

    from costmodels.sampler import WIDE_MAX_FLOPS, _conv_flops, bank_model, grouped_variants
    from costmodels.sampler import spec_from_signature, spec_model, variant_signatures

    bank = grouped_variants(60, seed=5)
    assert len(bank) == 60 and bank == grouped_variants(60, seed=5) and bank != grouped_variants(60, seed=6)
    assert grouped_variants(30, seed=5) == bank[:30]  # a larger bank extends a smaller one of the same seed
    assert all(s["family"] == "conv" and _conv_flops(s) <= WIDE_MAX_FLOPS for s in bank)
    # every one grouped, at least two input and one output channel a group: none dense, none depthwise
    assert all(s["group"] > 1 and s["C"] % s["group"] == 0 and s["C"] // s["group"] >= 2
               and s["K"] % s["group"] == 0 for s in bank)
    assert {1, 3} <= {s["kernel"] for s in bank} and {True, False} == {s["bias"] for s in bank}
    onnx.checker.check_model(bank_model(bank), full_check=True)
    for spec, sig in zip(bank[:10], variant_signatures(bank[:10])):
        back = spec_from_signature(sig)
        assert (back["C"], back["K"], back["group"]) == (spec["C"], spec["K"], spec["group"])
    sess = ort.InferenceSession(spec_model(bank[0]).SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.zeros([bank[0]["N"], bank[0]["C"], bank[0]["H"], bank[0]["W"]], np.float32)
    assert sess.run(None, {sess.get_inputs()[0].name: x})[0].shape[1] == bank[0]["K"]


def test_the_light_banks_channel_bound_reaches_a_resnets_last_stage_and_keeps_the_old_draws():
    from costmodels.sampler import WIDE_MAX_CHANNELS, light_variants

    def channels(bank):  # of the 4-d (N, C, H, W) ops: pooling, norms, concat, element-wise
        return [s["C"] for s in bank if "C" in s] + [c for s in bank if "Cs" in s for c in s["Cs"]] + [
            s["shape"][1] for s in bank if s["family"] in ("eltwise", "sum") and len(s["shape"]) == 4]

    assert WIDE_MAX_CHANNELS == 1024
    assert light_variants(80, seed=4, max_channels=1024) == light_variants(80, seed=4)  # the old banks
    assert max(channels(light_variants(400, seed=5))) <= 1024
    assert max(channels(light_variants(400, seed=5, max_channels=4096))) > 2048


def test_light_variants_hold_scalar_operands_and_both_directions_of_a_channel_shuffle():
    # real models hold x * 0.5, x / sqrt(d), x + eps (a scalar constant), and ShuffleNet reshapes
    # 4-d -> 5-d and back; a per-model bank turned a model's scalar operand into a full tensor
    import onnxruntime as ort

    from costmodels.sampler import ELTWISE_BINARY, light_variants, random_spec, spec_from_signature
    from costmodels.sampler import spec_model, variant_signatures

    bank = light_variants(300, seed=4)
    scalar = [s for s in bank if s["family"] == "eltwise" and s.get("other") == []]
    assert scalar and all(s["op"] in ELTWISE_BINARY for s in scalar)
    for spec, sig in zip(scalar[:3], variant_signatures(scalar[:3])):
        assert sig["inputs"][1] == {"shape": [], "dtype": "float32", "const": True}
        assert spec_from_signature(sig) == spec  # a model's scalar op is sampled around as a scalar op
        sess = ort.InferenceSession(spec_model(spec).SerializeToString(), providers=["CPUExecutionProvider"])
        assert [i.shape for i in sess.get_inputs()] == [spec["shape"]]  # the scalar is no graph input
    reshapes = [s for s in bank if s["family"] == "reshape"]
    assert {(4, 5), (5, 4)} <= {(len(s["shape"]), len(s["to"])) for s in reshapes}
    rng = np.random.default_rng(0)
    wide = [random_spec("reshape", rng, wide=True) for _ in range(200)]  # 7 split an odd channel count before
    assert all(np.prod(s["shape"]) == np.prod(s["to"]) for s in reshapes + wide)


class _FakeStore:
    """Duck-typed ProfileStore rows: one target name under two fingerprints (old, new)."""

    def __init__(self):
        sig = {"v": 1, "op_type": "Relu", "domain": "", "version": 14, "attrs": {},
               "inputs": [{"shape": [1, 8], "dtype": "float32", "const": False}],
               "outputs": [{"shape": [1, 8], "dtype": "float32", "const": False}]}
        row = dict(key="k1", kind="op", signature=sig, flops=8.0, bytes=64.0, weight_bytes=0.0, p10_ms=None,
                   p90_ms=None, meta={})
        self.rows = [
            {**row, "target": "old", "target_name": "x@cpu:t1", "status": "ok", "median_ms": 9.0, "timestamp": 3.0},
            {**row, "target": "new", "target_name": "x@cpu:t1", "status": "ok", "median_ms": 1.0, "timestamp": 2.0},
            {**row, "key": "k2", "target": "new", "target_name": "x@cpu:t1", "status": "crash", "median_ms": None,
             "timestamp": 2.0},
            {**row, "key": "k3", "target": "old", "target_name": "x@cpu:t1", "status": "ok", "median_ms": 5.0,
             "timestamp": 1.0},
        ]

    def targets(self):
        return [{"hash": "old", "name": "x@cpu:t1", "fingerprint": {"adapter_version": 1}},
                {"hash": "new", "name": "x@cpu:t1", "fingerprint": {"adapter_version": 2}}]

    def measurements(self, target=None, kind=None, status=None):
        return [r for r in self.rows if kind in (None, r["kind"]) and status in (None, r["status"])
                and (target is None or r["target"] == target)]

    def link_rows(self):
        return []

    def probe_rows(self, target):
        return []


def test_reader_uses_the_newest_fingerprint_and_prices_failures_inf():
    from costmodels.store import _read

    data = _read(_FakeStore(), [], None, all_fingerprints=False)
    assert {r.key: r.latency_ms for r in data.ops} == {"k1": 1.0, "k2": math.inf}
    assert data.targets["x@cpu:t1"]["hash"] == "new"
    mixed = _read(_FakeStore(), [], None, all_fingerprints=True)
    assert {r.key: r.latency_ms for r in mixed.ops} == {"k1": 9.0, "k2": math.inf, "k3": 5.0}


def test_the_reader_takes_the_fingerprint_it_is_given_over_the_newest():
    """A store shared with another runtime version: the newest-registered fingerprint is not the one the
    caller's targets have now; given theirs, the reader trains on their rows (and the store's pricing
    reads the same ones), and on none where the store lacks that fingerprint."""
    from costmodels.store import _read

    old = _read(_FakeStore(), [], None, all_fingerprints=False, fingerprints={"x@cpu:t1": "old"})
    assert {r.key: r.latency_ms for r in old.ops} == {"k1": 9.0, "k3": 5.0}
    assert old.targets["x@cpu:t1"]["hash"] == "old" and old.targets["x@cpu:t1"]["adapter_version"] == 1
    new = _read(_FakeStore(), [], None, all_fingerprints=False, fingerprints={"x@cpu:t1": "new"})
    assert {r.key: r.latency_ms for r in new.ops} == {"k1": 1.0, "k2": math.inf}
    unknown = _read(_FakeStore(), [], None, all_fingerprints=False, fingerprints={"x@cpu:t1": "elsewhere"})
    assert unknown.ops == [] and "x@cpu:t1" not in unknown.targets


def test_rows_measured_in_a_spell_the_pace_saw_are_read_at_the_usual_pace():
    """Two ops of the same signature family: k1 measured while the host ran 2x slow (the anchors timed
    beside it took twice their usual time, and so did k1), the others at the usual pace. Read at pace,
    k1 is what the quiet rows say; as stored (pace=False), it keeps its spell."""
    from costmodels.store import _read

    store = _FakeStore()
    base = {**store.rows[1], "target_name": "x@cpu:t1", "target": "new"}
    store.rows = [{**base, "key": f"q{i}", "median_ms": 1.0, "timestamp": float(i),
                   "meta": {"pace_ms": 0.9}} for i in range(9)]
    store.rows.append({**base, "key": "k1", "median_ms": 2.0, "p10_ms": 1.8, "timestamp": 60.0,
                       "meta": {"pace_ms": 1.8}})
    at_pace = {r.key: r for r in _read(store, [], None, all_fingerprints=False, drift=False).ops}
    assert at_pace["k1"].latency_ms == pytest.approx(1.0) and at_pace["k1"].p10_ms == pytest.approx(0.9)
    assert all(at_pace[f"q{i}"].latency_ms == pytest.approx(1.0) for i in range(9))
    stored = _read(store, [], None, all_fingerprints=False, drift=False, pace=False)
    as_stored = {r.key: r for r in stored.ops}
    assert as_stored["k1"].latency_ms == 2.0
