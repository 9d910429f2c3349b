"""Where a stage's code lives: the reference package and the learner's stub package.

Stage NN with module M has

    solutions/M/            the reference: a package of concept files, exercise bodies
                            between `# BEGIN SOLUTION N.M` / `# END SOLUTION` markers
    NN_<stage>/M/           the learner's package, the same files, GENERATED from the
                            reference by `course stubs --write` (holes for the bodies)

Every other part of the harness (stubs, loader, progress, feedback, grading, release) asks
this module for paths, so the layout is written down once; `root()` is where the course
itself is. A learner's release has no `solutions/M/` for its last stage: there the
learner's files are the `.py` files of `NN_<stage>/M/`.
"""

from __future__ import annotations

import os
from pathlib import Path

from course import manifest


def root() -> Path:
    """The course repository's root: `COURSE_ROOT`, else the folder holding `course/`."""
    env = os.environ.get("COURSE_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent.parent
    if (here / "solutions").is_dir():
        return here
    cwd = Path.cwd().resolve()
    for p in (cwd, *cwd.parents):
        if (p / "course").is_dir() and (p / "solutions").is_dir():
            return p
    return here


def solution_dir(st: manifest.Stage, base: Path | None = None) -> Path:
    return (base or root()) / "solutions" / st.module


def stub_dir(st: manifest.Stage, base: Path | None = None) -> Path:
    return (base or root()) / st.folder / st.module


def has_solution(st: manifest.Stage, base: Path | None = None) -> bool:
    return (solution_dir(st, base) / "__init__.py").is_file()


def _py_files(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.suffix == ".py" and p.is_file() and not p.is_symlink())


def file_names(st: manifest.Stage, base: Path | None = None) -> list[str]:
    """The names of the stage package's files (`__init__.py`, `allocator.py`, ...): the
    reference package's where it exists, else the learner's."""
    names = _py_files(solution_dir(st, base))
    return names if names else _py_files(stub_dir(st, base))


def solution_files(st: manifest.Stage, base: Path | None = None) -> list[Path]:
    return [solution_dir(st, base) / n for n in _py_files(solution_dir(st, base))]


def stub_files(st: manifest.Stage, base: Path | None = None) -> list[Path]:
    """The learner's files of the stage (some may be missing on disk)."""
    return [stub_dir(st, base) / n for n in file_names(st, base)]


def stub_rel(st: manifest.Stage, name: str) -> str:
    """`06_paged_attention/paged/allocator.py`: a learner's file, relative to the course root."""
    return f"{st.folder}/{st.module}/{name}"


def stub_entry(st: manifest.Stage, base: Path | None = None) -> Path:
    """The file `course.load` executes for the learner's package."""
    return stub_dir(st, base) / "__init__.py"


def present_stages(base: Path | None = None) -> list[manifest.Stage]:
    """The stages this repository holds (a learner's release holds the released ones): a
    stage folder with its tests."""
    return [st for st in manifest.STAGES if ((base or root()) / st.folder / "tests").is_dir()]
