"""Saving and loading a :class:`~costmodels.cost_model.CostModel` without pickle.

A saved model is a directory::

    card.json          model card: id, training-data fingerprint, targets (+ fingerprints), metrics,
                       feature list, hyperparameters, versions, and the SHA-256 of every file below
    op_models/N.skops  one OpLatencyModel per target (skops format; N indexes card["targets"])
    transfer.skops     the TransferModel
    partition.skops    the PartitionCorrection (absent when there was no partition data)
    tables.json        exact measurements, call overheads, partition records, roofline specs

Loading re-hashes every file named in the card and refuses (:class:`ArtifactIntegrityError`
naming the file) one whose SHA-256 differs, one that is missing, is not a regular file or is a
symbolic link leading out of the directory, and a skops file whose types
(``skops.io.get_untrusted_types``) are not all in :data:`TRUSTED_TYPES`; only then is it loaded,
with exactly that allowlist. JSON files are only ever parsed as JSON. The card cannot hash
itself: someone who rewrites the card and a file together defeats the hash check, not the type
allowlist, so a tampered file can still never run code on load. JSON files are read with
:func:`placer.safe_io.load_json` (size, nesting, repeated keys, number range).

Saving never overwrites what it cannot read: a directory that holds a model's files whose card
is unreadable, of another format version, or whose files fail their hashes is refused
(:func:`check_overwritable`), so a newer placer's model or a damaged one is left as it is.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from costmodels.errors import ArtifactIntegrityError, CostModelError
from costmodels.roofline import RooflineModel
from placer.safe_io import load_json, loads, max_json_bytes, read_bytes

FORMAT = "placer-costmodel"
#: 2 (session 15): op models read 8 more convolution features (costmodels.features) and average several
#: regressors; a version-1 model cannot predict with this code's feature vectors. 3 (session 26): 3 more
#: features (an element-wise op's broadcast operands, a transpose's contiguous run); a version-2 model's
#: trees were fitted on shorter vectors. 4 (session 27): ``Sum`` has its own op-type column (it was the
#: pooled "other" column, which the second prior prices by the roofline). 5 (session 28): a multi-thread
#: target's op model carries its one-thread sibling's model as a third prior (costmodels.sibling). 6
#: (session 31): one more feature, the largest data input (``log_max_in_elems``)
VERSION = 6
CARD = "card.json"

#: The only non-default types a saved model may contain (skops trusts plain sklearn/numpy types).
TRUSTED_TYPES: tuple[str, ...] = (
    "costmodels.op_model.OpLatencyModel",
    "costmodels.op_affine.OpTypeAffinePrior",
    "costmodels.sibling.SiblingPrior",
    "costmodels.roofline.RooflineModel",
    "costmodels.transfer.TransferModel",
    "costmodels.partition.PartitionCorrection",
    "costmodels.sklearn_shim.HuberGradientBoosting",  # a partition correction's regressors
    "costmodels.sklearn_shim.LeanHuberLoss",
    # ... their initial estimator and stages: skops trusts them by default only where it was imported
    # with scikit-learn's estimator discovery, which placer skips (_skops_io)
    "sklearn.dummy.DummyRegressor",
    "sklearn.tree._classes.DecisionTreeRegressor",
    "sklearn.tree._tree.Tree",
)


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def versions() -> dict[str, str]:
    """Library versions a saved model depends on."""
    import optuna
    import sklearn
    import skops

    return {"python": platform.python_version(), "numpy": np.__version__, "scikit-learn": sklearn.__version__,
            "skops": skops.__version__, "optuna": optuna.__version__}


def _num(x: float) -> Any:
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def _unnum(x: Any) -> float:
    return float(x)  # float("inf") parses "inf"


LOCK = ".lock"


@contextlib.contextmanager
def model_lock(directory: str | Path, *, exclusive: bool):
    """Hold ``directory``'s lock file (``flock``): exclusive while a save writes, shared while a load
    reads, so two processes (tune workers on one study) never see each other's half-written files.
    A directory that does not exist is not locked (nothing to read there)."""
    d = Path(directory)
    if not exclusive and not d.is_dir():
        yield
        return
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def _replace_atomically(path: Path, write) -> None:
    """``write(tmp)`` then rename over ``path``: a save killed half-way leaves the old file whole."""
    with _Staged() as staged:
        staged.write(path, write)
        staged.commit()


class _Staged:
    """Files written aside (``.NAME.PID.tmp`` beside each) and renamed into place together once every
    one of them was written: a save that fails on one file (a type skops will not load back) leaves
    the model's other files as they were, matching its card, rather than half replaced. As a context
    manager, what was written aside and not renamed is removed on the way out."""

    def __init__(self) -> None:
        self.files: list[tuple[Path, Path]] = []  # (written aside, destination)

    def __enter__(self) -> "_Staged":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()

    def write(self, path: Path, write) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.files.append((tmp, path))
        write(tmp)
        return tmp

    def commit(self) -> None:
        for tmp, path in self.files:
            os.replace(tmp, path)

    def discard(self) -> None:
        """Remove what was written aside and not renamed into place."""
        for tmp, _ in self.files:
            tmp.unlink(missing_ok=True)


def _skops_io():
    """``skops.io``, imported without scikit-learn's estimator discovery.

    On import skops lists every scikit-learn estimator (``sklearn.utils.all_estimators``, which imports
    every module of scikit-learn: importing skops took 2.2-2.3 s in a ``placer tune`` process, 0.6 s
    without it) to trust them by default. A saved model here holds none of them (its regressors are
    flat forests: :mod:`costmodels.flat_forest`), and :data:`TRUSTED_TYPES` decides what loads, so the
    list is empty while skops imports: skops then trusts fewer types by default, never more."""
    import sys

    if "skops.io" in sys.modules:
        return sys.modules["skops.io"]
    import sklearn.utils

    discover = sklearn.utils.all_estimators
    sklearn.utils.all_estimators = lambda *args, **kwargs: []
    try:
        import skops.io as sio
    finally:
        sklearn.utils.all_estimators = discover
    return sio


def _skops_writer(obj: Any, path: Path):
    """``write(tmp)``: ``obj`` dumped by skops to ``tmp``, refused (CostModelError naming ``path``) if it
    holds a type that would not load back."""
    sio = _skops_io()

    def write(tmp: Path) -> None:
        sio.dump(obj, tmp)
        untrusted = set(sio.get_untrusted_types(file=tmp)) - set(TRUSTED_TYPES)
        if untrusted:  # would not load back: fail now, at save time
            raise CostModelError(f"{path}: types outside the allowlist {sorted(untrusted)}; extend TRUSTED_TYPES")

    return write


#: the files a save writes (a directory holding any of them holds a model, or what is left of one)
SAVED_NAMES = (CARD, "tables.json", "transfer.skops", "partition.skops", "op_models")


def check_overwritable(directory: str | Path) -> None:
    """CostModelError unless ``directory`` is new, holds none of a model's files, holds a model this
    code reads whose files pass their hashes, or holds this format at an older version (placer's own,
    superseded: replaced): anything else (a newer format version, a damaged or half-written model)
    is the user's and is not overwritten."""
    d = Path(directory)
    if d.exists() and not d.is_dir():  # said before a fit, not after it
        raise CostModelError(f"{d}: exists and is not a directory (a cost model is saved as a directory of files)")
    if not d.exists() or not any((d / name).exists() or (d / name).is_symlink() for name in SAVED_NAMES):
        return
    if is_older_version(d):
        return
    try:
        verify_saved(d)
    except CostModelError as exc:
        raise CostModelError(f"{d}: holds a cost model this placer cannot read ({exc}); refusing to "
                             "overwrite it: move it away or save to another directory") from None


