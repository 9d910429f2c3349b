"""Feedback that points at the learner's bug (course.feedback, `course check`, `course status`):
one informative line per failure, the learner's file and line for errors raised there, one
scoring rule for both commands, given-code tests apart, and "blocked by" from the manifest."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from course import feedback, grading, manifest, progress
from tests.helpers import ROOT

NP_MESSAGE = None
try:
    np.testing.assert_allclose([1.0, 2.0, 3.0], [1.0, 2.0, 4.0], rtol=1e-9, err_msg="gradient of input 0")
except AssertionError as e:
    NP_MESSAGE = e


def _res(nodeid, ex, outcome, message="", todo=None, given=False):
    return {"nodeid": f"01_autograd/tests/test_x.py::{nodeid}", "exercise": ex, "points": None,
            "given": given, "outcome": outcome, "todo": todo,
            "message": message if outcome == "failed" else "", "duration": 0.0}


def _todo(ex_id):
    ex = manifest.exercise(ex_id)
    return f"Exercise {ex_id}: {ex.title} — see 01_autograd.ipynb"


# ---- one line per failure -------------------------------------------------------------

def test_np_testing_failure_is_summarised_past_its_blank_first_line():
    assert str(NP_MESSAGE).startswith("\n")  # the case that printed a bare "AssertionError:"
    line = feedback.summarize(NP_MESSAGE)
    assert line.startswith("AssertionError: Not equal to tolerance rtol=1e-09")
    assert "gradient of input 0" in line and "Mismatched elements: 1 / 3" in line
    assert "array(" not in line and "\n" not in line and len(line) <= feedback.MAX_MESSAGE
    # the same from the printed form pytest keeps in a report
    text = feedback.summarize_text(f"AssertionError: {NP_MESSAGE}")
    assert text.startswith("AssertionError: Not equal to tolerance") and "Mismatched elements" in text


def test_a_tests_own_assertion_message_is_shown_without_pytests_explanation(tmp_path):
    """`assert ok, "fresh buffers must be zeros"` reads as the test's words, not as
    `assert (False) · + where ...`; a bare `assert x == 4` keeps pytest's explanation."""
    (tmp_path / "test_m.py").write_text(
        "def test_said():\n    ok = [1, 2] == [0, 0]\n    assert ok, 'fresh buffers must be zeros'\n\n\n"
        "def test_bare():\n    x = 3\n    assert x == 4\n")
    res = tmp_path / "r.json"
    env = dict(os.environ, COURSE_NO_RECORD="1")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_m.py"),
                    f"--course-results={res}"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    got = {r["nodeid"].split("::")[-1]: r["message"] for r in json.loads(res.read_text())["results"]}
    assert got["test_said"] == "AssertionError: fresh buffers must be zeros", got
    assert got["test_bare"] == "AssertionError: assert 3 == 4", got
    assert feedback.summarize_text("AssertionError: ok\nassert False\n + where False = f()") == "AssertionError: ok"


def test_plain_and_grouped_exceptions_are_summarised():
    assert feedback.summarize(ValueError("shape (2, 3) vs (3,)")) == "ValueError: shape (2, 3) vs (3,)"
    assert feedback.summarize(AssertionError()) == "AssertionError"
    group = ExceptionGroup("two", [KeyError("a"), ValueError("b")])
    assert feedback.summarize(group) == "KeyError: 'a' (and 1 more)"
    assert not feedback.is_informative("AssertionError")
    assert not feedback.is_informative("AssertionError: ")
    assert feedback.is_informative("AssertionError: assert 6 == 4")


