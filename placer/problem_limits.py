"""The sizes and values a placement problem may have, checked before anything is built.

Shared by :class:`placer.problem.PlacementProblem` (its constructor) and :mod:`placer.problem_json`
(the problem JSON, before its tables are allocated): a damaged or hostile input is refused with a
:class:`~placer.errors.ProblemError` instead of exhausting memory. ``placer.problem`` re-exports
every name.
"""

from __future__ import annotations

from placer.errors import ProblemError

__all__ = ["LINK_CHARGES", "MAX_COST_ENTRIES", "MAX_LINK_ENTRIES", "MAX_NBYTES", "check_table_sizes"]

#: Largest ``nbytes`` of a tensor (a bigger one is a damaged or hostile input).
MAX_NBYTES = 2**62
#: Valid values of ``link_charge``.
LINK_CHARGES = ("sender", "receiver", "both")
#: most entries of the dense link table (n_tensors x n_targets x n_targets floats) a problem may need:
#: 2^24 (128 MiB; the solvers keep a few copies of it)
MAX_LINK_ENTRIES = 2**24
#: most entries of the cost table (n_ops x n_targets)
MAX_COST_ENTRIES = 2**24


def check_table_sizes(n_ops: int, n_tensors: int, n_targets: int) -> None:
    """ProblemError unless the cost table (``n_ops * n_targets``) and the link table
    (``n_tensors * n_targets**2``) stay within MAX_COST_ENTRIES / MAX_LINK_ENTRIES: checked before
    either is built (200 tensors between 3,000 targets would need 14 GiB)."""
    cells = n_ops * n_targets
    if cells > MAX_COST_ENTRIES:
        raise ProblemError(f"{n_ops} ops on {n_targets} targets need a cost table of {cells:.3g} entries, "
                           f"over placer's limit of {MAX_COST_ENTRIES:.3g}")
    # the link matrices (T x T per link field) are built whatever the tensors: a problem of one op on
    # 20,000 targets (a 250 KB JSON) needed minutes and GiBs for them
    entries = max(n_tensors, 1) * n_targets * n_targets
    if entries > MAX_LINK_ENTRIES:
        what = f"{n_tensors} tensors between {n_targets} targets" if n_tensors else f"{n_targets} targets"
        raise ProblemError(
            f"{what} need a link table of {entries:.3g} entries "
            f"({entries * 8 / 2**30:.1f} GiB), over placer's limit of {MAX_LINK_ENTRIES:.3g}: use fewer "
            f"targets (at most {int((MAX_LINK_ENTRIES / max(n_tensors, 1)) ** 0.5)} for {n_tensors} tensors)")
