"""ProfileStore: schema, queries, bad files, link fits (no runtime runs)."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

from placer.devices import make_target
from placer.devices.links import LinkFit, LinkModel, fit_link
from placer.errors import PlacerError, ProfileError
from placer.profile import OVERHEAD_KEY, SCHEMA_VERSION, ProfileStore
from placer.profile.keys import op_signature_row, overhead_signature_row


@pytest.fixture()
def ort():
    return make_target("onnxruntime")


def test_put_get_missing_and_costs(tmp_path, ort, tiny):
    db = tmp_path / "p.db"
    with ProfileStore(db) as st:
        assert st.schema_version() == SCHEMA_VERSION and st.store_id
        rows = [op_signature_row(op) for op in tiny.ops] + [overhead_signature_row()]
        st.register_signatures(rows)
        st.register_signatures(rows)  # idempotent
        keys = [op.signature.hash for op in tiny.ops]
        assert set(st.missing(keys, [ort])) == {(k, ort.name) for k in keys}
        st.put(OVERHEAD_KEY, ort, kind="overhead", status="ok", median_ms=0.004, net_ms=0.004, n=10)
        for i, op in enumerate(tiny.ops):
            if op.op_type == "Relu":
                st.put(op.signature.hash, ort, kind="op", status="unsupported", reason="no Relu today")
            else:
                st.put(op.signature.hash, ort, kind="op", status="ok", median_ms=0.01 + i, net_ms=0.006 + i,
                       p10_ms=0.009, p90_ms=0.02, n=7, meta={"x": 1})
        assert st.missing(keys, [ort]) == []
        assert st.overhead_ms(ort) == pytest.approx(0.004)
        costs = st.op_costs(tiny, [ort])
        assert len(costs) == len(tiny.ops)
        for op in tiny.ops:
            c = costs[(op.id, ort.name)]
            assert math.isinf(c) if op.op_type == "Relu" else c > 0
        m = st.get(tiny.ops[0].signature.hash, ort)
        assert m.ok and m.meta == {"x": 1} and m.target_name == ort.name
        rows = st.measurements(target=ort, kind="op")
        assert len(rows) == len(tiny.ops)
        assert all(r["signature"]["op_type"] == r["op_type"] for r in rows)
        assert all({"flops", "bytes", "weight_bytes"} <= set(r) for r in rows)
        # replacing a row keeps one row per (key, target)
        st.put(tiny.ops[0].signature.hash, ort, kind="op", status="ok", median_ms=1.0, net_ms=0.996, n=3)
        assert st.count("op") == len(tiny.ops)
        assert st.integrity_check() == "ok"
    with ProfileStore(db, readonly=True) as st:  # reopen
        assert st.get(tiny.ops[0].signature.hash, ort.fingerprint_hash()).median_ms == 1.0


def test_missing_costs_raise(tmp_path, ort, tiny):
    with ProfileStore(tmp_path / "p.db") as st:
        with pytest.raises(ProfileError, match="not profiled"):
            st.op_costs(tiny, [ort])
        assert all(math.isinf(v) for v in st.op_costs(tiny, [ort], missing="inf").values())
        assert st.op_costs(tiny, [ort], missing="skip") == {}
        with pytest.raises(ProfileError, match="overhead"):
            st.overhead_ms(ort)


def test_not_sqlite(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello, I am not a database\n" * 10)
    with pytest.raises(ProfileError, match="notes.txt.*not a SQLite"):
        ProfileStore(bad)
    with pytest.raises(ProfileError, match="directory"):
        ProfileStore(tmp_path)
    with pytest.raises(ProfileError, match="does not exist"):
        ProfileStore(tmp_path / "nope" / "p.db")


def test_foreign_sqlite_and_newer_schema(tmp_path):
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(ProfileError, match="not a placer profile store"):
        ProfileStore(other)
    db = tmp_path / "p.db"
    ProfileStore(db).close()
    con = sqlite3.connect(db)
    con.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    con.commit()
    con.close()
    with pytest.raises(ProfileError, match=r"p\.db.*schema version"):
        ProfileStore(db)


def test_bad_status_is_rejected(tmp_path, ort):
    with ProfileStore(tmp_path / "p.db") as st:
        with pytest.raises(ProfileError):
            st.put("k", ort, kind="op", status="maybe")
        with pytest.raises(PlacerError):
            st.get("k", "no-such-kind")


def test_json_only(tmp_path, ort):
    """Meta and points are JSON text in the file (nothing pickled)."""
    db = tmp_path / "p.db"
    with ProfileStore(db) as st:
        st.put("k", ort, kind="op", status="ok", median_ms=1, net_ms=1, n=1, meta={"a": [1, 2]})
        st.put_link(ort, make_target("openvino"), 0.01, 1e-9, [{"nbytes": 1, "handoff_ms": 0.01}])
    con = sqlite3.connect(db)
    assert json.loads(con.execute("SELECT meta FROM measurements").fetchone()[0]) == {"a": [1, 2]}
    assert json.loads(con.execute("SELECT points FROM links").fetchone()[0])[0]["nbytes"] == 1
    con.close()


@pytest.mark.parametrize("column, value, expect", [
    ("meta", "'[1]'", r"meta is a JSON list, not an object"),
    ("meta", "'5'", r"meta is a JSON int, not an object"),
    ("n", "'x'", r"n = 'x' is not a count of samples"),
    ("timestamp", "'soon'", r"timestamp = 'soon' is not a time"),
    ("p10_ms", "'abc'", r"p10_ms = 'abc' is not a time >= 0"),
    ("p90_ms", "-1.0", r"p90_ms = '-1.0' is not a time >= 0"),
])
def test_an_edited_row_is_named_not_a_traceback_later(tmp_path, ort, column, value, expect):
    """SQLite keeps text in a REAL column and any JSON in meta: such a row raised AttributeError,
    ValueError or TypeError wherever it was read (the cost model's reader, the engine)."""
    db = tmp_path / "p.db"
    with ProfileStore(db) as st:
        st.put("k", ort, kind="op", status="ok", median_ms=1, net_ms=1, p10_ms=0.9, p90_ms=1.1, n=5,
               meta={"pace_ms": 1.0})
    con = sqlite3.connect(db)
    con.execute(f"UPDATE measurements SET {column} = {value}")
    con.commit()
    con.close()
    with ProfileStore(db) as st:
        with pytest.raises(ProfileError, match=f"measurement 'k' on onnxruntime@cpu:t1: {expect}"):
            st.get("k", ort)
        with pytest.raises(ProfileError, match=expect):
            st.measurements()


def test_fit_link_nonnegative_monotone():
    n = [1e3, 1e4, 1e5, 1e6, 1e7]
    lat, slope = fit_link(n, [0.01 + x * 2e-9 for x in n])
    assert lat == pytest.approx(0.01, rel=1e-3) and slope == pytest.approx(2e-9, rel=1e-3)
    lat, slope = fit_link(n, [0.02, 0.02, 0.019, 0.018, -0.05])  # noisy, decreasing: slope clipped at 0
    assert lat > 0 and slope == 0.0
    lat, slope = fit_link(n, [x * 1e-9 for x in n])
    assert lat >= 0 and slope > 0


def test_link_model_same_target_zero():
    f = LinkFit("onnxruntime@cpu:t1", "openvino@cpu:t1", 0.02, 1e-9)
    lm = LinkModel([f])
    assert lm.transfer_ms(10**6, "onnxruntime", "onnxruntime") == 0.0
    assert lm.transfer_ms(10**6, "onnxruntime", "openvino") == pytest.approx(0.021)
    assert lm.boundary_ms([10**6, 10**6], "onnxruntime", "openvino") == pytest.approx(0.022)
    with pytest.raises(ProfileError, match="no link"):
        lm.transfer_ms(1, "openvino", "onnxruntime")
    assert LinkModel.from_dict(lm.to_dict()).transfer_ms(0, "onnxruntime", "openvino") == pytest.approx(0.02)
