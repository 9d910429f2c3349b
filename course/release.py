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

from course import layout, manifest
from course.loader import root

HIDDEN_DIR = "hidden_tests"
_ALWAYS_IGNORE = ("__pycache__", "*.pyc", ".ipynb_checkpoints", ".hypothesis", ".pytest_cache", "*.egg-info",
                  "bench_results", ".course", ".DS_Store")
TOP_FILES = ("README.md", "pyproject.toml", "Makefile", ".gitignore", "CONTRIBUTING.md")
LEARNER_TOP_FILES = ("pyproject.toml", ".gitignore")  # README.md and Makefile are written for the release

# the optional dependencies (pyproject.toml) a learner's `make install` needs, by the first
# stage that needs them: pytest & co. for every stage, `transformers` (the peer the GPT is
# checked against) from stage 03, `triton` (the paged-decode kernel) from stage 06, the
# web stack (FastAPI, uvicorn, the `openai` client) from stage 07
EXTRAS_FROM = (("01", "test"), ("03", "peers"), ("06", "gpu"), ("07", "serving"))


class ReleaseError(ValueError):
    """OUT cannot be written (it exists and is not empty, or lies inside the course)."""


def _stages_with_solutions() -> list[manifest.Stage]:
    return [st for st in manifest.STAGES if layout.has_solution(st)]


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
        for name in LEARNER_TOP_FILES:
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
        extras = learner_extras(last)
        (tmp / "Makefile").write_text(learner_makefile(extras), encoding="utf-8")
        (tmp / "README.md").write_text(learner_readme(released, last, extras), encoding="utf-8")
        shutil.copytree(src / "course", tmp / "course", ignore=shutil.ignore_patterns(*_ALWAYS_IGNORE))

        def solutions_ignore(d, names):
            drop = set(shutil.ignore_patterns(*_ALWAYS_IGNORE)(d, names))
            if Path(d) == src / "solutions":
                drop |= {n for n in names if n in stage_modules and n not in given}
            return drop

        shutil.copytree(src / "solutions", tmp / "solutions", ignore=solutions_ignore)
        for st in released:
            _copy_stage(st, tmp, hidden=False)
        return [f"stages {', '.join(st.number for st in released)}: stubs, notebooks (outputs cleared), "
                f"visible tests",
                "solutions given: " + (", ".join(sorted(given)) or "none") + " (and the shared modules)",
                f"make install: the course with the extras {extras} (what stages "
                f"{released[0].number}-{last.number} need)",
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


# ---- the learner's README and Makefile -----------------------------------------------------

def learner_extras(last: manifest.Stage) -> str:
    return ",".join(extra for first, extra in EXTRAS_FROM if int(first) <= int(last.number))


def learner_makefile(extras: str) -> str:
    return f"""# The learner's commands (written by `course release`):
#   make install   create .venv and install the course with what these stages need
#   make demo      run every stage's demo (the reference where it is here, else your code)
#   make status    your progress: `course status`
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
EXTRAS ?= {extras}

.PHONY: install demo status

$(BIN)/.installed: pyproject.toml
\t$(PYTHON) -m venv $(VENV)
\t$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
\ttouch $@

install: $(BIN)/.installed

demo: $(BIN)/.installed
\t$(BIN)/course demo

status: $(BIN)/.installed
\t$(BIN)/course status
"""


def _stage_rows(stages: list[manifest.Stage]) -> list[str]:
    """The maintainer README's table rows of these stages (what each builds)."""
    try:
        text = (root() / "README.md").read_text(encoding="utf-8")
    except OSError:
        text = ""
    rows = []
    for st in stages:
        row = next((line for line in text.splitlines() if line.startswith(f"| [{st.folder}](")), None)
        if row is None:
            row = f"| [{st.folder}]({st.folder}/) | {st.title} |"
        else:  # drop the maintainers' status column
            cells = row.strip().strip("|").split(" | ")
            row = f"| {cells[0].strip()} | {cells[1].strip()} |"
        rows.append(row)
    return rows


def learner_readme(released: list[manifest.Stage], last: manifest.Stage, extras: str) -> str:
    """The README of a learner's release: only the released stages, only commands that
    work here (a course-level test runs every command of its first code block)."""
    ex = last.exercises[0]
    rng = released[0].number if len(released) == 1 else f"{released[0].number}-{last.number}"
    given = [st for st in released if st is not last]
    lines = [
        "# AI Engineering from Scratch",
        "",
        f"Your repository for stage{'s' if len(released) > 1 else ''} {rng} of the course "
        f"({len(released)} of {len(manifest.STAGES)}). You write each stage's package yourself, "
        "exercise by exercise, and measure it against the tools people use in production.",
        "",
        "| stage | you build |",
        "| --- | --- |",
        *_stage_rows(released),
        "",
        "## Working through a stage",
        "",
        f"Set up once (needs `python3` 3.10 or newer and `make`; installs the course and what "
        f"these stages need, the extras `{extras}`, into `.venv/`), then open the lesson "
        f"`{last.notebook}` in Jupyter (`jupyter lab {last.notebook}`) and work through it in order. "
        f"Each exercise N.M is a hole in `{last.folder}/{last.module}/` that raises "
        "`NotImplementedError(\"Exercise N.M ...\")`; the header of each file lists its holes, "
        "their lines and the commands that check them.",
        "",
        "```bash",
        "make install && source .venv/bin/activate",
        "course status                      # the stages here, your points, the next exercise",
        f"course check {ex.id}                   # exercise {ex.id}'s tests alone: one line, the failure that says most",
        f"course hint {ex.id}                    # stuck? the next hint (the hints you use are recorded)",
        f"course check {last.number}                    # the whole stage, one line per exercise",
        f"pytest {last.folder} --exercise {ex.id}   # exercise {ex.id}'s tests with full tracebacks",
        f"course demo --stages {last.number}            # the stage's demo on your code (or what it still needs)",
        "```",
        "",
        f"When a stage is done, `python {last.folder}/bench.py` measures your code against "
        "baselines and real peers.",
        "",
    ]
    if given:
        lines += [
            "The reference solutions of the earlier stages "
            f"({', '.join(st.number for st in given)}) are in `solutions/`: later stages build on them, "
            "so being stuck on one stage never blocks the next. Your instructor grades the files of "
            "your stage package (`NN_stage/<module>/`) with held-out tests as well as these.",
            "",
        ]
    else:
        lines += ["Your instructor grades the files of your stage package (`NN_stage/<module>/`) with "
                  "held-out tests as well as these.", ""]
    return "\n".join(lines)
