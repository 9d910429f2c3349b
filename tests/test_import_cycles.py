"""No import cycles in `solutions/` and `course/`, found by an AST pass over every file.

The graph's nodes are the modules of those two trees (`solutions/server/app.py` is
`solutions.server.app`, a package's `__init__.py` the package); an edge A -> B is any import
in A's file that names B:

- `import B`, `from B import x`, `from . import B` (relative imports resolved), and
  `from B import x` where `B.x` is a module is an edge to `B.x`, not to the package `B`;
- string imports: `importlib.import_module("B")` (relative with `package=__name__`),
  `__import__("B")`, `runpy.run_module("B")`, and the imports in a code string a module
  runs: `exec(CODE)` and a `[python, "-c", CODE]` command line, where CODE is a string or a
  module-level name bound to one (their imports are edges of the module that runs them).

Every import counts wherever it stands: at the top, inside a function (a lazy import still
runs, and a cycle through it is a cycle that only happens later), or under
`if TYPE_CHECKING:` (never run, but a type-level cycle is still two modules that each need
the other to be read). A module's parent packages are not edges of it: Python runs
`solutions/server/__init__.py` before `solutions.server.app`, and a package's `__init__`
that re-exports its files would otherwise make every package a cycle. Names that are not
string literals (`import_module(f"{pkg}.x")`, a table of names) cannot be resolved
statically and are no edges; `test_every_string_import_is_resolved` lists where they are,
so a new one is a decision, not an accident.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT

TREES = ("solutions", "course")

#: The one allowed cycle: stage 01's `Tensor` and its one-exercise-a-file mixins. Each mixin
#: file builds new `Tensor`s (so it imports `tensor.py`), and `Tensor` is the class composed
#: of the mixins (so `tensor.py` imports them): one class, spread over files so that a
#: learner's exercise is one file. solutions/autograd/__init__.py's docstring explains it.
ALLOWED_CYCLES: list[frozenset[str]] = []  # filled below from the autograd package's files

#: Dynamic imports whose module name is not a literal, each with what it loads (checked by
#: `test_every_string_import_is_resolved`: a new one must be added here, with its reason).
UNRESOLVED_OK = {
    "course": "its lazy attributes (PEP 562), `import_module(_HOME[name])`: its own submodules, none of "
              "which imports the package `course` back",
    "course.loader": "`import_module(f'solutions.{module}')`: a stage's reference, which never imports "
                     "the harness (test_stubs)",
    "course.cli": "`course doctor`: the installed third-party packages' versions",
    "course.pytest_plugin": "the third-party modules it guards, by a table of names",
    "course.guard": "the third-party modules it guards, by a table of names",
    "course.worker": "the third-party modules it guards, by a table of names",
    "solutions.train.__main__": "`python solutions/train/__main__.py` run by its path: its own package",
    "solutions.server.engine_boot": "the engine process's first code: the server package it is told to "
                                    "load (`EngineProcess`), by name",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for tree in TREES for p in sorted((ROOT / tree).rglob("*.py"))
            if "__pycache__" not in p.parts}


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(module: str | None, level: int, package: str) -> str:
    if not level:
        return module or ""
    base = package.split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "..."` assignments (the code strings a module runs)."""
    out = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _literal(node: ast.AST, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _imports(tree: ast.Module, package: str, constants: dict[str, str], unresolved: list[str],
             modules=None) -> set[str]:
    """The module names `tree` imports (candidates: not yet matched to the graph's nodes).
    With `modules` (the graph's), `from B import x` is an edge to `B` only when some x is not
    a module `B.x` (a name B itself defines)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, package)
            subs = {f"{base}.{a.name}" if base else a.name for a in node.names}
            out |= subs
            if modules is None or not subs <= set(modules):
                out.add(base)
        elif isinstance(node, ast.Call):
            out |= _call_imports(node, package, constants, unresolved)
        elif isinstance(node, (ast.List, ast.Tuple)):
            out |= _dash_c_imports(node.elts, package, constants, unresolved)
    return out


def _call_imports(node: ast.Call, package: str, constants: dict[str, str], unresolved: list[str]) -> set[str]:
    name = _call_name(node)
    if name not in ("import_module", "__import__", "run_module", "exec") or not node.args:
        return set()
    text = _literal(node.args[0], constants)
    if text is None:
        unresolved.append(f"{name}(...) at line {node.lineno}")
        return set()
    if name == "exec":
        return _code_imports(text, package, constants, unresolved)
    level = len(text) - len(text.lstrip("."))
    return {_resolve(text.lstrip(".") or None, level, package)}


def _is_python(node: ast.expr) -> bool:
    """`sys.executable`, or a literal "python"/"python3"."""
    if isinstance(node, ast.Attribute):
        return node.attr == "executable"
    return isinstance(node, ast.Constant) and node.value in ("python", "python3")


def _dash_c_imports(elts: list[ast.expr], package: str, constants: dict[str, str],
                    unresolved: list[str]) -> set[str]:
    """A command line `[python, ..., "-c", CODE]` (a "-c" after "-m" is the module's own
    option, such as pytest's config file)."""
    out: set[str] = set()
    if not elts or not _is_python(elts[0]):
        return out
    for flag, code in zip(elts, elts[1:]):
        if isinstance(flag, ast.Constant) and flag.value == "-m":
            break
        if isinstance(flag, ast.Constant) and flag.value == "-c":
            text = _literal(code, constants)
            if text is None:
                unresolved.append(f"-c code at line {code.lineno}")
            else:
                out |= _code_imports(text, package, constants, unresolved)
    return out


def _code_imports(text: str, package: str, constants: dict[str, str], unresolved: list[str]) -> set[str]:
    return _imports(ast.parse(text), package, constants, unresolved)


def import_graph() -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """module -> the modules of the graph it imports; module -> its unresolved string imports."""
    modules = _modules()
    graph, unresolved = {}, {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        misses: list[str] = []
        wanted = _imports(tree, _package(name, path), _string_constants(tree), misses, modules)
        graph[name] = {w for w in wanted if w in modules and w != name}
        if misses:
            unresolved[name] = misses
    return graph, unresolved


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _tensor_cycle(graph: dict[str, set[str]]) -> frozenset[str]:
    """Stage 01's allowed cycle: `solutions.autograd.tensor` and the autograd files it imports
    that import it back (the mixins)."""
    tensor = "solutions.autograd.tensor"
    mixins = {m for m in graph.get(tensor, ()) if m.startswith("solutions.autograd.") and tensor in graph[m]}
    return frozenset({tensor, *mixins})


def _path(graph: dict[str, set[str]], component: frozenset[str]) -> str:
    """One cycle through `component`, written out (a -> b -> a)."""
    start = min(component)
    trail, seen, v = [start], {start}, start
    while True:
        v = min(w for w in graph[v] if w in component)
        trail.append(v)
        if v in seen:
            return " -> ".join(trail[trail.index(v):])
        seen.add(v)


def test_no_import_cycles_in_solutions_and_course():
    graph, _ = import_graph()
    allowed = ALLOWED_CYCLES + [_tensor_cycle(graph)]
    bad = [c for c in cycles(graph) if c not in allowed]
    assert not bad, "import cycles:\n" + "\n".join(f"  {_path(graph, c)}   ({len(c)} modules)" for c in bad)


def test_the_graph_sees_string_imports():
    """The pass itself: a `-c` command line, `import_module` and a relative `from . import`
    are edges; parent packages are not."""
    code = ("import importlib, subprocess, sys\nCODE = 'import course.grading'\n"
            "def f():\n    importlib.import_module('course.layout')\n"
            "    subprocess.run([sys.executable, '-c', CODE])\n"
            "from . import loader\n")
    got = _imports(ast.parse(code), "course", _string_constants(ast.parse(code)), [])
    assert {"course.grading", "course.layout", "course.loader"} <= got
    graph, _ = import_graph()
    assert "solutions.server" not in graph["solutions.server.app"]
    # `from . import protocol` (a submodule) is an edge to it, not to the package
    assert "solutions.server.protocol" in graph["solutions.server.validation"]
    assert "solutions.server" not in graph["solutions.server.validation"]


def test_every_string_import_is_resolved():
    _, unresolved = import_graph()
    unknown = {m: where for m, where in unresolved.items() if m not in UNRESOLVED_OK}
    assert not unknown, ("string imports whose module name is no literal (the cycle test cannot see them): "
                         f"{unknown}; resolve them, or add the module to UNRESOLVED_OK with what it loads")


def test_the_allowed_cycle_is_explained_where_it_lives():
    """The allowance holds only while stage 01's package docstring explains the cycle and
    names each of its files."""
    doc = ast.get_docstring(ast.parse((ROOT / "solutions" / "autograd" / "__init__.py").read_text(encoding="utf-8")))
    graph, _ = import_graph()
    files = sorted(m.rpartition(".")[2] + ".py" for m in _tensor_cycle(graph))
    assert len(files) > 1, "no Tensor cycle left: drop the allowance"
    unnamed = [f for f in files if f not in (doc or "")]
    assert doc and "import cycle" in doc and not unnamed, (
        f"solutions/autograd/__init__.py's docstring must explain its import cycle and name its files; "
        f"not named: {unnamed}")
