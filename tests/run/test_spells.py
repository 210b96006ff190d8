"""placer.run.spells: a spell of the host read in the model's own figures (all-core targets at their
1-thread pace, against the store's quiet ratio)."""

from __future__ import annotations

import pytest

from placer.devices import make_targets
from placer.run.bench import RatioWatch
from placer.run.spells import (SPELL_GIVE, SPELL_RATIO, THROUGHPUT_SPELL_RATIO, SpellPair, quiet_choice,
                               quiet_ratios, runtime_pairs, spell_watches, spelled_rounds, unread_spell)

TARGETS = make_targets(["onnxruntime:t2", "openvino:t2", "onnxruntime:t1", "openvino:t1", "openvino@cpu0:t1"])
KEYS = {t.name: f"key:{t.name}" for t in TARGETS}
STORED = {"onnxruntime@cpu:t1": 3.0, "onnxruntime@cpu:t2": 1.6, "openvino@cpu:t1": 0.30,
          "openvino@cpu:t2": 0.20, "openvino@cpu0:t1": 0.31}


def figures(**ms):
    named = {f"key:{k.replace('_t', '@cpu:t')}": v for k, v in ms.items()}
    return named.get


def test_pairs_are_each_runtimes_1_thread_and_all_core_targets_unpinned_and_measured():
    assert runtime_pairs(TARGETS, KEYS) == [("onnxruntime", "onnxruntime@cpu:t1", "onnxruntime@cpu:t2"),
                                             ("openvino", "openvino@cpu:t1", "openvino@cpu:t2")]
    only = {k: v for k, v in KEYS.items() if k != "onnxruntime@cpu:t1"}
    assert runtime_pairs(TARGETS, only) == [("openvino", "openvino@cpu:t1", "openvino@cpu:t2")]


def test_a_spell_is_a_runtime_far_above_its_stored_ratio():
    # both runtimes' all-core targets at their 1-thread pace: a spell
    spell = unread_spell(TARGETS, KEYS, STORED, figures(onnxruntime_t1=3.0, onnxruntime_t2=3.1,
                                                        openvino_t1=0.30, openvino_t2=0.31))
    assert [p.kind for p in spell] == ["onnxruntime", "openvino"]
    assert spell[1].stored_ratio == 0.20 / 0.30 and spell[1].measured_ratio == 0.31 / 0.30
    assert spell[1].measured_ratio > SPELL_RATIO * spell[1].stored_ratio
    # one runtime as in the store: the other reads the spell alone (a stored row may be a spell's)
    assert [p.kind for p in unread_spell(TARGETS, KEYS, STORED, figures(
        onnxruntime_t1=3.0, onnxruntime_t2=1.7, openvino_t1=0.30, openvino_t2=0.31))] == ["openvino"]
    # all as in the store, uniformly slower (a spell the probes read slows both alike): none
    assert unread_spell(TARGETS, KEYS, STORED, figures(onnxruntime_t1=6.0, onnxruntime_t2=3.2,
                                                       openvino_t1=0.60, openvino_t2=0.40)) == []


def test_no_spell_without_the_figures_to_tell():
    assert unread_spell(TARGETS, KEYS, {}, figures(openvino_t1=0.30, openvino_t2=0.31)) == []
    # a runtime without a figure is left out; the other decides
    spell = unread_spell(TARGETS, KEYS, STORED, figures(openvino_t1=0.30, openvino_t2=0.31))
    assert [p.kind for p in spell] == ["openvino"]


def test_a_spell_that_lasted_gives_a_narrow_1_thread_win_to_the_all_core_target():
    pair = SpellPair("openvino", "one", "all", stored_ratio=0.67, measured_ratio=1.05)
    fig = {"one": 0.304, "all": 0.318}.get
    assert quiet_choice("one", [pair], fig) is pair  # 4.6% slower in the spell, 1.5x faster when quiet
    assert quiet_choice("all", [pair], fig) is None  # the all-core target won anyway
    assert quiet_choice("trial 3", [pair], fig) is None  # a plan of several targets: no quiet figure
    # the 1-thread target won by more than the give: it stays
    assert quiet_choice("one", [pair], {"one": 0.30, "all": 0.30 * (1 + SPELL_GIVE) * 1.01}.get) is None
    # the store has the all-core target barely faster when quiet: nothing to gain
    flat = SpellPair("openvino", "one", "all", stored_ratio=0.95, measured_ratio=1.3)
    assert quiet_choice("one", [flat], fig) is None
    assert quiet_choice("one", [], fig) is None


