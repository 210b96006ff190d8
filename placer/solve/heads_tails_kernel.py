"""The compiled loop of :func:`placer.solve.bounds_comm.comm_heads_tails` (numba).

For each op ``v`` and target ``d`` it takes the larger of two lower bounds on ``v``'s head (earliest
start on ``d``; mirrored for tails), both over ``v``'s direct neighbours:

* **the threshold rule** (the only one before session 33): the neighbours on ``d`` run one at a
  time there, each of the others pays its cheapest arrival through any other target,
  independently of the others;
* **the shared-target rule** (session 33): every neighbour goes to one of its targets, and the
  neighbours that go to the *same* target run one at a time there too, whichever target that is.
  The least over every such choice of the largest, over targets, one-machine value (releases =
  their heads on that target, tails = the transfer to ``d``; for tails, releases = the transfer from
  ``d``, tails = their own tails) is a bound: every schedule makes one such choice. A
  depth-first search finds it (neighbours most constrained first, each one's targets by its
  arrival alone, cut off as soon as a partial choice reaches the best found); a neighbourhood of
  more than ``kmax`` ops, or a search past ``node_max`` choices, keeps the threshold rule's value.

One machine: exact (every order) for up to four items, otherwise the largest ``r0 + sum p + q0``
over the items released at ``r0`` or later with a tail of ``q0`` or more (Jackson's value when
all tails, or all releases, are equal, as the threshold rule has them). An item of no processing
time is an instantaneous op, which neither waits for its target nor occupies it (as in
:mod:`placer.plan` and the evaluator): it counts for its own ``r + q`` only (session 36: a
zero-cost neighbour sequenced after a busy one had put a path bound 1 ms above the optimum).
"""

from __future__ import annotations

import numpy as np

from placer.solve.kernels import njit

__all__ = ["neighbour_bounds", "one_machine"]

INF = np.inf
#: one machine's items (release, processing, tail) and their count: one compiled signature, so that
#: no call compiles a copy of its own (numba specializes on literal counts otherwise)
_ONE_MACHINE = "float64(float64[::1], float64[::1], float64[::1], int64)"


@njit("float64(float64[::1], float64[::1], float64[::1], int64[::1], int64)", cache=True)
def _order_value(r, p, q, order, m):  # pragma: no cover - compiled
    t = -INF
    best = -INF
    for i in range(m):
        k = order[i]
        if p[k] <= 0.0:  # instantaneous: neither waits for the machine nor occupies it (placer.plan)
            if r[k] + q[k] > best:
                best = r[k] + q[k]
            continue
        t = max(t, r[k]) + p[k]
        if t + q[k] > best:
            best = t + q[k]
    return best


@njit(_ONE_MACHINE, cache=True)
def _exact_small(r, p, q, m):  # pragma: no cover - compiled
    """The least ``max_j C_j + q_j`` over the ``m!`` orders of ``m <= 4`` items."""
    order = np.empty(4, np.int64)
    best = INF
    for a in range(m):
        for b in range(m):
            if b == a:
                continue
            if m == 2:
                order[0] = a
                order[1] = b
                best = min(best, _order_value(r, p, q, order, 2))
                continue
            for c in range(m):
                if c == a or c == b:
                    continue
                order[0] = a
                order[1] = b
                order[2] = c
                if m == 4:
                    order[3] = 6 - a - b - c
                best = min(best, _order_value(r, p, q, order, m))
    return best


@njit(_ONE_MACHINE, cache=True)
def _threshold_value(r, p, q, m):  # pragma: no cover - compiled
    best = -INF
    for i in range(m):
        r0 = r[i]
        for j in range(m):
            q0 = q[j]
            s = 0.0
            hit = False
            for k in range(m):
                if r[k] >= r0 and q[k] >= q0:
                    s += p[k]
                    hit = True
            if hit and r0 + s + q0 > best:
                best = r0 + s + q0
    return best


@njit(_ONE_MACHINE, cache=True)
def one_machine(r, p, q, m):  # pragma: no cover - compiled
    """A lower bound on the least ``max_j C_j + q_j`` of items ``0..m-1`` on one machine (release
    ``r``, processing ``p``, tail ``q``): exact for ``m <= 4``."""
    if m == 1:
        return r[0] + p[0] + q[0]
    if m <= 4:
        return _exact_small(r, p, q, m)
    return _threshold_value(r, p, q, m)


@njit("float64(float64[::1], float64[::1], float64[::1], int64, float64[::1], float64[::1], float64[::1], "
      "float64[::1], int64, float64, float64[::1], float64[::1], float64[::1])", cache=True)
