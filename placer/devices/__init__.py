"""Targets: runtimes + hardware + resources behind one interface (the only place that imports them)."""

from placer.devices.base import CompiledModel, Target, TargetSpec
from placer.devices.registry import available_targets, make_target, make_targets, register_target

__all__ = ["CompiledModel", "Target", "TargetSpec", "available_targets", "make_target", "make_targets", "register_target"]
