"""Shared fixtures for every test folder.

* ``zoo_models`` (session): a lazy cache ``zoo_models("resnet50")`` -> ``zoo.resolve("zoo:resnet50")``,
  the raw (unfolded) model: re-weighted light models, "tiny", "bert-tiny", "lpnorm", ... Generated
  once per session (resnet50 ~1-3 s) and kept for the whole session: do not modify what it
  returns (copy first), and prefer ``zoo.reweighted`` for the 244-575 MB vgg19 / bvlc_alexnet /
  zfnet512 so they are not held in memory.
* ``zoo_dir`` (session): a temporary folder holding ``<name>.onnx`` for every name in
  :data:`placer.zoo.SMALL_MODELS` (tiny, bert-tiny, squeezenet, resnet50, inception_v1,
  inception_v2, densenet121, shufflenet), written once. The big fully connected models (vgg19,
  bvlc_alexnet, zfnet512: 244-575 MB) are left out; get them from ``zoo_models``.
* ``tiny_model``: a fresh copy of :func:`placer.zoo.tiny_branchy` (8 ops, one fork/join).
* ``squeezenet_model``: a fresh copy of the re-weighted squeezenet (66 ops after folding).
* ``bert_model``: a fresh copy of :func:`placer.zoo.bert_encoder` with its defaults.
* ``warm_tiny_store`` (session, one for the whole run, xdist workers included): ``copy(dest)`` copies
  a profile store with zoo:tiny profiled on ONNX Runtime and OpenVINO (as ``placer tune --targets
  onnxruntime,openvino`` profiles it) to ``dest``: tune runs whose profiling is not the subject
  start from it.
* ``fresh_python`` (session): ``run(code, **env)``, ``code`` in a new interpreter that must exit 0; its
  stdout lines (the tests of what a process imports).
* ``_trust_key`` (session, autouse): ``$PLACER_TRUST_KEY`` points into the session's temporary
  folder, so compiling a module never makes or uses the user's own ``~/.config/placer/trust.key``.
* ``core_speed_refs``: :mod:`placer.devices.core_speed` (its per-core and parallel reference times
  restored after the test, which may seed them: a host's slow spell cannot be staged);
  ``always_slowed`` seeds them so that every probe reads slowed.
* ``_no_quiet_wait`` (session, autouse): ``$PLACER_QUIET_WAIT_S`` = 0, so rounds a bench adds for
  quiet samples (:meth:`placer.run.bench.PlanBench.measure`) never wait for the cores, and
  ``$PLACER_CONTENDED_ATTEMPTS`` = 1, so a profile measurement that other processes disturbed is
  not taken again (``placer tune`` run by a test profiles with the default timing), and
  ``$PLACER_ONE_THREAD_WINDOWS`` = 0, so one-thread targets take no second windows (the tests of
  them ask for them), and ``$PLACER_PACE`` = 0, so no pace is timed beside a measurement (the
  tests of it turn it on), and ``$PLACER_ADDED_ROUNDS`` = 0, so no measurement adds rounds for quiet
  samples or for a spell of the host (they would find no quiet; the tests of them ask for them with the
  ``added_rounds`` fixture): the suite's own parallel workers keep the cores busy, and no outcome may
  wait on the machine's load.
* ``added_rounds``: ``$PLACER_ADDED_ROUNDS`` unset for the test (rounds are added as the product adds them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

import placer  # noqa: F401  first: a test module importing TVM imports it as placer does (placer.tvm_import)


def pytest_configure(config):
    """In the process that starts the xdist workers (or the only one), before they start: numba's on-disk
    cache gets placer's kernels (:func:`placer.solve.kernels.compile_kernels`), compiled once here where
    the cache lacks them (a fresh checkout: seconds) rather than by each worker and each command a test
    starts until one of them has written it."""
    if hasattr(config, "workerinput"):  # an xdist worker: its controller did it
        return
    from placer.solve.kernels import compile_kernels

    compile_kernels("placer.solve.retime", "placer.solve.heads_tails_kernel")


def pytest_collection_modifyitems(config, items):
    """The longest test files first (tests/file_seconds.json, written by .ci/file_seconds.py), each file's
    tests in their own order: with ``--dist loadfile --no-loadscope-reorder`` the workers take files in
    this order, so no long file is left to run alone at the end. A file the list lacks goes last."""
    import json

    seconds = json.loads((Path(__file__).parent / "file_seconds.json").read_text())
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0.0))  # stable: files stay whole


@pytest.fixture(scope="session", autouse=True)
def _trust_key(tmp_path_factory):
    import os

    from placer.trust import KEY_ENV

    old = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = str(tmp_path_factory.mktemp("trust") / "trust.key")
    yield
    if old is None:
        os.environ.pop(KEY_ENV, None)
    else:
        os.environ[KEY_ENV] = old


@pytest.fixture(scope="session", autouse=True)
def _no_quiet_wait():
    import os

    from placer.profile.engine import ATTEMPTS_ENV, ONE_THREAD_WINDOWS_ENV
    from placer.profile.pace import PACE_ENV
    from placer.run.bench import ADDED_ROUNDS_ENV, QUIET_WAIT_ENV

    # no pace timed beside the profiles (placer.profile.pace), unless a test turns it on: 8% of the suite;
    # no rounds added for quiet samples or spells, unless a test turns them on (fixture added_rounds)
    settings = {QUIET_WAIT_ENV: "0", ATTEMPTS_ENV: "1", ONE_THREAD_WINDOWS_ENV: "0", PACE_ENV: "0",
                ADDED_ROUNDS_ENV: "0"}
    old = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture()
def added_rounds(monkeypatch):
    """Rounds added for quiet samples and spells as the product adds them (the suite caps them at 0)."""
    from placer.run.bench import ADDED_ROUNDS_ENV

    monkeypatch.delenv(ADDED_ROUNDS_ENV, raising=False)


@pytest.fixture()
def core_speed_refs():
    from placer.devices import core_speed

    saved, saved_par = dict(core_speed._best_probe_s), dict(core_speed._best_parallel_s)
    try:
        yield core_speed
    finally:
        core_speed._best_probe_s.clear()
        core_speed._best_probe_s.update(saved)
        core_speed._best_parallel_s.clear()
        core_speed._best_parallel_s.update(saved_par)


@pytest.fixture()
def always_slowed(core_speed_refs):
    """Every core probe reads slowed: a host's spell cannot be staged, so the cores' references are
    seeded far faster than any core runs, as a campaign hands its best times to a new worker."""
    core_speed_refs.warm_core_probe(rounds=1)
    for c in list(core_speed_refs._best_probe_s):
        core_speed_refs._best_probe_s[c] = 1e-7
    for cs in list(core_speed_refs._best_parallel_s):
        core_speed_refs._best_parallel_s[cs] = 1e-9


@pytest.fixture(scope="session")
def fresh_python() -> Callable[..., list[str]]:
    """``run(code, **env) -> stdout lines``: ``code`` run by a new interpreter (``python -c``; ``env``
    added to this one's), which must exit 0 (its stderr's end is shown otherwise): for what happens
    once per process, such as what importing a module imports."""
    import os
    import subprocess
    import sys

    def run(code: str, **env: str) -> list[str]:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                           timeout=600, env={**os.environ, **env})
        assert p.returncode == 0, p.stderr[-3000:]
        return p.stdout.splitlines()

    return run


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


@pytest.fixture(scope="session")
def zoo_models() -> Callable[[str], onnx.ModelProto]:
    from placer import zoo

    cache: dict[str, onnx.ModelProto] = {}

    def get(name: str) -> onnx.ModelProto:
        if name not in cache:
            cache[name] = zoo.resolve(f"zoo:{name}")
        return cache[name]

    return get


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory, zoo_models) -> Path:
    from placer import zoo

    root = tmp_path_factory.mktemp("zoo")
    for name in zoo.SMALL_MODELS:
        onnx.save(zoo_models(name), str(root / f"{name}.onnx"))
    return root


@pytest.fixture
def tiny_model() -> onnx.ModelProto:
    from placer import zoo

    return zoo.tiny_branchy()


@pytest.fixture
def squeezenet_model(zoo_models) -> onnx.ModelProto:
    return _copy(zoo_models("squeezenet"))


@pytest.fixture
def bert_model(zoo_models) -> onnx.ModelProto:
    return _copy(zoo_models("bert-tiny"))


#: the targets of :func:`warm_tiny_store` (as ``placer tune --targets onnxruntime,openvino`` names them)
WARM_TARGETS = ("onnxruntime", "openvino")


def _shared_dir(tmp_path_factory, worker_id: str) -> Path:
    """A folder every xdist worker of this run sees (the parent of the workers' base folders), or this
    session's own without xdist."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if worker_id != "master" else base) / "shared"


@pytest.fixture(scope="session")
def warm_tiny_store(tmp_path_factory, worker_id) -> Callable[[Path], Path]:
    """``copy(dest)``: a copy at ``dest`` of a profile store that has zoo:tiny profiled on ONNX Runtime and
    OpenVINO at one thread (ops, fusion segments, the whole model, probe plans, links), for the tests
    of tune's search, resume, workers and cost model: their runs start where a user's second run does,
    without profiling again (the tests of profiling, and of tune profiling an empty store, start from
    empty stores). Profiled once for the whole run: the first worker to ask makes it under a lock,
    the others wait for it and copy it."""
    import fcntl
    import sqlite3
    from contextlib import closing

    shared = _shared_dir(tmp_path_factory, worker_id)
    shared.mkdir(parents=True, exist_ok=True)
    store, done = shared / "tiny-warm.db", shared / "tiny-warm.done"
    with open(shared / "tiny-warm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            from placer import api

            api.prepare("zoo:tiny", targets=list(WARM_TARGETS), db=store).store.close()
            done.touch()

    def copy(dest: Path) -> Path:
        with closing(sqlite3.connect(store)) as src, closing(sqlite3.connect(dest)) as dst:
            src.backup(dst)
        return dest

    return copy
