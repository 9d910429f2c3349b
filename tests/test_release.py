"""`course release`: the learners' repository holds stubs, cleared notebooks, visible tests,
the harness and only earlier stages' solutions, no hidden tests; it passes its own
`course stubs --check`, collects its tests, and its stubs score 0. `--hidden` writes the
instructor's private repository. Nothing is ever overwritten."""
from __future__ import annotations

import json
import sys

import pytest

from course import manifest
from tests.helpers import ROOT, existing_stages, run, small_course


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    stages = existing_stages()
    if len(stages) < 2:
        pytest.skip("needs two stages")
    out = tmp_path_factory.mktemp("rel") / "learners"
    proc = run([sys.executable, "-m", "course", "release", str(out), "--through", stages[1].number], timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, stages[0], stages[1]


def test_release_holds_what_learners_need_and_nothing_else(released):
    out, first, second = released
    assert not list(out.rglob("hidden_tests")), "a hidden test folder was released"
    assert not (out / "tests").exists() and not (out / ".github").exists()
    assert (out / "course" / "cli.py").is_file() and (out / "pyproject.toml").is_file()
    assert (out / "solutions" / f"{first.module}.py").is_file(), "an earlier stage's solution is missing"
    for st in manifest.STAGES:
        if int(st.number) >= int(second.number):
            assert not (out / "solutions" / f"{st.module}.py").exists(), f"solutions/{st.module}.py was released"
            assert not (out / st.folder).exists() or st is second
    for st in (first, second):
        assert (out / st.folder / f"{st.module}.py").read_text() == (ROOT / st.folder / f"{st.module}.py").read_text()
        assert (out / st.folder / "tests").is_dir()
        nb = json.loads((out / st.notebook).read_text(encoding="utf-8"))
        import nbformat

        nbformat.validate(nbformat.from_dict(nb))
        assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")


def test_release_checks_its_stubs_and_collects_its_tests(released):
    out, first, second = released
    env = {"COURSE_ROOT": str(out)}
    proc = run([sys.executable, "-m", "course", "stubs", "--check"], cwd=out, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:nbval", second.folder], cwd=out, env=env,
               impl="student", timeout=300)
    assert proc.returncode == 0 and "tests collected" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_released_stubs_score_zero(released, tmp_path):
    out, first, _ = released
    if first.number != "01":
        pytest.skip("the small course is stage 01")
    course = small_course(tmp_path / "course")
    res = tmp_path / "r.json"
    proc = run([sys.executable, "-m", "course", "grade", "--submission", str(out), "--stages", "01", "--timeout", "5",
                "--json", str(res)], impl="student", timeout=300, env={"COURSE_ROOT": str(course)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(res.read_text())["score"] == 0


def test_hidden_release_and_refusals(tmp_path):
    out = tmp_path / "private"
    proc = run([sys.executable, "-m", "course", "release", "--hidden", str(out)], timeout=300)
    assert proc.returncode == 0, proc.stderr
    for st in existing_stages():
        if list((ROOT / st.folder / "hidden_tests").glob("test_*.py")):
            assert list((out / st.folder / "hidden_tests").glob("test_*.py"))
        assert (out / "solutions" / f"{st.module}.py").is_file()
    before = sorted(p.name for p in out.iterdir())
    for target, why in ((out, "not empty"), (ROOT / "release-here", "inside the course repository")):
        proc = run([sys.executable, "-m", "course", "release", str(target)], timeout=120)
        assert proc.returncode == 2 and f"error: " in proc.stderr and why in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == before
    assert not (ROOT / "release-here").exists()
