"""The second round of the hostile corpus (issue 19): classes the first round did not hold.

:func:`hostile_cases` adds, through ``build_corpus``'s ``add``, inputs of these categories:

* ``files``: a FIFO, ``/dev/zero`` (directly or through a symlink) or a sparse 200 MB file where a
  JSON file, model, store or cost-model file is expected: refused from ``os.stat`` before any
  ``open`` (a FIFO must not block: these cases have a short hang guard);
* ``json``: nesting 150 and 100,000 levels deep, a key repeated in one object (a pin dropped),
  integers of 400 and 5,000 digits, ``1e999``, in every JSON a user hands over;
* ``numbers``: finite costs, weights or link times whose sums overflow, and command-line numbers
  out of range (``--time-limit 1e308``, ``--requests 10**12``, ``--trials 2**63``,
  ``--inputs seed:-1``, ``onnxruntime:t99999``, ...);
* ``types``: a list or an object where a name or a number is expected;
* ``escapes``: op, tensor and target names holding terminal escape sequences, bidi overrides and
  carriage returns, in problems, models, plan directories and arguments. Accepted inputs among
  them must run (``accept``) and, like every case, print no raw control character;
* ``overwrite``: a cost-model directory this placer cannot read (a newer format, damaged, half
  written) and stores it must refuse: refused *and left byte for byte as they were* (and, under
  ``store``, a store where every row crashed: nothing to fit, not a model fitted on nothing);
* ``trust``: a plan directory's ``module.so`` not compiled by this user's placer (planted and
  resealed, a forged or borrowed HMAC, a symlink, a world-readable trust key): refused before
  anything is loaded;
* ``report``: malformed ``tune.json`` / ``trials.json`` under ``placer report`` (a minimal valid
  tune directory is a control).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corpus import CONTROL, PLAN_TARGETS, _checkpoint, _copy_dir, _save, good_problem

#: a hang guard for inputs that could block (a FIFO): generous, never reached when refused at stat()
SHORT = 20.0
ESC_NAME = "\x1b[2J\x1b[Hall checks PASSED\x07"
OSC_NAME = "fc\r\x1b]0;owned\x07\u202e"


def _fifo(path: Path) -> Path:
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)
    return path


def _symlink(path: Path, target: str | Path) -> Path:
    if path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)
    return path


def _sparse(path: Path, size: int = 200 * 2**20) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)  # a hole: no disk, no write time
    return path


def _placeholder_json(data: Any, raw: dict[str, str]) -> str:
    """``json.dumps(data)`` with each placeholder string value ``"@KEY@"`` replaced by ``raw[KEY]``
    (text no encoder writes: huge integers, ``1e999``, deep nesting)."""
    text = json.dumps(data)
    for k, v in raw.items():
        text = text.replace(json.dumps(f"@{k}@"), v)
    return text


def _with_dup(data: dict, key: str, value: Any) -> str:
    """``data`` as JSON with ``key`` written a second time (last) with ``value``."""
    text = json.dumps(data)
    return text[:-1] + f", {json.dumps(key)}: {json.dumps(value)}}}"


def _snapshot(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def left_intact(path: Path, fn: Callable[[], Any]) -> Callable[[], None]:
    """A call running ``fn`` that fails (AssertionError: a crash) if ``path`` changed meanwhile, whatever
    ``fn`` raised: a refusal must also leave the user's files as they were."""
    def call():
        before = _snapshot(path)
        try:
            fn()
        finally:
            if _snapshot(path) != before:
                raise AssertionError(f"{path} was modified")
    return call


def with_env(key: str, value: str, fn: Callable[[], Any]) -> Callable[[], None]:
    def call():
        old = os.environ.get(key)
        os.environ[key] = value
        try:
            fn()
        finally:
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
    return call


def _reseal(d: Path, rel: str) -> None:
    from costmodels.persistence import sha256_file

    card = json.loads((d / "card.json").read_text())
    card["artifacts"][rel] = sha256_file(d / rel)
    (d / "card.json").write_text(json.dumps(card))


def hostile_cases(root: Path, base, add: Callable, rng) -> None:
    c = root / "corpus" / "hostile"
    c.mkdir(parents=True, exist_ok=True)
    t = base.tiny

    def plan_cmd(model: str, *extra: str) -> list[str]:
        return ["plan", model, "--targets", "onnxruntime", "--db", str(base.db), "--solver", "greedy", *extra]

    def pdir(name: str) -> Path:
        return _copy_dir(base.plan_dir, c / "plans" / name)

    def cmdir(name: str) -> Path:
        return _copy_dir(base.costmodel, c / "costmodels" / name)

    def load_cm(d: Path) -> Callable[[], Any]:
        from costmodels.cost_model import load_cost_model

        return lambda: load_cost_model(d)

    def problem_file(name: str, text: str) -> Path:
        f = c / "problems" / f"{name}.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
        return f

    def prob(cat: str, name: str, text: str, expect, *, accept: bool = False, solver: str = "greedy"):
        f = problem_file(name, text)
        add(cat, f"problem-{name}", ["plan", "--problem", str(f), "--solver", solver],
            expect=[] if accept else [*expect], accept=accept)

    def edited_problem(fn) -> str:
        d = good_problem()
        fn(d)
        return json.dumps(d)

    _files(c, base, add, plan_cmd, pdir, cmdir, load_cm, t)
    _json(c, base, add, pdir, cmdir, load_cm, prob, problem_file)
    _numbers(c, base, add, plan_cmd, prob, edited_problem, t)
    _types(c, base, add, pdir, cmdir, load_cm, prob, edited_problem)
    _escapes(c, base, add, plan_cmd, prob, t)
    _overwrite(c, base, add, cmdir)
    _trust(c, base, add, pdir)
    _report(c, base, add)