def test_a_spell_that_lasted_gives_a_1_thread_win_to_another_runtimes_all_core_target():
    # session 31, shufflenet: ONNX Runtime at 1 thread won final rounds taken in a spell in which its
    # own all-core target ran 1.24x slower (gives nothing) and OpenVINO's ran at its 1-thread pace
    ort = SpellPair("onnxruntime", "ort1", "ort2", stored_ratio=0.59, measured_ratio=1.24)
    ov = SpellPair("openvino", "ov1", "ov2", stored_ratio=0.51, measured_ratio=1.00)
    fig = {"ort1": 4.50, "ort2": 5.58, "ov1": 4.58, "ov2": 4.58}.get
    assert quiet_choice("ort1", [ort, ov], fig) is ov  # 1.8% slower in the spell, ~2.3 ms when quiet
    assert quiet_choice("ov1", [ort, ov], fig) is ov  # its own all-core target, as before
    # both all-core targets within the give: the one the store has fastest when quiet
    close = {"ort1": 4.50, "ort2": 4.60, "ov1": 4.58, "ov2": 4.58}.get
    assert quiet_choice("ort1", [ort, ov], close) is ov  # 4.58 * 0.51 < 4.50 * 0.59
    # another runtime's all-core target the store has barely faster than the winner when quiet
    slow_ov = SpellPair("openvino", "ov1", "ov2", stored_ratio=0.95, measured_ratio=1.3)
    assert quiet_choice("ort1", [slow_ov], fig) is None  # "ort1" is none of the pairs' targets
    assert quiet_choice("ort1", [ort, slow_ov], fig) is None


def test_polling_for_a_spells_end_stops_at_its_deadline():
    import time

    from placer.run.bench import PlanBench
    from placer.run.spells import wait_spell_end

    pair = SpellPair("onnxruntime", "one", "all", stored_ratio=0.5, measured_ratio=1.0)
    bench = PlanBench([{}])  # no candidate is measured: the deadline, already past, ends the wait first
    assert wait_spell_end(bench, [pair], polls=10, per_round=2, deadline=time.monotonic() - 1.0) is False


def test_polls_for_a_spells_end_leave_the_figures_of_the_rounds_before_them(monkeypatch):
    from mz_models import diamond_model, graph_of

    from placer.materialize import materialize
    from placer.run.bench import QUIET_WAIT_ENV, PlanBench
    from placer.run.numerics import random_inputs
    from placer.run.spells import wait_spell_end

    monkeypatch.setenv(QUIET_WAIT_ENV, "0")
    g = graph_of(diamond_model())
    mat = materialize(g, {op.id: "onnxruntime" for op in g.ops})
    with PlanBench([random_inputs(g, seed=0)], rounds=2, per_round=3) as bench:
        for key in ("one", "all", "plan"):
            bench.add(key, mat)
        bench.measure(["one", "all", "plan"], fresh=True)
        before = {k: (list(c.samples_ms), list(c.turns), list(c.partition_slowed),
                      {p: list(v) for p, v in c.partition_ms.items()}) for k, c in bench.candidates.items()}
        figures = bench.paired_ms(["one", "all", "plan"], anchor="plan")
        # a stored ratio of 0: no poll reads the spell as over, so every poll runs (a lasting spell)
        lasting = SpellPair("onnxruntime", "one", "all", stored_ratio=0.0, measured_ratio=1.0)
        # and a watch that reads every round as a spell: the polls' rounds are not counted as the
        # measurement's (a report quotes spell_rounds as rounds of the figures)
        bench.watches = [RatioWatch("one", "all", 0.0)]
        assert wait_spell_end(bench, [lasting], polls=2, per_round=3) is False
        assert bench._round == 2 + 2  # the polls ran ...
        after = {k: (c.samples_ms, c.turns, c.partition_slowed, c.partition_ms) for k, c in bench.candidates.items()}
        assert after == before  # ... and left no sample, turn or timed partition behind
        assert bench.spell_rounds == 0
        bench.watches = []
        assert bench.paired_ms(["one", "all", "plan"], anchor="plan") == figures
        # a spell that ends at the first poll: its round is forgotten too (the caller measures afresh)
        ended = SpellPair("onnxruntime", "one", "all", stored_ratio=float("inf"), measured_ratio=1.0)
        assert wait_spell_end(bench, [ended], polls=2, per_round=3) is True
        assert bench._round == 5 and len(bench.candidates["one"].turns) == 2


