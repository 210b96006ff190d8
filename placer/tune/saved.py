"""The types of what ``placer tune`` saved (tune.json, trials.json), checked before ``placer report``
renders them: a value of the wrong type (an edited or damaged file) is a one-line PlacerError naming
the file, the record and the key, never a TypeError deep in the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from placer.errors import PlacerError

_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
#: field -> accepted JSON types of a saved TrialRecord (the report renders them: a wrong type would crash it)
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "key": (str,), "label": (str,), "kind": (str,), "knobs": (dict,), "plan": (dict, type(None)),
    "predicted_ms": _NUM, "measured_ms": _OPT_NUM, "p10_ms": _OPT_NUM, "p90_ms": _OPT_NUM,
    "throughput_rps": _OPT_NUM, "n_partitions": (int,), "numerics_ok": (bool, type(None)),
    "max_abs_err": _OPT_NUM, "solve_s": _NUM, "error": (str, type(None)), "partitions": (list,),
    "final": (bool,), "paired_ms": _OPT_NUM, "anchored_predicted_ms": _OPT_NUM,
    "store_predicted_ms": _OPT_NUM,
}
_REQUIRED = ("key", "label", "kind", "knobs", "plan", "predicted_ms")
_SUMMARY_TYPES: dict[str, tuple[type, ...]] = {
    "best": (str,), "best_single": (str,), "objective": (str,), "fell_back": (bool,), "wall_s": _NUM,
    "study_storage": (str, type(None)), "extra": (dict,), "targets": (list,), "model": (str, type(None)),
}


def _type_error(where: str, key: str, value: Any, want: tuple[type, ...]) -> PlacerError:
    names = " or ".join("null" if t is type(None) else t.__name__ for t in want)
    return PlacerError(f"{where}: {key!r} is {type(value).__name__} {str(value)[:40]!r}, expected {names}")


def check_summary(summary: Any, where: Path) -> None:
    """tune.json: an object of the placer.tune format whose keys have the types the report reads."""
    if not isinstance(summary, dict) or summary.get("format", "placer.tune") != "placer.tune":
        raise PlacerError(f"{where}: not a placer tune summary")
    for key, want in _SUMMARY_TYPES.items():
        if key in ("study_storage", "extra", "targets", "model") and key not in summary:
            continue
        v = summary.get(key)
        if isinstance(v, bool) and bool not in want or not isinstance(v, want):
            raise _type_error(str(where), key, v, want)
    if not all(isinstance(t, str) for t in summary.get("targets", [])):
        raise PlacerError(f"{where}: 'targets' must be a list of target names")
    if summary["objective"] not in ("latency", "throughput"):
        raise PlacerError(f"{where}: objective {summary['objective'][:40]!r} is not latency or throughput")


def checked_record(r: Any, where: str) -> dict[str, Any]:
    """A copy of one trials.json record, every key a TrialRecord field of the right type."""
    if not isinstance(r, dict):
        raise PlacerError(f"{where}: expected an object")
    unknown = sorted(set(r) - set(_RECORD_TYPES))
    if unknown:
        raise PlacerError(f"{where}: unknown keys {unknown[:5]}")
    missing = [k for k in _REQUIRED if k not in r]
    if missing:
        raise PlacerError(f"{where}: missing {missing}")
    for key, v in r.items():
        want = _RECORD_TYPES[key]
        if isinstance(v, bool) and bool not in want or not isinstance(v, want):
            raise _type_error(where, key, v, want)
    if not all(isinstance(p, dict) for p in r.get("partitions", [])):
        raise PlacerError(f"{where}: 'partitions' must be a list of objects")
    return dict(r)
