"""Remote targets over TVM RPC: compile here, run and time on a device behind a tracker.

This is how AutoTVM and MetaSchedule reach boards: a *tracker* (``tvm.exec.rpc_tracker``) keeps a
queue of *servers* (``tvm.exec.rpc_server`` on each device, registered under a *key* such as
``rk3399``); a client asks the tracker for a session on a key, uploads a compiled library, loads
it remotely and calls it. A :class:`RpcTarget` compiles an ONNX (sub-)model exactly as
``tvm-llvm`` does (``import_onnx`` + the FoldConstant/FuseOps/FuseTIR pipeline, for the remote's
LLVM target), exports the library, uploads it through one tracker session per target object,
and runs it on the remote Relax VM.

Timing: :meth:`RpcCompiled.time_run` times with the remote ``time_evaluator`` (the clock runs on
the device, so transport is not in the measurement; remote and local agree, see
``experiments/bench_rpc.py``); the profiling campaign uses it (``placer.profile.timing.time_compiled``
prefers a compiled model's own ``time_run``), so op rows hold device time, net of the remote VM's
call floor (the 1-element Add of the overhead row). :meth:`RpcCompiled.run` is a full round trip
(inputs up when they changed, outputs back): what a caller of the remote model pays.

Names and configuration
-----------------------
``tvm-rpc[:KEY][@cpu:tTHREADS]``: ``tvm-rpc@cpu:t1`` uses the configured key, ``tvm-rpc:rk3399``
names the key itself. Threads only set the build's ``num-cores``; the remote runtime's thread
pool follows the server's environment (``TVM_NUM_THREADS``). A target's configuration is an
:class:`RpcConfig`: the one passed to ``RpcTarget(spec, config=...)``, else the environment's,
read when the target first needs it:

* ``PLACER_RPC_TRACKER`` ``HOST:PORT`` of the tracker (required);
* ``PLACER_RPC_KEY`` the device key (unless the name has one);
* ``PLACER_RPC_TARGET`` the remote's TVM target as JSON (default: this host's ``llvm``), e.g.
  ``{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}``;
* ``PLACER_RPC_CC`` a cross compiler for ``export_library`` (e.g. ``aarch64-linux-gnu-g++``);
* ``PLACER_RPC_SESSION_TIMEOUT`` seconds a session may last (default 600).

:func:`rpc_config` builds one from arguments over these variables; ``RpcConfig.to_env()`` gives them
back, which is how a profiling worker subprocess (it builds targets by name) gets the config of a
target given one explicitly (:meth:`RpcTarget.worker_env`). Nothing here writes the environment;
``placer profile --rpc-tracker HOST:PORT --rpc-key KEY`` sets it for the command's own process.

The fingerprint holds the key, the tracker address, the hosts of the servers registered under
the key (from the tracker's summary; ports left out, they change on restart), the remote target
and the TVM version: rows measured on one board never mix with another's.

Running a tracker and servers
-----------------------------
``python -m placer.devices.rpc tracker [--host 127.0.0.1] [--port 9190]`` and
``python -m placer.devices.rpc server --tracker 127.0.0.1:9190 --key KEY [--host 127.0.0.1]``
(thin wrappers over ``tvm.rpc`` that bind to loopback unless told otherwise; a TVM RPC server
runs whatever it is sent: expose it only on a trusted network). :class:`LocalRpcCluster`
starts both in-process on free loopback ports and tears them down with every helper process
(tests, benchmarks).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from placer.devices.base import CompiledModel, TargetSpec
from placer.devices.timing import TimingConfig, stats_from_samples
from placer.devices.tvm_target import TvmLlvmTarget, llvm_target
from placer.errors import TargetError, TargetUnavailable, first_line

ENV_TRACKER = "PLACER_RPC_TRACKER"
ENV_KEY = "PLACER_RPC_KEY"
ENV_TARGET = "PLACER_RPC_TARGET"
ENV_CC = "PLACER_RPC_CC"
ENV_TIMEOUT = "PLACER_RPC_SESSION_TIMEOUT"
DEFAULT_SESSION_TIMEOUT_S = 600.0
LOOPBACK = "127.0.0.1"


# ---- configuration --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RpcConfig:
    """Where ``tvm-rpc`` targets find their device (see the module docstring for each field)."""

    tracker_host: str
    tracker_port: int
    key: str | None
    target_json: str | None
    cc: str | None
    session_timeout_s: float

    @property
    def tracker(self) -> str:
        return f"{self.tracker_host}:{self.tracker_port}"

    def to_env(self) -> dict[str, str]:
        """The ``PLACER_RPC_*`` variables that give this configuration (for a child process's environment)."""
        env = {ENV_TRACKER: self.tracker, ENV_TIMEOUT: str(float(self.session_timeout_s))}
        for name, value in ((ENV_KEY, self.key), (ENV_TARGET, self.target_json), (ENV_CC, self.cc)):
            if value:
                env[name] = value
        return env


def parse_hostport(text: str, what: str = "tracker") -> tuple[str, int]:
    host, sep, port = str(text).strip().rpartition(":")
    try:
        if not sep or not host:
            raise ValueError
        return host, int(port)
    except ValueError:
        raise TargetError(f"{what} address {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9190") from None


def rpc_config(tracker: str | None = None, key: str | None = None, *, target: Mapping | str | None = None,
               cc: str | None = None, session_timeout_s: float | None = None,
               environ: Mapping[str, str] | None = None) -> RpcConfig:
    """The RPC configuration: each value given here, else the environment's ``PLACER_RPC_*`` (``environ``,
    default ``os.environ``, read now). TargetError if no tracker is given either way. Nothing is stored:
    pass the result to ``RpcTarget(spec, config=...)`` (or put ``to_env()`` in a child's environment)."""
    env = os.environ if environ is None else environ
    tracker = tracker if tracker is not None else env.get(ENV_TRACKER)
    if not tracker:
        raise TargetError(f"tvm-rpc: no tracker configured: set {ENV_TRACKER}=HOST:PORT (and {ENV_KEY}=KEY), "
                          "pass an RpcConfig (placer.devices.rpc.rpc_config), or pass --rpc-tracker/--rpc-key")
    host, port = parse_hostport(tracker)
    if target is not None and not isinstance(target, str):
        target = json.dumps(dict(target), sort_keys=True)
    timeout = session_timeout_s if session_timeout_s is not None else (env.get(ENV_TIMEOUT) or DEFAULT_SESSION_TIMEOUT_S)
    return RpcConfig(host, port, (key if key is not None else env.get(ENV_KEY)) or None,
                     (target if target is not None else env.get(ENV_TARGET)) or None,
                     (cc if cc is not None else env.get(ENV_CC)) or None, float(timeout))


def tracker_summary(host: str, port: int) -> dict:
    """The tracker's summary (servers and queues); TargetError if it cannot be reached."""
    from tvm import rpc

    try:
        tc = rpc.connect_tracker(host, port)
        try:
            return tc.summary()
        finally:
            tc.close()
    except Exception as exc:  # noqa: BLE001 - tvm raises many types
        raise TargetUnavailable(f"tvm-rpc: cannot reach the tracker at {host}:{port}: {first_line(exc)}") from None


# ---- the target -------------------------------------------------------------------------------------
_UPLOAD_IDS = itertools.count()


class RpcTarget(TvmLlvmTarget):
    """TVM Relax on a remote device behind a TVM RPC tracker (see the module docstring)."""

    kind = "tvm-rpc"
    runtime = "tvm"
    profile_timeout_s = 120.0  # compile here + upload + remote timing

    def __init__(self, spec: TargetSpec, config: RpcConfig | None = None):
        super().__init__(spec)
        self._config = config
        self._session = None
        self._lock = threading.Lock()
        self._fingerprint: dict[str, Any] | None = None

    # ---- configuration
    @property
    def config(self) -> RpcConfig:
        """The configuration given to the constructor, else the environment's (:func:`rpc_config`)."""
        return self._config if self._config is not None else rpc_config()

    def worker_env(self) -> dict[str, str]:
        """A configuration given explicitly, as the environment of a worker process that rebuilds this
        target by name (one taken from the environment is inherited anyway)."""
        return self._config.to_env() if self._config is not None else {}

    @property
    def key(self) -> str:
        key = self.spec.arg or self.config.key
        if not key:
            raise TargetError(f"{self.name}: no device key: name it (tvm-rpc:KEY) or set {ENV_KEY}")
        return key

    def tvm_target(self):
        import tvm

        cfg = self.config
        if cfg.target_json:
            try:
                d = json.loads(cfg.target_json)
            except json.JSONDecodeError as exc:
                raise TargetError(f"{ENV_TARGET} is not JSON: {exc}") from None
            d.setdefault("num-cores", int(self.spec.threads))
            return tvm.target.Target(d)
        return llvm_target(self.spec.threads, self.spec.option("mcpu"))

    # ---- identity
    def runtime_version(self) -> str:
        import tvm

        cfg = self.config
        return f"tvm {tvm.__version__} rpc key={self.key} tracker={cfg.tracker}"

    def remote_hosts(self) -> list[str]:
        """Hosts of the servers registered under this target's key (from the tracker)."""
        cfg = self.config
        summary = tracker_summary(cfg.tracker_host, cfg.tracker_port)
        hosts = sorted({str(s["addr"][0]) for s in summary.get("server_info", [])
                        if str(s.get("key", "")).split(":", 1)[-1] == self.key})
        return hosts

    def fingerprint(self) -> dict[str, Any]:
        if self._fingerprint is None:
            import tvm

            cfg = self.config
            hosts = self.remote_hosts()
            if not hosts:
                raise TargetUnavailable(f"{self.name}: no RPC server is registered under key {self.key!r} at the "
                                        f"tracker {cfg.tracker}")
            self._fingerprint = {
                "kind": self.kind,
                "adapter_version": self.adapter_version,
                "runtime_version": f"tvm {tvm.__version__} rpc",
                "key": self.key,
                "tracker": cfg.tracker,
                "remote_hosts": hosts,
                "remote_target": str(self.tvm_target()),
                "threads": self.spec.threads,
                "options": dict(self.spec.options),
            }
        return dict(self._fingerprint)

    def pin_current_thread(self) -> None:  # the work runs remotely
        return None

    # ---- session
    def session(self):
        """The tracker session to this target's device (opened once, reused).

        The tracker answers a request only once a server under the key is free, and TVM waits for
        that answer without a timeout: a server held by a session nobody released (another
        process, or one of this process's sessions not yet garbage-collected) would block the
        caller forever. The request therefore runs in a thread for at most
        :attr:`request_timeout_s`; past it the tracker connection is closed and a TargetError says
        every server under the key is busy."""
        with self._lock:
            if self._session is None:
                self._session = self._request_session()
            return self._session

    #: how long a session request may wait for a free server under the key
    request_timeout_s = 60.0

    def reachable(self) -> bool:
        """Whether a server is registered under this target's key at the tracker now."""
        try:
            return bool(self.remote_hosts())
        except TargetError:
            return False

    def _unavailable_or(self, error: TargetError) -> TargetError:
        """``error``, or TargetUnavailable (with its message) when the device is gone: a failure
        while no server is registered under the key is the device's absence, not the model's fault."""
        if self.reachable():
            return error
        self.close()  # the session died with its server: the next call requests a new one
        return TargetUnavailable(f"{error} (no RPC server is registered under key {self.key!r} any more)")

    def _wait_free_server(self, cfg: RpcConfig) -> bool:
        """Whether a server under the key is free at the tracker within :attr:`request_timeout_s`
        (polled: a request sent while every server is busy would wait without a timeout)."""
        deadline = time.monotonic() + self.request_timeout_s
        while True:
            summary = tracker_summary(cfg.tracker_host, cfg.tracker_port)
            if summary.get("queue_info", {}).get(self.key, {}).get("free", 0) > 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def _request_session(self):
        import threading

        from tvm import rpc

        cfg = self.config
        if not self.reachable():
            raise TargetUnavailable(f"{self.name}: no RPC server is registered under key {self.key!r} at the "
                                    f"tracker {cfg.tracker}")
        if not self._wait_free_server(cfg):  # no request left waiting at the tracker for nothing
            raise TargetUnavailable(f"{self.name}: no RPC server under key {self.key!r} became free within "
                                    f"{self.request_timeout_s:.0f} s (tracker {cfg.tracker}): every one is held by "
                                    "another session (another process, or a session not closed)")
        box: dict[str, Any] = {}
        try:
            tc = rpc.connect_tracker(cfg.tracker_host, cfg.tracker_port)
        except Exception as exc:  # noqa: BLE001 - tvm raises many types
            raise TargetError(f"{self.name}: cannot reach the RPC tracker {cfg.tracker}: {first_line(exc)}") from None

        def request() -> None:
            try:
                box["session"] = tc.request(self.key, priority=1, session_timeout=cfg.session_timeout_s, max_retry=1)
            except BaseException as exc:  # noqa: BLE001 - reported by the caller
                box["error"] = exc

        waiter = threading.Thread(target=request, name=f"rpc-request-{self.key}", daemon=True)
        waiter.start()
        waiter.join(self.request_timeout_s)
        timed_out = waiter.is_alive()
        tc.close()  # the tracker connection (a request still waiting is dropped with its thread)
        waiter.join(1.0)
        if "session" in box and not timed_out:
            return box["session"]
        if timed_out:
            box.pop("session", None)  # a server freed in the last instant: released with this reference
            raise TargetUnavailable(f"{self.name}: no RPC server under key {self.key!r} became free within "
                              f"{self.request_timeout_s:.0f} s (tracker {cfg.tracker}): every one is held by "
                              "another session (another process, or a session not closed)")
        raise TargetError(f"{self.name}: no RPC session for key {self.key!r} via {cfg.tracker}: "
                          + (first_line(box["error"]) if "error" in box else "the tracker gave no answer"))

    def close(self) -> None:
        """End the session (the server then serves the next client): dropped here and collected now,
        so that its connection closes even when a reference cycle holds it."""
        import gc

        with self._lock:
            had = self._session is not None
            self._session = None
        if had:
            gc.collect()

    # ---- compile
    def compile(self, model: Any) -> CompiledModel:
        name = model.graph.name or "<model>"
        ex, inputs, outputs = self.import_and_build(model)
        fname = f"placer_{os.getpid()}_{next(_UPLOAD_IDS)}.so"
        cc = self.config.cc
        with tempfile.TemporaryDirectory(prefix="placer-rpc-") as d:
            path = os.path.join(d, fname)
            try:
                if cc:
                    from tvm.contrib import cc as _cc

                    ex.export_library(path, fcompile=_cc.cross_compiler(cc))
                else:
                    ex.export_library(path)
            except Exception as exc:
                raise TargetError(f"{self.name}: exporting {name} failed: {first_line(exc)}") from exc
            for attempt in range(2):  # a dropped session is reopened once
                sess = self.session()
                try:
                    sess.upload(path)
                    rlib = sess.load_module(fname)
                    return RpcCompiled(self, sess, rlib, fname, inputs, outputs)
                except TargetError:
                    raise
                except Exception as exc:
                    self.close()
                    if attempt:
                        raise self._unavailable_or(TargetError(
                            f"{self.name}: remote load of {name} failed: {first_line(exc)}")) from exc
        raise AssertionError("unreachable")


class RpcCompiled(CompiledModel):
    """A model loaded in a remote Relax VM."""

    def __init__(self, target: RpcTarget, session, rlib, fname: str, input_names, output_names):
        from tvm import relax

        self.target = target
        self.session = session
        self.fname = fname
        self.device = session.cpu(0)
        self.rlib = rlib
        self.vm = relax.VirtualMachine(rlib, self.device)
        self._last_inputs: list[np.ndarray] | None = None
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)

    def _set_inputs(self, feeds: Mapping[str, np.ndarray]) -> None:
        """Send the inputs, unless they equal the ones already on the device (repeated runs on
        the same feeds, as in profiling, then cost one call + the outputs' fetch)."""
        import tvm

        arrs = [np.asarray(feeds[n], order="C") for n in self.input_names]
        last = self._last_inputs
        if last is not None and len(last) == len(arrs) and all(
                a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(arrs, last)):
            return
        args = [tvm.runtime.tensor(a, self.device) for a in arrs]
        self.vm.set_input("main", *args)
        self._last_inputs = [a.copy() for a in arrs]

    def _outputs(self) -> dict[str, np.ndarray]:
        out = self.vm.get_outputs("main")
        outs = list(out) if len(self.output_names) > 1 else [out]
        return {n: o.numpy() for n, o in zip(self.output_names, outs)}

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One remote inference: inputs sent (if changed), outputs fetched (transport included)."""
        try:
            self._set_inputs(feeds)
            self.vm.invoke_stateful("main")
            return self._outputs()
        except Exception as exc:
            raise self.target._unavailable_or(TargetError(
                f"{self.target.name}: remote run failed: {type(exc).__name__}: {first_line(exc)}")) from exc

    def time_run(self, feeds: Mapping[str, np.ndarray], config=None):
        """Time the model on the device with the remote ``time_evaluator`` (no transport).

        Same stopping rule as :func:`placer.profile.timing.time_callable`, on samples that are each
        the device-side mean of ``number`` calls (``number`` sized so a sample takes about
        ``min_time_s / min_samples``): batches of ``min_samples`` samples until the median moves
        less than ``rel_tol``, or ``max_time_s`` is spent (at least ``hard_min_samples``).
        Returns a :class:`placer.devices.timing.TimingStats`.
        """
        cfg = config or TimingConfig()
        self._set_inputs(feeds)
        dev = self.device
        probe = self.vm.time_evaluator("invoke_stateful", dev, number=1, repeat=1)("main")  # also the warm-up
        per_call = max(float(probe.mean), 1e-7)
        per_sample = max(cfg.min_time_s / max(cfg.min_samples, 1), per_call)
        number = int(min(max(per_sample / per_call, 1), 10000))
        k = max(cfg.min_samples, 1)
        if per_call * number * k > cfg.max_time_s:  # slow: only what the time cap allows
            k = max(cfg.hard_min_samples, 1)
        samples: list[float] = []
        spent_s, prev, stable = 0.0, None, False
        while True:
            res = self.vm.time_evaluator("invoke_stateful", dev, number=number, repeat=k)("main")
            samples += [float(r) * 1e9 for r in res.results]
            spent_s += sum(float(r) for r in res.results) * number
            med = float(np.median(samples))
            if prev is not None and len(samples) >= cfg.min_samples and spent_s >= cfg.min_time_s \
                    and abs(med - prev) <= cfg.rel_tol * prev:
                stable = True
                break
            if len(samples) >= cfg.max_samples or (spent_s >= cfg.max_time_s and len(samples) >= cfg.hard_min_samples):
                break
            prev = med
        return stats_from_samples(samples, warmup_n=1, sample_s=spent_s, stable=stable)

    def close(self) -> None:
        self.vm = None
        self.rlib = None
        self._last_inputs = None
        if self.session is not None:
            try:
                self.session.remove(self.fname)
            except Exception:  # noqa: BLE001, S110 - the file goes with the session anyway
                pass
        self.session = None  # the session (and its server) is released with the target's reference
        self.device = None


# ---- tracker / servers on this machine (tests, benchmarks, the CLI helpers) --------------------------
def free_port(host: str = LOOPBACK) -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _tree(pid: int) -> list:
    """psutil.Process objects of ``pid`` and its descendants (they detect pid reuse on kill)."""
    import psutil

    try:
        p = psutil.Process(pid)
        return [p] + p.children(recursive=True)
    except psutil.Error:
        return []


def _helper_pid(obj) -> int | None:
    proc = getattr(getattr(obj, "proc", None), "_proc", None)  # tvm.support.popen_pool.PopenWorker
    return getattr(proc, "pid", None)


class LocalRpcCluster:
    """A tracker and ``n_servers`` RPC servers under ``key``, in helper processes on loopback.

    >>> with LocalRpcCluster("cpu-test") as cluster:      # doctest: +SKIP
    ...     target = RpcTarget(TargetSpec.parse("tvm-rpc"), config=cluster.config)
    ...     ...

    ``close()`` terminates the servers and the tracker and then kills any process they left
    (TVM's popen workers and per-session forks), so nothing outlives the cluster.
    """

    def __init__(self, key: str = "placer-local", n_servers: int = 1, host: str = LOOPBACK):
        self.key = key
        self.host = host
        self.n_servers = n_servers
        self.tracker_obj = None
        self.servers: list = []

    @property
    def tracker(self) -> str:
        return f"{self.host}:{self.tracker_obj.port}"

    @property
    def config(self) -> RpcConfig:
        """An :class:`RpcConfig` for this cluster's tracker and key (the environment for the rest)."""
        return rpc_config(self.tracker, self.key)

    def start(self, timeout_s: float = 60.0) -> LocalRpcCluster:
        from tvm.rpc.tracker import Tracker

        try:
            port = free_port(self.host)
            self.tracker_obj = Tracker(host=self.host, port=port, port_end=port + 200, silent=True)
            for _ in range(self.n_servers):
                self._spawn(self.key)
        except Exception:
            self.close()
            raise
        try:
            self.wait_registered(self.key, self.n_servers, timeout_s)
        except TargetError:
            self.close()
            raise
        return self

    def _spawn(self, key: str):
        from tvm import rpc

        sp = free_port(self.host)
        server = rpc.Server(host=self.host, port=sp, port_end=sp + 200, tracker_addr=(self.host, self.tracker_obj.port),
                            key=key, silent=True)
        self.servers.append(server)
        return server

    def wait_registered(self, key: str, n: int, timeout_s: float = 60.0) -> None:
        """Wait until ``n`` servers under ``key`` are free at the tracker (TargetError after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            summary = tracker_summary(self.host, self.tracker_obj.port)
            if summary.get("queue_info", {}).get(key, {}).get("free", 0) >= n:
                return
            if time.monotonic() > deadline:
                raise TargetError(f"RPC servers under key {key!r} did not register with the tracker within "
                                  f"{timeout_s:.0f}s")
            time.sleep(0.1)

    def add_server(self, key: str, timeout_s: float = 60.0):
        """One more server, under ``key`` (another device behind the same tracker); returns it once it
        is registered."""
        server = self._spawn(key)
        self.wait_registered(key, 1, timeout_s)
        return server

    def stop_server(self, server, timeout_s: float = 30.0) -> None:
        """Kill ``server`` and whatever it forked (a device going down); returns once the tracker no
        longer lists it."""
        import psutil

        procs = _tree(_helper_pid(server))
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(procs, timeout=5)
        with contextlib.suppress(Exception):
            server.terminate()
        self.servers = [s for s in self.servers if s is not server]
        port = server.port
        deadline = time.monotonic() + timeout_s
        while any(int(i.get("addr", [None, -1])[1]) == port
                  for i in tracker_summary(self.host, self.tracker_obj.port).get("server_info", [])):
            if time.monotonic() > deadline:
                raise TargetError(f"the tracker still lists the server on port {port} after {timeout_s:.0f}s")
            time.sleep(0.1)

    def close(self) -> None:
        import psutil

        helpers = [h for h in self.servers + [self.tracker_obj] if h is not None]
        procs = []
        for h in helpers:  # the helper processes and whatever they forked (session processes)
            pid = _helper_pid(h)
            if pid:
                procs += _tree(pid)
        for h in helpers:
            with contextlib.suppress(Exception):
                h.terminate()
        self.servers = []
        self.tracker_obj = None
        for p in procs:  # terminate() kills the tree it can see; anything re-parented is killed here
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(procs, timeout=5)

    def __enter__(self) -> LocalRpcCluster:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


# ---- command line: python -m placer.devices.rpc tracker|server ----------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m placer.devices.rpc",
                                 description="TVM RPC tracker / server for tvm-rpc targets (loopback by default)")
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("tracker", help="run a tracker")
    t.add_argument("--host", default=LOOPBACK, help="bind address (default 127.0.0.1)")
    t.add_argument("--port", type=int, default=9190)
    s = sub.add_parser("server", help="run an RPC server that registers with a tracker")
    s.add_argument("--tracker", required=True, help="HOST:PORT of the tracker")
    s.add_argument("--key", required=True, help="device key, e.g. rk3399")
    s.add_argument("--host", default=LOOPBACK, help="bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=9090)
    args = ap.parse_args(argv)
    from tvm import rpc
    from tvm.rpc.tracker import Tracker

    if args.what == "tracker":
        proc = Tracker(host=args.host, port=args.port, port_end=args.port + 100, silent=True)
        print(f"tracker on {args.host}:{proc.port}", flush=True)
    else:
        thost, tport = parse_hostport(args.tracker)
        proc = rpc.Server(host=args.host, port=args.port, port_end=args.port + 100, tracker_addr=(thost, tport),
                          key=args.key, silent=True)
        print(f"server on {args.host}:{proc.port} key={args.key} tracker={args.tracker}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        proc.terminate()
    return 0


if __name__ == "__main__":
    from placer.process_exit import exit_process

    exit_process(main())
