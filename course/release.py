"""`course release`: the repository an instructor hands to learners, and the private one
the grader runs from (as `otter assign` and nbgrader's `generate_assignment` split them).

- `course release OUT [--through NN]` (learners): stages 01..NN, each with its stub,
  its notebook with outputs cleared, its visible tests, bench and README; the harness
  (`course/`), `pyproject.toml`, the README, the Makefile; the shared modules of
  `solutions/` (the model, the tokenizer, ...) and the solutions of the stages *before*
  NN, which later stages import. Withheld: the solutions of NN and later stages, every
  `hidden_tests/` folder, the course-level `tests/` (they check the solutions), the
  grading workflow. NN defaults to the last stage that has a solution, so a release
  without `--through` grades the last stage and gives the earlier ones' solutions; for a
  course run week by week, release `--through 01`, then `--through 02`, ...
- `course release --hidden OUT` (the instructor's private grading repository): the whole
  course including every stage's `hidden_tests/`, the solutions and the grading workflow;
  `course grade --submission DIR` run there grades a learner's repository.

OUT must not exist or be an empty folder, and must lie outside this repository. The
release is written into a temporary folder next to OUT and renamed into place at the end,
so a failed run leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from course import manifest
from course.loader import root

HIDDEN_DIR = "hidden_tests"
_ALWAYS_IGNORE = ("__pycache__", "*.pyc", ".ipynb_checkpoints", ".hypothesis", ".pytest_cache", "*.egg-info",
                  "bench_results", ".course", ".DS_Store")
TOP_FILES = ("README.md", "pyproject.toml", "Makefile", ".gitignore", "CONTRIBUTING.md")


class ReleaseError(ValueError):
    """OUT cannot be written (it exists and is not empty, or lies inside the course)."""


def _stages_with_solutions() -> list[manifest.Stage]:
    return [st for st in manifest.STAGES if (root() / "solutions" / f"{st.module}.py").exists()]


def _check_out(out: Path) -> Path:
    out = out.expanduser().absolute()
    src = root().resolve()
    real = out.resolve()
    if real == src or src in real.parents:
        raise ReleaseError(f"{out} lies inside the course repository {src}; write the release elsewhere")
    if real in src.parents:
        raise ReleaseError(f"{out} contains the course repository; write the release elsewhere")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ReleaseError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        raise ReleaseError(f"{out} exists and is not empty; nothing was written")
    if not out.parent.is_dir():
        raise ReleaseError(f"the folder {out.parent} does not exist")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise ReleaseError(f"the folder {out.parent} is not writable")
    return out


def clear_notebook(src: Path, dst: Path) -> None:
    """Copy a notebook with every code cell's outputs and execution count cleared."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _copy_stage(st: manifest.Stage, dst_root: Path, hidden: bool) -> None:
    src = root() / st.folder
    ignore = list(_ALWAYS_IGNORE) + ([] if hidden else [HIDDEN_DIR])
    shutil.copytree(src, dst_root / st.folder, ignore=shutil.ignore_patterns(*ignore, "*.ipynb"))
    for nb in src.glob("*.ipynb"):
        clear_notebook(nb, dst_root / st.folder / nb.name)


def _write(out: Path, fill) -> list[str]:
    out = _check_out(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        notes = fill(tmp)
        os.chmod(tmp, 0o755)
        if out.is_dir():  # empty (checked): replace it
            out.rmdir()
        os.rename(tmp, out)
        return notes
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def release(out: Path, through: str | None = None) -> list[str]:
    """Write the learners' repository to `out`; returns lines describing what went in."""
    stages = _stages_with_solutions()
    if not stages:
        raise ReleaseError("no stage has a reference solution; there is nothing to release")
    last = manifest.stage(through) if through else stages[-1]
    if last not in stages:
        raise ReleaseError(f"stage {last.number} has no reference solution yet; it cannot be released")
    released = [st for st in stages if int(st.number) <= int(last.number)]
    given = {st.module for st in released if int(st.number) < int(last.number)}
    stage_modules = {st.module for st in manifest.STAGES}

    def fill(tmp: Path) -> list[str]:
        src = root()
        for name in TOP_FILES:
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
        shutil.copytree(src / "course", tmp / "course", ignore=shutil.ignore_patterns(*_ALWAYS_IGNORE))

        def solutions_ignore(d, names):
            drop = set(shutil.ignore_patterns(*_ALWAYS_IGNORE)(d, names))
            if Path(d) == src / "solutions":
                drop |= {n for n in names if n.endswith(".py") and n[:-3] in stage_modules and n[:-3] not in given}
            return drop

        shutil.copytree(src / "solutions", tmp / "solutions", ignore=solutions_ignore)
        for st in released:
            _copy_stage(st, tmp, hidden=False)
        return [f"stages {', '.join(st.number for st in released)}: stubs, notebooks (outputs cleared), "
                f"visible tests",
                "solutions given: " + (", ".join(sorted(given)) or "none") + " (and the shared modules)",
                f"withheld: the solutions of stage {last.number} and later, every {HIDDEN_DIR}/, the course-level "
                "tests, the grading workflow"]

    return _write(out, fill)


def release_hidden(out: Path) -> list[str]:
    """Write the instructor's private grading repository (the whole course) to `out`."""
    stages = [st for st in manifest.STAGES if (root() / st.folder).is_dir()]

    def fill(tmp: Path) -> list[str]:
        src = root()
        for name in TOP_FILES:
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
        for d in ("course", "solutions", "tests", ".github", ".ci"):
            if (src / d).is_dir():
                shutil.copytree(src / d, tmp / d, ignore=shutil.ignore_patterns(*_ALWAYS_IGNORE))
        for st in stages:
            _copy_stage(st, tmp, hidden=True)
        n = sum(1 for st in stages for _ in (tmp / st.folder / HIDDEN_DIR).rglob("test_*.py"))
        return [f"the whole course with {n} hidden test file(s) in "
                f"{sum((tmp / st.folder / HIDDEN_DIR).is_dir() for st in stages)} stage(s)",
                "keep it private: grade with `course grade --submission LEARNER_REPO` there"]

    return _write(out, fill)
