"""Heuristic building blocks shared by the baselines and by CP-SAT's hints, one module each
(:mod:`.greedy`, :mod:`.earliest_finish`, :mod:`.lp_rounding`, :mod:`.fixed_schedule`, :mod:`.dynamic`,
:mod:`.pipeline`; what they share in :mod:`.common`), re-exported here.

* :func:`priority_assign`: each placement unit (op or colocation group) goes to the first target
  of a preference list that supports its first op and has memory room; a group goes where its
  first op goes if every member is supported there, else to the first target (problem order)
  supporting all members.
* :func:`heft`: HEFT (Topcuoglu et al., 2002): upward rank with average costs over the allowed
  targets and average transfer delay over the allowed distinct target pairs; ops in decreasing
  rank; each on the target giving the earliest finish time, inserting into idle gaps; transfers
  are one copy per (tensor, destination target) that delays consumers by link + entry time.
* :func:`lp_assign`: round the LP relaxation of "minimize the largest per-target load" (all but
  a handful of ops are integral in a basic solution; the rest go to their largest fraction, or
  the cheapest target with room); pins, colocation and memory respected.
* :func:`lp_list`: :func:`lp_assign` + :func:`schedule_fixed`, re-solving the LP with each
  target's observed idle time added to its load until the makespan stops improving.
* :func:`schedule_fixed`: for a fixed assignment, insertion list scheduling in decreasing
  upward rank computed with the assigned costs and the actual transfer delays.
* :class:`DynamicList`: time-driven list scheduling that places and orders at once, guided by the
  load LP's prices: the target free first takes the ready op with the best ratio of its LP value
  to the target time it uses (its cost plus part of the wait for its inputs), plus a rank bonus.
  :class:`DynamicListSearch` iterates it over a small portfolio of scoring parameters, re-pricing
  the targets that finish late; :func:`dynamic_list` is the one-call form. On wide graphs where
  load balance decides the makespan it keeps targets busy through the ramp-up where LP rounding
  leaves them idle.
* Targets sharing a core (``PlacementProblem.target_cores``) never run at the same time: the
  insertion schedulers keep one timeline per resource (``problem.resource_sets``) and a slot must
  be free on every resource of the target; the dynamic list scheduler treats a target as free
  when all of them are; the LP prices resources. The pipeline heuristics only build candidates;
  :func:`~placer.solve.evaluate.pipeline_eval` scores them with the shared-core bottleneck.
* :func:`repair_pipeline`: turn any assignment into a monotone pipeline with at most K stages
  (optionally contiguous in op order), greedily, keeping each op on its target when it can. It
  places :attr:`~placer.problem.PlacementProblem.pipeline_units` whole (a colocation group with
  every op on a path between its members), so groups spanning the graph never defeat it.
* :func:`split_pipeline`: a fast pipeline heuristic: for each candidate stage order, cut the op
  order into contiguous stages balancing per-stage compute, then evaluate exactly.
"""

from placer.solve.heuristics.common import HeuristicError
from placer.solve.heuristics.dynamic import DynamicList, DynamicListSearch, dynamic_list
from placer.solve.heuristics.earliest_finish import heft, upward_rank
from placer.solve.heuristics.fixed_schedule import fixed_rank, schedule_fixed
from placer.solve.heuristics.greedy import priority_assign
from placer.solve.heuristics.lp_rounding import lp_assign, lp_list
from placer.solve.heuristics.pipeline import best_pipeline, repair_pipeline, split_pipeline

__all__ = [
    "DynamicList",
    "DynamicListSearch",
    "HeuristicError",
    "best_pipeline",
    "dynamic_list",
    "fixed_rank",
    "heft",
    "lp_assign",
    "lp_list",
    "priority_assign",
    "repair_pipeline",
    "schedule_fixed",
    "split_pipeline",
    "upward_rank",
]
