"""Rounds added for quiet samples (``PlanBench.measure(until_quiet=...)``): a spell of slowed cores can
outlast a whole measurement; the bench then adds rounds, each after waiting for quiet cores, bounded
by a count and a deadline.

A host's spell cannot be staged in a test: the ``always_slowed`` fixture (tests/conftest.py) seeds the
cores' references far faster than any core runs, so every probe reads slowed."""

from __future__ import annotations

import time

from placer.materialize import materialize
from placer.run.bench import Candidate, PlanBench, RatioWatch, wait_quiet
from placer.run.numerics import random_inputs


def _plan_bench(keys=("ort",)):
    from mz_models import diamond_model, graph_of

    g = graph_of(diamond_model())
    mat = materialize(g, {op.id: "onnxruntime" for op in g.ops})
    bench = PlanBench([random_inputs(g, seed=0)], rounds=2, per_round=3)
    for key in keys:
        bench.add(key, mat)
    return bench


def test_a_measurement_slowed_throughout_gets_its_extra_rounds_and_no_more(always_slowed, added_rounds):
    with _plan_bench() as bench:
        stats = bench.measure(["ort"], until_quiet=3, quiet_wait=0.0)
        assert bench.extra_rounds == 3  # never quiet: the count bounds it
        assert [t[0] for t in bench.candidates["ort"].turns] == [1, 2, 3, 4, 5]
        assert all(t[2] for t in bench.candidates["ort"].turns)  # every turn read slowed
        assert bench.mostly_slowed(["ort"])
        assert stats["ort"].n == 5 * 2 and stats["ort"].n_slowed == 0  # all count: none quiet
        assert stats["ort"].slowed_share == 1.0  # ... which the share of slowed samples tells
        bench.measure(["ort"], until_quiet=3, deadline=time.monotonic() - 1.0)  # past the deadline
        assert bench.extra_rounds == 0 and len(bench.candidates["ort"].turns) == 7
        bench.measure(["ort"])  # without until_quiet, as before
        assert bench.extra_rounds == 0 and len(bench.candidates["ort"].turns) == 9
    assert wait_quiet(0.0) is False  # slowed, and no time to wait


def test_added_rounds_are_capped_by_the_environment(always_slowed, monkeypatch):
    """``$PLACER_ADDED_ROUNDS`` caps the rounds added for quiet samples (the suite sets 0); a value
    that is not an integer >= 0 leaves the caller's count."""
    from placer.run.bench import ADDED_ROUNDS_ENV, added_rounds

    with _plan_bench() as bench:
        monkeypatch.setenv(ADDED_ROUNDS_ENV, "1")
        bench.measure(["ort"], until_quiet=3, quiet_wait=0.0)
        assert bench.extra_rounds == 1 and len(bench.candidates["ort"].turns) == 2 + 1
        monkeypatch.setenv(ADDED_ROUNDS_ENV, "0")
        bench.measure(["ort"], until_quiet=3, quiet_wait=0.0)
        assert bench.extra_rounds == 0 and len(bench.candidates["ort"].turns) == 3 + 2
    for value, asked, got in (("2", 5, 2), ("7", 5, 5), ("-1", 5, 5), ("many", 5, 5), ("", 4, 4)):
        monkeypatch.setenv(ADDED_ROUNDS_ENV, value)
        assert added_rounds(asked) == got, value


def test_a_candidate_is_mostly_slowed_only_when_its_quiet_samples_cannot_be_used_alone():
    bench = PlanBench([{}])

    def cand(key, slowed):
        c = Candidate(key, None, None)
        c.samples_ms = [1.0] * len(slowed)
        c.samples_slowed = list(slowed)
        bench.candidates[key] = c

    cand("quiet", [False] * 6)
    cand("half", [True] * 3 + [False] * 3)  # half quiet: the slowed ones are left out
    cand("most", [True] * 4 + [False] * 2)  # fewer quiet than slowed: every sample would count
    assert not bench.mostly_slowed(["quiet", "half"])
    assert bench.mostly_slowed(["quiet", "most"])
    # n_slowed 0 for both "quiet" and "most": the share of samples taken slowed tells them apart
    assert [(bench.stats(k).n_slowed, bench.stats(k).slowed_share) for k in ("quiet", "half", "most")] \
        == [(0, 0.0), (3, 0.5), (0, 4 / 6)]


def test_a_round_a_watch_reads_as_a_spell_counts_as_slowed_for_every_candidate(added_rounds):
    with _plan_bench(("one", "all", "plan")) as bench:
        # no limit is passed: no round reads as a spell (the probes may still read some slowed)
        bench.watches = [RatioWatch("one", "all", float("inf"))]
        bench.measure(["one", "all", "plan"])
        assert bench.spell_rounds == 0
        # every ratio is over a limit of 0: each round reads as a spell, every turn in it too
        bench.watches = [RatioWatch("one", "all", 0.0)]
        stats = bench.measure(["one", "all", "plan"], fresh=True, until_quiet=2, quiet_wait=0.0)
        assert bench.spell_rounds == 2 + 2  # the measurement's own rounds and the two added for quiet
        assert bench.extra_rounds == 2
        for key in ("one", "all", "plan"):
            cand = bench.candidates[key]
            assert len(cand.turns) == 4 and all(t[2] for t in cand.turns)
            assert all(cand.samples_slowed) and len(cand.samples_slowed) == len(cand.samples_ms) == 4 * 2
            assert all(cand.partition_slowed[-4:])
            assert stats[key].n == 8 and stats[key].n_slowed == 0  # none quiet: all count
        assert bench.mostly_slowed(["plan"])
        # the probes read such spells quiet: after a round a watch read, each added round waits it out
        t0 = time.monotonic()
        bench.measure(["one", "all"], rounds=1, until_quiet=2, quiet_wait=0.2)
        assert time.monotonic() - t0 >= 2 * 0.2 and bench.extra_rounds == 2 and bench.spell_rounds == 7
        # a watch whose candidates are not in the round reads nothing
        bench.measure(["plan"], rounds=1)
        assert bench.spell_rounds == 7 and len(bench.candidates["plan"].turns) == 5


def test_only_figures_on_quiet_samples_are_settled():
    bench = PlanBench([{}])
    for key, slowed in (("quiet", [False] * 4), ("half", [True, True, False, False]), ("most", [True] * 3 + [False])):
        c = Candidate(key, None, None)
        c.samples_ms, c.samples_slowed = [1.0] * len(slowed), list(slowed)
        bench.candidates[key] = c
    assert bench.settled(["most", "quiet", "half"]) == ["quiet", "half"]
    assert bench.settled([]) == []
