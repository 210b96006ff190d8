"""Size limits of models (placer.graph.limits): checked before anything large is allocated.

The memory test runs the loader in a subprocess under an address-space limit (RLIMIT_AS): a
deterministic bound, whatever the machine's speed or load.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from placer.errors import GraphError
from placer.graph import load_graph
from placer.graph.limits import DATA_PROP_MAX_ELEMENTS, MAX_MODEL_ENV, data_prop_safe

ROOT = Path(__file__).resolve().parents[2]
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _adds(w: TensorProto, n: int) -> onnx.ModelProto:
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                  [helper.make_tensor_value_info("x", w.data_type, [n])],
                  [helper.make_tensor_value_info("y", w.data_type, None)], [w])


# the loader under RLIMIT_AS: a 1-D input of 2^24 floats (64 MiB) read by Cast, Concat and a Reshape
# whose shape comes from Shape; ONNX's data propagation took 2.5 GB for it (~140 B per element)
_CHILD = textwrap.dedent("""
    import resource, sys
    cap = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    from onnx import TensorProto, helper
    from placer.graph import load_graph
    n = 1 << 24
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.INT64, name="cast"),
             helper.make_node("Concat", ["c", "c"], ["cc"], axis=0, name="concat"),
             helper.make_node("Shape", ["cc"], ["s"], name="shape"),
             helper.make_node("Reshape", ["cc", "s"], ["y"], name="reshape")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    graph = load_graph(m)
    print(graph.tensors["y"].shape)
