"""Cut cost: what cutting a model into more partitions costs on one runtime, folded into the links.

The cross-runtime hand-off (``measure_link_points``) cancels each runtime's own layout conversions
by construction; a plan cut into partitions pays them at every boundary. They are measured on a
conv chain timed whole and cut per conv, fitted per byte, and every boundary a target takes part
in carries half of its cut cost (``ProfileStore.link_model``).
"""

from __future__ import annotations

import math

import pytest

from placer.devices import make_target
from placer.profile.links import fit_cut_points, measure_cut_points
from placer.profile import ProfileStore


def test_fit_is_the_per_byte_slope_beyond_the_call_overhead():
    pts = [{"nbytes": 1000, "per_boundary_ms": 0.01 + 1000 * 2e-6},
           {"nbytes": 4000, "per_boundary_ms": 0.01 + 4000 * 2e-6}]
    assert fit_cut_points(pts, overhead_ms=0.01) == pytest.approx(2e-6)
    # a runtime that loses nothing at a cut: never a negative price
    assert fit_cut_points([{"nbytes": 1000, "per_boundary_ms": 0.001}], overhead_ms=0.01) == 0.0
    assert fit_cut_points([]) == 0.0


def test_measured_on_a_real_runtime():
    pts = measure_cut_points(make_target("onnxruntime"), shapes=((8, 16),), layers=3, rounds_s=0.02)
    (p,) = pts
    assert p["nbytes"] == 8 * 16 * 16 * 4 and p["rounds"] >= 7
    assert p["whole_ms"] > 0 and p["cut_ms"] > 0
    assert p["per_boundary_ms"] == pytest.approx((p["cut_ms"] - p["whole_ms"]) / 2)
    assert math.isfinite(fit_cut_points(pts)) and fit_cut_points(pts) >= 0


def test_the_store_folds_half_of_each_sides_cut_cost_into_a_boundary(tmp_path):
    a, b = make_target("onnxruntime"), make_target("openvino")
    with ProfileStore(tmp_path / "p.db") as st:
        for t in (a, b):
            st.register_target(t)
        st.put_link(a, b, 0.01, 1e-9, [])
        st.put_link(b, a, 0.02, 0.0, [])
        lm = st.link_model([a, b])
        assert lm.fit(a, b).ms_per_byte == pytest.approx(1e-9)  # no cut rows yet: the hand-off alone
        st.put_link(a, a, 0.0, 4e-7, [], {"kind": "cut"})
        st.put_link(b, b, 0.0, 2e-7, [], {"kind": "cut"})
        lm = st.link_model([a, b])
    assert set(lm.fits) == {(a.name, b.name), (b.name, a.name)}  # a cut is no link of its own
    assert lm.fit(a, b).ms_per_byte == pytest.approx(1e-9 + 3e-7)
    assert lm.fit(b, a).ms_per_byte == pytest.approx(3e-7)
    assert lm.fit(a, b).meta["cut_ms_per_byte"] == pytest.approx(3e-7)
    assert lm.transfer_ms(1e6, a, b) == pytest.approx(0.01 + 1e6 * (1e-9 + 3e-7))


def test_a_link_side_whose_target_refuses_relu_runs_the_next_link_op(monkeypatch):
    """Each side of a timed link runs one element-wise op; a target that refuses Relu (here the test
    target that fails to compile it) runs the next of LINK_OPS: every link of such a target failed,
    and its whole campaign with them. A target that runs none of them gives the first op's error."""
    from placer.devices.testing import FAULT_ENV, register_test_targets
    from placer.errors import TargetError
    from placer.profile.links import LINK_OPS, measure_link_points

    register_test_targets()
    monkeypatch.setenv(FAULT_ENV, "Relu")
    src, dst = make_target("test-error"), make_target("onnxruntime")
    for a, b in ((src, dst), (dst, src)):
        points = measure_link_points(a, b, sizes=[4096], rounds_s=0.01, min_rounds=3, max_rounds=5)
        assert len(points) == 1 and points[0]["nbytes"] == 4096 and points[0]["chain_ms"] > 0
    assert LINK_OPS[0] == "Relu"
    with pytest.raises(TargetError, match="Relu"):  # none runs: the first op's refusal is raised
        measure_link_points(src, dst, sizes=[4096], rounds_s=0.01, min_rounds=3, max_rounds=5, ops=("Relu",))


def test_a_target_that_kills_its_worker_on_relu_gets_its_links_from_the_next_op(tmp_path, monkeypatch):
    """A segfault is no exception the side can catch: the worker died, the link was a problem, and
    profile_links (which every plan over two real targets runs) failed on every run. The campaign now
    asks a fresh worker for the link with the next of LINK_OPS."""
    from placer.devices.testing import FAULT_ENV, register_test_targets
    from placer.profile.campaign import profile_links

    register_test_targets()
    monkeypatch.setenv(FAULT_ENV, "Relu")
    model = profile_links(["onnxruntime", "test-crash"], tmp_path / "l.db", sizes=[1024, 4096], progress=False)
    for pair in (("onnxruntime@cpu:t1", "test-crash@cpu:t1"), ("test-crash@cpu:t1", "onnxruntime@cpu:t1")):
        fit = model.fit(*pair)
        assert fit is not None and fit.latency_ms >= 0 and len(fit.points) == 2