# ---------------------------------------------------------------- files: not regular, too big
def _files(c, base, add, plan_cmd, pdir, cmdir, load_cm, t):
    f = _fifo(c / "problem_fifo.json")
    add("files", "problem-fifo", ["plan", "--problem", str(f), "--solver", "greedy"], expect=[f.name, "FIFO"],
        timeout_s=SHORT)
    add("files", "problem-dev-zero", ["plan", "--problem", "/dev/zero", "--solver", "greedy"],
        expect=["/dev/zero", "device"], timeout_s=SHORT)
    f = _sparse(c / "problem_sparse_200mb.json")
    add("files", "problem-200mb-sparse", ["plan", "--problem", str(f), "--solver", "greedy"],
        expect=[f.name, "limit"], timeout_s=SHORT)
    f = _fifo(c / "model_fifo.onnx")
    add("files", "model-fifo", plan_cmd(str(f)), expect=[f.name, "regular file"], timeout_s=SHORT)
    add("files", "model-dev-zero", plan_cmd("/dev/zero"),
        expect=["/dev/zero", "regular file"], timeout_s=SHORT)
    for name in ("plan.json", "stage_config.json"):
        p = pdir(f"fifo-{name}")
        _fifo(p / name)
        add("files", f"{name}-fifo", ["run", str(p), "--check"], expect=[name, "FIFO"], timeout_s=SHORT)
        p = pdir(f"devzero-{name}")
        _symlink(p / name, "/dev/zero")
        add("files", f"{name}-symlink-to-dev-zero", ["run", str(p), "--check"], expect=[name, "device"],
            timeout_s=SHORT)
        p = pdir(f"sparse-{name}")
        (p / name).unlink()
        _sparse(p / name)
        add("files", f"{name}-200mb-sparse", ["show", str(p)], expect=[name, "limit"], timeout_s=SHORT)
    p = pdir("fifo-compiled.json")
    _fifo(p / "compiled.json")
    (p / "module.so").write_bytes(b"\x7fELF not really")
    add("files", "compiled.json-fifo", ["run", str(p), "--executor", "relax", "--compiled"],
        expect=["compiled.json", "FIFO"], timeout_s=SHORT)
    f = _fifo(c / "store_fifo.db")
    add("files", "store-fifo[profile]", ["profile", t, "--targets", "onnxruntime", "--db", str(f), "--quiet",
                                         "--no-links", "--no-whole-model"], expect=[f.name, "FIFO"],
        timeout_s=SHORT)
    add("files", "store-fifo[fit]", ["fit", "--db", str(f), "--out", str(c / "fifo-cm")],
        expect=[f.name, "FIFO"], timeout_s=SHORT)
    add("files", "store-dev-zero[plan]", plan_cmd(t, "--db", "/dev/zero"), expect=["/dev/zero", "regular file"],
        timeout_s=SHORT)
    d = cmdir("card-fifo")
    _fifo(d / "card.json")
    add("files", "costmodel-card-fifo", call=load_cm(d), expect=["card.json", "FIFO"], timeout_s=SHORT)
    d = cmdir("tables-fifo")
    _fifo(d / "tables.json")
    add("files", "costmodel-tables-fifo", call=load_cm(d),
        expect=["tables.json", "regular file"], timeout_s=SHORT)
    d = cmdir("artifact-symlinked-out")
    outside = c / "outside_transfer.skops"
    shutil.copyfile(d / "transfer.skops", outside)  # the same bytes: its hash matches the card
    _symlink(d / "transfer.skops", outside)
    add("files", "costmodel-artifact-symlinked-outside", call=load_cm(d),
        expect=["transfer.skops", "symbolic link"])
    d = cmdir("card-dev-zero")
    _symlink(d / "card.json", "/dev/zero")
    add("files", "costmodel-card-dev-zero", call=load_cm(d), expect=["card.json", "device"], timeout_s=SHORT)
    for name in ("plan.json", "stage_config.json"):
        p = pdir(f"dir-{name}")
        (p / name).unlink()
        (p / name).mkdir()
        add("files", f"{name}-a-directory", ["run", str(p), "--check"], expect=[name, "directory"])
    p = pdir("devzero-compiled.json")
    _symlink(p / "compiled.json", "/dev/zero")
    add("files", "compiled.json-symlink-to-dev-zero", ["run", str(p), "--executor", "relax", "--compiled"],
        expect=["compiled.json", "device"], timeout_s=SHORT)
    loop = c / "loop.json"
    _symlink(loop, loop)
    add("files", "problem-symlink-loop", ["plan", "--problem", str(loop), "--solver", "greedy"],
        expect=[loop.name, "symbolic links"])
    d = cmdir("card-sparse")
    (d / "card.json").unlink()
    _sparse(d / "card.json")
    add("files", "costmodel-card-200mb-sparse", call=load_cm(d), expect=["card.json", "limit"], timeout_s=SHORT)
    f = _fifo(c / "inputs_fifo.npz")
    add("files", "run-inputs-fifo", ["run", str(base.plan_dir), "--inputs", str(f)], expect=[f.name],
        timeout_s=SHORT)
    f = _fifo(c / "spec_fifo.toml")

    def register_fifo_spec():
        from placer.devices.sim import register_spec

        register_spec(f)

    add("files", "sim-spec-fifo", call=register_fifo_spec, expect=[f.name, "FIFO"], timeout_s=SHORT)


