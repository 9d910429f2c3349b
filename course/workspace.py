"""Steps 1 and 3 of grading: the trusted copy a stage is graded in, and its canaries.

For each stage a fresh temporary workspace is built from the instructor's course:
`pyproject.toml`, the stage folder (visible `tests/`, held-out `hidden_tests/`, conftest
files) and `solutions/` *without* the graded stage's module and later ones. Only the
learner's graded files (`course.submission`) are written into it. Two generated tests, named
and marked like real held-out tests, are written next to the hidden tests: one that must
fail, one that must pass (`course.integrity` reads what became of them).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from course import layout, manifest
from course.loader import root
from course.results import HIDDEN_DIR
from course.sandbox import Sandbox

_COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.ipynb", ".ipynb_checkpoints", ".hypothesis",
                                      ".pytest_cache", "out", "data", "bench_results")


@dataclass
class Workspace:
    path: Path
    stage: manifest.Stage
    canary_fail: str  # nodeids of the canaries
    canary_pass: str
    test_files: list[Path]  # relative to path
    hidden_sources: list[str]

    def test_paths(self) -> list[Path]:
        """The stage's visible tests, and its hidden tests when the workspace has them."""
        folder = self.path / self.stage.folder
        return [folder / "tests"] + ([folder / HIDDEN_DIR] if (folder / HIDDEN_DIR).is_dir() else [])

    def make_read_only_for_others(self) -> None:
        """Folders 0755 and files 0644 under the stage folder (a sandboxed child reads them)."""
        for p in (self.path / self.stage.folder).rglob("*"):
            os.chmod(p, 0o755 if p.is_dir() else 0o644)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


_WORDS = ("shapes", "edge", "seeds", "large", "small", "random", "invariants", "batched", "cases", "dtype",
          "repeat", "order", "mixed", "extra", "bounds", "values", "grid", "sizes", "zero", "sparse")


def _must_fail_body(st: manifest.Stage, rng: random.Random, attr: str) -> str:
    # values no public name of a real module equals: an object that agrees with them all
    # (the "always equal" attack) makes this must-fail canary pass
    probes = ", ".join([repr(rng.uniform(-1e3, 1e3)), repr(rng.randrange(10 ** 6)), repr(attr[::-1]),
                        repr([rng.randrange(100) for _ in range(3)]), "object()"])
    return (f'    mod = course.load("{st.module}")\n'
            f"    probes = ({probes})\n"
            f"    agree = []\n"
            f"    for name in [n for n in dir(mod) if not n.startswith('_')]:\n"
            f"        for probe in probes:\n"
            f"            try:\n"
            f"                if (getattr(mod, name) == probe) is True:\n"
            f"                    agree.append(name)\n"
            f"            except Exception:\n"
            f"                pass\n"
            f'    assert getattr(mod, "{attr}", None) is not None or agree, "the module has no {attr}"\n')


def _canary_source(st: manifest.Stage, rng: random.Random) -> tuple[str, str, str, str]:
    """(file name, source, name of the must-fail test, name of the must-pass test)."""
    w = rng.sample(_WORDS, 5)
    fname = f"test_{st.module}_{w[0]}_{rng.randrange(10, 99)}.py"
    fail_name, pass_name = f"test_{w[1]}_{w[2]}", f"test_{w[3]}_{w[4]}"
    ex_fail, ex_pass = rng.choice(st.exercises).id, rng.choice(st.exercises).id
    attr = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(10))
    vals = [rng.randrange(-1000, 1000) for _ in range(6)]
    fail_body = _must_fail_body(st, rng, attr)
    src = (f'"""Held-out checks of stage {st.number}: {w[0]} and {w[3]}."""\n'
           "import pytest\n\nimport course\n\n\n"
           f'@pytest.mark.exercise("{ex_fail}")\n'
           f"def {fail_name}():\n"
           f"{fail_body}\n\n"
           f'@pytest.mark.exercise("{ex_pass}")\n'
           f"def {pass_name}():\n"
           f"    values = {vals!r}\n"
           f"    assert sorted(values) == {sorted(vals)!r}\n")
    return fname, src, fail_name, pass_name