def _threshold_rule(fr, fp, fq, nf, off, opt_r, opt_p, opt_q, no, floor, sr, sp, sq):  # pragma: no cover
    """``min over S`` of ``max(one_machine(forced + S), max off outside S)``: for a fixed largest
    ``off`` outside ``S`` the best ``S`` holds exactly the optional items with a larger ``off``."""
    order = np.argsort(-off[:no])
    m = 0
    for i in range(nf):
        sr[m] = fr[i]
        sp[m] = fp[i]
        sq[m] = fq[i]
        m += 1
    best = INF
    for j in range(no + 1):
        theta = floor
        if j < no and off[order[j]] > theta:
            theta = off[order[j]]
        val = theta
        if m > 0:
            val = max(val, one_machine(sr, sp, sq, m))
        best = min(best, val)
        if j < no:
            k = order[j]
            sr[m] = opt_r[k]
            sp[m] = opt_p[k]
            sq[m] = opt_q[k]
            m += 1
    return best


@njit("float64(int64, int64[::1], int64[:, ::1], float64[:, ::1], float64[:, ::1], float64[:, ::1], int64, "
      "float64[::1], float64[::1], float64[::1], int64, int64, int64, float64[:, ::1], float64[:, ::1], "
      "float64[:, ::1], int64[::1], float64[::1], int64[::1], boolean[::1], float64[::1], float64[::1])",
      cache=True)
def _shared_target_rule(k, nc, ca, cr, cp, cq, n_targets, fr, fp, fq, nf, d, node_max,
                        gr, gp, gq, gm, gval, idx, placed, saved, cur):  # pragma: no cover - compiled
    """The least over one target per neighbour (choice ``j`` of neighbour ``i``: target ``ca[i, j]``
    with ``cr, cp, cq``, sorted by their sum) of the largest one-machine value over targets, the
    forced items on ``d``; ``-inf`` when the search passes ``node_max`` choices."""
    for a in range(n_targets):
        gm[a] = 0
        gval[a] = -INF
    for i in range(nf):
        m = gm[d]
        gr[d, m] = fr[i]
        gp[d, m] = fp[i]
        gq[d, m] = fq[i]
        gm[d] = m + 1
    cur[0] = one_machine(gr[d], gp[d], gq[d], gm[d]) if nf > 0 else -INF
    gval[d] = cur[0]
    if k == 0:
        return cur[0]
    best = INF
    nodes = 0
    i = 0
    idx[0] = -1
    placed[0] = False
    while i >= 0:
        if placed[i]:  # take back neighbour i's last choice
            a = ca[i, idx[i]]
            gm[a] -= 1
            gval[a] = saved[i]
            placed[i] = False
        idx[i] += 1
        j = idx[i]
        if j >= nc[i] or cr[i, j] + cp[i, j] + cq[i, j] >= best or cur[i] >= best:
            idx[i] = nc[i]  # sorted: the remaining choices are no better
            i -= 1
            continue
        nodes += 1
        if nodes > node_max:
            return -INF
        a = ca[i, j]
        saved[i] = gval[a]
        m = gm[a]
        gr[a, m] = cr[i, j]
        gp[a, m] = cp[i, j]
        gq[a, m] = cq[i, j]
        gm[a] = m + 1
        gval[a] = one_machine(gr[a], gp[a], gq[a], m + 1)
        placed[i] = True
        value = max(cur[i], gval[a])
        if value >= best:
            continue
        if i == k - 1:
            best = value
            continue
        cur[i + 1] = value
        i += 1
        idx[i] = -1
        placed[i] = False
    return best


@njit("float64[:, ::1](int64, float64[:, ::1], boolean[:, ::1], int64[::1], int64[::1], int64[::1], "
      "int64[::1], float64[:, :, ::1], boolean, int64, int64, float64[:, ::1], boolean[::1])", cache=True,
      nogil=True)