# ---------------------------------------------------------------- json: depth, repeated keys, numbers
def _json(c, base, add, pdir, cmdir, load_cm, prob, problem_file):
    good = good_problem()
    deep = "[" * 100_000 + "]" * 100_000
    deep150 = "[" * 150 + "]" * 150
    prob("json", "nested-100k", _placeholder_json({**good, "colocate": "@D@"}, {"D": deep}), ["nested"])
    prob("json", "nested-150", _placeholder_json({**good, "colocate": "@D@"}, {"D": deep150}), ["nested"])
    prob("json", "whole-file-nested-100k", deep, ["nested"])
    prob("json", "duplicate-pinned-drops-a-pin", _with_dup(good, "pinned", {}), ["pinned", "twice"])
    text = json.dumps(good).replace('"conv": {"onnxruntime@cpu:t1": 1.2',
                                    '"conv": {"onnxruntime@cpu:t1": 99.0, "onnxruntime@cpu:t1": 1.2')
    prob("json", "duplicate-cost-target", text, ["onnxruntime@cpu:t1", "twice"])
    big = {**good, "tensors": [dict(x) for x in good["tensors"]]}
    big["tensors"][-1]["nbytes"] = "@N@"
    prob("json", "nbytes-400-digits", _placeholder_json(big, {"N": "9" * 400}), ["400 digits"])
    prob("json", "nbytes-5000-digits", _placeholder_json(big, {"N": "7" * 5000}), ["5000 digits"])
    cost = json.loads(json.dumps(good))
    cost["cost_ms"]["fc"]["onnxruntime@cpu:t1"] = "@X@"
    prob("json", "cost-1e999", _placeholder_json(cost, {"X": "1e999"}), ["1e999", "out of range"])
    prob("json", "cost-negative-400-digits", _placeholder_json(cost, {"X": "-" + "3" * 400}),
         ["out of range"])

    def plan_text(name: str, fn: Callable[[dict], str], expect, cat: str = "json", file: str = "plan.json"):
        p = pdir(f"{cat}-{file}-{name}")
        data = json.loads((p / file).read_text())
        (p / file).write_text(fn(data))
        add(cat, f"{file}-{name}", ["run", str(p), "--check"], expect=[file, *expect])

    plan_text("nested-100k", lambda d: _placeholder_json({**d, "options": "@D@"}, {"D": deep}), ["nested"])
    plan_text("duplicate-assignment", lambda d: _with_dup(d, "assignment", d["assignment"]),
              ["assignment", "twice"])
    plan_text("makespan-1e400", lambda d: _placeholder_json({**d, "makespan_ms": "@X@"}, {"X": "1e400"}),
              ["out of range"])
    plan_text("nested-100k", lambda d: _placeholder_json({**d, "connections": "@D@"}, {"D": deep}),
              ["nested"],
              file="stage_config.json")
    plan_text("duplicate-stages", lambda d: _with_dup(d, "stages", []), ["stages", "twice"],
              file="stage_config.json")

    def threads_huge(d):
        d["stages"][0]["threads"] = "@T@"
        return _placeholder_json(d, {"T": "1" + "0" * 30})

    plan_text("threads-31-digits", threads_huge, ["31 digits"], file="stage_config.json")
    plan_text("makespan-5000-digits", lambda d: _placeholder_json({**d, "makespan_ms": "@X@"}, {"X": "5" * 5000}),
              ["5000 digits"])
    plan_text("duplicate-tensor", lambda d: _with_dup(d, "tensors", d["tensors"]), ["tensors", "twice"],
              file="stage_config.json")
    d = cmdir("card-duplicate-version")
    card = json.loads((d / "card.json").read_text())
    (d / "card.json").write_text(_with_dup(card, "version", 1))
    add("json", "costmodel-card-duplicate-key", call=load_cm(d), expect=["card.json", "version", "twice"])
    d = cmdir("card-version-25-digits")
    (d / "card.json").write_text(_placeholder_json({**card, "version": "@V@"}, {"V": "1" * 25}))
    add("json", "costmodel-card-version-25-digits", call=load_cm(d), expect=["card.json", "out of range"])
    d = cmdir("tables-nested-100k")
    (d / "tables.json").write_text(deep)
    _reseal(d, "tables.json")
    add("json", "costmodel-tables-nested-100k-resealed", call=load_cm(d), expect=["tables.json", "nested"])
    d = cmdir("tables-duplicate-resealed")
    tables = json.loads((d / "tables.json").read_text())
    (d / "tables.json").write_text(_with_dup(tables, "overheads_ms", {}))
    _reseal(d, "tables.json")
    add("json", "costmodel-tables-duplicate-key-resealed", call=load_cm(d), expect=["tables.json", "twice"])

    def store_sql(name: str, sql: str, expect, cat: str = "json"):
        f = c / "stores" / f"{name}.db"
        f.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(base.store, f)
        con = sqlite3.connect(f)
        con.execute(sql)
        con.commit()
        con.close()
        _checkpoint(f)
        add(cat, f"store-{name}[fit]", ["fit", "--db", str(f), "--out", str(c / "stores" / f"{name}-cm")],
            expect=[*expect])

    store_sql("meta-nested-100k", f"UPDATE measurements SET meta = '{deep}'", ["meta", "nested"])
    store_sql("signature-duplicate-key",
              """UPDATE signatures SET signature = '{"op": "Conv", "op": "Relu"}'""",
              ["signature", "twice"])
    store_sql("meta-1e999", """UPDATE measurements SET meta = '{"x": 1e999}'""", ["meta", "out of range"])
    store_sql("every-row-crashed", "UPDATE measurements SET status = 'crash', median_ms = NULL, net_ms = NULL",
              ["every-row-crashed.db", "nothing to fit"], cat="store")


