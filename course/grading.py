"""Grading a learner's stages from a trusted copy, one contained child process at a time.

How `course grade` decides a score (the README's "How an instructor grades" tells the
same story for people), step by step, each step a module:

1. **A trusted copy** (`course.workspace`, `course.submission`). For each stage a fresh
   temporary workspace is built from the instructor's course: `pyproject.toml`, the stage
   folder (visible `tests/`, held-out `hidden_tests/`, conftest files) and `solutions/`
   *without* the graded stage's module and later ones. Only the learner's files of the stage
   package are taken from the submission: the course's files (`NN_stage/<module>/*.py`) and
   any helper module the learner added next to them, each a plain file inside it (links are
   refused). Edits to tests, harness, workflow or solutions in the submission count for
   nothing.
2. **Static checks before running anything** (`course.integrity`; the parent parses, never
   runs, learner code): a syntax error is reported with the learner's file and line; a
   graded file that imports the graded stage's reference solution is flagged as tampering.
3. **Canaries** (`course.workspace`). Two generated tests, named and marked like real
   held-out tests, are written next to the hidden tests: one that must fail, one that must
   pass. Learner code that rewrites reports turns the first into a pass, which the parent sees.
4. **Contained runs** (`course.runner`): per-test events streamed to the parent; a crash
   or a time-out fails one test, named, and the stage resumes in a new process. As root
   the child runs as an unprivileged user with resource limits (`course.sandbox`).
5. **Answers** (`course.reference`). Every hidden test reports the learner's outputs as
   plain data (`course.answer`); the parent compares them with the reference solution's
   answers to the same tests, recorded before any learner code runs. A hidden test passes
   only if it passed in its process and its answers match.
6. **Consistency** (`course.integrity`). Protocol anomalies, canaries, collected tests
   missing from the results, test functions missing from the collection, files added to the
   virtual environment's site-packages during the run: any of them marks the stage
   "tampering detected": 0 points and a line for the instructor (a hidden Gradescope entry
   and stderr).
7. **Scoring** (`course.scoring`). An exercise is worth its manifest points, earned in
   proportion to its *visible* tests that pass, and again, after the due date, in proportion
   to the weight of its hidden tests that pass. A test whose file could not be collected
   counts as failing for the exercises that file marks. `course check` and `course status`
   score with the same rule. The outputs: `course.report`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from course import manifest
from course.integrity import (
    drop_canaries,
    localise,
    marked_functions,
    redact,
    run_problems,
    site_packages_changes,
    site_packages_state,
    static_checks,
    uncollected_failures,
)
from course.loader import root
from course.reference import Reference, judge_answers, own_reference, reference_answers
from course.report import check_writable, console_table, dump_json, gradescope_json, markdown_summary
from course.results import HIDDEN_DIR, Run
from course.runner import run_tests
from course.sandbox import Sandbox
from course.scoring import Entry, Score, grade_stage, score_exercise
from course.submission import graded_texts, hints_used, refused_additions
from course.workspace import Workspace, build_workspace, child_env
from solutions.fileio import write_text_atomic as write_atomic

__all__ = ["DEFAULT_TEST_TIMEOUT", "Entry", "GradeInputError", "Reference", "Run", "Score", "StageGrade",
           "check_writable", "console_table", "dump_json", "gradeable", "grade", "grade_one", "grade_stage",
           "gradescope_json", "judge_answers", "markdown_summary", "marked_functions", "run_pytest",
           "score_exercise", "stage_hidden_dir", "stage_test_dir", "stage_test_paths", "write_atomic"]

DEFAULT_TEST_TIMEOUT = 60  # seconds per test


class GradeInputError(ValueError):
    """A folder option that is not a folder: refused before anything runs (the message names
    the `course grade` option)."""


@dataclass
class StageGrade:
    stage: manifest.Stage
    entries: list[Entry]
    tampering: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---- course grade ---------------------------------------------------------------------------

def grade(stages: list[manifest.Stage], impl: str = "student", hidden: Path | None = None,
          timeout: float = DEFAULT_TEST_TIMEOUT, progress=None, submission: Path | None = None,
          report: list | None = None) -> list[Entry]:
    """Grade `stages` (each once); returns the Gradescope entries. `report` (a list)
    receives the instructor's lines: tampering, notes, what the sandbox could not do.
    Raises GradeInputError, before anything runs, for a `hidden` or `submission` that is
    not a folder."""
    hidden_from, submission = _folders(hidden, submission)
    stages = list({st.number: st for st in stages}.values())
    lines = report if report is not None else []
    say = progress or (lambda message: None)
    sandbox = Sandbox.create()
    if sandbox.note:
        lines.append(f"sandbox: {sandbox.note}")
    try:
        references = _references_first(stages, impl, hidden_from, timeout, sandbox, say)
        entries: list[Entry] = []
        for st in stages:
            entries += _grade_and_report(st, impl, submission, hidden_from, timeout, sandbox,
                                         references.get(st.number), say, lines)
    finally:
        sandbox.close()
    return entries


def _folders(hidden: Path | None, submission: Path | None) -> tuple[Path | None, Path | None]:
    """The hidden-test and submission folders, resolved; GradeInputError if one is not a folder."""
    for option, path in (("--hidden", hidden), ("--submission", submission)):
        if path is not None and not Path(path).is_dir():
            raise GradeInputError(f"{option} {path} is not a folder")
    return (Path(hidden).resolve() if hidden else None), (Path(submission).resolve() if submission else None)


def _references_first(stages, impl, hidden_from, timeout, sandbox, say) -> dict[str, Reference]:
    """Every stage's reference answers (step 5), before any learner code runs."""
    references: dict[str, Reference] = {}
    if impl != "student":  # a run of the reference is its own reference
        return references
    for st in stages:
        if gradeable(st):
            say(f"the reference's answers to stage {st.number}'s hidden tests ...")
            references[st.number] = reference_answers(st, hidden_from, timeout=timeout, sandbox=sandbox)
    return references


