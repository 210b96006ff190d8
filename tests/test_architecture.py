"""The layers of placer import downward only (docs/architecture.md), checked on the source.

An AST walk over ``placer/`` and ``costmodels/`` (no import of either, no new dependency) collects
every import, at module level and inside functions (``if TYPE_CHECKING:`` blocks aside), plus the
call-time references of callable modules (``make_callable(__name__, "module:function")``), and
checks:

1. direction: each one goes from a module to one of the layers its layer may use (:data:`LAYERS`);
2. no cycle among modules, function-level imports included: a function-level import never hides a
   cycle (an import of a package's submodule also runs the package's ``__init__``);
3. a function-level import of placer's own modules only delays a heavy dependency (:data:`HEAVY`)
   that the importing module does not load anyway (outside the modules of :data:`LAZY_MODULES`);
4. private modules and names of dependencies (``optuna.storages._heartbeat``,
   ``onnx_frontend._get_convert_map``) are touched only by the shims of :data:`SHIMS`;
5. no library module changes process-wide state (the environment, logging levels, backends, warning
   filters outside ``catch_warnings``): only the entry points of :data:`ENTRY_POINTS`.
6. the tests never import the ``experiments`` package (what they need lives in placer).

The deliberate exceptions are :data:`ALLOWED` and :data:`LAZY_MODULES`, each documented in
docs/architecture.md (checked too).
"""

from __future__ import annotations

import ast
import functools
import graphlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("placer", "costmodels")
ARCHITECTURE_MD = ROOT / "docs" / "architecture.md"

#: layer -> (its modules: a module, or a package with everything under it; the layers it may import).
#: A module belongs to the layer with the longest matching name. Keep in sync with docs/architecture.md.
LAYERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "base": (("placer.errors", "placer.safe_io", "placer.trust", "placer.interrupts", "placer.toposort",
              "placer._callable_module", "placer.process_exit", "placer.gc_scope", "placer.tvm_import"), ()),
    "graph": (("placer.graph",), ("base",)),
    "problem": (("placer.problem", "placer.problem_json", "placer.problem_limits", "placer.semantics", "placer.plan"),
                ("base",)),
    "zoo": (("placer.zoo", "placer.zoo_torch", "placer.zoo_hf"), ("graph", "base")),
    "devices": (("placer.devices",), ("base",)),
    "solve": (("placer.solve",), ("problem", "base")),
    "report": (("placer.report",), ("base",)),
    "profile": (("placer.profile",), ("devices", "zoo", "graph", "base")),
    "materialize": (("placer.materialize",), ("devices", "problem", "graph", "base")),
    "costing": (("placer.costing",), ("profile", "devices", "problem", "graph", "base")),
    "run": (("placer.run",), ("materialize", "devices", "problem", "graph", "base")),
    "costmodels": (("costmodels",), ("report", "profile", "devices", "graph", "base")),
    "context": (("placer.context",), ("costing", "run", "profile", "devices", "zoo", "problem", "graph", "base")),
    "tune": (("placer.tune",), ("context", "costmodels", "costing", "run", "materialize", "report", "profile",
                                "solve", "devices", "zoo", "problem", "graph", "base")),
    "api": (("placer.api",), ("tune", "context", "costing", "run", "materialize", "report", "profile", "solve",
                              "devices", "zoo", "problem", "graph", "base")),
    "cli": (("placer.cli",), ("facade", "api", "tune", "context", "costing", "run", "materialize", "report", "profile",
                              "solve", "devices", "zoo", "problem", "graph", "base")),
    # the package itself: __version__ and the lazy ``placer.plan(...)`` / ``placer.tune(...)`` facade
    "facade": (("placer",), ("api", "tune", "problem", "base")),
}

#: deliberate upward references: (from module, to module) -> why. Left out of the cycle check: they
#: are resolved when called, never when a module is imported.
ALLOWED: dict[tuple[str, str], str] = {
    ("placer.plan", "placer.api"): "placer.plan(...) plans a model: a callable module, resolved at call time",
}