def test_pytest_reports_the_informative_line(tmp_path):
    """Through the plugin: pytest's summary and the results JSON carry the message."""
    (tmp_path / "test_np.py").write_text(
        "import numpy as np\n\ndef test_close():\n"
        "    np.testing.assert_allclose([1.0, 2.0], [1.0, 3.0], err_msg='grad of b')\n")
    res = tmp_path / "r.json"
    env = dict(os.environ, COURSE_NO_RECORD="1", COLUMNS="200")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider",
                           str(tmp_path / "test_np.py"), f"--course-results={res}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout
    (r,) = json.loads(res.read_text())["results"]
    assert r["message"].startswith("AssertionError: Not equal to tolerance"), r["message"]
    assert "grad of b" in r["message"]
    assert re.search(r"FAILED .*test_close - AssertionError: Not equal to tolerance", proc.stdout), proc.stdout


# ---- in the learner's file ---------------------------------------------------------------

def _fake_root(tmp_path: Path, monkeypatch, stage_folder: str = "01_autograd") -> Path:
    """A course root whose every entry links to the real one except one stage folder, copied."""
    for p in ROOT.iterdir():
        if p.name not in (stage_folder, ".git", ".course", ".venv"):
            (tmp_path / p.name).symlink_to(p)
    shutil.copytree(ROOT / stage_folder, tmp_path / stage_folder,
                    ignore=shutil.ignore_patterns("__pycache__", "*.ipynb", "hidden_tests"))
    monkeypatch.setenv("COURSE_ROOT", str(tmp_path))
    return tmp_path


def test_an_error_raised_in_the_learners_module_names_its_file_and_line(tmp_path, monkeypatch):
    root = _fake_root(tmp_path, monkeypatch)
    path = root / "01_autograd" / "autograd" / "__init__.py"
    code = compile("def f(x):\n    return x.reshape(-1, 7)\n", str(path), "exec")
    ns: dict = {}
    exec(code, ns)
    with pytest.raises(ValueError) as info:
        ns["f"](np.zeros(6))
    msg = feedback.failure_message(info.value)
    assert msg.startswith("01_autograd/autograd/__init__.py:2: ValueError: cannot reshape"), msg
    # a test's own assertion is the test's message, with no learner location
    assert feedback.failure_message(AssertionError("assert 6 == 4")) == "AssertionError: assert 6 == 4"


