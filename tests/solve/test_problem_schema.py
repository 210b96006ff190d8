"""The problem JSON's schema (placer/schemas/problem.schema.json): valid, the documented example and
every canonical form match it, malformed problems get one clear line, and the cheap checks of the
large containers agree with the schema itself."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from placer.errors import ProblemError
from placer.problem import SCHEMA_PATH, PlacementProblem, Tensor, problem_schema, validate_problem_json
from placer.solve.instances import random_layered

ROOT = Path(__file__).resolve().parents[2]


def doc_example() -> dict:
    """The "Tiny example" of docs/problem_json.md (its first JSON block)."""
    text = (ROOT / "docs" / "problem_json.md").read_text(encoding="utf-8")
    return json.loads(re.search(r"```json\n(.*?)```", text, re.DOTALL).group(1))


@pytest.fixture(scope="module")
def full():
    """jsonschema's validator of the whole schema, every element checked by jsonschema itself."""
    return jsonschema.Draft202012Validator(problem_schema())


def test_the_schema_is_a_valid_draft_2020_12_schema_shipped_with_the_package():
    schema = problem_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA_PATH.parent == ROOT / "placer" / "schemas"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"schemas/*.json"' in pyproject  # package data: installed with placer
    problem_schema()["properties"].clear()  # a fresh copy each time
    assert problem_schema()["properties"]


def test_the_documented_example_matches_the_schema(full):
    data = doc_example()
    assert list(full.iter_errors(data)) == []
    validate_problem_json(data)
    p = PlacementProblem.from_json(data)
    assert p.ops == ("conv", "lrn", "fc") and p.pinned == {"fc": "onnxruntime@cpu:t1"}


def test_canonical_forms_match_the_schema(full):
    p = PlacementProblem(ops=["a", "b"], targets=["x", "y"], cost_ms=np.array([[1.0, np.inf], [2.0, 3.0]]),
                         tensors=[Tensor("t", "a", ("b",), 64)], link_latency_ms=[[0, 1], [2, 0]],
                         link_charge=[["both", "sender"], ["receiver", "both"]], link_broadcast=True,
                         memory_cap_bytes=[np.inf, 1e9], weight_bytes=[3, 0], pinned={"a": "x"},
                         colocate=[["a", "b"]], partition_overhead_ms=[0.0, 0.5],
                         target_cores={"x": (0, 1), "y": None}, provenance={"model": "m", "n": np.int64(2)})
    for data in (p.to_json(), random_layered(300, 3, seed=1).to_json()):
        assert list(full.iter_errors(data)) == []
        assert PlacementProblem.from_json(data).to_json() == data


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["memory_cap_bytes"].update({"openvino@cpu1:t1": -1}),
     "memory_cap_bytes['openvino@cpu1:t1']: -1 is less than the minimum of 0"),
    (lambda d: d["cost_ms"]["lrn"].update({"openvino@cpu1:t1": "fast"}),
     "cost_ms['lrn']['openvino@cpu1:t1'] = 'fast' is not a number >= 0, null or 'inf'"),
    (lambda d: d.update(cost_ms=[[1.0, None], [2.0, -3.0], [0.3, None]]),
     "cost_ms[1][1]: -3.0 is less than the minimum of 0"),
    (lambda d: d["tensors"][2].update(nbytes=-8), "tensor 'lrn_y': tensors[2].nbytes: -8 is less than the minimum of 0"),
    (lambda d: d["tensors"][1].update(consumers="lrn"), "tensor 'conv_y': tensors[1].consumers = 'lrn' is not a list"),
    (lambda d: d["tensors"].append({"name": "x", "producer": "fc", "size": 4}),
     "tensor 'x': tensors[4]: unknown keys ['size']; valid keys are ['consumers', 'name', 'nbytes', 'producer']"),
    (lambda d: d["tensors"].append({"producer": "fc"}), "tensors[4]: missing required key 'name'"),
    (lambda d: d["links"].update(charge=[["both", "both"], ["both", "nobody"]]),
     "links.charge[1][1]: 'nobody' is not one of ['sender', 'receiver', 'both']"),
    (lambda d: d["links"].update(latency_ms=[[0, 1], [True, 0]]),
     "links.latency_ms[1][0] = True is not a number, null or 'inf'"),
    (lambda d: d["links"].update(broadcast="yes"), "links.broadcast = 'yes' is not true or false"),
    (lambda d: d["links"].update(bandwidth=1), ("links: unknown keys ['bandwidth']; valid keys are "
                                                "['broadcast', 'charge', 'latency_ms', 'ms_per_byte']")),
    (lambda d: d["targets"].append("onnxruntime@cpu:t1"), "targets: 'onnxruntime@cpu:t1' is listed more than once"),
    (lambda d: d.update(ops=[]), "ops: [] should be non-empty"),
    (lambda d: d["ops"].append(3), "ops[3] = 3 is not a string"),
    (lambda d: d.update(target_cores={"openvino@cpu1:t1": [0, -1]}),
     "target_cores['openvino@cpu1:t1'][1]: -1 is less than the minimum of 0"),
    (lambda d: d.update(colocate=[["conv", "lrn"], "fc"]), "colocate[1] = 'fc' is not a list"),
    (lambda d: d["weight_bytes"].update(fc=None), "weight_bytes['fc'] = None is not a number"),
    (lambda d: d.update(provenance=[1]), "provenance = [1] is not an object or null"),
    (lambda d: d.update(version=2), "unsupported version 2 (expected 1)"),
    (lambda d: d.pop("cost_ms"), "missing required key 'cost_ms'"),
    (lambda d: d.update(colour="red"), ("unknown keys ['colour']; valid keys are ['colocate', 'cost_ms', 'cut_scale', "
                                        "'links', 'memory_cap_bytes', 'ops', 'partition_overhead_ms', 'pinned', 'provenance', "
                                        "'target_cores', 'targets', 'tensors', 'version', 'weight_bytes']")),
    # what the schema cannot say, checked in Python with the same clarity
    (lambda d: d["cost_ms"].update(ghost={"onnxruntime@cpu:t1": 1.0}), "cost_ms names unknown op 'ghost'"),
    (lambda d: d.update(cost_ms=[[1.0, 2.0]]), "cost_ms must be 3 rows of 2 numbers (null = unsupported)"),
    (lambda d: d["memory_cap_bytes"].update(tpu=5), "memory_cap_bytes names unknown target 'tpu'"),
    (lambda d: d["tensors"].append({"name": "back", "producer": "fc", "consumers": ["conv"]}),
     "cycle among ops: 'conv' -> 'lrn' -> 'fc' -> 'conv'"),
    (lambda d: d["pinned"].update(fc="openvino@cpu1:t1"),
     "op 'fc' is pinned to target 'openvino@cpu1:t1', which does not support it"),
])
def test_malformed_problems_get_one_clear_line_naming_the_file_and_the_path(tmp_path, edit, message):
    data = doc_example()
    edit(data)
    f = tmp_path / "problem.json"
    f.write_text(json.dumps(data))
    with pytest.raises(ProblemError) as info:
        PlacementProblem.from_json(f)
    assert str(info.value) == f"{f}: {message}"
    with pytest.raises(ProblemError) as info:
        PlacementProblem.from_json(data)
    assert str(info.value) == f"problem JSON: {message}"


