"""Helpers for the placer.graph tests: ONNX Runtime sessions and exposing intermediate tensors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx
import onnxruntime as ort

_BIG_NUMEL = 1 << 20


def session(model: onnx.ModelProto | str) -> ort.InferenceSession:
    """An ORT session. Big initializers (vgg19: 575 MB) are handed over as OrtValues
    (``add_external_initializers``) instead of serializing them into the model bytes: ~2x faster."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # kind to a busy machine
    if isinstance(model, str):
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    big = [t for t in model.graph.initializer if np.prod(t.dims) >= _BIG_NUMEL and t.HasField("raw_data")]
    if not big:
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    skel = onnx.ModelProto()
    skel.ir_version = model.ir_version
    skel.opset_import.extend(model.opset_import)
    g, sg = model.graph, skel.graph
    sg.name = g.name
    sg.node.extend(g.node)
    sg.input.extend(g.input)
    sg.output.extend(g.output)
    sg.value_info.extend(g.value_info)
    big_names = {t.name for t in big}
    keep, names, values = [], [], []
    for t in g.initializer:
        if t.name not in big_names:
            sg.initializer.append(t)
            continue
        stub = sg.initializer.add()
        stub.name, stub.data_type = t.name, t.data_type
        stub.dims.extend(t.dims)
        stub.data_location = onnx.TensorProto.EXTERNAL
        stub.external_data.add(key="location", value="external.bin")
        arr = onnx.numpy_helper.to_array(t)
        value = ort.OrtValue.ortvalue_from_numpy(arr)
        keep.append((arr, value))
        names.append(t.name)
        values.append(value)
    so.add_external_initializers(names, values)
    sess = ort.InferenceSession(skel.SerializeToString(), so, providers=["CPUExecutionProvider"])
    sess._placer_keep = keep  # the arrays must outlive the session
    return sess


def run(model: onnx.ModelProto | str, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    s = session(model)
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(names, dict(feeds))))


def expose(graph, names: Iterable[str]) -> onnx.ModelProto:
    """The folded model of ``graph`` with ``names`` added as graph outputs (shapes from the graph)."""
    m = onnx.ModelProto()
    m.CopyFrom(graph.model)
    have = {o.name for o in m.graph.output}
    for t in names:
        if t not in have:
            info = graph.tensors[t]
            elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype))
            m.graph.output.append(onnx.helper.make_tensor_value_info(t, elem, list(info.shape)))
            have.add(t)
    return m
