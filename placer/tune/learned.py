"""The learned cost model inside ``placer tune``: fit or update it, price a problem with it, feed it.

``placer tune`` keeps one :class:`costmodels.CostModel` per profile store (by default next to it:
``~/.cache/placer/costmodel/``), so what one run learns is there for the next:

1. :func:`fit_or_update` fits the op models, links and partition correction on everything the
   store holds for the targets (this model included, its whole-model and segment runs among the
   partitions) and carries over the partitions earlier ``placer tune`` runs measured (records
   marked ``origin: "tune"`` in the saved model). A saved model that fails its integrity check is
   not loaded (skops + hashed card, never a pickle); the tuner says so, refits, and leaves that
   model as it is: :func:`save` does not write over a model it could not load (a newer placer's,
   a damaged one), it says where the updated one was not saved instead.
2. :func:`learned_costs` prices the ops of a problem the way the cost model sees a partition,
   ``overhead + ratio[target] * sum(net op costs)`` (:mod:`costmodels.partition`): net op costs
   from the model (the exact measurement where the store has one) times the target's learned
   partition ratio, and the call overhead as the entry cost of every partition. This is the
   ``costs = "learned"`` variant of the tuner's cost-model knob (:mod:`placer.tune.space`).
3. Between trials the tuner feeds each measured partition to
   :meth:`CostModel.add_partition_measurements` (:func:`feed`); the correction is refitted when
   the next "learned" trial is priced (:func:`refresh`) and before :func:`save` writes the
   updated model at the end.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from placer.devices import make_target
from placer.errors import PlacerError, first_line
from placer.profile.store import default_db

# costmodels is imported inside the functions that fit or load a model, not here: it pulls in
# scikit-learn (about 1.5 s), which `placer tune --no-cost-model` and `placer report` never need.
# placer reaches costmodels only through this module (docs/architecture.md).

__all__ = ["current_fingerprints", "default_model_dir", "feed", "fit_or_update", "fit_store", "learned_costs",
           "partition_ratios", "refresh", "save", "tune_records"]

#: marks a partition record measured by ``placer tune`` (carried over between runs)
ORIGIN = "tune"
#: at most this many tune-measured partitions are carried over (the newest): re-measuring the same
#: single-target plans every run must not grow the model without bound
MAX_CARRIED = 4000


def default_model_dir(db: str | Path | None) -> Path:
    """The cost model directory that goes with a profile store: ``<store dir>/costmodel``."""
    return Path(db or default_db()).resolve().parent / "costmodel"


def _measured_by_tune(records) -> list[tuple[dict, float]]:
    """The ``(record, ms)`` pairs of ``records`` that ``placer tune`` measured (origin :data:`ORIGIN`)."""
    return [(r, m) for r, m in records if r.get("origin") == ORIGIN]


def tune_records(cm) -> list[tuple[dict, float]]:
    """The partition records of ``cm`` that ``placer tune`` measured (not re-derivable from the store)."""
    return _measured_by_tune(cm.partition_records)


def _carried(records) -> list[tuple[dict, float]]:
    """The ``records`` tune measured, the last :data:`MAX_CARRIED` of each target, on every target: a run
    on fewer targets than the last (``--targets onnxruntime:t2``) carries the others' too, which it
    saves back (it had dropped them: measurements no store holds). The partition correction is fitted
    per target, so another target's records change nothing of this run's."""
    kept: list[tuple[dict, float]] = []
    per_target: Counter = Counter()
    for r, m in reversed(_measured_by_tune(records)):
        per_target[r.get("target")] += 1
        if per_target[r.get("target")] <= MAX_CARRIED:
            kept.append((r, m))
    return kept[::-1]


def current_fingerprints(store, targets) -> dict[str, str]:
    """Target name -> fingerprint hash as the target is now, for ``targets`` and for each one-thread
    sibling of theirs the store holds (:func:`costmodels.sibling.sibling_candidates`); a sibling
    that cannot be made here is left out (the reader then takes its newest fingerprint)."""
    from costmodels.sibling import sibling_candidates  # the costmodels package: scikit-learn

    out = {t.name: store.target_hash(t) for t in targets}
    stored = [row["name"] for row in store.targets()]
    for t in targets:
        for name in sibling_candidates(t.name, stored):
            if name not in out:
                try:
                    out[name] = make_target(name).fingerprint_hash()  # read only: nothing registered
                except PlacerError:  # a runtime this machine lacks now
                    pass
    return out


def fit_or_update(ctx, model_dir: str | Path | None, say: Callable[[str], None] = lambda m: None, seed: int = 0):
    """A CostModel for the real targets of ``ctx`` fitted on its profile store, plus the partitions
    earlier tune runs measured (from the model saved in ``model_dir``, if any). The saved model's op
    models are reused where they were fitted on the same rows (``fit_cost_model(reuse=)``)."""
    from costmodels import CostModel  # scikit-learn: see the note at the top
    from costmodels.errors import CostModelError
    from costmodels.persistence import is_older_version, older_partition_records
    from costmodels.store import training_data_from_store
    from costmodels.train import fit_cost_model

    real = [t for t in ctx.targets if not getattr(t, "simulated", False)]
    names = [t.name for t in real]
    # the rows of the targets as they are now (their runtime versions), as the store's pricing reads,
    # and of the one-thread siblings a multi-thread target's op model may be fitted with
    data = training_data_from_store(ctx.store, graphs=[ctx.graph], targets=names,
                                    fingerprints=current_fingerprints(ctx.store, real))
    carried: list[tuple[dict, float]] = []
    prior, unreadable = None, None
    if model_dir is not None and (Path(model_dir) / "card.json").is_file():
        try:
            prior = CostModel.load(model_dir)
        except Exception as exc:  # noqa: BLE001 - integrity, format or version: refit, never trust it
            if is_older_version(model_dir):  # an older placer's: superseded, replaced by this run's save
                try:  # what tune measured into it is read from its tables alone (JSON, hash-checked)
                    carried = _carried(older_partition_records(model_dir))
                    kept = f"its {len(carried)} partition(s) measured by earlier tune runs carried over"
                except CostModelError as why:
                    kept = ("the partitions earlier tune runs measured into it not carried over "
                            f"({first_line(why, 300)})")
                say(f"cost model {model_dir}: saved by an older placer ({first_line(exc, 160)}); refitted "
                    f"from the profile store and replaced when this run saves; {kept}")
            else:
                say(f"cost model {model_dir}: not loaded ({type(exc).__name__}: {first_line(exc, 160)}); "
                    "refitted from the profile store; the model there is left as it is (not overwritten)")
                unreadable = (str(Path(model_dir).resolve()), f"{type(exc).__name__}: {first_line(exc, 160)}")
        else:
            carried = _carried(prior.partition_records)
    # the op models the saved one fitted on the same rows are taken as they are (a warm rerun fits none)
    cm = fit_cost_model(data, names, cv_metrics=False, seed=seed, reuse=prior)
    if unreadable is not None:
        cm._placer_unreadable = unreadable
    if carried:
        cm.add_partition_measurements([{**r, "measured_ms": m} for r, m in carried])
    cm.card["tune_partitions_carried"] = len(carried)
    reused = [t for t, c in cm.card.get("targets", {}).items() if c.get("reused")]
    how = (f"{len(reused)} of {len(cm.op_models)} op model(s) taken from the saved one (same rows)" if reused
           else f"fitted on the profile store ({cm.card.get('fit_seconds', 0):.1f}s)")
    say(f"cost model {cm.model_id}: {how}, {len(carried)} partition(s) measured by earlier tune runs "
        "carried over")
    return cm


def fit_store(db: str | Path, out_dir: str | Path, *, targets: Sequence[str] | None = None, tune_trials: int = 0,
              seed: int = 0, cv_folds: int = 4):
    """``placer fit``: fit a cost model on the profile store ``db`` and save it to ``out_dir`` (where
    ``placer tune`` starts from it: :func:`default_model_dir`); :func:`costmodels.train.fit_store`."""
    from costmodels.train import fit_store as _fit_store  # scikit-learn: see the note at the top

    return _fit_store(db, out_dir, targets=targets, tune_trials=tune_trials, seed=seed, cv_folds=cv_folds)


def partition_ratios(cm, targets: Sequence[str]) -> dict[str, float]:
    """Per target: the learned partition ratio (measured / sum of net isolated op costs), 1.0 if unknown."""
    refresh(cm)
    corr = getattr(cm, "partition", None)
    out = {}
    for t in targets:
        if corr is None:
            out[t] = 1.0
        else:
            out[t] = float(math.exp(corr.median_log_ratio_.get(t, corr.global_log_ratio_)))
    return out


def learned_costs(ctx, cm) -> tuple[np.ndarray, np.ndarray]:
    """``(cost_ms [ops, targets], entry_ms [targets])`` of ``ctx.problem``'s ops priced by ``cm``.

    A target the model does not know (a simulated one) keeps the problem's costs and entry 0. An
    op the model calls unsupported where the problem has a finite cost (an op that runs only in
    context, priced by proxy) keeps the problem's cost.
    """
    p = ctx.problem
    cost = np.array(p.cost_ms, dtype=float)
    entry = np.zeros(len(p.targets))
    known = set(cm.targets)
    ratios = partition_ratios(cm, [t for t in p.targets if t in known])
    for j, t in enumerate(p.targets):
        if t not in known:
            continue
        net = cm.predict_ops(ctx.graph, [t])[:, 0] * ratios[t]
        ok = np.isfinite(net) & np.isfinite(cost[:, j])
        cost[ok, j] = net[ok]
        entry[j] = cm.overhead_ms(t)
    return cost, entry


def feed(cm, rows: Sequence[Mapping[str, Any]], graph) -> int:
    """Give ``cm`` the measured partitions of one plan (rows of the tuner's partition feedback)."""
    if cm is None or not rows:
        return 0
    marked = [{**r, "origin": ORIGIN, "model": graph.name} for r in rows
              if r.get("measured_ms") is not None and math.isfinite(float(r["measured_ms"]))]
    added = cm.add_partition_measurements(marked, graph=graph, refit=False)
    if added:
        cm._placer_stale = True  # refitted when next priced or saved (see refresh)
    return added


def refresh(cm) -> None:
    """Refit ``cm``'s partition correction if partitions were fed since the last fit."""
    if getattr(cm, "_placer_stale", False):
        cm.refit_partition()
        cm._placer_stale = False


def save(cm, model_dir: str | Path, say: Callable[[str], None] = lambda m: None) -> Path | None:
    """Write the updated model to ``model_dir`` (a failure is said, not raised: the tune result stands).
    Never over a model :func:`fit_or_update` could not load from there: that one is the user's."""
    unreadable = getattr(cm, "_placer_unreadable", None)
    if unreadable is not None and unreadable[0] == str(Path(model_dir).resolve()):
        say(f"cost model not saved to {model_dir}: it holds a model this placer could not load "
            f"({unreadable[1]}), left intact; move it away (or pass another --cost-model DIR) to keep what "
            "this run learned")
        return None
    try:
        refresh(cm)
        path = cm.save(model_dir)
    except Exception as exc:  # noqa: BLE001
        say(f"cost model not saved to {model_dir}: {type(exc).__name__}: {first_line(exc, 160)}")
        return None
    say(f"cost model saved to {model_dir} ({len(tune_records(cm))} partition(s) measured by tune runs)")
    return Path(path)
