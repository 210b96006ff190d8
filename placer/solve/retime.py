"""The critical-path search's re-timing loop, compiled: list-schedule an order from a target state.

:class:`~placer.solve.latency_search.CriticalPathSearch` spends ~87% of its time re-timing schedules
(500 ops x 8 targets: 12.3 of 14.0 s). As a Python loop over lists it re-times about 3.7 M ops a
second; compiled with numba, on flat arrays, about 30x that (docs/design.md, session 22). The
arrays: ``cost`` (ops x targets, inf where not allowed), the inputs of op ``v`` at
``in_ptr[v]:in_ptr[v + 1]`` of ``in_prod`` (the producer) and ``in_delay`` (targets x targets: the
copy from the producer's target to ``v``'s, plus ``v``'s entry cost), and the targets sharing a core
with target ``d`` at ``conf_ptr[d]:conf_ptr[d + 1]`` of ``conf_idx`` (empty without shared cores:
then a target is busy only with its own ops). Same semantics and float operations, in the same
order, as :func:`~placer.solve.evaluate.latency_schedule`; compiled on their first call
(:mod:`placer.solve.kernels`); without numba the same functions run as plain Python (correct, slower).
:func:`simulate` releases the GIL: the CP-SAT latency model computes its shaved bound in a thread
beside the search, whose own Python steps then run while the search re-times (session 53: 400
probes in 3.3 s instead of 14 s).
"""

from __future__ import annotations

import numpy as np

from placer.solve.kernels import COMPILED, njit

#: the search's deterministic budget: ops re-timed per second of search time it is given. Measured
#: on a 2-core AMD EPYC, random layered x 8: 21.5 M a second at 500 ops, 17.7 M at 2,000 compiled
#: (3.7 M as the Python loop on lists, whose rate was 1.5 M); about half, so that a slower or busier
#: machine still spends its budget before the wall-clock backstop
SEARCH_RATE = 1.0e7 if COMPILED else 3.0e5

__all__ = ["COMPILED", "SEARCH_RATE", "simulate", "finish_sum"]


@njit("int64(int64[::1], int64[::1], int64, float64[::1], float64[::1], float64[::1], float64[:, ::1], "
      "boolean, float64, float64[:, ::1], int64[::1], int64[::1], float64[:, :, ::1], int64[::1], "
      "int64[::1], boolean)", cache=True, nogil=True)
def simulate(assign, order, start_pos, avail0, start, end, snaps, take_snaps, cutoff,
             cost, in_ptr, in_prod, in_delay, conf_ptr, conf_idx, shared):  # pragma: no cover - compiled
    """List-schedule ``order[start_pos:]`` from the target state ``avail0`` (``start`` / ``end`` hold the
    earlier ops' times and are updated in place; ``snaps[i]`` receives the state before position
    ``i`` when ``take_snaps``). Returns the number of ops re-timed, negative (its opposite) when an op
    ended after ``cutoff`` (the schedule then stops there)."""
    avail = avail0.copy()
    n = order.shape[0]
    for i in range(start_pos, n):
        if take_snaps:
            snaps[i, :] = avail
        v = order[i]
        d = assign[v]
        t0 = 0.0
        for j in range(in_ptr[v], in_ptr[v + 1]):
            u = in_prod[j]
            a = assign[u]
            r = end[u] if a == d else end[u] + in_delay[j, a, d]
            if r > t0:
                t0 = r
        c_v = cost[v, d]
        if c_v > 0:
            s_v = t0 if t0 > avail[d] else avail[d]
            e_v = s_v + c_v
            if not shared:
                avail[d] = e_v
            else:
                for k in range(conf_ptr[d], conf_ptr[d + 1]):
                    d2 = conf_idx[k]
                    if avail[d2] < e_v:
                        avail[d2] = e_v
        else:
            s_v = t0
            e_v = t0
        start[v] = s_v
        end[v] = e_v
        if e_v > cutoff:
            return -(i + 1 - start_pos)
    return n - start_pos


@njit("float64(float64[::1], int64[::1], int64)", cache=True)
def finish_sum(end, assign, n_targets):  # pragma: no cover - compiled
    """The sum over targets of the last end time of their ops (the search's tie-breaking score)."""
    fin = np.zeros(n_targets)
    for v in range(end.shape[0]):
        d = assign[v]
        if end[v] > fin[d]:
            fin[d] = end[v]
    total = 0.0
    for d in range(n_targets):  # in order, as Python's sum() adds
        total += fin[d]
    return total
