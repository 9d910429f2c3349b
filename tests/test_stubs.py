"""Every committed stub is exactly what the generator produces from its solution, and the
stage chain holds: solutions import only earlier stages and the shared modules."""
from __future__ import annotations

import ast

import pytest

from course import manifest, stubs
from tests.helpers import ROOT, existing_stages, stage_params

SHARED = {"tokenizer", "gpt", "workload", "fileio"}


def test_every_stub_is_in_sync_with_its_solution():
    problems = stubs.check_all()
    assert not problems, "\n".join(problems)


def _marker_ids(path) -> set[str]:
    return {r.exercise for r in stubs.regions(path.read_text(encoding="utf-8"), str(path))}


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
    marked = _marker_ids(ROOT / "solutions" / f"{st.module}.py")
    tested = _test_marker_ids(ROOT / st.folder / "tests")
    assert marked == listed, f"solution markers {sorted(marked)} != manifest {sorted(listed)}"
    assert tested == listed, f"test markers {sorted(tested)} != manifest {sorted(listed)}"


@pytest.mark.parametrize("st", stage_params())
def test_stage_has_its_files(st: manifest.Stage):
    folder = ROOT / st.folder
    for need in (f"{st.module}.py", "tests", "bench.py", f"{st.folder}.ipynb", "README.md"):
        assert (folder / need).exists(), f"{st.folder}/{need} is missing"


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


def test_solutions_import_only_earlier_stages_and_shared_code():
    order = {st.module: int(st.number) for st in manifest.STAGES}
    for path in sorted((ROOT / "solutions").glob("*.py")):
        name = path.stem
        mine = order.get(name)
        for imp in _imports(path):
            assert not imp.startswith("."), f"{path.name}: relative import {imp!r}; use `from solutions.x import`"
            top = imp.split(".")[0]
            assert top != "course", f"{path.name} imports the harness ({imp}); solutions never do"
            if top != "solutions" or imp == "solutions":
                continue
            dep = imp.split(".")[1]
            if dep in SHARED:
                continue
            assert dep in order, f"{path.name} imports {imp}, which is neither a stage nor shared code"
            assert mine is not None and order[dep] < mine, (
                f"{path.name} (stage {mine}) imports {imp} (stage {order[dep]}): only earlier stages")
