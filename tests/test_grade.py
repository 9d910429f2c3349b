"""`course grade`: the stubs score 0, the solutions full marks (visible and hidden tests);
hidden tests are graded and shown after the due date; bad options are refused before any
grading; outputs are written atomically; a learner's syntax error names their file and
line. (Attacks, crashes and time-outs: tests/test_redteam.py.)"""
from __future__ import annotations

import json
import shutil
import os
import sys
import time

import pytest

from course import cuda, grading, manifest
from tests.helpers import existing_stages, reference_grades, run, small_course, stub_grades


def _grade(tmp_path, impl: str, *extra: str, env=None):
    out = tmp_path / f"results-{impl}.json"
    md = tmp_path / f"summary-{impl}.md"
    proc = run([sys.executable, "-m", "course", "grade", "--impl", impl, "--json", str(out),
                "--summary", str(md), *extra], impl=impl, timeout=3500, env=env or {})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "total" in proc.stdout  # the console table
    assert md.read_text(encoding="utf-8").startswith("## Course grade:")
    return json.loads(out.read_text(encoding="utf-8")), proc


def _max(stages) -> int:
    return sum(e.points for st in stages for e in st.exercises)


def _check_gradescope_shape(res: dict) -> None:
    assert set(res) >= {"score", "tests"}
    for t in res["tests"]:
        assert set(t) >= {"name", "score", "max_score", "output", "visibility"}
        assert 0 <= t["score"] <= t["max_score"]


# The solutions' grade is also make test's one run of every stage's visible and hidden tests
# against the reference (the README's command runs tests/ only): `grading.grade([st],
# impl="solution")` of each stage, once a session by whichever worker gets to it first
# (tests/helpers.py's `reference_grades`: the same grade records the reference's answers that
# the student grades read), what `course grade --impl solution` computes (the CLI's
# printing and files are the small course's tests below, and stage 01's). The grade scores only
# exercise tests; the runs it made are checked here test by test, given code's included, so a
# failing test of any stage fails this test with its name and message.
@pytest.mark.timeout(3600)  # grades every stage: longer than the default per-test limit
def test_solutions_score_full_marks(tmp_path_factory):
    from course import report
    from course.scoring import not_counted

    stages = existing_stages()
    entries, lines, seen = [], [], []
    grades = reference_grades(stages, tmp_path_factory)  # one grade a stage, shared with the answers' record
    for st in stages:
        for acc, part in zip((entries, lines, seen), grades[st.number]):
            acc += part
    runs = [final for final, _raw in seen]
    problems = [f"{r.nodeid}: {r.outcome}: {r.message or r.skip_reason}" for run in runs for r in run.in_order()
                if r.outcome != "passed" and not not_counted(r)]
    assert not problems, f"{len(problems)} tests of the stages did not pass on the reference:\n" + "\n".join(problems)
    errors = [e for run in runs for e in run.errors]
    assert not errors, errors
    assert sum(len(run.results) for run in runs) > 1000  # every stage's tests ran, hidden ones included
    tampering = [ln for ln in lines if "TAMPERING" in ln]
    assert not tampering, tampering
    # every hidden test reports at least one value (course.answer), judged outside the process
    silent = [ln for ln in lines if "reports no value" in ln]
    assert not silent, "\n".join(silent[:20])
    res = json.loads(report.dump_json(entries))
    _check_gradescope_shape(res)
    assert "total" in report.console_table(entries)
    assert report.markdown_summary(entries, report=lines).startswith("## Course grade:")
    bad = [t["name"] + ": " + t["output"] for t in res["tests"] if t["score"] != t["max_score"]]
    assert not bad, bad
    visible = [t for t in res["tests"] if t["visibility"] == "visible"]
    assert sum(t["score"] for t in visible) == _max(stages)
    # every stage that has hidden tests shows them, hidden until the due date
    for st in stages:
        if (grading.stage_hidden_dir(st)).is_dir():
            assert any(t["visibility"] == "after_due_date" and t["name"].startswith(f"{int(st.number)}.")
                       for t in res["tests"]), f"stage {st.number}'s hidden tests were not graded"


# The stubs' grade of every stage: `grading.grade(..., impl="student")`, what `course grade
# --impl student` computes (the CLI's printing and files: the small course's tests below, and
# stage 01's), one stage at a time. Each stage's grade is shared with
# tests/test_stubs_fail.py (tests/helpers.py's `stub_grades`), which asserts, test by test, that
# every exercise test of the same run fails; what this adds is the grader's scoring of those
# failures, with visible and hidden tests and the reference's recorded answers, and that the
# untouched stubs are not taken for tampering. Stages in reverse order: the other worker
# (test_stubs_fail) goes forward, so the two rarely wait on the same stage.
@pytest.mark.timeout(3600)
def test_stubs_score_zero(tmp_path_factory):
    from course import report

    stages = existing_stages()
    grades = stub_grades(stages[::-1], tmp_path_factory)
    entries = [e for st in stages for e in grades[st.number].entries]
    lines = [ln for st in stages for ln in grades[st.number].report]
    assert "total" in report.console_table(entries)
    assert report.markdown_summary(entries, report=lines).startswith("## Course grade:")
    res = json.loads(report.dump_json(entries))
    _check_gradescope_shape(res)
    assert res["score"] == 0, [(t["name"], t["score"]) for t in res["tests"] if t["score"]]
    tampering = [ln for ln in lines if "TAMPERING" in ln]
    assert not tampering, tampering
    visible = [t for t in res["tests"] if t["visibility"] == "visible"]
    assert sum(t["max_score"] for t in visible) == _max(stages)


