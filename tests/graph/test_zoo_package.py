"""placer.zoo is a package (registry in ``__init__``, models in its modules); the old module names
and the names imported from ``placer.zoo`` keep working."""

from __future__ import annotations

import importlib

import pytest

from placer import zoo
from placer.errors import GraphError


def test_old_module_names_are_the_moved_modules():
    from placer.zoo import hf_models, torch_models

    assert importlib.import_module("placer.zoo_torch") is torch_models
    assert importlib.import_module("placer.zoo_hf") is hf_models
    from placer.zoo_torch import TORCH_MODELS, cache_dir, export_cached  # noqa: F401

    assert TORCH_MODELS is zoo.TORCH_MODELS


def test_the_package_reexports_its_modules_public_names():
    from placer.zoo import builders, light

    for name in light.__all__:
        assert getattr(zoo, name) is getattr(light, name)
    for name in builders.__all__:
        assert getattr(zoo, name) is getattr(builders, name)
    assert set(zoo.__all__) <= set(dir(zoo))
    tiny = zoo.resolve("zoo:tiny")
    assert [n.op_type for n in tiny.graph.node][:2] == ["Conv", "Relu"]
    assert zoo.load_graph("zoo:tiny").source == "zoo:tiny"
    with pytest.raises(GraphError, match="unknown zoo model 'zoo:nope'; available: zoo:tiny"):
        zoo.resolve("zoo:nope")
