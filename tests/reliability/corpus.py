"""A deterministic corpus of malformed and hostile inputs for placer, generated into a folder.

:func:`build_corpus` (seeded, no network) writes every input under ``root`` and returns a list of
:class:`Case`: the ``placer`` command line that feeds the input to the real CLI (or, for the few
inputs no command reads, an API call), and the names the error message must mention (the file,
op, tensor, target or argument at fault). Nothing binary is committed: the files are made at
test time from :mod:`placer.zoo` models, ``onnx.helper`` graphs and small edits of good files.

:func:`run_case` runs one case in-process and classifies it:

* ``clear``: a non-zero exit with one ``placer ...: error: ...`` line naming every expected name
  and no traceback;
* ``unclear``: a non-zero exit, no traceback, but the message does not name what is wrong;
* ``crash``: an exception escaped ``main`` or a traceback was printed;
* ``hang``: the case ran past its time limit;
* ``accepted``: exit code 0 (the input was wrongly accepted);
* ``escape``: a raw control character (a terminal escape sequence: ESC, CSI, BEL, CR ...) reached
  stdout or stderr, whatever the exit code;
* ``ok``: a case that must be accepted (``accept``: a control, or a legitimate input with hostile
  names, such as op names holding escape sequences) exited 0 and printed no raw control character.

The hostile classes of the second round (non-regular files, parser limits, duplicate keys, numbers
out of range, wrong types, escape sequences, data that must be left intact, untrusted compiled
modules, malformed tune directories) are declared in :mod:`corpus_hostile`; the size and time limits
of the third round (tensors that declare more than they hold, external data, ``$PLACER_MAX_MODEL_MB``,
long 1-D inputs, forged ``--inputs`` archives, problems with many ops or targets) in
:mod:`corpus_limits`.

The base inputs (a good model, plan directory, problem, profile store and cost model) are cases
too, in :data:`CONTROL` category: they must be accepted, which shows the other cases fail
because of their one defect.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import shutil
import signal
import sqlite3
import time
import traceback
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 20240607
CONTROL = "control"
OUTCOMES = ("clear", "ok", "unclear", "crash", "hang", "accepted", "escape")
#: control characters that must never reach the terminal raw (tab and newline are fine)
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x9b]")
FAST_TIMING = {"warmup_s": 0.002, "min_samples": 3, "hard_min_samples": 3, "batch_s": 0.002, "rel_tol": 0.2,
               "min_time_s": 0.002, "max_time_s": 0.02, "max_samples": 50, "contended_attempts": 1}


@dataclass
class Case:
    """One input. ``argv`` runs ``placer ARGV``; ``call`` (no argv) is an API call for inputs no
    command reads; ``expect``: names the error must mention (case-insensitive)."""

    name: str
    category: str
    argv: list[str] | None = None
    call: Callable[[], Any] | None = None
    expect: tuple[str, ...] = ()
    timeout_s: float = 60.0
    accept: bool = False  # must be accepted (a control, or a legitimate input with hostile names)
    #: an ``accept`` case may instead end in a clear error naming all of these: a wall-clock limit
    #: that a loaded machine can spend before the work starts (the outcome must not depend on load)
    tolerate: tuple[str, ...] = ()


@dataclass
class Outcome:
    case: Case
    kind: str  # one of OUTCOMES
    rc: int | None
    message: str
    seconds: float
    detail: str = ""

    def describe(self) -> str:
        return (f"{self.case.category}/{self.case.name}: {self.kind} (rc={self.rc}, {self.seconds:.1f}s) "
                f"expect={list(self.case.expect)}\n  message: {self.message[:400]}\n{self.detail[-1500:]}")


# ============================================================================ running


class CaseTimeout(BaseException):
    """Raised in the main thread by SIGALRM when a case runs past its limit (a BaseException, so
    no ``except Exception`` inside placer swallows it)."""


def _on_alarm(signum, frame):  # pragma: no cover - only on a hang
    raise CaseTimeout()


def _error_line(text: str) -> str:
    """The ``placer CMD: error: ...`` line of stderr (argparse and the CLI both print one)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("placer") and ": error: " in ln:
            return ln
    return lines[-1] if lines else ""


def _clear_error(rc: int | None, line: str, names: tuple[str, ...]) -> bool:
    """Exit code 1 or 2 and a ``placer ...: error: ...`` line naming every one of ``names``."""
    return rc in (1, 2) and ": error: " in line and all(n.lower() in line.lower() for n in names)


def classify(case: Case, rc: int | None, stderr: str, exc: BaseException | None, seconds: float,
             timed_out: bool = False, stdout: str = "") -> Outcome:
    if timed_out:
        return Outcome(case, "hang", rc, "", seconds)
    if exc is not None:
        detail = "".join(traceback.format_exception(exc))
        return Outcome(case, "crash", rc, f"{type(exc).__name__}: {exc}", seconds, detail)
    if "Traceback (most recent call last)" in stderr:
        return Outcome(case, "crash", rc, _error_line(stderr), seconds, stderr)
    raw = RAW_CONTROL.search(stdout + stderr)
    if raw:
        return Outcome(case, "escape", rc, f"raw control character {raw.group(0)!r} printed", seconds,
                       (stdout + stderr)[-1500:])
    line = _error_line(stderr)
    if case.accept:
        tolerated = bool(case.tolerate) and _clear_error(rc, line, case.tolerate)
        return Outcome(case, "ok" if rc == 0 or tolerated else "unclear", rc, line, seconds, stderr)
    if rc == 0:
        return Outcome(case, "accepted", rc, "", seconds)
    if rc is not None and rc < 0:
        return Outcome(case, "crash", rc, f"killed by signal {-rc}", seconds, stderr)
    if _clear_error(rc, line, case.expect):
        return Outcome(case, "clear", rc, line, seconds)
    return Outcome(case, "unclear", rc, line, seconds, stderr)


def run_case(case: Case) -> Outcome:
    """Run one case in this process (``placer.cli.main`` or the API call), classify the result."""
    from placer.cli import main
    from placer.errors import PlacerError

    err, out = io.StringIO(), io.StringIO()
    rc: int | None = None
    exc: BaseException | None = None
    timed_out = False
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, case.timeout_s)
    t0 = time.monotonic()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            if case.argv is not None:
                try:
                    rc = main(list(case.argv))
                except SystemExit as e:  # argparse
                    rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
            else:
                try:
                    case.call()
                    rc = 0
                except PlacerError as e:  # what the CLI would print for it
                    print(f"placer api: error: {e}", file=err)
                    rc = 2
    except CaseTimeout:
        timed_out = True
    except BaseException as e:  # noqa: BLE001 - a crash is an outcome here
        exc = e
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return classify(case, rc, err.getvalue(), exc, time.monotonic() - t0, timed_out, out.getvalue())


# ============================================================================ models


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17, name: str = "g", domains=()) -> onnx.ModelProto:
    g = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(g, opset_imports=ops, ir_version=8, producer_name="reliability-corpus")


