"""numba kernels compiled (or loaded from numba's on-disk cache) on their first call, not at import.

``@njit(signature, cache=True)`` compiles, or loads from the cache, when the module is imported: with
numba's own import, 0.55-0.74 s in every process that imports :mod:`placer.solve` (``placer run``, ``placer
profile``, a test worker), whether it solves anything or not, and seconds where the cache is cold
(4.2 s for the kernels of :mod:`placer.solve.heads_tails_kernel` and :mod:`placer.solve.retime` on a
2-core AMD EPYC). :func:`njit` here takes the same arguments and returns a :class:`Kernel`: the
first call of any kernel of a module imports numba and compiles that module's kernels in the order
they are defined (a kernel calling another finds it compiled: each kernel's module name is rebound to
its numba dispatcher), then every call goes to the dispatcher. A name imported from the module keeps
the :class:`Kernel` (one Python call more, 155 ns); a hot loop calls through the module
(``retime.simulate``), the dispatcher itself once compiled. Without numba the kernels run as plain
Python (correct, slower).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import threading
from collections.abc import Callable

__all__ = ["COMPILED", "Kernel", "compile_kernels", "njit"]

#: numba is installed (a declared dependency): kernels run compiled
COMPILED = importlib.util.find_spec("numba") is not None

_LOCK = threading.Lock()


class Kernel:
    """A function to be compiled with ``numba.njit(*args, **kwargs)`` on the first call of a kernel of
    its module; called before that, it compiles them all, then runs compiled."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict):
        self.py_func = fn
        self._args, self._kwargs = args, kwargs
        self._compiled: Callable | None = None
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        compiled = self._compiled
        if compiled is None:
            compiled = self.compile()
        return compiled(*args)

    def compile(self) -> Callable:
        """The numba dispatcher (the plain function without numba), compiling the module's kernels."""
        with _LOCK:
            if self._compiled is None:
                _compile_module(self.py_func.__module__)
        return self._compiled


def _compile_module(module_name: str) -> None:
    module = sys.modules[module_name]
    if COMPILED:
        from numba import njit as numba_njit
    for name, value in list(vars(module).items()):  # definition order: callees before their callers
        if isinstance(value, Kernel) and value._compiled is None:
            value._compiled = numba_njit(*value._args, **value._kwargs)(value.py_func) if COMPILED \
                else value.py_func
            setattr(module, name, value._compiled)  # what a later kernel's compilation finds by name


def compile_kernels(*modules: str) -> None:
    """Compile (or load from numba's cache) every kernel of these modules now (e.g. a test run's first
    process, so that its workers load the kernels from the cache rather than compile them each)."""
    import importlib

    for name in modules:
        importlib.import_module(name)
        with _LOCK:
            _compile_module(name)


def njit(*args, **kwargs) -> Callable[[Callable], Kernel]:
    """``numba.njit``'s decorator form (``@njit(signature, cache=True)``), compiled on first call."""
    if args and callable(args[0]):
        raise TypeError("use @njit(...) with parentheses")
    return lambda fn: Kernel(fn, args, kwargs)
