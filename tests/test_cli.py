"""The learner's and maintainer's commands print what they promise."""
from __future__ import annotations

import shlex
import sys

import pytest
import yaml

from course import cli, feedback, manifest
from tests.helpers import ROOT, existing_stages, run


def test_status_is_fast_and_fits_80_columns():
    proc = run([sys.executable, "-m", "course", "status", "-v"], impl="student", timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    for st in existing_stages():
        assert any(line.startswith(st.number) for line in lines)
    assert "Next: exercise" in proc.stdout or "Every exercise is done" in proc.stdout


def test_check_prints_one_line_per_exercise():
    st = existing_stages()[0]
    proc = run([sys.executable, "-m", "course", "check", st.number, "--impl", "solution"], timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for ex in st.exercises:
        assert any(ex.id in line and "done" in line for line in proc.stdout.splitlines()), ex.id
    assert f"{len(st.exercises)}/{len(st.exercises)} exercises done" in proc.stdout


def test_check_on_the_stub_shows_todos():
    st = existing_stages()[0]
    proc = run([sys.executable, "-m", "course", "check", st.number], impl="student", timeout=300)
    assert proc.returncode == 1
    assert proc.stdout.count("TODO") >= len(st.exercises)


def test_check_one_exercise_runs_only_its_tests(tmp_path):
    """`course check 1.2` runs 1.2's tests alone, prints its line (and what blocks it), and
    `pytest --exercise 1.2` selects the same tests."""
    st = existing_stages()[0]
    ex = st.exercises[1]
    proc = run([sys.executable, "-m", "course", "check", ex.id, "--impl", "solution"], timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    rows = [line.split()[1] for line in proc.stdout.splitlines() if line[:2].strip() in feedback.SYMBOL.values()
            and len(line.split()) > 1]
    assert rows == [ex.id], proc.stdout
    assert f"{ex.id} done" in proc.stdout
    proc = run([sys.executable, "-m", "pytest", "--impl", "solution", "--co", "-q", st.folder, "--exercise", ex.id],
               timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    from course import grading

    marked = {name for f in (ROOT / st.folder / "tests").glob("test_*.py")
              for name, e in grading.marked_functions(f).items() if e == ex.id}
    assert ids and all(line.split("::")[-1].split("[")[0] in marked for line in ids), (ids, marked)
    proc = run([sys.executable, "-m", "pytest", "--co", "-q", st.folder, "--exercise", "9.99"], timeout=300)
    assert proc.returncode != 0 and "no such exercise" in proc.stdout + proc.stderr


def test_check_of_an_exercise_on_the_stub_says_todo_and_blocked():
    st = existing_stages()[0]
    ex = next(e for e in st.exercises if e.requires)
    proc = run([sys.executable, "-m", "course", "check", ex.id], impl="student", timeout=300)
    assert proc.returncode == 1, proc.stdout
    assert "TODO" in proc.stdout and f"course hint {ex.id}" in proc.stdout, proc.stdout


def test_hint_shows_one_more_each_time_and_records_it(tmp_path):
    import shutil

    st = existing_stages()[0]
    ex = st.exercises[0]
    base = tmp_path / "c"
    shutil.copytree(ROOT / st.folder, base / st.folder, ignore=shutil.ignore_patterns("__pycache__", "*.ipynb"))
    env = {"COURSE_ROOT": str(base)}
    first = run([sys.executable, "-m", "course", "hint", ex.id], impl="student", env=env, timeout=60)
    assert first.returncode == 0 and "hint 1/" in first.stdout and "hint 2/" not in first.stdout, first.stdout
    again = run([sys.executable, "-m", "course", "hint", ex.id, "--again"], impl="student", env=env, timeout=60)
    assert "hint 1/" in again.stdout and "hint 2/" not in again.stdout, again.stdout
    second = run([sys.executable, "-m", "course", "hint", ex.id], impl="student", env=env, timeout=60)
    import json

    recorded = json.loads((base / ".course" / "progress.json").read_text())["_hints"][ex.id]
    total = int(first.stdout.split("hint 1/")[1].split(":")[0])
    assert recorded == min(2, total) and ("hint 2/" in second.stdout) == (total >= 2), second.stdout
    bad = run([sys.executable, "-m", "course", "hint", st.number], impl="student", env=env, timeout=60)
    assert bad.returncode == 2 and "not a stage" in bad.stderr


def test_doctor_reports_the_machine():
    proc = run([sys.executable, "-m", "course", "doctor"], timeout=120)
    for what in ("python", "torch", "CUDA", "triton", "notebook kernel"):
        assert what in proc.stdout


def test_bad_stage_is_a_clear_error():
    proc = run([sys.executable, "-m", "course", "check", "42"], timeout=60)
    assert proc.returncode == 2 and "no stage '42'" in proc.stderr


def test_grade_workflow_runs_commands_that_exist():
    """The grading workflow grades a submission from the instructor's copy, with options the
    real parser accepts, as root in a container, and keeps no credential where learner code
    could read it."""
    wf = yaml.safe_load((ROOT / ".github/workflows/grade.yml").read_text())
    job = wf["jobs"]["grade"]
    steps = job["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert 'pip install -e ".[dev]"' in runs
    grade_lines = [ln.strip() for ln in runs.splitlines() if ln.strip().startswith("course grade")]
    assert grade_lines, "the workflow never runs course grade"
    for ln in grade_lines:
        args = cli.build_parser().parse_args(shlex.split(ln)[1:])  # exits (fails the test) on an unknown option
        assert args.cmd == "grade" and args.json == "results.json" and args.summary == "summary.md"
        assert args.submission, "the workflow must grade a submission from a trusted copy (--submission)"
    assert "GITHUB_STEP_SUMMARY" in runs
    assert any("upload-artifact" in s.get("uses", "") and s["with"]["path"].endswith("results.json") for s in steps)
    # no secret reachable from learner code
    assert job.get("container"), "the job must run as root in a container (the sandbox drops privileges)"
    assert wf.get("permissions") == {"contents": "read"}
    for s in steps:
        if "checkout" in s.get("uses", ""):
            assert s["with"]["persist-credentials"] is False, s
        if "course grade" in s.get("run", ""):
            assert "secrets." not in yaml.safe_dump(s) and not s.get("env"), s
    triggers = wf.get("on", wf.get(True))
    assert "push" not in triggers and "pull_request_target" not in triggers


def test_commands_of_a_missing_stage_say_so(tmp_path):
    """In a release without stages 03 and 07, `course eval` and `course serve` refuse with
    one line (exit 2), no traceback."""
    (tmp_path / "01_autograd" / "tests").mkdir(parents=True)
    for cmd, stage in ((["eval", "default"], "03"), (["serve", "--help"], "07")):
        proc = run([sys.executable, "-m", "course", *cmd], timeout=60, env={"COURSE_ROOT": str(tmp_path)})
        assert proc.returncode == 2 and f"stage {stage} is not in this repository" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_readme_and_ci_run_the_same_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8")
    last = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", "set ", "cd "))][-1]
    assert last in readme, f".ci/run runs {last!r}, which the README does not give"
    for st in existing_stages():
        assert st.folder in readme, f"the README does not list stage {st.folder}"


@pytest.mark.parametrize("st", [pytest.param(s, id=s.folder) for s in existing_stages()])
def test_stage_has_a_demo(st: manifest.Stage):
    import course

    assert callable(getattr(course.load(st.module, impl="solution"), "demo", None))


def test_a_stage_speed_check_speaks_only_once_its_exercise_passes(tmp_path, monkeypatch):
    """`course check` calls a stage bench's `speed_check()` (SPEED_CHECKED names the
    exercise it times) only when that exercise is done; its line never costs points, and one
    that raises says it did not run."""
    from course import cli, manifest
    from course.results import TestResult
    from tests.helpers import small_course

    base = small_course(tmp_path / "c")
    monkeypatch.setenv("COURSE_ROOT", str(base))
    monkeypatch.setenv("COURSE_SPEED_CHECK", "1")  # whatever the load (the busy machine's skip: below)
    (base / "01_autograd" / "bench.py").write_text(
        'SPEED_CHECKED = "1.1"\n\ndef speed_check():\n    return "1.1 is correct but slower than the stage aims"\n')
    st, ex = manifest.stage("01"), manifest.exercise("1.1")
    passed = [TestResult("01_autograd/tests/t.py::test_a", exercise="1.1", outcome="passed")]
    failed = [TestResult("01_autograd/tests/t.py::test_a", exercise="1.1", outcome="failed", message="x")]
    assert cli._speed_checks(st, passed, ex) == ["1.1 is correct but slower than the stage aims"]
    (base / "01_autograd" / "bench.py").write_text(
        'SPEED_CHECKED = "1.1"\nraise SystemExit("loaded")\n\ndef speed_check():\n    pass\n')
    assert cli._speed_checks(st, failed, ex) == []  # not even loaded while 1.1 fails
    (base / "01_autograd" / "bench.py").write_text(
        'SPEED_CHECKED = "1.1"\n\ndef speed_check():\n    return "1.1 is correct but slower than the stage aims"\n')
    assert cli._speed_checks(st, passed, manifest.exercise("1.2")) == []
    (base / "01_autograd" / "bench.py").write_text('SPEED_CHECKED = "1.1"\n\ndef speed_check():\n    1 / 0\n')
    (line,) = cli._speed_checks(st, passed, ex)
    assert line.startswith("speed check of 1.1 (stage 01) did not run: ZeroDivisionError"), line
    # a busy machine (more than two runnable processes a CPU): skipped, saying so, the bench
    # not even loaded (its imports are most of a check's cost); COURSE_SPEED_CHECK=0: silent
    (base / "01_autograd" / "bench.py").write_text('SPEED_CHECKED = "1.1"\nraise SystemExit("loaded")\n\n'
                                                    'def speed_check():\n    pass\n')
    monkeypatch.delenv("COURSE_SPEED_CHECK")
    monkeypatch.setattr(cli.os, "getloadavg", lambda: (5.0 * cli.slowdown_cpus(), 0.0, 0.0))
    (line,) = cli._speed_checks(st, passed, ex)
    assert line.startswith("speed check of 1.1 skipped: the machine is busy (load average"), line
    assert "COURSE_SPEED_CHECK=1" in line, line
    assert cli._speed_checks(st, failed, ex) == []  # nothing to say while 1.1 fails
    monkeypatch.setenv("COURSE_SPEED_CHECK", "0")
    assert cli._speed_checks(st, passed, ex) == []



@pytest.mark.parametrize("st", [pytest.param(s, id=s.folder) for s in existing_stages()])
def test_a_bench_speed_checks_only_its_own_stages_exercises(st: manifest.Stage):
    """SPEED_CHECKED (read from the source, as `course check` reads it) names exercises of the
    bench's own stage, and the bench defines `speed_check`: a typo would silently never run."""
    import ast

    path = ROOT / st.folder / "bench.py"
    tree = ast.parse(path.read_text(encoding="utf-8")) if path.is_file() else ast.Module(body=[], type_ignores=[])
    found = [ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "SPEED_CHECKED" for t in n.targets)]
    if not found:
        return
    ids = [found[0]] if isinstance(found[0], str) else list(found[0])
    own = {e.id for e in st.exercises}
    assert ids and set(ids) <= own, f"{path.name}: SPEED_CHECKED {ids} names exercises outside stage {st.number}"
    assert any(isinstance(n, ast.FunctionDef) and n.name == "speed_check" for n in tree.body), \
        f"{path.name} sets SPEED_CHECKED but defines no speed_check"

def test_a_stage_may_speed_check_several_exercises(tmp_path, monkeypatch):
    """SPEED_CHECKED may name several exercises (issue 33): `speed_check(exercise)` runs for
    each one that passes; a slow implementation gets its line, a fast one none (the fake
    check below decides by a measured-looking ratio against a threshold, never a timing)."""
    from course import cli, manifest
    from course.results import TestResult
    from tests.helpers import small_course

    base = small_course(tmp_path / "c")
    monkeypatch.setenv("COURSE_ROOT", str(base))
    monkeypatch.setenv("COURSE_SPEED_CHECK", "1")  # whatever the load
    (base / "01_autograd" / "bench.py").write_text(
        'import os\nSPEED_CHECKED = (\n    "1.1",\n    "1.2",\n)\nSLOW = 3.0\n\n'
        'def speed_check(exercise):\n'
        '    ratio = float(os.environ[f"FAKE_RATIO_{exercise}"])  # what a measurement would give\n'
        '    if ratio <= SLOW:\n        return None\n'
        '    return f"{exercise} is correct but {ratio:.1f}x the baseline; the aim is <= {SLOW:g}x"\n')
    st = manifest.stage("01")
    res = [TestResult(f"01_autograd/tests/t.py::test_{e}", exercise=e, outcome="passed") for e in ("1.1", "1.2")]
    monkeypatch.setenv("FAKE_RATIO_1.1", "9.0")  # an O(n^2) one
    monkeypatch.setenv("FAKE_RATIO_1.2", "1.2")  # the reference's
    assert cli._speed_checks(st, res, None) == ["1.1 is correct but 9.0x the baseline; the aim is <= 3x"]
    assert cli._speed_checks(st, res, manifest.exercise("1.1")) == [
        "1.1 is correct but 9.0x the baseline; the aim is <= 3x"]
    assert cli._speed_checks(st, res, manifest.exercise("1.2")) == []
    monkeypatch.setenv("FAKE_RATIO_1.2", "5.0")
    assert len(cli._speed_checks(st, res, None)) == 2
    res[0] = TestResult("01_autograd/tests/t.py::test_1.1", exercise="1.1", outcome="failed", message="x")
    assert cli._speed_checks(st, res, None) == ["1.2 is correct but 5.0x the baseline; the aim is <= 3x"]
    monkeypatch.delenv("FAKE_RATIO_1.2")  # a check that raises: one line saying so, the others still run
    res[0] = TestResult("01_autograd/tests/t.py::test_1.1", exercise="1.1", outcome="passed")
    lines = cli._speed_checks(st, res, None)
    assert lines[0].startswith("1.1 is correct") and lines[1].startswith(
        "speed check of 1.2 (stage 01) did not run: KeyError"), lines


def test_version_and_help_for_every_option(capsys):
    """`course --version`, and a help text for every option and argument of every command."""
    import argparse

    from course.cli import build_parser

    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--version"])
    out = capsys.readouterr().out.split()
    assert done.value.code == 0 and out[0] == "course" and out[1] != "unknown", out

    def quiet(parser, name):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for cmd, sub in a.choices.items():
                    yield from quiet(sub, f"{name} {cmd}")
            elif not a.help or a.help == argparse.SUPPRESS:
                yield f"{name} {'/'.join(a.option_strings) or a.dest}"

    assert not list(quiet(build_parser(), "course")), list(quiet(build_parser(), "course"))