def is_older_version(d: str | Path) -> bool:
    """Whether ``d``'s card is this format at a version below :data:`VERSION` (read, not trusted further):
    a model an older placer saved, which this one refits and replaces."""
    return _older_card(d) is not None


def _older_card(d: str | Path) -> dict | None:
    """``d``'s card if it is this format at a version below :data:`VERSION`, else None."""
    try:
        card = load_json(Path(d) / CARD, "the cost model's card", CostModelError)
    except CostModelError:
        return None
    if not isinstance(card, dict):
        return None
    version = card.get("version")
    return card if card.get("format") == FORMAT and type(version) is int and version < VERSION else None


def older_partition_records(directory: str | Path) -> list[tuple[dict, float]]:
    """The measured partition records of a model an older placer saved (:func:`is_older_version`),
    read from its ``tables.json``: the bytes read once, checked against the SHA-256 its card gives and
    parsed as JSON; nothing else of the model is read (its skops files are never opened). A record not
    of the shape every version wrote, or with a value no measurement has (see :func:`_partition_record`),
    is left out. CostModelError naming the file when the card or the tables do not hold up, or cannot
    be read."""
    d = Path(directory)
    try:
        with model_lock(d, exclusive=False):
            card = _older_card(d)
            if card is None:
                raise CostModelError(f"{d / CARD}: not a card of an older {FORMAT} version")
            artifacts = card.get("artifacts")
            sha = artifacts.get("tables.json") if isinstance(artifacts, dict) else None
            if not isinstance(sha, str):
                raise ArtifactIntegrityError(d / CARD, "the card lists no tables.json")
            path = _artifact_path(d, "tables.json")
            raw = read_bytes(path, "the cost model's tables", CostModelError, max_json_bytes())
    except OSError as exc:  # a directory it may not lock or a file it may not read: not this model's fault
        why = exc.strerror or type(exc).__name__
        raise CostModelError(f"{d}: cannot read the saved model ({why})") from None
    _check_sha256(path, hashlib.sha256(raw).hexdigest(), sha)  # the bytes parsed are the bytes hashed
    tables = loads(raw, str(path), CostModelError)
    records = tables.get("partition_records") if isinstance(tables, dict) else None
    if not isinstance(records, list):
        raise ArtifactIntegrityError(path, "malformed tables: no list of partition records")
    return [r for r in map(_partition_record, records) if r is not None]