def neighbour_bounds(n_targets, cost, ok, unit, nb_ptr, nb_op, nb_edge, delays, heads, kmax,
                     node_max, init, changed):  # pragma: no cover - compiled
    """Heads (``heads=True``: ``nb`` the predecessors, ops visited first to last, a topological
    order) or tails (``nb`` the successors, last to first), ``(n_ops, n_targets)``; ``cost`` is inf
    where ``ok`` is False; ``delays[e]`` the ``(T, T)`` delay matrix of edge ``e``.

    Incremental: an op's value depends only on its neighbours (their values, costs and allowed
    targets), so an op is computed again only when a neighbour moved: its allowed targets changed
    since ``init`` was computed (``changed``) or its value differs from its ``init`` row; the
    others keep their ``init`` row. All ops changed and ``init`` zeros is the whole computation."""
    n = ok.shape[0]
    t_n = n_targets
    out = np.zeros((n, t_n))
    moved = np.zeros(n, np.bool_)  # allowed targets changed, or a value differs from init
    deg = 1
    for v in range(n):
        deg = max(deg, nb_ptr[v + 1] - nb_ptr[v])
    km = min(kmax, deg) + 1
    ca = np.empty((km, t_n), np.int64)
    cr = np.empty((km, t_n))
    cp = np.empty((km, t_n))
    cq = np.empty((km, t_n))
    nc = np.empty(km, np.int64)
    ta = np.empty(t_n, np.int64)
    tr = np.empty(t_n)
    tp = np.empty(t_n)
    tq = np.empty(t_n)
    tt = np.empty(t_n)
    fr = np.empty(deg)
    fp = np.empty(deg)
    fq = np.empty(deg)
    off = np.empty(deg)
    opt_r = np.empty(deg)
    opt_p = np.empty(deg)
    opt_q = np.empty(deg)
    sr = np.empty(deg)
    sp = np.empty(deg)
    sq = np.empty(deg)
    gr = np.empty((t_n, deg))
    gp = np.empty((t_n, deg))
    gq = np.empty((t_n, deg))
    gm = np.zeros(t_n, np.int64)
    gval = np.empty(t_n)
    idx = np.empty(km, np.int64)
    placed = np.zeros(km, np.bool_)
    saved = np.empty(km)
    cur = np.empty(km)
    key = np.empty(km)
    for step in range(n):
        v = step if heads else n - 1 - step
        lo, hi = nb_ptr[v], nb_ptr[v + 1]
        moved[v] = changed[v]
        dirty = False
        for s in range(lo, hi):
            if moved[nb_op[s]]:
                dirty = True
                break
        if not dirty:
            for d in range(t_n):
                out[v, d] = init[v, d]
            continue
        for d in range(t_n):
            if not ok[v, d]:
                continue
            nf = 0
            no = 0
            k = 0
            floor = -INF
            for s in range(lo, hi):
                u = nb_op[s]
                e = nb_edge[s]
                if heads:  # u on d: released at its head there, v waits for its end
                    rd, pd, qd = out[u, d], cost[u, d], 0.0
                else:  # u on d: after v, then its own tail
                    rd, pd, qd = 0.0, cost[u, d], out[u, d]
                if unit[u] == unit[v]:
                    fr[nf] = rd
                    fp[nf] = pd
                    fq[nf] = qd
                    nf += 1
                    continue
                best_off = INF
                m = 0
                for a in range(t_n):
                    if not ok[u, a]:
                        continue
                    if heads:
                        r, p, q = out[u, a], cost[u, a], (0.0 if a == d else delays[e, a, d])
                    else:
                        r, p, q = (0.0 if a == d else delays[e, d, a]), cost[u, a], out[u, a]
                    if a != d:
                        best_off = min(best_off, r + p + q)
                    ta[m] = a
                    tr[m] = r
                    tp[m] = p
                    tq[m] = q
                    tt[m] = r + p + q
                    m += 1
                if not ok[u, d]:
                    floor = max(floor, best_off)
                else:
                    off[no] = best_off
                    opt_r[no] = rd
                    opt_p[no] = pd
                    opt_q[no] = qd
                    no += 1
                if k < km:
                    srt = np.argsort(tt[:m])
                    for j in range(m):
                        c = srt[j]
                        ca[k, j] = ta[c]
                        cr[k, j] = tr[c]
                        cp[k, j] = tp[c]
                        cq[k, j] = tq[c]
                    nc[k] = m
                k += 1
            value = _threshold_rule(fr, fp, fq, nf, off, opt_r, opt_p, opt_q, no, floor, sr, sp, sq)
            if 0 < k <= kmax:
                for i in range(k):  # the neighbour with the latest best arrival first
                    key[i] = -(cr[i, 0] + cp[i, 0] + cq[i, 0])
                o = np.argsort(key[:k])
                shared = _shared_target_rule(k, nc[o], ca[o], cr[o], cp[o], cq[o], t_n, fr, fp, fq, nf, d,
                                             node_max, gr, gp, gq, gm, gval, idx, placed, saved, cur)
                value = max(value, shared)
            out[v, d] = max(0.0, value)
            if ok[v, d] and out[v, d] != init[v, d]:
                moved[v] = True
    return out
