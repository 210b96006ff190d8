"""Measurement keys and the signature rows stored beside them.

* op: ``Op.signature.hash`` (two ops with one signature cost the same);
* segment: ``seg:`` + hash of the member signature hashes (in graph topological order) and the
  internal wiring: for every input slot of every member, whether it reads another member's output
  (position, output slot), a segment input (its index among the segment's inputs) or a constant;
  plus which member outputs leave the segment. Two op sets with the same key compile to the same
  sub-model up to weight values and tensor names, so they cost the same;
* whole model: ``model:<model_hash>``;
* a partition timed as it runs in a plan (:mod:`placer.run.partition_probe`):
  ``part:<model_hash>:`` + hash of its op ids and the target that ran just before it;
* call overhead: :data:`OVERHEAD_KEY`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

from placer.errors import ProfileError

#: key of a target's fixed call cost (the 1-element Add of :func:`overhead_model`)
OVERHEAD_KEY = "overhead:add1"


def _h(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


def op_key(op) -> str:
    return op.signature.hash


def model_key(graph) -> str:
    return f"model:{graph.model_hash}"


def _ordered(graph, op_ids: Iterable[str]) -> list:
    ids = list(dict.fromkeys(op_ids))
    if not ids:
        raise ProfileError("a segment needs at least one op")
    try:
        ops = [graph.op(i) for i in ids]
    except (KeyError, Exception) as exc:  # the graph raises GraphError/KeyError for unknown ids
        raise ProfileError(f"segment of {graph.name!r}: {exc}") from None
    return sorted(ops, key=lambda o: o.index)


def segment_structure(graph, op_ids: Iterable[str]) -> dict:
    """The canonical, name-free description of an op set that the segment key hashes."""
    ops = _ordered(graph, op_ids)
    pos = {op.id: i for i, op in enumerate(ops)}
    produced: dict[str, tuple[int, int]] = {}
    for i, op in enumerate(ops):
        for k, t in enumerate(op.outputs):
            if t:
                produced[t] = (i, k)
    ext: dict[str, int] = {}
    wiring = []
    for i, op in enumerate(ops):
        slots = []
        for t in tuple(op.inputs) + tuple(getattr(op, "implicit_inputs", ())):
            if not t:
                slots.append(["none"])
            elif t in produced:
                slots.append(["int", *produced[t]])
            elif graph.tensors[t].is_constant:
                slots.append(["const"])
            else:
                if t not in ext:
                    ext[t] = len(ext)
                slots.append(["ext", ext[t]])
        wiring.append(slots)
    model_outputs = set(graph.outputs)
    exposed = []
    for i, op in enumerate(ops):
        for k, t in enumerate(op.outputs):
            if not t:
                continue
            outside = any(c not in pos for c in graph.consumers.get(t, ())) or t in model_outputs
            if outside:
                exposed.append([i, k])
    return {"sigs": [op.signature.hash for op in ops], "wiring": wiring, "exposed": exposed}


def partition_prefix(graph) -> str:
    """Prefix of the keys of every partition of ``graph`` timed in context (:func:`partition_key`)."""
    return f"part:{graph.model_hash}:"


def partition_key(graph, op_ids: Iterable[str], prev_target: str | None) -> str:
    """Key of a partition of ``graph`` timed in a running plan right after ``prev_target`` ran
    (None: the plan's first partition). Stored per (key, target) like every measurement."""
    return partition_prefix(graph) + _h({"ops": sorted(op_ids), "prev": prev_target})


def segment_key(graph, op_ids: Iterable[str]) -> str:
    """Key of an op set profiled as one unit (see the module doc)."""
    return "seg:" + _h(segment_structure(graph, op_ids))


def op_signature_row(op) -> dict:
    sig = op.signature.to_dict()
    return {
        "key": op.signature.hash,
        "kind": "op",
        "op_type": op.op_type,
        "signature": sig,
        "flops": float(op.flops or 0),
        "bytes": float((op.bytes_in or 0) + (op.bytes_out or 0)),
        "weight_bytes": float(op.weight_bytes or 0),
    }


def segment_signature_row(graph, op_ids: Sequence[str], key: str | None = None) -> dict:
    ops = _ordered(graph, op_ids)
    struct = segment_structure(graph, [o.id for o in ops])
    ins, outs = graph.subgraph_io([o.id for o in ops])
    io_bytes = sum(graph.tensors[t].nbytes for t in list(ins) + list(outs) if t in graph.tensors)
    return {
        "key": key or "seg:" + _h(struct),
        "kind": "segment",
        "op_type": "+".join(o.op_type for o in ops) if len(ops) <= 8 else f"segment[{len(ops)}]",
        "signature": {
            **struct,
            "op_types": [o.op_type for o in ops],
            "signatures": [o.signature.to_dict() for o in ops],
            "n_ops": len(ops),
            "io_bytes": io_bytes,
            "example": {"model": graph.name, "op_ids": [o.id for o in ops]},
        },
        "flops": float(sum(o.flops or 0 for o in ops)),
        "bytes": float(io_bytes),
        "weight_bytes": float(sum(o.weight_bytes or 0 for o in ops)),
    }


def model_signature_row(graph) -> dict:
    ops = graph.ops
    return {
        "key": model_key(graph),
        "kind": "model",
        "op_type": "model",
        "signature": {
            "name": graph.name,
            "model_hash": graph.model_hash,
            "n_ops": len(ops),
            "op_type_counts": dict(graph.op_type_counts()) if hasattr(graph, "op_type_counts") else {},
            "inputs": {t: list(graph.tensors[t].shape) for t in graph.inputs if t in graph.tensors},
        },
        "flops": float(sum(o.flops or 0 for o in ops)),
        "bytes": float(sum(graph.tensors[t].nbytes for t in list(graph.inputs) + list(graph.outputs) if t in graph.tensors)),
        "weight_bytes": float(sum(o.weight_bytes or 0 for o in ops)),
    }


def overhead_signature_row() -> dict:
    return {
        "key": OVERHEAD_KEY,
        "kind": "overhead",
        "op_type": "Add",
        "signature": {"op_type": "Add", "inputs": [[[1], "float32"], [[1], "float32"]], "note": "fixed call cost"},
        "flops": 1.0,
        "bytes": 12.0,
        "weight_bytes": 4.0,
    }


def overhead_model():
    """A 1-element ``y = x + c`` model: timing it gives a target's fixed call cost."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    c = numpy_helper.from_array(np.ones([1], np.float32), "c")
    g = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"], name="overhead_add")], "overhead", [x], [y], [c])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def chain_segments(graph, max_len: int = 3, min_len: int = 2) -> list[list[str]]:
    """Connected windows of consecutive ops (topological order), length ``min_len..max_len``.

    A window qualifies when every op after the first reads an output of an earlier op of the
    window (a chain or a small fused group, the runs a runtime would fuse). Deduplicate by
    :func:`segment_key` before profiling.
    """
    ops = graph.ops
    out = []
    for i in range(len(ops)):
        for L in range(min_len, max_len + 1):
            win = ops[i : i + L]
            if len(win) < L:
                break
            produced = set()
            ok = True
            for j, op in enumerate(win):
                if j and not any(t in produced for t in op.inputs):
                    ok = False
                    break
                produced.update(t for t in op.outputs if t)
            if not ok:
                break
            out.append([o.id for o in win])
    return out