def test_a_json_file_that_is_not_an_object():
    with pytest.raises(ProblemError, match=r"^problem JSON: expected a JSON object, got \[1, 2\]$"):
        validate_problem_json([1, 2])


def test_an_error_deep_in_a_large_problem_is_named(tmp_path):
    data = random_layered(20_000, 4, seed=2).to_json()
    last = data["tensors"][-1]
    last["nbytes"] = -1
    with pytest.raises(ProblemError, match=rf"^problem JSON: tensor {last['name']!r}: tensors\[{len(data['tensors']) - 1}\]"
                                           r"\.nbytes: -1 is less than the minimum of 0$"):
        PlacementProblem.from_json(data)
    last["nbytes"] = 8
    op = data["ops"][-1]
    data["cost_ms"][op] = {t: None for t in data["targets"]}  # null = unsupported: valid, but nowhere
    with pytest.raises(ProblemError, match=rf"op {op!r} is supported on no target"):
        PlacementProblem.from_json(data)


# ---- the cheap checks of the large containers agree with jsonschema on the whole schema
def _locations(node, path=()):
    """Every (path, value) of a JSON document."""
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _locations(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _locations(v, (*path, i))


def _replaced(doc, path, value):
    out = copy.deepcopy(doc)
    node = out
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return out


REPLACEMENTS = [None, True, 0, -1, 1.0, 2.5, -0.5, math.nan, math.inf, 10**400, 2**62 + 1, "inf", "fast", "both", "",
                [], [0], [[0]], ["a"], {}, {"a": 1}, {"x": "y"}]


def _documents():
    ex = doc_example()
    ex["links"] = {"latency_ms": [[0, 0.02], [0.02, None]], "ms_per_byte": 2e-8,
                   "charge": [["both", "sender"], ["receiver", "both"]], "broadcast": True}
    ex["target_cores"] = {"onnxruntime@cpu:t1": [0], "openvino@cpu1:t1": None}
    ex["colocate"] = [["conv", "lrn"]]
    rows = doc_example()
    rows["cost_ms"] = [[1.2, 0.95], [2.0, "inf"], [0.3, None]]
    for base in (ex, rows):
        yield base
        for path, _ in _locations(base):
            if path:
                for value in REPLACEMENTS:
                    yield _replaced(base, path, value)
        for path, node in _locations(base):
            if isinstance(node, dict):
                yield _replaced(base, (*path, "extra"), 1) if path else {**base, "extra": 1}
            if isinstance(node, list) and path:
                yield _replaced(base, path, [*node, node[0] if node else 1])  # a duplicate


def test_the_cheap_checks_agree_with_the_whole_schema(full):
    n = 0
    for data in _documents():
        try:
            validate_problem_json(data)
            ours = None
        except ProblemError as exc:
            ours = str(exc)
        assert (ours is None) == full.is_valid(data), (ours, data)
        n += 1
    assert n > 1000
