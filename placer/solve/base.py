"""The solver interface and the registry of solver plug-ins.

A solver is a small class deriving from :class:`Solver`, registered by name with
:func:`register_solver`. ``placer.solve.solve`` looks the name up, checks the mode and options,
and calls :meth:`Solver.solve` with a :class:`SolveContext`. A name may carry one argument after a
colon (``"single:cpu"``), passed to the solver's constructor.

The registry is the only module-level mutable state of the package.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from placer.errors import ProblemError
from placer.plan import Plan
from placer.problem import PlacementProblem

__all__ = ["MODES", "SolveContext", "Solver", "available_solvers", "get_solver", "register_solver"]

MODES = ("latency", "pipeline")

_REGISTRY: dict[str, type[Solver]] = {}


@dataclass(frozen=True)
class SolveContext:
    """Everything a solver is asked besides the problem.

    Attributes
    ----------
    mode : {"latency", "pipeline"}
    name : str
        The full solver name as requested (``"single:cpu"``), recorded in the Plan.
    time_limit : float
        Seconds for the whole ``solve`` call; :attr:`deadline` is the matching ``time.monotonic()``.
    seed : int
    num_stages : int or None
        Pipeline mode: at most this many (non-empty) stages; ``None`` = up to the number of targets.
    contiguous : bool
        Pipeline mode: stages must be contiguous runs of the problem's op order (``solve`` hands
        solvers the canonical listing, so that is its canonical order).
    options : dict
        Solver-specific options (already checked against :attr:`Solver.options`).
    """

    mode: str
    name: str
    time_limit: float = 10.0
    seed: int = 0
    num_stages: int | None = None
    contiguous: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    deadline: float = 0.0

    def remaining(self) -> float:
        """Seconds left until the deadline (>= 0)."""
        return max(0.0, self.deadline - time.monotonic())

    def max_stages(self, problem: PlacementProblem) -> int:
        """Effective stage limit."""
        k = problem.n_targets if self.num_stages is None else int(self.num_stages)
        return max(1, min(k, problem.n_targets))

    def plan_options(self) -> dict[str, Any]:
        """What the Plan records about how it was solved."""
        out: dict[str, Any] = {"seed": self.seed, "time_limit": self.time_limit}
        if self.mode == "pipeline":
            out["num_stages"] = self.num_stages
            out["contiguous"] = bool(self.contiguous)
            if self.contiguous:  # runs of the canonical op order (what Plan.validate checks)
                out["op_order"] = "canonical"
        out.update({k: v for k, v in self.options.items() if isinstance(v, (int, float, str, bool))
                    or v is None})
        return out


class Solver(abc.ABC):
    """Base class of solver plug-ins.

    Class attributes
    ----------------
    name : str
        Registry name (set by :func:`register_solver`).
    modes : tuple of str
        Modes the solver handles.
    options : dict
        Accepted solver-specific options and their defaults; anything else is rejected.
    exact : bool
        True if the solver returns a proven optimum of its search space (used by tests).
    auto_coarsen : bool
        True if ``coarsen="auto"`` may coarsen big problems before calling it.
    takes_arg : bool
        True if the name takes an argument (``"single:<target>"``).
    contiguous_only : bool
        True if the solver only searches contiguous pipelines (``contiguous`` is then forced on).
    """

    name: ClassVar[str] = ""
    modes: ClassVar[tuple[str, ...]] = MODES
    options: ClassVar[dict[str, Any]] = {}
    exact: ClassVar[bool] = False
    auto_coarsen: ClassVar[bool] = False
    takes_arg: ClassVar[bool] = False
    contiguous_only: ClassVar[bool] = False

    def __init__(self, arg: str | None = None) -> None:
        if arg is not None and not self.takes_arg:
            raise ProblemError(f"solver {self.name!r} takes no ':' argument (got {arg!r})")
        self.arg = arg

    @abc.abstractmethod
    def solve(self, problem: PlacementProblem, ctx: SolveContext) -> Plan:
        """Return a plan for ``problem`` (it must pass ``plan.validate(problem)``)."""

    @classmethod
    def expand_names(cls, problem: PlacementProblem | None) -> list[str]:
        """Names this plug-in answers to (``"single:<target>"`` per target for argument solvers)."""
        if cls.takes_arg:
            if problem is None:
                return [f"{cls.name}:<target>"]
            return [f"{cls.name}:{t}" for t in problem.targets]
        return [cls.name]


def register_solver(name: str, cls: type[Solver] | None = None, *, overwrite: bool = False
                    ) -> Callable[[type[Solver]], type[Solver]] | type[Solver]:
    """Register a solver class under ``name`` (usable as a decorator).

    Examples
    --------
    >>> from placer.solve import register_solver, Solver
    >>> @register_solver("mine", overwrite=True)
    ... class Mine(Solver):
    ...     def solve(self, problem, ctx): ...
    """
    if ":" in name or not name:
        raise ProblemError(f"invalid solver name {name!r}")

    def deco(c: type[Solver]) -> type[Solver]:
        if not (isinstance(c, type) and issubclass(c, Solver)):
            raise TypeError(f"{c!r} is not a Solver subclass")
        if name in _REGISTRY and _REGISTRY[name] is not c and not overwrite:
            raise ProblemError(f"solver {name!r} is already registered")
        c.name = name
        _REGISTRY[name] = c
        return c

    return deco if cls is None else deco(cls)


def available_solvers(problem: PlacementProblem | None = None) -> list[str]:
    """Registered solver names, sorted; argument solvers expanded per target when ``problem`` is given."""
    out: list[str] = []
    for name in sorted(_REGISTRY):
        out.extend(_REGISTRY[name].expand_names(problem))
    return out


def get_solver(name: str) -> Solver:
    """Instantiate the solver named ``name`` (``"base"`` or ``"base:arg"``).

    Raises
    ------
    ProblemError
        For an unknown name; the message lists the valid ones.
    """
    base, _, arg = name.partition(":")
    cls = _REGISTRY.get(base)
    if cls is None or (cls.takes_arg and not arg) or (not cls.takes_arg and ":" in name):
        raise ProblemError(f"unknown solver {name!r}; valid solvers: {', '.join(available_solvers())}")
    return cls(arg or None)
