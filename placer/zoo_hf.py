"""Moved to :mod:`placer.zoo.hf_models`: this old name is that same module (an alias in
``sys.modules``, so setting an attribute through either name, e.g. the export cache, sets it for both)."""

import sys

from placer.zoo import hf_models

sys.modules[__name__] = hf_models
