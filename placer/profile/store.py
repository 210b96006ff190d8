"""ProfileStore: every measurement placer makes, in one SQLite file.

Rows are keyed by (measurement key, target fingerprint hash). A measurement key is

* an op **signature hash** (``Op.signature.hash``) for single-op profiles (kind ``op``),
* a **segment key** ``seg:...`` for an op set profiled as one unit (kind ``segment``,
  :func:`placer.profile.keys.segment_key`),
* ``model:<model_hash>`` for a whole model run as one partition (kind ``model``),
* ``overhead:add1`` for a target's fixed call cost (kind ``overhead``: a 1-element Add).

Tables (``schema_version`` holds :data:`SCHEMA_VERSION`):

``targets(hash, name, kind, runtime, fingerprint JSON, created)``
``signatures(key, kind, op_type, signature JSON, flops, bytes, weight_bytes, created)`` -- the
    Signature's ``to_dict()`` (or a segment/model descriptor) plus the numbers a cost model needs.
``measurements(id, key, kind, target, status, reason, median_ms, net_ms, p10_ms, p90_ms, n,
    timestamp, meta JSON)`` -- one row per (key, target); ``status`` is ``ok``, ``unsupported``
    (static check or compile error), ``error`` (raised while running), ``timeout`` or ``crash``
    (the worker process died: segfault, abort, OOM kill). ``net_ms = max(median_ms - overhead, 0)``.
``links(src, dst, latency_ms, ms_per_byte, points JSON, timestamp, meta JSON)`` -- hand-off fits.
``probes(id, session, key, target, median_ms, timestamp)`` -- ops a campaign measured again to tell
    how fast the machine ran in its session against the others (:mod:`placer.profile.drift`); a
    measurement's ``meta`` names the ``session`` that took it. A store made before this table
    existed gets it when opened for writing, and reads as having no probes.
``info(key, value)`` -- the store id (provenance of plans).

Concurrency and crashes: WAL journal, ``busy_timeout``, one ``BEGIN IMMEDIATE`` transaction per
measurement; a campaign killed with SIGKILL loses at most the measurement in flight, and two
campaigns may write one store at once. Only JSON is ever decoded from the file (no pickle).
"""

from __future__ import annotations

import json
import math
import os
import random
import sqlite3
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placer.devices import make_target
from placer.devices.links import LinkFit, LinkModel
from placer.errors import PlacerError, ProfileError
from placer.profile.keys import OVERHEAD_KEY
from placer.profile.pace import pace_factors
from placer.safe_io import loads

SCHEMA_VERSION = 1
STATUSES = ("ok", "unsupported", "error", "timeout", "crash")
KINDS = ("op", "segment", "model", "overhead", "partition")
BUSY_TIMEOUT_MS = 60_000
#: a row's meta key: its second window is still to take. A first window that will get one is stored
#: with it and the second window clears it, so that a campaign stopped in between (killed, its budget's
#: hurry point come first) leaves it, and a later campaign takes it (:mod:`placer.profile.engine`); a
#: one-thread target's probation clears it on the rows it leaves at one window; a second window that
#: fails leaves it (the next campaign tries again); a campaign that takes no second windows leaves it
WINDOW_DUE = "second_window_due"
_SQLITE_MAGIC = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS targets (
    hash TEXT PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, runtime TEXT,
    fingerprint TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS signatures (
    key TEXT PRIMARY KEY, kind TEXT NOT NULL, op_type TEXT, signature TEXT NOT NULL,
    flops REAL, bytes REAL, weight_bytes REAL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok','unsupported','error','timeout','crash')),
    reason TEXT, median_ms REAL, net_ms REAL, p10_ms REAL, p90_ms REAL, n INTEGER,
    timestamp REAL NOT NULL, meta TEXT NOT NULL DEFAULT '{}',
    UNIQUE (key, target));
CREATE INDEX IF NOT EXISTS measurements_target_kind ON measurements (target, kind);
CREATE TABLE IF NOT EXISTS links (
    src TEXT NOT NULL, dst TEXT NOT NULL, latency_ms REAL NOT NULL, ms_per_byte REAL NOT NULL,
    points TEXT NOT NULL, timestamp REAL NOT NULL, meta TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (src, dst));
CREATE TABLE IF NOT EXISTS probes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL, key TEXT NOT NULL, target TEXT NOT NULL,
    median_ms REAL NOT NULL, timestamp REAL NOT NULL);