def _f32(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _save(model: onnx.ModelProto, path: Path) -> str:
    path.write_bytes(model.SerializeToString())
    return str(path)


def bad_models(rng: np.random.Generator) -> list[tuple[str, str, onnx.ModelProto, tuple[str, ...]]]:
    """(category, name, model, names the error must mention)."""
    F, I64 = TensorProto.FLOAT, TensorProto.INT64
    w = numpy_helper.from_array(_f32(rng, 4, 3, 3, 3), "w")
    out: list[tuple[str, str, onnx.ModelProto, tuple[str, ...]]] = []

    def add(cat, name, model, *expect):
        out.append((cat, name, model, tuple(expect)))

    # ---- structure
    add("graph", "cycle", _model(
        [helper.make_node("Add", ["x", "b"], ["a"], name="n_a"),
         helper.make_node("Relu", ["a"], ["b"], name="n_b"),
         helper.make_node("Relu", ["a"], ["y"], name="n_y")],
        [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])]), "cycle", "n_a")
    add("graph", "self-loop", _model(
        [helper.make_node("Add", ["x", "s"], ["s"], name="selfish"),
         helper.make_node("Relu", ["s"], ["y"], name="r")],
        [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])]), "selfish")
    add("graph", "dangling-input", _model(
        [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")],
        [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])]), "adder", "ghost")
    add("graph", "produced-twice", _model(
        [helper.make_node("Relu", ["x"], ["y"], name="first"), helper.make_node("Sigmoid", ["x"], ["y"], name="second")],
        [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])]), "'y'", "first", "second")
    add("graph", "output-not-produced", _model(
        [helper.make_node("Relu", ["x"], ["t"], name="r")],
        [_vi("x", F, [1, 4])], [_vi("nowhere", F, [1, 4])]), "nowhere")
    add("graph", "node-writes-initializer", _model(
        [helper.make_node("Relu", ["x"], ["k"], name="clobber"), helper.make_node("Add", ["k", "k"], ["y"], name="a")],
        [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])], [numpy_helper.from_array(_f32(rng, 1, 4), "k")]),
        "clobber", "'k'")
    add("graph", "no-outputs", _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", F, [1, 4])], []),
        "no outputs")
    add("graph", "no-ops", _model([], [_vi("x", F, [1, 4])], [_vi("x", F, [1, 4])]), "no ops")
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])])
    m.ir_version = 0
    add("onnx", "ir-version-0", m, "ir_version")
    m = onnx.ModelProto()
    m.ir_version = 8
    add("onnx", "no-graph", m, "no graph")
    add("graph", "input-is-a-sequence", _model(
        [helper.make_node("SequenceLength", ["x"], ["y"], name="len")],
        [helper.make_tensor_sequence_value_info("x", F, [1, 4])], [_vi("y", I64, [])]), "'x'", "not a tensor")
    # ---- dtypes
    add("dtype", "conv-on-int64", _model(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv_i64", kernel_shape=[3, 3])],
        [_vi("x", I64, [1, 3, 8, 8])], [_vi("y", I64, [1, 4, 6, 6])],
        [numpy_helper.from_array(rng.integers(0, 3, (4, 3, 3, 3)).astype(np.int64), "w")]), "conv_i64")
    add("dtype", "add-float-int64", _model(
        [helper.make_node("Add", ["x", "k"], ["y"], name="mixed_add")],
        [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])], [numpy_helper.from_array(np.ones((1, 4), np.int64), "k")]),
        "mixed_add")
    add("dtype", "matmul-float-double", _model(
        [helper.make_node("MatMul", ["x", "k"], ["y"], name="mm")],
        [_vi("x", F, [1, 4])], [_vi("y", F, [1, 2])], [numpy_helper.from_array(np.ones((4, 2), np.float64), "k")]),
        "mm")
    add("dtype", "relu-on-string", _model(
        [helper.make_node("Relu", ["x"], ["y"], name="srelu")],
        [_vi("x", TensorProto.STRING, [1, 4])], [_vi("y", TensorProto.STRING, [1, 4])]), "srelu")
    add("dtype", "input-without-dtype", _model(
        [helper.make_node("Relu", ["x"], ["y"], name="r")],
        [_vi("x", TensorProto.UNDEFINED, [1, 4])], [_vi("y", F, [1, 4])]), "'x'")
    add("dtype", "conv-weights-float16", _model(
        [helper.make_node("Conv", ["x", "w16"], ["y"], name="conv_f16", kernel_shape=[3, 3])],
        [_vi("x", F, [1, 3, 8, 8])], [_vi("y", F, [1, 4, 6, 6])],
        [numpy_helper.from_array(_f32(rng, 4, 3, 3, 3).astype(np.float16), "w16")]), "conv_f16")
    add("dtype", "cast-to-undefined", _model(
        [helper.make_node("Cast", ["x"], ["y"], name="bad_cast", to=0)],
        [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])]), "bad_cast")
    # ---- dims
    conv = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3])]
    add("dims", "negative-dim", _model(conv, [_vi("x", F, [1, 3, -5, 8])], [_vi("y", F, None)], [w]), "'x'")
    add("dims", "zero-dim", _model(conv, [_vi("x", F, [0, 3, 8, 8])], [_vi("y", F, None)], [w]), "'x'")
    add("dims", "2^40-elements", _model(
        [helper.make_node("Relu", ["x"], ["y"], name="huge_relu")],
        [_vi("x", F, [1024, 1024, 1024, 1024])], [_vi("y", F, None)]), "'x'")
    add("dims", "2^62-dim", _model(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", F, [2 ** 62, 4])], [_vi("y", F, None)]), "'x'")
    add("dims", "symbolic-unbound", _model(conv, [_vi("x", F, ["N", 3, 8, 8])], [_vi("y", F, None)], [w]),
        "'x'", "--shape")
    add("dims", "unknown-rank", _model(conv, [helper.make_tensor_value_info("x", F, None)], [_vi("y", F, None)], [w]),
        "'x'")
    add("dims", "reshape-to-2^50", _model(
        [helper.make_node("Expand", ["x", "shp"], ["y"], name="blowup")],
        [_vi("x", F, [1, 1])], [_vi("y", F, None)],
        [numpy_helper.from_array(np.array([2 ** 25, 2 ** 25], np.int64), "shp")]), "blowup")
    add("dims", "kernel-bigger-than-input", _model(conv, [_vi("x", F, [1, 3, 2, 2])], [_vi("y", F, None)], [w]),
        "conv")
    add("dims", "conv-channel-mismatch", _model(conv, [_vi("x", F, [1, 5, 8, 8])], [_vi("y", F, None)], [w]),
        "conv")
    add("dims", "matmul-inner-mismatch", _model(
        [helper.make_node("MatMul", ["x", "k"], ["y"], name="mm_bad")], [_vi("x", F, [2, 3])], [_vi("y", F, None)],
        [numpy_helper.from_array(_f32(rng, 4, 5), "k")]), "mm_bad")
    # ---- ops
    add("ops", "custom-domain-op", _model(
        [helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example.custom")],
        [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])], domains=["com.example.custom"]), "frob", "Frobnicate")
    add("ops", "custom-domain-op-typed-output", _model(
        [helper.make_node("Frobnicate", ["x"], ["t"], name="frob2", domain="com.example.custom"),
         helper.make_node("Relu", ["t"], ["y"], name="after")],
        [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])], domains=["com.example.custom"]), "frob2", "Frobnicate")
    add("ops", "unknown-default-domain-op", _model(
        [helper.make_node("NoSuchOp", ["x"], ["y"], name="nosuch")], [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])]),
        "NoSuchOp")
    add("ops", "opset-from-the-future", _model(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", F, [1, 4])], [_vi("y", F, [1, 4])], opset=999),
        "opset")
    add("ops", "missing-required-input", _model(
        [helper.make_node("Gather", ["x"], ["y"], name="gather1")], [_vi("x", F, [3, 4])], [_vi("y", F, None)]),
        "gather1")
    add("ops", "bad-attribute", _model(
        [helper.make_node("Softmax", ["x"], ["y"], name="smax", axis=7)], [_vi("x", F, [1, 4])], [_vi("y", F, None)]),
        "smax")
    return out


# ============================================================================ fixtures


@dataclass
class Base:
    """The good inputs the corpus edits (built once per session by :func:`build_base`)."""

    root: Path
    tiny: str  # zoo tiny_branchy, seed 0 (input "x" [1,3,8,8])
    tiny_sym: str  # tiny with a symbolic batch dim "N"
    plan_dir: Path  # materialized plan of tiny (3 partitions on two onnxruntime targets), solver Plan JSON
    plan_dir_seed1: Path  # the same plan for tiny re-weighted with seed 1 (same op and tensor names)
    plan_dir_other: Path  # a plan of another model (a 2-op chain)
    problem: Path  # a good problem JSON
    store: Path  # a profile store with tiny on onnxruntime
    costmodel: Path  # a cost model fitted on ``store`` (placer fit)
    db: Path  # scratch store for commands that would profile
    extra: dict[str, Any] = field(default_factory=dict)


PLAN_TARGETS = ("onnxruntime@cpu:t1", "onnxruntime@cpu:t2")


def _tiny_plan(graph):
    """A latency Plan of ``graph`` (tiny_branchy): conv_a on the t2 target, the rest on t1."""
    from placer.costing import graph_tensors
    from placer.problem import PlacementProblem
    from placer.solve.evaluate import make_plan

    ops = [op.id for op in graph.ops]
    problem = PlacementProblem(
        ops=ops, targets=list(PLAN_TARGETS), cost_ms=np.full((len(ops), 2), 0.01), tensors=graph_tensors(graph),
        provenance={"model": graph.name, "model_hash": graph.model_hash, "targets": list(PLAN_TARGETS)})
    assign = np.array([1 if o == "conv_a" else 0 for o in ops])
    return make_plan(problem, "latency", assign, "manual")


def _chain_model(rng) -> onnx.ModelProto:
    F = TensorProto.FLOAT
    return _model([helper.make_node("Relu", ["x"], ["t"], name="r0"), helper.make_node("Sigmoid", ["t"], ["y"], name="s1")],
                  [_vi("x", F, [1, 3, 8, 8])], [_vi("y", F, [1, 3, 8, 8])], name="chain")


def build_base(root: Path) -> Base:
    """Write the good inputs under ``root/base`` (a tiny model, plan dirs, problem, store, cost model)."""
    from placer import zoo
    from placer.graph import load_graph
    from placer.materialize import materialize
    from placer.profile import ProfileStore, TimingConfig, profile_graph

    rng = np.random.default_rng(SEED)
    b = root / "base"
    b.mkdir(parents=True, exist_ok=True)
    tiny = _save(zoo.tiny_branchy(0), b / "tiny.onnx")
    sym = zoo.tiny_branchy(0)
    sym.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    sym.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    tiny_sym = _save(sym, b / "tiny_sym.onnx")

    def plan_dir(model, name):
        g = load_graph(model)
        mat = materialize(g, _tiny_plan(g) if g.name == "tiny_branchy" else {o.id: PLAN_TARGETS[0] for o in g.ops},
                          relax=False)
        return mat.save(b / name, relax=False)

    pd = plan_dir(zoo.tiny_branchy(0), "plan_tiny")
    pd1 = plan_dir(zoo.tiny_branchy(1), "plan_tiny_seed1")
    pdo = plan_dir(_chain_model(rng), "plan_chain")

    problem = b / "problem.json"
    problem.write_text(json.dumps(good_problem(), indent=1))

    store = b / "store.db"
    g = load_graph(tiny)
    profile_graph(g, ["onnxruntime"], str(store), progress=False, links=False, whole_model=True,
                  timing=TimingConfig(**FAST_TIMING), timeout_s=60)
    with ProfileStore(store) as st:
        assert st.integrity_check() == "ok"
    cm = b / "costmodel"
    from placer.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(["fit", "--db", str(store), "--out", str(cm), "--cv-folds", "0"])  # its metrics unread
    assert rc == 0, "placer fit failed on the base store"
    db = b / "scratch.db"
    shutil.copyfile(store, db)
    return Base(b, tiny, tiny_sym, pd, pd1, pdo, problem, store, cm, db)


def good_problem() -> dict:
    return {
        "version": 1,
        "ops": ["conv", "lrn", "fc"],
        "targets": ["onnxruntime@cpu:t1", "openvino@cpu1:t1"],
        "cost_ms": {"conv": {"onnxruntime@cpu:t1": 1.2, "openvino@cpu1:t1": 0.95},
                    "lrn": {"onnxruntime@cpu:t1": 2.0, "openvino@cpu1:t1": 0.1},
                    "fc": {"onnxruntime@cpu:t1": 0.3}},
        "tensors": [{"name": "input", "producer": None, "consumers": ["conv"], "nbytes": 602112},
                    {"name": "conv_y", "producer": "conv", "consumers": ["lrn", "fc"], "nbytes": 802816},
                    {"name": "lrn_y", "producer": "lrn", "consumers": ["fc"], "nbytes": 802816},
                    {"name": "output", "producer": "fc", "consumers": [], "nbytes": 4000}],
        "links": {"latency_ms": 0.02, "ms_per_byte": 2e-8, "charge": "both"},
        "memory_cap_bytes": {"openvino@cpu1:t1": 2000000000},
        "weight_bytes": {"conv": 37632, "fc": 4096000},
        "pinned": {"fc": "onnxruntime@cpu:t1"},
        "colocate": [],
        "partition_overhead_ms": {"onnxruntime@cpu:t1": 0.003, "openvino@cpu1:t1": 0.008},
    }


# ============================================================================ the corpus


def _json_edit(src: Path, dst: Path, fn: Callable[[Any], Any]) -> Path:
    """``fn`` edits the parsed JSON in place (its return value is ignored)."""
    data = json.loads(src.read_text())
    fn(data)
    dst.write_text(json.dumps(data, indent=1, allow_nan=True))
    return dst


def _copy_dir(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst


def _partitions(cfg: dict) -> list[dict]:
    return [p for s in cfg["stages"] for p in s["partitions"]]


def build_corpus(root: Path, base: Base, seed: int = SEED) -> list[Case]:
    """Every malformed / hostile input, written under ``root/corpus``; see the module docstring."""
    rng = np.random.default_rng(seed)
    c = root / "corpus"
    c.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []
    tiny_bytes = Path(base.tiny).read_bytes()

    def plan_cmd(model: str, *extra: str) -> list[str]:
        return ["plan", model, "--targets", "onnxruntime", "--db", str(base.db), "--solver", "greedy", *extra]

    def add(category, name, argv=None, *, expect=(), call=None, timeout_s=60.0, accept=False, tolerate=()):
        cases.append(Case(name, category, argv, call, tuple(expect), timeout_s, accept, tuple(tolerate)))

    # ---------------------------------------------------------------- controls (must be accepted)
    add(CONTROL, "tiny-model", plan_cmd(base.tiny), accept=True)
    add(CONTROL, "tiny-symbolic-bound", plan_cmd(base.tiny_sym, "--shape", "x=1x3x8x8"), accept=True)
    add(CONTROL, "plan-dir-runs-and-checks", ["run", str(base.plan_dir), "--check"], accept=True)
    add(CONTROL, "plan-dir-show", ["show", str(base.plan_dir)], accept=True)
    add(CONTROL, "problem-json", ["plan", "--problem", str(base.problem), "--solver", "greedy"], accept=True)
    add(CONTROL, "store-fits", ["fit", "--db", str(base.store), "--out", str(c / "control-cm")], accept=True)

    def load_cm(d):
        from costmodels.cost_model import load_cost_model

        return lambda: load_cost_model(d)

    add(CONTROL, "costmodel-loads", call=load_cm(base.costmodel), accept=True)

    # ---------------------------------------------------------------- ONNX files
    f = c / "empty.onnx"
    f.write_bytes(b"")
    add("onnx", "empty-file", plan_cmd(str(f)), expect=[f.name, "empty"])
    d = c / "a_directory.onnx"
    d.mkdir(exist_ok=True)
    add("onnx", "directory", plan_cmd(str(d)), expect=[d.name, "directory"])
    add("onnx", "missing-file", plan_cmd(str(c / "nope.onnx")), expect=["nope.onnx", "not found"])
    for n in (1, 7, 64, 1000, 20000):
        f = c / f"random_{n}.onnx"
        f.write_bytes(rng.bytes(n))
        add("onnx", f"random-bytes-{n}", plan_cmd(str(f)), expect=[f.name])
    for frac in (0.02, 0.1, 0.33, 0.5, 0.77, 0.97):
        f = c / f"truncated_{int(frac * 100)}.onnx"
        f.write_bytes(tiny_bytes[: int(len(tiny_bytes) * frac)])
        add("onnx", f"truncated-{int(frac * 100)}pct", plan_cmd(str(f)), expect=[f.name])
    f = c / "json.onnx"
    f.write_text(json.dumps({"graph": {"node": []}}))
    add("onnx", "json-text", plan_cmd(str(f)), expect=[f.name])
    f = c / "tensor_proto.onnx"
    f.write_bytes(numpy_helper.from_array(np.ones(4, np.float32), "t").SerializeToString())
    add("onnx", "tensor-proto-not-model", plan_cmd(str(f)), expect=[f.name])
    f = c / "zip.onnx"
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("model.onnx", tiny_bytes)
    add("onnx", "zip-archive", plan_cmd(str(f)), expect=[f.name])
    f = c / "pickle.onnx"
    f.write_bytes(pickle.dumps({"evil": "os.system"}))
    add("onnx", "pickle-payload", plan_cmd(str(f)), expect=[f.name])
    ext = zoo_external(c, base)
    add("onnx", "external-data-missing", plan_cmd(str(ext)), expect=[ext.name])
    add("onnx", "zoo-unknown", plan_cmd("zoo:nosuchmodel"), expect=["nosuchmodel"])
    for cat, name, model, expect in bad_models(rng):
        f = c / f"{name}.onnx"
        _save(model, f)
        add(cat, name, plan_cmd(str(f)), expect=[f.name, *expect])

    # ---------------------------------------------------------------- CLI arguments
    t = base.tiny
    for item, exp in [("x", "--shape"), ("x=", "--shape"), ("x=1xAx8x8", "--shape"), ("=1x3x8x8", "--shape"),
                      ("x=1x3x8x8x", "--shape"), ("x=-1x3x8x8", "'x'"), ("x=0x3x8x8", "'x'"),
                      ("nosuch=1x3x8x8", "nosuch"), ("x=1x3x8", "'x'"), ("x=99999999999999999999x3x8x8", "'x'")]:
        add("args", f"shape[{item}]", plan_cmd(base.tiny_sym, "--shape", item), expect=[exp])
    add("args", "shape-conflicts-static", plan_cmd(t, "--shape", "x=2x3x8x8"), expect=["'x'"])
    for tg, exp in [("nosuch", "nosuch"), ("onnxruntime@gpu0", "onnxruntime@gpu0"), ("onnxruntime:t0", "onnxruntime:t0"),
                    ("onnxruntime@cpu999", "999"), ("onnxruntime,onnxruntime", "onnxruntime"), (",,,", "--targets"),
                    ("ONNXRUNTIME", "ONNXRUNTIME"), ("sim:nosuchspec/dev", "nosuchspec"),
                    ("onnxruntime;rm -rf /", "rm -rf")]:
        add("args", f"targets[{tg}]", ["plan", t, "--targets", tg, "--db", str(base.db), "--solver", "greedy"],
            expect=[exp])
    tune_out = str(c / "tune-out")
    for bud in ("abc", "", "-5m", "0", "nan", "inf", "10x", "1e999", "m"):
        add("args", f"budget[{bud}]", ["tune", t, "--targets", "onnxruntime", "--db", str(base.db), "--out", tune_out,
                                       "--budget", bud], expect=["--budget"])
    for n in ("0", "-3"):
        add("args", f"trials[{n}]", ["tune", t, "--targets", "onnxruntime", "--db", str(base.db), "--out", tune_out,
                                     "--trials", n], expect=["--trials"])
    add("args", "tune-objective", ["tune", t, "--objective", "speed"], expect=["--objective"])
    add("args", "plan-solver-unknown", ["plan", "--problem", str(base.problem), "--solver", "nosuchsolver"],
        expect=["nosuchsolver"])
    for tl in ("-1", "nan", "inf"):
        add("args", f"time-limit[{tl}]", ["plan", "--problem", str(base.problem), "--time-limit", tl],
            expect=["time_limit", tl])
    add("args", "stages[0]", ["plan", "--problem", str(base.problem), "--mode", "pipeline", "--stages", "0"],
        expect=["num_stages", "0"])
    add("args", "stages[-2]", ["plan", "--problem", str(base.problem), "--mode", "pipeline", "--stages", "-2"],
        expect=["num_stages", "-2"])
    pd = str(base.plan_dir)
    for opt, val in [("--requests", "0"), ("--requests", "-5"), ("--warmup", "-1"), ("--rtol", "nan"),
                     ("--rtol", "-1"), ("--atol", "nan")]:
        add("args", f"run{opt}[{val}]", ["run", pd, opt, val], expect=[opt.lstrip("-"), val])
    for val in ("0", "-1", "nan"):
        add("args", f"profile--timeout[{val}]", ["profile", t, "--targets", "onnxruntime", "--db", str(base.db),
                                                 "--quiet", "--timeout", val], expect=["--timeout"])
    add("args", "profile--segments[-1]", ["profile", t, "--targets", "onnxruntime", "--db", str(base.db), "--quiet",
                                         "--segments", "-1"], expect=["--segments"])
    add("args", "unknown-command", ["frobnicate"], expect=["frobnicate"])
    a_file = c / "a_file.txt"
    a_file.write_text("not a directory\n")
    nodir = c / "no" / "such" / "dir"
    add("args", "plan--out-in-missing-dir", ["plan", "--problem", str(base.problem), "--solver", "greedy",
                                            "--out", str(nodir / "p.json")], expect=["p.json"])
    add("args", "plan--out-is-a-directory", ["plan", "--problem", str(base.problem), "--solver", "greedy",
                                            "--out", str(c)], expect=[c.name])
    add("args", "run--json-in-missing-dir", ["run", str(base.plan_dir), "--json", str(nodir / "m.json")],
        expect=["m.json"])
    add("args", "fit--out-is-a-file", ["fit", "--db", str(base.store), "--out", str(a_file)], expect=[a_file.name])
    add("args", "tune--out-is-a-file", ["tune", t, "--targets", "onnxruntime", "--db", str(base.db), "--trials", "1",
                                        "--out", str(a_file)], expect=[a_file.name])
    add("args", "tune--storage-bad-url", ["tune", t, "--targets", "onnxruntime", "--db", str(base.db), "--trials", "1",
                                          "--out", tune_out, "--storage", "nosuchdialect://x"], expect=["--storage"])
    add("args", "tune--storage-missing-dir", ["tune", t, "--targets", "onnxruntime", "--db", str(base.db), "--trials",
                                              "1", "--out", tune_out, "--storage", f"sqlite:///{nodir}/study.db"],
        expect=["--storage"])
    add("args", "profile--db-in-missing-dir", ["profile", t, "--targets", "onnxruntime", "--db", str(nodir / "p.db"),
                                               "--quiet"], expect=["p.db"])
    add("args", "plan--db-is-a-directory", ["plan", t, "--targets", "onnxruntime", "--db", str(c), "--solver", "greedy"],
        expect=[c.name])

    # ---------------------------------------------------------------- --inputs for run
    add("inputs", "seed-not-int", ["run", pd, "--inputs", "seed:abc"], expect=["seed:abc"])
    add("inputs", "missing-file", ["run", pd, "--inputs", str(c / "nope.npz")], expect=["nope.npz"])
    f = c / "not_a_zip.npz"
    f.write_bytes(rng.bytes(300))
    add("inputs", "not-an-npz", ["run", pd, "--inputs", str(f)], expect=[f.name])
    f = c / "pickled.npz"
    np.savez(f, x=np.array([{"evil": 1}], dtype=object))
    add("inputs", "pickled-object-array", ["run", pd, "--inputs", str(f)], expect=[f.name, "object"])
    f = c / "wrong_name.npz"
    np.savez(f, z=np.zeros((1, 3, 8, 8), np.float32))
    add("inputs", "no-array-for-input", ["run", pd, "--inputs", str(f)], expect=["'x'"])
    f = c / "wrong_shape.npz"
    np.savez(f, x=np.zeros((1, 3, 9, 9), np.float32))
    add("inputs", "wrong-shape", ["run", pd, "--inputs", str(f)], expect=["'x'"])
    f = c / "wrong_dtype.npz"
    np.savez(f, x=np.zeros((1, 3, 8, 8), np.int64))
    add("inputs", "wrong-dtype", ["run", pd, "--inputs", str(f)], expect=["'x'", "int64"])
    f = c / "single.npy"
    np.save(f, np.zeros((1, 3, 8, 8), np.float32))
    add("inputs", "npy-not-npz", ["run", pd, "--inputs", str(f)], expect=[f.name])
    add("inputs", "a-directory", ["run", pd, "--inputs", str(c)], expect=[c.name])
    f = c / "empty.npz"
    np.savez(f)
    add("inputs", "empty-npz", ["run", pd, "--inputs", str(f)], expect=["'x'"])
    f = c / "batched_empty.npz"
    np.savez(f, x=np.zeros((0, 1, 3, 8, 8), np.float32))
    add("inputs", "zero-requests", ["run", pd, "--inputs", str(f)], expect=[f.name])

    # ---------------------------------------------------------------- plan directories
    def pdir(name: str) -> Path:
        return _copy_dir(base.plan_dir, c / "plans" / name)

    def run_cmd(p: Path) -> list[str]:
        return ["run", str(p), "--check"]

    add("plan_dir", "not-a-directory", run_cmd(Path(base.tiny)), expect=["tiny.onnx"])
    add("plan_dir", "missing-directory", run_cmd(c / "plans" / "nope"), expect=["nope"])
    p = pdir("model-swapped")
    shutil.copyfile(base.plan_dir_other / "model.onnx", p / "model.onnx")
    add("plan_dir", "model-swapped-for-another", run_cmd(p), expect=["hash"])
    p = pdir("model-swapped-same-names")
    shutil.copyfile(base.plan_dir_seed1 / "model.onnx", p / "model.onnx")
    add("plan_dir", "model-swapped-same-op-names", run_cmd(p), expect=["hash"])
    p = pdir("model+config-swapped")
    for name in ("model.onnx", "stage_config.json"):
        shutil.copyfile(base.plan_dir_seed1 / name, p / name)
    add("plan_dir", "model+stage-config-swapped", run_cmd(p), expect=["plan.json", "model"])
    p = pdir("model+config+partitions-swapped")
    shutil.rmtree(p / "partitions")
    shutil.copytree(base.plan_dir_seed1 / "partitions", p / "partitions")
    for name in ("model.onnx", "stage_config.json"):
        shutil.copyfile(base.plan_dir_seed1 / name, p / name)
    add("plan_dir", "everything-but-plan-json-swapped", run_cmd(p), expect=["plan.json", "model"])
    p = pdir("model-missing")
    (p / "model.onnx").unlink()
    add("plan_dir", "model-missing", run_cmd(p), expect=["model.onnx"])
    p = pdir("model-truncated")
    (p / "model.onnx").write_bytes((p / "model.onnx").read_bytes()[:200])
    add("plan_dir", "model-truncated", run_cmd(p), expect=["model.onnx"])
    p = pdir("model-random")
    (p / "model.onnx").write_bytes(rng.bytes(5000))
    add("plan_dir", "model-random-bytes", run_cmd(p), expect=["model.onnx"])
    p = pdir("model-is-dir")
    (p / "model.onnx").unlink()
    (p / "model.onnx").mkdir()
    add("plan_dir", "model-is-a-directory", run_cmd(p), expect=["model.onnx"])
    p = pdir("partition-swapped")
    parts = sorted((p / "partitions").glob("*.onnx"))
    a, b_ = parts[0].read_bytes(), parts[1].read_bytes()
    parts[0].write_bytes(b_)
    parts[1].write_bytes(a)
    add("plan_dir", "partition-files-swapped", run_cmd(p), expect=["partition", parts[0].stem.split("_")[0]])
    p = pdir("partition-from-seed1")
    src = min((base.plan_dir_seed1 / "partitions").glob("p0_*.onnx"))
    shutil.copyfile(src, p / "partitions" / src.name)
    add("plan_dir", "partition-from-other-weights", ["run", str(p)], expect=["p0"])
    p = pdir("partition-missing")
    min((p / "partitions").glob("p1_*.onnx")).unlink()
    add("plan_dir", "partition-file-missing", run_cmd(p), expect=["p1"])
    p = pdir("partition-garbage")
    min((p / "partitions").glob("p1_*.onnx")).write_bytes(rng.bytes(777))
    add("plan_dir", "partition-file-random-bytes", run_cmd(p), expect=["p1"])
    p = pdir("partition-empty")
    min((p / "partitions").glob("p2_*.onnx")).write_bytes(b"")
    add("plan_dir", "partition-file-empty", run_cmd(p), expect=["p2"])
    add("plan_dir", "show-model-swapped", ["show", str(c / "plans" / "model-swapped")], expect=["hash"])

    # ---------------------------------------------------------------- plan.json edits
    def plan_edit(name, fn, expect, text=None):
        p = pdir(f"planjson-{name}")
        if text is not None:
            (p / "plan.json").write_text(text)
        else:
            _json_edit(p / "plan.json", p / "plan.json", fn)
        add("plan_json", name, run_cmd(p), expect=["plan", *expect])

    plan_edit("not-json", None, ["plan.json"], text="{ this is not json")
    p = pdir("planjson-binary")
    (p / "plan.json").write_bytes(b"\x80\xff" + rng.bytes(200))
    add("plan_json", "binary", run_cmd(p), expect=["plan.json"])
    plan_edit("empty", None, ["plan.json"], text="")
    plan_edit("a-list", None, ["plan.json"], text="[1, 2, 3]")
    plan_edit("bad-version", lambda d: d.update(version=99), ["version"])
    plan_edit("version-string", lambda d: d.update(version="1"), ["version"])
    plan_edit("nan-makespan", lambda d: d.update(makespan_ms=float("nan")), ["makespan"])
    plan_edit("negative-makespan", lambda d: d.update(makespan_ms=-3.0), ["makespan"])
    plan_edit("inf-op-cost", lambda d: d["op_cost_ms"].update(conv0=float("inf")), ["conv0"])
    plan_edit("missing-assignment", lambda d: d.pop("assignment"), ["assignment"])
    plan_edit("missing-stats", lambda d: d.pop("stats"), ["stats"])
    plan_edit("missing-end-ms", lambda d: d.pop("end_ms"), ["end_ms"])
    plan_edit("assignment-not-a-dict", lambda d: d.update(assignment=["conv0"]), ["assignment"])
    plan_edit("op-missing", lambda d: d["assignment"].pop("fc"), ["fc"])
    plan_edit("unknown-op", lambda d: d["assignment"].update(ghost_op=PLAN_TARGETS[0]), ["ghost_op"])
    plan_edit("op-on-unknown-target", lambda d: d["assignment"].update(fc="nosuchkind@cpu:t1"), ["fc"])
    plan_edit("op-on-malformed-target", lambda d: d["assignment"].update(fc="!!bad!!"), ["!!bad!!"])
    plan_edit("op-moved-to-other-target", lambda d: d["assignment"].update(fc=PLAN_TARGETS[1]), ["fc"])
    plan_edit("model-hash-edited", lambda d: d["provenance"].update(model_hash="0" * 64), ["model"])
    plan_edit("targets-edited", lambda d: d.update(targets=["openvino@cpu1:t1"]), ["target"])
    plan_edit("stage-of-pipeline-junk", lambda d: d.update(mode="pipeline", stage={"conv0": "x"}), ["stage"])

    # ---------------------------------------------------------------- stage_config.json edits
    def cfg_edit(name, fn, expect, text=None):
        p = pdir(f"cfg-{name}")
        if text is not None:
            (p / "stage_config.json").write_text(text)
        else:
            _json_edit(p / "stage_config.json", p / "stage_config.json", fn)
        add("stage_config", name, run_cmd(p), expect=[*expect])

    def rename_tensor(d):
        ps = _partitions(d)
        ps[-1]["inputs"][0] = "t9_ghost"

    def tensor_shape(d):
        d["tensors"]["x"]["shape"] = [1, 3, 80, 80]

    def tensor_dtype(d):
        d["tensors"]["x"]["dtype"] = "int64"

    def tensor_key(d):
        d["tensors"]["ghost_tensor"] = d["tensors"].pop("x")

    def op_twice(d):
        ps = _partitions(d)
        ps[1]["ops"] = ps[1]["ops"] + [ps[0]["ops"][0]]

    def op_dropped(d):
        ps = _partitions(d)
        ps[0]["ops"] = ps[0]["ops"][1:] or ps[0]["ops"]

    def target_edit(d):
        ps = _partitions(d)
        ps[1]["target"] = "nosuchkind@cpu:t1"

    def runtime_edit(d):
        ps = _partitions(d)
        ps[0]["runtime"] = "tvm"

    def file_escape(d):
        ps = _partitions(d)
        ps[0]["file"] = "../../../../../../etc/passwd"

    def file_absolute(d):
        ps = _partitions(d)
        ps[0]["file"] = base.tiny

    def cores_edit(d):
        d["stages"][0]["cores"] = [4096]

    def threads_edit(d):
        d["stages"][0]["threads"] = 100000

    def connection_backwards(d):
        d["connections"].reverse()
        for cn in d["connections"]:
            if "partition" in cn["src"] and "partition" in cn["dst"]:
                cn["src"], cn["dst"] = dict(cn["dst"]), dict(cn["src"])
                break

    def connection_dropped(d):
        d["connections"] = [cn for cn in d["connections"] if "model_output" not in cn["dst"]]

    cfg_edit("not-json", None, ["stage_config.json"], text="nope{")
    p = pdir("cfg-binary")
    (p / "stage_config.json").write_bytes(b"\x80\xff" + rng.bytes(200))
    add("stage_config", "binary", run_cmd(p), expect=["stage_config.json"])
    cfg_edit("bad-format", lambda d: d.update(format="something.else"), ["format"])
    cfg_edit("version-99", lambda d: d.update(version=99), ["version"])
    cfg_edit("model-hash", lambda d: d["model"].update(hash="deadbeef"), ["hash"])
    cfg_edit("partition-input-renamed", rename_tensor, ["t9_ghost"])
    cfg_edit("tensor-shape-edited", tensor_shape, ["'x'"])
    cfg_edit("tensor-dtype-edited", tensor_dtype, ["'x'"])
    cfg_edit("tensor-renamed", tensor_key, ["ghost_tensor"])
    cfg_edit("op-in-two-partitions", op_twice, ["conv0"])
    cfg_edit("op-dropped", op_dropped, ["conv0"])
    cfg_edit("partition-on-unknown-target", target_edit, ["nosuchkind"])
    cfg_edit("runtime-edited", runtime_edit, ["p0", "runtime"])
    cfg_edit("file-escapes-dir", file_escape, ["p0", "etc/passwd"])
    cfg_edit("file-absolute", file_absolute, ["p0", "tiny.onnx"])
    cfg_edit("cores-absurd", cores_edit, ["cores"])
    cfg_edit("threads-absurd", threads_edit, ["threads"])
    cfg_edit("connection-backwards", connection_backwards, ["connection"])
    cfg_edit("stage-target-edited", lambda d: d["stages"][0].update(target="openvino@cpu1:t1"), ["stage 0"])
    cfg_edit("model-output-undelivered", connection_dropped, ["'y'"])
    cfg_edit("extra-key", lambda d: d.update(evil={"exec": "rm -rf"}), ["evil"])

    # ---------------------------------------------------------------- problem JSON
    def prob(name, fn=None, expect=(), text=None, extra=()):
        f = c / "problems" / f"{name}.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        if text is not None:
            f.write_text(text)
        else:
            data = good_problem()
            fn(data)
            f.write_text(json.dumps(data, allow_nan=True))
        add("problem", name, ["plan", "--problem", str(f), "--solver", "greedy", *extra], expect=[*expect])

    def tensors(d):
        return {x["name"]: x for x in d["tensors"]}

    prob("not-json", text="{{{{", expect=["not-json.json"])
    prob("empty", text="", expect=["empty.json"])
    prob("a-list", text="[]", expect=["a-list.json"])
    prob("latin1-text", text=rng.bytes(256).decode("latin-1"), expect=["latin1-text.json"])
    f = c / "problems" / "invalid-utf8.json"
    f.write_bytes(b"\x80\xff" + rng.bytes(100))
    add("problem", "invalid-utf8", ["plan", "--problem", str(f), "--solver", "greedy"], expect=[f.name])
    d = c / "problems" / "a-directory.json"
    d.mkdir(exist_ok=True)
    add("problem", "directory", ["plan", "--problem", str(d), "--solver", "greedy"], expect=[d.name])
    prob("bad-version", lambda d: d.update(version=2), ["version"])
    prob("missing-ops", lambda d: d.pop("ops"), ["ops"])
    prob("missing-cost", lambda d: d.pop("cost_ms"), ["cost_ms"])
    prob("unknown-key", lambda d: d.update(memory_caps={}), ["memory_caps"])
    prob("negative-cost", lambda d: d["cost_ms"]["lrn"].update({"openvino@cpu1:t1": -1.0}), ["lrn", "openvino"])
    prob("nan-cost", lambda d: d["cost_ms"]["conv"].update({"onnxruntime@cpu:t1": float("nan")}), ["conv"])
    prob("string-cost", lambda d: d["cost_ms"]["conv"].update({"onnxruntime@cpu:t1": "fast"}), ["conv"])
    prob("op-supported-nowhere", lambda d: d["cost_ms"].update(fc={}), ["fc"])
    prob("cost-unknown-op", lambda d: d["cost_ms"].update(ghost={"onnxruntime@cpu:t1": 1}), ["ghost"])
    prob("cost-unknown-target", lambda d: d["cost_ms"]["fc"].update(tpu=1.0), ["tpu"])
    prob("cost-rows-wrong-shape", lambda d: d.update(cost_ms=[[1.0, 2.0]]), ["cost_ms"])
    prob("tensor-unknown-producer", lambda d: tensors(d)["lrn_y"].update(producer="ghost_op"), ["ghost_op", "lrn_y"])
    prob("tensor-unknown-consumer", lambda d: tensors(d)["conv_y"].update(consumers=["lrn", "phantom"]),
         ["phantom", "conv_y"])
    prob("tensor-negative-bytes", lambda d: tensors(d)["conv_y"].update(nbytes=-8), ["conv_y"])
    prob("tensor-nan-bytes", lambda d: tensors(d)["conv_y"].update(nbytes=float("nan")), ["conv_y"])
    prob("tensor-no-name", lambda d: d["tensors"].append({"producer": "fc"}), ["tensor"])
    prob("tensor-duplicate", lambda d: d["tensors"].append(dict(tensors(d)["lrn_y"])), ["lrn_y"])
    prob("cycle", lambda d: d["tensors"].append({"name": "back", "producer": "fc", "consumers": ["conv"],
                                                 "nbytes": 4}), ["cycle"])
    prob("self-cycle", lambda d: d["tensors"].append({"name": "me", "producer": "lrn", "consumers": ["lrn"],
                                                      "nbytes": 4}), ["lrn"])
    prob("duplicate-op", lambda d: d["ops"].append("conv"), ["conv"])
    prob("duplicate-target", lambda d: d["targets"].append("onnxruntime@cpu:t1"), ["onnxruntime@cpu:t1"])
    prob("no-targets", lambda d: d.update(targets=[], cost_ms={}, pinned={}, memory_cap_bytes={},
                                          partition_overhead_ms={}), ["target"])
    prob("memory-infeasible", lambda d: d.update(memory_cap_bytes={"onnxruntime@cpu:t1": 10,
                                                                   "openvino@cpu1:t1": 10}), ["memory"])
    prob("memory-negative", lambda d: d["memory_cap_bytes"].update({"openvino@cpu1:t1": -1}), ["openvino@cpu1:t1"])
    prob("weight-nan", lambda d: d["weight_bytes"].update(conv=float("nan")), ["conv"])
    prob("pinned-unknown-target", lambda d: d["pinned"].update(fc="tpu0"), ["tpu0"])
    prob("pinned-unsupported", lambda d: d["pinned"].update(fc="openvino@cpu1:t1"), ["fc"])
    prob("colocate-unknown-op", lambda d: d.update(colocate=[["conv", "ghost"]]), ["ghost"])
    prob("colocate-no-common-target", lambda d: d.update(colocate=[["lrn", "fc"]], pinned={}) or
         d["cost_ms"]["lrn"].pop("onnxruntime@cpu:t1"), ["lrn"])
    prob("link-negative", lambda d: d["links"].update(latency_ms=-0.5), ["latency_ms"])
    prob("link-nan", lambda d: d["links"].update(ms_per_byte=float("nan")), ["ms_per_byte"])
    prob("link-charge-unknown", lambda d: d["links"].update(charge="nobody"), ["nobody"])
    prob("overhead-negative", lambda d: d["partition_overhead_ms"].update({"onnxruntime@cpu:t1": -1}),
         ["onnxruntime@cpu:t1"])
    f = c / "problems" / "huge-but-finite-costs.json"
    data = good_problem()
    data["cost_ms"]["conv"] = {"onnxruntime@cpu:t1": 1e308, "openvino@cpu1:t1": 1e300}
    f.write_text(json.dumps(data))
    add(CONTROL, "problem-huge-but-finite-costs", ["plan", "--problem", str(f), "--solver", "cpsat", "--time-limit", "2"],
        accept=True)

    # ---------------------------------------------------------------- profile stores
    def store_case(name, make, expect, cmd="fit"):
        f = c / "stores" / f"{name}-{cmd}.db"
        f.parent.mkdir(parents=True, exist_ok=True)
        make(f)
        argv = (["fit", "--db", str(f), "--out", str(c / "stores" / f"{name}-cm")] if cmd == "fit" else
                ["profile", base.tiny, "--targets", "onnxruntime", "--db", str(f), "--quiet", "--no-links",
                 "--no-whole-model"])
        add("store", f"{name}[{cmd}]", argv, expect=[*([] if name in _NO_FILE_NAME else [f.name]), *expect])

    def random_db(f):
        f.write_bytes(rng.bytes(4096))

    def text_db(f):
        f.write_text("this is a text file, not a database\n" * 20)

    def foreign_db(f):
        con = sqlite3.connect(f)
        con.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
        con.commit()
        con.close()

    def newer_db(f):
        shutil.copyfile(base.store, f)
        con = sqlite3.connect(f)
        con.execute("UPDATE schema_version SET version = 999")
        con.commit()
        con.close()

    def truncated_db(f):
        shutil.copyfile(base.store, f)
        _checkpoint(f)
        data = f.read_bytes()
        f.write_bytes(data[: max(len(data) // 3, 4096 + 100)])

    def corrupt_db(f):
        shutil.copyfile(base.store, f)
        _checkpoint(f)
        data = bytearray(f.read_bytes())
        for off in range(4096 + 8, len(data), 4096):  # scribble over the b-tree page headers
            data[off: off + 64] = rng.bytes(64)
        f.write_bytes(bytes(data))

    def dropped_table_db(f):
        shutil.copyfile(base.store, f)
        con = sqlite3.connect(f)
        con.execute("DROP TABLE measurements")
        con.commit()
        con.close()

    def bad_json_db(f):
        shutil.copyfile(base.store, f)
        con = sqlite3.connect(f)
        con.execute("UPDATE signatures SET signature = 'not json {'")
        con.commit()
        con.close()

    def pickle_db(f):
        shutil.copyfile(base.store, f)
        con = sqlite3.connect(f)
        con.execute("UPDATE measurements SET meta = ?", (pickle.dumps({"evil": 1}),))
        con.commit()
        con.close()

    def nan_db(f):
        shutil.copyfile(base.store, f)
        con = sqlite3.connect(f)
        con.execute("UPDATE measurements SET median_ms = -5.0, net_ms = -5.0 WHERE status = 'ok'")
        con.commit()
        con.close()

    for name, make, expect in [("random-bytes", random_db, ["not a SQLite"]), ("text", text_db, ["not a SQLite"]),
                               ("foreign-sqlite", foreign_db, ["not a placer profile store"]),
                               ("newer-schema", newer_db, ["999"]), ("truncated", truncated_db, []),
                               ("corrupted-pages", corrupt_db, []), ("table-dropped", dropped_table_db, ["measurements"]),
                               ("signature-not-json", bad_json_db, ["signature", "JSON"]),
                               ("pickle-in-meta", pickle_db, ["meta", "JSON"]),
                               ("negative-times", nan_db, ["median_ms", "-5"])]:
        store_case(name, make, expect, "fit")
        if name in ("random-bytes", "newer-schema", "truncated", "table-dropped", "foreign-sqlite"):
            store_case(name, make, expect, "profile")
    d = c / "stores" / "a-directory.db"
    d.mkdir(parents=True, exist_ok=True)
    add("store", "directory[fit]", ["fit", "--db", str(d), "--out", str(c / "stores" / "dir-cm")],
        expect=[d.name, "directory"])
    add("store", "missing[fit]", ["fit", "--db", str(c / "stores" / "nope.db"), "--out", str(c / "x-cm")],
        expect=["nope.db"])

    # ---------------------------------------------------------------- cost-model files (no CLI command loads one)
    def cm_case(name, edit, expect):
        d = _copy_dir(base.costmodel, c / "costmodels" / name)
        edit(d)
        add("costmodel", name, call=load_cm(d), expect=[*expect])

    def flip(rel):
        def edit(d):
            p = d / rel
            blob = bytearray(p.read_bytes())
            blob[len(blob) // 2] ^= 0x40
            p.write_bytes(bytes(blob))
        return edit

    def reseal(d, rel):
        from costmodels.persistence import sha256_file

        card = json.loads((d / "card.json").read_text())
        card["artifacts"][rel] = sha256_file(d / rel)
        (d / "card.json").write_text(json.dumps(card))

    def pickled(rel, seal):
        def edit(d):
            (d / rel).write_bytes(pickle.dumps({"payload": "os.system('echo pwned')"}))
            if seal:
                reseal(d, rel)
        return edit

    def untrusted_type(d):
        import skops.io as sio

        sio.dump(Path("/tmp"), d / "transfer.skops")  # a type outside the allowlist
        reseal(d, "transfer.skops")

    def card_escape(d):
        card = json.loads((d / "card.json").read_text())
        card["artifacts"]["../../outside.json"] = "0" * 64
        (d / "card.json").write_text(json.dumps(card))

    op0 = "op_models/0.skops"
    cm_case("flip-byte-op-model", flip(op0), ["0.skops"])
    cm_case("flip-byte-transfer", flip("transfer.skops"), ["transfer.skops"])
    cm_case("flip-byte-tables", flip("tables.json"), ["tables.json"])
    cm_case("pickle-op-model", pickled(op0, False), ["0.skops"])
    cm_case("pickle-op-model-resealed", pickled(op0, True), ["0.skops"])
    cm_case("pickle-tables-resealed", pickled("tables.json", True), ["tables.json"])
    cm_case("untrusted-type-resealed", untrusted_type, ["transfer.skops"])
    cm_case("card-not-json", lambda d: (d / "card.json").write_text("{oops"), ["card.json"])
    cm_case("card-missing", lambda d: (d / "card.json").unlink(), ["card.json"])
    cm_case("card-path-escape", card_escape, ["outside.json"])
    cm_case("file-missing", lambda d: (d / "transfer.skops").unlink(), ["transfer.skops"])

    from corpus_hostile import hostile_cases  # the second round of hostile classes: see its docstring

    hostile_cases(root, base, add, rng)
    from corpus_limits import limits_cases  # the third round: sizes and time limits (corpus_limits.py)

    limits_cases(root, base, add)
    return cases


# damage found while reading rows: the message names the row (key, target, column), not the file
_NO_FILE_NAME = {"signature-not-json", "pickle-in-meta", "negative-times"}


def _checkpoint(f: Path) -> None:
    con = sqlite3.connect(f)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.execute("PRAGMA journal_mode=DELETE")
    finally:
        con.close()
    for ext in ("-wal", "-shm"):
        try:
            os.unlink(str(f) + ext)
        except FileNotFoundError:
            pass


def zoo_external(c: Path, base: Base) -> Path:
    """tiny with its weights in an external data file, which is then deleted."""
    from placer import zoo

    d = c / "external"
    d.mkdir(exist_ok=True)
    m = zoo.tiny_branchy(0)
    f = d / "ext_model.onnx"
    onnx.save(m, str(f), save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
              size_threshold=0)
    (d / "weights.bin").unlink()
    return f


def summarize(outcomes: list[Outcome]) -> tuple[str, dict[str, int]]:
    bad = [o for o in outcomes if o.case.category != CONTROL]
    counts = {k: sum(o.kind == k for o in bad) for k in OUTCOMES}
    line = (f"reliability corpus: {len(bad)} inputs tried, {counts['clear']} clear errors, "
            f"{counts['ok']} hostile but legitimate inputs handled, {counts['crash']} crashes, "
            f"{counts['hang']} hangs, {counts['accepted']} wrongly accepted, "
            f"{counts['unclear']} unclear messages, {counts['escape']} raw escape sequences")
    return line, counts


def expected_kind(case: Case) -> str:
    """What a case must come out as: ``ok`` if it must be accepted, else a ``clear`` error."""
    return "ok" if case.accept else "clear"


def category_counts(cases: list[Case]) -> dict[str, int]:
    out: dict[str, int] = {}
    for cs in cases:
        out[cs.category] = out.get(cs.category, 0) + 1
    return out


if __name__ == "__main__":  # python tests/reliability/corpus.py [ROOT]: run everything, print outcomes
    import sys
    import tempfile

    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="placer-corpus-"))
    t0 = time.monotonic()
    base = build_base(root)
    print(f"base built in {time.monotonic() - t0:.1f}s", flush=True)
    cases = build_corpus(root, base)
    only = os.environ.get("CORPUS_ONLY")
    outcomes = []
    for cs in cases:
        if only and only not in f"{cs.category}/{cs.name}":
            continue
        o = run_case(cs)
        outcomes.append(o)
        flag = "" if o.kind in ("clear", "ok") else "  <<<<<<"
        print(f"{o.kind:9s} {o.seconds:5.1f}s {cs.category}/{cs.name}: rc={o.rc} {o.message[:300]}{flag}", flush=True)
        if o.kind == "crash":
            print("    " + (o.detail.strip().splitlines() or [""])[-1][:300], flush=True)
    print(summarize(outcomes)[0], f"({time.monotonic() - t0:.0f}s)")
    print(category_counts(cases))
