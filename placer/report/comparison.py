"""The rows of a placement comparison (``experiments.compare``) read against each other: which row is
the best single target, the best runtime default and the best default passing numerics, each row's
``speedup_vs_*`` columns, and the rows counted once per measured candidate."""

from __future__ import annotations

import math

__all__ = ["measured", "rank_rows", "unique_rows"]


def rank_rows(rows: list[dict], singles: list[dict], paired_ratios: dict) -> tuple[dict | None, dict | None,
                                                                             dict | None]:
    """The rows every other is read against, ``(best single target, best default, best default passing
    numerics)``, and each row's ``speedup_vs_*`` columns (the two rows' own ratio, round by round, from
    ``paired_ratios``; their paired figures' ratio where they shared no round).

    The best single target and the best 1-thread runtime are the fastest among the rows whose outputs
    pass the check at this run's precision, as tune's own best single (resnet50's OpenVINO in bf16 fails
    the bf16 check: read against it, the tuned plan showed 0.517x "the best single target"); a row
    without a finite figure (a runtime whose process died before the final rounds) is the best of
    nothing."""
    def fastest(cands: list[dict]) -> dict | None:
        return min(cands, key=lambda r: r["paired_ms"]) if cands else None

    best_single = fastest([r for r in singles if r.get("numerics_ok") is not False and measured(r)])
    ys = [r for r in rows if r.get("kind") == "yardstick" and measured(r)]
    best_default = fastest(ys)
    # the fastest yardstick whose outputs pass the numerics check at this run's precision (OpenVINO's
    # default computes bf16 on a CPU that has it: fast, but not within the f32 tolerance)
    best_default_ok = fastest([r for r in ys if r.get("numerics_ok")])
    ort_default = next((r for r in ys if r["placement"] == "yardstick:ort-default"), None)
    best_one = fastest([r for r in rows if r.get("kind") == "1-thread" and measured(r)
                        and r.get("numerics_ok") is not False])
    for r in rows:
        for col, ref_row in (("speedup_vs_best_single", best_single), ("speedup_vs_best_default", best_default),
                             ("speedup_vs_best_default_ok", best_default_ok),
                             ("speedup_vs_ort_default", ort_default), ("speedup_vs_best_1thread", best_one)):
            if r.get("measured_ms") and ref_row:  # the two rows' own ratio, round by round
                r[col] = 1.0 / (paired_ratios.get((r["key"], ref_row["key"]))
                                or r["paired_ms"] / ref_row["paired_ms"])
    return best_single, best_default, best_default_ok


def measured(row: dict) -> bool:
    """Whether ``row`` has a finite measured and paired figure (a runtime whose process died before the
    final rounds has NaN there: it cannot be the best of anything)."""
    return all(isinstance(row.get(k), (int, float)) and math.isfinite(row[k]) and row[k] > 0
               for k in ("measured_ms", "paired_ms"))


def unique_rows(rows: list[dict]) -> list[dict]:
    """The model's rows with one row per measured candidate (the greedy, cpsat, plan and tuned rows
    share a single target's key, and its samples)."""
    seen: set = set()
    out = []
    for r in rows:
        if r.get("key") in seen:
            continue
        seen.add(r.get("key"))
        out.append(r)
    return out
