"""LocalPostgres when the server does not start: the start's own error reaches the caller and the
temporary directory is removed (no PostgreSQL needed: the server's commands are stood in for)."""

from __future__ import annotations

from pathlib import Path

import pytest

from placer.errors import PlacerError
from placer.tune import local_postgres
from placer.tune.local_postgres import LocalPostgres


def test_a_server_that_fails_to_start_reports_its_error_and_leaves_nothing(tmp_path, monkeypatch):
    """``pg_ctl start`` failing (a port taken, a bad option) raised the start's PlacerError through
    ``__enter__``'s cleanup, which read the server's bin directory before start had set it: an
    AttributeError replaced the error and the directory stayed behind."""
    calls: list[str] = []

    def run(self, *args, timeout=120):
        calls.append(Path(args[0]).name + (" " + args[-1] if args[-1] in ("start", "stop") else ""))
        if args[-1] == "start":
            raise PlacerError("pg_ctl failed (1): could not start server")

    pg_ctl = tmp_path / "pg_ctl"  # what stop() runs: a stand-in that stops nothing
    pg_ctl.write_text("#!/bin/sh\nexit 0\n")
    pg_ctl.chmod(0o755)
    monkeypatch.setattr(local_postgres, "postgres_bin_dir", lambda: tmp_path)
    monkeypatch.setattr(local_postgres.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(LocalPostgres, "_run", run)
    server = LocalPostgres()
    with pytest.raises(PlacerError, match="could not start server"), server:
        pass
    assert calls == ["initdb", "pg_ctl start"]
    assert server.root is None  # stopped: its temporary directory removed
