"""The learned cost model inside `placer tune`: fitted on the store, fed measured partitions between
trials, saved, carried over to the next run; the `costs` knob prices a problem with it."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from placer import api
from placer.tune import learned, space

TARGETS = ["onnxruntime", "openvino"]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, warm_tiny_store):
    """zoo:tiny prepared on TARGETS from a copy of the run's warm store (the module's own; the tune runs
    start from copies of their own)."""
    db = warm_tiny_store(tmp_path_factory.mktemp("learned") / "p.db")
    return api.prepare("zoo:tiny", targets=TARGETS, db=db)


@pytest.fixture(scope="module")
def _fitted(ctx):
    return learned.fit_or_update(ctx, None)


@pytest.fixture
def fitted(_fitted):
    """``learned.fit_or_update(ctx, None)``, fitted once for the module: each test changes its own copy."""
    return copy.deepcopy(_fitted)


def test_tune_saves_the_model_and_the_next_run_carries_its_partitions(warm_tiny_store, tmp_path):
    from placer.tune import tune

    db, cm_dir = warm_tiny_store(tmp_path / "profiles.db"), tmp_path / "cm"
    first = tune("zoo:tiny", targets=TARGETS, db=db, out_dir=tmp_path / "a", n_trials=2, cost_model_dir=cm_dir)
    info = first.extra["cost_model"]
    assert (cm_dir / "card.json").is_file() and info["dir"] == str(cm_dir)
    assert info["tune_partitions"] > 0 and info["carried_over"] == 0  # the baselines' partitions at least
    assert set(info["partition_ratio"]) == {"onnxruntime@cpu:t1", "openvino@cpu:t1"}
    assert all(r > 0 for r in info["partition_ratio"].values())
    second = tune("zoo:tiny", targets=TARGETS, db=db, out_dir=tmp_path / "b", n_trials=1, cost_model_dir=cm_dir)
    assert second.extra["cost_model"]["carried_over"] == info["tune_partitions"]
    assert second.extra["cost_model"]["tune_partitions"] > info["tune_partitions"]
    summary = json.loads((tmp_path / "b" / "tune.json").read_text())
    assert summary["extra"]["cost_model"]["carried_over"] == info["tune_partitions"]
    report = (tmp_path / "b" / "report.md").read_text()
    assert "Learned cost model" in report and "Fusion segments" in report


def test_no_cost_model_dir_means_no_learned_model(warm_tiny_store, tmp_path):
    from placer.tune import tune

    db = warm_tiny_store(tmp_path / "p.db")
    res = tune("zoo:tiny", targets=TARGETS, db=db, out_dir=tmp_path / "o", n_trials=1,
               cost_model_dir=None)
    assert res.extra["cost_model"] is None
    assert not (tmp_path / "costmodel").exists()


def test_a_corrupt_saved_model_is_refitted_not_loaded(ctx, fitted, tmp_path):
    cm = fitted
    learned.feed(cm, [{"partition": "p0", "target": ctx.problem.targets[0], "ops": list(ctx.problem.ops[:2]),
                       "n_inputs": 1, "predicted_ms": 0.01, "measured_ms": 0.05}], ctx.graph)
    cm.save(tmp_path / "cm")
    tables = tmp_path / "cm" / "tables.json"
    tables.write_text(tables.read_text().replace("0.05", "0.06", 1))  # no longer matches its card's hash
    said = []
    again = learned.fit_or_update(ctx, tmp_path / "cm", said.append)
    assert any("not loaded" in m for m in said), said
    assert learned.tune_records(again) == []
    # ... and not written over either: the damaged model is the user's to look at
    before = _files(tmp_path / "cm")
    assert learned.save(again, tmp_path / "cm", said.append) is None
    assert "left intact" in said[-1] and _files(tmp_path / "cm") == before
    assert learned.save(again, tmp_path / "elsewhere", said.append) == tmp_path / "elsewhere"


def test_a_newer_models_directory_is_left_intact(ctx, fitted, tmp_path):
    """A model of a newer format version (a newer placer's) is neither loaded nor overwritten: not by
    tune's save, not by a plain save, not by `placer fit --out`."""
    from costmodels.errors import CostModelError
    from placer.cli import main

    cm = fitted
    cm.save(tmp_path / "cm")
    card = json.loads((tmp_path / "cm" / "card.json").read_text())
    from costmodels.persistence import VERSION

    (tmp_path / "cm" / "card.json").write_text(json.dumps({**card, "version": VERSION + 1}))
    before = _files(tmp_path / "cm")
    said = []
    again = learned.fit_or_update(ctx, tmp_path / "cm", said.append)
    assert f"format version {VERSION + 1}" in said[0] and "not overwritten" in said[0], said
    assert learned.save(again, tmp_path / "cm", said.append) is None
    with pytest.raises(CostModelError, match="refusing to overwrite"):
        again.save(tmp_path / "cm")
    assert main(["fit", "--db", str(ctx.store.path), "--out", str(tmp_path / "cm")]) == 2
    assert _files(tmp_path / "cm") == before


def test_a_run_on_fewer_targets_carries_the_partitions_measured_on_the_others(ctx, fitted, tmp_path):
    """The saved model is shared by every tune on that store: a run on a subset of the targets carries
    the partitions earlier runs measured on the others and saves them back (they had been dropped, and
    no store holds them); its own targets' records are carried as before."""
    cm = fitted
    t = ctx.problem.targets[0]
    ours = [{"partition": f"p{i}", "target": t, "ops": list(ctx.problem.ops[:2]), "n_inputs": 1,
             "predicted_ms": 0.01, "measured_ms": 0.05 + 0.01 * i} for i in range(2)]
    assert learned.feed(cm, ours, ctx.graph) == 2
    theirs = [{"target": "openvino@cpu:t2", "op_types": ["Conv", "Relu"], "isolated_ms": [0.02, 0.01],
               "overhead_ms": 0.01, "measured_ms": 0.04, "origin": learned.ORIGIN}]
    assert cm.add_partition_measurements(theirs) == 1
    assert "openvino@cpu:t2" not in ctx.problem.targets
    cm.save(tmp_path / "cm")
    again = learned.fit_or_update(ctx, tmp_path / "cm")
    carried = learned.tune_records(again)
    got = sorted((r["target"], m) for r, m in carried)
    assert [target for target, _ in got] == sorted([t, t, "openvino@cpu:t2"])
    assert [m for _, m in got] == pytest.approx([m for _, m in sorted(
        [(t, 0.05), (t, 0.06), ("openvino@cpu:t2", 0.04)])])
    assert again.card["tune_partitions_carried"] == 3
    assert learned.save(again, tmp_path / "cm") is not None
    assert learned.fit_or_update(ctx, tmp_path / "cm").card["tune_partitions_carried"] == 3


def test_an_older_placers_model_is_refitted_and_replaced(ctx, fitted, tmp_path):
    from costmodels.persistence import VERSION

    cm = fitted
    t = ctx.problem.targets[0]
    rows = [{"partition": f"p{i}", "target": t, "ops": list(ctx.problem.ops[:2]), "n_inputs": 1,
             "predicted_ms": 0.01, "measured_ms": 0.05 + 0.01 * i} for i in range(3)]
    assert learned.feed(cm, rows, ctx.graph) == 3
    cm.save(tmp_path / "cm")
    card = json.loads((tmp_path / "cm" / "card.json").read_text())
    (tmp_path / "cm" / "card.json").write_text(json.dumps({**card, "version": VERSION - 1}))
    said = []
    again = learned.fit_or_update(ctx, tmp_path / "cm", said.append)
    assert "saved by an older placer" in said[0] and f"format version {VERSION - 1}" in said[0], said
    # what tune measured into the older model comes along (read from its tables, nothing else of it)
    assert "its 3 partition(s) measured by earlier tune runs carried over" in said[0], said
    assert sorted(m for _, m in learned.tune_records(again)) == pytest.approx([0.05, 0.06, 0.07])
    assert learned.save(again, tmp_path / "cm", said.append) is not None
    assert json.loads((tmp_path / "cm" / "card.json").read_text())["version"] == VERSION
    assert "not loaded" not in " ".join(str(m) for m in said)
    assert learned.fit_or_update(ctx, tmp_path / "cm", said.append).card["tune_partitions_carried"] == 3


def test_an_older_models_tables_that_fail_their_hash_carry_nothing(ctx, fitted, tmp_path):
    from costmodels.persistence import VERSION

    cm = fitted
    row = {"partition": "p0", "target": ctx.problem.targets[0], "ops": list(ctx.problem.ops[:2]),
           "n_inputs": 1, "predicted_ms": 0.01, "measured_ms": 0.05}
    assert learned.feed(cm, [row], ctx.graph) == 1
    cm.save(tmp_path / "cm")
    card = json.loads((tmp_path / "cm" / "card.json").read_text())
    (tmp_path / "cm" / "card.json").write_text(json.dumps({**card, "version": VERSION - 1}))
    tables = tmp_path / "cm" / "tables.json"
    tables.write_text(tables.read_text().replace("0.05", "0.06", 1))
    said = []
    again = learned.fit_or_update(ctx, tmp_path / "cm", said.append)
    assert "not carried over" in said[0] and "tables.json" in said[0] and "SHA-256" in said[0], said
    assert learned.tune_records(again) == [] and again.card["tune_partitions_carried"] == 0


def _files(d) -> dict[str, bytes]:
    return {str(f.relative_to(d)): f.read_bytes() for f in sorted(d.rglob("*")) if f.is_file()}


def test_feed_refits_the_partition_ratio(ctx, fitted):
    """Partitions fed at five times the model's current ratio pull the ratio well above it. The rows
    are priced from that ratio, whatever it is (the fixture's probe partitions are measured, under the
    suite's load: session 36's CI read 2.57, and rows at a fixed 5x then moved it only 1.8x)."""
    cm = fitted
    t = ctx.problem.targets[1]
    before = learned.partition_ratios(cm, [t])[t]
    ops = list(ctx.problem.ops)
    iso = cm.predict_ops([ctx.graph.op(o) for o in ops], [t], include_overhead=True)[:, 0]
    slow = float(cm.overhead_ms(t) + 5.0 * before * (iso - cm.overhead_ms(t)).clip(min=1e-4).sum())
    rows = [{"partition": f"p{i}", "target": t, "ops": ops, "n_inputs": 1, "predicted_ms": 0.0, "measured_ms": slow}
            for i in range(40)]
    assert learned.feed(cm, rows, ctx.graph) == 40
    assert learned.partition_ratios(cm, [t])[t] > 2 * before
    assert all(r.get("origin") == "tune" for r, _ in learned.tune_records(cm))


def test_costs_knob_prices_with_the_learned_model(ctx, fitted):
    cm = fitted
    cost, entry = learned.learned_costs(ctx, cm)
    assert cost.shape == ctx.problem.cost_ms.shape and np.isfinite(cost).any()
    assert entry.shape == (len(ctx.problem.targets),) and np.all(entry >= 0)
    zero = np.zeros(len(ctx.problem.targets))
    knobs = space.default_knobs(ctx.problem.targets)
    calibrated = space.latency_problem(ctx, knobs, [], zero)
    assert np.array_equal(calibrated.cost_ms, ctx.problem.cost_ms)
    learned_p = space.latency_problem(ctx, {**knobs, "costs": "learned"}, [], zero, (cost, entry))
    assert np.allclose(learned_p.cost_ms[np.isfinite(cost)], cost[np.isfinite(cost)])
    assert np.allclose(learned_p.partition_overhead_ms, entry)
    assert learned_p.provenance["costs"] == "learned"
    # without a model the learned variant is the isolated one (and says so)
    fallback = space.latency_problem(ctx, {**knobs, "costs": "learned"}, [], zero, None)
    isolated = space.latency_problem(ctx, {**knobs, "costs": "isolated"}, [], zero)
    assert fallback.provenance["costs"] == "isolated"
    assert np.array_equal(fallback.cost_ms, isolated.cost_ms)
    with pytest.raises(ValueError, match="costs knob"):
        space.latency_problem(ctx, {**knobs, "costs": "bogus"}, [], zero)


def test_a_saved_model_fitted_on_the_same_rows_lends_its_op_models(ctx, fitted, tmp_path):
    """A warm rerun fits no op model again: the saved model's were fitted on the same rows with the same
    seed, so they are the ones a fit gives; another seed, or other rows, and the target is fitted."""
    import dataclasses

    from costmodels.store import training_data_from_store
    from costmodels.train import fit_cost_model

    names = sorted(fitted.op_models)
    assert names and not any(c["reused"] for c in fitted.card["targets"].values())
    fitted.save(tmp_path / "cm")
    said: list[str] = []
    again = learned.fit_or_update(ctx, tmp_path / "cm", said.append)
    assert all(again.card["targets"][t]["reused"] for t in names), again.card["targets"]
    assert any(f"{len(names)} of {len(names)} op model(s) taken from the saved one" in m for m in said), said
    ops = [ctx.graph.op(o) for o in ctx.problem.ops]
    np.testing.assert_array_equal(again.predict_ops(ops, names), fitted.predict_ops(ops, names))
    # ... and they are what fitting them now gives (the regressors are seeded)
    data = training_data_from_store(ctx.store, graphs=[ctx.graph], targets=names)
    refit = fit_cost_model(data, names, cv_metrics=False, seed=0)
    assert not any(c["reused"] for c in refit.card["targets"].values())
    np.testing.assert_allclose(again.predict_ops(ops, names), refit.predict_ops(ops, names), rtol=1e-12)
    other_seed = learned.fit_or_update(ctx, tmp_path / "cm", seed=1)
    assert not any(c["reused"] for c in other_seed.card["targets"].values())
    # one op row fewer on the first target: that target is fitted again, the other lent
    dropped = next(i for i, r in enumerate(data.ops) if r.target == names[0])
    fewer = dataclasses.replace(data, ops=data.ops[:dropped] + data.ops[dropped + 1:])
    cards = fit_cost_model(fewer, names, cv_metrics=False, seed=0, reuse=again).card["targets"]
    assert not cards[names[0]]["reused"] and cards[names[1]]["reused"]


def test_the_fit_reads_the_rows_of_the_targets_as_they_are_now(tmp_path, warm_tiny_store, fitted):
    """A store shared with another runtime version (registered after this one's): tune's learned model
    trains on the rows of the fingerprints its targets have now, as the store's pricing does, not on
    those of the newest-registered fingerprint of the same name."""
    from placer.devices import make_target

    db = warm_tiny_store(tmp_path / "p.db")
    ctx = api.prepare("zoo:tiny", targets=TARGETS, db=db)
    other = make_target("onnxruntime")
    other.fingerprint = lambda: {**type(other).fingerprint(other), "runtime_version": "0.0-elsewhere"}
    other.fingerprint_hash = lambda: "elsewhere-0"
    for op in ctx.graph.ops:  # every op 100x slower there
        row = ctx.store.get(op.signature.hash, "onnxruntime")
        if row is not None and row.ok:
            ctx.store.put(op.signature.hash, other, kind="op", status="ok", median_ms=100 * row.median_ms,
                          net_ms=100 * row.net_ms, p10_ms=100 * row.median_ms, p90_ms=100 * row.median_ms,
                          n=row.n, meta=dict(row.meta))
    assert ctx.store.targets()[-1]["hash"] == "elsewhere-0"  # the newest fingerprint of the name
    cm = learned.fit_or_update(ctx, None)
    name = ctx.targets[0].name
    assert name == "onnxruntime@cpu:t1"
    for op in ctx.graph.ops[:5]:
        assert cm.predict_op_ms(op, name) == pytest.approx(fitted.predict_op_ms(op, name), rel=1e-6)


def test_current_fingerprints_cover_the_one_thread_siblings_a_fit_may_read(tmp_path):
    """A two-thread target's op model may be fitted with its one-thread sibling's rows: the sibling is
    read at its fingerprint as it is now too, not at another runtime version's registered later."""
    from placer.devices import make_target
    from placer.profile.store import ProfileStore

    t2, t1 = make_target("onnxruntime:t2"), make_target("onnxruntime:t1")
    with ProfileStore(tmp_path / "p.db") as st:
        now = st.target_hash(t1)
        other = make_target("onnxruntime:t1")
        other.fingerprint = lambda: {**type(other).fingerprint(other), "runtime_version": "0.0-elsewhere"}
        other.fingerprint_hash = lambda: "elsewhere-0"
        st.register_target(other)  # the newest fingerprint of onnxruntime@cpu:t1
        got = learned.current_fingerprints(st, [t2])
        assert got == {t2.name: st.target_hash(t2), t1.name: now}
        assert learned.current_fingerprints(st, [t1]) == {t1.name: now}  # one thread: no sibling
