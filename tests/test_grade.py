"""`course grade`: the stubs score 0, the solutions full marks; an instructor's hidden tests
are graded and hidden; a learner's syntax error or infinite loop costs only what it breaks."""
from __future__ import annotations

import json
import shutil
import sys

import pytest

from course import grading, manifest
from tests.helpers import ROOT, existing_stages, run


def _grade(tmp_path, impl: str, *extra: str, env=None) -> dict:
    out = tmp_path / f"results-{impl}.json"
    md = tmp_path / f"summary-{impl}.md"
    proc = run([sys.executable, "-m", "course", "grade", "--impl", impl, "--json", str(out),
                "--summary", str(md), *extra], impl=impl, timeout=1800, env=env or {})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "total" in proc.stdout  # the console table
    assert md.read_text(encoding="utf-8").startswith("## Course grade:")
    return json.loads(out.read_text(encoding="utf-8"))


def _max(stages) -> int:
    return sum(e.points for st in stages for e in st.exercises)


def _check_gradescope_shape(res: dict) -> None:
    assert set(res) >= {"score", "tests"}
    for t in res["tests"]:
        assert set(t) >= {"name", "score", "max_score", "output", "visibility"}
        assert 0 <= t["score"] <= t["max_score"]


def test_stubs_score_zero(tmp_path):
    res = _grade(tmp_path, "student")
    _check_gradescope_shape(res)
    assert res["score"] == 0
    assert sum(t["max_score"] for t in res["tests"]) == _max(existing_stages())


def test_solutions_score_full_marks(tmp_path):
    res = _grade(tmp_path, "solution")
    _check_gradescope_shape(res)
    bad = [t["name"] + ": " + t["output"] for t in res["tests"] if t["score"] != t["max_score"]]
    assert not bad, bad
    assert res["score"] == _max(existing_stages())


HIDDEN = '''
import pytest
import course

mod = course.load("{module}")


@pytest.mark.exercise("{ex}", points=3)
def test_hidden_module_is_real():
    # the stub raises on this exercise; the solution has code here
    assert "Exercise {ex}:" not in open(mod.__file__, encoding="utf-8").read()
'''


@pytest.mark.parametrize("impl, expect", [("solution", 3.0), ("student", 0.0)])
def test_hidden_tests_are_graded_and_hidden(tmp_path, impl, expect):
    st = existing_stages()[0]
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "test_extra.py").write_text(HIDDEN.format(module=st.module, ex=st.exercises[0].id))
    res = _grade(tmp_path, impl, "--stages", st.number, "--hidden", str(hidden))
    hid = [t for t in res["tests"] if t["visibility"] == "after_due_date"]
    assert len(hid) == 1 and hid[0]["max_score"] == 3 and hid[0]["score"] == expect


def _learner_copy(tmp_path):
    """A learner's repository: the stage folders with their stubs and tests."""
    learner = tmp_path / "learner"
    for st in existing_stages():
        shutil.copytree(ROOT / st.folder, learner / st.folder,
                        ignore=shutil.ignore_patterns("*.ipynb", "__pycache__"))
    return learner


def test_broken_stage_and_infinite_loop_cost_only_themselves(tmp_path):
    stages = existing_stages()
    if len(stages) < 2:
        pytest.skip("needs two stages")
    learner = _learner_copy(tmp_path)
    a, b = stages[0], stages[1]
    # stage a: the learner's module has a syntax error
    (learner / a.folder / f"{a.module}.py").write_text("def broken(:\n")
    # stage b: the solution, with an infinite loop planted in one exercise's test run
    sol = (ROOT / "solutions" / f"{b.module}.py").read_text(encoding="utf-8")
    (learner / b.folder / f"{b.module}.py").write_text(sol, encoding="utf-8")
    loop = learner / b.folder / "tests" / "test_zz_loop.py"
    loop.write_text(f'import pytest\n\n@pytest.mark.exercise("{b.exercises[0].id}")\n'
                    "def test_spins():\n    while True:\n        pass\n")
    out = tmp_path / "r.json"
    proc = run([sys.executable, "-m", "course", "grade", "--stages", f"{a.number},{b.number}",
                "--timeout", "5", "--json", str(out)], impl="student", timeout=1200,
               env={"COURSE_ROOT": str(learner)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    by_stage: dict[str, list[dict]] = {}
    for t in res["tests"]:
        by_stage.setdefault(t["name"].split(".")[0], []).append(t)
    a_tests = by_stage[str(int(a.number))]
    assert all(t["score"] == 0 and "ERROR" in t["output"] for t in a_tests)
    assert any("SyntaxError" in t["output"] or "invalid syntax" in t["output"] for t in a_tests), a_tests[0]
    b_tests = by_stage[str(int(b.number))]
    first, rest = b_tests[0], b_tests[1:]
    assert 0 < first["score"] < first["max_score"] and "Timeout" in first["output"], first
    assert all(t["score"] == t["max_score"] for t in rest), [t for t in rest if t["score"] != t["max_score"]]


def test_markdown_summary_hides_hidden_tests():
    entries = [grading.Entry("1.1 a", 1, 2, "x", stage="01", exercise="1.1", state="partial"),
               grading.Entry("hidden 1.1: t", 0, 1, "no", visibility="after_due_date", state="failing")]
    md = grading.markdown_summary(entries)
    assert "1.1 a" in md and "hidden 1.1" not in md and "1 hidden test(s)" in md
    assert json.dumps(grading.gradescope_json(entries))
