"""Remote targets over TVM RPC on loopback: a tracker and a server started here (free ports,
127.0.0.1), compile + upload + remote run/timing, a profiling campaign through them, clean teardown."""

from __future__ import annotations

import math
import os
import time

import numpy as np
import pytest

from placer.devices import make_target
from placer.devices.rpc import RpcTarget, rpc_config
from placer.errors import TargetError


@pytest.fixture(scope="module")
def tiny_graph():
    from placer import api

    return api.load("zoo:tiny")


def test_cluster_is_loopback(rpc_cluster):
    from placer.devices.rpc import tracker_summary

    host, port = rpc_cluster.tracker.split(":")
    assert host == "127.0.0.1"
    info = tracker_summary(host, int(port))
    servers = [s for s in info["server_info"] if s["key"].endswith(":placer-test")]
    assert len(servers) == 1 and servers[0]["addr"][0] == "127.0.0.1"
    cfg = rpc_config()
    assert (cfg.tracker, cfg.key) == (rpc_cluster.tracker, "placer-test")


def test_remote_compile_run_and_time(rpc_cluster, tiny_graph):
    from placer.profile.timing import TimingConfig, random_feeds

    t = make_target("tvm-rpc")
    assert isinstance(t, RpcTarget) and t.name == "tvm-rpc@cpu:t1"
    fp = t.fingerprint()
    assert fp["key"] == "placer-test" and fp["tracker"] == rpc_cluster.tracker and fp["remote_hosts"] == ["127.0.0.1"]
    named = make_target("tvm-rpc:placer-test")
    assert named.name == "tvm-rpc:placer-test" and named.key == "placer-test"
    model = tiny_graph.model
    feeds = random_feeds(model, 0)
    remote = t.compile(model)
    local = make_target("tvm-llvm").compile(model)
    try:
        out, ref = remote.run(feeds), local.run(feeds)
        assert out.keys() == ref.keys()
        for k in out:
            np.testing.assert_allclose(out[k], ref[k], rtol=1e-5, atol=1e-6)
        # inputs that changed are sent again
        feeds2 = {k: v + 1 for k, v in feeds.items()}
        np.testing.assert_allclose(remote.run(feeds2)[k], local.run(feeds2)[k], rtol=1e-5, atol=1e-6)
        stats = remote.time_run(feeds, TimingConfig(max_time_s=0.05, batch_s=0.005))
        assert stats.n >= 3 and 0 < stats.median_ms < 20.0
    finally:
        remote.close()
        local.close()
        t.close()


def test_no_server_for_key(rpc_cluster):
    with pytest.raises(TargetError, match="no RPC server is registered under key 'nobody'"):
        make_target("tvm-rpc:nobody").fingerprint()


def test_unconfigured(monkeypatch):
    monkeypatch.delenv("PLACER_RPC_TRACKER", raising=False)
    with pytest.raises(TargetError, match="no tracker configured"):
        make_target("tvm-rpc").runtime_version()


def test_rpc_config_is_passed_not_written_to_the_environment(monkeypatch):
    """An explicit RpcConfig: nothing lands in this process's environment, and a profiling worker,
    which rebuilds the target by name, gets it in its own environment (Target.worker_env)."""
    from placer.devices import TargetSpec
    from placer.profile.campaign import WorkerProcess

    for k in ("PLACER_RPC_TRACKER", "PLACER_RPC_KEY", "PLACER_RPC_TARGET", "PLACER_RPC_CC",
              "PLACER_RPC_SESSION_TIMEOUT"):
        monkeypatch.delenv(k, raising=False)
    before = dict(os.environ)
    cfg = rpc_config("127.0.0.1:9", "board", target={"kind": "llvm"}, session_timeout_s=30)
    assert (cfg.tracker, cfg.key, cfg.target_json, cfg.session_timeout_s) == \
        ("127.0.0.1:9", "board", '{"kind": "llvm"}', 30.0)
    env = cfg.to_env()
    assert env == {"PLACER_RPC_TRACKER": "127.0.0.1:9", "PLACER_RPC_KEY": "board",
                   "PLACER_RPC_TARGET": '{"kind": "llvm"}', "PLACER_RPC_SESSION_TIMEOUT": "30.0"}
    assert rpc_config(environ=env) == cfg  # the round trip a worker makes
    t = RpcTarget(TargetSpec.parse("tvm-rpc"), config=cfg)
    assert t.config is cfg and t.key == "board" and t.worker_env() == env
    assert RpcTarget(TargetSpec.parse("tvm-rpc")).worker_env() == {}  # from the environment: inherited
    assert {k: v for k, v in WorkerProcess([t])._env().items() if k.startswith("PLACER_RPC")} == env
    assert dict(os.environ) == before
    with pytest.raises(TargetError, match="no tracker configured"):
        rpc_config(key="board", environ={})


