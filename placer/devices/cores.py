"""Which CPU cores each target occupies while it runs: the resource targets share.

A target is a runtime plus a core budget (docs/design.md, "Cores are a resource"). Two targets
whose core sets intersect cannot run at the same time; targets on disjoint cores can (branches in
parallel, pipeline stages). The solver (``PlacementProblem.target_cores``), the evaluator and the
executors all use :func:`core_sets`, so they hold the same rule:

* a pinned target (``onnxruntime@cpu0,1:t2``) occupies its cores;
* an unpinned target with at least as many threads as the machine has cores
  (``openvino:t2`` on 2 cores) occupies every core;
* an unpinned target with fewer threads is given cores round-robin, in the order the targets are
  listed (``onnxruntime:t1`` core 0, ``openvino:t1`` core 1 on 2 cores): the operating system
  would spread two busy single-thread runtimes over two cores the same way, and a third one
  shares a core with the first;
* a target that does not run on this machine's cores (a simulated accelerator, a TVM RPC device)
  is its own resource: ``None``.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence


def machine_cores() -> tuple[int, ...]:
    """The cores this process may run on."""
    return tuple(sorted(os.sched_getaffinity(0)))


#: target kinds that do not run on this machine's CPU cores
OFF_CPU_KINDS = ("sim", "tvm-rpc")


def core_sets(targets: Iterable) -> dict[str, tuple[int, ...] | None]:
    """``{target name: cores it occupies}`` for targets (objects with ``.spec``, or
    :class:`~placer.devices.base.TargetSpec`); ``None`` for a target off this machine's cores."""
    cores = machine_cores()
    out: dict[str, tuple[int, ...] | None] = {}
    nxt = 0
    for t in targets:
        spec = getattr(t, "spec", t)
        if spec.kind in OFF_CPU_KINDS or getattr(t, "simulated", False):
            out[spec.name] = None
        elif spec.cores:
            out[spec.name] = tuple(sorted(spec.cores))
        elif spec.threads >= len(cores):
            out[spec.name] = cores
        else:
            out[spec.name] = tuple(cores[(nxt + i) % len(cores)] for i in range(spec.threads))
            nxt += spec.threads
    return out


def conflict_groups(sets: dict[str, Sequence[int] | None]) -> list[list[str]]:
    """Targets grouped so that two targets of different groups never share a core (connected
    components of the "shares a core" relation), in first-seen order; ``None`` shares nothing."""
    names = list(sets)
    parent = list(range(len(names)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            if set(sets[names[i]] or ()) & set(sets[names[j]] or ()):
                parent[find(j)] = find(i)
    groups: dict[int, list[str]] = {}
    for i, n in enumerate(names):
        groups.setdefault(find(i), []).append(n)
    return list(groups.values())