""")


def test_long_1d_input_loads_within_a_memory_bound():
    cap = 1536 * 2**20  # imports take ~0.6 GiB of address space; the tensor itself is never allocated
    p = subprocess.run([sys.executable, "-c", _CHILD, str(cap)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                         "OMP_NUM_THREADS": "1"}, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == f"({2 * (1 << 24)},)"


def test_data_propagation_is_kept_for_ordinary_models():
    x = helper.make_tensor_value_info("x", F, [1, DATA_PROP_MAX_ELEMENTS])
    small = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [x], [helper.make_tensor_value_info(
        "y", F, None)])
    assert data_prop_safe(small)
    x = helper.make_tensor_value_info("x", F, [2, DATA_PROP_MAX_ELEMENTS])  # a long 1-D tensor inside
    s = helper.make_node("Constant", [], ["s"], value=helper.make_tensor("s", I64, [1], [-1]), name="s")
    flat = _model([s, helper.make_node("Reshape", ["x", "s"], ["y"], name="flat")], [x],
                  [helper.make_tensor_value_info("y", F, None)])
    assert not data_prop_safe(flat)
    g = load_graph(flat)
    assert g.tensors["y"].shape == (2 * DATA_PROP_MAX_ELEMENTS,)


def _raw(name: str, dims, data: bytes, elem=F) -> TensorProto:
    t = TensorProto()
    t.name, t.data_type, t.raw_data = name, elem, data
    t.dims.extend(dims)
    return t


def _typed(name: str, elem: int, dims, **fields) -> TensorProto:
    t = TensorProto()
    t.name, t.data_type = name, elem
    t.dims.extend(dims)
    for k, v in fields.items():
        getattr(t, k).extend(v)
    return t


@pytest.mark.parametrize("tensor, expect", [
    (_raw("w", [2**29], bytes(16)),
     r"initializer 'w' declares shape \[536870912\].*2048.0 MiB.*holds 16 bytes"),
    (_raw("w", [3], bytes(16)), r"initializer 'w'.*holds 16 bytes \(expected 12\)"),
    (_typed("w", I64, [5], int64_data=[1, 2]), r"initializer 'w'.*holds 2 entries of int64_data"),
    (_raw("w", [2**30, 2**30], bytes(4)), r"initializer 'w' declares shape .* elements, more than"),
    # an element type ONNX does not define (naming it for the message raised a bare ValueError)
    (_raw("w", [1], bytes(4), elem=999), r"initializer 'w' declares shape \[1\] \(unknown element type 999"),
])
def test_tensor_declaring_more_than_it_holds_is_refused_by_name(tensor, expect):
    with pytest.raises(GraphError, match=expect):
        load_graph(_adds(tensor, 4))


def test_constant_value_declaring_more_than_it_holds_is_refused_by_name():
    c = helper.make_node("Constant", [], ["w"], name="k")
    c.attribute.append(helper.make_attribute("value", _raw("", [4096, 4096], bytes(16))))
    m = _model([c, helper.make_node("Add", ["x", "w"], ["y"], name="add")],
               [helper.make_tensor_value_info("x", F, [4096, 4096])],
               [helper.make_tensor_value_info("y", F, None)])
    with pytest.raises(GraphError, match=r"node 'k' \(Constant\) declares shape \[4096, 4096\]"):
        load_graph(m)


def _external(tmp_path: Path, n: int = 64) -> Path:
    m = _adds(numpy_helper.from_array(np.arange(n, dtype=np.float32), "w"), n)
    f = tmp_path / "m.onnx"
    onnx.save(m, str(f), save_as_external_data=True, location="w.bin", size_threshold=0)
    return f


def _edit_external(f: Path, key: str, value: str) -> None:
    m = onnx.load(str(f), load_external_data=False)
    entries = {e.key: e for e in m.graph.initializer[0].external_data}
    if key in entries:
        entries[key].value = value
    else:
        m.graph.initializer[0].external_data.add(key=key, value=value)
    onnx.save(m, str(f))


@pytest.mark.parametrize("key, value, expect", [
    ("length", str(2**31), r"'w': bytes 0\.\.2147483648 of w\.bin requested, the file has 256"),
    ("offset", "255", r"'w': bytes 255\.\.511"),
    ("location", "../w.bin", r"'w': its external file '\.\./w\.bin' is outside the model's folder"),
    ("length", "128", r"'w' declares shape \[64\] \(256 bytes\) but its external data holds 128 bytes"),
])
def test_external_data_is_checked_before_it_is_read(tmp_path, key, value, expect):
    f = _external(tmp_path)
    assert load_graph(f).op("add").weight_bytes == 256
    _edit_external(f, key, value)
    with pytest.raises(GraphError, match=expect):
        load_graph(f)


def test_model_size_limit_and_its_override(tmp_path, monkeypatch):
    f = _external(tmp_path, 1 << 16)  # 256 KiB of external data
    monkeypatch.setenv(MAX_MODEL_ENV, "0.125")
    with pytest.raises(GraphError, match=r"m\.onnx: the model with its external data is 0\.25\d* MiB, "
                                         r"over the limit of 0\.125 MiB \(\$PLACER_MAX_MODEL_MB raises it\)"):
        load_graph(f)
    monkeypatch.setenv(MAX_MODEL_ENV, "0.0001")
    with pytest.raises(GraphError, match=r"m\.onnx: the model file is .* over the limit"):
        load_graph(f)
    monkeypatch.setenv(MAX_MODEL_ENV, "1")
    assert load_graph(f).op("add").weight_bytes == 4 << 16


@pytest.mark.parametrize("location, expect", [
    ("w\x00.bin", r"its external file 'w\\x00\.bin' cannot be resolved \(ValueError"),
    ("loop", r"its external file 'loop' cannot be resolved \(RuntimeError: Symlink loop"),
])
def test_an_external_file_name_that_cannot_be_resolved_is_named(tmp_path, location, expect):
    f = _external(tmp_path)
    (tmp_path / "loop").symlink_to("loop")
    _edit_external(f, "location", location)
    with pytest.raises(GraphError, match=expect):
        load_graph(f)


@pytest.mark.parametrize("bound_by", ["inference", "the fill"])
def test_a_tiny_model_that_folds_into_gibibytes_is_left_unfolded(bound_by):
    """ConstantOfShape of [2**29] floats (2 GiB) from a 200-byte file: folding allocated it (and copied
    it into protobuf) while loading; past what one protobuf message holds (the folding budget) it stays
    an op for a runtime to fill. Measured with tracemalloc (numpy reports its buffers there):
    deterministic, whatever the load."""
    import tracemalloc

    n = 2**29
    shape = numpy_helper.from_array(np.array([n], np.int64), "s")
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill"),
             helper.make_node("ReduceSum", ["c"], ["r"], name="sum", keepdims=1),
             helper.make_node("Add", ["x", "r"], ["y"], name="add")]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [1])], [helper.make_tensor_value_info("y", F, None)],
               [shape])
    if bound_by == "the fill":  # the shape as a graph computes it: no inferred size before the fill
        m.graph.initializer.pop()
        m.graph.node.insert(0, helper.make_node("Constant", [], ["s"], name="k",
                                                value=numpy_helper.from_array(np.array([n], np.int64))))
    tracemalloc.start()
    try:
        g = load_graph(m)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak
    assert "fill" in {op.id for op in g.ops} and g.tensors["c"].shape == (n,)


def test_external_data_past_protobuf_s_2_gib_is_refused_before_it_is_read(tmp_path):
    """Within the 4 GiB model limit but past what one protobuf message holds: placer keeps the weights
    inline, so the model could not be hashed or cut later; refused from the headers (the data file is
    sparse: nothing is read)."""
    n = 3 * 2**28  # 3 GiB of float32
    w = TensorProto()
    w.name, w.data_type, w.data_location = "w", F, TensorProto.EXTERNAL
    w.dims.extend([n])
    for k, v in (("location", "w.bin"), ("offset", "0"), ("length", str(4 * n))):
        w.external_data.add(key=k, value=v)
    m = _adds(w, n)
    with open(tmp_path / "w.bin", "wb") as f:
        f.truncate(4 * n)
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(GraphError, match=r"3072 MiB; .* protobuf limits to 2 GiB"):
        load_graph(tmp_path / "m.onnx")