#: modules whose function-level imports of placer's layers are deliberate even where light:
#: module -> why (rule 3)
LAZY_MODULES: dict[str, str] = {
    "placer": "import placer stays cheap: Plan, plan, tune, prepare are imported on first use",
    "placer.cli": "each command imports its layer in its body: placer --help starts without the runtimes",
}

#: third-party packages worth delaying (rule 3): seconds to import, or pulling one that does (onnx: 0.2-0.3 s
#: with protobuf and ml_dtypes 0.6; 0.9 s with ml_dtypes 0.7, pinned out in pyproject.toml)
HEAVY = frozenset({"tvm", "openvino", "onnxruntime", "torch", "transformers", "matplotlib", "sklearn", "skops",
                   "optuna", "sqlalchemy", "ortools", "xgboost", "onnx"})

#: the only modules that may touch private modules or names of a dependency (rule 4)
SHIMS = frozenset({"placer.tune.optuna_shim", "placer.devices.tvm_shim", "costmodels.sklearn_shim"})


# ---- the source, as data -------------------------------------------------------------------------
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _files() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _internal(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def _resolve(name: str) -> str:
    """The module a dotted name refers to (``placer.solve.solve`` -> ``placer.solve``)."""
    files = _files()
    while name not in files and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING")


class Import:
    """One import (or call-time reference) found in a module."""

    def __init__(self, src: str, target: str, line: int, in_function: bool, names: tuple[str, ...] = (),
                 call_time: bool = False):
        self.src, self.target, self.line, self.in_function = src, target, line, in_function
        self.names, self.call_time = names, call_time

    def __repr__(self) -> str:
        where = "function-level" if self.in_function else "module-level"
        return f"{_files()[self.src].relative_to(ROOT)}:{self.line}: {self.src} -> {self.target} ({where})"


@functools.cache
def _imports() -> tuple[Import, ...]:
    files = _files()
    out: list[Import] = []
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if _is_type_checking(child):
                    for c in child.orelse:
                        visit_one(c, in_function)
                    continue
                visit_one(child, in_function)

        def visit_one(node: ast.AST, in_function: bool) -> None:
            if isinstance(node, ast.Import):
                for a in node.names:
                    out.append(Import(mod, a.name, node.lineno, in_function))
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the package of this module
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                for a in node.names:
                    sub = f"{origin}.{a.name}"
                    out.append(Import(mod, sub if sub in files else origin, node.lineno, in_function, (a.name,)))
            elif (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in
                  ("make_callable", "_make_callable") and len(node.args) == 2
                  and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                out.append(Import(mod, node.args[1].value.split(":")[0], node.lineno, True, call_time=True))
            visit(node, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(tree, False)
    return tuple(out)


def _internal_imports() -> list[Import]:
    return [i for i in _imports() if _internal(i.target)]


def layer_of(module: str) -> str:
    best, best_len = None, -1
    for layer, (modules, _) in LAYERS.items():
        for m in modules:
            if (module == m or module.startswith(m + ".")) and len(m) > best_len:
                best, best_len = layer, len(m)
    if best is None:
        raise AssertionError(f"module {module} belongs to no layer: add it to LAYERS (and docs/architecture.md)")
    return best


def _edges(i: Import) -> list[str]:
    """What importing ``i.target`` from ``i.src`` loads: the module and the packages above it that
    ``i.src`` is not inside (their ``__init__`` runs first)."""
    target = _resolve(i.target)
    parts = target.split(".")
    out = [target]
    for k in range(1, len(parts)):
        pkg = ".".join(parts[:k])
        if not (i.src == pkg or i.src.startswith(pkg + ".")):
            out.append(pkg)
    return [t for t in out if t != i.src]


# ---- the rules -----------------------------------------------------------------------------------
def test_layers_form_a_dag_and_cover_every_module():
    ts = graphlib.TopologicalSorter({layer: deps for layer, (_, deps) in LAYERS.items()})
    ts.prepare()  # raises CycleError if two layers may import each other
    for layer, (_, deps) in LAYERS.items():
        assert set(deps) <= set(LAYERS), f"layer {layer} names an unknown layer"
    for mod in _files():
        layer_of(mod)


def test_imports_go_down_the_layers():
    bad = []
    for i in _internal_imports():
        target = _resolve(i.target)  # the packages above it run their __init__ too: see the cycle check
        a, b = layer_of(i.src), layer_of(target)
        if a == b or b in LAYERS[a][1] or (i.src, target) in ALLOWED:
            continue
        bad.append(f"{i}: layer {a} may not import layer {b}")
    assert not bad, "upward or sideways imports (docs/architecture.md):\n" + "\n".join(sorted(set(bad)))


def test_no_import_cycle_even_through_function_level_imports():
    graph: dict[str, set[str]] = {m: set() for m in _files()}
    where: dict[tuple[str, str], Import] = {}
    for i in _internal_imports():
        for target in _edges(i):
            if (i.src, target) in ALLOWED:
                continue
            graph[i.src].add(target)
            where.setdefault((i.src, target), i)
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        cycle = exc.args[1][::-1]  # graphlib lists it against the import direction
        steps = [repr(where[(a, b)]) for a, b in zip(cycle, cycle[1:])]
        pytest.fail("import cycle (a function-level import must not hide one):\n" + "\n".join(steps))


@functools.cache
def _heavy_loaded(module: str) -> frozenset[str]:
    """The :data:`HEAVY` packages importing ``module`` loads (module-level imports, transitively)."""
    out: set[str] = set()
    for i in _imports():
        if i.src != module or i.in_function:
            continue
        top = i.target.split(".")[0]
        if top in HEAVY:
            out.add(top)
        elif _internal(i.target):
            for target in _edges(i):
                out |= _heavy_loaded(target)
    return frozenset(out)


def test_function_level_imports_only_delay_heavy_dependencies():
    bad = []
    for i in _internal_imports():
        if not i.in_function or i.call_time or i.src in LAZY_MODULES or (i.src, _resolve(i.target)) in ALLOWED:
            continue
        delayed = set().union(*(_heavy_loaded(t) for t in _edges(i))) - _heavy_loaded(i.src)
        if not delayed:
            bad.append(f"{i}: delays nothing heavy; import it at the top of the module")
    assert not bad, "\n".join(bad)


def _dependency(name: str) -> bool:
    """A third-party module: neither placer's own nor the standard library's."""
    top = name.split(".")[0]
    return bool(top) and not _internal(name) and top not in sys.stdlib_module_names and top != "__future__"


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def test_private_apis_of_dependencies_only_in_shims():
    bad = []
    for i in _imports():
        if not _dependency(i.target) or i.src in SHIMS:
            continue
        if _private(i.target) or any(_private(n) for n in i.names):
            bad.append(f"{i}: imports a private module or name of {i.target.split('.')[0]}")
    for mod, path in _files().items():
        if mod in SHIMS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        external: set[str] = set()  # names bound to a dependency's modules or objects
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                external |= {(a.asname or a.name).split(".")[0] for a in node.names if _dependency(a.name)}
            elif isinstance(node, ast.ImportFrom) and not node.level and _dependency(node.module or ""):
                external |= {a.asname or a.name for a in node.names}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                    and node.value.id in external):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr} is private")
    assert not bad, "private APIs of dependencies outside the shims " + str(sorted(SHIMS)) + ":\n" + "\n".join(bad)


#: the process's entry points: the only modules that may change process-wide state (rule 5)
ENTRY_POINTS = frozenset({"placer.cli"})


def _process_wide_changes(tree: ast.AST) -> list[tuple[int, str]]:
    """Writes to ``os.environ``, logging levels and backends set process-wide, warning filters set
    outside ``with warnings.catch_warnings()``."""
    out: list[tuple[int, str]] = []

    def dotted(node: ast.AST) -> str:
        return ast.unparse(node)

    def visit(node: ast.AST, scoped_warnings: bool) -> None:
        for child in ast.iter_child_nodes(node):
            scoped = scoped_warnings
            if isinstance(child, (ast.With, ast.AsyncWith)) and any(
                    isinstance(i.context_expr, ast.Call) and dotted(i.context_expr.func).endswith("catch_warnings")
                    for i in child.items):
                scoped = True
            if isinstance(child, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = child.targets if isinstance(child, (ast.Assign, ast.Delete)) else [child.target]
                for t in targets:
                    if isinstance(t, ast.Subscript) and dotted(t.value).endswith("environ"):
                        out.append((child.lineno, f"writes {dotted(t)}"))
            if isinstance(child, ast.Call):
                name = dotted(child.func)
                if name.endswith(("environ.update", "environ.setdefault", "environ.pop", "environ.clear",
                                  "environ.__setitem__")) or name in ("os.putenv", "os.unsetenv"):
                    out.append((child.lineno, f"calls {name} (writes the environment)"))
                elif name.endswith(("logging.set_verbosity", "logging.basicConfig", "logging.disable",
                                    "matplotlib.use", ".setLevel")):
                    out.append((child.lineno, f"calls {name} (process-wide logging or backend)"))
                elif name in ("warnings.simplefilter", "warnings.filterwarnings") and not scoped:
                    out.append((child.lineno, f"calls {name} outside warnings.catch_warnings()"))
            visit(child, scoped)

    visit(tree, False)
    return out


def test_library_code_leaves_process_wide_state_alone():
    """No library module writes the environment or sets logging levels, backends or warning filters
    for the whole process: configuration is passed explicitly; the entry points decide the rest."""
    bad = []
    for mod, path in _files().items():
        if mod in ENTRY_POINTS:
            continue
        for line, what in _process_wide_changes(ast.parse(path.read_text(encoding="utf-8"))):
            bad.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not bad, "\n".join(bad)


def test_exceptions_are_documented():
    text = ARCHITECTURE_MD.read_text(encoding="utf-8")
    for src, dst in ALLOWED:
        assert f"{src} -> {dst}" in text, f"docs/architecture.md does not list the exception {src} -> {dst}"
    for mod in LAZY_MODULES:
        assert f"`{mod}`" in text, f"docs/architecture.md does not list {mod} among the lazy modules"
    for shim in SHIMS:
        assert f"`{shim}`" in text, f"docs/architecture.md does not name the shim {shim}"
    for mod in ENTRY_POINTS:
        assert f"`{mod}`" in text, f"docs/architecture.md does not name the entry point {mod}"
    for layer in LAYERS:
        assert f"`{layer}`" in text, f"docs/architecture.md does not describe the layer {layer}"


def _experiments_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Imports of the ``experiments`` package: statements, ``importlib.import_module`` and
    ``__import__`` of a literal name."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("import_module", "__import__"))
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        out += [(node.lineno, n) for n in names if n.split(".")[0] == "experiments"]
    return out


def test_tests_never_import_experiments():
    """The tests test placer: what they need (instance generators, benchmark helpers) lives in placer
    (e.g. ``placer.solve.instances``), and the experiments import it from there, never the reverse."""
    probe = ast.parse("import experiments.bench_solver\nfrom experiments import bench_solver\n"
                      "def f():\n    importlib.import_module('experiments.compare')\n")
    assert [n for _, n in _experiments_imports(probe)] == [
        "experiments.bench_solver", "experiments", "experiments.compare"]
    bad = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for line, name in _experiments_imports(ast.parse(path.read_text(encoding="utf-8"))):
            bad.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
    assert not bad, "tests import the experiments (move what they need into placer):\n" + "\n".join(bad)
