"""``--inputs FILE.npz`` is read from the .npy headers, within what the model's inputs need
(placer.run.npz_inputs). Memory is measured with tracemalloc (numpy reports its buffers there):
deterministic, whatever the machine's load."""

from __future__ import annotations

import io
import tracemalloc
import zipfile

import numpy as np
import pytest

from placer import zoo
from placer.errors import PlacerError
from placer.graph import load_graph
from placer.run.numerics import load_inputs


@pytest.fixture(scope="module")
def graph():
    return load_graph(zoo.tiny_branchy(0))  # one input 'x' of [1, 3, 8, 8] float32


def _npy(shape, data: bytes, descr: str = "<f4") -> bytes:
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    b.write(data)
    return b.getvalue()


def _npz(path, members: dict[str, bytes], compress: bool = True):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
        for k, v in members.items():
            z.writestr(k, v)
    return path


def test_a_compressed_batch_is_read_only_as_far_as_the_requests_need(graph, tmp_path):
    rows = 2**25 // 768  # 32 MiB of float32 zeros: ~33 KB compressed
    f = _npz(tmp_path / "bomb.npz", {"x.npy": _npy((rows, 1, 3, 8, 8), bytes(rows * 768)),
                                     "junk.npy": _npy((rows, 192), bytes(rows * 768))})
    assert f.stat().st_size < 2**20
    tracemalloc.start()
    try:
        reqs = load_inputs(str(f), graph, 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(reqs) == 3 and all(r["x"].shape == (1, 3, 8, 8) and not r["x"].any() for r in reqs)
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB reading 3 rows of a 32 MiB batch"


def test_rows_and_plain_arrays_round_trip(graph, tmp_path):
    x = np.random.default_rng(0).standard_normal((4, 1, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "b.npz", x=x, other=np.zeros(3))
    reqs = load_inputs(str(tmp_path / "b.npz"), graph, 4)
    assert [np.array_equal(r["x"], x[i]) for i, r in enumerate(reqs)] == [True] * 4
    assert len(load_inputs(str(tmp_path / "b.npz"), graph, 6)) == 6  # rows repeat
    np.savez_compressed(tmp_path / "one.npz", x=x[1])
    assert np.array_equal(load_inputs(str(tmp_path / "one.npz"), graph, 1)[0]["x"], x[1])
    np.savez(tmp_path / "fortran.npz", x=np.asfortranarray(x[2]))
    assert np.array_equal(load_inputs(str(tmp_path / "fortran.npz"), graph, 1)[0]["x"], x[2])


@pytest.mark.parametrize("members, expect", [
    ({"x.npy": _npy((10**10, 1, 3, 8, 8), bytes(768))}, r"'x': the archive entry holds \d+ bytes, its header "
                                                         r"declares 7680000000000 \(truncated or forged\)"),
    ({"x.npy": _npy((1, 3, 8, 8), bytes(700))}, r"'x': the array is truncated \(700 of 768 bytes\)"),
    ({"x.npy": _npy((1, 3, 8, 2**40), bytes(16))}, r"'x' has shape \[1, 3, 8, 1099511627776\]"),
    ({"x.npy": _npy((1, 3, 8, 8), bytes(768 * 2), "<f8")}, r"'x' has dtype float64, the model wants float32"),
    ({"x.npy": _npy((1, 3, 8, 8), bytes(64), "|O")}, r"'x' is an object array"),
    ({"y.npy": _npy((1, 3, 8, 8), bytes(768))}, r"no array for model input\(s\) \['x'\]"),
    ({"x.npy": b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 70000}, r"'x': not a readable \.npy array"),
])
def test_forged_members_are_refused_from_their_headers(graph, tmp_path, members, expect):
    f = _npz(tmp_path / "f.npz", members)
    with pytest.raises(PlacerError, match=r"f\.npz.*" + expect):
        load_inputs(str(f), graph, 1)


def test_a_batch_with_a_scalar_input_gives_0d_rows_and_runs(tmp_path):
    """A 0-d input's batch is a vector; each request's row of it is 0-d again (np.ascontiguousarray had
    made it shape (1,), which ONNX Runtime refuses for a scalar input)."""
    from onnx import TensorProto, helper

    from placer.graph import build_graph
    from placer.run.numerics import ReferenceRunner

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    model = helper.make_model(helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"], name="mul")],
                                                "scaled", [x, s], [y]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    g = build_graph(model)
    f = tmp_path / "batch.npz"
    np.savez(f, x=np.ones((3, 4), np.float32), s=np.arange(3, dtype=np.float32))
    reqs = load_inputs(str(f), g, 3)
    assert [r["s"].shape for r in reqs] == [(), (), ()]
    assert [float(r["s"]) for r in reqs] == [0.0, 1.0, 2.0]
    ref = ReferenceRunner(model)
    assert [float(ref.run(r)["y"][0]) for r in reqs] == [0.0, 1.0, 2.0]


def test_more_requests_than_rows_take_the_rows_in_turn(graph, tmp_path):
    f = tmp_path / "two.npz"
    np.savez(f, x=np.stack([np.full((1, 3, 8, 8), i, np.float32) for i in range(2)]))
    reqs = load_inputs(str(f), graph, 5)
    assert [float(r["x"].flat[0]) for r in reqs] == [0.0, 1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("compressed", [False, True])
def test_damaged_array_data_is_a_placer_error_naming_the_input(graph, tmp_path, compressed):
    """A flipped byte in an array's data (past what the header read buffers) surfaced as a raw
    zipfile.BadZipFile ("Bad CRC-32") or zlib error: a traceback from `placer run --inputs`."""
    rng = np.random.default_rng(0)
    arr = rng.standard_normal((4000, 1, 3, 8, 8)).astype(np.float32)  # 3 MiB: read past the header's buffer
    path = tmp_path / "x.npz"
    (np.savez_compressed if compressed else np.savez)(path, x=arr)
    raw = bytearray(path.read_bytes())
    at = len(raw) // 2
    raw[at:at + 16] = bytes(16) if compressed else bytes(b ^ 0xFF for b in raw[at:at + 16])
    path.write_bytes(bytes(raw))
    with pytest.raises(PlacerError, match=r"'x'.*(damaged|truncated|not a readable)"):
        load_inputs(str(path), graph, 4000)
