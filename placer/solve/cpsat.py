"""``cpsat``: the exact solver (OR-Tools CP-SAT), both modes.

The models are documented in :mod:`placer.solve.cpsat_latency` and
:mod:`placer.solve.cpsat_pipeline` (each built and solved in named phases by
:class:`~placer.solve.cpsat_latency.LatencyModel` / :class:`~placer.solve.cpsat_pipeline.PipelineModel`);
time units and symmetry breaking in :mod:`placer.solve.cpsat_util`.

Options
-------
num_workers : int, default 2
    CP-SAT search workers.
deterministic : bool, default True
    Interleaved (deterministic) search stopped on *deterministic* time: ``dtime_per_s`` (0.3)
    deterministic units per second of ``time_limit``, about one wall second per second on a
    2-core x86 machine. The same problem and seed then give the same plan on any machine. The
    wall-clock limit stays a hard backstop: if it is what stops the search (a much slower or
    loaded machine) the run is not reproducible. ``False``: the regular parallel portfolio on wall
    time (ties between optimal plans may then be broken differently run to run).
transfer_weight : float, default 0
    Latency mode: minimize ``makespan + transfer_weight * total transfer ms``.
time_resolution_ms : float or "auto"
    ms per integer time unit (see :mod:`placer.solve.cpsat_util`).
hint : bool, default True
    Hint with (and fall back to) the best heuristic.
heuristic_fraction : float, default 0.3
    Share of the remaining time after which no further heuristic candidate is started (HEFT
    always runs).
dynamic : bool, default True
    Latency mode: also search with price-guided dynamic list scheduling
    (:class:`~placer.solve.heuristics.DynamicListSearch`) for the hint; above ``AUTO_COARSEN_OPS``
    ops it goes on after the coarse solve until every portfolio member had two passes (with
    ``lns``; without it, with whatever time is left).
lns : bool, default True; lns_skip_coarse_gap : float, default 1.0
    Latency mode above ``AUTO_COARSEN_OPS`` ops: re-optimize windows of the best plan with CP-SAT
    (:mod:`placer.solve.lns`) in the time the coarse solve leaves; the coarse solve gets half of
    the time after the fine heuristics, none when the best fine plan is already within
    ``lns_skip_coarse_gap`` (relative) of the lower bound: with the default 1.0, never (was 0.02
    until session 10: on random layered x 8 the expanded coarse plan was 50 % slower than the fine
    one at 2,000 ops and never kept, at 2,000 / 5,000 ops and on 1,500-op training graphs the
    window LNS did better with its time: 60 s, 2,000 x 8, gap 11.41 -> 10.67 % (seed 0), 6.95 ->
    6.57 % (seed 1); 5,000 x 8 1.77 -> 1.71 %; transformer / cnn training graphs, 1,500 ops,
    3 accelerators, 20 s: 30.56 -> 30.13 %, 28.40 -> 27.11 %). 0 runs the coarse solve unless
    the fine plan already meets the bound.
local_search : float, default 0.8; local_search_rate : float, default ``retime.SEARCH_RATE`` (1e7)
    Latency mode (makespan only, ``transfer_weight`` 0): improve the best heuristic plan with the
    critical-path search of :mod:`placer.solve.latency_search` for this share of the time left
    (0: off), before CP-SAT (hinted with the result); above ``AUTO_COARSEN_OPS`` ops, on the best
    fine plan, before the window LNS. Its budget is deterministic: ``local_search_rate`` ops
    re-timed per second of that share of what the heuristics' span (``heuristic_fraction``)
    leaves of the time limit (the share of the time actually left is a wall-clock backstop). When
    CP-SAT stops early (deterministic time), the search goes on from the better of its plan and
    the heuristics' in the time left, with the budget of a tenth of the time limit.
    0.8 since session 9 (was 0.5): on random layered graphs x 8 CP-SAT barely improves a
    500-op hint (10.179 -> 10.174 ms in 27 s) and the coarse solve at 2,000 ops does not beat the
    fine plan, while the search keeps finding better plans; 60 s, one run each, 0.5 -> 0.8: gap
    500 x 8 8.83 -> 8.58 % (seed 0), 8.47 -> 8.47 % (seed 1); 2,000 x 8 10.8-11.0 -> 10.66 %
    (seed 0), 7.39 -> 6.94 % (seed 1). STG instances stop at their bound long before the budget.
lighten_share : float, default 0.3
    Latency mode above ``AUTO_COARSEN_OPS`` ops, with ``lns``: unless the window LNS still improves
    at least half of its windows (``coarsened.LNS_PAYING``), this last share of its time goes to
    the critical-path search again, from the LNS's plan with its ops off the critical chain first
    moved to cheaper targets where the makespan allows
    (:meth:`~placer.solve.latency_search.CriticalPathSearch.lighten`; 0: off). The searched plan
    does ~7% more work than the load bound's assignment; shedding work where the chain does not
    wait frees the targets for what follows (session 21; 60 s, random layered 2,000 x 8: gap
    10.48 -> 9.91 % (seed 0), 6.90 -> 6.49 % (seed 1); 5,000 x 8: 1.73 % both).
lns_share : float or "auto", default "auto"; lns_dtime_per_s : float, default 0.1
    Latency mode: the full CP-SAT portfolio gets the first ``1 - lns_share`` of CP-SAT's time;
    unless it proves the optimum, CP-SAT's large-neighbourhood workers alone (``use_lns_only``)
    go on from its best solution (a complete hint) for the rest, stopped on ``lns_dtime_per_s``
    deterministic units per second of it (0: one phase, as before session 14). The search log of
    a 500-op x 8-target random layered graph at 60 s showed why: in interleaved search the eight
    full workers each took one task of about 4 units, the whole deterministic budget, found one
    better solution (10.115 -> 10.114) and no LNS worker ever ran; with LNS alone from the same
    hint, CP-SAT reached 10.020 (9.948 after the critical-path search). The full phase's share is
    what proves the optimum of the STG instances and of small models (all 70 STG optima still
    proved at 10 s). ``"auto"`` (session 18): 0.7 below ``LNS_LARGE_OPS`` (300) ops, 0.95 from
    there on, where the full portfolio proves nothing and finds nothing in its share (500 x 8:
    10115 -> 10115 in 7.5 s) while the LNS workers keep improving. ``lns_dtime_per_s`` was 0.05
    (session 14: "0.06-0.09 units per wall second"); session 18's logs show 0.08-0.12 at 500 x 8,
    and the phase stopped 15 s before a 60-s limit, so 0.1 (the wall-clock limit stays the
    backstop where a machine is slower); the phase leaves a tenth of the limit to the
    critical-path search after it. 500 x 8, makespan in ms, old -> as now: 60 s seed 0
    9.999-10.039 -> 9.948, seed 1 11.101 both, seed 2 9.592 -> 9.604; 10 s 10.291 both: within
    the spread of single runs; 200 x 8 unchanged.
window_bound : bool, default True
    Latency mode: strengthen the lower bound with the start / end window LP
    (:func:`~placer.solve.bounds.window_load_bound`).
comm_bound : bool, default True
    Latency mode: the communication-aware per-target heads and tails of
    :mod:`placer.solve.bounds_comm` in the lower bound and in the model (``x[v,d]`` implies
    ``s[v] >= H[v,d]`` and ``e[v] + Q[v,d] <= makespan``; a pair that cannot beat the hint is out).
shave_fraction : float, default 0.15
    Latency mode with ``comm_bound``: the shaved bound (:func:`~placer.solve.bounds_comm.shaved_bound`:
    6 bisection steps, shaving to a fixed point, then ``probe_steps`` levels probed) starts in a
    thread beside the critical-path search, below the best heuristic plan; once the search ends it
    gets at most this share of the time left, then is stopped with the best value it proved. Its
    work is a deterministic amount; the share is a wall-clock backstop, so only a much slower or
    busier machine stops it earlier, with a lower but valid bound. On 500 ops x 8 targets shaving
    alone (4 rounds) added about 0.6 % to the bound (2 % at 200 ops); probing 0.1-1.3 % more; 0: off.
probe_pairs, probe_steps : int, default 400, 3
    Latency mode with ``shave_fraction``: after the bisection, ``probe_steps`` levels more are
    tested with probing (each tries at most ``probe_pairs`` (op, target) pairs, fixing the op there
    and shaving; :mod:`placer.solve.bounds_comm`); 0 pairs: off.
symmetry_breaking, redundant, pool_identical : bool, default True
    Model strengthening (interchangeable targets; load and cumulative constraints; one
    cumulative resource for a pool of identical targets, latency mode).
edge_finding : bool, default True
    Timetable edge finding and overload checking in cumulative constraints.
probing_max_size : int, default 1000
    Above this many (op, target) pairs, presolve probing is off (it costs seconds of wall time).
gap_limit : float, default 0
    Stop at this relative gap.
phase1_fraction : float, default 0.7
    Pipeline mode: share of the time for the bottleneck phase.
contiguous_warm_start : bool, default True; warm_start_fraction : float, default 0.25
    Pipeline mode without ``contiguous``: first solve the contiguous variant for that share of
    the time and hint with its best split.
ideals : bool, default True; ideals_fraction : float, default 0.5; ideals_max : int, default 200000
    Pipeline mode without ``contiguous``: first run the ideals DP (:mod:`placer.solve.ideals`) for
    at most that share of the time (refused above ``ideals_max`` ideals); when it completes its
    plan is the hint, its optimum a lower bound with communication, and, when its stage prices are
    exact, the answer (no model is built).
log : bool
    CP-SAT search log on stdout.
cpsat_params : dict, optional
    Extra ``SatParameters`` fields set last (e.g. ``{"cp_model_probing_level": 0}``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from placer.plan import Plan
from placer.problem import PlacementProblem
from placer.solve.base import SolveContext, Solver, register_solver
from placer.solve.cpsat_latency import solve_latency
from placer.solve.cpsat_pipeline import solve_pipeline
from placer.solve.retime import SEARCH_RATE

__all__ = ["CpSat"]


@register_solver("cpsat")
class CpSat(Solver):
    """OR-Tools CP-SAT, latency and pipeline modes (see module docstring for options)."""

    exact = True
    auto_coarsen = True
    options: ClassVar[dict[str, Any]] = {
        "num_workers": 2, "deterministic": True, "dtime_per_s": 0.3, "transfer_weight": 0.0, "time_resolution_ms": "auto",
        "hint": True, "heuristic_fraction": 0.3, "symmetry_breaking": True, "redundant": True, "gap_limit": 0.0,
        "phase1_fraction": 0.7, "contiguous_warm_start": True, "warm_start_fraction": 0.25, "log": False, "cumulative_max_ops": 3000, "pool_identical": True, "edge_finding": True, "probing_max_size": 1000, "cpsat_params": None,
        "dynamic": True, "window_bound": True, "comm_bound": True, "shave_fraction": 0.15,
        "probe_pairs": 400, "probe_steps": 3,
        "lns": True, "lns_skip_coarse_gap": 1.0, "local_search": 0.8, "local_search_rate": SEARCH_RATE,
        "lighten_share": 0.3,
        "lns_share": "auto", "lns_dtime_per_s": 0.1,
        "ideals": True, "ideals_fraction": 0.5, "ideals_max": 200_000,
    }

    def solve(self, problem: PlacementProblem, ctx: SolveContext) -> Plan:
        opts = {**self.options, **ctx.options}
        if ctx.mode == "latency":
            return solve_latency(problem, ctx, opts)
        return solve_pipeline(problem, ctx, opts)
