"""The placement problem: ops, tensors, targets, costs, links, memory, pins and colocation.

A :class:`PlacementProblem` is the single input of every solver (``placer.solve.solve``). It is a
frozen value validated on construction; every error names the op, tensor or target at fault and
is a :class:`~placer.errors.ProblemError`. It can be built from arrays (what ``placer.problem``
builders do from an OpGraph and a cost model) or from a JSON file (``docs/problem_json.md``; its
JSON Schema, checked first, is ``placer/schemas/problem.schema.json``), so users can bring their own
costs. The JSON is read and written by :mod:`placer.problem_json` (``from_json`` / ``to_json``
delegate to it); the size limits checked before anything is allocated are
:mod:`placer.problem_limits`.

Model
-----
* ``ops`` are stored in a topological order of the precedence edges. If the order given is not
  topological, a stable topological sort (Kahn, smallest original index first) is applied and the
  rows of ``cost_ms`` / ``weight_bytes`` are permuted with the ops.
* Edges are derived from ``tensors``: ``producer -> consumer`` for each consumer. A tensor with
  ``producer=None`` is a model input: it is available on every target at time 0 and costs nothing
  to read. A tensor with no consumers is a model output and costs nothing to keep.
* ``cost_ms[i, d]`` is the time of op ``ops[i]`` on target ``targets[d]``; ``np.inf`` means
  unsupported. Costs must be >= 0 and not NaN.
* Moving tensor ``k`` from target ``a`` to target ``b`` (``a != b``) takes
  ``link_ms(k, a, b) = link_latency_ms[a, b] + nbytes_k * link_ms_per_byte[a, b]``; ``0`` when
  ``a == b``. A tensor read by several ops on one target crosses to that target **once**: transfers
  are per ``(tensor, destination target)``, never per consuming edge.
* Entering a target costs ``partition_overhead_ms[b]`` once per tensor received on ``b`` (the
  receiving runtime's call / hand-off overhead). Default 0.
* ``cut_scale[d]`` (>= 1, default 1) prices a plan that *cuts* the model (places ops on more than
  one target): every op on ``d`` then costs ``cost_ms[i, d] * cut_scale[d]``. A runtime that runs
  the whole model fuses across it and owns the cores alone; a partition of a cut plan loses
  fusion at its ends and shares the cores with the other runtimes' pools. A plan on one target
  pays ``cost_ms`` unscaled. :meth:`PlacementProblem.priced_for` gives the problem an assignment
  is priced on; solvers see costs that already include the scale (``placer.solve.solve``).
* ``link_charge[a][b]`` in ``{"sender", "receiver", "both"}`` says which side of an ``a -> b``
  copy is busy during it. It matters in pipeline mode only (which stage's time includes the copy);
  in latency mode a copy always delays its consumers by ``link_ms + partition_overhead_ms[b]``,
  occupies no target, and links have unlimited concurrency. Default ``"both"``: without a measured
  split the copy is assumed to keep both the sending and the receiving worker busy, which never
  under-predicts a stage time.
* ``link_broadcast`` (default False): in pipeline mode a tensor copied from ``a`` to several
  targets costs its sender once (broadcast-capable links): the largest of its sender-charged link
  times to those targets, instead of their sum. Receivers pay as before.
* Memory: the ``weight_bytes`` of the ops placed on target ``d`` must sum to at most
  ``memory_cap_bytes[d]`` (``np.inf`` = no cap).
* ``pinned[op] = target`` forces a placement; each group of ``colocate`` must share one target
  (overlapping groups are merged).
* ``target_cores[target]`` is the tuple of CPU core ids the target runs on, or ``None`` (the
  default for every target): a private resource nobody else uses. Two targets *conflict* iff
  their core sets intersect (a target always conflicts with itself); conflicting targets never
  run at the same time. In latency mode an op (of positive cost) on target ``t`` occupies every
  core of ``t`` while it runs; in pipeline mode the stage times of the targets using a core add
  up on it and the bottleneck is the busiest core. ``onnxruntime@cpu:t2`` and ``openvino@cpu:t2``
  on cores ``(0, 1)`` share them (they serialize); ``onnxruntime@cpu0:t1`` on ``(0,)`` and
  ``openvino@cpu1:t1`` on ``(1,)`` run concurrently. :attr:`PlacementProblem.resource_sets` gives
  every target its resources as abstract ids, private targets included, so the solvers treat
  everything alike ("a target occupies all its resources while it runs an op").

Examples
--------
>>> import numpy as np
>>> p = PlacementProblem(
...     ops=["a", "b"], targets=["cpu", "gpu"],
...     cost_ms=np.array([[2.0, 1.0], [3.0, np.inf]]),
...     tensors=[Tensor("t", "a", ("b",), nbytes=1000)],
...     link_latency_ms=0.1)
>>> p.transfer_ms("t", "gpu", "cpu")
0.1
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from placer.errors import ProblemError
from placer.problem_json import (
    SCHEMA_PATH,
    problem_schema,
    problem_to_json,
    read_problem_json,
    validate_problem_json,
)
from placer.problem_limits import (
    LINK_CHARGES,
    MAX_COST_ENTRIES,
    MAX_LINK_ENTRIES,
    MAX_NBYTES,
    check_table_sizes,
)
from placer.toposort import CycleError, topological_order

# the limits (placer.problem_limits) and the JSON schema (placer.problem_json) are importable from here too
__all__ = ["LINK_CHARGES", "MAX_COST_ENTRIES", "MAX_LINK_ENTRIES", "MAX_NBYTES", "SCHEMA_PATH",
           "PlacementProblem", "Tensor", "check_table_sizes", "problem_schema", "resolve_target_name",
           "validate_problem_json"]

#: Integer codes for ``link_charge`` used by the solvers: bit 1 = sender pays, bit 2 = receiver pays.
_CHARGE_CODE = {"sender": 1, "receiver": 2, "both": 3}


@dataclass(frozen=True)
class Tensor:
    """A tensor flowing along precedence edges.

    Parameters
    ----------
    name : str
        Unique tensor name.
    producer : str or None
        Op producing it; ``None`` for a model input.
    consumers : tuple of str
        Ops reading it (duplicates are dropped); empty for a model output nobody reads.
    nbytes : int
        Size in bytes (drives ``link_ms_per_byte``).
    """

    name: str
    producer: str | None
    consumers: tuple[str, ...] = ()
    nbytes: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "consumers", tuple(dict.fromkeys(self.consumers)))


def _trusted_tensor(name: str, producer: str | None, consumers: tuple[str, ...], nbytes: int) -> Tensor:
    """``Tensor(name, producer, consumers, nbytes)`` for fields known valid (``consumers`` distinct):
    no ``__post_init__`` (a relisting builds 100,000 of them)."""
    tt = object.__new__(Tensor)
    tt.__dict__.update(name=name, producer=producer, consumers=consumers, nbytes=nbytes)
    return tt


def _float_array(value: Any, shape: tuple[int, ...], what: str, default: float) -> np.ndarray:
    """Broadcast ``value`` (None, scalar or array-like) to a read-only float array of ``shape``."""
    if value is None:
        arr = np.full(shape, default, dtype=float)
    else:
        try:
            arr = np.array(value, dtype=float)
        except (TypeError, ValueError) as exc:
            raise ProblemError(f"{what}: not numeric ({exc})") from None
        except OverflowError:  # an int beyond any float (10**400)
            raise ProblemError(f"{what}: out of range (beyond a float's largest value)") from None
        if arr.ndim == 0:
            arr = np.full(shape, float(arr), dtype=float)
        if arr.shape != shape:
            raise ProblemError(f"{what}: shape {arr.shape}, expected {shape}")
    arr = np.array(arr, dtype=float)
    arr.setflags(write=False)
    return arr


def _check_target_cores(value: Any, targets: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Validate ``target_cores``; returns ``{target: sorted distinct core ids}`` in target order."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ProblemError(f"target_cores: expected a mapping target -> list of core ids, got "
                           f"{type(value).__name__}")
    known = set(targets)
    for name in value:
        if name not in known:
            raise ProblemError(f"target_cores: unknown target {name!r}; targets are {list(targets)}")
    out: dict[str, tuple[int, ...]] = {}
    for name in targets:
        cores = value.get(name)
        if cores is None:
            continue
        if isinstance(cores, (str, bytes)) or not isinstance(cores, (Sequence, np.ndarray, set, frozenset)):
            raise ProblemError(f"target_cores[{name!r}]: expected a list of core ids (or null for a "
                               f"private resource), got {cores!r}")
        ids = []
        for c in cores:
            if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)):
                if isinstance(c, (float, np.floating)) and float(c).is_integer():
                    c = int(c)
                else:
                    raise ProblemError(f"target_cores[{name!r}]: core id {c!r} is not an integer")
            if int(c) < 0:
                raise ProblemError(f"target_cores[{name!r}]: core id {int(c)} is negative")
            ids.append(int(c))
        if not ids:
            raise ProblemError(f"target_cores[{name!r}]: empty list of cores (omit the target, or "
                               "give null, for a private resource)")
        out[name] = tuple(sorted(set(ids)))
    return out


# ---------------------------------------------------------------------- validation phases
# PlacementProblem.__post_init__ runs them in this order (the first error found is the one raised).


def _check_names(ops_in: Any, targets_in: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Op and target names as tuples of str: at least one of each, no duplicate."""
    ops = tuple(str(o) for o in ops_in)
    targets = tuple(str(t) for t in targets_in)
    if not ops:
        raise ProblemError("problem has no ops")
    if not targets:
        raise ProblemError("problem has no targets")
    for what, names in (("op", ops), ("target", targets)):
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ProblemError(f"duplicate {what} name {name!r}")
            seen.add(name)
    return ops, targets


