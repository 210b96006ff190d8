"""`placer plan`'s honesty check (`api.honest`) on synthetic costs: a cut plan must be predicted
clearly faster than the best single target, and a single target priced at 0 ms is never beaten."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from mz_models import diamond_model, graph_of

from placer.api import CUT_MARGIN, honest
from placer.problem import PlacementProblem, Tensor
from placer.solve.evaluate import make_latency_plan


def _chain(cost_a: float, cost_b: tuple[float, float]) -> PlacementProblem:
    """Two ops in a chain on targets a, b: a costs ``cost_a`` per op, b ``cost_b``; free links."""
    return PlacementProblem(ops=["x", "y"], targets=["a", "b"],
                            cost_ms=np.array([[cost_a, cost_b[0]], [cost_a, cost_b[1]]]),
                            tensors=[Tensor("t", "x", ("y",), 4)])


def test_a_single_target_priced_at_zero_is_kept_not_divided_by():
    p = _chain(0.0, (0.0, 0.0))
    cut = make_latency_plan(p, np.array([0, 1]), "greedy")
    plan, note = honest(SimpleNamespace(problem=p), cut)
    assert len(set(plan.assignment.values())) == 1
    assert "priced at 0 ms" in note


def test_a_cut_within_the_pricing_error_keeps_the_single_target_and_a_clear_gain_keeps_the_cut():
    slight = _chain(1.0, (1.0, 0.999))  # cutting saves 0.05%: within the error
    plan, note = honest(SimpleNamespace(problem=slight), make_latency_plan(slight, np.array([0, 1]), "greedy"))
    assert len(set(plan.assignment.values())) == 1 and "within the pricing's error" in note
    clear = _chain(1.0, (5.0, 0.1))  # a then b: 1.1 ms against 2 ms on a alone
    cut = make_latency_plan(clear, np.array([0, 1]), "greedy")
    assert 1.0 - cut.makespan_ms / 2.0 > CUT_MARGIN
    plan, note = honest(SimpleNamespace(problem=clear), cut)
    assert plan is cut and note == ""


def test_placer_plan_measures_a_cut_plan_unless_told_not_to():
    from placer.cli import build_parser

    assert build_parser().parse_args(["plan", "zoo:tiny"]).measure is True
    assert build_parser().parse_args(["plan", "zoo:tiny", "--no-measure"]).measure is False
    assert build_parser().parse_args(["plan", "zoo:tiny", "--measure"]).measure is True


def _diamond_ctx(cost_ort: float, cost_ov: float):
    """The diamond model's ops on two real 1-thread targets, priced per op (no links)."""
    g = graph_of(diamond_model())
    ops = [op.id for op in g.ops]
    p = PlacementProblem(ops=ops, targets=["onnxruntime@cpu:t1", "openvino@cpu:t1"],
                         cost_ms=np.array([[cost_ort, cost_ov]] * len(ops)), tensors=[])
    return SimpleNamespace(problem=p, graph=g, tolerance={})


def test_measuring_runs_the_single_targets_priced_near_the_best_and_keeps_one_of_them():
    """A runtime profiled in a slow spell is priced up to 1.5x its time: with ``measure``, every
    single-target plan priced within RIVALS_WITHIN of the best is run against the chosen plan."""
    from placer.api import EXTRA_ROUNDS, MEASURE_ROUNDS, RIVALS_WITHIN
    from placer.solve import solve

    said = []
    ctx = _diamond_ctx(1.0, 1.3)  # OpenVINO priced 1.3x ONNX Runtime: within the margin
    chosen = solve(ctx.problem, "latency", "single:onnxruntime@cpu:t1")
    plan, note = honest(ctx, chosen, measure=True, say=said.append)
    assert 1.3 < RIVALS_WITHIN and note == said[0]
    assert "single:onnxruntime@cpu:t1" in note and "single:openvino@cpu:t1" in note and "round by round" in note
    assert len(set(plan.assignment.values())) == 1
    assert note.endswith(f"kept {plan.solver}")
    # five rounds, plus up to EXTRA_ROUNDS added while most turns read the cores slowed, plus
    # EXTRA_ROUNDS more when those could not tell the two apart (within TIE_BAND)
    rounds = int(note.split(" rounds: ")[0].removeprefix("measured in "))
    assert MEASURE_ROUNDS <= rounds <= MEASURE_ROUNDS + 2 * EXTRA_ROUNDS
    # priced beyond the margin: not measured, nothing said
    far = _diamond_ctx(1.0, RIVALS_WITHIN * 1.1)
    chosen = solve(far.problem, "latency", "single:onnxruntime@cpu:t1")
    said.clear()
    assert honest(far, chosen, measure=True, say=said.append) == (chosen, "") and not said


def test_a_rival_that_cannot_run_is_left_out_and_the_plan_kept(monkeypatch):
    """A rival single-target plan that fails to compile (or whose outputs fail the check) is no rival:
    it is left out, said so, and the chosen plan stands; it had stopped `placer plan` with an error
    about a plan it was not asked for."""
    from placer.devices.testing import FAULT_ENV, register_test_targets
    from placer.solve import solve

    register_test_targets()
    monkeypatch.setenv(FAULT_ENV, "Relu")  # the diamond has a Relu: test-error refuses to compile it
    g = graph_of(diamond_model())
    ops = [op.id for op in g.ops]
    p = PlacementProblem(ops=ops, targets=["onnxruntime@cpu:t1", "test-error@cpu:t1"],
                         cost_ms=np.array([[1.0, 1.2]] * len(ops)), tensors=[])
    ctx = SimpleNamespace(problem=p, graph=g, tolerance={})
    chosen = solve(p, "latency", "single:onnxruntime@cpu:t1")
    said: list[str] = []
    plan, note = honest(ctx, chosen, measure=True, say=said.append)
    assert plan is chosen
    assert said and said[0].startswith("--measure: left out single:test-error@cpu:t1 (")
    assert note.startswith("measured nothing: its rivals left out: single:test-error@cpu:t1 (")