def _grade_and_report(st, impl, submission, hidden_from, timeout, sandbox, reference, say, lines) -> list[Entry]:
    """One stage's entries; its notes, hints used and tampering go to the instructor's `lines`."""
    if not gradeable(st):
        lines.append(f"stage {st.number} is planned (no tests yet): not graded")
        return []
    say(f"grading stage {st.number} ({st.folder}) ...")
    g = grade_one(st, impl, submission=submission, hidden_from=hidden_from, timeout=timeout, sandbox=sandbox,
                  reference=reference)
    lines += [f"stage {st.number}: {n}" for n in g.notes]
    used = hints_used(submission or root(), st)
    if used:
        lines.append(f"stage {st.number}: hints used (`course hint`, as the learner's progress file "
                     f"records them): " + ", ".join(f"{k} {v}" for k, v in used.items()))
    if not g.tampering:
        return g.entries
    lines.append(f"TAMPERING DETECTED in stage {st.number}: " + "; ".join(g.tampering))
    return g.entries + [Entry(f"{st.number} tampering detected", 0.0, 0, "; ".join(g.tampering),
                              visibility="hidden", stage=st.number, state="tampering")]


# ---- one stage ----------------------------------------------------------------------------

def grade_one(st: manifest.Stage, impl: str, *, submission: Path | None, hidden_from: Path | None,
              timeout: float, sandbox: Sandbox, reference: Reference | None = None) -> StageGrade:
    """Grade one stage (steps 1-7). `reference`: the reference's answers to its hidden tests
    (taken before any learner code ran; see `course.reference`); with impl "solution" the
    run is its own reference."""
    texts: dict[str, str] = {}
    notes: list[str] = []
    tamper: list[str] = []
    if impl == "student":
        base = submission if submission is not None else root()
        texts, notes = graded_texts(st, base)  # 1
        refused = refused_additions(st, base)
        problem, tamper = static_checks(st, texts)  # 2
        if refused or problem:
            return StageGrade(st, grade_stage(st, Run(errors=refused or [problem])), [], notes)
    ws = build_workspace(st, texts if impl == "student" else None, hidden_from=hidden_from,
                         withhold=impl == "student")  # 1, 3
    try:
        run, found = _contained_run(ws, impl, timeout, sandbox)  # 4, 6
        tamper += found
        entries = _score(st, run, ws, impl, hidden_from, reference, notes)  # 5, 7
    finally:
        ws.remove()
    if tamper:
        for e in entries:
            e.score, e.state = 0.0, "tampering"
            e.output = "tampering detected: this stage scores 0; your instructor has the details"
    return StageGrade(st, entries, tamper, notes)


