"""Every committed stub is exactly what the generator produces from its solution; the stub
packages are exercise first (short files, holes in exercise order near the top); the stage
chain holds: solutions import only earlier stages and the shared modules, a stage package's
files import each other relatively, and no stub reaches for its own stage's reference."""
from __future__ import annotations

import ast
import re

import pytest

from course import layout, manifest, stubs
from tests.helpers import ROOT, existing_stages, stage_params

SHARED = {"tokenizer", "gpt", "workload", "fileio", "checks", "device", "weightless"}
MAX_STUB_LINES = 300  # a learner's file is read whole: no stub file is longer
FIRST_HOLE_WITHIN = 40  # lines from the top of a stub file to its first hole


def test_every_stub_is_in_sync_with_its_solution():
    problems = stubs.check_all()
    assert not problems, "\n".join(problems)


def _marker_ids(st: manifest.Stage) -> set[str]:
    return {r.exercise for p in layout.solution_files(st)
            for r in stubs.regions(p.read_text(encoding="utf-8"), str(p))}


def _test_marker_ids(folder) -> set[str]:
    ids = set()
    for f in sorted(folder.rglob("test_*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "exercise" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                ids.add(node.args[0].value)
    return ids


@pytest.mark.parametrize("st", stage_params())
def test_manifest_markers_and_tests_name_the_same_exercises(st: manifest.Stage):
    listed = {e.id for e in st.exercises}
    marked = _marker_ids(st)
    tested = _test_marker_ids(ROOT / st.folder / "tests")
    assert marked == listed, f"solution markers {sorted(marked)} != manifest {sorted(listed)}"
    assert tested == listed, f"test markers {sorted(tested)} != manifest {sorted(listed)}"


@pytest.mark.parametrize("st", stage_params())
def test_stage_has_its_files(st: manifest.Stage):
    folder = ROOT / st.folder
    for need in (f"{st.module}/__init__.py", stubs.HINTS_FILE, "tests", "bench.py", f"{st.folder}.ipynb",
                 "README.md"):
        assert (folder / need).exists(), f"{st.folder}/{need} is missing"
    assert not (folder / f"{st.module}.py").exists(), f"{st.folder}/{st.module}.py: the stub is a package now"
    assert not (ROOT / "solutions" / f"{st.module}.py").exists(), f"solutions/{st.module}.py beside the package"


@pytest.mark.parametrize("st", stage_params())
def test_stub_files_are_exercise_first(st: manifest.Stage):
    """At most 300 lines a file; in each file the holes come in exercise order, the first
    within 40 lines of the top; the header names every hole's line truly."""
    problems = []
    for path in layout.stub_files(st):
        rel = layout.stub_rel(st, path.name)
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > MAX_STUB_LINES:
            problems.append(f"{rel}: {len(lines)} lines (at most {MAX_STUB_LINES})")
        holes = [(n, m[1]) for n, line in enumerate(lines, 1)
                 if (m := re.search(r"raise NotImplementedError\(['\"]Exercise (\d+\.\d+):", line))]
        if not holes:
            assert "Nothing to write here" in "\n".join(lines[:3]), f"{rel}: a given file must say so"
            continue
        if holes[0][0] > FIRST_HOLE_WITHIN:
            problems.append(f"{rel}: the first hole is at line {holes[0][0]} (within {FIRST_HOLE_WITHIN})")
        ids = [stubs.ex_key(i) for _, i in holes]
        if ids != sorted(ids):
            problems.append(f"{rel}: holes out of exercise order: {' '.join(i for _, i in holes)}")
        for ex_id in {i for _, i in holes}:
            at = [n for n, i in holes if i == ex_id]
            where = ("line " if len(at) == 1 else "lines ") + ", ".join(map(str, at))
            assert any(line.startswith(f"#   {ex_id} ") and f": {where};" in line for line in lines[:12]), (
                f"{rel}: the header does not give {ex_id}'s holes as {where}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("st", stage_params())
def test_every_exercise_has_hints(st: manifest.Stage):
    got = stubs.stage_hints(st)
    bare = [ex.id for ex in st.exercises if not got.get(ex.id)]
    assert not bare, f"exercises without a `# HINT:` in their solution regions: {bare}"


def _imports(path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                out.add("." * node.level + (node.module or ""))
            elif node.module:
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _solution_files():
    for path in sorted((ROOT / "solutions").glob("*.py")):
        yield path, path.stem
    for st in existing_stages():
        for path in layout.solution_files(st):
            yield path, st.module


def test_solutions_import_only_earlier_stages_and_shared_code():
    order = {st.module: int(st.number) for st in manifest.STAGES}
    for path, name in _solution_files():
        rel = path.relative_to(ROOT)
        mine = order.get(name)
        for imp in _imports(path):
            if imp.startswith("."):
                assert mine is not None and not imp.startswith(".."), (
                    f"{rel}: relative import {imp!r} outside a stage package; use `from solutions.x import`")
                continue
            top = imp.split(".")[0]
            assert top != "course", f"{rel} imports the harness ({imp}); solutions never do"
            if top != "solutions" or imp == "solutions":
                continue
            dep = imp.split(".")[1]
            if dep in SHARED:
                continue
            assert dep in order, f"{rel} imports {imp}, which is neither a stage nor shared code"
            assert dep != name, (f"{rel} imports its own stage as {imp}: inside a stage package files import "
                                 "each other relatively (in the learner's stub an absolute import would run "
                                 "the reference under the learner's code)")
            assert mine is not None and order[dep] < mine, (
                f"{rel} (stage {mine}) imports {imp} (stage {order[dep]}): only earlier stages")


@pytest.mark.parametrize("st", stage_params())
def test_no_stub_imports_its_own_stage_reference(st: manifest.Stage):
    for path in layout.stub_files(st):
        for imp in _imports(path):
            parts = imp.split(".")
            assert parts[:2] != ["solutions", st.module], (
                f"{layout.stub_rel(st, path.name)} imports {imp}: the learner's package would run the reference")


def test_no_solution_handles_stubs():
    """Reference code knows nothing about stubs: no NotImplementedError caught in solutions/
    (the harness, `course/`, tolerates an unfinished learner package where it must)."""
    found = []
    for path, _ in _solution_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ExceptHandler) and node.type is not None and "NotImplementedError" in ast.unparse(node.type):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"solutions catch NotImplementedError at {found}"


# Exercises whose `# DECISION:` line is not written yet (new exercises of issue 33, added by
# other work); each must leave this list when its decision is written down.
DECISION_PENDING: frozenset[str] = frozenset()


def test_every_exercise_writes_down_its_decision():
    """Each exercise of the manifest states, once, the decision it leaves to the learner: a
    `# DECISION:` line first in its first solution region (CONTRIBUTING, "Solutions")."""
    problems = []
    for st in existing_stages():
        got = stubs.stage_decisions(st)
        firsts: dict[str, bool] = {}
        for p in stubs.package_order(st):
            src = p.read_text(encoding="utf-8")
            lines = src.splitlines()
            for r in stubs.regions(src, str(p)):
                if r.exercise not in firsts:
                    firsts[r.exercise] = bool(stubs.DECISION.match(lines[r.begin] if r.begin < len(lines) else ""))
        for ex in st.exercises:
            n = len(got.get(ex.id, []))
            if ex.id in DECISION_PENDING:
                if n:
                    problems.append(f"{ex.id} has its decision now: take it out of DECISION_PENDING")
                continue
            if n != 1:
                problems.append(f"{ex.id}: {n} `# DECISION:` lines in its solution regions (exactly one)")
            elif not firsts.get(ex.id):
                problems.append(f"{ex.id}: the `# DECISION:` line must open the exercise's first region")
    assert not problems, "\n".join(problems)


def test_decisions_never_reach_stubs_or_hints():
    for st in existing_stages():
        for ex_id, hs in stubs.stage_hints(st).items():
            assert not any("DECISION:" in h for h in hs), f"{ex_id}: a decision leaked into its hints"
        for path in layout.stub_files(st):
            if not path.is_file():  # not generated yet: test_every_stub_is_in_sync_with_its_solution says so
                continue
            assert "# DECISION:" not in path.read_text(encoding="utf-8"), (
                f"{layout.stub_rel(st, path.name)} shows a `# DECISION:` line")


def test_a_decision_is_read_apart_from_the_hints():
    src = ('def f():\n    """doc"""\n    # BEGIN SOLUTION 1.1\n'
           '    # DECISION: the order: a node after its parents\n    #   (continued)\n'
           '    # HINT: first\n    #   continued\n    # HINT: second\n    return 1\n    # END SOLUTION\n')
    assert stubs.decisions(src) == {"1.1": ["the order: a node after its parents (continued)"]}
    assert stubs.hints(src) == {"1.1": ["first continued", "second"]}
    assert "DECISION" not in stubs.make_stub(src, "autograd")
    late = src.replace("    # HINT: second\n", "    # HINT: second\n    # DECISION: too late\n")
    with pytest.raises(stubs.MarkerError, match="DECISION"):
        stubs.hints(late)
