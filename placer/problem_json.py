"""The problem JSON: reading it (:func:`read_problem_json`, behind ``PlacementProblem.from_json``)
and writing it (:func:`problem_to_json`, behind ``PlacementProblem.to_json``).

The format is documented in ``docs/problem_json.md``; its JSON Schema (draft 2020-12) is
``placer/schemas/problem.schema.json`` (:func:`problem_schema`), checked first
(:func:`validate_problem_json`): the containers that grow with the problem (ops, cost rows,
tensors, ...) are checked by cheap sufficient checks, and ``jsonschema`` finds the error of an
element they do not vouch for, so a problem of 100,000 ops is read in about a second; a schema
error is one line naming the file and the JSON path. What a schema cannot say (names of ops and
targets, table shapes) is checked here too, the rest when the problem is built.

This module does not import :mod:`placer.problem` (which imports it): it returns the
constructor's keyword arguments, and ``PlacementProblem.from_json`` builds the problem.
"""

from __future__ import annotations

import functools
import json
import math
import os
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from placer.errors import ProblemError
from placer.problem_limits import LINK_CHARGES, MAX_NBYTES, check_table_sizes
from placer.safe_io import load_json

if TYPE_CHECKING:
    from placer.problem import PlacementProblem

__all__ = ["SCHEMA_PATH", "problem_schema", "problem_to_json", "read_problem_json", "validate_problem_json"]