def test_each_runtime_with_both_stored_rows_watches_its_rounds_at_the_spell_ratio():
    watches = spell_watches(TARGETS, KEYS, STORED)
    assert [(w.base, w.key) for w in watches] == [("key:onnxruntime@cpu:t1", "key:onnxruntime@cpu:t2"),
                                                  ("key:openvino@cpu:t1", "key:openvino@cpu:t2")]
    assert [w.limit for w in watches] == pytest.approx([SPELL_RATIO * 1.6 / 3.0, SPELL_RATIO * 0.20 / 0.30])
    assert all(isinstance(w, RatioWatch) for w in watches)
    # a runtime the store lacks a row of, or the bench a target of, is not watched
    partial = {k: v for k, v in STORED.items() if k != "onnxruntime@cpu:t2"}
    assert [w.base for w in spell_watches(TARGETS, KEYS, partial)] == ["key:openvino@cpu:t1"]
    only = {k: v for k, v in KEYS.items() if k != "openvino@cpu:t2"}
    assert [w.base for w in spell_watches(TARGETS, only, STORED)] == ["key:onnxruntime@cpu:t1"]


def test_throughput_rounds_read_as_a_spell_against_the_quietest_ratio_of_each_runtime():
    pair, other = ("ort:t1", "ort:t2"), ("ov:t1", "ov:t2")
    rounds = [{"ort:t1": 140.0, "ort:t2": 107.0, "ov:t1": 133.0, "ov:t2": 250.0},  # ORT on 2 cores at its 1-thread rate
              {"ort:t1": 141.0, "ort:t2": 265.0, "ov:t1": 133.0, "ov:t2": 120.0},  # OpenVINO's turn
              {"ort:t1": 138.0, "ort:t2": 253.0, "ov:t1": 134.0, "ov:t2": 237.0},
              {"ort:t1": 138.0, "ov:t2": 100.0}]  # a pair without both figures reads nothing
    assert spelled_rounds(rounds, [pair, other]) == [True, True, False, False]
    # the quietest ratio comes from the rounds or from a figure taken before, whichever is lower
    assert spelled_rounds(rounds[2:3], [pair], {pair: 0.30}) == [True]
    assert spelled_rounds(rounds[2:3], [pair], {pair: 0.70}) == [False]
    # just under and over the ratio, relative to the quietest round
    quiet, limit = 100.0 / 190.0, THROUGHPUT_SPELL_RATIO
    assert spelled_rounds([{"ort:t1": 100.0, "ort:t2": 190.0 / (limit * 0.99)}], [pair], {pair: quiet}) == [False]
    assert spelled_rounds([{"ort:t1": 100.0, "ort:t2": 190.0 / (limit * 1.01)}], [pair], {pair: quiet}) == [True]
    # a 2-core runtime's own noise in a round every other candidate ran at its fastest: not a spell
    noisy = {"ov:t1": 133.0, "ov:t2": 191.0}
    assert spelled_rounds([noisy, {"ov:t1": 131.0, "ov:t2": 246.0}], [other]) == [False, False]
    assert spelled_rounds([noisy], [other], ratio=1.3, quiet={other: 131.0 / 246.0}) == [True]
    assert spelled_rounds([], [pair]) == []


def test_the_baselines_quiet_ratio_reads_rounds_the_right_way_round():
    # the latency bench's times per request (ms) against rounds' requests/s: the same orientation
    pair = ("ort:t1", "ort:t2")
    quiet = quiet_ratios({"ort:t1": 10.0, "ort:t2": 5.3, "ov:t1": 9.0}, [pair, ("ov:t1", "ov:t2")])
    assert quiet == {pair: pytest.approx(0.53)}  # OpenVINO lacks its all-core figure: no ratio
    two_cores = {"ort:t1": 100.0, "ort:t2": 190.0}  # 1.9x the requests/s on two cores: as quiet
    in_a_spell = {"ort:t1": 100.0, "ort:t2": 100.0}  # the all-core runtime at its 1-thread rate
    assert spelled_rounds([two_cores, in_a_spell], [pair], quiet) == [False, True]
    assert spelled_rounds([in_a_spell], [pair], quiet) == [True]  # no quiet round needed to read it