def _contained_run(ws: Workspace, impl: str, timeout: float, sandbox: Sandbox) -> tuple[Run, list[str]]:
    """The stage's tests run in the workspace, the canaries taken out; and the tampering seen."""
    ws.make_read_only_for_others()
    before = site_packages_state()
    run = run_tests(ws.test_paths(), impl, root=ws.path, timeout=timeout, sandbox=sandbox,
                    env=child_env(sandbox, impl), hidden=True)
    tamper = site_packages_changes(before) + run_problems(run, ws)
    drop_canaries(run, ws)
    return run, tamper


def _score(st: manifest.Stage, run: Run, ws: Workspace, impl: str, hidden_from: Path | None,
           reference: Reference | None, notes: list[str]) -> list[Entry]:
    """Hidden tests judged on their answers, uncollected files failed, output redacted, scored."""
    if impl == "solution":  # no learner code ran: this run is its own, trusted, reference
        reference = own_reference(st, hidden_from, run)
    reference = reference or Reference()
    notes += [f"hidden test {n} reports no value (course.answer): its points rest on in-process asserts"
              for n in reference.silent]
    judge_answers(run.in_order(), run.answers, reference)
    for r in uncollected_failures(run, ws):
        run.results.setdefault(r.nodeid, r)
    for r in run.results.values():
        r.message = redact(r.message, ws.hidden_sources)
    run.errors = [redact(localise(e, ws.path), ws.hidden_sources) for e in run.errors]
    return grade_stage(st, run, with_hidden=True)


# ---- a run of the course as it is (course check, course-level tests) -------------------

def run_pytest(paths: list[str | Path], impl: str, *, timeout: int = DEFAULT_TEST_TIMEOUT,
               extra: list[str] | None = None, hidden: bool = False) -> Run:
    """Run pytest on `paths` in the course as it is (no copy, no sandbox), against `impl`,
    one contained child process at a time (a crash or a time-out fails one test)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("COURSE_NO_RECORD", "1")
    return run_tests(paths, impl, root=root(), timeout=timeout, env=env, hidden=hidden, extra=extra,
                     cache_bytecode=True)


def stage_test_dir(st: manifest.Stage) -> Path:
    return root() / st.folder / "tests"


def stage_hidden_dir(st: manifest.Stage, base: Path | None = None) -> Path:
    return (base or root()) / st.folder / HIDDEN_DIR


def stage_test_paths(st: manifest.Stage, hidden: bool = True) -> list[Path]:
    """The stage's visible tests, and its hidden tests when present and wanted."""
    paths = [stage_test_dir(st)]
    if hidden and stage_hidden_dir(st).is_dir():
        paths.append(stage_hidden_dir(st))
    return paths


def gradeable(st: manifest.Stage) -> bool:
    """A stage with a tests/ folder can be graded (a learner's release has no solution of
    the graded stage; a planned stage has no folder yet)."""
    return (root() / st.folder / "tests").is_dir()


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `course grade`")