def read_problem_json(source: str | os.PathLike | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """``(fields, where)``: the keyword arguments of ``PlacementProblem`` read from a problem JSON
    file or an already-parsed dict (``tensors`` as ``(name, producer, consumers, nbytes)`` tuples),
    and the name of the source for errors (the path, or ``problem JSON`` for a dict).

    Raises
    ------
    ProblemError
        If the file cannot be read or the content is malformed: one line naming the file and the
        JSON path of the fault, or the op / target at fault.
    """
    if isinstance(source, Mapping):
        data: Any = dict(source)
        where = "problem JSON"
    else:
        where = str(source)
        data = load_json(source, "the problem JSON", ProblemError)
    validate_problem_json(data, where)
    # what the schema cannot say: names that must be ops or targets, table shapes (the rest when
    # the problem is built: tensor endpoints, pins, groups, cores, link matrices, cycles, memory)
    ops, targets = data["ops"], data["targets"]
    op_pos = {o: i for i, o in enumerate(ops)}
    tgt_pos = {d: j for j, d in enumerate(targets)}
    cost = _cost_table(data["cost_ms"], ops, targets, op_pos, tgt_pos, where)
    tensors = [(x["name"], x.get("producer"), tuple(x.get("consumers", ())), x.get("nbytes", 0))
               for x in data.get("tensors", ())]
    weights = None
    if data.get("weight_bytes") is not None:
        weights = np.zeros(len(ops))
        for o, v in data["weight_bytes"].items():
            if o not in op_pos:
                raise ProblemError(f"{where}: weight_bytes names unknown op {o!r}")
            weights[op_pos[o]] = _to_float(v, f"weight_bytes[{o!r}]", where)
    links = data.get("links") or {}
    fields = {
        "ops": ops, "targets": targets, "cost_ms": cost, "tensors": tensors,
        "link_latency_ms": _link_numbers(links.get("latency_ms"), "links.latency_ms", where),
        "link_ms_per_byte": _link_numbers(links.get("ms_per_byte"), "links.ms_per_byte", where),
        "link_charge": links.get("charge", "both"),
        "memory_cap_bytes": _per_target(data, "memory_cap_bytes", math.inf, tgt_pos, where),
        "weight_bytes": weights, "pinned": data.get("pinned") or {},
        "colocate": [tuple(g) for g in data.get("colocate") or ()],
        "partition_overhead_ms": _per_target(data, "partition_overhead_ms", 0.0, tgt_pos, where),
        "provenance": data.get("provenance") or {}, "target_cores": data.get("target_cores") or {},
        "link_broadcast": links.get("broadcast", False),
        "cut_scale": _per_target(data, "cut_scale", 1.0, tgt_pos, where),
    }
    return fields, where


def problem_to_json(p: PlacementProblem) -> dict[str, Any]:
    """The canonical JSON form of a problem (a dict; see ``docs/problem_json.md``)."""


    def mat(a: np.ndarray) -> list[list[float]]:
        return [[float(x) for x in row] for row in a]

    out: dict[str, Any] = {
        "version": 1,
        "ops": list(p.ops),
        "targets": list(p.targets),
        "cost_ms": {o: {d: float(p.cost_ms[i, j]) for j, d in enumerate(p.targets)
                        if np.isfinite(p.cost_ms[i, j])} for i, o in enumerate(p.ops)},
        "tensors": [{"name": tt.name, "producer": tt.producer, "consumers": list(tt.consumers),
                     "nbytes": tt.nbytes} for tt in p.tensors],
        "links": {"latency_ms": mat(p.link_latency_ms), "ms_per_byte": mat(p.link_ms_per_byte),
                  "charge": [list(r) for r in p.link_charge]},
        "memory_cap_bytes": {d: float(c) for d, c in zip(p.targets, p.memory_cap_bytes)
                             if np.isfinite(c)},
        "weight_bytes": {o: float(w) for o, w in zip(p.ops, p.weight_bytes) if w},
        "pinned": dict(p.pinned),
        "colocate": [list(g) for g in p.colocate],
        "partition_overhead_ms": {d: float(x) for d, x in zip(p.targets, p.partition_overhead_ms)
                                  if x},
        "provenance": _jsonable(p.provenance),
    }
    if p.link_broadcast:  # omitted when false (the canonical form stays as before)
        out["links"]["broadcast"] = True
    if p.cut_scaled:  # omitted when every scale is 1 (the canonical form stays as before)
        out["cut_scale"] = {d: float(x) for d, x in zip(p.targets, p.cut_scale) if x != 1.0}
    if p.target_cores:  # omitted when every target is private (the canonical form stays as before)
        out["target_cores"] = {d: list(c) for d, c in p.target_cores.items()}
    return out


#: the JSON Schema of the problem JSON (draft 2020-12, docs/problem_json.md), shipped with the package
SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "problem.schema.json"
_NUMBER = (int, float)  # exact types: a bool is not a number here, as in JSON Schema
_TENSOR_KEYS = frozenset({"name", "producer", "consumers", "nbytes"})


@functools.cache
def _schema_text() -> str:
    return SCHEMA_PATH.read_text(encoding="utf-8")


def problem_schema() -> dict[str, Any]:
    """The JSON Schema of the problem JSON (a fresh copy: ``placer/schemas/problem.schema.json``)."""
    return json.loads(_schema_text())


def _costs_ok(values: Sequence[Any]) -> bool:
    """Every value is a cost of the schema (``#/$defs/cost``): a number >= 0 (NaN passes, as in the
    schema; the constructor refuses it), null or ``"inf"``."""
    types = set(map(type, values))
    if not types <= {int, float, str, type(None)}:
        return False
    if str in types and any(v != "inf" for v in values if type(v) is str):
        return False
    numbers = values if types <= {int, float} else [v for v in values if type(v) in _NUMBER]
    return not (np.array(numbers, dtype=float) < 0).any()  # an int beyond a float raises: not vouched


def _cost_map_rows_ok(rows: Sequence[Any]) -> bool:
    return set(map(type, rows)) <= {dict} and _costs_ok([v for r in rows for v in r.values()])


def _cost_list_rows_ok(rows: Sequence[Any]) -> bool:
    return set(map(type, rows)) <= {list} and _costs_ok([v for r in rows for v in r])


def _tensor_ok(x: Any) -> bool:
    """One tensor of the schema (``#/$defs/tensor``) in its usual form (an int ``nbytes``)."""
    if type(x) is not dict or not x.keys() <= _TENSOR_KEYS or type(x.get("name")) is not str:
        return False
    consumers = x.get("consumers", [])
    nbytes = x.get("nbytes", 0)
    return (type(x.get("producer")) in (str, type(None)) and type(consumers) is list
            and all(type(c) is str for c in consumers) and type(nbytes) is int and 0 <= nbytes <= MAX_NBYTES)


def _tensors_ok(tensors: Sequence[Any]) -> bool:
    if set(map(type, tensors)) - {dict}:
        return False
    if not all(x.keys() <= _TENSOR_KEYS for x in tensors):
        return False
    if {type(x.get("name")) for x in tensors} != {str}:
        return False
    if not {type(x.get("producer")) for x in tensors} <= {str, type(None)}:
        return False
    consumers = [x.get("consumers", []) for x in tensors]
    if not set(map(type, consumers)) <= {list} or not {type(c) for cs in consumers for c in cs} <= {str}:
        return False
    nbytes = [x.get("nbytes", 0) for x in tensors]
    if not set(map(type, nbytes)) <= {int}:
        return False
    return not nbytes or (min(nbytes) >= 0 and max(nbytes) <= MAX_NBYTES)


@dataclass(frozen=True)
class _Bulk:
    """A container of the problem JSON that grows with the problem (ops, cost rows, tensors, ...).

    Validating its elements one by one with ``jsonschema`` takes seconds at 100,000 ops, so the
    skeleton schema leaves out ``keyword`` (the container's per-element subschema) and
    :func:`validate_problem_json` checks the elements here: ``all_ok`` (all at once) or ``ok`` (one
    element) is a cheap *sufficient* condition of the subschema; an element they do not vouch for
    goes to ``jsonschema``, which finds its error (or none). ``unique``: the container's
    ``uniqueItems``, checked the same way.
    """

    path: tuple[str, ...]  # where the container is in a problem
    schema: str  # JSON pointer of the container's schema in problem.schema.json
    keyword: str  # "items" (a list's elements) or "additionalProperties" (an object's values)
    ok: Callable[[Any], bool]
    all_ok: Callable[[Sequence[Any]], bool] | None = None
    unique: bool = False


def _all_strings(values: Sequence[Any]) -> bool:
    return set(map(type, values)) <= {str}


def _is_string(x: Any) -> bool:
    return type(x) is str


def _link_row_ok(row: Any) -> bool:
    return type(row) is list and all(type(x) in _NUMBER or x is None or x == "inf" for x in row)


_BULK = (
    _Bulk(("ops",), "/properties/ops", "items", _is_string, _all_strings, unique=True),
    _Bulk(("targets",), "/properties/targets", "items", _is_string, _all_strings, unique=True),
    _Bulk(("cost_ms",), "/properties/cost_ms", "additionalProperties",
          lambda r: type(r) is dict and _costs_ok(list(r.values())), _cost_map_rows_ok),
    _Bulk(("cost_ms",), "/properties/cost_ms", "items", lambda r: type(r) is list and _costs_ok(r),
          _cost_list_rows_ok),
    _Bulk(("tensors",), "/properties/tensors", "items", _tensor_ok, _tensors_ok),
    _Bulk(("links", "latency_ms"), "/$defs/linkNumbers", "items", _link_row_ok),
    _Bulk(("links", "ms_per_byte"), "/$defs/linkNumbers", "items", _link_row_ok),
    _Bulk(("links", "charge"), "/properties/links/properties/charge/anyOf/1", "items",
          lambda r: type(r) is list and all(type(x) is str and x in LINK_CHARGES for x in r)),
    _Bulk(("memory_cap_bytes",), "/properties/memory_cap_bytes", "additionalProperties",
          lambda x: type(x) in _NUMBER and x >= 0 or x is None or x == "inf"),
    _Bulk(("weight_bytes",), "/properties/weight_bytes", "additionalProperties",
          lambda x: type(x) in _NUMBER and x >= 0),
    _Bulk(("pinned",), "/properties/pinned", "additionalProperties", _is_string, _all_strings),
    _Bulk(("colocate",), "/properties/colocate", "items",
          lambda g: type(g) is list and _all_strings(g)),
    _Bulk(("partition_overhead_ms",), "/properties/partition_overhead_ms", "additionalProperties",
          lambda x: type(x) in _NUMBER and x >= 0 or x is None),
    _Bulk(("cut_scale",), "/properties/cut_scale", "additionalProperties",
          lambda x: type(x) in _NUMBER and x >= 1 or x is None),
    _Bulk(("target_cores",), "/properties/target_cores", "additionalProperties",
          lambda cs: cs is None or type(cs) is list and len(cs) > 0
          and all(type(c) is int and c >= 0 for c in cs)),
)


def _pointer(schema: dict[str, Any], pointer: str) -> dict[str, Any]:
    node: Any = schema
    for part in pointer.strip("/").split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


@functools.cache
def _validators() -> tuple[Any, Any, Callable[[str], Any]]:
    """``(full, skeleton, at)``: validators of the whole schema and of its skeleton (the keywords of
    :data:`_BULK` left out), and ``at(pointer)``, a validator of the subschema at ``pointer``."""
    import jsonschema  # a fraction of a second: only what reads a problem JSON pays it
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    schema = problem_schema()
    cls = jsonschema.Draft202012Validator
    registry = Registry().with_resource(schema["$id"], DRAFT202012.create_resource(schema))
    skeleton = problem_schema()
    for bulk in _BULK:
        node = _pointer(skeleton, bulk.schema)
        node.pop(bulk.keyword, None)
        if bulk.unique:
            node.pop("uniqueItems", None)

    @functools.cache
    def at(pointer: str) -> Any:
        return cls({"$ref": f"{schema['$id']}#{pointer}"}, registry=registry)

    return cls(schema, registry=registry), cls(skeleton), at


def _first_error(validator: Any, instance: Any) -> Any:
    """The first error of ``validator`` on ``instance`` (None if valid): errors come lazily, in the
    schema's keyword order (the unknown keys of an object before its properties, then the missing ones)."""
    return next(iter(validator.iter_errors(instance)), None)


def validate_problem_json(data: Any, where: str = "problem JSON") -> None:
    """ProblemError (one line, naming ``where`` and the JSON path) unless ``data`` matches the problem
    schema (:func:`problem_schema`); also refuses, before any table is built, a problem over the size
    limits (:func:`check_table_sizes`). The cross-references the schema cannot state (names of ops and
    targets, table shapes, cycles, memory) are checked when the problem is built."""
    _, skeleton, at = _validators()
    err = _first_error(skeleton, data)
    if err is not None:
        raise _schema_error(err, where, data)
    n_tensors = len(data["tensors"]) if isinstance(data.get("tensors"), list) else 0
    try:  # before the tables are allocated (and before their elements are checked)
        check_table_sizes(len(data["ops"]), n_tensors, len(data["targets"]))
    except ProblemError as exc:
        raise ProblemError(f"{where}: {exc}") from None
    for bulk in _BULK:
        container: Any = data
        for key in bulk.path:
            container = container.get(key) if isinstance(container, Mapping) else None
        if bulk.keyword == "items" and isinstance(container, list):
            keys: Sequence[Any] = range(len(container))
            elements = container
        elif bulk.keyword == "additionalProperties" and isinstance(container, Mapping):
            keys, elements = list(container), list(container.values())
        else:
            continue
        if bulk.all_ok is None or not _holds(bulk.all_ok, elements):
            element = at(f"{bulk.schema}/{bulk.keyword}")
            for key, value in zip(keys, elements):
                if not _holds(bulk.ok, value) and (err := _first_error(element, value)) is not None:
                    raise _schema_error(err, where, data, (*[(True, k) for k in bulk.path], (False, key)))
        if bulk.unique and len(set(elements)) != len(elements):  # elements: strings, checked above
            raise _schema_error(_first_error(at(bulk.schema), container), where, data,
                                tuple((True, k) for k in bulk.path))


def _holds(check: Callable[[Any], bool], value: Any) -> bool:
    try:
        return bool(check(value))
    except (TypeError, ValueError, OverflowError):  # not vouched for: jsonschema decides
        return False


# ---- one line per schema error
_TYPE_WORDS = {"object": "an object", "array": "a list", "string": "a string", "number": "a number",
               "integer": "an integer", "boolean": "true or false", "null": "null"}


def _words(items: Sequence[str]) -> str:
    items = list(dict.fromkeys(items))
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


_REPR = reprlib.Repr()  # a value in an error: short, whatever its size
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlist = _REPR.maxdict = 4
_REPR.maxlevel = 2


def _short(value: Any) -> str:
    return _REPR.repr(value)


def _accepts(schema: Any, instance: Any) -> bool:
    """A branch of an anyOf names the type of ``instance`` (its error, if any, is the one to report)."""
    if not isinstance(schema, Mapping) or "type" not in schema:
        return False
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    kind = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(instance))
    if kind is None and isinstance(instance, _NUMBER):
        kind = "integer" if isinstance(instance, int) or float(instance).is_integer() else "number"
    return kind in types or kind == "integer" and "number" in types


