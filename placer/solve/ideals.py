"""``ideals``: exact dynamic program over the downsets (ideals) of the graph, pipeline mode.

The algorithm of Tarnawski et al. (NeurIPS 2020, "Efficient algorithms for device placement of
DNN graph operators") in this package's pipeline model.

Search space
    Every monotone pipeline (``contiguous=False``): each prefix union of stages is an *ideal*
    (a set of ops closed under predecessors), so a pipeline is a chain of ideals
    ``{} = I_0 < I_1 < ... < I_m = V`` and stage ``s`` is ``I_s minus I_(s-1)`` on its own
    target. The DAG is first contracted into :attr:`~placer.problem.PlacementProblem.pipeline_units`
    (colocation groups and everything on paths between their members: what a monotone pipeline
    keeps in one stage); ideals are sets of units.
Targets of one kind are interchangeable
    Targets that :func:`~placer.solve.cpsat_util.interchangeable_classes` finds identical (same
    costs, caps, links, charging, no pins) form one *kind*; the DP state is
    ``(ideal, how many targets of each kind are used)``, so ``k`` identical accelerators cost
    ``k + 1`` count values, not ``k!`` orders.
Stage prices
    A stage ``S = I minus I'`` on target ``d`` costs its ops (``inf`` where one is unsupported;
    memory: its weights must fit ``d``'s cap), plus, for each tensor produced in ``I'`` and read in
    ``S``, the receiver's share of the copy (``link`` if ``link_charge`` charges the receiver)
    and ``partition_overhead_ms[d]``, plus, for each tensor produced in ``S`` and read outside
    ``I``, the sender's share. These are exactly :func:`~placer.solve.evaluate.pipeline_eval`'s
    stage times when the prices are *separable*: a receiver pays the same whoever sends, and a
    sender pays the same whatever it sends to and however many targets read it (with
    ``link_broadcast`` when its share is the same to every destination; without it only when
    senders pay nothing). Identical accelerators with uniform links (and a CPU that pays no
    communication, via ``link_charge``) are separable with ``link_broadcast``. Otherwise every
    price is the *least* over the unknown senders / destinations (one destination), so the DP
    optimum is a valid lower bound on the pipeline optimum (communication included), and its
    plan, re-evaluated exactly, an upper bound; when the plan's true bottleneck and latency equal
    the DP's, it is optimal all the same (status OPTIMAL).
Objective
    Two passes: the least bottleneck ``B*`` (min-max DP), then the least latency (sum of stage
    times) over chains whose stages all cost at most ``B*``: lexicographic (bottleneck, latency)
    exactly (a single min-max label would not be: equal bottlenecks can hide different latencies).
Transitions
    For each ideal ``I`` (by size), every smaller ideal ``I'`` is tested for ``I' < I`` with one
    vectorized bitset pass; the tensors crossing ``I``'s boundary give each candidate's
    communication terms from per-ideal sums (``R(I')`` receives minus the tensors passing
    through, ``S(I)`` sends minus those produced in ``I'``). Cost ``O(N^2 w)`` for ``N`` ideals
    and ``w`` 64-bit words per bitset: graphs of small width (chains with residuals, transformer
    and CNN blocks) have a few ideals per op.

Limits
    ``max_ideals`` (default :data:`MAX_IDEALS`): more ideals than that stops the enumeration with
    a ProblemError naming the count (a wide graph; use ``cpsat``). The search counts its work
    (bitset rows scanned plus candidate transitions) and checks the deadline and ``max_work``
    after each ideal. Stopped during the bottleneck pass it has no complete chain: the solver
    returns the best heuristic pipeline with the load bound. Stopped during the latency pass it
    returns the bottleneck-optimal chain of the first pass.
    The solver gives the DP four fifths of its time and keeps the rest for those heuristics.
Targets sharing cores (``target_cores``) are refused (the bottleneck is then a sum per core, not
the largest stage).

Why a solver of its own, next to ``dp``
    ``dp`` cuts one fixed topological order into runs (``contiguous=True``) and is exact for any
    link model (Pareto labels carry the open stages' times); on graphs whose width the order
    hides it can only find what that order allows. ``ideals`` searches every monotone pipeline
    (``cpsat``'s ``contiguous=False`` space, "contiguous splits over downsets" in the paper's
    words) independently of any order, exactly when prices are separable.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from placer.errors import ProblemError
from placer.plan import Plan
from placer.problem import PlacementProblem
from placer.solve.base import SolveContext, Solver, register_solver
from placer.solve.bounds import pipeline_bound
from placer.solve.cpsat_util import interchangeable_classes, reported_bound
from placer.solve.evaluate import Costs, better, float_noise, make_pipeline_plan
from placer.solve.pipeline_candidates import pipeline_candidates

__all__ = ["MAX_IDEALS", "IdealsDP", "IdealsResult", "ideals_search", "stage_prices"]

#: Default cap on the number of ideals enumerated.
MAX_IDEALS = 200_000


class _Stop(Exception):
    """Deadline or work limit reached."""


@dataclass
class IdealsResult:
    """Outcome of :func:`ideals_search`.

    ``value`` / ``latency``: the DP's bottleneck and latency of its chain (its own prices: equal to
    the evaluator's when ``exact_pricing``). ``complete``: the bottleneck pass ran to the end, so
    ``value`` is the least DP bottleneck, a valid lower bound on every monotone pipeline of at
    most ``num_stages`` stages (and its optimum when ``exact_pricing``). ``latency_complete``: the
    latency pass ran to the end too. ``assign`` / ``stage_targets``: the chain's pipeline (None
    when the first pass was stopped)."""

    value: float
    latency: float
    assign: np.ndarray | None
    stage_targets: list[int]
    exact_pricing: bool
    complete: bool
    latency_complete: bool
    n_ideals: int
    work: int
    stats: dict[str, Any] = field(default_factory=dict)


def stage_prices(problem: PlacementProblem, costs: Costs | None = None
                 ) -> tuple[np.ndarray, np.ndarray, bool]:
    """Per tensor and target: ``recv[k, d]`` (what ``d`` pays to receive ``k``) and ``send[k, d]``
    (what ``d`` pays to send it), and whether they are exact (see the module docstring); when not,
    each is the least over the unknown other side."""
    p = problem
    c = costs or Costs.of(p)
    m, t = len(p.tensors), p.n_targets
    if m == 0 or t == 1:
        return np.zeros((m, t)), np.zeros((m, t)), True
    code = p.charge_code
    off = ~np.eye(t, dtype=bool)
    link = np.asarray(c.link, dtype=float)
    rmat = np.where((code & 2)[None] > 0, link, 0.0) + np.asarray(c.entry, dtype=float)[None, None, :]
    rlo = np.where(off[None], rmat, np.inf).min(axis=1)  # [k, b]: least over senders a != b
    rhi = np.where(off[None], rmat, -np.inf).max(axis=1)
    smat = np.where((code & 1)[None] > 0, link, 0.0)
    slo = np.where(off[None], smat, np.inf).min(axis=2)  # [k, a]: least over destinations b != a
    shi = np.where(off[None], smat, -np.inf).max(axis=2)

    def same(lo: np.ndarray, hi: np.ndarray) -> bool:
        return bool(np.all(hi - lo <= 1e-12 * np.maximum(1.0, np.abs(hi))))

    exact = same(rlo, rhi) and (same(slo, shi) if p.link_broadcast else bool(np.all(shi <= 0.0)))
    return rlo, slo, exact


def _kinds(p: PlacementProblem) -> list[list[int]]:

    classes = interchangeable_classes(p)
    inside = {d for cl in classes for d in cl}
    kinds = classes + [[d] for d in range(p.n_targets) if d not in inside]
    return sorted(kinds, key=lambda cl: cl[0])


@dataclass
class _UnitDAG:
    """The graph contracted into pipeline units: per-target sums of each unit, unit edges as
    bitmasks, and the tensors that can cross a stage boundary with their stage prices."""

    units: list[tuple[int, ...]]
    cost: np.ndarray  # (units, T): cost of the supported members
    unsup: np.ndarray  # (units, T): 1 where some member is unsupported
    weight: np.ndarray  # (units,): weight bytes
    preds_mask: list[int]
    succs: list[set[int]]
    t_prod: list[int]  # per crossing tensor: producer unit
    t_cons: list[tuple[int, ...]]  # its consumer units (other than the producer's)
    t_consmask: list[int]
    out_of: list[list[int]]  # per unit: the crossing tensors it produces
    rp: np.ndarray  # (crossing tensors, T): receive prices
    sp: np.ndarray  # send prices
    exact: bool  # prices separable (see the module docstring)


def _unit_dag(p: PlacementProblem, c: Costs) -> _UnitDAG:
    t = p.n_targets
    units = p.pipeline_units
    nu = len(units)
    unit_of = np.empty(p.n_ops, dtype=int)
    for ui, unit in enumerate(units):
        unit_of[list(unit)] = ui
    allowed_u = np.array([p.allowed[list(unit)].all(axis=0) for unit in units])
    cost_u = np.array([np.where(p.allowed[list(unit)], c.cost[list(unit)], 0.0).sum(axis=0)
                       for unit in units])
    unsup_u = (~allowed_u).astype(np.int64)
    w_u = np.array([float(p.weight_bytes[list(unit)].sum()) for unit in units])
    preds_mask = [0] * nu
    succs: list[set[int]] = [set() for _ in range(nu)]
    for u, v in p.edges:
        a, b = int(unit_of[u]), int(unit_of[v])
        if a != b:
            preds_mask[b] |= 1 << a
            succs[a].add(b)
    # tensors that can cross a stage boundary: producer unit, consumer units
    rprice, sprice, exact = stage_prices(p, c)
    t_prod: list[int] = []
    t_cons: list[tuple[int, ...]] = []
    t_consmask: list[int] = []
    t_idx: list[int] = []
    out_of: list[list[int]] = [[] for _ in range(nu)]
    for k, (u, cs) in enumerate(zip(p.tensor_producer, p.tensor_consumers)):
        if u < 0 or not cs:
            continue
        pu = int(unit_of[u])
        cu = tuple(sorted({int(unit_of[v]) for v in cs} - {pu}))
        if not cu:
            continue
        out_of[pu].append(len(t_idx))
        t_idx.append(k)
        t_prod.append(pu)
        t_cons.append(cu)
        t_consmask.append(sum(1 << x for x in cu))
    rp = rprice[t_idx] if t_idx else np.zeros((0, t))
    sp = sprice[t_idx] if t_idx else np.zeros((0, t))
    return _UnitDAG(units, cost_u, unsup_u, w_u, preds_mask, succs, t_prod, t_cons, t_consmask, out_of,
                    rp, sp, exact)


def _ideal_sums(g: _UnitDAG, n_targets: int, cross: list[tuple[int, ...]], layer_start: list[int],
                parent: list[int], added: list[int]) -> tuple[np.ndarray, ...]:
    """Per ideal (by :func:`_enumerate`): its size, and per target its cost ``C``, unsupported
    count ``U``, weight ``W``, receive ``R`` and send ``S`` prices of its crossing tensors."""
    n_id, t = len(cross), n_targets
    size_of = np.zeros(n_id, dtype=np.int64)
    for s in range(len(layer_start) - 1):
        size_of[layer_start[s]:layer_start[s + 1]] = s
    par = np.array(parent)
    add = np.array(added)
    C = np.zeros((n_id, t))
    U = np.zeros((n_id, t), dtype=np.int64)
    W = np.zeros(n_id)
    for s in range(1, len(layer_start) - 1):
        sl = slice(layer_start[s], layer_start[s + 1])
        C[sl] = C[par[sl]] + g.cost[add[sl]]
        U[sl] = U[par[sl]] + g.unsup[add[sl]]
        W[sl] = W[par[sl]] + g.weight[add[sl]]
    R = np.zeros((n_id, t))
    S = np.zeros((n_id, t))
    rows = np.repeat(np.arange(n_id), [len(x) for x in cross])
    flat = np.fromiter((q for x in cross for q in x), dtype=np.int64, count=len(rows))
    np.add.at(R, rows, g.rp[flat])
    np.add.at(S, rows, g.sp[flat])
    return size_of, C, U, W, R, S


def _kind_states(kinds: list[list[int]], num_stages: int
                 ) -> tuple[dict[tuple[int, ...], int], np.ndarray, list[np.ndarray]]:
    """The DP's target states: how many targets of each kind are used (at most ``num_stages`` in
    all). Returns their index, ``prev[kind, state]`` (the state with one target of that kind fewer,
    -1 if none) and, per kind, the states that have one."""
    sizes = [len(k_) for k_ in kinds]
    states: list[tuple[int, ...]] = []

    def gen(prefix: tuple[int, ...], left: int) -> None:
        if len(prefix) == len(kinds):
            states.append(prefix)
            return
        for x in range(min(sizes[len(prefix)], left) + 1):
            gen(prefix + (x,), left - x)

    gen((), num_stages)
    st_index = {s_: i for i, s_ in enumerate(states)}
    prev = np.full((len(kinds), len(states)), -1, dtype=np.int64)
    for si, s_ in enumerate(states):
        for ki in range(len(kinds)):
            if s_[ki] > 0:
                prev[ki, si] = st_index[s_[:ki] + (s_[ki] - 1,) + s_[ki + 1:]]
    valid = [np.flatnonzero(prev[ki] >= 0) for ki in range(len(kinds))]
    return st_index, prev, valid


class _ChainDP:
    """The DP over chains of ideals: tables ``dp[ideal, state]`` with the chosen predecessor ideal
    and kind of each entry, filled by :meth:`run`; :meth:`plan` reads a chain back."""

    def __init__(self, p: PlacementProblem, g: _UnitDAG, kinds: list[list[int]], num_stages: int,
                 masks: list[int], full: int, cross: list[tuple[int, ...]], layer_start: list[int],
                 sums: tuple[np.ndarray, ...], max_work: int | None, deadline: float | None,
                 upper: float) -> None:
        self.p, self.g, self.kinds = p, g, kinds
        self.reps = [k_[0] for k_ in kinds]
        self.masks, self.cross, self.layer_start = masks, cross, layer_start
        self.size_of, self.C, self.U, self.W, self.R, self.S = sums
        self.n_id = len(masks)
        nu = len(g.units)
        words = max(1, (nu + 63) // 64)
        bits = np.frombuffer(b"".join(m_.to_bytes(8 * words, "little") for m_ in masks), dtype="<u8")
        self.bits = bits.reshape(self.n_id, words)
        self.full = full  # the index of the ideal of every unit
        self.st_index, self.prev, self.valid = _kind_states(kinds, num_stages)
        self.max_work, self.deadline, self.upper = max_work, deadline, upper
        self.work = 0

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fresh ``(dp, chosen ideal, chosen kind)``: only the empty ideal with no target reached."""
        n_st = len(self.st_index)
        dp_ = np.full((self.n_id, n_st), np.inf)
        dp_[0, self.st_index[(0,) * len(self.kinds)]] = 0.0
        ch_j = np.full((self.n_id, n_st), -1, dtype=np.int64)
        return dp_, ch_j, ch_j.copy()

    def tick(self, amount: int) -> None:
        self.work += amount
        if self.max_work is not None and self.work >= self.max_work:
            raise _Stop
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _Stop

    def run(self, bound: float | None, dp_: np.ndarray, ch_j: np.ndarray, ch_k: np.ndarray) -> None:
        """One pass: min-max (``bound`` None) or min-sum over stages priced at most ``bound``."""
        layer_start, size_of, bits = self.layer_start, self.size_of, self.bits
        C, U, W, caps = self.C, self.U, self.W, self.p.memory_cap_bytes
        prev, valid = self.prev, self.valid
        alive = np.zeros(self.n_id, dtype=bool)
        alive[0] = True
        cut = self.upper if bound is None else bound
        cut = cut * (1 + 1e-9) + 1e-12 if math.isfinite(cut) else math.inf
        for i in range(1, self.n_id):
            lim = int(layer_start[size_of[i]])
            cand = np.flatnonzero(alive[:lim] & ~(bits[:lim] & ~bits[i]).any(axis=1))
            self.tick(lim + len(cand) * len(self.kinds))
            if not len(cand):
                continue
            pr, ps = self._through(i, cand)
            dpc = dp_[cand]
            best = dp_[i].copy()
            for ki, d in enumerate(self.reps):
                ok = (U[cand, d] == U[i, d]) & (W[i] - W[cand] <= caps[d])
                cost = ((C[i, d] - C[cand, d]) + np.maximum(self.R[cand, d] - pr[d], 0.0)
                        + np.maximum(self.S[i, d] - ps[d], 0.0))
                cost = np.where(ok & (cost <= cut), cost, np.inf)
                sv = valid[ki]
                if bound is None:
                    vals = np.maximum(dpc[:, prev[ki, sv]], cost[:, None])
                else:
                    vals = dpc[:, prev[ki, sv]] + cost[:, None]
                am = vals.argmin(axis=0)
                bv = vals[am, np.arange(len(sv))]
                imp = bv < best[sv]
                if imp.any():
                    tgt = sv[imp]
                    best[tgt] = bv[imp]
                    ch_j[i, tgt] = cand[am[imp]]
                    ch_k[i, tgt] = ki
            dp_[i] = best
            alive[i] = bool(np.isfinite(best).any())

    def _through(self, i: int, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per target and candidate predecessor ideal ``I'`` of ideal ``i``: the receive prices of
        the tensors crossing ``I'`` that pass through ``I`` too, and the send prices of ``I``'s
        crossing tensors produced in ``I'`` (both ``(T, len(cand))``)."""
        g = self.g
        xi = self.cross[i]
        if not xi:
            z = np.zeros((self.p.n_targets, len(cand)))
            return z, z
        mask_i = self.masks[i]
        in_prod = np.empty((len(xi), len(cand)), dtype=bool)
        in_all = np.empty((len(xi), len(cand)), dtype=bool)
        cb = self.bits[cand]
        for r_, q in enumerate(xi):
            pu = g.t_prod[q]
            has = (cb[:, pu >> 6] >> np.uint64(pu & 63)) & np.uint64(1) > 0
            in_prod[r_] = has
            allv = has.copy()
            for x in g.t_cons[q]:
                if mask_i >> x & 1:
                    allv &= (cb[:, x >> 6] >> np.uint64(x & 63)) & np.uint64(1) > 0
            in_all[r_] = allv
        q_list = list(xi)
        pr = g.rp[q_list].T @ in_all  # (T, ncand): receives that pass through I' and I
        ps = g.sp[q_list].T @ in_prod  # (T, ncand): sends of I produced in I'
        return pr, ps

    def plan(self, ch_j: np.ndarray, ch_k: np.ndarray, s0: int) -> tuple[np.ndarray, list[int]]:
        """The pipeline ``(assign, stage targets)`` of the chain ending at the full ideal in state ``s0``."""
        links = []
        i, s_ = self.full, s0
        while i != 0:
            j, ki = int(ch_j[i, s_]), int(ch_k[i, s_])
            links.append((j, i, ki))
            s_ = int(self.prev[ki, s_])
            i = j
        assign = np.full(self.p.n_ops, -1, dtype=int)
        used = [0] * len(self.kinds)
        order = []
        units, masks = self.g.units, self.masks
        for j, i, ki in links[::-1]:
            d = self.kinds[ki][used[ki]]
            used[ki] += 1
            order.append(d)
            diff = masks[i] & ~masks[j]
            for u in range(len(units)):
                if diff >> u & 1:
                    assign[list(units[u])] = d
        return assign, order


def ideals_search(problem: PlacementProblem, num_stages: int, *, deadline: float | None = None,
                  max_work: int | None = None, max_ideals: int = MAX_IDEALS,
                  upper: float = math.inf) -> IdealsResult:
    """Run the DP (see the module docstring). ``upper``: a known achievable bottleneck (stages
    priced above it are skipped; with inexact prices pass ``inf``).

    Raises ProblemError for shared cores, more than ``max_ideals`` ideals, or no pipeline."""
    p = problem
    if p.shares_resources:
        raise ProblemError("ideals: targets sharing cores (target_cores) are not supported; use 'cpsat'")
    g = _unit_dag(p, Costs.of(p))
    nu, exact = len(g.units), g.exact
    try:  # the ideals, by size
        masks, index, cross, layer_start, parent, added = _enumerate(
            nu, g.preds_mask, g.succs, g.out_of, g.t_consmask, max_ideals, deadline)
    except _Stop:
        return IdealsResult(math.inf, math.inf, None, [], exact, False, False, 0, 0,
                            {"units": nu, "stopped": "enumerating ideals"})
    n_id = len(masks)
    sums = _ideal_sums(g, p.n_targets, cross, layer_start, parent, added)
    if deadline is not None and time.monotonic() > deadline:
        return IdealsResult(math.inf, math.inf, None, [], exact, False, False, n_id, 0,
                            {"units": nu, "ideals": n_id, "stopped": "pricing ideals"})
    kinds = _kinds(p)
    dp = _ChainDP(p, g, kinds, num_stages, masks, index[(1 << nu) - 1], cross, layer_start, sums, max_work,
                  deadline, upper)
    stats: dict[str, Any] = {"ideals": n_id, "units": nu,
                             "kinds": [[p.targets[d] for d in k_] for k_ in kinds]}
    dp1, ch1j, ch1k = dp.tables()
    try:  # pass 1: the least bottleneck
        dp.run(None, dp1, ch1j, ch1k)
    except _Stop:
        stats["work"] = dp.work
        return IdealsResult(math.inf, math.inf, None, [], exact, False, False, n_id, dp.work, stats)
    s1 = int(np.argmin(dp1[dp.full]))
    value = float(dp1[dp.full, s1])
    if not math.isfinite(value):
        if math.isfinite(upper):  # nothing at or below the known bottleneck: search again without it
            return ideals_search(p, num_stages, deadline=deadline, max_work=max_work, max_ideals=max_ideals)
        raise ProblemError(f"ideals: no monotone pipeline of at most {num_stages} stages exists "
                           "(op support, memory caps, colocation, pins)")
    assign, order = dp.plan(ch1j, ch1k, s1)
    latency = math.nan
    latency_complete = False
    dp2, ch2j, ch2k = dp.tables()
    try:  # pass 2: the least latency among chains within that bottleneck
        dp.run(value, dp2, ch2j, ch2k)
        s2 = int(np.argmin(dp2[dp.full]))
        if math.isfinite(dp2[dp.full, s2]):
            latency = float(dp2[dp.full, s2])
            latency_complete = True
            assign, order = dp.plan(ch2j, ch2k, s2)
    except _Stop:
        pass
    stats["work"] = dp.work
    return IdealsResult(value, latency, assign, order, exact, True, latency_complete, n_id, dp.work, stats)


def _enumerate(nu: int, preds_mask: list[int], succs: list[set[int]], out_of: list[list[int]],
               t_consmask: list[int], max_ideals: int, deadline: float | None):
    """Every ideal of the unit DAG as a bitmask, layer by layer (by size), each reached from a parent
    by one added unit; with the crossing tensors of each (produced inside, read outside).
    Returns ``(masks, index, cross, layer_start, parent, added)``."""
    masks = [0]
    index = {0: 0}
    addable: list[tuple[int, ...]] = [tuple(u for u in range(nu) if preds_mask[u] == 0)]
    parent = [-1]
    added = [-1]
    cross: list[tuple[int, ...]] = [()]
    layer_start = [0, 1]  # layer s (ideals of s units) is masks[layer_start[s]:layer_start[s + 1]]
    layer = [0]
    while layer:
        nxt = []
        for i in layer:
            mask_i = masks[i]
            for u in addable[i]:
                mask_j = mask_i | (1 << u)
                if mask_j in index:
                    continue
                if len(masks) >= max_ideals:
                    raise ProblemError(f"ideals: the graph has more than {max_ideals} ideals ({nu} units; "
                                       "too wide for this DP); use solver 'cpsat' or raise max_ideals")
                if deadline is not None and len(masks) % 2048 == 0 and time.monotonic() > deadline:
                    raise _Stop
                index[mask_j] = len(masks)
                nxt.append(len(masks))
                masks.append(mask_j)
                rest = [w for w in addable[i] if w != u]
                rest += [w for w in succs[u] if preds_mask[w] & ~mask_j == 0]
                addable.append(tuple(sorted(rest)))
                parent.append(i)
                added.append(u)
                still = [q for q in cross[i] if t_consmask[q] & ~mask_j]
                still += [q for q in out_of[u] if t_consmask[q] & ~mask_j]
                cross.append(tuple(still))
        layer = nxt
        layer_start.append(len(masks))
        if deadline is not None and time.monotonic() > deadline:
            raise _Stop
    return masks, index, cross, layer_start, parent, added


@register_solver("ideals")
class IdealsDP(Solver):
    """Exact DP over the ideals of the unit DAG (every monotone pipeline; see the module docstring).

    Options: ``max_work`` (int or None): stop after this much work (deterministic);
    ``max_ideals`` (int): refuse graphs with more ideals (default :data:`MAX_IDEALS`)."""

    modes = ("pipeline",)
    exact = True
    options: ClassVar[dict[str, Any]] = {"max_work": None, "max_ideals": MAX_IDEALS}

    def solve(self, problem: PlacementProblem, ctx: SolveContext) -> Plan:
        t0 = time.monotonic()
        if ctx.contiguous:
            raise ProblemError("ideals: searches every monotone pipeline; contiguous=True is solver 'dp'")
        opts = {**self.options, **ctx.options}
        max_work, max_ideals = opts["max_work"], opts["max_ideals"]
        for name, val in (("max_work", max_work), ("max_ideals", max_ideals)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 1):
                raise ProblemError(f"ideals: {name} must be a positive int, got {val!r}")
        k = ctx.max_stages(problem)
        # building and returning the plan; a fifth of the time for the heuristics if the DP is stopped
        margin = 0.02 + 2e-5 * problem.n_ops
        deadline = ctx.deadline - margin - 0.2 * max(0.0, ctx.deadline - margin - t0)
        r = ideals_search(problem, k, deadline=deadline, max_work=max_work, max_ideals=max_ideals)
        return ideals_plan(problem, r, ctx, t0)


def ideals_plan(problem: PlacementProblem, r: IdealsResult, ctx: SolveContext, t0: float) -> Plan:
    """The plan of an :class:`IdealsResult` (the best heuristic pipeline when the DP has none), with
    its status and lower bound."""

    p = problem
    k = ctx.max_stages(p)
    plan = None
    source = "ideals"
    if r.assign is not None:
        plan = make_pipeline_plan(p, r.assign, ctx.name, order=r.stage_targets, options=ctx.plan_options())
    if plan is None or not ideals_proven(r, plan):  # optimistic prices: the DP's plan may be beaten
        for name, a, o in pipeline_candidates(p, k, False, ctx.deadline - 0.5 * max(0.0, ctx.remaining())):
            cand = make_pipeline_plan(p, a, ctx.name, order=o, options=ctx.plan_options())
            if better(plan, cand) is cand:
                plan, source = cand, name
    if plan is None:
        raise ProblemError("ideals: stopped before finding any pipeline, and no heuristic found one")
    lower = ideals_bound(r) if r.complete else pipeline_bound(p, num_stages=k)
    bound = proven_bound(plan.bottleneck_ms, [lower])
    objective = plan.bottleneck_ms
    gap = 0.0 if objective <= 0 else max(0.0, (objective - bound) / objective)
    proven = gap <= 1e-9 and source == "ideals" and ideals_proven(r, plan)
    status = "OPTIMAL" if proven else "FEASIBLE"  # FEASIBLE: latency (or bottleneck) not proven least
    stats = {"status": status, "objective": objective, "best_bound": bound, "gap": gap,
             "wall_s": time.monotonic() - t0,
             "extra": {**r.stats, "source": source, "exact_pricing": r.exact_pricing, "complete": r.complete,
                       "latency_complete": r.latency_complete, "dp_bottleneck": r.value,
                       "dp_latency": r.latency}}
    order = [p.target_index[d] for d in plan.stage_targets]
    return make_pipeline_plan(p, assign_of(p, plan), ctx.name, order=order,
                              options=ctx.plan_options(), stats=stats)


def assign_of(p: PlacementProblem, plan: Plan) -> np.ndarray:
    return np.array([p.target_index[plan.assignment[o]] for o in p.ops], dtype=int)


def ideals_warm_start(problem: PlacementProblem, ctx: SolveContext, options: dict[str, Any],
                      t0: float) -> IdealsResult | None:
    """CP-SAT's warm start in pipeline mode (options ``ideals``, ``ideals_fraction``,
    ``ideals_max``): the DP run for at most ``ideals_fraction`` of the time left since ``t0``; its
    result when it completed the bottleneck pass, else None (also for contiguous pipelines,
    shared cores, or too many ideals)."""
    p = problem
    if ctx.mode != "pipeline" or ctx.contiguous or not options.get("ideals", True) or p.shares_resources:
        return None
    deadline = t0 + float(options.get("ideals_fraction", 0.5)) * max(0.0, ctx.deadline - t0)
    try:
        r = ideals_search(p, ctx.max_stages(p), deadline=deadline,
                          max_ideals=int(options.get("ideals_max", MAX_IDEALS)))
    except ProblemError:
        return None
    return r if r.complete else None


def ideals_bound(r: IdealsResult) -> float:
    """The DP optimum as a lower bound on the bottleneck (a hair below: float sums in another order)."""
    return r.value - 1e-11 * max(1.0, abs(r.value))


def ideals_proven(r: IdealsResult, plan: Plan) -> bool:
    """True when ``plan`` (the DP's, priced by the evaluator) is the lexicographic (bottleneck, latency)
    optimum of pipeline mode: both passes ran to the end, and either the prices were exact or the
    plan's true bottleneck and latency equal the DP's (then lower bounds: every plan of bottleneck
    ``value`` is priced at most ``value`` per stage by the DP, so its latency is at least the
    second pass's)."""
    if not (r.complete and r.latency_complete):
        return False
    if r.exact_pricing:
        return True

    def tight(x: float, lower: float) -> bool:
        return x - lower <= float_noise(lower)

    return tight(plan.bottleneck_ms, r.value) and tight(plan.makespan_ms, r.latency)


def ideals_plan_stats(problem: PlacementProblem, r: IdealsResult, ctx: SolveContext, options: dict[str, Any],
                      t0: float) -> Plan | None:
    """The DP's plan with OPTIMAL stats when :func:`ideals_proven`, else None."""
    plan = make_pipeline_plan(problem, r.assign, ctx.name, order=r.stage_targets, options=options)
    if not ideals_proven(r, plan):
        return None
    bound = proven_bound(plan.bottleneck_ms, [ideals_bound(r)])
    stats = {"status": "OPTIMAL", "objective": plan.bottleneck_ms, "best_bound": bound, "gap": 0.0,
             "wall_s": time.monotonic() - t0,
             "extra": {**r.stats, "source": "ideals",
                       "cpsat_skipped": "the ideals DP proved its plan optimal"}}
    return make_pipeline_plan(problem, r.assign, ctx.name, order=r.stage_targets, options=options,
                              stats=stats)


def proven_bound(objective: float, bounds: list[float]) -> float:
    """The best of ``bounds``; the objective itself when that bound proves it (within relative 1e-9,
    the float noise of pricing one plan two ways), so the gap reads 0."""

    bound, proven = reported_bound(objective, bounds)
    return objective if proven else bound
