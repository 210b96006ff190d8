"""No pickle of user files anywhere; servers bind to loopback unless told otherwise.

A static scan (AST, not regexes over comments) of the package source (``placer/``,
``costmodels/``, ``experiments/``):

* no call that can run code from a file: ``pickle``/``cPickle``/``dill``/``cloudpickle``
  ``load(s)``, ``joblib.load``, ``torch.load``, ``marshal.load(s)``, ``shelve.open``,
  ``yaml.load`` / ``yaml.unsafe_load``, ``numpy.load(..., allow_pickle=True)``, ``eval``/``exec``;
* every ``skops.io.load`` passes an explicit ``trusted=`` list (never ``True``) and its module
  checks the file's types against an allowlist first;
* no bind-all address (``0.0.0.0``, ``::``, ``""`` as a host) anywhere, and every ``host``
  parameter / ``--host`` option defaults to loopback.

The corpus (test_corpus.py) checks the behaviour: a pickle swapped into a cost model, an npz of
object arrays, a pickle in a profile store row and a pickle named ``.onnx`` are all refused.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from rel_support import ROOT

PACKAGES = ("placer", "costmodels", "experiments")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
BIND_ALL = {"0.0.0.0", "::", "0:0:0:0:0:0:0:0"}
PICKLERS = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle"}
FORBIDDEN = {("joblib", "load"), ("torch", "load"), ("marshal", "load"), ("marshal", "loads"),
             ("shelve", "open"), ("yaml", "unsafe_load"), ("yaml", "full_load")}


def _sources() -> list[Path]:
    files = [f for pkg in PACKAGES for f in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 50
    return files


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> module or object it stands for (``import skops.io as sio`` -> sio: skops.io)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _calls(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    alias = _aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            head, _, rest = name.partition(".")
            full = f"{alias.get(head, head)}.{rest}" if rest else alias.get(head, head)
            yield node, full, tree


def _kw(node: ast.Call, name: str):
    return next((k.value for k in node.keywords if k.arg == name), None)


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{node.lineno}"


def test_no_unsafe_deserialization():
    bad = []
    for f in _sources():
        for node, full, _ in _calls(f):
            mod, _, fn = full.rpartition(".")
            top = mod.split(".")[0]
            if (top in PICKLERS and fn in ("load", "loads", "Unpickler")) or (top, fn) in FORBIDDEN \
                    or (mod, fn) in FORBIDDEN:
                bad.append(f"{_where(f, node)} {full}")
            elif full == "yaml.load" and not isinstance(_kw(node, "Loader"), ast.Attribute):
                bad.append(f"{_where(f, node)} yaml.load without a safe Loader")
            elif full in ("numpy.load", "np.load"):
                ap = _kw(node, "allow_pickle")
                if ap is not None and not (isinstance(ap, ast.Constant) and ap.value is False):
                    bad.append(f"{_where(f, node)} numpy.load(allow_pickle={ast.unparse(ap)})")
            elif full in ("eval", "exec", "builtins.eval", "builtins.exec"):
                bad.append(f"{_where(f, node)} {full}()")
    assert not bad, "unsafe deserialization / code execution:\n" + "\n".join(bad)


def test_skops_loads_only_allowlisted_types():
    loads = []
    for f in _sources():
        for node, full, tree in _calls(f):
            if full in ("skops.io.load", "skops.io.loads"):
                trusted = _kw(node, "trusted")
                assert trusted is not None, f"{_where(f, node)}: skops load without trusted="
                assert not (isinstance(trusted, ast.Constant) and trusted.value is True), \
                    f"{_where(f, node)}: skops load with trusted=True"
                names = {_dotted(n) for n in ast.walk(tree)}
                assert "TRUSTED_TYPES" in names and any(n.endswith("get_untrusted_types") for n in names), \
                    f"{_where(f, node)}: no allowlist check of the file's types in this module"
                loads.append(_where(f, node))
    assert loads, "the cost-model persistence should load skops files (the scan found none: moved?)"


def test_no_bind_all_address_and_loopback_host_defaults():
    bad = []
    for f in _sources():
        tree = ast.parse(f.read_text(), filename=str(f))
        consts = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                  for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}

        def value(node, consts=consts):
            if isinstance(node, ast.Constant):
                return node.value
            if isinstance(node, ast.Name):
                return consts.get(node.id, f"<{node.id}>")
            return f"<{ast.unparse(node)}>"

        in_fstring = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip() in BIND_ALL \
                    and id(node) not in in_fstring:
                bad.append(f"{_where(f, node)} bind-all address {node.value!r}")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + list(node.args.defaults) \
                    + list(node.args.kw_defaults)
                for a, d in zip(args, defaults):
                    if a.arg in ("host", "bind", "bind_host", "listen", "address") and d is not None:
                        v = value(d)
                        if v is not None and v not in LOOPBACK:
                            bad.append(f"{_where(f, node)} {node.name}({a.arg}={v!r})")
            if isinstance(node, ast.Call) and _dotted(node.func).endswith("add_argument") and node.args:
                flag = node.args[0]
                if isinstance(flag, ast.Constant) and flag.value in ("--host", "--bind", "--listen"):
                    d = _kw(node, "default")
                    if d is None or value(d) not in LOOPBACK:
                        bad.append(f"{_where(f, node)} {flag.value} default {None if d is None else value(d)!r}")
            if isinstance(node, ast.Call) and _dotted(node.func).endswith(".bind") and node.args:
                a0 = node.args[0]
                if isinstance(a0, ast.Tuple) and a0.elts and isinstance(a0.elts[0], ast.Constant) \
                        and a0.elts[0].value in ("", *BIND_ALL):
                    bad.append(f"{_where(f, node)} socket bind to {a0.elts[0].value!r}")
    assert not bad, "servers must bind to loopback unless told otherwise:\n" + "\n".join(bad)


def test_rpc_servers_default_to_loopback():
    rpc = pytest.importorskip("placer.devices.rpc")
    import inspect

    assert rpc.LOOPBACK == "127.0.0.1"
    for name, obj in vars(rpc).items():
        if inspect.isclass(obj) or inspect.isfunction(obj):
            try:
                sig = inspect.signature(obj)
            except (TypeError, ValueError):
                continue
            host = sig.parameters.get("host")
            if host is not None and host.default is not inspect.Parameter.empty:
                assert host.default in LOOPBACK, f"{name}(host={host.default!r})"
