"""Profiling: measure ops, segments, whole models and links on real targets into a ProfileStore.

Public API::

    from placer.profile import ProfileStore, profile_graph, profile_segment, profile_whole_model
    with ProfileStore("profile.db") as store:
        result = profile_graph(graph, ["onnxruntime", "openvino", "tvm-llvm"], store)
        costs = store.op_costs(graph, ["onnxruntime", "openvino"])   # {(op_id, target): net_ms | inf}
        links = store.link_model(["onnxruntime", "openvino"])        # LinkModel.transfer_ms(n, a, b)

See :mod:`placer.profile.campaign` (what is measured, caching), :mod:`placer.profile.engine` (retries,
resume), :mod:`placer.profile.supervisor` (isolation in worker processes), :mod:`placer.profile.store` (schema),
:mod:`placer.profile.timing` (how a measurement is taken), :mod:`placer.profile.links` (measuring
links and cuts) and :mod:`placer.devices.links` (the link model they are fitted into).
"""

from placer.profile.campaign import (
    CampaignResult,
    TargetTotals,
    profile_graph,
    profile_links,
    profile_model,
    profile_segment,
    profile_whole_model,
)
from placer.profile.keys import chain_segments, model_key, partition_key, partition_prefix, segment_key
from placer.profile.store import OVERHEAD_KEY, SCHEMA_VERSION, Measurement, ProfileStore
from placer.profile.timing import TimingConfig, TimingStats

__all__ = [
    "OVERHEAD_KEY",
    "SCHEMA_VERSION",
    "CampaignResult",
    "Measurement",
    "ProfileStore",
    "TargetTotals",
    "TimingConfig",
    "TimingStats",
    "chain_segments",
    "model_key",
    "partition_key",
    "partition_prefix",
    "profile_graph",
    "profile_links",
    "profile_model",
    "profile_segment",
    "profile_whole_model",
    "segment_key",
]
