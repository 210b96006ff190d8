"""The one place placer touches TVM's private API (checked against :data:`CHECKED_WITH`).

Which ONNX op types the Relax ONNX importer can convert is known only to its private converter
table (``tvm.relax.frontend.onnx.onnx_frontend._get_convert_map``); the public ``from_onnx`` only
fails on a model holding another one. placer needs the list up front: ``supports()`` answers
statically, and a partition TVM cannot import is refused with the op types named before any
compilation. ``tests/materialize/test_tvm_shim.py`` fails when the installed TVM is not
:data:`CHECKED_WITH` (re-check this module, then update it) or when the table is gone.
"""

from __future__ import annotations

import functools

__all__ = ["CHECKED_WITH", "onnx_converter_ops"]

#: the TVM version this module was checked against (pyproject.toml pins it)
CHECKED_WITH = "0.27.0.post1"


@functools.lru_cache(maxsize=1)
def onnx_converter_ops() -> frozenset[str]:
    """ONNX op types (default domain) the Relax ONNX frontend has a converter for."""
    # imported here, not at the top: TVM takes seconds to import, and only TVM targets need it
    from tvm.relax.frontend.onnx import onnx_frontend

    return frozenset(onnx_frontend._get_convert_map())
