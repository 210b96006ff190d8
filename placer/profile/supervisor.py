"""Profiling worker processes, parent side: start, talk to, time out and kill them.

:class:`WorkerProcess` runs one long-lived ``python -m placer.profile.worker`` process (its own
process group, its output in a temporary log) and speaks the worker's pipe protocol
(:func:`placer.profile.worker.write_msg`: a big-endian 4-byte header length, the JSON header, an
8-byte payload length, the payload): an ``init`` request on start, then one request at a time,
each with a deadline. A worker that dies (segfault, abort, OOM kill) or does not answer in time
(killed with its group) raises :class:`WorkerDied`, whose ``status`` says how (``crash``,
``timeout``; ``error`` / ``unavailable`` when it could not start) and whose ``reason`` quotes the
last line of its log. :class:`InProcessWorker` answers the same requests in this process
(``isolate=False``: no timeout, no crash safety).

The task engine (:mod:`placer.profile.engine`) and the link measurement of the campaigns
(:mod:`placer.profile.campaign`) use them.
"""

from __future__ import annotations

import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from placer.devices.registry import registered_kinds
from placer.profile.worker import WorkerCore, write_msg

__all__ = ["STARTUP_TIMEOUT_S", "InProcessWorker", "WorkerDied", "WorkerProcess"]

#: a worker has this long to import its runtimes and answer ``init``
STARTUP_TIMEOUT_S = 300.0


class WorkerDied(Exception):
    """A request got no answer: the worker died (``crash``), timed out (``timeout``) or did not start
    (``error``; ``unavailable``: its device is unreachable). ``reason`` says why, for the store."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class WorkerProcess:
    """Parent side of one ``python -m placer.profile.worker`` process serving ``targets``."""

    def __init__(self, targets: Sequence, *, preload: Sequence[str] = (), startup_timeout_s: float = STARTUP_TIMEOUT_S):
        self.targets = list(targets)
        self.preload = [p for p in preload if p not in {t.name for t in self.targets}]
        self.names = [t.name for t in self.targets]
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.fin = self.fout = None
        self.log_path: str | None = None
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        threads = max(t.spec.threads for t in self.targets)
        env.setdefault("TVM_NUM_THREADS", str(threads))
        env["PYTHONFAULTHANDLER"] = "1"
        for t in self.targets:  # configuration a target was given explicitly (tvm-rpc: RpcConfig)
            env.update(t.worker_env())
        return env

    def start(self) -> None:
        self.stop()
        r_req, w_req = os.pipe()
        r_rep, w_rep = os.pipe()
        fd, self.log_path = tempfile.mkstemp(prefix="placer-worker-", suffix=".log")
        cmd = [sys.executable, "-m", "placer.profile.worker", "--in", str(r_req), "--out", str(w_rep),
               "--ppid", str(os.getpid())]
        try:
            # own process group: a timed-out worker is killed with whatever it spawned (TVM tuning workers)
            self.proc = subprocess.Popen(cmd, pass_fds=(r_req, w_rep), stdin=subprocess.DEVNULL, stdout=fd,
                                         stderr=subprocess.STDOUT, env=self._env(), close_fds=True,
                                         start_new_session=True)
        finally:
            os.close(r_req)
            os.close(w_rep)
            os.close(fd)
        self.fout = os.fdopen(w_req, "wb", buffering=0)
        self.fin = os.fdopen(r_rep, "rb", buffering=0)
        self.starts += 1
        try:
            reply = self._request({"cmd": "init", "targets": self.names, "registry": registered_kinds(),
                                   "preload": self.preload}, b"",
                                  self.startup_timeout_s, what="starting")
        except WorkerDied as exc:
            self.stop()
            raise WorkerDied("error", f"worker for {', '.join(self.names)} did not start: {exc.reason}") from None
        if reply.get("status") != "ok":
            self.stop()
            status = "unavailable" if reply.get("status") == "unavailable" else "error"
            raise WorkerDied(status, f"worker for {', '.join(self.names)} did not start: {reply.get('reason')}")

    def request(self, header: dict, payload: bytes, timeout_s: float, what: str = "") -> dict:
        if not self.alive:
            self.start()
        return self._request(header, payload, timeout_s, what)

    def _request(self, header: dict, payload: bytes, timeout_s: float, what: str) -> dict:
        try:
            write_msg(self.fout, header, payload)
        except (BrokenPipeError, OSError):
            raise WorkerDied("crash", self._death_reason(what)) from None
        deadline = time.monotonic() + timeout_s
        try:
            (n,) = struct.unpack(">I", self._read(4, deadline))
            reply = json.loads(self._read(n, deadline))
            (pl,) = struct.unpack(">Q", self._read(8, deadline))
            if pl:
                self._read(pl, deadline)
            return reply
        except TimeoutError:
            self.kill()
            raise WorkerDied("timeout", f"no answer within {timeout_s:g} s {what}".rstrip()) from None
        except EOFError:
            raise WorkerDied("crash", self._death_reason(what)) from None

    def _read(self, n: int, deadline: float) -> bytes:
        buf = bytearray()
        fd = self.fin.fileno()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            r, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not r:
                continue
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def _death_reason(self, what: str) -> str:
        rc = None
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
                rc = self.proc.returncode
        if rc is not None and rc < 0:
            try:
                how = f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                how = f"killed by signal {-rc}"
            if -rc == signal.SIGKILL:
                how += " (out of memory?)"
        else:
            how = f"exited with status {rc}"
        detail = self._log_hint()
        self._close_pipes()
        return f"worker process {how} {what}".rstrip() + (f" [{detail}]" if detail else "")

    def _log_hint(self) -> str:
        if not self.log_path:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(size - 8192, 0))
                lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        for ln in lines:
            if ln.startswith("Fatal Python error"):
                return ln[:200]
        lines = [ln for ln in lines if not ln.startswith("[placer worker]") and not ln.startswith("File ")]
        return lines[-1][:200] if lines else ""

    def _close_pipes(self) -> None:
        for f in (self.fin, self.fout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        self.fin = self.fout = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group this worker leads (started above)
            except OSError:
                self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        self._close_pipes()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None and self.fout is not None:
            try:
                self._request({"cmd": "exit"}, b"", 10.0, "exiting")
                self.proc.wait(timeout=10)
            except (WorkerDied, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()
        try:  # leftovers of the worker's own group (e.g. TVM tuning pool processes)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if self.log_path:
            try:
                os.unlink(self.log_path)
            except OSError:
                pass
            self.log_path = None
        self.proc = None


class InProcessWorker:
    """``isolate=False``: the same requests answered in this process (no timeout, no crash safety)."""

    def __init__(self, targets: Sequence):
        # the core pins this process's thread to its targets' cores: given back on stop(), so that an
        # unpinned target measured next (or the caller) is not left on them
        self._affinity = os.sched_getaffinity(0)
        self.core = WorkerCore()
        self.core.init([t.name for t in targets], None)
        # reuse the caller's Target objects (same spec)
        for t in targets:
            self.core.targets[t.name] = t

    def request(self, header: dict, payload: bytes, timeout_s: float, what: str = "") -> dict:
        return self.core.handle(header, payload)

    def stop(self) -> None:
        if os.sched_getaffinity(0) != self._affinity:
            os.sched_setaffinity(0, self._affinity)

    kill = stop
