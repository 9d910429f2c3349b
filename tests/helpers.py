"""Shared helpers of the course-level tests (the course itself: stubs, notebooks, grading, chain)."""
from __future__ import annotations

import copy
import os
import pickle
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from course import layout, manifest
from course.loader import root

ROOT = root()


def existing_stages() -> list[manifest.Stage]:
    """Stages whose solution package exists (the manifest may list planned stages)."""
    return [st for st in manifest.STAGES if layout.has_solution(st)]


def run(cmd: list[str], impl: str = "solution", timeout: int = 900, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, COURSE_IMPL=impl, COURSE_NO_RECORD="1", PYTHONUNBUFFERED="1")
    env.update(kw.pop("env", {}))
    return subprocess.run(cmd, cwd=kw.pop("cwd", ROOT), env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable


def stage_params():
    return [pytest.param(st, id=st.folder) for st in existing_stages()]


# ---- one `course grade` of each stage's stub, shared by the tests that assert on it -----------
# tests/test_stubs_fail.py (every exercise test fails on the stub, test by test) and
# tests/test_grade.py (the stubs score 0 under the grader, no tampering seen) used to run every
# stage's tests on its stub twice, once each; now one grade of a stage serves both, whichever
# xdist worker gets to it first (a file lock in the session's shared temporary folder, as
# pytest-xdist documents for a session fixture that must run once; fcntl's here).

@dataclass
class StubGrade:
    """`grading.grade([st], impl="student")` of the course's own stub (what `course grade
    --impl student --stages NN` computes; the CLI only prints it)."""

    entries: list  # the grader's entries for the stage
    report: list[str]  # the instructor's lines (`course grade:` on stderr)
    run: object  # course.results.Run: the grader's own run of the stage's visible and hidden
    # tests on the stub, every outcome as the test process reported it (taken before the
    # grader judged the hidden tests' answers), the grader's canaries left out


def grade_in_process(stages, impl: str) -> tuple[list, list[str], list]:
    """`grading.grade(stages, impl=impl)` in this process (what `course grade --impl IMPL`
    computes; the CLI only prints it): (entries, the instructor's lines, and for each graded
    stage in order the pair (final run, raw run)). The final run is the grader's own record
    after judging (canaries out, answers judged, messages redacted); the raw run is a copy taken
    as the test process reported it, before any of that. Only the runs of `impl` are kept (a
    student grade may first run the reference for its answers)."""
    from course import grading, runner

    real = runner.run_tests
    seen = []

    def spy(paths, run_impl, *args, **kw):
        run = real(paths, run_impl, *args, **kw)
        if run_impl == impl:
            seen.append((run, copy.deepcopy(run)))
        return run

    # every harness module that calls the runner under the name it imported
    bound = [m for name, m in list(sys.modules.items())
             if name.split(".")[0] == "course" and getattr(m, "run_tests", None) is real]
    report: list[str] = []
    for m in bound:
        m.run_tests = spy
    try:
        entries = grading.grade(list(stages), impl=impl, report=report)
    finally:
        for m in bound:
            m.run_tests = real
    graded = [st for st in stages if grading.gradeable(st)]
    assert len(seen) == len(graded), f"the grader ran {len(seen)} times for {len(graded)} stages"
    return entries, report, seen


def _grade_stub(st: manifest.Stage) -> StubGrade:
    entries, report, seen = grade_in_process([st], "student")
    final, raw = seen[0]
    # the canaries are what the grader took out of its run before scoring
    raw.results = {n: r for n, r in raw.results.items() if n in final.results}
    raw.collected = {n: r for n, r in raw.collected.items() if n in final.collected}
    return StubGrade(entries, report, raw)


def _session_dir(tmp_path_factory) -> Path:
    """A folder this pytest session's xdist workers share (the base temporary folder's
    parent under xdist, the base itself without)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _once(tmp_path_factory, name: str, compute, wait: bool):
    """`compute()`'s value, computed by one worker of the session and kept (pickled) for the
    others; None, without waiting, when another worker holds it and `wait` is false."""
    import fcntl

    folder = _session_dir(tmp_path_factory) / "course-shared"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.pickle"
    with open(folder / f"{name}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return None  # another worker is computing it
        try:
            if not path.is_file():
                tmp = path.with_suffix(".tmp")
                tmp.write_bytes(pickle.dumps(compute()))
                tmp.replace(path)
            return pickle.loads(path.read_bytes())
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _each_once(stages, tmp_path_factory, prefix: str, compute) -> dict[str, object]:
    """{stage number: compute(st)}, each once per session: the stages nobody holds first, then
    those another worker is computing (waited for)."""
    out: dict[str, object] = {}
    for wait in (False, True):
        for st in stages:
            if st.number not in out:
                got = _once(tmp_path_factory, f"{prefix}-{st.number}", lambda st=st: ("done", compute(st)), wait)
                if got is not None:
                    out[st.number] = got[1]
    return out


def reference_grades(stages, tmp_path_factory) -> dict[str, tuple[list, list[str], list]]:
    """{stage number: `grade_in_process([st], "solution")`}, each stage graded once per session
    by whichever worker gets to it first (a stage another worker is grading is waited for
    last). tests/test_grade.py's full-marks test asserts on these grades; the grade of the
    reference is also its own reference (`course.reference.own_reference`): it records the
    answers to the stage's hidden tests in the course's cache, which every student grade reads
    first. One run of each stage's visible and hidden tests on the reference serves both,
    where a run of the hidden tests alone used to record the answers beside the full-marks
    grade's own run of them."""
    return _each_once(stages, tmp_path_factory, "reference-grade", lambda st: grade_in_process([st], "solution"))


def record_reference_answers(stages, tmp_path_factory) -> None:
    """The reference's answers to each stage's hidden tests, in the course's cache
    (`.course/answers/`, which `course grade --impl student` reads before it grades a learner's
    stage): those not cached yet, recorded by the session's one grade of the reference
    (`reference_grades`), not by each grade that needs them at the same time."""
    from course import reference

    missing = [st for st in stages if not reference._answers_file(st, None).is_file()]
    if missing:
        reference_grades(missing, tmp_path_factory)


def stub_grades(stages, tmp_path_factory) -> dict[str, StubGrade]:
    """{stage number: StubGrade}, each stage graded once per session (whichever worker gets
    to it first; a stage another worker is grading is waited for last)."""
    def grade(st: manifest.Stage) -> StubGrade:
        record_reference_answers([st], tmp_path_factory)
        return _grade_stub(st)

    return _each_once(stages, tmp_path_factory, "stub-grade", grade)


SECRET = "held-out case 7f3a9c: broadcasting a row against a column"

VISIBLE = '''
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import course

ag = course.load("autograd")


@pytest.mark.exercise("1.1")
def test_rt_backward():
    a = ag.Tensor(np.arange(3.0), requires_grad=True)
    a.backward(np.ones(3))
    np.testing.assert_allclose(a.grad, np.ones(3))


@pytest.mark.exercise("1.2")
def test_rt_add():
    a = ag.Tensor(np.arange(3.0))
    np.testing.assert_allclose((a + a).data, [0.0, 2.0, 4.0])


@pytest.mark.exercise("1.3")
def test_rt_sum():
    assert ag.Tensor(np.ones((2, 3))).sum().item() == 6.0


@pytest.mark.exercise("1.4")
def test_rt_matmul():
    a = ag.Tensor(np.eye(2))
    np.testing.assert_allclose((a @ a).data, np.eye(2))


@pytest.mark.exercise("1.5")
def test_rt_reshape():
    assert ag.Tensor(np.arange(6.0)).reshape(2, 3).shape == (2, 3)


@pytest.mark.exercise("1.6")
@settings(max_examples=30, deadline=None, database=None)
@given(st.floats(-5, 5))
def test_rt_relu(x):
    assert ag.Tensor(np.array([x])).relu().item() == max(x, 0.0)
'''

HIDDEN = f'''
import numpy as np
import pytest

import course

SECRET = "{SECRET}"


@pytest.mark.exercise("1.2")
def test_rt_hidden_broadcast():
    ag = course.load("autograd")
    out = ag.Tensor(np.ones((1, 3))) + ag.Tensor(np.arange(2.0).reshape(2, 1))
    course.answer("sum", out.data)
    assert out.shape == (2, 3), SECRET
    np.testing.assert_allclose(out.data, [[1.0] * 3, [2.0] * 3])
'''


def small_course(base: Path) -> Path:
    """A small instructor's course under `base`: the real solutions, stage 01's stub, a few
    quick numpy tests (one a Hypothesis test) and one hidden test. Grading it takes seconds."""
    base.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "pyproject.toml", base / "pyproject.toml")
    shutil.copytree(ROOT / "solutions", base / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
    (base / "01_autograd" / "tests").mkdir(parents=True)
    (base / "01_autograd" / "hidden_tests").mkdir()
    shutil.copytree(ROOT / "01_autograd" / "autograd", base / "01_autograd" / "autograd",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "01_autograd" / "hints.json", base / "01_autograd" / "hints.json")
    (base / "01_autograd" / "tests" / "test_autograd_rt.py").write_text(VISIBLE)
    (base / "01_autograd" / "hidden_tests" / "test_autograd_rt_hidden.py").write_text(HIDDEN)
    return base