def _check_costs(value: Any, ops: tuple[str, ...], targets: tuple[str, ...]) -> np.ndarray:
    """``cost_ms`` as a float (n_ops, n_targets) array: >= 0, not NaN, every op supported somewhere,
    the ops' largest costs adding up to a finite number."""
    n, t = len(ops), len(targets)
    try:
        cost = np.array(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ProblemError(f"cost_ms: not numeric ({exc})") from None
    if cost.shape != (n, t):
        raise ProblemError(f"cost_ms: shape {cost.shape}, expected (n_ops={n}, n_targets={t})")
    bad = np.argwhere(np.isnan(cost) | (cost < 0))
    if len(bad):
        i, j = bad[0]
        raise ProblemError(f"cost of op {ops[i]!r} on target {targets[j]!r} is {cost[i, j]}: "
                           "costs must be >= 0 (inf = unsupported), not NaN")
    nowhere = np.flatnonzero(~np.isfinite(cost).any(axis=1))
    if len(nowhere):
        raise ProblemError(f"op {ops[nowhere[0]]!r} is supported on no target (all costs inf)")
    with np.errstate(over="ignore"):  # finite costs whose sum is not: every schedule would be inf
        worst = np.where(np.isfinite(cost), cost, 0.0).max(axis=1).sum()
    if not np.isfinite(worst):
        raise ProblemError("op costs too large: the ops' largest costs add up to more than a float holds "
                           f"({np.finfo(float).max:.3g} ms); rescale them")
    return cost


def _check_tensor(tensor: Any) -> Tensor:
    """One tensor (a Tensor or a mapping of its fields) in its stored form: known producer and
    consumers, no self-loop, integer ``nbytes`` in ``[0, MAX_NBYTES]``. Duplicate names are the
    caller's check."""
    if isinstance(tensor, Mapping):
        try:
            tensor = Tensor(**tensor)
        except TypeError as exc:  # unknown keys, an unhashable consumer ...
            name = dict(tensor).get("name")
            raise ProblemError(f"tensors: malformed tensor {name!r} ({exc})") from None
    if not isinstance(tensor, Tensor):
        raise ProblemError(f"tensors: expected Tensor, got {type(tensor).__name__}")
    if not isinstance(tensor.name, str):
        raise ProblemError(f"tensors: tensor name {tensor.name!r} is not a string")
    if not isinstance(tensor.producer, (str, type(None))) or not all(isinstance(c, str)
                                                                    for c in tensor.consumers):
        raise ProblemError(f"tensor {tensor.name!r}: producer and consumers must be op names")
    return tensor


def _check_tensors(values: Any, op_index: Mapping[str, int]) -> list[Tensor]:
    """Every tensor checked (:func:`_check_tensor`), names distinct, in its stored form."""
    tensors: list[Tensor] = []
    seen_t: set[str] = set()
    for tensor in values:
        tensor = _check_tensor(tensor)
        if tensor.name in seen_t:
            raise ProblemError(f"duplicate tensor name {tensor.name!r}")
        seen_t.add(tensor.name)
        if tensor.producer is not None and tensor.producer not in op_index:
            raise ProblemError(f"tensor {tensor.name!r}: unknown producer op {tensor.producer!r}")
        for c in tensor.consumers:
            if c not in op_index:
                raise ProblemError(f"tensor {tensor.name!r}: unknown consumer op {c!r}")
            if c == tensor.producer:
                raise ProblemError(f"cycle: op {c!r} consumes its own tensor {tensor.name!r}")
        nbytes = tensor.nbytes
        try:
            ok = not isinstance(nbytes, bool) and float(nbytes).is_integer()
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise ProblemError(f"tensor {tensor.name!r}: nbytes {str(nbytes)[:40]} is not an integer "
                               f"(or out of range)")
        if int(nbytes) < 0:
            raise ProblemError(f"tensor {tensor.name!r}: negative nbytes {nbytes}")
        if int(nbytes) > MAX_NBYTES:
            raise ProblemError(f"tensor {tensor.name!r}: nbytes {nbytes:.6g} is out of range "
                               f"(at most 2**62)")
        if type(tensor) is not Tensor or type(nbytes) is not int:  # else already in its stored form
            tensor = Tensor(tensor.name, tensor.producer, tuple(tensor.consumers), int(nbytes))
        tensors.append(tensor)
    return tensors


def _op_order(ops: tuple[str, ...], tensors: Sequence[Tensor], op_index: Mapping[str, int]) -> list[int]:
    """A topological order of the op indices (stable: ties by listed position); names a cycle."""
    preds: list[set[int]] = [set() for _ in range(len(ops))]
    for tensor in tensors:
        if tensor.producer is not None:
            u = op_index[tensor.producer]
            for c in tensor.consumers:
                preds[op_index[c]].add(u)
    try:
        return topological_order(range(len(ops)), preds.__getitem__)
    except CycleError as exc:
        raise ProblemError(f"cycle among ops: {' -> '.join(repr(ops[i]) for i in exc.cycle)}") from None


def _check_link_times(latency: Any, per_byte: Any, targets: tuple[str, ...], tensors: Sequence[Tensor]
                      ) -> tuple[np.ndarray, np.ndarray]:
    """``(link_latency_ms, link_ms_per_byte)`` as read-only (T, T) arrays, zero diagonals: finite,
    >= 0, and the largest tensor's copy time finite."""
    t = len(targets)
    lat = _float_array(latency, (t, t), "link_latency_ms", 0.0)
    per_byte = _float_array(per_byte, (t, t), "link_ms_per_byte", 0.0)
    if t:
        lat, per_byte = np.array(lat), np.array(per_byte)
        np.fill_diagonal(lat, 0.0)  # a target never copies to itself
        np.fill_diagonal(per_byte, 0.0)
        lat.setflags(write=False)
        per_byte.setflags(write=False)
    for what, arr in (("link_latency_ms", lat), ("link_ms_per_byte", per_byte)):
        bad = np.argwhere(~np.isfinite(arr) | (arr < 0))
        if len(bad):
            a, b = bad[0]
            raise ProblemError(f"{what}[{targets[a]!r} -> {targets[b]!r}] = {arr[a, b]}: "
                               "must be finite and >= 0")
    if t and tensors:
        with np.errstate(over="ignore"):
            worst_link = float(lat.max()) + max(tt.nbytes for tt in tensors) * float(per_byte.max())
        if not math.isfinite(worst_link):
            raise ProblemError("link costs too large: link_latency_ms + nbytes * link_ms_per_byte of the "
                               "largest tensor overflows a float; rescale them")
    return lat, per_byte


def _check_link_charge(value: Any, targets: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """``link_charge`` as a (T, T) tuple of ``LINK_CHARGES`` (a single string applies to every pair)."""
    t = len(targets)
    charge = value
    if isinstance(charge, str):
        charge = [[charge] * t for _ in range(t)]
    try:
        charge = tuple(tuple(str(x) for x in row) for row in charge)
    except TypeError:
        raise ProblemError("link_charge: expected a string or a n_targets x n_targets matrix") from None
    if len(charge) != t or any(len(row) != t for row in charge):
        raise ProblemError(f"link_charge: expected a string or a {t} x {t} matrix of strings")
    for a in range(t):
        for b in range(t):
            if charge[a][b] not in LINK_CHARGES:
                raise ProblemError(f"link_charge[{targets[a]!r} -> {targets[b]!r}] = "
                                   f"{charge[a][b]!r}: expected one of {LINK_CHARGES}")
    return charge


def _check_cut_scale(scale_in: Any, targets: tuple[str, ...]) -> np.ndarray:
    """``cut_scale`` as a read-only array, each finite and >= 1 (a cut never makes an op faster)."""
    scale = _float_array(scale_in, (len(targets),), "cut_scale", 1.0)
    for j, d in enumerate(targets):
        if not np.isfinite(scale[j]) or scale[j] < 1.0:
            raise ProblemError(f"cut_scale of target {d!r} is {scale[j]}: must be finite and >= 1")
    return scale


def _check_total_time(cost: np.ndarray, scale: np.ndarray, lat: np.ndarray, per_byte: np.ndarray,
                      overhead: np.ndarray, tensors: Sequence[Tensor]) -> None:
    """ProblemError unless the slowest schedule conceivable (every op at its largest cost times the
    largest cut scale, every copy of every tensor at the slowest link and entry) adds up to a finite
    time: each value was checked finite on its own, but a cut scale of 1e308 on finite costs made the
    solvers' sums NaN (``cannot convert float NaN to integer``, "no feasible assignment"), and costs of
    1e308 with links of 1e308 an end time of inf. Costs of 1e308 alone stay valid (the solvers
    handle them: tests/reliability's control case)."""
    with np.errstate(over="ignore", invalid="ignore"):
        ops = float(np.where(np.isfinite(cost), cost, 0.0).max(axis=1).sum()) * float(scale.max(initial=1.0))
        entry = float(overhead.max(initial=0.0))
        copy = float(lat.max(initial=0.0)) + float(per_byte.max(initial=0.0)) * max(
            (t.nbytes for t in tensors), default=0) + entry
        copies = copy * sum(len(t.consumers) for t in tensors) + entry * len(cost)
        total = ops + copies
    if not math.isfinite(total):
        raise ProblemError("costs too large: the slowest schedule would add up to more than a float holds "
                           f"({np.finfo(float).max:.3g} ms: op costs times the cut scale, copies and entry "
                           "costs); rescale them")


def _check_per_target_and_weights(caps_in: Any, weights_in: Any, overhead_in: Any, n_listed: int,
                                  ops: tuple[str, ...], targets: tuple[str, ...], order: list[int]
                                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(memory_cap_bytes, weight_bytes, partition_overhead_ms)`` as read-only arrays; the weights
    (listed for the ``n_listed`` ops as given) permuted by ``order``. Caps >= 0, weights finite and
    >= 0, overheads finite and >= 0."""
    n, t = len(ops), len(targets)
    caps = _float_array(caps_in, (t,), "memory_cap_bytes", math.inf)
    weights = _float_array(weights_in, (n_listed,), "weight_bytes", 0.0)
    if order != list(range(n)):
        weights = np.array(weights[order])
        weights.setflags(write=False)
    for j in range(t):
        if np.isnan(caps[j]) or caps[j] < 0:
            raise ProblemError(f"memory cap of target {targets[j]!r} is {caps[j]}: must be >= 0")
    bad_w = np.flatnonzero(~np.isfinite(weights) | (weights < 0)) if n else []
    if len(bad_w):
        i = int(bad_w[0])
        raise ProblemError(f"weight_bytes of op {ops[i]!r} is {weights[i]}: must be finite, >= 0")
    overhead = _float_array(overhead_in, (t,), "partition_overhead_ms", 0.0)
    for j in range(t):
        if not np.isfinite(overhead[j]) or overhead[j] < 0:
            raise ProblemError(f"partition_overhead_ms of target {targets[j]!r} is {overhead[j]}: "
                               "must be finite and >= 0")
    return caps, weights, overhead


def _check_pins(value: Any, op_index: Mapping[str, int], tgt_index: Mapping[str, int], cost: np.ndarray
                ) -> dict[str, str]:
    """``pinned`` as a dict op -> target: known names, each op supported on its target."""
    pinned = dict(value or {})
    for op, tgt in pinned.items():
        if not isinstance(tgt, str):
            raise ProblemError(f"pinned: op {op!r} pinned to {tgt!r}, which is not a target name")
        if op not in op_index:
            raise ProblemError(f"pinned: unknown op {op!r}")
        if tgt not in tgt_index:
            raise ProblemError(f"pinned: op {op!r} pinned to unknown target {tgt!r}")
        if not np.isfinite(cost[op_index[op], tgt_index[tgt]]):
            raise ProblemError(f"op {op!r} is pinned to target {tgt!r}, which does not support it")
    return pinned


def _merge_groups(value: Any, op_index: Mapping[str, int], n: int) -> tuple[tuple[int, ...], ...]:
    """The colocation groups of ``value`` (lists of op names) with overlapping ones merged (a
    union-find): sorted tuples of op indices, sorted, groups of one op left out."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    in_group = [False] * n
    for group in value or ():
        if isinstance(group, str):
            raise ProblemError(f"colocate: expected a list of op names, got the string {group!r}")
        members = []
        for op in group:
            if not isinstance(op, str):
                raise ProblemError(f"colocate: {op!r} is not an op name")
            if op not in op_index:
                raise ProblemError(f"colocate: unknown op {op!r}")
            members.append(op_index[op])
        for m in members:
            in_group[m] = True
        for m in members[1:]:
            ra, rb = find(members[0]), find(m)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    groups_by_root: dict[int, list[int]] = {}
    for i in range(n):
        if in_group[i]:
            groups_by_root.setdefault(find(i), []).append(i)
    return tuple(tuple(g) for g in sorted(groups_by_root.values()) if len(g) > 1)


def _check_groups(groups: Sequence[Sequence[int]], ops: tuple[str, ...], cost: np.ndarray,
                  pinned: Mapping[str, str], tgt_index: Mapping[str, int]) -> None:
    """Each colocation group has a target supporting all its ops, and at most one pin it supports."""
    for g in groups:
        names = [ops[i] for i in g]
        common = np.isfinite(cost[list(g)]).all(axis=0)
        if not common.any():
            raise ProblemError(f"colocation group {names} has no target supporting all its ops")
        pins = {pinned[o] for o in names if o in pinned}
        if len(pins) > 1:
            raise ProblemError(f"colocation group {names} has ops pinned to different targets {sorted(pins)}")
        if pins and not common[tgt_index[next(iter(pins))]]:
            raise ProblemError(f"colocation group {names} is pinned to {next(iter(pins))!r}, "
                               "which does not support all its ops")


def _check_memory_fits(ops: tuple[str, ...], targets: tuple[str, ...], cost: np.ndarray, caps: np.ndarray,
                       weights: np.ndarray, pinned: Mapping[str, str], groups: Sequence[Sequence[int]],
                       op_index: Mapping[str, int], tgt_index: Mapping[str, int]) -> None:
    """Necessary conditions of memory feasibility (the solvers report the rest as infeasible): the
    weights fit all the caps together; each free op, group and pinned op fits some target it may
    use; the ops pinned to a target fit its cap."""
    n, t = len(ops), len(targets)
    with np.errstate(over="ignore"):
        total_w = float(weights.sum())
    if not math.isfinite(total_w):
        raise ProblemError("weight_bytes too large: the ops' weights add up to more than a float holds")
    if total_w > float(caps.sum()):
        raise ProblemError(f"infeasible memory: ops need {total_w:.6g} weight bytes, all targets "
                           f"together hold {float(caps.sum()):.6g}")
    grouped = {i for g in groups for i in g}
    pinned_idx = {op_index[o] for o in pinned}
    # single free ops at once (the loop below did them one by one: seconds at 100,000 ops)
    free = np.array([i for i in range(n) if i not in grouped and i not in pinned_idx], dtype=int)
    if len(free):
        fits = (np.isfinite(cost[free]) & (caps[None, :] >= weights[free][:, None])).any(axis=1)
        if not fits.all():
            i = int(free[np.argmin(fits)])
            raise ProblemError(f"infeasible memory: op {ops[i]!r} needs {float(weights[i]):.6g} weight "
                               "bytes, more than the cap of every target it can run on")
    units = [list(g) for g in groups] + [[i] for i in sorted(pinned_idx - grouped)]
    pinned_load = np.zeros(t)
    for unit in units:
        w = float(weights[unit].sum())
        ok = np.isfinite(cost[unit]).all(axis=0)
        pin = next((pinned[ops[i]] for i in unit if ops[i] in pinned), None)
        if pin is not None:
            ok = np.zeros(t, dtype=bool)
            ok[tgt_index[pin]] = True
        if not (caps[ok] >= w).any():
            what = f"op {ops[unit[0]]!r}" if len(unit) == 1 else f"colocation group {[ops[i] for i in unit]}"
            raise ProblemError(f"infeasible memory: {what} needs {w:.6g} weight bytes, more than the "
                               "cap of every target it can run on")
        if pin is not None:
            pinned_load[tgt_index[pin]] += w
    for j in range(t):
        if pinned_load[j] > caps[j]:
            raise ProblemError(f"infeasible memory: ops pinned to {targets[j]!r} need "
                               f"{pinned_load[j]:.6g} bytes, cap is {caps[j]:.6g}")


@dataclass(frozen=True, eq=False)
class PlacementProblem:
    """A placement problem (see the module docstring for the semantics).

    Parameters
    ----------
    ops : sequence of str
        Op names (unique). Stored in a topological order (sorted stably if needed).
    targets : sequence of str
        Target names (unique). Their order is the priority order used by baselines.
    cost_ms : array-like, shape (n_ops, n_targets)
        Time of each op on each target in ms; ``np.inf`` = unsupported.
    tensors : sequence of Tensor
        Tensors; they define the precedence edges.
    link_latency_ms, link_ms_per_byte : float or array-like (n_targets, n_targets)
        Link model (diagonal ignored). Default 0.
    link_charge : str or (n_targets, n_targets) nested sequence of str
        ``"sender"``, ``"receiver"`` or ``"both"`` per (src, dst) pair. Default ``"both"``.
    memory_cap_bytes : float or array-like (n_targets,)
        Memory cap per target; ``np.inf`` = none (default).
    weight_bytes : float or array-like (n_ops,)
        Weight bytes per op (default 0).
    pinned : mapping op -> target
        Forced placements.
    colocate : sequence of sequences of op
        Groups of ops that must share one target.
    link_broadcast : bool
        Pipeline mode: a tensor sent to several targets costs its sender once (the largest of its
        sender-charged link times), not once per destination. Default False.
    partition_overhead_ms : float or array-like (n_targets,)
        Entry cost charged once per tensor received on a target (default 0).
    cut_scale : float or array-like (n_targets,)
        Factor (>= 1) on a target's op costs in a plan that uses more than one target (default 1).
    target_cores : mapping target -> sequence of int or None
        CPU core ids each target runs on (see the module docstring). Targets not listed, or
        mapped to ``None``, are private resources (the default: every target runs independently).
        Stored as ``{target: sorted tuple of distinct ids}`` for the listed targets only.
    provenance : mapping
        Free metadata (model hash, cost-model id, ...), copied into every Plan.

    Raises
    ------
    ProblemError
        On any malformed or provably infeasible input; the message names the op/tensor/target.
    """

    ops: tuple[str, ...]
    targets: tuple[str, ...]
    cost_ms: np.ndarray
    tensors: tuple[Tensor, ...] = ()
    link_latency_ms: Any = None
    link_ms_per_byte: Any = None
    link_charge: Any = "both"
    memory_cap_bytes: Any = None
    weight_bytes: Any = None
    pinned: Mapping[str, str] = field(default_factory=dict)
    colocate: tuple[tuple[str, ...], ...] = ()
    partition_overhead_ms: Any = None
    provenance: Mapping[str, Any] = field(default_factory=dict)
    target_cores: Mapping[str, Sequence[int] | None] = field(default_factory=dict)
    link_broadcast: bool = False
    cut_scale: Any = None

    # ------------------------------------------------------------------ construction / validation
    def __post_init__(self) -> None:
        """Validate and normalize every field, phase by phase (see the ``_check_*`` functions)."""
        set_ = object.__setattr__
        ops, targets = _check_names(self.ops, self.targets)
        n = len(ops)
        check_table_sizes(n, len(self.tensors) if hasattr(self.tensors, "__len__") else 0, len(targets))
        op_index = {o: i for i, o in enumerate(ops)}
        tgt_index = {d: j for j, d in enumerate(targets)}
        cost = _check_costs(self.cost_ms, ops, targets)
        tensors = _check_tensors(self.tensors, op_index)
        order = _op_order(ops, tensors, op_index)
        if order != list(range(n)):  # stored in a topological order
            ops = tuple(ops[i] for i in order)
            cost = cost[order]
            op_index = {o: i for i, o in enumerate(ops)}
        cost.setflags(write=False)
        lat, per_byte = _check_link_times(self.link_latency_ms, self.link_ms_per_byte, targets, tensors)
        charge = _check_link_charge(self.link_charge, targets)
        caps, weights, overhead = _check_per_target_and_weights(
            self.memory_cap_bytes, self.weight_bytes, self.partition_overhead_ms, len(self.ops), ops, targets,
            order)
        pinned = _check_pins(self.pinned, op_index, tgt_index, cost)
        groups = _merge_groups(self.colocate, op_index, n)
        _check_groups(groups, ops, cost, pinned, tgt_index)
        _check_memory_fits(ops, targets, cost, caps, weights, pinned, groups, op_index, tgt_index)
        cores = _check_target_cores(self.target_cores, targets)

        set_(self, "ops", ops)
        set_(self, "targets", targets)
        set_(self, "cost_ms", cost)
        set_(self, "tensors", tuple(tensors))
        set_(self, "link_latency_ms", lat)
        set_(self, "link_ms_per_byte", per_byte)
        set_(self, "link_charge", charge)
        set_(self, "memory_cap_bytes", caps)
        set_(self, "weight_bytes", weights)
        set_(self, "pinned", {o: pinned[o] for o in ops if o in pinned})
        set_(self, "colocate", tuple(tuple(ops[i] for i in g) for g in groups))
        set_(self, "partition_overhead_ms", overhead)
        set_(self, "provenance", dict(self.provenance or {}))
        set_(self, "target_cores", cores)
        if not isinstance(self.link_broadcast, (bool, np.bool_)):
            raise ProblemError(f"links.broadcast: expected true or false, got {self.link_broadcast!r}")
        set_(self, "link_broadcast", bool(self.link_broadcast))
        set_(self, "cut_scale", _check_cut_scale(self.cut_scale, targets))
        _check_total_time(cost, self.cut_scale, lat, per_byte, overhead, tensors)

    # ------------------------------------------------------------------ basic accessors
    @property
    def n_ops(self) -> int:
        """Number of ops."""
        return len(self.ops)

    @property
    def n_targets(self) -> int:
        """Number of targets."""
        return len(self.targets)

    @cached_property
    def op_index(self) -> dict[str, int]:
        """Op name -> row index."""
        return {o: i for i, o in enumerate(self.ops)}

    @cached_property
    def target_index(self) -> dict[str, int]:
        """Target name -> column index."""
        return {d: j for j, d in enumerate(self.targets)}

    @cached_property
    def tensor_index(self) -> dict[str, int]:
        """Tensor name -> index in ``tensors``."""
        return {tt.name: k for k, tt in enumerate(self.tensors)}

    @cached_property
    def supported(self) -> np.ndarray:
        """Boolean (n_ops, n_targets): finite cost."""
        s = np.isfinite(self.cost_ms)
        s.setflags(write=False)
        return s

    @property
    def cut_scaled(self) -> bool:
        """Whether a plan that cuts the model pays more per op than the costs say (any ``cut_scale > 1``)."""
        return bool((self.cut_scale != 1.0).any())

    @cached_property
    def cut_view(self) -> PlacementProblem:
        """This problem as a plan that cuts the model pays it: each target's costs times its
        ``cut_scale`` (and ``cut_scale`` 1). ``self`` when no scale is above 1."""
        if not self.cut_scaled:
            return self
        cost = np.where(np.isfinite(self.cost_ms), self.cost_ms * self.cut_scale[None, :], np.inf)
        cost.setflags(write=False)
        ones = np.ones(self.n_targets)
        ones.setflags(write=False)
        return self._copy_with(cost_ms=cost, cut_scale=ones)

    def priced_for(self, assign: Any) -> PlacementProblem:
        """The problem the op-index assignment ``assign`` is priced on: :attr:`cut_view` if it uses
        more than one target, else ``self``."""
        if not self.cut_scaled:
            return self
        a = np.asarray(assign)
        return self.cut_view if a.size and (a != a.flat[0]).any() else self

    def _copy_with(self, **fields: Any) -> PlacementProblem:
        """A shallow copy of this validated problem with ``fields`` replaced, not validated again
        (the caller keeps every invariant); cached properties that do not depend on costs are shared."""
        new = object.__new__(PlacementProblem)
        for name in self.__dataclass_fields__:
            object.__setattr__(new, name, fields.get(name, getattr(self, name)))
        for name in ("op_index", "target_index", "tensor_index", "_edge_arrays", "edges", "preds", "succs"):
            if name in self.__dict__:
                new.__dict__[name] = self.__dict__[name]
        return new

    @cached_property
    def _edge_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """:attr:`edges` as two index arrays ``(u, v)``, sorted by ``u`` then ``v``."""
        n = self.n_ops
        _, us, vs = self.consumer_arrays
        code = np.unique(us * n + vs)
        return code // n, code % n

    @cached_property
    def edges(self) -> tuple[tuple[int, int], ...]:
        """Unique precedence edges ``(u, v)`` as op indices, sorted."""
        us, vs = self._edge_arrays
        return tuple(zip(us.tolist(), vs.tolist()))

    @cached_property
    def preds(self) -> tuple[tuple[int, ...], ...]:
        """Predecessor op indices of each op."""
        us, vs = self._edge_arrays
        by_v = np.lexsort((us, vs))  # by v, then u
        return _group_by(vs[by_v], us[by_v], self.n_ops)

    @cached_property
    def succs(self) -> tuple[tuple[int, ...], ...]:
        """Successor op indices of each op."""
        us, vs = self._edge_arrays
        return _group_by(us, vs, self.n_ops)

    @cached_property
    def tensor_producer(self) -> tuple[int, ...]:
        """Producer op index of each tensor (-1 for model inputs)."""
        return tuple(-1 if tt.producer is None else self.op_index[tt.producer] for tt in self.tensors)

    @cached_property
    def tensor_consumers(self) -> tuple[tuple[int, ...], ...]:
        """Consumer op indices of each tensor (sorted, unique)."""
        return tuple(tuple(sorted(self.op_index[c] for c in tt.consumers)) for tt in self.tensors)

    @cached_property
    def tensor_bytes(self) -> np.ndarray:
        """Bytes of each tensor."""
        return np.array([tt.nbytes for tt in self.tensors], dtype=float)

    # ------------------------------------------------------------------ shared resources (cores)
    @cached_property
    def resource_sets(self) -> tuple[tuple[int, ...], ...]:
        """Per target, the ids (``0 .. n_resources - 1``) of the resources it occupies while it runs.

        Resources are the cores of ``target_cores`` canonicalized: cores used by the same set of
        targets are one resource, and a core whose users are a subset of another core's users is
        dropped (its constraint is implied); a target without cores gets a fresh private id. Ids
        are numbered by first use in target order, so when no two targets share a core every
        target has exactly one resource and ``resource_sets[d] == (d,)`` (the independent-target
        model). Two targets conflict iff their resource sets intersect.
        """
        users_of_core: dict[int, set[int]] = {}
        for d, name in enumerate(self.targets):
            for core in self.target_cores.get(name) or ():
                users_of_core.setdefault(core, set()).add(d)
        user_sets = {frozenset(u) for u in users_of_core.values()}
        maximal = {u for u in user_sets if not any(u < other for other in user_sets)}
        ids: dict[Any, int] = {}
        out = []
        for d, name in enumerate(self.targets):
            if name in self.target_cores:
                keys = sorted((min(u), sorted(u)) for u in maximal if d in u)
                rs = []
                for _, key in keys:
                    k = ("shared", tuple(key))
                    if k not in ids:
                        ids[k] = len(ids)
                    rs.append(ids[k])
                out.append(tuple(sorted(rs)))
            else:
                ids[("private", d)] = len(ids)
                out.append((ids[("private", d)],))
        return tuple(out)

    @cached_property
    def n_resources(self) -> int:
        """Number of resources (see :attr:`resource_sets`)."""
        return 1 + max(r for rs in self.resource_sets for r in rs)

    @cached_property
    def resource_users(self) -> tuple[tuple[int, ...], ...]:
        """Per resource, the (sorted) indices of the targets that use it."""
        users: list[list[int]] = [[] for _ in range(self.n_resources)]
        for d, rs in enumerate(self.resource_sets):
            for r in rs:
                users[r].append(d)
        return tuple(tuple(u) for u in users)

    @cached_property
    def conflicts(self) -> tuple[tuple[int, ...], ...]:
        """Per target, the (sorted) targets it conflicts with (shares a resource with), itself included."""
        out = []
        for rs in self.resource_sets:
            out.append(tuple(sorted({d for r in rs for d in self.resource_users[r]})))
        return tuple(out)

    @cached_property
    def shares_resources(self) -> bool:
        """True if two distinct targets share a core (else every target is its own resource)."""
        return any(len(u) > 1 for u in self.resource_users)

    def resource_loads(self, per_target: np.ndarray) -> np.ndarray:
        """Per resource, the sum of ``per_target`` over the targets using it (e.g. busy times)."""
        per_target = np.asarray(per_target, dtype=float)
        if not self.shares_resources:
            return per_target.copy()
        return np.array([float(sum(per_target[d] for d in u)) for u in self.resource_users])

    @cached_property
    def in_tensors(self) -> tuple[tuple[int, ...], ...]:
        """For each op, the produced (non-input) tensors it reads."""
        ptr, flat = self.in_tensor_arrays
        ptr_l, flat_l = ptr.tolist(), flat.tolist()
        return tuple([tuple(flat_l[ptr_l[v]:ptr_l[v + 1]]) for v in range(self.n_ops)])

    @cached_property
    def in_tensor_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """:attr:`in_tensors` flattened: ``(ptr, tensors)``, op ``v`` reads ``tensors[ptr[v]:ptr[v + 1]]``."""
        ks, _, vs = self.consumer_arrays
        by_v = np.lexsort((ks, vs))  # by reader, then tensor
        ptr = np.searchsorted(vs[by_v], np.arange(self.n_ops + 1))
        flat = ks[by_v]
        for a in (ptr, flat):
            a.setflags(write=False)
        return ptr, flat

    @cached_property
    def consumer_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every (produced tensor, consumer) pair as arrays ``(tensor, producer, consumer)``, by tensor
        then consumer index (model inputs left out)."""
        prod = self.tensor_producer
        ks = np.fromiter((k for k, cs in enumerate(self.tensor_consumers) if prod[k] >= 0 for _ in cs),
                         dtype=np.int64)
        vs = np.fromiter((v for k, cs in enumerate(self.tensor_consumers) if prod[k] >= 0 for v in cs),
                         dtype=np.int64, count=len(ks))
        us = np.asarray(prod, dtype=np.int64)[ks] if len(ks) else np.zeros(0, dtype=np.int64)
        for a in (ks, us, vs):
            a.setflags(write=False)
        return ks, us, vs

    @cached_property
    def out_tensors(self) -> tuple[tuple[int, ...], ...]:
        """For each op, the tensors it produces that some op reads."""
        ks, us, _ = self.consumer_arrays
        m = max(len(self.tensors), 1)
        code = np.unique(us * m + ks)  # by producer, then tensor
        return _group_by(code // m, code % m, self.n_ops)

    @cached_property
    def group_of(self) -> np.ndarray:
        """Colocation group index of each op, -1 if none."""
        g = np.full(self.n_ops, -1, dtype=int)
        for gi, members in enumerate(self.colocate):
            for o in members:
                g[self.op_index[o]] = gi
        return g

    @cached_property
    def pin_of(self) -> np.ndarray:
        """Pinned target index of each op, -1 if free (a group inherits its members' pin)."""
        p = np.full(self.n_ops, -1, dtype=int)
        for o, d in self.pinned.items():
            p[self.op_index[o]] = self.target_index[d]
        for members in self.colocate:
            idx = [self.op_index[o] for o in members]
            pins = [p[i] for i in idx if p[i] >= 0]
            if pins:
                p[idx] = pins[0]
        p.setflags(write=False)
        return p

    @cached_property
    def allowed(self) -> np.ndarray:
        """Boolean (n_ops, n_targets): targets an op may use (support, pins, colocation, memory)."""
        a = np.isfinite(self.cost_ms).copy()
        for members in self.colocate:
            idx = [self.op_index[o] for o in members]
            a[idx] = a[idx].all(axis=0)
        for i in np.flatnonzero(self.pin_of >= 0):
            keep = a[i, self.pin_of[i]]
            a[i] = False
            a[i, self.pin_of[i]] = keep
        # a unit heavier than a target's cap cannot go there (single ops all at once)
        single = np.array([u[0] for u in self.units if len(u) == 1], dtype=int)
        if len(single):
            a[single] &= self.memory_cap_bytes[None, :] >= self.weight_bytes[single][:, None]
        for unit in self.units:
            if len(unit) > 1:
                w = float(self.weight_bytes[list(unit)].sum())
                a[list(unit)] &= self.memory_cap_bytes >= w
        a.setflags(write=False)
        return a

    # ------------------------------------------------------------------ canonical order
    @cached_property
    def pipeline_units(self) -> tuple[tuple[int, ...], ...]:
        """Sets of ops that every monotone pipeline puts in one stage, in a topological order.

        Exact: contract each colocation group into one node; the strongly connected components of
        that quotient graph are the units (a cycle ``A -> B -> A`` through groups forces
        ``stage(A) <= stage(B) <= stage(A)``; in particular every op on a path between two members
        of a group joins it). Single ops not forced together are units of their own. Units are
        sorted by their longest path (in units) from the sources, then by the least natural key of
        their op names (see :attr:`canonical_order`), so the order depends on the graph, the names
        and the groups only; members are sorted as in :attr:`canonical_order`.
        """
        return _pipeline_units(self)

    @cached_property
    def canonical_order(self) -> tuple[int, ...]:
        """A topological order of the op indices that does not depend on how ops were listed.

        The :attr:`pipeline_units` one after the other (so colocation groups and everything a
        pipeline must keep with them form contiguous blocks); inside a unit, ops by their longest
        path (in ops) from the sources, then by the natural key of their names (digit runs compared
        as numbers, ``n9 < n10``, then the name itself). Solvers run on :meth:`canonical` and
        ``contiguous`` pipelines are contiguous runs of this order.
        """
        return tuple(i for unit in self.pipeline_units for i in unit)

    def canonical(self) -> PlacementProblem:
        """The same problem listed in :attr:`canonical_order`, tensors sorted by (producer position,
        name) with their consumers in op order; ``self`` if it is already listed so. Two problems
        that differ only in the order of ops, tensors, consumers or colocation members have equal
        canonical forms (``to_json()`` identical). Built once per problem."""
        return self._canonical

    @cached_property
    def _canonical(self) -> PlacementProblem:
        n = self.n_ops
        order = list(self.canonical_order)
        pos = [0] * n
        for r, i in enumerate(order):
            pos[i] = r
        ops = tuple(self.ops[i] for i in order)
        # tensors by (producer position, natural key of the name): the key only where positions tie
        prod = [-1 if u < 0 else pos[u] for u in self.tensor_producer]
        seen: dict[int, int] = {}
        for u in prod:
            seen[u] = seen.get(u, 0) + 1
        names = [tt.name for tt in self.tensors]
        keys = [(u, _natural_key(name) if seen[u] > 1 else ()) for u, name in zip(prod, names)]
        torder = sorted(range(len(keys)), key=keys.__getitem__)
        consumers = [tuple(sorted(pos[c] for c in cs)) for cs in self.tensor_consumers]
        tensors = []
        same = order == list(range(n)) and torder == list(range(len(torder)))
        for k in torder:
            tt = self.tensors[k]
            cs = tuple(ops[j] for j in consumers[k])
            if cs != tt.consumers:
                same = False
                tt = _trusted_tensor(tt.name, tt.producer, cs, tt.nbytes)
            tensors.append(tt)
        if same:
            return self
        new = self._relisted(order, ops, tuple(tensors))
        # what the copy would compute from scratch, known already (mapped by position)
        cache = new.__dict__
        cache["tensor_producer"] = tuple(prod[k] for k in torder)
        cache["tensor_consumers"] = tuple(consumers[k] for k in torder)
        cache["pipeline_units"] = tuple(tuple(pos[i] for i in unit) for unit in self.pipeline_units)
        cache["_canonical"] = new  # listed canonically already
        return new

    def _relisted(self, order: Sequence[int], ops: tuple[str, ...], tensors: tuple[Tensor, ...]
                  ) -> PlacementProblem:
        """This (validated) problem listed in ``order`` (a topological order of the op indices; ``ops``
        the names in that order) with ``tensors`` (its own tensors, reordered, their consumers
        possibly reordered): the problem ``PlacementProblem(...)`` would build from that listing,
        without validating again what this one's construction checked (linear, not ~25 us per op)."""
        new = object.__new__(PlacementProblem)
        set_ = object.__setattr__
        rank = {o: r for r, o in enumerate(ops)}
        cost = self.cost_ms[order]
        cost.setflags(write=False)
        weights = self.weight_bytes[order]
        weights.setflags(write=False)
        # colocation groups as the constructor lists them: members by position, groups by first member
        groups = sorted(sorted(rank[o] for o in g) for g in self.colocate)
        set_(new, "ops", ops)
        set_(new, "targets", self.targets)
        set_(new, "cost_ms", cost)
        set_(new, "tensors", tensors)
        set_(new, "link_latency_ms", self.link_latency_ms)
        set_(new, "link_ms_per_byte", self.link_ms_per_byte)
        set_(new, "link_charge", self.link_charge)
        set_(new, "memory_cap_bytes", self.memory_cap_bytes)
        set_(new, "weight_bytes", weights)
        set_(new, "pinned", {o: self.pinned[o] for o in ops if o in self.pinned})
        set_(new, "colocate", tuple(tuple(ops[i] for i in g) for g in groups))
        set_(new, "partition_overhead_ms", self.partition_overhead_ms)
        set_(new, "provenance", dict(self.provenance))
        set_(new, "target_cores", dict(self.target_cores))
        set_(new, "link_broadcast", self.link_broadcast)
        set_(new, "cut_scale", self.cut_scale)
        new.__dict__["op_index"] = rank
        return new

    @cached_property
    def units(self) -> tuple[tuple[int, ...], ...]:
        """Placement units in topological order of their first op: colocation groups and single ops."""
        seen: set[int] = set()
        out = []
        for i in range(self.n_ops):
            if i in seen:
                continue
            g = self.group_of[i]
            unit = (i,) if g < 0 else tuple(sorted(self.op_index[o] for o in self.colocate[g]))
            seen.update(unit)
            out.append(unit)
        return tuple(out)

    @cached_property
    def charge_code(self) -> np.ndarray:
        """Int (T, T): 1 = sender pays, 2 = receiver pays, 3 = both."""
        c = np.array([[_CHARGE_CODE[x] for x in row] for row in self.link_charge], dtype=int)
        c.setflags(write=False)
        return c

    @cached_property
    def link_ms(self) -> np.ndarray:
        """Float (n_tensors, T, T): link time of each tensor between each target pair (0 on the diagonal)."""
        lm = (self.link_latency_ms[None, :, :]
              + self.tensor_bytes[:, None, None] * self.link_ms_per_byte[None, :, :])
        if len(self.tensors):
            idx = np.arange(self.n_targets)
            lm[:, idx, idx] = 0.0
        lm = lm.reshape(len(self.tensors), self.n_targets, self.n_targets)
        lm.setflags(write=False)
        return lm

    def transfer_ms(self, tensor: str, src: str, dst: str) -> float:
        """Link time of ``tensor`` from target ``src`` to ``dst`` (entry overhead excluded)."""
        k = self.tensor_index[tensor]
        return float(self.link_ms[k, self.target_index[src], self.target_index[dst]])

    def resolve_target(self, name: str, context: str = "") -> str:
        """See :func:`resolve_target_name`."""
        return resolve_target_name(name, self.targets, context)

    # ------------------------------------------------------------------ equality / repr
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlacementProblem):
            return NotImplemented
        return self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"PlacementProblem(n_ops={self.n_ops}, targets={list(self.targets)}, "
                f"n_tensors={len(self.tensors)}, pinned={len(self.pinned)}, colocate={len(self.colocate)})")

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        """The canonical JSON form (a dict; see ``docs/problem_json.md``)."""
        return problem_to_json(self)

    def save(self, path: str | os.PathLike) -> None:
        """Write :meth:`to_json` to ``path`` (sorted keys, indented)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=1, sort_keys=True)
            f.write("\n")

    @classmethod
    def from_json(cls, source: str | os.PathLike | Mapping[str, Any]) -> PlacementProblem:
        """Build a problem from a JSON file path or an already-parsed dict.

        The format is documented in ``docs/problem_json.md`` and its JSON Schema is
        ``placer/schemas/problem.schema.json`` (:func:`problem_schema`), checked first
        (:func:`validate_problem_json`). ``cost_ms`` is either ``{op: {target: ms}}`` (a missing target
        = unsupported) or a list of rows with ``null`` for unsupported. Matrices of ``links`` may be a
        single number for every pair.

        Raises
        ------
        ProblemError
            If the file cannot be read or the content is malformed: one line naming the file (``problem
            JSON`` for a dict) and the JSON path of the fault, or the op / tensor / target at fault.
        """
        fields, where = read_problem_json(source)
        fields["tensors"] = [Tensor(*t) for t in fields["tensors"]]
        try:
            return cls(**fields)
        except ProblemError as exc:  # a cycle, an unknown op in a tensor ...: which file holds it, too
            raise type(exc)(f"{where}: {exc}") from None


_DIGIT_RUNS = re.compile(r"(\d+)")


def _natural_key(name: str) -> tuple:
    """Sort key comparing digit runs as numbers (``n9 < n10``), then the name itself (a total order)."""
    parts = tuple((0, int(s), "") if s.isdigit() else (1, 0, s) for s in _DIGIT_RUNS.split(name) if s)
    return (parts, name)


def _group_by(keys: np.ndarray, values: np.ndarray, n: int) -> tuple[tuple[int, ...], ...]:
    """``out[i]`` = the ``values`` whose key is ``i``, in their order (``keys`` sorted, in ``[0, n)``)."""
    ptr = np.searchsorted(keys, np.arange(n + 1)).tolist()
    vals = values.tolist()
    return tuple([tuple(vals[ptr[i]:ptr[i + 1]]) for i in range(n)])


def _longest_from_sources(n: int, preds: Sequence[Sequence[int]], order: Sequence[int]) -> list[int]:
    """Longest path (in nodes, minus one) from a source to each node; ``order`` is topological."""
    depth = [0] * n
    for v in order:
        for u in preds[v]:
            if depth[u] + 1 > depth[v]:
                depth[v] = depth[u] + 1
    return depth


def _strong_components(n: int, succ: Sequence[Sequence[int]]) -> list[int]:
    """Component id of each node (iterative Tarjan)."""
    index = [-1] * n
    low = [0] * n
    comp = [-1] * n
    on_stack = [False] * n
    stack: list[int] = []
    counter = 0
    n_comp = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, i = work[-1]
            if i < len(succ[v]):
                work[-1] = (v, i + 1)
                w = succ[v][i]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, 0))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp[w] = n_comp
                    if w == v:
                        break
                n_comp += 1
    return comp


def _pipeline_units(p: PlacementProblem) -> tuple[tuple[int, ...], ...]:
    """See :attr:`PlacementProblem.pipeline_units`."""
    n = p.n_ops
    keys = [_natural_key(o) for o in p.ops]
    op_depth = _longest_from_sources(n, p.preds, range(n))  # ops are stored in a topological order
    if not p.colocate:  # every op is a unit of its own (a DAG's components are single nodes): the same order
        return tuple((i,) for i in sorted(range(n), key=lambda i: (op_depth[i], keys[i])))
    # quotient by colocation groups: node of each op
    node = [-1] * n
    n_nodes = len(p.colocate)
    for gi, members in enumerate(p.colocate):
        for o in members:
            node[p.op_index[o]] = gi
    for i in range(n):
        if node[i] < 0:
            node[i] = n_nodes
            n_nodes += 1
    qsucc: list[set[int]] = [set() for _ in range(n_nodes)]
    for u, v in p.edges:
        if node[u] != node[v]:
            qsucc[node[u]].add(node[v])
    comp = _strong_components(n_nodes, [sorted(s) if len(s) > 1 else list(s) for s in qsucc])
    n_units = max(comp) + 1
    members: list[list[int]] = [[] for _ in range(n_units)]
    for i in range(n):
        members[comp[node[i]]].append(i)
    upreds: list[set[int]] = [set() for _ in range(n_units)]
    for u, v in p.edges:
        cu, cv = comp[node[u]], comp[node[v]]
        if cu != cv:
            upreds[cv].add(cu)
    # Tarjan numbers the components in reverse topological order of the condensation
    depth = _longest_from_sources(n_units, [sorted(s) if len(s) > 1 else list(s) for s in upreds],
                                  range(n_units - 1, -1, -1))
    # (single-op units, most of them, skip the sorts: the same result, seconds less at 100,000 ops)
    units = [tuple(m) if len(m) == 1 else tuple(sorted(m, key=lambda i: (op_depth[i], keys[i]))) for m in members]
    first_key = [keys[m[0]] if len(m) == 1 else min(keys[i] for i in m) for m in members]
    ranked = sorted(range(n_units), key=lambda c: (depth[c], first_key[c]))
    return tuple(units[c] for c in ranked)


def resolve_target_name(name: str, targets: Sequence[str], context: str = "") -> str:
    """The target of ``targets`` that ``name`` means: its exact name, or the one target of that kind
    when the name leaves the resources out (``onnxruntime`` -> ``onnxruntime@cpu:t2``).
    ProblemError (prefixed by ``context``) if it names none or several."""
    if name in targets:
        return name
    matches = [t for t in targets if t.startswith((f"{name}@", f"{name}:"))]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ProblemError(f"{context}target {name!r} is ambiguous: it matches {matches}; name one of them")
    raise ProblemError(f"{context}unknown target {name!r}; targets are {list(targets)}")
