"""Load ONNX models into a folded, statically shaped form (control flow and data-dependent shapes
contracted into opaque ops: :mod:`placer.graph.opaque`) and view them as an op graph.

>>> from placer.graph import load_graph           # doctest: +SKIP
>>> g = load_graph("model.onnx", shapes={"x": (1, 3, 224, 224)})
>>> g.summary()

See :mod:`placer.graph.load` (what loading does), :mod:`placer.graph.opgraph` (the graph),
:mod:`placer.graph.opaque` (dynamic regions) and
:mod:`placer.graph.flops` (the FLOP formula of each op family). ``zoo:NAME`` references are
resolved above this layer: :func:`placer.zoo.load_graph` (the bundled models build on the graph).
"""

from placer.graph.flops import DATA_MOVEMENT_OPS, op_flops
from placer.graph.inputs import random_inputs
from placer.graph.load import is_folded, load_model
from placer.graph.opgraph import (
    SIGNATURE_VERSION,
    Edge,
    Op,
    OpGraph,
    Signature,
    TensorInfo,
    TensorSpec,
    build_graph,
    load_graph,
)

__all__ = [
    "DATA_MOVEMENT_OPS",
    "SIGNATURE_VERSION",
    "Edge",
    "Op",
    "OpGraph",
    "Signature",
    "TensorInfo",
    "TensorSpec",
    "build_graph",
    "is_folded",
    "load_graph",
    "load_model",
    "op_flops",
    "random_inputs",
]