def _alternative(schema: Mapping[str, Any]) -> str:
    if "const" in schema:
        return repr(schema["const"])
    types = schema.get("type", [])
    words = [_TYPE_WORDS.get(t, t) for t in (types if isinstance(types, list) else [types])]
    if "minimum" in schema and words:
        words[0] += f" >= {schema['minimum']}"
    return _words(words) if words else "valid"


def _specific(err: Any) -> Any:
    """For an anyOf / oneOf error, the error of the branch that names the instance's type, if any."""
    while err.validator in ("anyOf", "oneOf") and err.context:
        branches = err.validator_value
        inner = [e for e in err.context if _accepts(branches[e.relative_schema_path[0]], err.instance)]
        if not inner:
            break
        err = min(inner, key=lambda e: -len(e.absolute_path))  # the deepest: the precise one
    return err


def _render(err: Any, prefix: tuple[tuple[bool, Any], ...]) -> str:
    """The JSON path of ``err`` below ``prefix`` (``(is a property of the schema, key)`` pairs), as
    ``links.charge[0][1]`` or ``cost_ms['conv']['cpu']``: the properties of the schema dotted, the
    problem's own names (ops, targets) quoted, list indices in brackets."""
    parts = list(prefix)
    path = list(err.absolute_path)
    tokens = iter(err.absolute_schema_path)
    j = 0
    for tok in tokens:
        if j >= len(path):
            break
        if tok == "properties":
            next(tokens, None)
            parts.append((True, path[j]))
            j += 1
        elif tok in ("additionalProperties", "items"):
            parts.append((False, path[j]))
            j += 1
        elif tok in ("anyOf", "oneOf", "allOf"):
            next(tokens, None)
    parts += [(False, k) for k in path[j:]]
    out = ""
    for is_property, key in parts:
        if is_property:
            out += f".{key}" if out else str(key)
        else:
            out += f"[{key}]" if isinstance(key, int) else f"[{key!r}]"
    return out


