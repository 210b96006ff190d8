"""Latency mode's second CP-SAT phase (options ``lns_share``, ``lns_dtime_per_s``): when the full
portfolio has not proved the optimum, CP-SAT's LNS workers alone continue from its best solution.

Both phases stop on deterministic time here (a few tenths of a unit; the wall-clock limit, far
above what they take on any machine, is only a backstop), so the plans compared are the same on
every machine."""

from __future__ import annotations

from pathlib import Path

from placer.solve import solve
from placer.solve.cpsat_latency import LNS_LARGE_OPS, lns_share
from placer.solve.instances import load_stg, random_layered

#: Deterministic budgets small enough that the full portfolio does not prove this 60-op problem, and
#: the critical-path search off, so the hint leaves the LNS phase something to find.
OPTS = dict(time_limit=30, seed=0, dtime_per_s=0.005, lns_dtime_per_s=0.005, local_search=0, dynamic=False)


def _plan_key(plan) -> tuple:
    return tuple(sorted(plan.assignment.items())), tuple(sorted(plan.start_ms.items()))


def test_the_lns_phase_improves_on_the_full_portfolio_and_is_deterministic():
    p = random_layered(60, 4, seed=0)
    two = solve(p, "latency", "cpsat", **OPTS)
    full_only = solve(p, "latency", "cpsat", **OPTS, lns_share=0)
    for plan in (two, full_only):
        plan.validate(p)
        assert plan.stats.best_bound <= plan.makespan_ms + 1e-9
    assert full_only.stats.extra["lns"] == {}
    assert two.stats.extra["lns"]["improved"] is True
    assert two.makespan_ms < full_only.makespan_ms - 1e-6
    assert two.stats.extra["source"] == "cpsat"
    again = solve(p, "latency", "cpsat", **OPTS)
    assert _plan_key(again) == _plan_key(two)


def test_an_optimum_the_full_portfolio_proves_skips_the_lns_phase():
    stg = Path(__file__).resolve().parents[1] / "data" / "stg" / "50" / "rand0000.stg"
    p = load_stg(stg, 2)
    plan = solve(p, "latency", "cpsat", time_limit=60, cpsat_params={"max_deterministic_time": 2.0})
    assert plan.stats.status == "OPTIMAL"
    assert plan.stats.extra["lns"] == {}


def test_the_auto_lns_share_gives_large_models_to_the_lns_workers():
    assert lns_share("auto", LNS_LARGE_OPS - 1) == 0.7 and lns_share("auto", LNS_LARGE_OPS) == 0.95
    assert lns_share(0.3, 10_000) == 0.3 and lns_share(0, 10) == 0.0 and lns_share(None, 10) == 0.0
    # the default is "auto": a small model runs both phases as with 0.7
    p = random_layered(60, 4, seed=0)
    assert _plan_key(solve(p, "latency", "cpsat", **OPTS)) == _plan_key(solve(p, "latency", "cpsat", **OPTS,
                                                                                lns_share=0.7))
