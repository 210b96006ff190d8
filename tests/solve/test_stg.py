"""STG benchmark (P|prec|Cmax, identical targets, free transfers): CP-SAT reaches and proves the
published optima. CI runs a representative subset (every size, every processor count); the full
70 instances run with ``python experiments/bench_solver.py stg``.

The instances are test data of this repository (``tests/data/stg``): a missing set is a failure,
not a skip. CP-SAT is stopped on deterministic time (``DTIME``; every one of the 70 instances
is proved within 0.05 units), so the outcome does not depend on the machine's speed; the
wall-clock ``time_limit`` is only a backstop against a hang."""

from __future__ import annotations

from pathlib import Path

import pytest

from placer.solve import solve
from placer.solve.instances import load_stg, stg_optima

#: The STG instances and their optima, test data of this repository.
STG_ROOT = Path(__file__).resolve().parents[1] / "data" / "stg"

#: CP-SAT deterministic-time cap (40x what the hardest of the 70 instances needs).
DTIME = 2.0
#: Wall-clock backstop (seconds); the subset takes at most 3 s per instance on 2 cores.
TIME_LIMIT = 60.0

SUBSET = [
    ("50/rand0000.stg", 2), ("50/rand0001.stg", 4), ("50/rand0003.stg", 8), ("50/rand0009.stg", 4),
    ("100/rand0001.stg", 4), ("100/rand0003.stg", 4), ("100/rand0004.stg", 8), ("100/rand0006.stg", 16),
]


def _optimum(instance: str, p: int) -> int:
    return next(opt for inst, procs, opt in stg_optima(STG_ROOT) if inst == instance and procs == p)


@pytest.mark.parametrize("instance, p", SUBSET, ids=[f"{i}-p{p}" for i, p in SUBSET])
def test_stg_optimum_reached_and_proved(instance, p):
    problem = load_stg(STG_ROOT / instance, p)
    plan = solve(problem, "latency", "cpsat", time_limit=TIME_LIMIT,
                 cpsat_params={"max_deterministic_time": DTIME})
    plan.validate(problem)
    assert plan.makespan_ms == _optimum(instance, p)
    assert plan.stats.status == "OPTIMAL"
    # identical, free targets are pooled into one cumulative resource
    assert plan.stats.extra["pooled_targets"] == [list(problem.targets)]


def test_stg_data_present():
    # shipped with the repository: a clean clone must run the tests above, never skip them
    assert (STG_ROOT / "optima.csv").is_file(), f"STG benchmark missing under {STG_ROOT}"
    missing = sorted({inst for inst, _, _ in stg_optima(STG_ROOT) if not (STG_ROOT / inst).is_file()})
    assert not missing, f"instances listed in optima.csv but missing under {STG_ROOT}: {missing}"


def test_stg_loader():
    problem = load_stg(STG_ROOT / "50/rand0000.stg", 2)
    assert problem.n_ops == 51  # 50 tasks + the dummy exit task (the dummy entry is dropped)
    assert problem.cost_ms[-1].tolist() == [0.0, 0.0]
    assert len(stg_optima(STG_ROOT)) == 70
