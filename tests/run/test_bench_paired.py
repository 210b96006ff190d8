"""Candidates compared round by round: the median of their per-round ratios, not a ratio of medians.

Turns are handed in (no clock): each test builds the rounds a bench would have recorded."""

from __future__ import annotations

import numpy as np
import pytest

from placer.run.bench import Candidate, PlanBench


def _bench(turns: dict[str, list[tuple[int, float, bool]]]) -> PlanBench:
    bench = PlanBench([{}])
    for key, ts in turns.items():
        cand = Candidate(key, None, None)
        cand.turns = list(ts)
        # the samples a median over all rounds sees: four requests per turn at the turn's median
        cand.samples_ms = [ms for _, ms, _ in ts for _ in range(4)]
        cand.samples_slowed = [s for _, _, s in ts for _ in range(4)]
        bench.candidates[key] = cand
    return bench


def test_a_slow_spell_that_hits_one_candidates_rounds_more_does_not_decide_the_comparison():
    # "a" takes 1.02x "b"'s time in every round; rounds 1-4 fall in a 1.5x slow spell. Alternating
    # order gave "b" the spell's first turns and "a" its last: a ratio of medians says "a" is 1.3x
    # faster than "b"; round by round it is 2% slower.
    spell = {1: 1.5, 2: 1.5, 3: 1.5, 4: 1.5, 5: 1.0, 6: 1.0, 7: 1.0}
    b = [(r, 3.6 * f, False) for r, f in spell.items()]
    a = [(r, 3.6 * 1.02 * f, False) for r, f in spell.items() if r != 4] + [(8, 3.6 * 1.02, False)]
    bench = _bench({"a": a, "b": b})
    medians = {k: bench.stats(k).median_ms for k in ("a", "b")}
    assert medians["a"] / medians["b"] == pytest.approx(3.672 / 5.4, rel=1e-3)  # the misleading figure
    assert bench.paired_ratio("a", "b") == pytest.approx(1.02)  # round 8 has no partner: not counted
    paired = bench.paired_ms(["a", "b"])
    anchor = min(medians, key=medians.get)
    assert paired[anchor] == medians[anchor] and anchor == "a"
    assert paired["b"] == pytest.approx(medians["a"] / 1.02)
    assert paired["a"] < paired["b"] * 1.03 and paired["a"] > paired["b"]


def test_rounds_in_which_a_core_was_slowed_are_left_out_while_half_remain():
    b = [(r, 4.0, False) for r in range(1, 7)]
    a = [(r, 4.0 * (2.0 if r in (2, 5) else 1.1), r in (2, 5)) for r in range(1, 7)]
    bench = _bench({"a": a, "b": b})
    assert bench.paired_ratio("a", "b") == pytest.approx(1.1)
    # most rounds slowed: every round counts (as quiet_samples does for samples)
    a_most = [(r, 4.0 * (2.0 if r > 1 else 1.1), r > 1) for r in range(1, 7)]
    assert _bench({"a": a_most, "b": b}).paired_ratio("a", "b") == pytest.approx(2.0)


def test_candidates_without_a_shared_round_have_no_paired_figure():
    bench = _bench({"a": [(1, 3.0, False)], "b": [(2, 4.0, False)], "c": []})
    assert bench.paired_ratio("a", "b") is None
    paired = bench.paired_ms(["a", "b", "c"])
    assert paired == {"a": 3.0}  # the anchor only; "c" was never timed
    assert np.isnan(bench.stats("c").median_ms)


def test_stats_since_a_mark_count_only_the_rounds_after_it():
    # three rounds at 2 ms, then the mark, then two at 3 ms (one slowed, left out while half remain)
    bench = _bench({"a": [(1, 2.0, False), (2, 2.0, False), (3, 2.0, False)]})
    mark = bench.n_samples()
    assert mark == {"a": 12}
    cand = bench.candidates["a"]
    cand.samples_ms += [3.0] * 4 + [9.0] * 4
    cand.samples_slowed += [False] * 4 + [True] * 4
    after = bench.stats("a", since=mark["a"])
    assert (after.median_ms, after.n, after.n_slowed, after.slowed_share) == (3.0, 4, 4, 0.5)
    assert bench.stats("a").median_ms == 2.0  # all rounds: the earlier ones are most of them
    assert bench.stats("a", since=len(cand.samples_ms)).n == 0  # nothing after the last request
