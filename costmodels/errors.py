"""Errors of the cost-model layer (user errors: the CLI prints them on one line)."""

from __future__ import annotations

from placer.errors import PlacerError


class CostModelError(PlacerError):
    """A cost model cannot be fitted, used or loaded (the target, op or file is named)."""


class ArtifactIntegrityError(CostModelError):
    """A saved cost-model file was changed after saving or holds types outside the allowlist.

    ``path`` is the offending file.
    """

    def __init__(self, path, reason: str):
        self.path = str(path)
        super().__init__(f"refusing to load cost-model file {self.path}: {reason}")