CREATE INDEX IF NOT EXISTS probes_target ON probes (target);
"""


_TABLES = frozenset({"schema_version", "info", "targets", "signatures", "measurements", "links"})


@dataclass(frozen=True)
class Measurement:
    """One row of ``measurements`` (times in ms; None where the status is not ``ok``)."""

    key: str
    kind: str
    target: str  # fingerprint hash
    target_name: str
    status: str
    reason: str = ""
    median_ms: float | None = None
    net_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    n: int = 0
    timestamp: float = 0.0
    meta: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def supported(self) -> bool:
        """False for every failure status: the op cannot run on that target (cost = inf)."""
        return self.status == "ok"

    def cost_ms(self) -> float:
        """Net cost, or ``inf`` where the op is unsupported / failed."""
        return float(self.net_ms) if self.ok and self.net_ms is not None else math.inf

    def to_dict(self) -> dict:
        return {
            "key": self.key, "kind": self.kind, "target": self.target, "target_name": self.target_name,
            "status": self.status, "reason": self.reason, "median_ms": self.median_ms, "net_ms": self.net_ms,
            "p10_ms": self.p10_ms, "p90_ms": self.p90_ms, "n": self.n, "timestamp": self.timestamp, "meta": self.meta,
        }


_M_COLS = "m.key, m.kind, m.target, t.name, m.status, m.reason, m.median_ms, m.net_ms, m.p10_ms, m.p90_ms, m.n, m.timestamp, m.meta"


#: longest JSON text a store column may hold (signatures and metadata are small)
MAX_JSON_COLUMN = 1 << 20


def _transient(exc: sqlite3.OperationalError) -> bool:
    """Whether opening a store may succeed if tried again: a lock held by another process, or an
    I/O error (SQLite's "disk I/O error")."""
    msg = str(exc)
    return "locked" in msg or "disk I/O error" in msg


def _json_column(text, what: str):
    """A JSON column (only JSON is ever decoded from a store); ProfileError if it is not JSON."""
    if not isinstance(text, (str, bytes)):
        raise ProfileError(f"{what} is not valid JSON (a damaged or edited profile store?)")
    if len(text) > MAX_JSON_COLUMN:
        raise ProfileError(f"{what} is {len(text)} characters of JSON, over {MAX_JSON_COLUMN} (a damaged or "
                           "edited profile store?)")
    try:
        return loads(text, what, ProfileError)
    except ProfileError as exc:  # invalid JSON, bytes of a pickle, nesting, repeated keys, huge numbers ...
        raise ProfileError(f"{exc} (a damaged or edited profile store?)") from None


def _row_to_measurement(r) -> Measurement:
    what = f"measurement {r[0]!r} on {r[3] or r[2]}"
    damaged = "(a damaged or edited profile store?)"

    def time_ok(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0

    for col, x in (("median_ms", r[6]), ("net_ms", r[7])):
        if r[4] == "ok" and not time_ok(x):
            raise ProfileError(f"{what}: {col} = {x!r} is not a time >= 0 {damaged}")
    for col, x in (("p10_ms", r[8]), ("p90_ms", r[9])):  # optional, but a time where given (SQLite keeps text)
        if x is not None and not time_ok(x):
            raise ProfileError(f"{what}: {col} = {str(x)[:40]!r} is not a time >= 0 {damaged}")
    if r[10] is not None and not (isinstance(r[10], int) and r[10] >= 0):
        raise ProfileError(f"{what}: n = {str(r[10])[:40]!r} is not a count of samples {damaged}")
    if not (isinstance(r[11], (int, float)) and math.isfinite(r[11])):
        raise ProfileError(f"{what}: timestamp = {str(r[11])[:40]!r} is not a time {damaged}")
    meta = _json_column(r[12] or "{}", f"{what}: meta")
    if not isinstance(meta, dict):
        raise ProfileError(f"{what}: meta is a JSON {type(meta).__name__}, not an object {damaged}")
    return Measurement(
        key=r[0], kind=r[1], target=r[2], target_name=r[3] or r[2], status=r[4], reason=r[5] or "",
        median_ms=r[6], net_ms=r[7], p10_ms=r[8], p90_ms=r[9], n=int(r[10] or 0), timestamp=float(r[11]),
        meta=meta,
    )


class ProfileStore:
    """A profile store file (created if missing). Use as a context manager or call :meth:`close`.

    ``readonly=True``: the file must exist and be a store; it is neither created nor upgraded
    (nothing stops a caller from writing through the methods, though). ``busy_timeout_ms``: how
    long a write waits for another process's transaction.
    """

    def __init__(self, path: str | os.PathLike, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS, readonly: bool = False):
        self.path = str(path)
        self._conn = None
        self._hash_cache: dict[str, str] = {}
        self._names: dict[str, str] = {}
        if self.path != ":memory:":
            p = Path(self.path)
            if p.is_dir():
                raise ProfileError(f"profile store {self.path!r} is a directory, not a SQLite file")
            if p.exists() and not p.is_file():  # a FIFO would block SQLite's open, a device feed it garbage
                raise ProfileError(f"profile store {self.path!r} is not a regular file (a FIFO, device or "
                                   "socket)")
            if p.exists() and p.stat().st_size > 0:
                with open(p, "rb") as f:
                    head = f.read(16)
                if head != _SQLITE_MAGIC:
                    raise ProfileError(f"profile store {self.path!r} is not a SQLite database")
            elif readonly:
                raise ProfileError(f"profile store {self.path!r} does not exist")
            elif not p.parent.exists():
                raise ProfileError(f"profile store {self.path!r}: directory {str(p.parent)!r} does not exist")
        # Two processes opening a fresh store at once can get SQLITE_BUSY straight away from the
        # journal-mode switch or the schema creation (the busy handler does not cover those paths),
        # and a store on a virtual machine's disk once failed to open with SQLITE_IOERR mid-run
        # (ten-model comparison, session 11; it opened at the next try): retry those with a jittered
        # back-off, up to the busy timeout.
        deadline = time.monotonic() + busy_timeout_ms / 1000
        while True:
            try:
                self._open(busy_timeout_ms, readonly)
                return
            except sqlite3.OperationalError as exc:
                self.close()
                if not _transient(exc) or time.monotonic() > deadline:
                    raise ProfileError(f"profile store {self.path!r} cannot be opened: {exc}") from None
                time.sleep(0.05 + 0.25 * random.random())
            except sqlite3.DatabaseError as exc:
                self.close()
                raise ProfileError(f"profile store {self.path!r} cannot be opened: {exc}") from None
            except PlacerError:
                self.close()
                raise

    def _open(self, busy_timeout_ms: int, readonly: bool) -> None:
        self._conn = sqlite3.connect(self.path, timeout=busy_timeout_ms / 1000, isolation_level=None)
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        self._init_schema(readonly)

    # ---- schema -------------------------------------------------------------------------------
    def _init_schema(self, readonly: bool) -> None:
        c = self._conn
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "schema_version" not in tables:
            raise ProfileError(
                f"{self.path!r} is a SQLite database but not a placer profile store (no schema_version table)"
            )
        if "schema_version" in tables:
            if not c.execute("SELECT 1 FROM schema_version").fetchone():  # made with its row, in one tx
                raise ProfileError(f"profile store {self.path!r} is damaged: its schema_version table is "
                                   "empty")
            self._check_version()
            missing = sorted(_TABLES - tables)
            if missing:
                raise ProfileError(f"profile store {self.path!r} is damaged: table(s) {', '.join(missing)} missing")
            if readonly:
                return
        elif readonly:
            raise ProfileError(f"profile store {self.path!r} is empty")
        # only now, the file known to be a store this placer reads (or empty), is anything written to it:
        # a foreign, damaged or newer database is refused above exactly as it was found
        if self.path != ":memory:":
            c.execute("PRAGMA journal_mode = WAL")
            c.execute("PRAGMA synchronous = NORMAL")
        with self._tx():
            # (executescript would commit on its own: run the statements one by one in this transaction)
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)
            if not c.execute("SELECT version FROM schema_version").fetchall():
                c.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            if not c.execute("SELECT 1 FROM info WHERE key='store_id'").fetchone():
                c.execute("INSERT INTO info (key, value) VALUES ('store_id', ?)", (uuid.uuid4().hex,))
                c.execute("INSERT OR IGNORE INTO info (key, value) VALUES ('created', ?)", (str(time.time()),))
        self._check_version()

    def _check_version(self) -> None:
        rows = self._conn.execute("SELECT version FROM schema_version").fetchall()
        if rows:
            try:
                v = max(int(r[0]) for r in rows)
            except (TypeError, ValueError, OverflowError):
                raise ProfileError(f"profile store {self.path!r} is damaged: its schema_version is "
                                   f"{str(rows[0][0])[:40]!r}") from None
            if v > SCHEMA_VERSION:
                raise ProfileError(
                    f"profile store {self.path!r} has schema version {v}; this placer reads versions <= "
                    f"{SCHEMA_VERSION} (upgrade placer or use another --db)"
                )

    def _tx(self):
        return _Transaction(self._conn, self.path)

    @property
    def store_id(self) -> str:
        row = self._conn.execute("SELECT value FROM info WHERE key='store_id'").fetchone()
        return row[0] if row else ""

    def schema_version(self) -> int:
        return int(self._conn.execute("SELECT max(version) FROM schema_version").fetchone()[0])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> ProfileStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ProfileStore {self.path}>"

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check`` (``"ok"`` when the file is consistent)."""
        return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])

    # ---- targets ------------------------------------------------------------------------------
    def register_target(self, target) -> str:
        """Store a target's fingerprint; return its hash."""
        h = target.fingerprint_hash()
        if h in self._names:
            return h
        fp = json.dumps(target.fingerprint(), sort_keys=True)
        with self._tx() as c:
            c.execute(
                "INSERT OR IGNORE INTO targets (hash, name, kind, runtime, fingerprint, created) VALUES (?,?,?,?,?,?)",
                (h, target.name, target.kind, getattr(target, "runtime", ""), fp, time.time()),
            )
        self._names[h] = target.name
        self._hash_cache[target.name] = h
        return h

    def target_hash(self, target) -> str:
        """Fingerprint hash of a Target, a target name (``onnxruntime``), or a stored hash."""
        if hasattr(target, "fingerprint_hash"):
            return self.register_target(target)
        text = str(target)
        if text in self._hash_cache:
            return self._hash_cache[text]
        if self._conn.execute("SELECT 1 FROM targets WHERE hash=?", (text,)).fetchone():
            return text
        h = self.register_target(make_target(text))
        self._hash_cache[text] = h
        return h

    def target_name(self, target_hash: str) -> str:
        if target_hash not in self._names:
            row = self._conn.execute("SELECT name FROM targets WHERE hash=?", (target_hash,)).fetchone()
            self._names[target_hash] = row[0] if row else target_hash
        return self._names[target_hash]

    def targets(self) -> list[dict]:
        rows = self._conn.execute("SELECT hash, name, kind, runtime, fingerprint, created FROM targets ORDER BY created")
        return [
            {"hash": r[0], "name": r[1], "kind": r[2], "runtime": r[3],
             "fingerprint": _json_column(r[4], f"target {r[1]!r} fingerprint"), "created": r[5]}
            for r in rows
        ]

    # ---- signatures ---------------------------------------------------------------------------
    def register_signatures(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Insert signature rows (``key, kind, op_type, signature, flops, bytes, weight_bytes``); keeps existing."""
        now = time.time()
        data = [
            (
                r["key"], r.get("kind", "op"), r.get("op_type"), json.dumps(r.get("signature", {}), sort_keys=True, default=str),
                _num(r.get("flops")), _num(r.get("bytes")), _num(r.get("weight_bytes")), now,
            )
            for r in rows
        ]
        if not data:
            return
        known = self._known_signature_keys([d[0] for d in data])
        data = [d for d in data if d[0] not in known]
        if not data:
            return
        with self._tx() as c:
            c.executemany(
                "INSERT OR IGNORE INTO signatures (key, kind, op_type, signature, flops, bytes, weight_bytes, created) "
                "VALUES (?,?,?,?,?,?,?,?)",
                data,
            )

    def _known_signature_keys(self, keys: Sequence[str]) -> set[str]:
        out: set[str] = set()
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = f"SELECT key FROM signatures WHERE key IN ({','.join('?' * len(chunk))})"
            out.update(r[0] for r in self._conn.execute(q, chunk))
        return out

    def signature(self, key: str) -> dict | None:
        r = self._conn.execute(
            "SELECT key, kind, op_type, signature, flops, bytes, weight_bytes FROM signatures WHERE key=?", (key,)
        ).fetchone()
        if not r:
            return None
        return {"key": r[0], "kind": r[1], "op_type": r[2], "signature": _json_column(r[3], f"signature {r[0]!r}"), "flops": r[4],
                "bytes": r[5], "weight_bytes": r[6]}

    # ---- measurements -------------------------------------------------------------------------
    def put(
        self,
        key: str,
        target,
        *,
        kind: str,
        status: str,
        reason: str = "",
        median_ms: float | None = None,
        net_ms: float | None = None,
        p10_ms: float | None = None,
        p90_ms: float | None = None,
        n: int = 0,
        meta: Mapping | None = None,
    ) -> Measurement:
        """Write one measurement in its own transaction (replaces an existing (key, target) row)."""
        if status not in STATUSES:
            raise ProfileError(f"bad measurement status {status!r}; expected one of {STATUSES}")
        if kind not in KINDS:
            raise ProfileError(f"bad measurement kind {kind!r}; expected one of {KINDS}")
        th = self.target_hash(target)
        ts = time.time()
        meta_json = json.dumps(dict(meta or {}), sort_keys=True, default=str)
        with self._tx() as c:
            c.execute(
                "INSERT INTO measurements (key, kind, target, status, reason, median_ms, net_ms, p10_ms, p90_ms, n, "
                "timestamp, meta) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (key, target) DO UPDATE SET kind=excluded.kind, status=excluded.status, "
                "reason=excluded.reason, median_ms=excluded.median_ms, net_ms=excluded.net_ms, "
                "p10_ms=excluded.p10_ms, p90_ms=excluded.p90_ms, n=excluded.n, timestamp=excluded.timestamp, "
                "meta=excluded.meta",
                (key, kind, th, status, reason[:1000], median_ms, net_ms, p10_ms, p90_ms, int(n), ts, meta_json),
            )
        return Measurement(key, kind, th, self.target_name(th), status, reason[:1000], median_ms, net_ms, p10_ms,
                           p90_ms, int(n), ts, json.loads(meta_json))

    def get(self, key: str, target) -> Measurement | None:
        th = self.target_hash(target)
        r = self._conn.execute(
            f"SELECT {_M_COLS} FROM measurements m LEFT JOIN targets t ON t.hash = m.target WHERE m.key=? AND m.target=?",
            (key, th),
        ).fetchone()
        return _row_to_measurement(r) if r else None

    def flag_contended(self, key: str, target, why: str) -> bool:
        """Mark a row as not to be trusted (``contended``, with ``why``): the next campaign measures it
        again. Returns False if there is no such row."""
        return self._edit_meta([key], target, lambda meta: dict(meta, contended=True, distrusted=why)) > 0

    def flag_window_due(self, keys: Iterable[str], target, due: bool = True) -> int:
        """Mark the ok rows of ``keys`` whose second window a campaign left out (:data:`WINDOW_DUE`): a
        later campaign takes it; ``due=False`` clears the mark (:meth:`_edit_meta`). Returns how many
        rows changed (missing and failed rows, and rows already so, do not)."""
        def edit(meta: dict) -> dict | None:
            if bool(meta.get(WINDOW_DUE)) == due:
                return None
            if due:
                return dict(meta, **{WINDOW_DUE: True})
            return {k: v for k, v in meta.items() if k != WINDOW_DUE}

        return self._edit_meta(keys, target, edit, ok_only=True)

    def _edit_meta(self, keys: Iterable[str], target, edit, *, ok_only: bool = False) -> int:
        """Rewrite the meta of the rows of ``keys`` on ``target`` (``ok_only``: of the ok ones), read in the
        transaction that writes them (a row another campaign stores meanwhile keeps its own meta):
        ``edit(meta)`` returns the new meta, or None to leave the row. Figures and timestamps are left
        as they are; returns how many rows changed."""
        th = self.target_hash(target)
        keys = list(dict.fromkeys(keys))
        todo = []
        with self._tx() as c:
            for i in range(0, len(keys), 500):  # SQLite's limit on bound parameters
                chunk = keys[i:i + 500]
                rows = c.execute("SELECT key, meta FROM measurements WHERE target=? "
                                 + ("AND status='ok' " if ok_only else "")
                                 + f"AND key IN ({','.join('?' * len(chunk))})", (th, *chunk)).fetchall()
                for key, meta_json in rows:
                    meta = edit(_json_column(meta_json or "{}", f"measurement {key!r}: meta"))
                    if meta is not None:
                        todo.append((json.dumps(meta, sort_keys=True, default=str), key, th))
            c.executemany("UPDATE measurements SET meta=? WHERE key=? AND target=?", todo)
        return len(todo)

    def get_many(self, keys: Iterable[str], target) -> dict[str, Measurement]:
        th = self.target_hash(target)
        keys = list(dict.fromkeys(keys))
        out: dict[str, Measurement] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = (f"SELECT {_M_COLS} FROM measurements m LEFT JOIN targets t ON t.hash = m.target "
                 f"WHERE m.target=? AND m.key IN ({','.join('?' * len(chunk))})")
            for r in self._conn.execute(q, [th, *chunk]):
                out[r[0]] = _row_to_measurement(r)
        return out

    def missing(self, keys: Iterable[str], targets: Iterable) -> list[tuple[str, str]]:
        """``(key, target_name)`` pairs with no row (failed rows count as present)."""
        keys = list(dict.fromkeys(keys))
        out = []
        for t in targets:
            th = self.target_hash(t)
            have = self.get_many(keys, th)
            out.extend((k, self.target_name(th)) for k in keys if k not in have)
        return out

    def overhead_ms(self, target, default: float | None = None) -> float:
        """The target's fixed call cost (1-element Add), ms; ProfileError if never measured."""
        m = self.get(OVERHEAD_KEY, target)
        if m is None or not m.ok:
            if default is not None:
                return default
            raise ProfileError(f"no call overhead measured for {_tname(target)} in {self.path!r}: run `placer profile`")
        return float(m.median_ms)

    def pace_factors(self, target) -> dict[str, float]:
        """``{key: factor}`` of ``target``'s rows measured with the host's pace beside them
        (:func:`placer.profile.pace.pace_factors`): a row's times divided by its factor read it at
        the target's usual pace. Rows without a pace (older stores) are not listed (factor 1)."""
        th = self.target_hash(target)
        q = ("SELECT key, kind, median_ms, json_extract(meta, '$.pace_ms') FROM measurements "
             "WHERE target=? AND status='ok' AND json_valid(meta)")
        rows = [{"target": th, "key": k, "kind": kind, "median_ms": ms, "meta": {"pace_ms": p}}
                for k, kind, ms, p in self._conn.execute(q, [th]) if p is not None]
        return {k: f for (_, k), f in pace_factors(rows).items()}

    def paced_cost(self, target):
        """``cost(m)``: the net cost of a row ``m`` of ``target`` at the target's usual pace (its
        median over its pace factor, less the call overhead read so: ``costmodels.store`` reads the
        rows, and a cost model prices its measured ops, the same way); a row without a pace, or
        failed, as :meth:`Measurement.cost_ms` gives it."""
        factors = self.pace_factors(target)
        o = self.get(OVERHEAD_KEY, target) if factors else None
        overhead = o.median_ms / factors.get(OVERHEAD_KEY, 1.0) if o is not None and o.ok else 0.0

        def cost(m: Measurement) -> float:
            f = factors.get(m.key)
            if f is None or not m.ok or m.median_ms is None:
                return m.cost_ms()
            return max(m.median_ms / f - overhead, 0.0)

        return cost

    def op_costs(self, graph, targets: Iterable, *, missing: str = "error",
                 pace: bool = True) -> dict[tuple[str, str], float]:
        """``{(op_id, target_name): net_ms | inf}`` for every op of ``graph`` on every target.

        Unsupported/failed ops cost ``inf``. ``missing``: ``"error"`` (ProfileError naming the
        first unprofiled op), ``"inf"`` (treat as unsupported) or ``"skip"`` (leave out). ``pace``:
        rows measured with the host's pace are read at their target's usual pace
        (:meth:`paced_cost`), as the cost model reads them.
        """
        if missing not in ("error", "inf", "skip"):
            raise ProfileError(f"missing={missing!r}: expected 'error', 'inf' or 'skip'")
        out: dict[tuple[str, str], float] = {}
        keys = [op.signature.hash for op in graph.ops]
        for t in targets:
            th = self.target_hash(t)
            name = t.name if hasattr(t, "name") else self.target_name(th)
            rows = self.get_many(keys, th)
            cost = self.paced_cost(th) if pace else Measurement.cost_ms
            for op in graph.ops:
                m = rows.get(op.signature.hash)
                if m is None:
                    if missing == "error":
                        raise ProfileError(
                            f"op {op.id!r} ({op.op_type}) of {graph.name!r} is not profiled on {name} in "
                            f"{self.path!r}: run `placer profile` first"
                        )
                    if missing == "skip":
                        continue
                    out[(op.id, name)] = math.inf
                else:
                    out[(op.id, name)] = cost(m)
        return out

    def measurements(self, target=None, kind: str | None = None, status: str | None = None) -> list[dict]:
        """Rows for cost-model training: each measurement with its signature dict and features."""
        q = (
            f"SELECT {_M_COLS}, s.op_type, s.signature, s.flops, s.bytes, s.weight_bytes, t.fingerprint "
            "FROM measurements m LEFT JOIN targets t ON t.hash = m.target LEFT JOIN signatures s ON s.key = m.key"
        )
        cond, args = [], []
        if target is not None:
            cond.append("m.target = ?")
            args.append(self.target_hash(target))
        if kind is not None:
            cond.append("m.kind = ?")
            args.append(kind)
        if status is not None:
            cond.append("m.status = ?")
            args.append(status)
        if cond:
            q += " WHERE " + " AND ".join(cond)
        q += " ORDER BY m.id"
        out = []
        for r in self._conn.execute(q, args):
            d = _row_to_measurement(r[:13]).to_dict()
            d.update(op_type=r[13], signature=_json_column(r[14], f"signature {r[0]!r}") if r[14] else None,
                     flops=r[15], bytes=r[16], weight_bytes=r[17],
                     fingerprint=_json_column(r[18], f"target {r[3]!r} fingerprint") if r[18] else None)
            out.append(d)
        return out

    def partition_runs(self, prefix: str) -> list[dict]:
        """Partitions timed in context whose key starts with ``prefix``
        (:func:`placer.profile.keys.partition_prefix`): ``target`` (name), ``median_ms``, ``n`` and
        the stored ``meta`` (``ops``, ``prev``, ``n_inputs``, ``source``), oldest first."""
        like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self._conn.execute(
            f"SELECT {_M_COLS} FROM measurements m LEFT JOIN targets t ON t.hash = m.target "
            "WHERE m.kind = 'partition' AND m.status = 'ok' AND m.key LIKE ? ESCAPE '\\' ORDER BY m.id", (like,))
        out = []
        for r in rows:
            m = _row_to_measurement(r)
            out.append({"key": m.key, "target": m.target_name, "target_hash": m.target, "median_ms": m.median_ms,
                        "n": m.n,
                        "timestamp": m.timestamp, **dict(m.meta)})
        return out

    def count(self, kind: str | None = None) -> int:
        if kind:
            return int(self._conn.execute("SELECT count(*) FROM measurements WHERE kind=?", (kind,)).fetchone()[0])
        return int(self._conn.execute("SELECT count(*) FROM measurements").fetchone()[0])

    # ---- probes -------------------------------------------------------------------------------
    def add_probe(self, session: str, key: str, target, median_ms: float) -> None:
        """Record that ``session`` measured ``key`` on ``target`` at ``median_ms`` (kept apart from
        ``measurements``: a probe never replaces the row it re-measures)."""
        th = self.target_hash(target)
        with self._tx() as c:
            c.execute("INSERT INTO probes (session, key, target, median_ms, timestamp) VALUES (?,?,?,?,?)",
                      (str(session), key, th, float(median_ms), time.time()))

    def probe_rows(self, target) -> list[dict]:
        """The probes of ``target``, oldest first: ``session``, ``key``, ``median_ms``, ``timestamp``
        (none in a store opened read-only that predates the table)."""
        th = self.target_hash(target)
        try:
            rows = self._conn.execute("SELECT session, key, median_ms, timestamp FROM probes WHERE target=? "
                                      "ORDER BY id", (th,)).fetchall()
        except sqlite3.OperationalError:  # an older store opened read-only: no probes table
            return []
        return [{"session": r[0], "key": r[1], "median_ms": float(r[2]), "timestamp": float(r[3])}
                for r in rows]

    # ---- links --------------------------------------------------------------------------------
    def put_link(self, src, dst, latency_ms: float, ms_per_byte: float, points: Sequence[Mapping], meta=None) -> None:
        s, d = self.target_hash(src), self.target_hash(dst)
        with self._tx() as c:
            c.execute(
                "INSERT INTO links (src, dst, latency_ms, ms_per_byte, points, timestamp, meta) VALUES (?,?,?,?,?,?,?) "
                "ON CONFLICT (src, dst) DO UPDATE SET latency_ms=excluded.latency_ms, ms_per_byte=excluded.ms_per_byte, "
                "points=excluded.points, timestamp=excluded.timestamp, meta=excluded.meta",
                (s, d, float(latency_ms), float(ms_per_byte), json.dumps(list(points), default=float), time.time(),
                 json.dumps(dict(meta or {}), sort_keys=True, default=str)),
            )

    def link_rows(self) -> list[dict]:
        rows = self._conn.execute("SELECT src, dst, latency_ms, ms_per_byte, points, timestamp, meta FROM links")
        return [
            {"src": r[0], "dst": r[1], "src_name": self.target_name(r[0]), "dst_name": self.target_name(r[1]),
             "latency_ms": r[2], "ms_per_byte": r[3], "points": _json_column(r[4], "link points"), "timestamp": r[5],
             "meta": _json_column(r[6], "link meta")}
            for r in rows
        ]

    def has_link(self, src, dst) -> bool:
        s, d = self.target_hash(src), self.target_hash(dst)
        return self._conn.execute("SELECT 1 FROM links WHERE src=? AND dst=?", (s, d)).fetchone() is not None

    def link_model(self, targets: Iterable, *, missing: str = "error"):
        """A :class:`placer.devices.links.LinkModel` over ``targets`` from the stored fits.

        ``missing="error"`` raises ProfileError for a pair of distinct targets with no fit;
        ``"skip"`` leaves it out (``transfer_ms`` then raises for that pair).
        """
        targets = list(targets)
        hashes = [(self.target_hash(t), t.name if hasattr(t, "name") else self.target_name(self.target_hash(t)))
                  for t in targets]
        fits = {}
        overheads = {}
        for h, name in hashes:
            m = self.get(OVERHEAD_KEY, h)
            if m is not None and m.ok:
                overheads[name] = float(m.median_ms)
        cut = {}  # a boundary's extra cost per byte on each target (placer.profile.links.measure_cut_points)
        for h, name in hashes:
            r = self._conn.execute("SELECT ms_per_byte FROM links WHERE src=? AND dst=?", (h, h)).fetchone()
            cut[name] = float(r[0]) if r is not None and math.isfinite(float(r[0])) else 0.0
        for sh, sname in hashes:
            for dh, dname in hashes:
                if sh == dh:
                    continue
                r = self._conn.execute(
                    "SELECT latency_ms, ms_per_byte, points, meta FROM links WHERE src=? AND dst=?", (sh, dh)
                ).fetchone()
                if r is None:
                    if missing == "error":
                        raise ProfileError(f"no link measured from {sname} to {dname} in {self.path!r}: run `placer profile`")
                    continue
                # the hand-off itself, plus half the cut cost of each side (out of the source's
                # layout, into the destination's): what a boundary costs beyond the two runtimes' calls
                cut_pb = 0.5 * (cut[sname] + cut[dname])
                meta = dict(_json_column(r[3], "link meta")) | {"handoff_ms_per_byte": float(r[1]),
                                                                "cut_ms_per_byte": cut_pb}
                fits[(sname, dname)] = LinkFit(
                    src=sname, dst=dname, latency_ms=float(r[0]), ms_per_byte=float(r[1]) + cut_pb,
                    points=tuple(_json_column(r[2], "link points")), meta=meta,
                )
        return LinkModel(fits, overheads)


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rollback on error); waits on the busy timeout."""

    def __init__(self, conn, path):
        self.conn = conn
        self.path = path

    def __enter__(self):
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise ProfileError(f"profile store {self.path!r}: {exc}") from None
        return self.conn

    def __exit__(self, et, ev, tb):
        if et is None:
            try:
                self.conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                self.conn.execute("ROLLBACK")
                raise ProfileError(f"profile store {self.path!r}: commit failed: {exc}") from None
        else:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        return False


def _num(x) -> float | None:
    return None if x is None else float(x)


def _tname(t) -> str:
    return getattr(t, "name", str(t))


#: the environment variable naming the profile store every command uses by default
DB_ENV = "PLACER_DB"


def default_db() -> Path:
    """The one default profile store of ``placer profile``, ``fit``, ``plan`` and ``tune``:
    ``$PLACER_DB``, else ``~/.cache/placer/profiles.db`` (read at each call, not at import)."""
    env = os.environ.get(DB_ENV)
    return Path(env) if env else Path.home() / ".cache" / "placer" / "profiles.db"


def open_store(store: ProfileStore | str | os.PathLike | None) -> tuple[ProfileStore, bool]:
    """(store, owned): open a path (None: :func:`default_db`, its folder created), or pass a store
    through (owned=False)."""
    if isinstance(store, ProfileStore):
        return store, False
    if store is None:
        store = default_db()
        store.parent.mkdir(parents=True, exist_ok=True)
    return ProfileStore(store), True
