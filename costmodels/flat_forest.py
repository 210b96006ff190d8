"""Tree ensembles as a few flat arrays: how an op model predicts and what its saved file holds.

scikit-learn's gradient boosting keeps one ``DecisionTreeRegressor`` object per stage; saved with
skops, an op model's three 200-tree regressors took 600 objects, a 20 MB schema and about 2 s to
write and 2.4 s to read back (the `placer tune` of an 8-op model spent a quarter of its time
there). :func:`flatten` turns the fitted regressors into one forest of arrays (every node of every
tree, children as indices into the same arrays) whose prediction is theirs to rounding:

    prediction = constant + sum over trees of weight[tree] * value[leaf the row reaches in tree]

gradient boosting gives each tree the weight ``learning_rate`` and the constant its initial
estimate, a random forest ``1 / n_trees`` and 0; several regressors averaged (an op model's seeds)
weigh each tree by ``1 / n_regressors`` more and average their constants. Rows are routed as the
trees route them: features cast to float32, ``x <= threshold`` goes left, a missing value where
the node sends it. A leaf is its own child, so every row takes ``depth`` steps.

Examples
--------
>>> from sklearn.ensemble import GradientBoostingRegressor
>>> X = np.random.default_rng(0).normal(size=(200, 3)); y = X[:, 0] ** 2 + X[:, 1]
>>> reg = GradientBoostingRegressor(n_estimators=30, random_state=0).fit(X, y)
>>> forest = flatten([reg])
>>> bool(np.allclose(predict(forest, X), reg.predict(X), rtol=0, atol=1e-12))
True
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor

#: rows routed at once (a rows x trees index array per step)
CHUNK_ROWS = 2048


def _ensemble(reg: Any) -> tuple[float, float, list] | None:
    """``(constant, weight of each tree, trees)`` of a fitted tree ensemble, None for another kind."""
    if isinstance(reg, GradientBoostingRegressor):
        if reg.init_ == "zero":
            constant = 0.0
        else:  # a fitted constant estimator (the mean, or the median for Huber loss)
            constant = float(np.ravel(reg.init_.predict(np.zeros((1, reg.n_features_in_))))[0])
        return constant, float(reg.learning_rate), [est.tree_ for est in reg.estimators_[:, 0]]
    if isinstance(reg, RandomForestRegressor):
        return 0.0, 1.0 / len(reg.estimators_), [est.tree_ for est in reg.estimators_]
    return None


def flatten(regressors: Sequence[Any]) -> dict[str, Any] | None:
    """The average of fitted single-output tree-ensemble ``regressors`` as one flat forest (a dict of
    arrays and numbers, which skops saves as they are); None when one of them is not a tree ensemble."""
    parts = [_ensemble(r) for r in regressors]
    if not parts or any(p is None for p in parts):
        return None
    left, right, feature, threshold, value, missing_left, roots, weight = [], [], [], [], [], [], [], []
    offset, depth = 0, 0
    for constant, tree_weight, trees in parts:
        for tree in trees:
            n = tree.node_count
            leaf = tree.children_left < 0
            own = np.arange(offset, offset + n)
            left.append(np.where(leaf, own, tree.children_left + offset))
            right.append(np.where(leaf, own, tree.children_right + offset))
            feature.append(np.where(leaf, 0, tree.feature))
            threshold.append(np.where(leaf, 0.0, tree.threshold))
            value.append(tree.value.reshape(n, -1)[:, 0])
            mgl = tree.missing_go_to_left if hasattr(tree, "missing_go_to_left") else np.zeros(n, np.uint8)
            missing_left.append(np.asarray(mgl, dtype=bool))
            roots.append(offset)
            weight.append(tree_weight / len(parts))
            depth = max(depth, int(tree.max_depth))
            offset += n
    return {
        "constant": float(np.mean([p[0] for p in parts])),
        "depth": depth,
        "left": np.concatenate(left).astype(np.int64), "right": np.concatenate(right).astype(np.int64),
        "feature": np.concatenate(feature).astype(np.int64),
        "threshold": np.concatenate(threshold).astype(np.float64),
        "value": np.concatenate(value).astype(np.float64),
        "missing_left": np.concatenate(missing_left),
        "roots": np.asarray(roots, dtype=np.int64), "weight": np.asarray(weight, dtype=np.float64),
    }


def predict(forest: dict[str, Any], X: Any) -> np.ndarray:
    """The forest's prediction for each row of ``X`` (n_rows x n_features)."""
    X = np.asarray(X, dtype=np.float32)
    out = np.empty(len(X))
    left, right, feature, threshold = forest["left"], forest["right"], forest["feature"], forest["threshold"]
    if feature.size and X.ndim == 2 and int(feature.max()) >= X.shape[1]:
        raise ValueError(f"flat forest: a node splits on feature {int(feature.max())}, the rows have {X.shape[1]}")
    missing_left, roots = forest["missing_left"], forest["roots"]
    any_missing_left = bool(missing_left.any())
    for start in range(0, len(X), CHUNK_ROWS):
        x = np.ascontiguousarray(X[start:start + CHUNK_ROWS])
        row_start = (np.arange(len(x)) * x.shape[1])[:, None]  # where each row's features begin in x.ravel()
        node = np.broadcast_to(roots, (len(x), len(roots))).copy()
        for _ in range(int(forest["depth"])):
            v = x.ravel().take(row_start + feature.take(node))
            go_left = v <= threshold.take(node)
            if any_missing_left:
                go_left |= np.isnan(v) & missing_left.take(node)
            node = np.where(go_left, left.take(node), right.take(node))
        out[start:start + CHUNK_ROWS] = forest["constant"] + forest["value"].take(node) @ forest["weight"]
    return out