# ---------------------------------------------------------------- numbers: overflow, ranges
def _numbers(c, base, add, plan_cmd, prob, edited_problem, t):
    def all_costs_huge(d):
        for row in d["cost_ms"].values():
            for k in row:
                row[k] = 1.5e308

    prob("numbers", "costs-sum-overflows", edited_problem(all_costs_huge), ["costs too large"])

    def weights_huge(d):
        d.update(memory_cap_bytes={}, weight_bytes={"conv": 1e308, "lrn": 1e308, "fc": 1e308})

    prob("numbers", "weights-sum-overflows", edited_problem(weights_huge), ["weight_bytes too large"])

    def nbytes_huge(d):
        d["tensors"][1]["nbytes"] = 1e300

    prob("numbers", "nbytes-1e300", edited_problem(nbytes_huge), ["conv_y", "out of range"])

    def link_overflow(d):
        d["links"]["ms_per_byte"] = 1e303

    prob("numbers", "link-time-overflows", edited_problem(link_overflow), ["link costs too large"])
    pr = str(base.problem)
    for tl in ("1e308", "604801", "1e-400"):
        add("numbers", f"time-limit[{tl}]", ["plan", "--problem", pr, "--time-limit", tl],
            expect=["time_limit"])
    add("numbers", "stages[10**30]",
        ["plan", "--problem", pr, "--mode", "pipeline", "--stages", "1" + "0" * 30],
        expect=["num_stages"])
    pd = str(base.plan_dir)
    add("numbers", "run--requests[10**12]", ["run", pd, "--requests", str(10**12)], expect=["requests"])
    add("numbers", "run--requests[1e12]", ["run", pd, "--requests", "1e12"], expect=["--requests"])
    add("numbers", "run--warmup[10**9]", ["run", pd, "--warmup", str(10**9)], expect=["warmup"])
    add("numbers", "run--rtol[1e309]", ["run", pd, "--rtol", "1e309"], expect=["rtol"])
    for seed in ("seed:-1", "seed:4294967296", "seed:" + "9" * 5000):
        add("numbers", f"run--inputs[{seed[:20]}]", ["run", pd, "--inputs", seed], expect=["--inputs"])
    tune = ["tune", t, "--targets", "onnxruntime", "--db", str(base.db), "--out", str(c / "tune-out")]
    for n in (str(2**63), "2**63", "100001"):
        add("numbers", f"tune--trials[{n}]", [*tune, "--trials", n], expect=["--trials"])
    for bud in ("1e308", "999999h", "31d"):
        add("numbers", f"tune--budget[{bud}]", [*tune, "--budget", bud], expect=["--budget"])
    for seed in (str(2**40), "-1"):
        add("numbers", f"plan--seed[{seed}]", ["plan", "--problem", pr, "--seed", seed], expect=["--seed"])
    for tg, exp in [("onnxruntime:t99999", "t99999"), ("onnxruntime:t" + "9" * 5000, "out of range"),
                    ("onnxruntime@cpu99999999", "out of range"), ("openvino:t1025", "1024")]:
        add("numbers", f"targets[{tg[:24]}]", plan_cmd(t, "--targets", tg), expect=[exp])
    prof = ["profile", t, "--targets", "onnxruntime", "--db", str(base.db), "--quiet"]
    add("numbers", "profile--timeout[1e308]", [*prof, "--timeout", "1e308"], expect=["--timeout"])
    add("numbers", "profile--segments[100000]", [*prof, "--segments", "100000"], expect=["--segments"])
    add("numbers", "fit--tune-trials[10**9]", ["fit", "--db", str(base.store), "--out", str(c / "x-cm"),
                                                "--tune-trials", str(10**9)], expect=["--tune-trials"])
    add("numbers", "shape[5000-digit dim]", plan_cmd(base.tiny_sym, "--shape", "x=" + "9" * 5000 + "x3x8x8"),
        expect=["--shape"])
    for db in ("", ":memory:"):
        add("numbers", f"db[{db or 'empty'}]", ["fit", "--db", db, "--out", str(c / "x-cm")], expect=["--db"])
    add("numbers", "profile-db[:memory:]", [*prof[:-3], "--db", ":memory:", "--quiet"], expect=["--db"])


