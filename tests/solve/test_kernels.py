"""numba kernels compiled on their first call (``placer.solve.kernels``): importing the solvers imports no
numba; the first call of a kernel compiles its module's kernels (callees before callers) and gives the
plain function's result; each kernel has one compiled signature (a read-only input is copied, not
compiled for: a second compilation costs seconds in every process until numba's cache holds it)."""

from __future__ import annotations

import numpy as np

from placer.solve import kernels, retime


def test_importing_the_solvers_imports_no_numba_and_the_first_call_compiles(fresh_python):
    code = ("import sys, numpy as np\n"
            "import placer.solve, placer.solve.retime as rt, placer.solve.heads_tails_kernel as hk\n"
            "print('numba' in sys.modules)\n"
            "end = np.array([1.0, 3.0, 2.0]); assign = np.array([0, 1, 0], dtype=np.int64)\n"
            "print(rt.finish_sum(end, assign, 2))\n"
            "print('numba' in sys.modules, type(rt.finish_sum).__name__, type(hk.one_machine).__name__)\n")
    lines = fresh_python(code)
    # finish_sum: the last end per target (2.0 on target 0, 3.0 on target 1), summed; retime's names are
    # numba's dispatchers once one of its kernels ran, heads_tails_kernel's (none of them called) stay lazy
    assert lines[:3] == ["False", "5.0", "True CPUDispatcher Kernel"], lines


def test_a_kernel_gives_what_its_python_function_gives():
    rng = np.random.default_rng(0)
    end = rng.random(50)
    assign = rng.integers(0, 4, 50).astype(np.int64)
    kernel = retime.finish_sum  # a Kernel, or numba's dispatcher once compiled: both keep the Python function
    want = sum(end[assign == d].max() for d in range(4))
    assert kernel(end, assign, 4) == kernel.py_func(end, assign, 4) == want


def test_each_kernel_keeps_one_signature_after_the_bounds_run_on_a_read_only_problem():
    from placer.solve import heads_tails_kernel as hk
    from placer.solve.bounds_comm import comm_heads_tails
    from placer.solve.evaluate import Costs
    from placer.solve.instances import random_layered

    problem = random_layered(12, 3, seed=2)
    assert not problem.allowed.flags.writeable  # what made a second compilation before
    heads, tails = comm_heads_tails(problem, Costs.of(problem))
    assert heads.shape == tails.shape == (12, 3)
    kernels.compile_kernels("placer.solve.heads_tails_kernel", "placer.solve.retime")
    compiled = {f"{m.__name__}.{n}": getattr(m, n) for m in (hk, retime) for n in m.__all__
                if hasattr(getattr(m, n), "signatures")}  # numba's dispatchers, once compiled
    want = {"placer.solve.heads_tails_kernel.neighbour_bounds", "placer.solve.retime.simulate"}
    assert want <= set(compiled)
    for name, dispatcher in compiled.items():
        assert len(dispatcher.signatures) == 1, (name, dispatcher.signatures)
