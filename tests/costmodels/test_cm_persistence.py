"""save/load round-trips; a tampered or untrusted file is refused with the file named."""

from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pytest
import skops.io as sio
from _cmdata import TARGETS, conv_sig, relu_sig

from costmodels.cost_model import CostModel
from costmodels.errors import ArtifactIntegrityError, CostModelError
from costmodels.persistence import sha256_file


class Evil:  # a type outside the allowlist
    def __init__(self):
        self.payload = "os.system"


@pytest.fixture(scope="module")
def saved_once(fitted_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("cm") / "model"
    fitted_model.save(d)  # once per module; each test works on a copy
    return d


@pytest.fixture()
def saved(saved_once, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(saved_once, d)
    return d


def _reseal(d, rel):
    """Update the card's hash of ``rel`` (an attacker who also rewrites the card)."""
    card = json.loads((d / "card.json").read_text())
    card["artifacts"][rel] = sha256_file(d / rel)
    (d / "card.json").write_text(json.dumps(card))


def test_round_trip_predicts_the_same(fitted_model, saved):
    cm = CostModel.load(saved)
    ops = [conv_sig(20, 20, 20), relu_sig(33, 9)]
    np.testing.assert_array_equal(cm.predict_ops(ops, list(TARGETS)), fitted_model.predict_ops(ops, list(TARGETS)))
    assert cm.predict_partition_ms(ops, TARGETS[0]) == fitted_model.predict_partition_ms(ops, TARGETS[0])
    assert cm.transfer_ms(1e5, *TARGETS) == fitted_model.transfer_ms(1e5, *TARGETS)
    assert cm.measured_ms == fitted_model.measured_ms
    card = json.loads((saved / "card.json").read_text())
    assert card["training_fingerprint"] and card["feature_names"] and card["versions"]["scikit-learn"]
    assert set(card["targets"]) == set(TARGETS) and all(len(h) == 64 for h in card["artifacts"].values())


@pytest.mark.parametrize("rel", ["op_models/0.skops", "transfer.skops", "tables.json", "partition.skops"])
def test_flipped_byte_is_refused(saved, rel):
    path = saved / rel
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    path.write_bytes(bytes(blob))
    with pytest.raises(ArtifactIntegrityError, match="SHA-256") as exc:
        CostModel.load(saved)
    assert exc.value.path == str(path) and str(path) in str(exc.value)


def test_pickle_swapped_in_is_refused_even_with_a_resealed_card(saved):
    path = saved / "op_models/0.skops"
    path.write_bytes(pickle.dumps({"x": 1}))
    _reseal(saved, "op_models/0.skops")
    with pytest.raises(ArtifactIntegrityError, match="not a readable skops file") as exc:
        CostModel.load(saved)
    assert exc.value.path == str(path)


def _edit_tables(d, fn):
    tables = json.loads((d / "tables.json").read_text())
    fn(tables)
    (d / "tables.json").write_text(json.dumps(tables))
    _reseal(d, "tables.json")


@pytest.mark.parametrize("edit, expect", [
    (lambda t: t["overheads_ms"].update({k: float("nan") for k in t["overheads_ms"]}),
     r"the call overhead of .* is nan, not a time >= 0"),
    (lambda t: t["overheads_ms"].update({k: -5.0 for k in t["overheads_ms"]}), r"is -5.0, not a time >= 0"),
    (lambda t: t.update(partition_records=[[{"origin": "tune", "target": "onnxruntime@cpu:t1"}, 1.0]]),
     r"a partition record is not of the shape saved models write"),
])
def test_values_no_measurement_has_are_refused_even_with_a_resealed_card(saved, edit, expect):
    """The hashes say only that the files are the ones the card lists: a NaN overhead made every net cost
    NaN, a negative one inflated them, and a malformed record raised KeyError when tune added to them."""
    _edit_tables(saved, edit)
    with pytest.raises(ArtifactIntegrityError, match=expect):
        CostModel.load(saved)


@pytest.mark.parametrize("key, value", [("targets", [1]), ("targets", {"onnxruntime@cpu:t1": 3}),
                                        ("versions", "1.0"), ("feature_names", {"a": 1})])
def test_a_card_of_the_wrong_shape_is_refused_on_load(saved, key, value):
    """Reusing a model reads its card's targets, versions and feature names: a card of another shape
    raised AttributeError in the fit, outside the load's error handling."""
    card = json.loads((saved / "card.json").read_text())
    card[key] = value
    (saved / "card.json").write_text(json.dumps(card))
    with pytest.raises(ArtifactIntegrityError, match=f"malformed: .*{key}|each of targets"):
        CostModel.load(saved)


def test_untrusted_type_is_refused_even_with_a_resealed_card(saved):
    path = saved / "transfer.skops"
    sio.dump(Evil(), path)
    _reseal(saved, "transfer.skops")
    with pytest.raises(ArtifactIntegrityError, match="outside the allowlist.*Evil"):
        CostModel.load(saved)


def test_missing_file_and_escaping_paths_are_refused(saved, tmp_path):
    (saved / "tables.json").unlink()
    with pytest.raises(ArtifactIntegrityError, match="missing"):
        CostModel.load(saved)
    other = tmp_path / "other"
    shutil.copytree(saved, other)
    card = json.loads((other / "card.json").read_text())
    card["artifacts"]["../evil.json"] = "0" * 64
    (other / "card.json").write_text(json.dumps(card))
    with pytest.raises(ArtifactIntegrityError, match="leaves the model directory"):
        CostModel.load(other)


def test_loads_during_saves_by_another_process_never_see_half_a_model(saved):
    """Two tune workers share one --cost-model DIR: one saves while the other loads. Every load
    (as many as fit in the saver's three saves) gets a whole model, and the saver succeeds."""
    import subprocess
    import sys
    import textwrap

    saver = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from costmodels.cost_model import CostModel
        cm = CostModel.load({str(saved)!r})
        for _ in range(3):
            cm.save({str(saved)!r})
    """)], stderr=subprocess.PIPE, text=True)
    loads = 0
    try:
        while saver.poll() is None or loads == 0:
            cm = CostModel.load(saved)  # raises ArtifactIntegrityError on a half-written file
            assert set(cm.op_models) == set(TARGETS)
            loads += 1
    finally:
        _, err = saver.communicate(timeout=600)  # hang guard only
    assert saver.returncode == 0, err[-2000:]
    assert loads >= 1
    assert not [p.name for p in saved.rglob("*.tmp")]  # nothing left aside


def test_a_model_saved_by_an_older_version_is_refused_on_load_and_replaced_on_save(fitted_model, saved):
    from costmodels.errors import CostModelError
    from costmodels.persistence import VERSION

    card = json.loads((saved / "card.json").read_text())
    (saved / "card.json").write_text(json.dumps({**card, "version": VERSION - 1}))
    with pytest.raises(CostModelError, match="format version"):
        CostModel.load(saved)
    fitted_model.save(saved)  # placer's own, superseded: replaced, not refused
    assert json.loads((saved / "card.json").read_text())["version"] == VERSION
    assert CostModel.load(saved).measured_ms == fitted_model.measured_ms
    (saved / "card.json").write_text(json.dumps({**card, "version": VERSION + 1}))  # a newer placer's: kept
    with pytest.raises(CostModelError, match="refusing to overwrite"):
        fitted_model.save(saved)


def test_an_older_models_partition_records_are_read_from_its_tables_alone(saved):
    from costmodels.errors import CostModelError
    from costmodels.persistence import VERSION, older_partition_records

    with pytest.raises(CostModelError, match="not a card of an older"):
        older_partition_records(saved)  # this version's model is loaded, not picked apart
    good = {"target": "t", "op_types": ["Conv", "Relu"], "isolated_ms": [0.2, 0.01], "overhead_ms": 0.005,
            "boundary_bytes": 1024.0, "origin": "tune", "model": "m", "extra": "dropped"}
    no_bytes = {k: v for k, v in good.items() if k not in ("boundary_bytes", "model")}
    malformed = [
        [{**good, "isolated_ms": [0.2]}, 0.3],  # one cost for two op types
        [{**good, "op_types": [], "isolated_ms": []}, 0.3],
        [{**good, "op_types": ["Conv", 7]}, 0.3],
        [{**good, "overhead_ms": "0.005"}, 0.3],
        [{k: v for k, v in good.items() if k != "target"}, 0.3],
        # values no measurement has: they would break the partition correction's fit (logs of them)
        [{**good, "isolated_ms": [0.2, -0.01]}, 0.3], [{**good, "boundary_bytes": -2.0}, 0.3],
        [{**good, "isolated_ms": [1e308, 1e308]}, 0.3], [{**good, "overhead_ms": -1e300}, 0.3],
        [good, 0.0], [good, -0.3], [good, float("nan")], [good, True], [good, None],
        [good], "a string", [good, 0.3, 1],
    ]
    tables = json.loads((saved / "tables.json").read_text())
    tables["partition_records"] = [[good, 0.25]] + malformed + [[{**no_bytes, "model": 3}, 0.5]]
    (saved / "tables.json").write_text(json.dumps(tables))
    (saved / "op_models" / "0.skops").write_bytes(pickle.dumps(Evil()))  # never opened
    card = json.loads((saved / "card.json").read_text())
    (saved / "card.json").write_text(json.dumps({**card, "version": VERSION - 1}))
    _reseal(saved, "tables.json")
    records = older_partition_records(saved)
    # without boundary bytes: 0; a model not named by text: left out; keys of no record format: dropped
    expected = [(good, 0.25), ({**no_bytes, "boundary_bytes": 0.0}, 0.5)]
    assert records == [({k: v for k, v in r.items() if k != "extra"}, m) for r, m in expected]
    (saved / "tables.json").write_text(json.dumps({**tables, "partition_records": {}}))
    with pytest.raises(ArtifactIntegrityError, match="SHA-256"):
        older_partition_records(saved)  # fails its hash
    _reseal(saved, "tables.json")
    with pytest.raises(ArtifactIntegrityError, match="no list of partition records"):
        older_partition_records(saved)


def test_a_file_where_the_model_directory_goes_is_refused_before_any_fit(tmp_path):
    """`placer fit --out FILE`: refused by the check that runs before the fit (not after minutes of it)."""
    from costmodels.errors import CostModelError
    from costmodels.persistence import check_overwritable
    from costmodels.train import fit_store

    f = tmp_path / "model"
    f.write_text("mine")
    with pytest.raises(CostModelError, match="exists and is not a directory"):
        check_overwritable(f)
    # no store at all behind it: the refusal comes first, so the missing store is never opened
    with pytest.raises(CostModelError, match="not a directory"):
        fit_store(tmp_path / "absent.db", f)
    assert f.read_text() == "mine"
    check_overwritable(tmp_path / "new")  # a new directory, or an empty one: fine
    (tmp_path / "empty").mkdir()
    check_overwritable(tmp_path / "empty")


def test_skops_is_imported_without_importing_all_of_scikit_learn(saved_once, fresh_python):
    """A fresh process loading a saved model imports skops without scikit-learn's estimator discovery
    (which imports every module of scikit-learn: ``costmodels.persistence._skops_io``), and the model
    it loads predicts as the one saved; a type outside the allowlist is still refused (the tests above)."""
    code = ("import sys\nfrom costmodels.cost_model import CostModel\n"
            f"cm = CostModel.load({str(saved_once)!r})\n"
            "unused = ('sklearn.gaussian_process', 'sklearn.neural_network', 'sklearn.naive_bayes')\n"
            "print(sorted(m for m in unused if m in sys.modules))\n"
            "print(len(cm.op_models))")
    imported, n_models = fresh_python(code)[:2]
    assert imported == "[]" and int(n_models) == len(CostModel.load(saved_once).op_models) > 0


def test_a_partition_correction_with_its_own_regressor_saves_and_loads(tmp_path, fresh_python):
    """Where a target's measured partitions favour the regressor (grouped CV), the correction keeps a
    fitted gradient boosting, whose stages are scikit-learn trees behind a dummy initial estimator. Since
    skops is imported without scikit-learn's estimator discovery (session 46) it no longer trusted those
    by default, and `placer tune` said "cost model not saved: ... partition.skops: types outside the
    allowlist" once enough partitions had been measured. In a fresh process, as in `placer tune` (this
    one imported skops with the discovery)."""
    code = f"""
import numpy as np
from costmodels.partition import PartitionCorrection, fusion_features
from pathlib import Path
from costmodels.persistence import _load_skops, _replace_atomically, _skops_writer

rng = np.random.default_rng(0)
X = [{{"target": "t", "op_types": ["Conv", "Relu", "Add"][: int(rng.integers(2, 4))],
      "isolated_ms": list(rng.uniform(0.01, 1.0, 3)), "overhead_ms": 0.004, "boundary_bytes": 1e4}}
     for i in range(40)]
for x in X:
    x["isolated_ms"] = x["isolated_ms"][: len(x["op_types"])]
y = [0.004 + 0.7 * sum(x["isolated_ms"]) * (1.5 if len(x["op_types"]) == 3 else 1.0) for x in X]
corr = PartitionCorrection(min_samples=10, n_estimators=30).fit(X, y)
F = np.vstack([fusion_features(x) for x in X])
lr = np.array([corr.log_ratio(x, m) for x, m in zip(X, y)])
corr.regressors_["t"] = corr._regressor().fit(F, lr)  # whatever the CV chose: the case to save
path = Path({str(tmp_path / "partition.skops")!r})
_replace_atomically(path, _skops_writer(corr, path))  # as a save writes it
back = _load_skops(path)
print(bool((back.predict_log_ratio(X) == corr.predict_log_ratio(X)).all()), sorted(back.regressors_))
"""
    assert fresh_python(code)[-1] == "True ['t']"


def test_a_save_that_fails_on_one_file_leaves_the_saved_model_whole(fitted_model, saved, monkeypatch):
    """A save refused on one of its files (a type skops would not load back) had already replaced the
    op models before it: the directory then held new op models under the old card, refused at every
    load and save after ("SHA-256 ... does not match the card's"), the learned model lost until moved
    away. Every file is now written aside first and renamed into place only once all were written."""
    import copy

    import costmodels.persistence as persistence

    before = CostModel.load(saved)
    sigs = [conv_sig(16, 32, 14), relu_sig(32, 14)]
    expected = {t: [before.predict_op_ms(s, t) for s in sigs] for t in TARGETS}
    other = copy.deepcopy(fitted_model)
    for m in other.op_models.values():
        m.random_state = 12345  # other bytes in every op model file
    monkeypatch.setattr(persistence, "TRUSTED_TYPES",
                        tuple(t for t in persistence.TRUSTED_TYPES if t != "costmodels.transfer.TransferModel"))
    with pytest.raises(CostModelError, match="transfer.skops"):
        other.save(saved)
    monkeypatch.undo()
    after = CostModel.load(saved)  # every file still matches the card
    assert {t: [after.predict_op_ms(s, t) for s in sigs] for t in TARGETS} == expected
    assert not [p.name for p in saved.rglob("*.tmp")]


@pytest.mark.parametrize("edit, expect", [
    (lambda f: f.update(feature=f["feature"] + 10**6), "splits on feature"),
    (lambda f: f.update(depth=10**15), "depth"),
    (lambda f: f.update(left=f["left"][:-1]), "not a node array"),
    (lambda f: f.update(right=f["right"] + len(f["right"])), "indices outside"),
])
def test_an_op_model_whose_forest_is_malformed_is_refused_on_load(saved, edit, expect):
    """The allowlist checks types only: a forest's feature indices off by 10**6 loaded cleanly and were an
    IndexError at the first prediction; a depth of 10**15, a prediction that never ends."""
    from costmodels.persistence import _load_skops

    path = saved / "op_models/0.skops"
    model = _load_skops(path)
    name = next(k for k, v in vars(model).items() if k.endswith("forest_") and v is not None)
    forest = dict(getattr(model, name))
    edit(forest)
    setattr(model, name, forest)
    sio.dump(model, path)
    _reseal(saved, "op_models/0.skops")
    with pytest.raises(ArtifactIntegrityError, match=f"op model is malformed.*{expect}") as exc:
        CostModel.load(saved)
    assert exc.value.path == str(path)