#: above these a partition record's figures are not a measurement (ms; bytes)
_MAX_RECORD_MS, _MAX_RECORD_BYTES = 1e6, 1e15


def _partition_record(item: Any) -> tuple[dict, float] | None:
    """``(record, measured ms)`` of one saved ``[record, measured]`` pair, or None if it is malformed:
    a target, at least one op type with as many isolated costs, the call overhead, the boundary bytes
    (0 if absent) and the measurement, each a finite number in ``[0, max)`` (the measurement above 0)."""
    def number(x: Any, top: float = _MAX_RECORD_MS) -> bool:
        return type(x) in (int, float) and 0 <= x < top  # NaN fails both comparisons

    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], dict) and number(item[1])
            and item[1] > 0):
        return None
    r = item[0]
    types, iso = r.get("op_types"), r.get("isolated_ms")
    if not (isinstance(r.get("target"), str) and isinstance(types, list) and isinstance(iso, list)
            and 0 < len(types) == len(iso) and all(isinstance(t, str) for t in types)
            and all(map(number, iso))
            and number(r.get("overhead_ms")) and number(r.get("boundary_bytes", 0.0), _MAX_RECORD_BYTES)):
        return None
    record = {"target": r["target"], "op_types": list(types), "isolated_ms": [float(c) for c in iso],
              "overhead_ms": float(r["overhead_ms"]), "boundary_bytes": float(r.get("boundary_bytes", 0.0))}
    record.update({k: r[k] for k in ("model", "origin") if isinstance(r.get(k), str)})
    return record, float(item[1])


def save_cost_model(cm: Any, directory: str | Path) -> Path:
    """Write ``cm`` to ``directory`` (created; the files of a previous save this code reads are replaced,
    a model it cannot read is refused: :func:`check_overwritable`). Every file is written aside first
    and renamed into place only once all were written, the card last, under the directory's exclusive
    lock (:func:`model_lock`): a save that fails leaves the previous model as it was."""
    d = Path(directory)
    check_overwritable(d)
    with model_lock(d, exclusive=True):
        check_overwritable(d)  # again, now that no other process writes there
        return _save_locked(cm, d)


