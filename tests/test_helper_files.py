"""A helper module a learner adds to a stage package is graded like the course's files.

An exercise file may import a module the learner wrote next to it (`from .mine import f`).
`pytest`, `course check` and `course grade` all take it: the grade copies it into the
trusted workspace with the same containment as a stub file (a plain file, the size limit,
the syntax check, no import of the graded stage's reference). What no run may take (a
subfolder of modules in the package) is refused by all three with the same message, before
any test runs. Each path on a small course (tests/helpers.py `small_course`): seconds a run.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import run, small_course

HELPER = "learner_helpers.py"
USES_HELPER = "\nfrom .learner_helpers import HELPER_OK as _HELPER_OK  # the learner's own module\n"


@pytest.fixture(scope="module")
def course_root(tmp_path_factory) -> Path:
    return small_course(tmp_path_factory.mktemp("instructor"))


def _with_helper(package: Path, helper_text: str = "HELPER_OK = True\n") -> None:
    """The reference's files in the learner's package, its __init__ importing a helper module."""
    for p in package.glob("*.py"):
        p.unlink()
    for p in (package.parents[1] / "solutions" / "autograd").glob("*.py"):
        shutil.copy2(p, package / p.name)
    init = package / "__init__.py"
    init.write_text(init.read_text() + USES_HELPER)
    (package / HELPER).write_text(helper_text)


def _learner_copy(course_root: Path, tmp_path: Path, helper_text: str = "HELPER_OK = True\n") -> Path:
    """The course as a learner works in it, the stage-01 package using a helper module."""
    base = tmp_path / "learner"
    shutil.copytree(course_root, base, ignore=shutil.ignore_patterns("__pycache__", ".course"))
    _with_helper(base / "01_autograd" / "autograd", helper_text)
    return base


def _grade(course_root: Path, tmp_path: Path, submission: Path):
    out = tmp_path / "results.json"
    proc = run([sys.executable, "-m", "course", "grade", "--submission", str(submission), "--stages", "01",
                "--json", str(out)], impl="student", timeout=300, env={"COURSE_ROOT": str(course_root)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc


def test_pytest_takes_a_helper_module(course_root, tmp_path):
    base = _learner_copy(course_root, tmp_path)
    proc = run([sys.executable, "-m", "pytest", "--impl", "student", "-q", "-p", "no:cacheprovider",
                "01_autograd/tests"], impl="student", timeout=300, cwd=base, env={"COURSE_ROOT": str(base)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "ImportError" not in proc.stdout


def test_course_check_takes_a_helper_module(course_root, tmp_path):
    base = _learner_copy(course_root, tmp_path)
    proc = run([sys.executable, "-m", "course", "check", "01", "--impl", "student"], impl="student", timeout=300,
               cwd=base, env={"COURSE_ROOT": str(base)})
    # the small course tests some of stage 01's exercises: each of those is done
    states = [line.split()[-2] for line in proc.stdout.splitlines() if line.strip().startswith(("✔", "✘", "◐", "·", "⊘"))]
    assert states and set(states) == {"done"}, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "ImportError" not in proc.stdout


def test_course_grade_takes_a_helper_module(course_root, tmp_path):
    base = _learner_copy(course_root, tmp_path)
    res, proc = _grade(course_root, tmp_path, base)
    # the small course tests some of stage 01's exercises: each of those earns full marks
    tested = [t for t in res["tests"] if t["visibility"] == "visible" and not t["output"].startswith("ERROR")]
    assert tested and all(t["score"] == t["max_score"] for t in tested), res["tests"]
    assert "TAMPERING" not in proc.stderr, proc.stderr[-2000:]


def test_a_helper_module_gets_the_containment_of_a_stub_file(course_root, tmp_path):
    """Its syntax error names it; its import of the graded stage's reference is tampering."""
    bad = _learner_copy(course_root, tmp_path / "a", helper_text="HELPER_OK = (\n")
    res, _ = _grade(course_root, tmp_path / "a", bad)
    assert res["score"] == 0
    assert any(f"01_autograd/autograd/{HELPER}, line 1" in t["output"] for t in res["tests"]), res["tests"][:2]
    cheat = _learner_copy(course_root, tmp_path / "b", helper_text="from solutions.autograd import *\nHELPER_OK = 1\n")
    res, proc = _grade(course_root, tmp_path / "b", cheat)
    assert res["score"] == 0 and "TAMPERING DETECTED" in proc.stderr
    assert f"01_autograd/autograd/{HELPER}: the learner's file imports the reference" in proc.stderr


REFUSED = ("refused before grading: 01_autograd/autograd/extra/ is a folder inside the stage package; only the "
           ".py files directly in 01_autograd/autograd/ are graded")


@pytest.fixture(scope="module")
def with_subfolder(course_root, tmp_path_factory) -> Path:
    """A learner's course whose stage package has a subfolder of modules (which no run takes)."""
    base = _learner_copy(course_root, tmp_path_factory.mktemp("sub"))
    (base / "01_autograd" / "autograd" / "extra").mkdir()
    (base / "01_autograd" / "autograd" / "extra" / "__init__.py").write_text("X = 1\n")
    return base


def test_pytest_refuses_a_subfolder_of_the_package(with_subfolder):
    proc = run([sys.executable, "-m", "pytest", "--impl", "student", "-q", "-p", "no:cacheprovider",
                "01_autograd/tests"], impl="student", timeout=300, cwd=with_subfolder,
               env={"COURSE_ROOT": str(with_subfolder)})
    assert proc.returncode != 0 and REFUSED in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_course_check_refuses_a_subfolder_of_the_package(with_subfolder):
    proc = run([sys.executable, "-m", "course", "check", "01", "--impl", "student"], impl="student", timeout=300,
               cwd=with_subfolder, env={"COURSE_ROOT": str(with_subfolder)})
    shown = " ".join(proc.stdout.split())  # course check wraps its lines
    assert proc.returncode != 0 and REFUSED in shown, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_course_grade_refuses_a_subfolder_of_the_package(course_root, with_subfolder, tmp_path):
    res, proc = _grade(course_root, tmp_path, with_subfolder)
    assert res["score"] == 0
    assert all(REFUSED in t["output"] for t in res["tests"] if t["visibility"] == "visible"), res["tests"][:2]
