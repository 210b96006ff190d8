"""Issue 16 probe (session 55): the ancestor/descendant load bound on random layered latency instances.

For an op ``v``: ``LoadLP(ancestors(v)) + min_d c[v, d] + LoadLP(descendants(v))`` (every ancestor ends
before ``v`` starts, every descendant starts after it ends), against the load LP and
:func:`placer.solve.bounds.latency_bound`. Tried on the 60 ops with the most ancestors and descendants
both, each set's load LP by its Lagrangian dual (:func:`placer.solve.bounds.dual_load_bound`);
transfers left out, which keeps it a valid lower bound.

    PYTHONPATH=. python experiments/report_s55/probes/ancestor_descendant_bound.py 500 8 3
"""

from __future__ import annotations

import sys
import time

import numpy as np

from placer.solve.bounds import dual_load_bound, latency_bound, load_bound
from placer.solve.evaluate import Costs
from placer.solve.instances import random_layered


def main(n: int, t: int, seed: int) -> None:
    p = random_layered(n, t, seed)
    c = Costs.of(p)
    cost = np.where(p.allowed, c.cost, np.inf)
    idx = {o: i for i, o in enumerate(p.ops)}
    preds: list[set[int]] = [set() for _ in range(p.n_ops)]
    for tensor in p.tensors:
        if tensor.producer is not None:
            for consumer in tensor.consumers:
                preds[idx[consumer]].add(idx[tensor.producer])
    anc: list[set[int]] = [set() for _ in range(p.n_ops)]
    for v in range(p.n_ops):  # the ops are listed in topological order
        for u in preds[v]:
            anc[v] |= anc[u] | {u}
    desc: list[set[int]] = [set() for _ in range(p.n_ops)]
    for v in range(p.n_ops):
        for u in anc[v]:
            desc[u].add(v)

    def lp(ops: set[int]) -> float:
        return dual_load_bound(cost[sorted(ops)], iterations=60) if ops else 0.0

    t0 = time.monotonic()
    print(f"load LP {load_bound(p, c):.4f} ms, latency_bound {latency_bound(p, c):.4f} ms")
    best, best_v = 0.0, -1
    for v in sorted(range(p.n_ops), key=lambda v: -min(len(anc[v]), len(desc[v])))[:60]:
        b = lp(anc[v]) + float(cost[v].min()) + lp(desc[v])
        if b > best:
            best, best_v = b, v
    print(f"ancestor/descendant bound {best:.4f} ms at op {best_v} ({len(anc[best_v])} ancestors, "
          f"{len(desc[best_v])} descendants), {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