HIDDEN_EXTRA = '''
import pytest
import course


@pytest.mark.exercise("1.3", points=3)
def test_extra_weighted():
    assert course.load("autograd").Tensor([1.0, 2.0]).sum().item() == 3.0


@pytest.mark.exercise("1.3")
def test_extra_plain():
    assert course.load("autograd").Tensor([[1.0], [2.0]]).sum().item() == 3.0
'''


@pytest.mark.parametrize("impl, expect", [("solution", 10.0), ("student", 0.0)])
def test_hidden_tests_from_a_folder_are_graded_and_hidden(tmp_path, impl, expect):
    """`--hidden DIR` (laid out as `course release --hidden` writes it) adds hidden tests;
    an exercise's hidden entry is worth its manifest points, shared by test weight."""
    course_root = small_course(tmp_path / "course")
    hidden = tmp_path / "private" / "01_autograd" / "hidden_tests"
    hidden.mkdir(parents=True)
    (hidden / "test_autograd_extra.py").write_text(HIDDEN_EXTRA)
    res, proc = _grade(tmp_path, impl, "--stages", "01", "--hidden", str(tmp_path / "private"),
                       env={"COURSE_ROOT": str(course_root)})
    hid = [t for t in res["tests"] if t["name"].startswith("1.3") and t["visibility"] == "after_due_date"]
    assert len(hid) == 1 and hid[0]["max_score"] == manifest.exercise("1.3").points == 10
    assert hid[0]["score"] == expect


def test_syntax_error_names_the_learners_file_and_line(tmp_path):
    course_root = small_course(tmp_path / "course")
    sub = tmp_path / "sub" / "01_autograd" / "autograd"
    sub.mkdir(parents=True)
    (sub / "__init__.py").write_text("import numpy as np\n\n\ndef broken(:\n    pass\n")
    res, proc = _grade(tmp_path, "student", "--stages", "01", "--submission", str(tmp_path / "sub"),
                       env={"COURSE_ROOT": str(course_root)})
    assert res["score"] == 0
    out = res["tests"][0]["output"]
    assert "SyntaxError" in out and "01_autograd/autograd/__init__.py, line 4" in out and "def broken(:" in out, out


@pytest.mark.parametrize("args, why", [
    (["--timeout", "-1"], "positive number of seconds"),
    (["--timeout", "0"], "positive number of seconds"),
    (["--timeout", "soon"], "expected a number of seconds"),
    (["--json", "/nonexistent-folder/results.json"], "does not exist"),
    (["--summary", "."], "is a folder"),
    (["--stages", "42"], "no stage '42'"),
    (["--submission", "/nonexistent-submission"], "is not a folder"),
])
def test_bad_options_are_refused_before_grading(tmp_path, args, why):
    t0 = time.monotonic()
    proc = run([sys.executable, "-m", "course", "grade", *args], impl="student", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "error:" in proc.stderr and why in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "grading stage" not in proc.stderr
    assert time.monotonic() - t0 < 60


def test_outputs_are_written_atomically(tmp_path):
    target = tmp_path / "results.json"
    target.write_text("old")
    grading.write_atomic(target, '{"score": 1}')
    assert target.read_text() == '{"score": 1}'
    assert sorted(os.listdir(tmp_path)) == ["results.json"]  # no temporary file left behind


def test_markdown_summary_hides_hidden_tests():
    entries = [grading.Entry("1.1 a", 1, 2, "x", stage="01", exercise="1.1", state="partial"),
               grading.Entry("1.1 a (hidden tests)", 0, 2, "no", visibility="after_due_date", state="failing")]
    md = grading.markdown_summary(entries, report=["TAMPERING DETECTED in stage 02: x"])
    assert "1.1 a |" in md and "(hidden tests)" not in md and "1 hidden test(s)" in md
    assert "For the instructor" in md and "TAMPERING DETECTED" in md
    assert json.dumps(grading.gradescope_json(entries))


def test_skips_score_zero_and_missing_gpu_is_not_counted(monkeypatch):
    st = manifest.STAGES[0]
    ex = st.exercises[0]
    monkeypatch.setattr(cuda, "_HAS_CUDA", False)
    rs = [{"nodeid": f"{st.folder}/tests/t.py::a", "exercise": ex.id, "outcome": "passed"},
          {"nodeid": f"{st.folder}/tests/t.py::b", "exercise": ex.id, "outcome": "skipped", "skip_reason": "x"}]
    e = grading.grade_stage(st, grading.Run(results=rs))[0]
    assert e.score == ex.points / 2 and "skipped" in e.output
    rs[1].update(gpu=True, skip_reason="needs CUDA")
    e = grading.grade_stage(st, grading.Run(results=rs))[0]
    assert e.score == e.max_score == ex.points and "not counted" in e.output


def test_the_instructor_sees_how_many_hints_were_used(tmp_path):
    """`course hint` records what it showed in the learner's .course/progress.json; the
    grader reads it as plain data (never points) and names it in the instructor's lines."""
    course_root = small_course(tmp_path / "course")
    sub = tmp_path / "sub"
    shutil.copytree(course_root / "01_autograd" / "autograd", sub / "01_autograd" / "autograd")
    (sub / ".course").mkdir()
    (sub / ".course" / "progress.json").write_text(json.dumps({"_hints": {"1.1": 2, "1.3": 1, "1.2": "x"}}))
    res, proc = _grade(tmp_path, "student", "--stages", "01", "--submission", str(sub),
                       env={"COURSE_ROOT": str(course_root)})
    assert "hints used" in proc.stderr and "1.1 2, 1.3 1" in proc.stderr, proc.stderr[-2000:]
    assert res["score"] == 0
