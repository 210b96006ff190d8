"""placer.safe_io (the one reader of every JSON file a user hands over, and ``printable``) and
placer.trust (which compiled modules this user's placer made), on real files."""

from __future__ import annotations

import json
import os
import stat

import pytest

from placer.errors import PlacerError, PlanError
from placer.safe_io import MAX_DEPTH, check_regular_file, load_json, loads, max_json_bytes, printable


def test_a_good_file_loads_with_nan_and_infinity_kept_for_the_loaders(tmp_path):
    f = tmp_path / "ok.json"
    f.write_text('{"a": [1, 2.5, NaN, Infinity, null], "b": {"c": "d"}, "n": -9223372036854775807}')
    data = load_json(f, "a test file")
    assert data["b"] == {"c": "d"} and data["n"] == -(2**63 - 1)
    assert data["a"][2] != data["a"][2] and data["a"][3] == float("inf")


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "missing"])
def test_only_regular_files_are_opened(tmp_path, kind):
    f = tmp_path / "x.json"
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "directory":
        f.mkdir()
    elif kind == "device":
        f.symlink_to("/dev/zero")
    want = {"fifo": "FIFO", "directory": "directory", "device": "device", "missing": "no such file"}[kind]
    with pytest.raises(PlanError, match=want) as e:
        load_json(f, "the plan", PlanError)  # a FIFO is refused from stat(): this returns at once
    assert str(f) in str(e.value)


def test_the_size_limit_is_checked_before_reading(tmp_path, monkeypatch):
    f = tmp_path / "big.json"
    with open(f, "wb") as fh:
        fh.truncate(3 * 2**20)  # sparse: nothing is written, and nothing must be read
    monkeypatch.setenv("PLACER_MAX_JSON_MB", "2")
    assert max_json_bytes() == 2 * 2**20
    with pytest.raises(PlacerError, match="over the limit of 2097152 bytes"):
        load_json(f, "a test file")
    monkeypatch.setenv("PLACER_MAX_JSON_MB", "not a number")
    assert max_json_bytes() == 64 * 2**20
    with pytest.raises(PlacerError, match="limit of 10 bytes"):
        check_regular_file(f, "x", max_bytes=10)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 900, 100_000])
def test_deep_nesting_is_refused(depth):
    with pytest.raises(PlacerError, match=f"nested more than {MAX_DEPTH} levels"):
        loads("[" * depth + "]" * depth, "deep.json")
    with pytest.raises(PlacerError, match="nested"):
        loads('{"a": ' * depth + "1" + "}" * depth, "deep.json")
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH, "ok.json") is not None


@pytest.mark.parametrize("text, want", [
    ('{"pinned": {"fc": "a"}, "pinned": {}}', "'pinned' appears twice"),
    ('{"x": [{"k": 1, "k": 1}]}', "'k' appears twice"),
    ('{"n": ' + "9" * 20 + "}", "20 digits"),
    ('{"n": -' + "9" * 5000 + "}", "5000 digits"),
    ('{"x": 1e999}', "1e999 is out of range"),
    ('{"x": -1e400}', "out of range"),
    ("{", "invalid JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
])
def test_ambiguous_or_out_of_range_json_is_refused(text, want):
    with pytest.raises(PlacerError, match=want) as e:
        loads(text, "where.json")
    assert str(e.value).startswith("where.json: ") and "\n" not in str(e.value)


def test_printable_escapes_control_characters():
    evil = "op\x1b[2J\x1b]0;title\x07\r\u202eend\x9b1m"
    out = printable(evil)
    assert out == "op\\x1b[2J\\x1b]0;title\\x07\\x0d\\u202eend\\x9b1m"
    assert printable("a\tb\nc é 中") == "a\tb\nc é 中"
    assert printable("a\tb\nc", newlines=False) == "a\\x09b\\x0ac"


# ---------------------------------------------------------------- placer.trust
@pytest.fixture
def key_path(tmp_path, monkeypatch):
    from placer.trust import KEY_ENV

    p = tmp_path / "cfg" / "placer" / "trust.key"
    monkeypatch.setenv(KEY_ENV, str(p))
    return p


def test_the_key_is_made_private_on_first_use_and_tags_verify(key_path):
    from placer import trust

    ctx = {"model_hash": "m", "assignment_hash": "a", "tvm": "0.27"}
    assert trust.verify("ab" * 32, ctx, "0" * 64) is False  # no key: nothing is trusted,
    assert not key_path.exists()  # and checking makes none
    tag = trust.tag("ab" * 32, ctx)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_path.parent.stat().st_mode) == 0o700
    assert trust.verify("ab" * 32, ctx, tag)
    assert not trust.verify("cd" * 32, ctx, tag)  # other bytes
    assert not trust.verify("ab" * 32, {**ctx, "assignment_hash": "b"}, tag)  # another plan
    assert not trust.verify("ab" * 32, ctx, ["not", "a", "tag"])
    assert trust.tag("ab" * 32, ctx) == tag  # the same key next time