def _save_locked(cm: Any, d: Path) -> Path:
    """Every file written aside first, then renamed into place, then the card (see :class:`_Staged`)."""
    artifacts: dict[str, str] = {}
    tables = {
        "overheads_ms": dict(sorted(cm.overheads_ms.items())),
        "measured_ms": {t: {k: _num(v) for k, v in sorted(m.items())} for t, m in sorted(cm.measured_ms.items())},
        "partition_records": [[r, m] for r, m in cm.partition_records],
        "roofline": {t: rm.to_dict() for t, rm in sorted(cm.roofline.items())},
    }
    with _Staged() as staged:
        skops = {f"op_models/{i}.skops": (t, cm.op_models[t]) for i, t in enumerate(sorted(cm.op_models))}
        skops["transfer.skops"] = ("transfer", cm.transfer)
        if cm.partition is not None:
            skops["partition.skops"] = ("partition", cm.partition)
        for rel, (what, obj) in skops.items():
            staged.write(d / rel, _skops_writer(obj, d / rel))
            artifacts[rel] = what
        text = json.dumps(tables, sort_keys=True, indent=1)
        staged.write(d / "tables.json", lambda tmp: tmp.write_text(text))
        artifacts["tables.json"] = "tables"
        staged.commit()
    card = dict(cm.card)
    card.update(
        format=FORMAT, version=VERSION, saved=time.strftime("%Y-%m-%dT%H:%M:%S"),
        op_model_files={rel: t for rel, t in artifacts.items() if rel.startswith("op_models/")},
        artifacts={rel: sha256_file(d / rel) for rel in artifacts},
        versions=card.get("versions") or versions(),
    )
    card.setdefault("id", f"costmodel-{card['artifacts']['tables.json'][:12]}")
    _replace_atomically(d / CARD, lambda tmp: tmp.write_text(json.dumps(card, sort_keys=True, indent=1, default=str)))
    cm.card = card
    return d


def _artifact_path(d: Path, rel: str) -> Path:
    """``d / rel`` once it is a regular file inside ``d`` (ArtifactIntegrityError naming it otherwise)."""
    path = d / rel
    if not path.exists() and not path.is_symlink():
        raise ArtifactIntegrityError(path, "the file is missing")
    if not path.resolve().is_relative_to(d.resolve()):
        raise ArtifactIntegrityError(path, "it is a symbolic link leading out of the model directory")
    if not path.is_file():  # a directory, FIFO or device: never opened (a FIFO would block)
        raise ArtifactIntegrityError(path, "not a regular file")
    return path


def _check_sha256(path: Path, got: str, expected: str) -> None:
    if got != expected:
        raise ArtifactIntegrityError(path, f"SHA-256 {got[:16]}... does not match the card's {expected[:16]}...")


def _verified(d: Path, rel: str, expected: str) -> Path:
    path = _artifact_path(d, rel)
    _check_sha256(path, sha256_file(path), expected)
    return path


def _load_skops(path: Path) -> Any:
    sio = _skops_io()

    try:
        untrusted = sio.get_untrusted_types(file=path)
    except Exception as exc:  # not a skops archive at all (e.g. a pickle swapped in)
        raise ArtifactIntegrityError(path, f"not a readable skops file ({type(exc).__name__}: {exc})") from None
    bad = sorted(set(untrusted) - set(TRUSTED_TYPES))
    if bad:
        raise ArtifactIntegrityError(path, f"it contains types outside the allowlist: {', '.join(bad)}")
    try:
        return sio.load(path, trusted=list(untrusted))
    except Exception as exc:
        raise ArtifactIntegrityError(path, f"skops could not load it ({type(exc).__name__}: {exc})") from None


