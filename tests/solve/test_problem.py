"""PlacementProblem: construction, derived structure, JSON round trip, and every error path."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from placer.errors import PlacerError, ProblemError
from placer.problem import PlacementProblem, Tensor


def small(**kw):
    args = {
        "ops": ["a", "b", "c"], "targets": ["cpu", "gpu"],
        "cost_ms": np.array([[1.0, 2.0], [4.0, 1.0], [1.0, np.inf]]),
        "tensors": [Tensor("x", None, ("a",), 100), Tensor("t0", "a", ("b", "c"), 1000),
                 Tensor("t1", "b", ("c",), 10), Tensor("y", "c", (), 4)],
        "link_latency_ms": 0.5, "link_ms_per_byte": 0.001,
    }
    args.update(kw)
    return PlacementProblem(**args)


def test_basic_structure():
    p = small()
    assert p.n_ops == 3 and p.n_targets == 2
    assert p.edges == ((0, 1), (0, 2), (1, 2))
    assert p.preds[2] == (0, 1) and p.succs[0] == (1, 2)
    assert p.tensor_producer == (-1, 0, 1, 2)
    assert p.transfer_ms("t0", "cpu", "gpu") == pytest.approx(0.5 + 1000 * 0.001)
    assert p.transfer_ms("t0", "gpu", "gpu") == 0.0
    assert p.supported.tolist() == [[True, True], [True, True], [True, False]]
    assert p.link_charge == (("both", "both"), ("both", "both"))


def test_errors_are_placer_errors():
    assert issubclass(ProblemError, PlacerError)


def test_non_topological_order_is_sorted_stably():
    p = PlacementProblem(ops=["c", "a", "b"], targets=["x"], cost_ms=[[3.0], [1.0], [2.0]],
                         tensors=[Tensor("t", "a", ("c",))], weight_bytes=[30, 10, 20])
    # Kahn's algorithm taking the smallest original index among the ready ops
    assert p.ops == ("a", "c", "b")
    assert p.cost_ms[:, 0].tolist() == [1.0, 3.0, 2.0]
    assert p.weight_bytes.tolist() == [10.0, 30.0, 20.0]


def test_json_round_trip(tmp_path):
    p = small(link_charge=[["both", "sender"], ["receiver", "both"]], memory_cap_bytes=[np.inf, 5e6],
              weight_bytes=[1, 2, 3], pinned={"c": "cpu"}, colocate=[["a", "b"]],
              partition_overhead_ms=[0.0, 0.01], provenance={"model_hash": "abc", "n": np.int64(3)})
    d = p.to_json()
    json.dumps(d)  # strict JSON-able
    assert PlacementProblem.from_json(d) == p
    path = tmp_path / "p.json"
    p.save(path)
    assert PlacementProblem.from_json(str(path)) == p
    assert json.loads(path.read_text())["version"] == 1


def test_json_cost_rows_with_null():
    d = small().to_json()
    d["cost_ms"] = [[1.0, 2.0], [4.0, 1.0], [1.0, None]]
    assert PlacementProblem.from_json(d) == small()


def test_json_scalar_links():
    d = small().to_json()
    d["links"] = {"latency_ms": 0.5, "ms_per_byte": 0.001}
    assert PlacementProblem.from_json(d) == small()


@pytest.mark.parametrize("kw, match", [
    ({"cost_ms": np.array([[1.0, -2.0], [4.0, 1.0], [1.0, np.inf]])}, r"cost of op 'a' on target 'gpu'"),
    ({"cost_ms": np.array([[1.0, 2.0], [np.nan, 1.0], [1.0, np.inf]])}, r"cost of op 'b' on target 'cpu'.*NaN"),
    ({"cost_ms": np.array([[1.0, 2.0], [np.inf, np.inf], [1.0, np.inf]])}, r"op 'b' is supported on no target"),
    ({"cost_ms": np.ones((2, 2))}, r"shape"),
    ({"tensors": [Tensor("t", "a", ("zz",))]}, r"tensor 't': unknown consumer op 'zz'"),
    ({"tensors": [Tensor("t", "zz", ("a",))]}, r"tensor 't': unknown producer op 'zz'"),
    ({"tensors": [Tensor("t", "a", ("b",)), Tensor("u", "b", ("c",)), Tensor("w", "c", ("a",))]},
     r"cycle among ops: 'a' -> 'b' -> 'c' -> 'a'"),
    ({"tensors": [Tensor("t", "a", ("a",))]}, r"cycle: op 'a' consumes its own tensor"),
    ({"tensors": [Tensor("t", "a", ("b",)), Tensor("t", "b", ("c",))]}, r"duplicate tensor name 't'"),
    ({"tensors": [Tensor("t", "a", ("b",), -1)]}, r"negative nbytes"),
    ({"ops": ["a", "a", "c"]}, r"duplicate op name 'a'"),
    ({"pinned": {"c": "gpu"}}, r"op 'c' is pinned to target 'gpu', which does not support it"),
    ({"pinned": {"c": "tpu"}}, r"unknown target 'tpu'"),
    ({"pinned": {"zz": "cpu"}}, r"pinned: unknown op 'zz'"),
    ({"colocate": [["b", "zz"]]}, r"colocate: unknown op 'zz'"),
    ({"colocate": [["a", "c"]], "pinned": {"a": "gpu"}}, r"pinned to 'gpu', which does not support all"),
    ({"cost_ms": np.array([[1.0, np.inf], [4.0, 1.0], [np.inf, 1.0]]), "colocate": [["a", "c"]]},
     r"colocation group \['a', 'c'\] has no target supporting all its ops"),
    ({"weight_bytes": [5, 5, 5], "memory_cap_bytes": [4, 6]}, r"infeasible memory: ops need 15 weight bytes"),
    ({"weight_bytes": [1, 1, 9], "memory_cap_bytes": [8, 100]}, r"infeasible memory: op 'c' needs 9"),
    ({"weight_bytes": [1, 1, 1], "memory_cap_bytes": [-1, 10]}, r"memory cap of target 'cpu'"),
    ({"link_latency_ms": -1.0}, r"link_latency_ms\['cpu' -> 'gpu'\]"),
    ({"link_ms_per_byte": [[0, np.nan], [0, 0]]}, r"link_ms_per_byte\['cpu' -> 'gpu'\]"),
    ({"link_charge": "nobody"}, r"link_charge\['cpu' -> 'cpu'\] = 'nobody'"),
    ({"targets": []}, r"no targets"),
])
def test_construction_errors(kw, match):
    with pytest.raises(ProblemError, match=match):
        small(**kw)


def bad_json(**changes):
    d = small().to_json()
    for key, val in changes.items():
        d[key] = val
    return d


@pytest.mark.parametrize("data, match", [
    (bad_json(cost_ms={"a": {"cpu": -1.0}, "b": {"cpu": 1.0}, "c": {"cpu": 1.0}}),
     r"^problem JSON: cost_ms\['a'\]\['cpu'\]: -1\.0 is less than the minimum of 0$"),
    (bad_json(cost_ms={"a": {"cpu": math.nan}, "b": {"cpu": 1.0}, "c": {"cpu": 1.0}}), r"NaN"),
    (bad_json(cost_ms={"a": {"cpu": "fast"}}), r"cost_ms\['a'\]\['cpu'\] = 'fast' is not a number"),
    (bad_json(cost_ms={"zz": {"cpu": 1.0}}), r"cost_ms names unknown op 'zz'"),
    (bad_json(cost_ms={"a": {"tpu": 1.0}}), r"unknown target 'tpu'"),
    (bad_json(tensors=[{"name": "t", "producer": "a", "consumers": ["zz"]}]), r"unknown consumer op 'zz'"),
    (bad_json(tensors=[{"name": "t", "producer": "a", "consumers": ["b"]},
                       {"name": "u", "producer": "b", "consumers": ["a"]}]), r"cycle among ops"),
    (bad_json(weight_bytes={"a": 10, "b": 10, "c": 10}, memory_cap_bytes={"cpu": 5, "gpu": 5}),
     r"infeasible memory"),
    (bad_json(tensors=[{"name": "t", "producer": "a", "consumer": ["b"]}]), r"unknown keys \['consumer'\]"),
    (bad_json(colour="red"), r"unknown keys \['colour'\]"),
    (bad_json(version=2), r"unsupported version 2"),
    ({"ops": ["a"]}, r"missing required key 'targets'"),
    ([1, 2], r"expected a JSON object"),
])
def test_json_errors(data, match):
    with pytest.raises(ProblemError, match=match):
        _from_any(data)


def _from_any(data):
    if isinstance(data, dict):
        return PlacementProblem.from_json(data)
    # a JSON file holding a non-object
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(data, f)
    return PlacementProblem.from_json(f.name)


def test_json_file_errors(tmp_path):
    with pytest.raises(ProblemError, match="cannot read"):
        PlacementProblem.from_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProblemError, match="invalid JSON"):
        PlacementProblem.from_json(bad)


def test_allowed_combines_pins_groups_and_memory():
    p = small(colocate=[["a", "b"]], pinned={"c": "cpu"}, weight_bytes=[3, 3, 0], memory_cap_bytes=[100, 5])
    # group {a, b} weighs 6 > gpu cap 5: only cpu
    assert p.allowed.tolist() == [[True, False], [True, False], [True, False]]
    assert p.units == ((0, 1), (2,))
