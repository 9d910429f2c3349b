"""Step 5 of grading: hidden tests judged on plain data, outside the learner's process.

Every hidden test reports the learner's outputs as plain data (`course.answer`,
`course/answers.py`); the parent compares them with the reference solution's answers to the
same tests, recorded before any learner code runs (`reference_answers`) and kept under the
course's `.course/answers/`. A hidden test passes only if it passed in its process and its
answers match (`judge_answers`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from course import manifest
from course.loader import root
from course.results import HIDDEN_DIR, Run, TestResult
from course.runner import run_tests
from course.sandbox import Sandbox
from course.workspace import build_workspace, child_env
from solutions.fileio import write_text_atomic


@dataclass
class Reference:
    """The reference solution's answers to a stage's hidden tests (`course.answer`)."""

    answers: dict[str, dict[str, dict]] = field(default_factory=dict)  # nodeid -> name -> record
    silent: list[str] = field(default_factory=list)  # hidden tests that passed and reported nothing


def _answers_of(run: Run) -> Reference:
    answers = {n: a for n, a in run.answers.items() if n in run.results and run.results[n].outcome == "passed"}
    silent = sorted(n for n, r in run.results.items()
                    if r.hidden and r.outcome == "passed" and not run.answers.get(n))
    return Reference(answers, silent)


def _answers_key(st: manifest.Stage, hidden_from: Path | None) -> str:
    """A digest of everything the reference answers depend on: the reference solutions, the
    stage folder (its tests), the harness, and the versions of Python, NumPy and PyTorch."""
    h = hashlib.sha256()
    src = root()
    trees = [src / "solutions", src / st.folder, src / "course"]
    if hidden_from is not None:
        trees.append(hidden_from / st.folder / HIDDEN_DIR)
    for tree in trees:
        for p in sorted(tree.rglob("*")) if tree.is_dir() else []:
            if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".ipynb"):
                h.update(str(p.relative_to(tree)).encode() + b"\0" + p.read_bytes() + b"\0")
    for name in ("numpy", "torch", "hypothesis"):
        try:
            h.update(f"{name}={metadata.version(name)};".encode())
        except metadata.PackageNotFoundError:
            pass
    h.update(sys.version.encode())
    return h.hexdigest()[:32]


def _answers_file(st: manifest.Stage, hidden_from: Path | None) -> Path:
    return root() / ".course" / "answers" / f"{st.number}-{_answers_key(st, hidden_from)}.json"


def _save_answers(st: manifest.Stage, hidden_from: Path | None, ref: Reference) -> None:
    """Keep the reference answers for the next grade (best effort: a read-only course recomputes)."""
    try:
        path = _answers_file(st, hidden_from)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps({"answers": ref.answers, "silent": ref.silent}))
    except OSError:
        pass


def reference_answers(st: manifest.Stage, hidden_from: Path | None, *, timeout: float,
                      sandbox: Sandbox) -> Reference:
    """The reference's answers to stage `st`'s hidden tests, from a run of the hidden tests
    against `solutions/` in a fresh workspace that holds no learner file. `course grade`
    takes them for every stage before any learner code runs, and keeps them under the
    course's `.course/answers/`, keyed by `_answers_key`, for the next grade. (Under the
    sandbox learner code runs as another user, who cannot write there; without it learner
    code can write anything the grader's user can, this folder and the grader itself.)"""
    path = _answers_file(st, hidden_from)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Reference(dict(data["answers"]), list(data["silent"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    ws = build_workspace(st, None, hidden_from=hidden_from, canaries=False, withhold=False)
    try:
        hdir = ws.path / st.folder / HIDDEN_DIR
        if not hdir.is_dir():
            return Reference()
        run = run_tests([hdir], "solution", root=ws.path, timeout=timeout, env=child_env(sandbox, "solution"),
                        hidden=True)
    finally:
        ws.remove()
    return own_reference(st, hidden_from, run)


def own_reference(st: manifest.Stage, hidden_from: Path | None, run: Run) -> Reference:
    """The answers of a run of the reference solution (no learner code ran), kept for the next grade."""
    ref = _answers_of(run)
    _save_answers(st, hidden_from, ref)
    return ref


def judge_answers(results: list[TestResult], given: dict[str, dict[str, dict]], reference: Reference) -> None:
    """A hidden test that passed in its own process keeps its pass only if every answer the
    reference gave arrived, as plain data, and matches within the reference's tolerance."""
    from course import answers  # NumPy: only when answers are judged

    for r in results:
        want = reference.answers.get(r.nodeid)
        if not r.hidden or r.outcome != "passed" or not want:
            continue
        got = given.get(r.nodeid, {})
        for name, rec in want.items():
            if name not in got:
                problem = f"it did not report its answer {name!r} (a value that is not plain data, or not reached)"
            else:
                problem = answers.differs(rec["value"], got[name].get("value"), rec.get("rtol", 0.0),
                                          rec.get("atol", 0.0), where=name)
            if problem:
                r.outcome = "failed"
                r.message = f"its reported values differ from the reference solution's: {problem}"
                break
