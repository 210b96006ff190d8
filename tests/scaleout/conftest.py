"""Fixtures for the scale-out tests (issue 6): the CLI in a subprocess, a loopback TVM RPC cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RPC_ENV = ("PLACER_RPC_TRACKER", "PLACER_RPC_KEY", "PLACER_RPC_TARGET", "PLACER_RPC_CC", "PLACER_RPC_SESSION_TIMEOUT")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for k in RPC_ENV:  # the CLI gets its RPC config from its flags, not from this process
        env.pop(k, None)
    return env


@pytest.fixture(scope="session")
def placer_cmd() -> Callable[..., list[str]]:
    """``placer_cmd("plan", ...)`` -> the argv of ``python -m placer.cli plan ...``."""
    return lambda *args: [sys.executable, "-m", "placer.cli", *map(str, args)]


@pytest.fixture(scope="session")
def run_placer(placer_cmd) -> Callable[..., subprocess.CompletedProcess]:
    def run(*args, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(placer_cmd(*args), cwd=cwd or ROOT, env=_env(), capture_output=True, text=True,
                              timeout=timeout, check=False)

    return run


@pytest.fixture(scope="session")
def cli_env() -> dict[str, str]:
    return _env()


@pytest.fixture(scope="module")
def rpc_cluster():
    """A tracker + one RPC server on free loopback ports (key ``placer-test``), RPC config set for
    this process while the module runs; on teardown every helper process must be gone."""
    import psutil

    from placer.devices.rpc import LocalRpcCluster, _helper_pid, _tree

    saved = {k: os.environ.get(k) for k in RPC_ENV}
    cluster = LocalRpcCluster("placer-test", n_servers=1).start()
    helpers = [p for h in cluster.servers + [cluster.tracker_obj] for p in _tree(_helper_pid(h))]
    assert len(helpers) >= 2
    try:
        os.environ.update(cluster.config.to_env())  # for this process, as a user's shell would set it
        yield cluster
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        late = [p for h in cluster.servers + [cluster.tracker_obj] if h is not None for p in _tree(_helper_pid(h))]
        cluster.close()
        _, alive = psutil.wait_procs(helpers + late, timeout=5)
        assert not alive, f"RPC helper processes left behind: {[p.pid for p in alive]}"
        strays = [c for c in psutil.Process().children(recursive=True)
                  if "tvm.exec.popen_worker" in " ".join(_cmdline(c))]
        assert not strays, f"popen workers left behind: {[c.pid for c in strays]}"


def _cmdline(p) -> list[str]:
    import psutil

    try:
        return p.cmdline()
    except psutil.Error:
        return []