# ---------------------------------------------------------------- types: a list where a name is expected
def _types(c, base, add, pdir, cmdir, load_cm, prob, edited_problem):
    def tensors(d):
        return {x["name"]: x for x in d["tensors"]}

    edits = [
        ("ops-holds-a-list", lambda d: d["ops"].append(["conv"]), ["ops"]),
        ("pinned-to-a-list", lambda d: d["pinned"].update(fc=["onnxruntime@cpu:t1"]), ["pinned"]),
        ("colocate-holds-an-object", lambda d: d.update(colocate=[["conv", {"op": "lrn"}]]), ["colocate"]),
        ("tensor-name-a-list", lambda d: d["tensors"].append({"name": ["t"], "producer": "fc"}),
         ["tensors[4].name"]),
        ("tensor-producer-a-list", lambda d: tensors(d)["lrn_y"].update(producer=["lrn"]),
         ["lrn_y", "producer"]),
        ("tensor-consumers-nested", lambda d: tensors(d)["lrn_y"].update(consumers=[["fc"]]),
         ["lrn_y", "consumers"]),
        ("target-cores-an-object", lambda d: d.update(target_cores={"onnxruntime@cpu:t1": {"0": 1}}),
         ["target_cores"]),
        ("cost-row-a-list", lambda d: d["cost_ms"].update(lrn=[1.0, 2.0]), ["lrn"]),
        ("links-charge-a-number", lambda d: d["links"].update(charge=7), ["links.charge"]),
    ]
    for name, fn, expect in edits:
        prob("types", name, edited_problem(fn), expect)

    def plan_edit(name: str, fn, expect, file: str = "plan.json"):
        p = pdir(f"types-{file}-{name}")
        data = json.loads((p / file).read_text())
        fn(data)
        (p / file).write_text(json.dumps(data))
        add("types", f"{file}-{name}", ["run", str(p), "--check"], expect=[file if file != "stage_config.json"
                                                                           else "stage config", *expect])

    plan_edit("assignment-value-a-list", lambda d: d["assignment"].update(fc=[PLAN_TARGETS[0]]), ["fc"])
    plan_edit("targets-a-string", lambda d: d.update(targets=PLAN_TARGETS[0]), [])
    plan_edit("provenance-a-list", lambda d: d.update(provenance=[1, 2]), ["malformed"])
    plan_edit("transfers-an-object", lambda d: d.update(transfers={"a": 1}), ["malformed"])
    plan_edit("partition-ops-an-object", lambda d: d["stages"][0]["partitions"][0].update(ops={"a": 1}), [],
              file="stage_config.json")
    d = cmdir("card-artifacts-a-list")
    card = json.loads((d / "card.json").read_text())
    (d / "card.json").write_text(json.dumps({**card, "artifacts": list(card["artifacts"])}))
    add("types", "costmodel-card-artifacts-a-list", call=load_cm(d), expect=["card.json", "malformed"])
    d = cmdir("card-op-model-files-unlisted")
    (d / "card.json").write_text(json.dumps({**card, "op_model_files": {"op_models/9.skops": "x"}}))
    add("types", "costmodel-card-op-model-unlisted", call=load_cm(d), expect=["card.json", "malformed"])
    for name, tables in [("a-list", [1, 2, 3]),
                         ("overheads-strings", {"overheads_ms": {"onnxruntime@cpu:t1": "x"}}),
                         ("records-not-pairs", {"partition_records": [1, 2]})]:
        d = cmdir(f"tables-{name}")
        (d / "tables.json").write_text(json.dumps(tables))
        _reseal(d, "tables.json")
        add("types", f"costmodel-tables-{name}-resealed", call=load_cm(d),
            expect=["tables.json", "malformed"])


