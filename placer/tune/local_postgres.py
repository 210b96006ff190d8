"""A throwaway PostgreSQL server in a temporary directory, for trying a shared study on one machine
(and for the tests and the scale-out benchmark): ``initdb`` + ``pg_ctl`` from the Debian/Ubuntu
package (``apt-get install postgresql``), listening on 127.0.0.1 only, trust authentication.
Never use it for a real deployment: docs/scale-out.md says how to point workers at a real server.

    with LocalPostgres() as pg:
        print(pg.url)   # postgresql+psycopg2://postgres@127.0.0.1:PORT/placer
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from placer.errors import PlacerError


def postgres_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (newest installed version), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name)
                  if Path(d).parent.name.isdigit() else 0)
    for d in reversed(dirs):
        if (Path(d) / "initdb").is_file() and (Path(d) / "pg_ctl").is_file():
            return Path(d)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPostgres:
    """Start on ``__enter__`` (or :meth:`start`), stop and delete everything on ``__exit__``.

    PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` system user the
    package creates (its data directory is handed to that user)."""

    def __init__(self, database: str = "placer"):
        self.database = database
        self.port = 0
        self.root: Path | None = None
        self._as: list[str] = []

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *args: str, timeout: float = 120) -> None:
        p = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise PlacerError(f"{Path(args[0]).name} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-500:]}")

    def start(self) -> "LocalPostgres":
        bindir = postgres_bin_dir()
        if bindir is None:
            raise PlacerError("PostgreSQL server binaries not found (initdb, pg_ctl): apt-get install postgresql")
        self._bindir = bindir  # before anything can fail: stop() needs it to stop a half-started server
        self.root = Path(tempfile.mkdtemp(prefix="placer-pg-"))
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise PlacerError("running as root and there is no 'postgres' user to run the server as") from None
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        data = self.root / "data"
        self._run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync")
        self.port = _free_port()
        opts = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} "
                "-c fsync=off -c max_connections=400")
        self._run(str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(self.root / "server.log"),
                  "-w", "-t", "60", "start")
        self._run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                  self.database)
        return self

    def stop(self) -> None:
        if self.root is None:
            return
        try:
            if self.port:
                subprocess.run([*self._as, str(self._bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m",
                                "immediate", "-w", "stop"], capture_output=True, timeout=60)
        finally:  # the directory goes whatever pg_ctl does
            shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> "LocalPostgres":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
