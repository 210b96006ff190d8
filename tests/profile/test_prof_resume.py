"""Killed campaigns resume; two campaigns share one store."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from _profhelpers import ROOT, campaign_code

from placer.profile import ProfileStore, profile_graph

pytestmark = pytest.mark.slow


def _count(db) -> int:
    if not os.path.exists(db):
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return int(con.execute("SELECT count(*) FROM measurements").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def _env():
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def _rows(db):
    con = sqlite3.connect(db)
    try:
        return {(r[0], r[1]): (r[2], r[3]) for r in con.execute("SELECT key, target, id, timestamp FROM measurements")}
    finally:
        con.close()


def _no_duplicates(db):
    con = sqlite3.connect(db)
    try:
        n, d = con.execute("SELECT count(*), count(DISTINCT key || '|' || target) FROM measurements").fetchone()
        return n == d
    finally:
        con.close()


def test_kill9_then_resume(tmp_path, squeezenet, fast_timing):
    db = str(tmp_path / "p.db")
    targets = ["onnxruntime", "openvino"]
    code = campaign_code(db, "zoo:squeezenet", targets)
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while _count(db) < 6:
            assert p.poll() is None, p.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "campaign made no progress"
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    before = _rows(db)
    n_total = 2 * (len(squeezenet.unique_signatures()) + 1)
    assert 6 <= len(before) < n_total
    res = profile_graph(squeezenet, targets, db, progress=False, links=False, whole_model=False, timing=fast_timing)
    after = _rows(db)
    assert res.cached == len(before) and res.measured + res.unsupported + res.cached == n_total
    assert len(after) == n_total
    assert all(after[k] == v for k, v in before.items())  # earlier rows kept as they were
    assert _no_duplicates(db)
    with ProfileStore(db) as st:
        assert st.integrity_check() == "ok"


def test_two_campaigns_one_store(tmp_path, squeezenet):
    db = str(tmp_path / "p.db")
    code = campaign_code(db, "zoo:squeezenet", ["onnxruntime"])
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    results = [[int(x) for x in o.split("RESULT", 1)[1].split()] for o in outs]
    n_total = len(squeezenet.unique_signatures()) + 1
    for measured, cached, unsupported, failed in results:
        assert measured + cached + unsupported == n_total and failed == 0
    assert sum(r[0] for r in results) >= n_total  # together they measured everything
    assert len(_rows(db)) == n_total and _no_duplicates(db)
    with ProfileStore(db) as st:
        assert st.integrity_check() == "ok"
        assert st.missing([op.signature.hash for op in squeezenet.ops], ["onnxruntime"]) == []