# ---------------------------------------------------------------- escapes: names that drive a terminal
def _escapes(c, base, add, plan_cmd, prob, t):
    from placer import zoo

    def renamed(d: dict, old: str, new: str) -> dict:
        return json.loads(json.dumps(d).replace(json.dumps(old), json.dumps(new)))

    good = good_problem()
    esc = renamed(renamed(good, "lrn", ESC_NAME), "fc", OSC_NAME)
    prob("escapes", "op-names-with-escapes", json.dumps(esc), [], accept=True)
    prob("escapes", "op-names-with-escapes-cpsat", json.dumps(esc), [], accept=True, solver="cpsat")
    prob("escapes", "target-name-with-escapes",
         json.dumps(renamed(good, "openvino@cpu1:t1", "openvino\x1b[31m\r")), [], accept=True)
    bad = json.loads(json.dumps(esc))
    bad["cost_ms"]["\x1b]0;pwned\x07ghost"] = {"onnxruntime@cpu:t1": 1.0}
    prob("escapes", "unknown-op-with-escapes", json.dumps(bad), ["ghost"])
    bad = json.loads(json.dumps(esc))
    bad["tensors"].append({"name": "\x1b[2Jdup\r", "producer": None, "consumers": ["conv"], "nbytes": 4})
    bad["tensors"].append({"name": "\x1b[2Jdup\r", "producer": None, "consumers": ["conv"], "nbytes": 4})
    prob("escapes", "duplicate-tensor-with-escapes", json.dumps(bad), ["dup"])

    m = zoo.tiny_branchy(0)
    for n in m.graph.node:
        n.name = f"\x1b[2J{n.name}\x1b]0;owned\x07\r"
    esc_model = _save(m, c / "escape_names.onnx")
    add("escapes", "model-op-names-with-escapes", plan_cmd(esc_model), accept=True)
    m2 = zoo.tiny_branchy(0)
    m2.graph.node[-1].input[0] = "\x1b[2Jghost_tensor\x07"
    f = _save(m2, c / "escape_dangling.onnx")
    add("escapes", "model-dangling-input-with-escapes", plan_cmd(f), expect=["ghost_tensor"])
    pdir = _escape_plan_dir(c, esc_model)
    add("escapes", "show-plan-with-escape-names", ["show", str(pdir)], accept=True)
    add("escapes", "show-ir-with-escapes", ["show", str(pdir), "--ir"], accept=True)
    add("escapes", "show-json-with-escapes", ["show", str(pdir), "--json"], accept=True)
    add("escapes", "targets-arg-with-escapes", plan_cmd(t, "--targets", "onnx\x1b[2Jruntime"), expect=["[2j"])
    add("escapes", "shape-arg-with-escapes", plan_cmd(base.tiny_sym, "--shape", "\x1b[2Jx\r=1x3x8x8"),
        expect=["[2j"])
    add("escapes", "problem-path-with-escapes", ["plan", "--problem", str(c / "no\x1b[2Jsuch.json")],
        expect=["such.json"])


def _escape_plan_dir(c: Path, model_path: str) -> Path:
    from placer.graph import load_graph
    from placer.materialize import materialize

    g = load_graph(model_path)
    out = c / "plans" / "escape-names"
    if out.exists():
        shutil.rmtree(out)
    mat = materialize(g, {o.id: PLAN_TARGETS[0] for o in g.ops}, relax=False)
    mat.save(out, relax=False)
    (out / "module.relax.txt").write_text(f"# a module text holding names from the model\n{ESC_NAME}\n"
                                          f"{OSC_NAME}\n")
    return out