def test_a_key_others_can_read_is_refused(key_path):
    from placer import trust

    trust.tag("00", {})
    key_path.chmod(0o644)
    with pytest.raises(trust.TrustError, match="chmod 600"):
        trust.verify("00", {}, "x")
    key_path.chmod(0o600)
    key_path.write_bytes(b"short")
    with pytest.raises(trust.TrustError, match="shorter than 32 bytes"):
        trust.tag("00", {})


def test_a_compiled_record_without_a_valid_tag_is_refused_before_loading(tmp_path, key_path):
    """A plan directory whose module.so and compiled.json were written by someone else (sha resealed)
    is refused by name; --trust (trust=True) lets it through to the loader; a symlink never is."""
    import hashlib

    import tvm

    from placer import zoo
    from placer.graph import load_graph
    from placer.materialize import load_plan_dir, materialize

    g = load_graph(zoo.tiny_branchy(0))
    mat = materialize(g, {o.id: "onnxruntime" for o in g.ops}, relax=False)
    mat.save(tmp_path / "plan", relax=False)
    planted = b"\x7fELF" + bytes(64)
    (tmp_path / "plan" / "module.so").write_bytes(planted)
    info = {"format": "placer.compiled", "version": 1, "file": "module.so",
            "sha256": hashlib.sha256(planted).hexdigest(), "model_hash": mat.stage_config.model_hash,
            "assignment_hash": mat.stage_config.assignment_hash, "tvm": tvm.__version__}
    (tmp_path / "plan" / "compiled.json").write_text(json.dumps(info))
    loaded = load_plan_dir(tmp_path / "plan")
    with pytest.raises(PlanError, match="module.so: not compiled by placer on this machine"):
        loaded.compiled_path()
    assert loaded.compiled_module(trust=True) == (tmp_path / "plan" / "module.so", planted)
    (tmp_path / "outside.so").write_bytes(planted)
    (tmp_path / "plan" / "module.so").unlink()
    (tmp_path / "plan" / "module.so").symlink_to(tmp_path / "outside.so")
    with pytest.raises(PlanError, match="symbolic link"):
        loaded.compiled_path(trust=True)


def test_every_json_file_is_read_through_safe_io():
    """A static guard (AST) over placer/ and costmodels/: no ``json.load(file)`` and no
    ``json.loads(path.read_text() / read_bytes())``: a file a user hands over is read with
    safe_io.load_json (the one exception: the stage config's schema, shipped with the package)."""
    import ast

    from rel_support import ROOT

    allowed = {("placer/materialize/stage_config.py", "SCHEMA_PATH")}
    bad = []
    for f in sorted(p for pkg in ("placer", "costmodels") for p in (ROOT / pkg).rglob("*.py")):
        rel = str(f.relative_to(ROOT))
        for node in ast.walk(ast.parse(f.read_text(), filename=rel)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "json"):
                continue
            if node.func.attr == "load":
                bad.append(f"{rel}:{node.lineno} json.load")
            elif node.func.attr == "loads" and node.args:
                arg = ast.unparse(node.args[0])
                if ("read_text(" in arg or "read_bytes(" in arg) and not any(
                        rel == a and name in arg for a, name in allowed):
                    bad.append(f"{rel}:{node.lineno} json.loads({arg})")
    assert not bad, "JSON files read without placer.safe_io:\n" + "\n".join(bad)