def _schema_error(err: Any, where: str, data: Any, prefix: tuple[tuple[bool, Any], ...] = ()) -> ProblemError:
    """A ProblemError of one line from a jsonschema error: ``WHERE: PATH: what is wrong`` (``prefix``:
    the path of the instance ``err`` is about, when it is not the whole problem; see :func:`_render`)."""
    err = _specific(err)
    p = _render(err, prefix)
    inst, v, value = err.instance, err.validator, err.validator_value
    if v == "type":
        words = _words([_TYPE_WORDS.get(t, t) for t in (value if isinstance(value, list) else [value])])
        what = f"{p} = {_short(inst)} is not {words}" if p else f"expected a JSON object, got {_short(inst)}"
    elif v in ("anyOf", "oneOf"):
        what = f"{p} = {_short(inst)} is not {_words([_alternative(s) for s in value])}"
    elif v == "required":
        missing = next((k for k in value if k not in inst), value[0])
        what = f"{p + ': ' if p else ''}missing required key {missing!r}"
    elif v == "additionalProperties":
        known = sorted(err.schema.get("properties", {}))
        extra = sorted((k for k in inst if k not in known), key=str)
        what = f"{p + ': ' if p else ''}unknown keys {extra}; valid keys are {known}"
    elif v == "const":
        what = f"unsupported {p} {_short(inst)} (expected {value!r})"
    elif v == "uniqueItems":
        seen: set[str] = set()
        dup = next((x for x in map(repr, inst) if x in seen or seen.add(x)), "?")
        what = f"{p}: {dup} is listed more than once"
    elif v in ("maximum", "exclusiveMaximum"):
        what = f"{p}: {err.message} (out of range)"
    else:
        what = f"{p}: {err.message}"
    full = tuple(k for _, k in prefix) + tuple(err.absolute_path)
    if full[:1] == ("tensors",) and len(full) > 1 and isinstance(data, Mapping):  # name the tensor too
        tensor = data["tensors"][full[1]]
        if isinstance(tensor, Mapping) and isinstance(tensor.get("name"), str):
            what = f"tensor {tensor['name']!r}: {what}"
    if len(what) > 400:
        what = what[:400] + "..."
    return ProblemError(f"{where}: {what}")