def _stub_with(root: Path, old: str, new: str) -> tuple[str, int]:
    """Edit the copied stub package (never the committed one) in the first of its files,
    in name order, that holds `old`; return that file (relative to the root) and the
    edited line's number."""
    for path in sorted((root / "01_autograd" / "autograd").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if old in text:
            path.write_text(text.replace(old, new, 1), encoding="utf-8")
            return str(path.relative_to(root)), text[: text.index(old)].count("\n") + 1
    raise AssertionError(f"no file of the stage 01 stub holds {old!r}")


def test_syntax_error_is_reported_at_the_learners_file_and_line(tmp_path, monkeypatch):
    root = _fake_root(tmp_path, monkeypatch)
    rel, line = _stub_with(root, "import numpy as np\n", "import numpy as np\nx = (1,\n")
    res = tmp_path / "r.json"
    env = dict(os.environ, COURSE_ROOT=str(root), COURSE_NO_RECORD="1", COURSE_IMPL="student")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--impl", "student",
                           "01_autograd/tests", f"--course-results={res}"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    errors = json.loads(res.read_text())["errors"]
    assert errors, proc.stdout[-2000:]
    want = re.compile(rf"^{re.escape(rel)}:{line + 1}: SyntaxError: ")
    assert all(want.match(e) for e in errors), errors
    assert "(while collecting 01_autograd/tests/" in errors[0]
    assert f"{rel}:{line + 1}: SyntaxError" in proc.stdout
    # course check says it once, with how many test files it stops
    lines, done = feedback.check_lines(manifest.stage("01"), [], errors)
    assert done == 0 and want.match(lines[0].removeprefix(" ! ")), lines[:2]
    assert sum("SyntaxError" in ln for ln in lines) == 1
    assert all(len(ln) <= 80 for ln in lines)


def test_import_error_in_the_learners_module_names_its_line(tmp_path, monkeypatch):
    root = _fake_root(tmp_path, monkeypatch)
    rel, line = _stub_with(root, "import numpy as np\n", "import numpy as np\nimport numpy_typo_not_installed\n")
    env = dict(os.environ, COURSE_ROOT=str(root), COURSE_NO_RECORD="1", COURSE_IMPL="student")
    proc = subprocess.run([sys.executable, "-m", "course", "check", "01"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert (f"{rel}:{line + 1}: ModuleNotFoundError: No module named "
            "'numpy_typo_not_installed'") in " ".join(proc.stdout.split()), proc.stdout
    assert all(len(ln) <= 80 for ln in proc.stdout.splitlines())


# ---- per exercise: which failure, blocked, points -----------------------------------------

def test_the_most_specific_failure_is_shown():
    rs = [
        _res("t_blocked", "1.6", "failed", f"TODO: {_todo('1.4')}", todo=_todo("1.4")),
        _res("t_own_todo", "1.6", "failed", f"TODO: {_todo('1.6')}", todo=_todo("1.6")),
        _res("t_bare", "1.6", "failed", "AssertionError"),
        _res("t_pass", "1.6", "passed"),
        _res("t_real", "1.6", "failed", "AssertionError: Not equal to tolerance rtol=1e-09, atol=0"),
        _res("t_real_later", "1.6", "failed", "AssertionError: assert 6 == 4"),
    ]
    assert feedback.pick_failure(rs, "1.6").nodeid.endswith("t_real")  # informative, first in file
    assert feedback.pick_failure(rs[:3], "1.6").nodeid.endswith("t_bare")  # own code before TODOs
    assert feedback.pick_failure(rs[:2], "1.6").nodeid.endswith("t_own_todo")
    assert feedback.pick_failure(rs[:1], "1.6").nodeid.endswith("t_blocked")
    assert feedback.pick_failure(rs[3:4], "1.6") is None


def test_points_print_rounded_down_to_one_decimal():
    assert feedback.fmt_points(12.3214, 15) == "12.3/15"
    assert feedback.fmt_points(14.96, 15) == "14.9/15"  # never full marks before every test passes
    assert feedback.fmt_points(15.0, 15) == "15/15"
    assert feedback.fmt_points(0.0, 10) == "0/10"
    assert feedback.fmt_points(41.25, 100) == "41.2/100"


def _synthetic_stage01() -> list[dict]:
    """1.1 done, 1.2 partial with an np.testing failure, 1.3 own TODO, 1.4 stopped by 1.3's
    TODO only, the rest TODO; 3 given-code tests (one skipped)."""
    rs = [_res(f"t11_{i}", "1.1", "passed") for i in range(4)]
    rs += [_res("t12_a", "1.2", "passed"), _res("t12_b", "1.2", "failed", "AssertionError"),
           _res("t12_c", "1.2", "failed", feedback.summarize(NP_MESSAGE)), _res("t12_d", "1.2", "passed")]
    rs += [_res("t13", "1.3", "failed", f"TODO: {_todo('1.3')}", todo=_todo("1.3"))]
    rs += [_res("t14", "1.4", "failed", f"TODO: {_todo('1.3')}", todo=_todo("1.3"))]
    for ex in ("1.5", "1.6", "1.7", "1.8"):
        rs.append(_res(f"t{ex}", ex, "failed", f"TODO: {_todo(ex)}", todo=_todo(ex)))
    rs += [_res("g1", None, "passed", given=True), _res("g2", None, "passed", given=True),
           _res("g3", None, "skipped", given=True)]
    return rs


def test_check_lines_show_the_message_blockers_points_and_given_code():
    st = manifest.stage("01")
    rs = _synthetic_stage01()
    lines, done = feedback.check_lines(st, rs, [])
    text = "\n".join(lines)
    assert all(len(ln) <= 80 for ln in lines), [ln for ln in lines if len(ln) > 80]
    assert done == 1
    row12 = next(i for i, ln in enumerate(lines) if " 1.2 " in ln)
    assert "partial" in lines[row12] and "7.5/15" in lines[row12]
    detail = " ".join(" ".join(lines[row12 + 1: row12 + 4]).split())
    assert "2/4 tests pass. t12_c: AssertionError: Not equal to tolerance" in detail  # not the bare one
    row14 = next(ln for ln in lines if " 1.4 " in ln)
    assert "blocked" in row14
    assert re.search(r"blocked by (1\.\d, )*1\.3\b", text)
    assert "given code (not graded): 2 passed, 1 skipped" in text
    # the points are course.grading's
    entries = grading.grade_stage(st, grading.Run(results=rs))
    assert lines[-1].strip().startswith(f"points: {feedback.fmt_points(sum(e.score for e in entries), 100)};")


def test_declared_requirements_block_until_done():
    ex = next((e for st in manifest.STAGES for e in st.exercises if e.requires), None)
    if ex is None:
        pytest.skip("no exercise declares requirements")
    req = ex.requires[0]
    assert feedback.blocked_by(ex.id, {req: "TODO"}) == [req]
    assert req not in feedback.blocked_by(ex.id, {r: "done" for r in ex.requires})


def test_manifest_requirements_are_known_and_acyclic():
    """Known ids, never a later stage, no cycles. Within a stage a requirement may come later
    (7.2's tests go over HTTP and need 7.5's streaming bridge): `course check` says so."""
    stage_no = {e.id: int(s.number) for s in manifest.STAGES for e in s.exercises}
    for st in manifest.STAGES:
        for ex in st.exercises:
            assert isinstance(ex.requires, tuple) and all(isinstance(r, str) for r in ex.requires)
            for r in ex.requires:
                assert r in stage_no, f"{ex.id} requires unknown exercise {r!r}"
                assert stage_no[r] <= int(st.number), f"{ex.id} requires {r} of a later stage"
            assert ex.id not in feedback.requires_closure(ex.id), f"{ex.id} requires itself"


def test_stage01_dependencies_are_declared():
    """The dependencies the issue found by hand: 1.6's tests need 1.3 and 1.4; 1.7's need 1.2."""
    close = {e.id: set(feedback.requires_closure(e.id)) for e in manifest.stage("01").exercises}
    assert {"1.3", "1.4"} <= close["1.6"]
    assert "1.2" in close["1.7"]


# ---- status agrees with check --------------------------------------------------------

def test_status_and_check_agree_on_points(tmp_path, monkeypatch):
    root = _fake_root(tmp_path, monkeypatch)
    st = manifest.stage("01")
    rs = _synthetic_stage01()
    progress.record(rs)
    rows = [r for r in progress.status() if r.stage is st]
    entries = grading.grade_stage(st, grading.Run(results=rs))
    assert {r.exercise.id: round(r.score, 6) for r in rows} == {e.exercise: round(e.score, 6) for e in entries}
    state = {r.exercise.id: r.state for r in rows}
    assert state["1.1"] == "done" and state["1.2"] == "partial" and state["1.4"] == "blocked"
    assert next(r for r in rows if r.exercise.id == "1.4").blocked_by == ["1.2", "1.3"]  # 1.2: partial
    assert progress.given("01") == {"passed": 2, "failed": 0, "skipped": 1,
                                    "module_hash": progress.package_hash(st)}
    # a run of some tests merges with the earlier run of the same file
    progress.record([_res("t12_b", "1.2", "passed")])
    row12 = next(r for r in progress.status() if r.exercise.id == "1.2")
    assert row12.state == "partial" and round(row12.score, 6) == round(15 * 3 / 4, 6)
    # the module changes: the points stay those of the last run, marked "started"
    (root / "01_autograd" / "autograd" / "__init__.py").write_text(
        (root / "01_autograd" / "autograd" / "__init__.py").read_text() + "\n# edited\n")
    row12 = next(r for r in progress.status() if r.exercise.id == "1.2")
    assert row12.state == "started" and round(row12.score, 6) == round(15 * 3 / 4, 6)


def test_status_prints_the_same_points_within_80_columns(tmp_path, monkeypatch):
    root = _fake_root(tmp_path, monkeypatch)
    progress.record(_synthetic_stage01())
    env = dict(os.environ, COURSE_ROOT=str(root))
    proc = subprocess.run([sys.executable, "-m", "course", "status", "-v"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(ln) <= 80 for ln in lines), [ln for ln in lines if len(ln) > 80]
    entries = grading.grade_stage(manifest.stage("01"), grading.Run(results=_synthetic_stage01()))
    got = feedback.fmt_points(sum(e.score for e in entries), 100)
    assert re.search(rf"^01 .*\b1/8\s+{re.escape(got)}\b", proc.stdout, re.M), proc.stdout
    assert "given code (not graded): 2/2 tests pass" in proc.stdout
    assert "⊘ 1.2, 1.3" in proc.stdout


# ---- pytest's closing line -------------------------------------------------------------

def test_terminal_summary_counts_exercises_and_given_code_apart():
    line = feedback.terminal_summary(_synthetic_stage01())
    assert line == "exercises: 1/8 done (6 failed tests stop at a TODO); given code: 2 passed, 1 skipped"
    assert feedback.terminal_summary([]) is None


def test_readme_says_what_pytest_prints_on_the_stage01_stub():
    """The README's numbers are those of a real run of the stub (pytest's counts and the
    plugin's closing line); update the README when stage 01's tests change."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## How a learner works", 1)[1].split("\n## ", 1)[0]
    assert "every unfilled exercise shows as one TODO line" not in section
    assert "blocked by" in section and "given" in section
    m = re.search(r"`pytest 01_autograd` prints (\d+) failed and\s+(\d+) passed", section)
    closing = re.search(r"`(course: exercises: .*?)`", section, re.S)
    assert m and closing, "the README no longer says what a stub run prints"
    env = dict(os.environ, COURSE_NO_RECORD="1", COURSE_IMPL="student", COLUMNS="200")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--impl", "student",
                           "01_autograd"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    counts = re.search(r"(\d+) failed, (\d+) passed", proc.stdout)
    assert counts, proc.stdout[-2000:]
    real = (counts.group(1), counts.group(2))
    assert real == m.groups(), f"README says {m.groups()} failed/passed; the stub run gives {real}"
    assert " ".join(closing.group(1).split()) in proc.stdout, proc.stdout[-1500:]


def test_a_todo_of_another_exercise_says_which_test_needs_it():
    class Marker:
        args = ("1.7",)

    msg = _todo("1.2")
    assert feedback.todo_line(msg, Marker()) == f"TODO: {msg} (a test of exercise 1.7 needs it)"
    assert feedback.todo_line(_todo("1.7"), Marker()) == f"TODO: {_todo('1.7')}"
    assert feedback.todo_line(msg, None) == f"TODO: {msg}"


def test_check_says_when_gpu_tests_did_not_run():
    """"5/5 on CPU; 2 GPU tests not run here": a pass on a machine without CUDA says what it
    does not cover."""
    st = manifest.stage("01")
    rs = [_res(f"t11_{i}", "1.1", "passed") for i in range(3)]
    rs += [{**_res(f"t11_gpu{i}", "1.1", "skipped"), "gpu": True, "skip_reason": "needs CUDA"} for i in range(2)]
    lines, _ = feedback.check_lines(st, rs, [], only="1.1", known={})
    text = " ".join(" ".join(lines).split())
    assert "3/3 on CPU; 2 GPU tests not run here (no CUDA)" in text, lines


def test_progress_is_kept_per_exercise_and_blocked_by_only_short_of_full_marks(tmp_path, monkeypatch):
    """An edit inside 1.3's function marks 1.3 changed and leaves 1.1 and 1.2 as recorded; an
    exercise changed since a full-marks run blocks nothing; `course status` never points
    back at an exercise whose recorded run passed."""
    import re
    import shutil

    from course import progress
    from course.results import TestResult
    from tests.helpers import small_course

    base = small_course(tmp_path / "c")
    monkeypatch.setenv("COURSE_ROOT", str(base))
    monkeypatch.delenv("COURSE_NO_RECORD", raising=False)
    pkg = base / "01_autograd" / "autograd"
    for p in (base / "solutions" / "autograd").glob("*.py"):  # the learner wrote every exercise
        shutil.copy2(p, pkg / p.name)

    def t(ex, outcome="passed", message=""):
        return TestResult(nodeid=f"01_autograd/tests/test_x.py::test_{ex.replace('.', '_')}", exercise=ex,
                          outcome=outcome, message=message)

    progress.record([t("1.1"), t("1.2"), t("1.3"), t("1.4", "failed", "AssertionError: the product's shape")])
    states = {r.exercise.id: r for r in progress.status() if r.stage.number == "01"}
    assert [states[e].state for e in ("1.1", "1.2", "1.3")] == ["done"] * 3
    # edit inside 1.3's code only
    path = next(p for p in pkg.glob("*.py") if "BEGIN SOLUTION 1.3" in p.read_text())
    text = path.read_text()
    path.write_text(re.sub(r"(\n([ \t]*)# BEGIN SOLUTION 1\.3\n)", r"\1\2# an edit\n", text, count=1))
    states = {r.exercise.id: r for r in progress.status() if r.stage.number == "01"}
    assert states["1.1"].state == "done" and states["1.2"].state == "done", states["1.2"]
    assert states["1.3"].state == "started" and states["1.3"].recorded_done
    assert "1.3" not in states["1.4"].blocked_by and states["1.4"].blocked_by == [], states["1.4"]


def test_the_picker_prefers_a_rule_and_names_the_exercise_whose_code_failed(tmp_path, monkeypatch):
    """Of two failing tests, the one whose message states a rule is shown, not a bare
    comparison; a failure raised inside code of an exercise that is done says so."""
    import shutil

    from course import feedback, manifest
    from course.results import TestResult
    from tests.helpers import small_course

    bare = TestResult("a.py::test_determinism", exercise="3.9", outcome="failed",
                      message="AssertionError: assert 7.96 > 8.0")
    rule = TestResult("a.py::test_eot", exercise="3.9", outcome="failed",
                      message="AssertionError: bits per byte count the bytes of text, not end-of-text marks")
    assert feedback.pick_failure([bare, rule], "3.9") is rule
    assert feedback.states_a_rule(rule.message) and not feedback.states_a_rule(bare.message)

    base = small_course(tmp_path / "c")
    monkeypatch.setenv("COURSE_ROOT", str(base))
    pkg = base / "01_autograd" / "autograd"
    for p in (base / "solutions" / "autograd").glob("*.py"):
        shutil.copy2(p, pkg / p.name)
    path = next(p for p in sorted(pkg.glob("*.py")) if "BEGIN SOLUTION 1.1" in p.read_text())
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if "BEGIN SOLUTION 1.1" in ln) + 1
    st = manifest.stage("01")
    failed = TestResult("01_autograd/tests/t.py::test_matmul_grad", exercise="1.4", outcome="failed",
                        message=f"01_autograd/autograd/{path.name}:{line}: ValueError: shapes differ")
    lines, _ = feedback.check_lines(st, [failed], [], only="1.4", known={e.id: "done" for e in st.exercises},
                                    locate=progress.exercise_at)
    text = " ".join(" ".join(lines).split())
    assert "1.4's test failed in code of 1.1: test_matmul_grad:" in text, lines
    assert "blocked by" not in text, lines


def test_a_check_cell_line_keeps_the_whole_message():
    """The notebook's one line joins the failure's wrapped lines (never cut mid-sentence), and
    an exercise whose tests pass never reads "not done"."""
    from course import feedback, manifest
    from course.notebook import summary_line

    ex = manifest.exercise("3.9")
    message = ("AssertionError: bits per byte divide the loss by the bytes of text; end-of-text marks are "
               "not text and must not be counted (expected 7.91, got 7.96)")
    out = "\n".join([f" ✘ {ex.id} {ex.title:<44} failing      4.0/8",
                     *feedback.wrap(f"2/4 tests pass. test_bpb_counts_text_bytes: {message}", max_lines=5),
                     " points: 4/8", f"{ex.id} not done yet in 3 s. Stuck? `course hint {ex.id}`."])
    line = summary_line(ex, 1, out)
    assert line.endswith("(expected 7.91, got 7.96)") and "…" not in line, line
    assert summary_line(ex, 0, out) == f"✔ {ex.id} {ex.title}: done"


def test_tests_waiting_for_a_later_exercise_say_go_on_not_blocked_by_a_blocked_one():
    """Stage 07's HTTP tests need the whole request path (7.1-7.6): a learner in the lesson's
    order has 7.3 right while its server tests stop at 7.4's TODO. The check says they count
    once 7.4 is written (not "do that first"), and an earlier exercise whose own tests found
    nothing wrong (state "blocked") is not named as blocking."""
    st = manifest.stage("07")
    todo74 = _todo("7.4")
    rs = [_res("unit", "7.3", "passed"),
          _res("http", "7.3", "failed", f"TODO: {todo74}", todo=todo74)]
    assert feedback.blocked_by("7.3", {"7.1": "blocked", "7.2": "done"}, rs) == ["7.4"]
    assert feedback.blocked_by("7.3", {"7.1": "partial"}, rs) == ["7.1", "7.4"], "7.1's own code fails: named"
    # written but never checked (a learner who skipped 7.1's check): nothing says its code is
    # wrong, so 7.3's own failure is not blamed on it; a hole still there (TODO) is named
    assert feedback.blocked_by("7.3", {"7.1": "started", "7.2": "done"}, rs) == ["7.4"]
    assert feedback.blocked_by("7.3", {"7.1": "TODO", "7.2": "done"}, rs) == ["7.1", "7.4"]
    assert feedback.waits_only_for_later(st, "7.3", rs) == ["7.4"]
    lines, _ = feedback.check_lines(st, rs, [], only="7.3", known={"7.1": "done", "7.2": "done"})
    text = " ".join(" ".join(lines).split())
    assert "later in the lesson: they count once" in text and "do that first" not in text, text
    own_bug = rs + [_res("rule", "7.3", "failed", "AssertionError: exactly at a deadline is not past it")]
    assert feedback.waits_only_for_later(st, "7.3", own_bug) == [], "a failure in 7.3's own code is not waiting"
    assert feedback.waits_only_for_later(st, "7.4", [_res("x", "7.4", "failed", "TODO", todo=_todo("7.2"))]) == [], \
        "an earlier exercise's TODO is not 'later in the lesson'"


SHRINKING = '''
from hypothesis import given, settings, strategies as st

CALLS = {"todo": 0}


def unwritten(x):
    CALLS["todo"] += 1
    raise NotImplementedError("Exercise 1.1: a stub's hole — see 01_autograd.ipynb")


@settings(database=None, derandomize=True)
@given(st.integers(0, 10**6))
def test_stops_at_a_todo(x):
    unwritten(x)


def test_the_todo_was_not_searched():
    assert CALLS["todo"] <= 20, CALLS  # 108 calls when Hypothesis searched for a smaller one


@settings(database=None, derandomize=True)
@given(st.integers(0, 10**6))
def test_a_learners_bug(x):
    assert x < 1000, "too big"
'''


def test_a_todo_is_not_shrunk_and_a_learners_bug_still_is(tmp_path):
    """A property test that stops at a stub's hole stops there on every example: Hypothesis
    reports it without searching for a smaller one (seconds a test, on every stub). A failure
    of the learner's own code is still shrunk to its smallest example."""
    (tmp_path / "test_h.py").write_text(SHRINKING)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           str(tmp_path / "test_h.py")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert "2 failed, 1 passed" in out, out  # the stub's hole and the bug fail, the count holds
    assert "x=1000," in out, out  # the bug's smallest counterexample: shrunk as before
