"""Seeded random inputs for a model: what profiling, numerics checks and tests feed it.

>>> from placer.graph import random_inputs      # doctest: +SKIP
>>> feeds = random_inputs(model, seed=0)        # {input name: ndarray}
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper

from placer.errors import GraphError
from placer.graph import proto as P

__all__ = ["random_inputs"]


def random_inputs(
    model: onnx.ModelProto, seed: int = 0, shapes: Mapping[str, tuple[int, ...]] | None = None
) -> dict[str, np.ndarray]:
    """Seeded random arrays for the graph inputs that are not initializers.

    Floats ~ N(0, 1), integers in [0, 8), bools fair. Symbolic dims must be given in ``shapes``.
    """
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = P.tensor_type_of(vi)
        if tt is None:
            raise GraphError(f"graph input '{vi.name}' is not a tensor")
        elem_type, dims = tt
        if shapes and vi.name in shapes:
            dims = tuple(int(d) for d in shapes[vi.name])
        if not P.is_static(dims):
            raise GraphError(f"graph input '{vi.name}' has a non-static shape {dims}; pass shapes=")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
        shape = tuple(int(d) for d in dims)  # type: ignore[union-attr]
        if dtype.kind == "f":
            arr = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        elif dtype.kind == "b":
            arr = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            arr = rng.integers(0, 8, size=shape).astype(dtype)
        else:
            raise GraphError(f"graph input '{vi.name}': no random generator for dtype {dtype}")
        feeds[vi.name] = arr
    return feeds