def test_a_close_call_is_two_fastest_plans_within_the_tie_band():
    from placer.api import TIE_BAND, close_call

    assert close_call({"chosen": 1.0, "rival 0": 1.05})  # the rival 5% slower: more rounds
    assert close_call({"chosen": 1.0, "rival 0": 0.95, "rival 1": 1.4})  # the rival 5% faster
    assert not close_call({"chosen": 1.0, "rival 0": TIE_BAND * 1.01})
    assert not close_call({"chosen": 1.0, "rival 0": 0.8, "rival 1": 1.2})  # the fastest stands apart
    assert not close_call({"chosen": 1.0})


def test_measuring_reads_a_spell_of_the_host_and_says_when_it_gives_the_all_core_target_its_due(added_rounds):
    """ONNX Runtime at 1 and 2 threads, the store's 2-thread / 1-thread ratio out of reach (0.01): every
    round reads as a spell (placer.run.spells), so the rounds for quiet samples are all added; the
    choice is the faster round by round, unless the 1-thread plan won by at most SPELL_GIVE, in which
    case the all-core one is kept and the note says why."""
    from placer.api import EXTRA_ROUNDS, MEASURE_ROUNDS
    from placer.devices import make_targets
    from placer.solve import solve

    g = graph_of(diamond_model())
    names = ["onnxruntime@cpu:t1", "onnxruntime@cpu:t2"]
    ops = [op.id for op in g.ops]
    p = PlacementProblem(ops=ops, targets=names, cost_ms=np.array([[1.0, 1.2]] * len(ops)), tensors=[])
    ctx = SimpleNamespace(problem=p, graph=g, tolerance={},
                          targets=make_targets(["onnxruntime:t1", "onnxruntime:t2"]),
                          table=SimpleNamespace(whole_model_ms={names[0]: 1.0, names[1]: 0.01}))
    said = []
    chosen = solve(p, "latency", f"single:{names[0]}")
    plan, note = honest(ctx, chosen, measure=True, say=said.append)
    rounds = int(note.split(" rounds: ")[0].removeprefix("measured in "))
    assert MEASURE_ROUNDS + EXTRA_ROUNDS <= rounds <= MEASURE_ROUNDS + 2 * EXTRA_ROUNDS  # never quiet
    kept = set(plan.assignment.values())
    if " instead of " in note:
        assert kept == {names[1]} and f"kept {plan.solver} instead of single:{names[0]}: a spell" in note
    else:
        assert len(kept) == 1 and note.endswith(f": kept {plan.solver}")


def _wrong_ctx(cost_wrong: float, cost_ort: float, with_ort: bool = True):
    """The diamond model on ``test-wrong`` (ONNX Runtime whose outputs are off by one: the check fails,
    as a bf16 target's may) and ONNX Runtime, both 1-thread, priced per op (no links)."""
    from placer.devices.testing import register_test_targets

    register_test_targets()
    g = graph_of(diamond_model())
    ops = [op.id for op in g.ops]
    names = ["test-wrong@cpu:t1"] + (["onnxruntime@cpu:t1"] if with_ort else [])
    costs = [cost_wrong] + ([cost_ort] if with_ort else [])
    p = PlacementProblem(ops=ops, targets=names, cost_ms=np.array([costs] * len(ops)), tensors=[])
    return SimpleNamespace(problem=p, graph=g, tolerance={})


def test_a_chosen_plan_whose_outputs_fail_the_check_gives_way_to_a_single_target_that_passes():
    """`placer plan` returned OpenVINO in bf16 for resnet50, whose outputs fail the bf16 check (session 50):
    the chosen plan's outputs were checked only when a rival was priced near it, and when one was, a
    failing plan stopped the command. Now it is left out, said so, and the next single target stands."""
    from placer.api import RIVALS_WITHIN
    from placer.solve import solve

    for cost_ort in (1.3, RIVALS_WITHIN * 2):  # a rival priced near it, and none
        ctx = _wrong_ctx(1.0, cost_ort)
        chosen = solve(ctx.problem, "latency", "single:test-wrong@cpu:t1")
        said: list[str] = []
        plan, note = honest(ctx, chosen, measure=True, say=said.append)
        assert set(plan.assignment.values()) == {"onnxruntime@cpu:t1"}, note
        assert said[0].startswith("--measure: left out the single:test-wrong@cpu:t1 plan (its outputs differ")
        assert "single:onnxruntime@cpu:t1 stands in for it" in said[0]
        assert note.startswith("left out the single:test-wrong@cpu:t1 plan (its outputs differ")
        assert note.endswith("kept single:onnxruntime@cpu:t1")


def test_a_failing_plan_with_no_single_target_to_stand_in_is_an_error():
    import pytest

    from placer.errors import PlacerError
    from placer.solve import solve

    ctx = _wrong_ctx(1.0, 0.0, with_ort=False)
    chosen = solve(ctx.problem, "latency", "single:test-wrong@cpu:t1")
    with pytest.raises(PlacerError, match="single:test-wrong@cpu:t1 plan: its outputs differ.*no single-target"):
        honest(ctx, chosen, measure=True)
