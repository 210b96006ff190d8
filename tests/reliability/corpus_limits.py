"""The third round of the hostile corpus (issue 19, the classes still open): sizes and time limits.

:func:`limits_cases` adds, through ``build_corpus``'s ``add``, inputs of category ``limits``:

* tensors that declare more than they hold (an initializer, a ``Constant`` value, typed fields),
  external data that lies about its length or offset, lives outside the model's folder or is a FIFO,
  a model or its external data over ``$PLACER_MAX_MODEL_MB``: each refused by name before anything
  large is read or allocated;
* legitimate models with long 1-D tensors read by data-propagating ops (ONNX shape inference with data
  propagation spent ~140 bytes per element on them): planned;
* ``--inputs`` archives whose ``.npy`` headers declare more than the archive holds, with headers too
  long, truncated data, or rows and members the run does not need (read only as far as needed);
* problems with many ops or targets under a short ``--time-limit`` (each case's hang guard is
  generous; the limit itself is measured in ``tests/solve/test_time_limits.py`` and
  ``experiments/bench_limits.py``), and problems whose link table would not fit in memory.

Every input is small on disk and cheap to build (the biggest, a compressed 64 MiB archive, is 64 KB).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from corpus import _save
from corpus_hostile import SHORT, _cli, _fifo, with_env

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(list(nodes), "limits", list(inputs), list(outputs), list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _forged(name: str, dims, raw: bytes | None = None, elem=F, **typed) -> TensorProto:
    t = TensorProto()
    t.name, t.data_type = name, elem
    t.dims.extend(dims)
    if raw is not None:
        t.raw_data = raw
    for field, values in typed.items():
        getattr(t, field).extend(values)
    return t


def _adds_w(w: TensorProto, n: int = 4) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", w.data_type, [n])
    y = helper.make_tensor_value_info("y", w.data_type, None)
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [x], [y], [w])


def _npy(shape, descr: str = "<f4", data: bytes = b"", *, header_pad: int = 0) -> bytes:
    b = io.BytesIO()
    hdr = {"descr": descr, "fortran_order": False, "shape": tuple(shape)}
    if header_pad:  # a header dict padded past what numpy reads
        text = repr(hdr)[:-1] + ", 'pad': '" + "x" * header_pad + "'}"
        text += " " * (-(len(text) + 11) % 64) + "\n"
        b.write(b"\x93NUMPY\x02\x00" + len(text).to_bytes(4, "little") + text.encode())
    else:
        np.lib.format.write_array_header_1_0(b, hdr)
    b.write(data)
    return b.getvalue()


def _zip(path: Path, members: dict[str, bytes], compress: bool = False) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def limits_cases(root: Path, base, add: Callable) -> None:
    c = root / "corpus" / "limits"
    c.mkdir(parents=True, exist_ok=True)

    def plan_cmd(model: str, *extra: str) -> list[str]:
        return ["plan", model, "--targets", "onnxruntime", "--db", str(base.db), "--solver", "greedy", *extra]

    def model_case(name: str, model: onnx.ModelProto, expect, **kw):
        f = _save(model, c / f"{name}.onnx")
        add("limits", name, plan_cmd(f), expect=[Path(f).name, *expect], **kw)

    # ---- tensors declaring more than they hold
    model_case("init-int64-declares-2gib-holds-8-bytes", _adds_w(_forged("w", [2**28], bytes(8), I64)),
               ["initializer 'w'", "holds 8 bytes"])
    model_case("init-float-data-3-of-1m", _adds_w(_forged("w", [2**20], float_data=[1.0, 2.0, 3.0])),
               ["initializer 'w'", "float_data"])
    model_case("init-int64-data-short", _adds_w(_forged("w", [4], elem=I64, int64_data=[1])),
               ["'w'", "int64_data"])
    model_case("init-declares-2^40-elements", _adds_w(_forged("w", [2**20, 2**20], bytes(4))),
               ["initializer 'w'", "elements"])
    const = helper.make_node("Constant", [], ["w"], name="big_const")
    const.attribute.append(helper.make_attribute("value", _forged("", [8192, 8192], float_data=[0.5])))
    x = helper.make_tensor_value_info("x", F, [8192, 8192])
    model_case("constant-value-declares-256mib", _model(
        [const, helper.make_node("Add", ["x", "w"], ["y"], name="add")], [x],
        [helper.make_tensor_value_info("y", F, None)]), ["big_const", "Constant"])
    # ---- external data
    ext = c / "external"
    ext.mkdir(exist_ok=True)

    def ext_case(name: str, edit: Callable[[TensorProto, Path], None], expect, **kw):
        d = ext / name
        d.mkdir(exist_ok=True)
        w = numpy_helper.from_array(np.arange(64, dtype=np.float32), "w")
        m = _adds_w(w, 64)
        onnx.save(m, str(d / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
        m = onnx.load(str(d / "m.onnx"), load_external_data=False)
        edit(m.graph.initializer[0], d)
        onnx.save(m, str(d / "m.onnx"))
        add("limits", f"external-{name}", plan_cmd(str(d / "m.onnx")), expect=["m.onnx", *expect], **kw)

    def set_entry(key: str, value: str) -> Callable[[TensorProto, Path], None]:
        def edit(t: TensorProto, d: Path) -> None:
            entries = {e.key: e for e in t.external_data}
            if key in entries:
                entries[key].value = value
            else:
                t.external_data.add(key=key, value=value)
        return edit

    ext_case("length-declares-1gib", set_entry("length", str(2**30)), ["'w'", "1073741824"])
    ext_case("offset-past-end", set_entry("offset", "4096"), ["'w'", "the file has 256"])
    ext_case("location-outside-folder", set_entry("location", "../../outside.bin"), ["'w'", "outside"])
    ext_case("location-absolute", set_entry("location", "/etc/passwd"), ["'w'", "outside"])

    def more_dims(t: TensorProto, d: Path) -> None:
        t.dims[0] = 2**30

    ext_case("dims-declare-4gib-over-256-bytes", more_dims, ["'w'", "256 bytes"])

    def fifo_data(t: TensorProto, d: Path) -> None:
        (d / "w.bin").unlink()
        _fifo(d / "w.bin")

    ext_case("data-is-a-fifo", fifo_data, ["w.bin", "FIFO"], timeout_s=SHORT)
    d = ext / "over-limit"
    d.mkdir(exist_ok=True)
    m = _adds_w(numpy_helper.from_array(np.zeros(1 << 18, np.float32), "w"), 1 << 18)
    onnx.save(m, str(d / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    add("limits", "external-total-over-PLACER_MAX_MODEL_MB", call=with_env(
        "PLACER_MAX_MODEL_MB", "0.5", _cli(plan_cmd(str(d / "m.onnx")))),
        expect=["m.onnx", "PLACER_MAX_MODEL_MB"])
    add("limits", "model-file-over-PLACER_MAX_MODEL_MB", call=with_env(
        "PLACER_MAX_MODEL_MB", "0.0001", _cli(plan_cmd(base.tiny))), expect=["tiny.onnx", "limit"])
    add("limits", "PLACER_MAX_MODEL_MB-raised-accepts", call=with_env(
        "PLACER_MAX_MODEL_MB", "2", _cli(plan_cmd(str(d / "m.onnx")))), accept=True)
    # ---- long 1-D tensors read by data-propagating ops: legitimate, planned
    n = 1 << 20
    x1 = helper.make_tensor_value_info("x", F, [n])
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=I64, name="cast"),
             helper.make_node("Concat", ["c", "c"], ["cc"], axis=0, name="concat"),
             helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", I64, [1], [2]),
                              name="two"),
             helper.make_node("Concat", ["two", "s"], ["s2"], axis=0, name="shape2"),
             helper.make_node("Reshape", ["cc", "s2"], ["r"], name="reshape"),
             helper.make_node("Neg", ["r"], ["y"], name="neg")]
    f = _save(_model(nodes, [x1], [helper.make_tensor_value_info("y", I64, None)]), c / "long_1d.onnx")
    # `plan` profiles it too (4 MiB arrays); the reshape's shape comes from a folded Shape
    add("limits", "long-1d-input-data-propagation", plan_cmd(f), accept=True)
    # ---- --inputs archives
    pd = str(base.plan_dir)

    def npz_case(name: str, members: dict[str, bytes], expect, *extra: str, accept: bool = False,
                 compress: bool = False):
        p = _zip(c / f"{name}.npz", members, compress)
        add("limits", f"npz-{name}", ["run", pd, "--inputs", str(p), *extra],
            expect=[] if accept else [p.name, *expect], accept=accept)

    one = np.ones((1, 3, 8, 8), np.float32).tobytes()
    npz_case("header-declares-1e9-requests", {"x.npy": _npy((10**9, 1, 3, 8, 8), data=one)},
             ["'x'", "forged"])
    npz_case("header-declares-huge-shape", {"x.npy": _npy((1, 3, 8, 2**40), data=one)}, ["'x'", "shape"])
    npz_case("data-truncated", {"x.npy": _npy((1, 3, 8, 8), data=one[:100])}, ["'x'"])
    npz_case("header-64k-long", {"x.npy": _npy((1, 3, 8, 8), data=one, header_pad=70000)}, ["'x'", "header"])
    npz_case("object-dtype-header", {"x.npy": _npy((1, 3, 8, 8), descr="|O", data=bytes(8))},
             ["'x'", "object"])
    npz_case("not-npy-member", {"x.npy": b"PK not an array at all"}, ["'x'", ".npy"])
    zeros = np.zeros((2**26 // 768, 1, 3, 8, 8), np.float32)  # 64 MiB of zeros, ~64 KB compressed
    npz_case("extra-member-64mib-never-read", {"x.npy": _npy((1, 3, 8, 8), data=one),
                                               "junk.npy": _npy(zeros.shape, data=zeros.tobytes())},
             [], accept=True, compress=True)
    npz_case("batch-64mib-first-row-read", {"x.npy": _npy(zeros.shape, data=zeros.tobytes())}, [],
             "--requests", "2", accept=True, compress=True)
    del zeros
    # ---- problems: many ops / targets under a short time limit; link tables that cannot fit
    probs = c / "problems"
    probs.mkdir(exist_ok=True)

    def chain_problem(name: str, n_ops: int, n_targets: int) -> Path:
        rng = np.random.default_rng(n_ops * 7 + n_targets)
        ops = [f"op{i}" for i in range(n_ops)]
        targets = [f"t{j}" for j in range(n_targets)]
        cost = rng.uniform(0.1, 2.0, (n_ops, n_targets)).round(3)
        data = {"version": 1, "ops": ops, "targets": targets,
                "cost_ms": {o: dict(zip(targets, row.tolist())) for o, row in zip(ops, cost)},
                "tensors": [{"name": f"t{i}", "producer": ops[i], "consumers": [ops[i + 1]], "nbytes": 4096}
                            for i in range(n_ops - 1)],
                "links": {"latency_ms": 0.02, "ms_per_byte": 1e-8}}
        f = probs / f"{name}.json"
        f.write_text(json.dumps(data))
        return f

    # a plan within the second, or (on a loaded machine, where preparing the problem alone can take
    # longer) the clear refusal of a solver that cannot stop midway: never a hang or a crash
    spent = ("time limit of 1 s spent before solver", "give a longer time limit")
    f = chain_problem("chain-5k-ops", 5_000, 2)
    for solver in ("greedy", "heft", "cpsat"):
        add("limits", f"problem-5k-ops-{solver}-time-limit-1",
            ["plan", "--problem", str(f), "--solver", solver, "--time-limit", "1"],
            accept=True, tolerate=spent)
    f = chain_problem("wide-200-targets", 50, 200)
    for solver in ("greedy", "heft", "cpsat"):
        add("limits", f"problem-200-targets-{solver}-time-limit-1",
            ["plan", "--problem", str(f), "--solver", solver, "--time-limit", "1"],
            accept=True, tolerate=spent)
    f = chain_problem("link-table-too-big", 600, 600)
    add("limits", "problem-link-table-over-limit", ["plan", "--problem", str(f), "--solver", "greedy"],
        expect=[f.name, "link table"])