#: the deepest forest :func:`_check_forest` accepts (a step per level for every row: a file claiming
#: 10**15 levels would run for ever; fitted trees here are 3-40 deep)
MAX_FOREST_DEPTH = 512
_FOREST_ARRAYS = ("left", "right", "feature", "threshold", "value", "missing_left")


def _check_forest(forest: Any) -> None:
    """ValueError (TypeError for a non-dict) unless ``forest`` is a flat forest :func:`~costmodels.flat_forest.predict` can run to its end: its node arrays
    one-dimensional and of one length, children and roots indices of nodes, features non-negative,
    tree weights as many as roots, and a depth within :data:`MAX_FOREST_DEPTH` (a saved model a user hands
    over: a feature index off by 10**6 was an IndexError at the first prediction)."""
    if not isinstance(forest, dict):
        raise TypeError(f"a flat forest is a dict, got {type(forest).__name__}")
    missing = [k for k in (*_FOREST_ARRAYS, "roots", "weight", "depth", "constant") if k not in forest]
    if missing:
        raise ValueError(f"flat forest lacks {missing}")
    arrays = {k: np.asarray(forest[k]) for k in (*_FOREST_ARRAYS, "roots", "weight")}
    n = arrays["left"].shape[0] if arrays["left"].ndim == 1 else -1
    for k in _FOREST_ARRAYS:
        if arrays[k].ndim != 1 or arrays[k].shape[0] != n:
            raise ValueError(f"flat forest: {k} is not a node array of the forest's {n} nodes")
    for k in ("left", "right", "roots"):
        a = arrays[k]
        if a.dtype.kind not in "iu" or (a.size and (a.min() < 0 or a.max() >= n)):
            raise ValueError(f"flat forest: {k} holds indices outside its {n} nodes")
    if arrays["feature"].dtype.kind not in "iu" or (n and arrays["feature"].min() < 0):
        raise ValueError("flat forest: negative or non-integer feature indices")
    if arrays["weight"].shape != arrays["roots"].shape:
        raise ValueError("flat forest: a weight per tree root expected")
    depth = forest["depth"]
    if not isinstance(depth, (int, np.integer)) or not 0 <= int(depth) <= MAX_FOREST_DEPTH:
        raise ValueError(f"flat forest: depth {str(depth)[:20]} outside [0, {MAX_FOREST_DEPTH}]")


def _checked_op_model(model: Any, path: Path) -> Any:
    """``model`` (an op model just loaded from ``path``) once its flat forests are well formed and it
    predicts a row of zeros: the allowlist checks types only, and a forest's contents decide what
    :func:`~costmodels.flat_forest.predict` reads (a feature index off by 10**6 was an IndexError at
    the first prediction; a depth of 10**15, a prediction that never ends)."""
    try:
        for name, value in vars(model).items():
            if name.endswith("forest_") and value is not None:
                _check_forest(value)
        if hasattr(model, "predict") and hasattr(model, "n_train_"):
            model.predict(np.zeros((1, int(model.n_features_in_))))
    except Exception as exc:  # noqa: BLE001 - whatever the file's contents make it raise
        raise ArtifactIntegrityError(path, f"its op model is malformed ({type(exc).__name__}: "
                                           f"{str(exc)[:200]})") from None
    return model