def test_profile_campaign_through_rpc(rpc_cluster, run_placer, tmp_path, tiny_graph):
    """`placer profile --rpc-tracker --rpc-key` profiles every op on the remote device (worker
    subprocess, config through the environment) into a fresh store.

    It used to hang (240 s) when it ran after tests/reliability: this process's earlier session,
    closed but kept alive by a reference cycle until a full garbage collection (rarer once the
    corpus had filled the old generation), still held the only server, and TVM waits for a free
    one without a timeout. Sessions are now released on close and requests are bounded."""
    from placer.profile import ProfileStore

    db = tmp_path / "rpc.db"
    p = run_placer("profile", "zoo:tiny", "--targets", "tvm-rpc", "--db", db, "--quiet", "--no-links",
                   "--rpc-tracker", rpc_cluster.tracker, "--rpc-key", rpc_cluster.key, timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    t = make_target("tvm-rpc")
    with ProfileStore(db) as st:
        targets = st.targets()
        assert [r["name"] for r in targets] == ["tvm-rpc@cpu:t1"]
        assert targets[0]["hash"] == t.fingerprint_hash()  # same device identity here and in the worker
        fp = targets[0]["fingerprint"]
        assert fp["key"] == "placer-test" and fp["remote_hosts"] == ["127.0.0.1"]
        costs = st.op_costs(tiny_graph, [t])
        assert len(costs) == len(tiny_graph.ops)
        assert all(math.isfinite(c) and 0 <= c < 50.0 for c in costs.values()), costs
        rows = st.measurements(target=t, kind="op")
        assert rows and all(r["status"] == "ok" for r in rows)
        assert all(0 < r["median_ms"] < 50.0 for r in rows), rows
        overhead = st.overhead_ms(t)
        assert 0 < overhead < 1.0  # the remote VM's call floor (device clock: no round trip in it)
        op_rows = {r["key"]: r for r in rows}
        assert all(r["n"] >= 3 for r in op_rows.values())
    # the CLI process and its workers are gone; the server is free for the next session
    again = make_target("tvm-rpc")
    c = again.compile(tiny_graph.single_op_model(tiny_graph.ops[0].id))
    c.close()
    again.close()
    assert os.environ["PLACER_RPC_KEY"] == "placer-test"


def test_busy_server_gives_a_clear_error_not_a_hang(rpc_cluster):
    """The tracker answers a session request only when a server under the key is free, and TVM would
    wait forever: with the only server held by one target's session, another target's request
    ends after its timeout with a clear error; once the first target closes, the server serves
    again (its session really released, not left to the garbage collector)."""
    holder, waiter = make_target("tvm-rpc"), make_target("tvm-rpc")
    waiter.request_timeout_s = 1.0
    holder.session()
    try:
        with pytest.raises(TargetError, match="no RPC server under key 'placer-test' became free within 1 s"):
            waiter.session()
    finally:
        holder.close()
    waiter.request_timeout_s = 60.0
    assert waiter.session() is not None
    waiter.close()


def test_two_devices_one_store_and_a_device_lost_mid_campaign(rpc_cluster, tiny_graph, tmp_path):
    """Two remote devices behind one tracker profile into one store, keyed per device. The second
    device's server is killed once the campaign has measured on it: the campaign says so, stores
    nothing for the outage (no op marked unsupported or failed because the device was gone) and
    finishes the other device; with the server back, a second run measures only what was left."""
    import sqlite3
    import threading

    from placer.profile import ProfileStore, profile_graph

    db = tmp_path / "two.db"
    server_b = rpc_cluster.add_server("placer-b")
    tb, ta = make_target("tvm-rpc:placer-b"), make_target("tvm-rpc:placer-test")
    assert tb.fingerprint_hash() != ta.fingerprint_hash()  # one device, one key in the store

    def rows_of_b() -> int:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
                return con.execute("SELECT COUNT(*) FROM measurements m JOIN targets t ON m.target = t.hash "
                                   "WHERE t.name = ?", (tb.name,)).fetchone()[0]
        except sqlite3.Error:
            return 0

    killed = threading.Event()

    def kill_b_once_it_measured() -> None:
        while not killed.is_set():  # until the server is killed or the campaign is over
            if rows_of_b() >= 1:
                rpc_cluster.stop_server(server_b)
                killed.set()
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_b_once_it_measured, daemon=True)
    killer.start()
    first = profile_graph(tiny_graph, [tb, ta], db, progress=False, links=False, timeout_s=120)
    killed.set()
    killer.join(30)
    assert not rpc_cluster_lists(rpc_cluster, "placer-b")
    assert any(p.startswith(f"{tb.name} became unavailable") for p in first.problems), first.problems
    with ProfileStore(db) as st:
        b_rows = st.measurements(target=tb)
        assert b_rows and all(r["status"] == "ok" for r in b_rows)  # the outage left no failure behind
        assert len(b_rows) < first.per_target[tb.name].ops_total + 2  # ops + overhead + whole model
        a_costs = st.op_costs(tiny_graph, [ta])
        assert all(math.isfinite(c) for c in a_costs.values())  # the other device was finished
    tb.close()

    rpc_cluster.add_server("placer-b")  # the device is back (same host: same fingerprint)
    again = profile_graph(tiny_graph, [make_target("tvm-rpc:placer-b"), make_target("tvm-rpc:placer-test")], db,
                          progress=False, links=False, timeout_s=120)
    assert not again.problems, again.problems
    assert again.per_target[ta.name].n("measured", None) == 0  # nothing of the other device measured twice
    assert again.per_target[tb.name].n("measured", None) >= 1
    with ProfileStore(db) as st:
        assert {r["name"] for r in st.targets()} >= {ta.name, tb.name}
        costs = st.op_costs(tiny_graph, [tb])
        assert len(costs) == len(tiny_graph.ops) and all(math.isfinite(c) for c in costs.values())


def rpc_cluster_lists(cluster, key: str) -> bool:
    from placer.devices.rpc import tracker_summary

    host, port = cluster.tracker.split(":")
    return any(str(s.get("key", "")).split(":", 1)[-1] == key
               for s in tracker_summary(host, int(port)).get("server_info", []))