# ---------------------------------------------------------------- overwrite: what placer cannot read is kept
def _overwrite(c, base, add, cmdir):
    from costmodels.train import fit_store
    from placer.profile import ProfileStore

    def refit_into(d: Path) -> Callable[[], None]:
        return left_intact(d, lambda: fit_store(str(base.store), d))

    from costmodels.persistence import VERSION

    d = cmdir("newer-version")
    card = json.loads((d / "card.json").read_text())
    (d / "card.json").write_text(json.dumps({**card, "version": VERSION + 1}))
    add("overwrite", "costmodel-newer-version[fit]", call=refit_into(d),
        expect=[d.name, "refusing to overwrite"])
    d = cmdir("newer-version-cli")
    (d / "card.json").write_text(json.dumps({**card, "version": VERSION + 5}))
    add("overwrite", "costmodel-newer-version[placer fit]", call=left_intact(d, _cli(
        ["fit", "--db", str(base.store), "--out", str(d)])), expect=[d.name, "refusing to overwrite"])
    d = cmdir("tables-flipped")
    blob = bytearray((d / "tables.json").read_bytes())
    blob[len(blob) // 2] ^= 0x20
    (d / "tables.json").write_bytes(bytes(blob))
    add("overwrite", "costmodel-damaged[fit]", call=refit_into(d), expect=[d.name, "refusing to overwrite"])
    d = cmdir("card-not-json")
    (d / "card.json").write_text("{ half written")
    add("overwrite", "costmodel-card-not-json[fit]", call=refit_into(d),
        expect=[d.name, "refusing to overwrite"])
    d = cmdir("no-card")
    (d / "card.json").unlink()
    add("overwrite", "costmodel-half-written[fit]", call=refit_into(d),
        expect=[d.name, "refusing to overwrite"])
    d = cmdir("readable")  # a model this placer reads is updated in place: the same call succeeds
    add(CONTROL, "costmodel-readable-is-updated", call=lambda: fit_store(str(base.store), d), accept=True)

    def store_copy(name: str, edit: Callable[[sqlite3.Connection], None]) -> Path:
        f = c / "stores" / f"overwrite-{name}.db"
        f.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(base.store, f)
        con = sqlite3.connect(f)
        edit(con)
        con.commit()
        con.close()
        _checkpoint(f)
        return f

    def open_store(f: Path) -> Callable[[], None]:
        def fn():
            with ProfileStore(f):
                pass
        return left_intact(f, fn)

    f = store_copy("newer", lambda con: con.execute("UPDATE schema_version SET version = 999"))
    add("overwrite", "store-newer-schema-intact", call=open_store(f), expect=[f.name, "999"])
    f = store_copy("foreign", lambda con: [con.execute(f"DROP TABLE {t}") for t in _store_tables(con)]
                   + [con.execute("CREATE TABLE customers (id INTEGER)")])
    add("overwrite", "store-foreign-sqlite-intact", call=open_store(f),
        expect=[f.name, "not a placer profile store"])
    f = store_copy("no-version-row", lambda con: con.execute("DELETE FROM schema_version"))
    add("overwrite", "store-schema-version-row-missing", call=open_store(f),
        expect=[f.name, "schema_version"])
    f = store_copy("cli-newer", lambda con: con.execute("UPDATE schema_version SET version = 1000"))
    add("overwrite", "store-newer-schema[placer profile]", call=left_intact(f, _cli(
        ["profile", base.tiny, "--targets", "onnxruntime", "--db", str(f), "--quiet", "--no-links",
         "--no-whole-model"])), expect=[f.name, "1000"])


def _store_tables(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
            if not r[0].startswith("sqlite_")]


def _cli(argv: list[str]) -> Callable[[], None]:
    """The real CLI as a call: its one error line re-raised as a PlacerError (for :func:`left_intact`)."""
    import contextlib
    import io

    from placer.cli import main
    from placer.errors import PlacerError

    def fn():
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(list(argv))
        if rc != 0:
            raise PlacerError(err.getvalue().strip().splitlines()[-1])
    return fn


# ---------------------------------------------------------------- trust: native code from a plan directory
def _trust(c, base, add, pdir):
    import hashlib
    import hmac

    import tvm

    from placer.trust import KEY_ENV

    cfg = json.loads((base.plan_dir / "stage_config.json").read_text())
    planted = b"\x7fELF\x02\x01\x01" + bytes(200)  # never loaded: refused before

    def compiled_dir(name: str, *, module: bytes | None = planted, **info_edit) -> Path:
        p = pdir(f"trust-{name}")
        if module is not None:
            (p / "module.so").write_bytes(module)
        info = {"format": "placer.compiled", "version": 1, "file": "module.so",
                "sha256": hashlib.sha256(module or b"").hexdigest(), "model_hash": cfg["model"]["hash"],
                "assignment_hash": cfg["plan"]["assignment_hash"], "tvm": tvm.__version__, "compile_s": 1.0}
        info.update(info_edit)
        (p / "compiled.json").write_text(json.dumps(info))
        return p

    def run_compiled(p: Path) -> list[str]:
        return ["run", str(p), "--executor", "relax", "--compiled"]

    p = compiled_dir("planted-resealed")
    add("trust", "module-planted-sha-resealed", run_compiled(p),
        expect=["module.so", "not compiled by placer"])
    p = compiled_dir("forged-hmac", hmac="0" * 64)
    add("trust", "module-forged-hmac", run_compiled(p), expect=["module.so", "not compiled by placer"])
    other_key = hmac.new(b"someone else's key" * 2, b"x", hashlib.sha256).hexdigest()
    p = compiled_dir("other-users-hmac", hmac=other_key)
    add("trust", "module-hmac-from-another-key", run_compiled(p),
        expect=["module.so", "not compiled by placer"])
    p = compiled_dir("symlink-out", module=None)
    outside = c / "outside_module.so"
    outside.write_bytes(planted)
    _symlink(p / "module.so", outside)
    add("trust", "module-symlink-outside", run_compiled(p), expect=["module.so", "symbolic link"])
    p = compiled_dir("names-other-file", file="../../outside_module.so")
    add("trust", "compiled-json-names-other-file", run_compiled(p),
        expect=["compiled.json", "outside_module.so"])
    p = compiled_dir("duplicate-sha")
    info = json.loads((p / "compiled.json").read_text())
    (p / "compiled.json").write_text(_with_dup(info, "sha256", "0" * 64))
    add("trust", "compiled-json-duplicate-key", run_compiled(p), expect=["compiled.json", "twice"])
    p = compiled_dir("module-is-fifo", module=None, sha256="0" * 64)
    _fifo(p / "module.so")
    add("trust", "module-fifo", run_compiled(p), expect=["module.so", "FIFO"], timeout_s=SHORT)
    p = compiled_dir("world-readable-key")
    key = c / "world_readable.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o644)

    def check(p=p):
        from placer.materialize import load_plan_dir

        load_plan_dir(p).compiled_path()

    add("trust", "trust-key-world-readable", call=with_env(KEY_ENV, str(key), check),
        expect=["trust key", "0600"])
    short = c / "short.key"
    short.write_bytes(b"12345")
    short.chmod(0o600)
    add("trust", "trust-key-too-short", call=with_env(KEY_ENV, str(short), check),
        expect=[short.name, "shorter"])
    fifo_key = _fifo(c / "fifo.key")
    add("trust", "trust-key-a-fifo", call=with_env(KEY_ENV, str(fifo_key), check),
        expect=[fifo_key.name, "regular"],
        timeout_s=SHORT)
    add("trust", "trust-key-a-directory", call=with_env(KEY_ENV, str(c), check), expect=[c.name, "regular"])


# ---------------------------------------------------------------- report: malformed tune directories
def _report(c, base, add):
    def tune_dir(name: str, summary_edit=None, rows_edit=None, *, summary_text=None, rows_text=None) -> Path:
        d = c / "tune" / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        shutil.copyfile(base.tiny, d / "model.onnx")
        summary = {"format": "placer.tune", "version": 1, "objective": "latency", "best": "single:ort",
                   "best_label": "onnxruntime", "best_single": "single:ort", "fell_back": True, "wall_s": 1.5,
                   "study_storage": None, "extra": {"n_trials": 1}, "targets": [PLAN_TARGETS[0]],
                   "model": "tiny"}
        rows = [{"key": "single:ort", "label": "onnxruntime", "kind": "baseline", "knobs": {}, "plan": None,
                 "predicted_ms": 0.5, "measured_ms": 0.4, "p10_ms": 0.39, "p90_ms": 0.42,
                 "throughput_rps": None,
                 "n_partitions": 1, "numerics_ok": True, "max_abs_err": 0.0, "solve_s": 0.0, "error": None,
                 "partitions": [], "final": True}]
        if summary_edit:
            summary_edit(summary)
        if rows_edit:
            rows_edit(rows)
        (d / "tune.json").write_text(summary_text if summary_text is not None else json.dumps(summary))
        (d / "trials.json").write_text(rows_text if rows_text is not None else json.dumps(rows))
        return d

    add(CONTROL, "report-minimal-tune-dir", ["report", str(tune_dir("minimal"))], accept=True)
    d = tune_dir("tune-fifo")
    _fifo(d / "tune.json")
    add("report", "tune.json-fifo", ["report", str(d)], expect=["tune.json", "FIFO"], timeout_s=SHORT)
    d = tune_dir("trials-dev-zero")
    _symlink(d / "trials.json", "/dev/zero")
    add("report", "trials.json-dev-zero", ["report", str(d)],
        expect=["trials.json", "device"], timeout_s=SHORT)
    d = tune_dir("trials-nested", rows_text="[" * 100_000 + "]" * 100_000)
    add("report", "trials.json-nested-100k", ["report", str(d)], expect=["trials.json", "nested"])
    d = tune_dir("tune-duplicate", summary_text='{"best": "a", "best": "single:ort"}')
    add("report", "tune.json-duplicate-key", ["report", str(d)], expect=["tune.json", "best", "twice"])
    d = tune_dir("trials-not-a-list", rows_text='{"key": "single:ort"}')
    add("report", "trials.json-an-object", ["report", str(d)], expect=["trials.json", "list"])
    d = tune_dir("trials-key-a-list", rows_edit=lambda r: r[0].update(key=["single:ort"]))
    add("report", "trials.json-key-a-list", ["report", str(d)], expect=["trials.json", "'key'"])
    d = tune_dir("trials-measured-string", rows_edit=lambda r: r[0].update(measured_ms="fast"))
    add("report", "trials.json-measured-a-string", ["report", str(d)], expect=["measured_ms", "fast"])
    d = tune_dir("trials-unknown-key", rows_edit=lambda r: r[0].update(evil=1))
    add("report", "trials.json-unknown-key", ["report", str(d)], expect=["evil"])
    d = tune_dir("trials-missing-key", rows_edit=lambda r: r[0].pop("kind"))
    add("report", "trials.json-missing-kind", ["report", str(d)], expect=["kind"])
    d = tune_dir("trials-plan-junk", rows_edit=lambda r: r[0].update(plan={"version": 1, "mode": ["x"]}))
    add("report", "trials.json-plan-malformed", ["report", str(d)], expect=["trials.json", "plan"])
    d = tune_dir("tune-objective", summary_edit=lambda s: s.update(objective=5))
    add("report", "tune.json-objective-a-number", ["report", str(d)], expect=["objective"])
    d = tune_dir("tune-objective-word", summary_edit=lambda s: s.update(objective="speed"))
    add("report", "tune.json-objective-unknown", ["report", str(d)], expect=["objective", "speed"])
    d = tune_dir("tune-extra-cm-list", summary_edit=lambda s: s["extra"].update(cost_model=[1, 2]))
    add("report", "tune.json-extra-cost-model-a-list", ["report", str(d)], expect=["tune.json"])
    d = tune_dir("tune-best-missing", summary_edit=lambda s: s.update(best="nowhere"))
    add("report", "tune.json-best-not-in-trials", ["report", str(d)], expect=["tune.json"])
    d = tune_dir("trials-sparse")
    (d / "trials.json").unlink()
    _sparse(d / "trials.json")
    add("report", "trials.json-200mb-sparse", ["report", str(d)], expect=["trials.json", "limit"])
    d = tune_dir("tune-a-directory")
    (d / "tune.json").unlink()
    (d / "tune.json").mkdir()
    add("report", "tune.json-a-directory", ["report", str(d)], expect=["tune.json", "directory"])
    d = tune_dir("label-with-escapes", rows_edit=lambda r: r[0].update(label=ESC_NAME, error=OSC_NAME))
    add("escapes", "report-labels-with-escapes", ["report", str(d)], accept=True)
    d = tune_dir("no-trials")
    (d / "trials.json").unlink()
    add("report", "trials.json-missing", ["report", str(d)], expect=["trials.json"])