def verify_saved(directory: str | Path) -> tuple[dict, dict[str, Path]]:
    """``(card, {relative path: path})`` of a saved model whose card this code reads and whose every
    file passes its hash (nothing unpickled, nothing loaded); CostModelError naming the file otherwise."""
    d = Path(directory)
    card_path = d / CARD
    if not card_path.exists():
        raise CostModelError(f"{d} is not a saved cost model: {CARD} is missing")
    card = load_json(card_path, "the cost model's card", CostModelError)
    if not isinstance(card, dict) or card.get("format") != FORMAT:
        raise ArtifactIntegrityError(card_path, f"not a {FORMAT} card")
    if card.get("version") != VERSION:
        raise CostModelError(f"{card_path}: format version {str(card.get('version'))[:20]} "
                             f"(this code reads {VERSION})")
    artifacts = card.get("artifacts") or {}
    ops = card.get("op_model_files", {})
    if not (isinstance(artifacts, dict) and all(isinstance(v, str) for v in artifacts.values())
            and isinstance(ops, dict) and all(isinstance(v, str) and k in artifacts for k, v in ops.items())):
        raise ArtifactIntegrityError(card_path, "malformed: artifacts must map file -> SHA-256 and "
                                                "op_model_files file -> target, each among the artifacts")
    shapes = (("targets", dict), ("versions", dict), ("feature_names", list))
    for key, kind in shapes:  # what reusing a model reads of its card
        if key in card and card[key] is not None and not isinstance(card[key], kind):
            raise ArtifactIntegrityError(card_path, f"malformed: {key} must be a JSON {kind.__name__}")
    if isinstance(card.get("targets"), dict) and not all(isinstance(v, dict) for v in card["targets"].values()):
        raise ArtifactIntegrityError(card_path, "malformed: each of targets must be a JSON object")
    for rel in artifacts:
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ArtifactIntegrityError(card_path, f"artifact path {rel!r} leaves the model directory")
    for required in ("tables.json", "transfer.skops"):
        if required not in artifacts:
            raise ArtifactIntegrityError(card_path, f"the card lists no {required}")
    return card, {rel: _verified(d, rel, sha) for rel, sha in artifacts.items()}


def load_cost_model_parts(directory: str | Path) -> dict[str, Any]:
    """Load and verify a model saved by :func:`save_cost_model` (under the directory's shared lock):
    the keyword arguments of :class:`~costmodels.cost_model.CostModel` (``CostModel.load`` builds it;
    this module stays below the class it saves)."""
    with model_lock(directory, exclusive=False):
        return _load_locked(directory)


def _load_locked(directory: str | Path) -> dict[str, Any]:
    card, paths = verify_saved(directory)
    tables = load_json(paths["tables.json"], "the cost model's tables", CostModelError)
    op_models = {t: _checked_op_model(_load_skops(paths[rel]), paths[rel])
                 for rel, t in card.get("op_model_files", {}).items()}
    transfer = _load_skops(paths["transfer.skops"])
    partition = _load_skops(paths["partition.skops"]) if "partition.skops" in paths else None
    try:
        return _from_tables(tables, op_models, transfer, partition, card)
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ArtifactIntegrityError(paths["tables.json"], f"malformed tables ({type(exc).__name__}: "
                                                           f"{str(exc)[:160]})") from None


def _time(x: Any, what: str, *, unsupported: bool = False) -> float:
    """A time read from the tables: a number >= 0 (``inf``, an op a target cannot run, where
    ``unsupported``); ValueError naming ``what`` otherwise (NaN made every cost it entered NaN)."""
    v = _unnum(x) if not isinstance(x, bool) else math.nan
    if not (v >= 0 and (math.isfinite(v) or (unsupported and v == math.inf))):
        raise ValueError(f"{what} is {str(x)[:40]}, not a time >= 0")
    return v


def _from_tables(tables: dict, op_models: dict, transfer: Any, partition: Any, card: dict) -> dict[str, Any]:
    if not isinstance(tables, dict):
        raise TypeError("tables.json is not an object")
    records = []
    for item in tables.get("partition_records", []):
        rec = _partition_record(item)
        if rec is None:
            raise ValueError(f"a partition record is not of the shape saved models write: {str(item)[:120]}")
        records.append(rec)
    return dict(
        op_models=op_models,
        roofline={t: RooflineModel.from_spec(spec) for t, spec in tables.get("roofline", {}).items()},
        transfer=transfer, partition=partition,
        overheads_ms={t: _time(v, f"the call overhead of {t}") for t, v in tables.get("overheads_ms", {}).items()},
        measured_ms={t: {k: _time(v, f"op {k} on {t}", unsupported=True) for k, v in m.items()}
                     for t, m in tables.get("measured_ms", {}).items()},
        partition_records=records,
        card=card,
    )
