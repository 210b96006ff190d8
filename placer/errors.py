"""User-facing errors.

Every error a user can cause (bad file, bad shape, unknown target, infeasible problem, a plan
that does not match its model) is a :class:`PlacerError`. The CLI prints its message on one line
and exits non-zero; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class PlacerError(Exception):
    """Base class of every error caused by user input. The message names the file/op/target."""


class GraphError(PlacerError):
    """The model cannot be loaded or understood (file, op, tensor named in the message)."""


class TargetError(PlacerError):
    """A target is unknown, unavailable, or failed on an op (target and op named)."""


class TargetUnavailable(TargetError):
    """The device behind a target cannot be reached now (a remote server down, a tracker gone): not
    the op's fault. A profiling campaign stores nothing for it, skips the target's remaining
    measurements, says so, and a later run resumes them."""


class ProblemError(PlacerError):
    """A placement problem is malformed or infeasible."""


class TimeLimitError(ProblemError):
    """A solve's time limit ran out before a solver that cannot stop midway (a heuristic) could start."""


class PlanError(PlacerError):
    """A plan or stage config is malformed or does not match its model/problem."""


class ProfileError(PlacerError):
    """A profiling campaign or profile store cannot proceed."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-blank line of ``exc``'s message, without the whitespace around the message (at
    most ``limit`` characters), or its type's name when the message is empty or blank
    (``EOFError()``, ``KeyboardInterrupt()``): safe to put on one line of output."""
    lines = str(exc).strip().splitlines()  # after strip() the first line holds a visible character
    return lines[0][:limit] if lines else type(exc).__name__