def _to_float(v: Any, what: str, where: str) -> float:
    """A number of a valid problem JSON as a float; ``null`` / ``"inf"`` mean infinity (unsupported / no cap)."""
    if v is None or v == "inf":
        return math.inf
    try:
        return float(v)
    except OverflowError:  # an integer beyond the float range
        raise ProblemError(f"{where}: {what} = {str(v)[:24]}... is out of range") from None


def _floats(values: list[Any], what: Callable[[int], str], where: str) -> np.ndarray:
    """``values`` (numbers, null, ``"inf"``) as a float array; ``what(k)`` names value ``k`` in an error."""
    try:
        if None in values:
            values = [math.inf if v is None else v for v in values]
        return np.array(values, dtype=float)
    except OverflowError:
        for k, v in enumerate(values):
            _to_float(v, what(k), where)
        raise


def _cost_table(raw: Any, ops: list[str], targets: list[str], op_pos: Mapping[str, int],
                tgt_pos: Mapping[str, int], where: str) -> np.ndarray:
    """``cost_ms`` of a valid problem JSON as an (n_ops, n_targets) float array, inf = unsupported:
    its names must be ops and targets, its rows (the list form) one per op of one entry per target."""
    n, t = len(ops), len(targets)
    cost = np.full((n, t), np.inf)
    if isinstance(raw, list):
        if len(raw) != n or any(len(r) != t for r in raw):
            raise ProblemError(f"{where}: cost_ms must be {n} rows of {t} numbers (null = unsupported)")
        flat = [v for r in raw for v in r]
        if flat:
            cost[:] = _floats(flat, lambda k: f"cost_ms[{ops[k // t]!r}][{targets[k % t]!r}]",
                              where).reshape(n, t)
        return cost
    rows: list[int] = []
    cols: list[int] = []
    values: list[Any] = []
    for o, row in raw.items():
        i = op_pos.get(o)
        if i is None:
            raise ProblemError(f"{where}: cost_ms names unknown op {o!r}")
        js = [tgt_pos.get(d, -1) for d in row]
        if -1 in js:
            raise ProblemError(f"{where}: cost_ms[{o!r}] names unknown target {list(row)[js.index(-1)]!r}")
        rows += [i] * len(js)
        cols += js
        values += row.values()
    if values:
        cost[rows, cols] = _floats(values, lambda k: f"cost_ms[{ops[rows[k]]!r}][{targets[cols[k]]!r}]", where)
    return cost


def _per_target(data: Mapping[str, Any], key: str, default: float, tgt_pos: Mapping[str, int],
                where: str) -> np.ndarray | None:
    """``{target: number}`` of a valid problem JSON as an array in target order (``default`` where
    missing or null); None if absent."""
    raw = data.get(key)
    if raw is None:
        return None
    arr = np.full(len(tgt_pos), default)
    for d, v in raw.items():
        if d not in tgt_pos:
            raise ProblemError(f"{where}: {key} names unknown target {d!r}")
        arr[tgt_pos[d]] = default if v is None else _to_float(v, f"{key}[{d!r}]", where)
    return arr


def _link_numbers(v: Any, what: str, where: str) -> Any:
    """``links.latency_ms`` / ``ms_per_byte`` of a valid problem JSON: None, a number or a matrix of floats."""
    if isinstance(v, list):
        return [[_to_float(x, what, where) for x in r] for r in v]
    return v


def _jsonable(x: Any) -> Any:
    """A JSON-safe deep copy (numpy scalars -> Python, tuples -> lists)."""
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x
