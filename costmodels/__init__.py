"""Cost models of placer: what an op, a partition and a transfer cost on each target.

>>> from costmodels import CostModel, fit_store          # doctest: +SKIP
>>> cm = fit_store("profiles.db", "model_dir")            # fit on a profile store and save
>>> cm = CostModel.load("model_dir")                      # verified load (hashes, type allowlist)
>>> cm.predict_ops(graph, ["onnxruntime@cpu:t1", "openvino@cpu:t1"])   # [n_ops, n_targets] net ms

Modules: :mod:`~costmodels.features` (signature -> features), :mod:`~costmodels.op_model`
(per-target regressor), :mod:`~costmodels.roofline`, :mod:`~costmodels.transfer`,
:mod:`~costmodels.partition` (fusion correction), :mod:`~costmodels.cost_model` (the facade),
:mod:`~costmodels.train`, :mod:`~costmodels.tuning` (Optuna), :mod:`~costmodels.persistence`
(skops + JSON + model card), :mod:`~costmodels.store` (profile store -> training rows),
:mod:`~costmodels.sampler` (op variants to profile), :mod:`~costmodels.evaluate`
(leave-one-model-out).
"""

from costmodels.cost_model import CostModel
from costmodels.data import TrainingData
from costmodels.errors import ArtifactIntegrityError, CostModelError
from costmodels.op_model import OpLatencyModel
from costmodels.partition import PartitionCorrection
from costmodels.roofline import RooflineModel
from costmodels.train import fit_cost_model, fit_store
from costmodels.transfer import TransferModel

__all__ = [
    "CostModel", "TrainingData", "CostModelError", "ArtifactIntegrityError", "OpLatencyModel",
    "PartitionCorrection", "RooflineModel", "TransferModel", "fit_cost_model", "fit_store",
]