def _copy_course(st: manifest.Stage, ws: Path, hidden_from: Path | None, withhold: bool) -> None:
    src = root()
    for name in ("pyproject.toml", "conftest.py", "setup.cfg"):
        if (src / name).is_file():
            shutil.copy2(src / name, ws / name)
    withheld = {s.module for s in manifest.STAGES if int(s.number) >= int(st.number)} if withhold else set()
    shutil.copytree(src / "solutions", ws / "solutions", ignore=lambda d, names: [
        n for n in _COPY_IGNORE(d, names)] + [n for n in names if Path(d) == src / "solutions" and n in withheld])
    shutil.copytree(src / st.folder, ws / st.folder, ignore=_COPY_IGNORE)
    if hidden_from is not None:
        extra = hidden_from / st.folder / HIDDEN_DIR
        if extra.is_dir():
            shutil.copytree(extra, ws / st.folder / HIDDEN_DIR, ignore=_COPY_IGNORE, dirs_exist_ok=True)


def _write_canaries(st: manifest.Stage, ws: Path, rng: random.Random) -> tuple[str, str]:
    """The canaries' node ids (must fail, must pass)."""
    hdir = ws / st.folder / HIDDEN_DIR
    hdir.mkdir(exist_ok=True)
    fname, text, fail_name, pass_name = _canary_source(st, rng)
    (hdir / fname).write_text(text, encoding="utf-8")
    rel = f"{st.folder}/{HIDDEN_DIR}/{fname}"
    return f"{rel}::{fail_name}", f"{rel}::{pass_name}"


def build_workspace(st: manifest.Stage, stub_texts: dict[str, str] | None, hidden_from: Path | None = None,
                    canaries: bool = True, rng: random.Random | None = None, withhold: bool = True) -> Workspace:
    """A fresh copy of the instructor's course for grading stage `st`, with the learner's
    `stub_texts` (file name in the stage package: text) written into its package."""
    ws = Path(tempfile.mkdtemp(prefix=f"course-grade-{st.number}-"))
    os.chmod(ws, 0o755)
    _copy_course(st, ws, hidden_from, withhold)
    for name, text in (stub_texts or {}).items():
        layout.stub_dir(st, ws).mkdir(parents=True, exist_ok=True)
        (layout.stub_dir(st, ws) / name).write_text(text, encoding="utf-8")
    cf, cp = _write_canaries(st, ws, rng or random.SystemRandom()) if canaries else ("", "")
    files = sorted(p.relative_to(ws) for d in ("tests", HIDDEN_DIR) for p in (ws / st.folder / d).rglob("test_*.py")
                   if (ws / st.folder / d).is_dir())
    hdir = ws / st.folder / HIDDEN_DIR
    hidden_files = hdir.rglob("*.py") if hdir.is_dir() else []
    hidden_sources = [p.read_text(encoding="utf-8", errors="replace") for p in hidden_files
                      if cf.split("::")[0] != str(p.relative_to(ws))]
    return Workspace(ws, st, cf, cp, files, hidden_sources)


def child_env(sandbox: Sandbox, impl: str) -> dict:
    """The environment of a grading child: a few of the grader's variables, a home of its own.
    Threads that wait do so asleep (`OMP_WAIT_POLICY=PASSIVE`, unless the grader's environment
    says otherwise): on a busy machine an OpenMP thread that spins at a barrier takes the core
    from the thread it waits for (lesson 03 beside one CPU hog: 207 s with spinning, 71 s
    asleep, 51 s quiet)."""
    keep = ("PATH", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    home = str(sandbox.home)
    env.update(HOME=home, TMPDIR=home, MPLCONFIGDIR=home, MPLBACKEND="Agg", COURSE_IMPL=impl,
               COURSE_NO_RECORD="1", PYTHONUNBUFFERED="1", HYPOTHESIS_STORAGE_DIRECTORY=f"{home}/.hypothesis")
    env.setdefault("PATH", os.defpath)
    return env
