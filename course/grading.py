"""Grading a learner's stages from a trusted copy, one contained child process at a time.

How `course grade` decides a score (the README's "How an instructor grades" tells the
same story for people):

1. **A trusted copy.** For each stage a fresh temporary workspace is built from the
   instructor's course: `pyproject.toml`, the stage folder (visible `tests/`, held-out
   `hidden_tests/`, conftest files) and `solutions/` *without* the graded stage's module
   and later ones. Only the learner's stub files (the files of `NN_stage/<module>/`) are taken from the
   submission (a plain file inside it; links are refused). Edits to tests, harness,
   workflow or solutions in the submission count for nothing.
2. **Static checks before running anything** (the parent parses, never runs, learner
   code): a syntax error is reported with the learner's file and line; a stub that imports
   the graded stage's reference solution is flagged as tampering.
3. **Canaries.** Two generated tests, named and marked like real held-out tests, are
   written next to the hidden tests: one that must fail, one that must pass. Learner code
   that rewrites reports turns the first into a pass, which the parent sees.
4. **Contained runs** (`course.runner`): per-test events streamed to the parent; a crash
   or a time-out fails one test, named, and the stage resumes in a new process. As root
   the child runs as an unprivileged user with resource limits (`course.sandbox`).
5. **Answers.** Every hidden test reports the learner's outputs as plain data
   (`course.answer`, `course/answers.py`); the parent compares them with the reference
   solution's answers to the same tests, recorded before any learner code runs
   (`reference_answers`). A hidden test passes only if it passed in its process and its
   answers match (`judge_answers`).
6. **Consistency.** Protocol anomalies, canaries, collected tests missing from the results,
   test functions missing from the collection, files added to the virtual environment's
   site-packages during the run: any of them marks the stage "tampering detected": 0
   points and a line for the instructor (a hidden Gradescope entry and stderr).
7. **Scoring.** An exercise is worth its manifest points, earned in proportion to its
   *visible* tests that pass. A skipped test counts as not passed; a `gpu` test skipped
   because the machine has no CUDA is reported and left out of the count (an exercise
   with only such tests is worth 0 here and says so). An exercise with hidden tests gets a
   second entry, visible after the due date, worth its manifest points again, earned in
   proportion to the *weight* of its hidden tests that pass; a hidden test weighs its
   marker's `points=N` (1 if not given). A test whose file could not be collected counts
   as failing for the exercises that file marks. `score_exercise` is that rule, and
   `course check` and `course status` score with it too.
"""

from __future__ import annotations

import ast
import json
import os
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from course import layout, manifest
from course.loader import root
from course.results import TestResult, as_results
from course.runner import Run, run_tests
from course.sandbox import Sandbox

DEFAULT_TEST_TIMEOUT = 60  # seconds per test
HIDDEN_DIR = "hidden_tests"
MAX_STUB_BYTES = 4 << 20


# ---- a run of the course as it is (course check, course-level tests) -------------------

@dataclass
class RunResult:
    """One contained pytest run: its tests' results in order and what went wrong around them."""

    results: list[TestResult] = field(default_factory=list)  # TestResults (or their dicts)
    errors: list[str] = field(default_factory=list)  # collection errors, crashes, time-outs
    output: str = ""
    anomalies: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.results = as_results(self.results)

    @classmethod
    def of(cls, run: Run) -> "RunResult":
        return cls(results=run.in_order(), errors=list(run.errors), output=run.output,
                   anomalies=list(run.anomalies))


def run_pytest(paths: list[str | Path], impl: str, *, timeout: int = DEFAULT_TEST_TIMEOUT,
               extra: list[str] | None = None, hidden: bool = False) -> RunResult:
    """Run pytest on `paths` in the course as it is (no copy, no sandbox), against `impl`,
    one contained child process at a time (a crash or a time-out fails one test)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("COURSE_NO_RECORD", "1")
    return RunResult.of(run_tests(paths, impl, root=root(), timeout=timeout, env=env, hidden=hidden, extra=extra,
                                  cache_bytecode=True))


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


# ---- entries ---------------------------------------------------------------------------

@dataclass
class Entry:
    """One Gradescope test entry."""

    name: str
    score: float
    max_score: float
    output: str = ""
    visibility: str = "visible"
    stage: str = ""
    exercise: str = ""
    state: str = ""  # a Score's state (done / partial / ...), or tampering

    def as_gradescope(self) -> dict:
        return {"name": self.name, "score": round(self.score, 2), "max_score": self.max_score,
                "output": self.output, "visibility": self.visibility}


def _first_problem(rs: list[TestResult]) -> str:
    for r in rs:
        if r.outcome != "passed":
            msg = r.message or (f"skipped: {r.skip_reason}" if r.outcome == "skipped" else "")
            return f"{r.nodeid.split('::')[-1]}: {msg}"
    return ""


_HAS_CUDA: bool | None = None


def _machine_has_cuda() -> bool:
    global _HAS_CUDA
    if _HAS_CUDA is None:
        try:
            import torch

            _HAS_CUDA = bool(torch.cuda.is_available())
        except Exception:
            _HAS_CUDA = False
    return _HAS_CUDA


def _not_counted(r: TestResult) -> bool:
    """A gpu test skipped by the plugin on a machine without CUDA: reported, not counted."""
    return r.outcome == "skipped" and r.gpu and r.skip_reason.endswith("needs CUDA") and not _machine_has_cuda()


@dataclass
class Score:
    """One exercise's tests, scored (see `score_exercise`)."""

    state: str  # done / partial / failing / blocked / TODO / no-gpu / error
    points: float  # earned
    out_of: float  # what it is graded out of (0 when no test could count here)
    passed: int = 0
    counted: int = 0  # tests in the count (a skipped one counts, as not passed)
    skipped: int = 0
    uncounted: int = 0  # gpu tests skipped on a machine without CUDA
    problem: str = ""  # `test_name: message` of the first test in the count that did not pass


def score_exercise(ex_id: str, points: float, results, weighted: bool = False) -> Score:
    """The one scoring rule of `course check`, `course status` and `course grade`.

    Of the exercise's tests, a gpu test skipped without CUDA is left out of the count (all
    of them: "no-gpu", graded out of 0); no test at all is an "error". The exercise earns
    `points` times the share of the counted tests that passed (a skipped test counts as not
    passed), by number, or with `weighted` by each test's `points=N` (1 if not given). Its
    state: "done" when every counted test passed; else "blocked" when every failure stops
    at another exercise's TODO; "TODO" when none passed and one stops at a TODO; else
    "partial" or "failing"."""
    rs = as_results(results)
    if not rs:
        return Score("error", 0.0, points)
    counted = [r for r in rs if not _not_counted(r)]
    uncounted = len(rs) - len(counted)
    if not counted:
        return Score("no-gpu", 0.0, 0, uncounted=uncounted)
    weights = [r.points if weighted and r.points and r.points > 0 else 1.0 for r in counted]
    passed = [r.outcome == "passed" for r in counted]
    npass = sum(passed)
    failed = [r for r in counted if r.outcome == "failed"]
    if npass == len(counted):
        state = "done"
    elif failed and all(r.todo_id not in (None, ex_id) for r in failed):
        state = "blocked"
    elif not npass and any(r.todo_id for r in counted):
        state = "TODO"
    else:
        state = "partial" if npass else "failing"
    frac = sum(w for w, ok in zip(weights, passed) if ok) / sum(weights)
    return Score(state, points * frac, points, npass, len(counted), sum(r.outcome == "skipped" for r in counted),
                 uncounted, "" if state == "done" else _first_problem(counted))


def grade_stage(st: manifest.Stage, run: RunResult, with_hidden: bool = False) -> list[Entry]:
    """Entries of one stage from a run: one per exercise (visible tests), and with
    `with_hidden` one per exercise that has hidden tests."""
    vis: dict[str, list[TestResult]] = {e.id: [] for e in st.exercises}
    hid: dict[str, list[TestResult]] = {e.id: [] for e in st.exercises}
    for r in run.results:
        if r.exercise in vis:
            (hid if r.hidden else vis)[r.exercise].append(r)
    entries = []
    for ex in st.exercises:
        s = score_exercise(ex.id, ex.points, vis[ex.id])
        if s.state == "error":
            out = f"ERROR: {run.errors[0] if run.errors else 'no test of this exercise ran'}"
        elif s.state == "no-gpu":
            out = f"not graded here: all {s.uncounted} test(s) need CUDA and this machine has none"
        else:
            gpu_note = f"; {s.uncounted} gpu test(s) not counted (no CUDA)" if s.uncounted else ""
            out = f"{s.passed}/{s.counted} tests passed"
            if s.state == "done":
                out += gpu_note
            else:
                skipped = f" ({s.skipped} skipped, counted as not passed)" if s.skipped else ""
                out += f"{skipped}{gpu_note}. First problem: {s.problem}"
        entries.append(Entry(f"{ex.id} {ex.title}", s.points, s.out_of, out, stage=st.number, exercise=ex.id,
                             state=s.state))
    if with_hidden:
        for ex in st.exercises:
            s = score_exercise(ex.id, ex.points, hid[ex.id], weighted=True)
            if s.state in ("error", "no-gpu"):
                continue
            out = f"{s.passed}/{s.counted} hidden tests passed" + (f". First problem: {s.problem}" if s.problem else "")
            entries.append(Entry(f"{ex.id} {ex.title} (hidden tests)", s.points, s.out_of, out,
                                 visibility="after_due_date", stage=st.number, exercise=ex.id, state=s.state))
    return entries


# ---- the trusted copy --------------------------------------------------------------------

class SubmissionError(ValueError):
    """A submission that cannot be graded as given (a link, a huge file, not a folder)."""


def read_stubs(submission: Path, st: manifest.Stage) -> tuple[dict[str, str], list[str]]:
    """({file name: the learner's text}, notes) for the files of the stage package (the names
    this course's package has): only plain files inside the submission. A file that is
    missing, a link or unreadable is left out (its stub is graded) with a note."""
    texts: dict[str, str] = {}
    notes: list[str] = []
    for name in layout.file_names(st):
        path = layout.stub_dir(st, submission) / name
        rel = layout.stub_rel(st, name)
        if path.is_symlink() or any(p.is_symlink() for p in path.parents if submission in (p, *p.parents)
                                    and p != submission):
            notes.append(f"{rel} in the submission is a link; only plain files are graded")
            continue
        if not path.exists():
            notes.append(f"{rel} is not in the submission; its stub was graded")
            continue
        if not path.is_file():
            notes.append(f"{rel} in the submission is not a file")
            continue
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError as e:
            notes.append(f"{rel} could not be read: {e.strerror}")
            continue
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_STUB_BYTES + 1)
        if len(data) > MAX_STUB_BYTES:
            notes.append(f"{rel} is larger than {MAX_STUB_BYTES >> 20} MiB")
            continue
        texts[name] = data.decode("utf-8", errors="replace")
    return texts, notes


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


_WORDS = ("shapes", "edge", "seeds", "large", "small", "random", "invariants", "batched", "cases", "dtype",
          "repeat", "order", "mixed", "extra", "bounds", "values", "grid", "sizes", "zero", "sparse")


def _canary_source(st: manifest.Stage, rng: random.Random) -> tuple[str, str, str, str]:
    """(file name, source, name of the must-fail test, name of the must-pass test)."""
    w = rng.sample(_WORDS, 5)
    fname = f"test_{st.module}_{w[0]}_{rng.randrange(10, 99)}.py"
    fail_name, pass_name = f"test_{w[1]}_{w[2]}", f"test_{w[3]}_{w[4]}"
    ex_fail, ex_pass = rng.choice(st.exercises).id, rng.choice(st.exercises).id
    attr = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(10))
    vals = [rng.randrange(-1000, 1000) for _ in range(6)]
    # values no public name of a real module equals: an object that agrees with them all
    # (the "always equal" attack) makes this must-fail canary pass
    probes = ", ".join([repr(rng.uniform(-1e3, 1e3)), repr(rng.randrange(10 ** 6)), repr(attr[::-1]),
                        repr([rng.randrange(100) for _ in range(3)]), "object()"])
    src = (f'"""Held-out checks of stage {st.number}: {w[0]} and {w[3]}."""\n'
           "import pytest\n\nimport course\n\n\n"
           f'@pytest.mark.exercise("{ex_fail}")\n'
           f"def {fail_name}():\n"
           f'    mod = course.load("{st.module}")\n'
           f"    probes = ({probes})\n"
           f"    agree = []\n"
           f"    for name in [n for n in dir(mod) if not n.startswith('_')]:\n"
           f"        for probe in probes:\n"
           f"            try:\n"
           f"                if (getattr(mod, name) == probe) is True:\n"
           f"                    agree.append(name)\n"
           f"            except Exception:\n"
           f"                pass\n"
           f'    assert getattr(mod, "{attr}", None) is not None or agree, "the module has no {attr}"\n\n\n'
           f'@pytest.mark.exercise("{ex_pass}")\n'
           f"def {pass_name}():\n"
           f"    values = {vals!r}\n"
           f"    assert sorted(values) == {sorted(vals)!r}\n")
    return fname, src, fail_name, pass_name


def build_workspace(st: manifest.Stage, stub_texts: dict[str, str] | None, hidden_from: Path | None = None,
                    canaries: bool = True, rng: random.Random | None = None, withhold: bool = True) -> Workspace:
    """A fresh copy of the instructor's course for grading stage `st`."""
    src = root()
    ws = Path(tempfile.mkdtemp(prefix=f"course-grade-{st.number}-"))
    os.chmod(ws, 0o755)
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
    for name, text in (stub_texts or {}).items():
        layout.stub_dir(st, ws).mkdir(parents=True, exist_ok=True)
        (layout.stub_dir(st, ws) / name).write_text(text, encoding="utf-8")
    hdir = ws / st.folder / HIDDEN_DIR
    cf = cp = ""
    if canaries:
        rng = rng or random.SystemRandom()
        hdir.mkdir(exist_ok=True)
        fname, text, fail_name, pass_name = _canary_source(st, rng)
        (hdir / fname).write_text(text, encoding="utf-8")
        rel = f"{st.folder}/{HIDDEN_DIR}/{fname}"
        cf, cp = f"{rel}::{fail_name}", f"{rel}::{pass_name}"
    files = sorted(p.relative_to(ws) for d in ("tests", HIDDEN_DIR) for p in (ws / st.folder / d).rglob("test_*.py")
                   if (ws / st.folder / d).is_dir())
    hidden_sources = [p.read_text(encoding="utf-8", errors="replace") for p in (hdir.rglob("*.py") if hdir.is_dir() else [])
                      if cf.split("::")[0] != str(p.relative_to(ws))]
    return Workspace(ws, st, cf, cp, files, hidden_sources)


def marked_functions(path: Path) -> dict[str, str]:
    """{test function name: exercise id} of a test file, read without running it."""
    out: dict[str, str] = {}
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, OSError, UnicodeDecodeError):
        return out
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            for d in node.decorator_list:
                if (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "exercise"
                        and d.args and isinstance(d.args[0], ast.Constant) and isinstance(d.args[0].value, str)):
                    out[node.name] = d.args[0].value
    return out


# ---- static checks of the learner's file ----------------------------------------------------

def syntax_problem(text: str, rel: str) -> str | None:
    try:
        ast.parse(text, filename=rel)
    except SyntaxError as e:
        lines = text.splitlines()
        # the line from the learner's text, never e.text: Python may read it from another
        # file of the same (relative) name
        line = (lines[e.lineno - 1] if e.lineno and 0 < e.lineno <= len(lines) else "").strip()[:120]
        where = f"{rel}, line {e.lineno}" + (f": {line}" if line else "")
        return f"SyntaxError in your file {where} ({e.msg})"
    except ValueError as e:  # null bytes
        return f"your file {rel} is not valid Python source ({e})"
    return None


def imports_reference(text: str, st: manifest.Stage) -> str | None:
    """A reason if the learner's file reaches for the graded stage's reference solution."""
    withheld = {s.module for s in manifest.STAGES if int(s.number) >= int(st.number)}
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            v = node.value.replace("/", ".").replace("\\", ".")
            names = [v[:-3] if v.endswith(".py") else v]
        for n in names:
            parts = n.split(".")
            for i in range(len(parts) - 1):
                if parts[i] == "solutions" and parts[i + 1] in withheld:
                    return (f"the learner's file imports the reference solution `solutions.{parts[i + 1]}` "
                            f"(line {getattr(node, 'lineno', '?')})")
    return None


# ---- grading ---------------------------------------------------------------------------------

def _site_packages_state() -> dict[str, float]:
    """.pth files and top-level modules in the interpreter's site-packages (a venv) and the
    user's site-packages, with their modification times."""
    import site
    import sysconfig

    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    try:
        dirs.update(site.getsitepackages())
        dirs.add(site.getusersitepackages())  # a .pth there runs in the grader's next start
    except AttributeError:
        pass
    state = {}
    for d in dirs:
        try:
            for name in os.listdir(d):
                if name.endswith((".pth", ".py")):
                    p = os.path.join(d, name)
                    state[p] = os.stat(p).st_mtime
        except OSError:
            pass
    return state


@dataclass
class StageGrade:
    stage: manifest.Stage
    entries: list[Entry]
    tampering: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _child_env(sandbox: Sandbox, impl: str) -> dict:
    keep = ("PATH", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    home = str(sandbox.home)
    env.update(HOME=home, TMPDIR=home, MPLCONFIGDIR=home, MPLBACKEND="Agg", COURSE_IMPL=impl,
               COURSE_NO_RECORD="1", PYTHONUNBUFFERED="1", HYPOTHESIS_STORAGE_DIRECTORY=f"{home}/.hypothesis")
    env.setdefault("PATH", os.defpath)
    return env


def _redact(text: str, hidden_sources: list[str]) -> str:
    """Withhold output that quotes a hidden test's source (learner code can read it)."""
    if not text or not hidden_sources:
        return text
    for src in hidden_sources:
        for line in src.splitlines():
            s = line.strip()
            if len(s) >= 24 and s in text:
                return "(output withheld: it quotes a hidden test's source)"
    return text


def grade_one(st: manifest.Stage, impl: str, *, submission: Path | None, hidden_from: Path | None,
              timeout: float, sandbox: Sandbox, reference: Reference | None = None) -> StageGrade:
    """Grade one stage. `reference`: the reference's answers to its hidden tests (taken
    before any learner code ran; see `reference_answers`); with impl "solution" the run is
    its own reference."""
    notes: list[str] = []
    tamper: list[str] = []
    stub_texts: dict[str, str] = {}
    if impl == "student":
        base = submission if submission is not None else root()
        stub_texts, more = read_stubs(base, st)
        notes += more
        for name in layout.file_names(st):  # what the submission lacks: the course's own stub
            if name not in stub_texts and (layout.stub_dir(st) / name).is_file():
                stub_texts[name] = (layout.stub_dir(st) / name).read_text(encoding="utf-8")
        for name, text in stub_texts.items():
            problem = syntax_problem(text, layout.stub_rel(st, name))
            if problem:
                run = RunResult(errors=[problem])
                return StageGrade(st, grade_stage(st, run, with_hidden=False), [], notes)
        for name, text in stub_texts.items():
            why = imports_reference(text, st)
            if why:
                tamper.append(f"{layout.stub_rel(st, name)}: {why}")
    ws = build_workspace(st, stub_texts if impl == "student" else None, hidden_from=hidden_from,
                         withhold=impl == "student")
    try:
        for p in (ws.path / st.folder).rglob("*"):
            if p.is_dir():
                os.chmod(p, 0o755)
            else:
                os.chmod(p, 0o644)
        before = _site_packages_state()
        paths = [ws.path / st.folder / "tests"]
        if (ws.path / st.folder / HIDDEN_DIR).is_dir():
            paths.append(ws.path / st.folder / HIDDEN_DIR)
        run = run_tests(paths, impl, root=ws.path, timeout=timeout, sandbox=sandbox, env=_child_env(sandbox, impl),
                        hidden=True)
        after = _site_packages_state()
        changed = sorted(set(after) ^ set(before) | {p for p in after if p in before and after[p] != before[p]})
        if changed:
            tamper.append(f"files in the virtual environment's site-packages changed during the run: "
                          f"{', '.join(os.path.basename(c) for c in changed[:3])}")
        tamper += [f"the test process broke the grading protocol: {a}" for a in run.anomalies[:5]]
        tamper += _check_canaries_and_collection(run, ws)
        # canaries are the grader's, not the learner's: drop them before scoring
        for c in (ws.canary_fail, ws.canary_pass):
            run.results.pop(c, None)
            run.collected.pop(c, None)
        if impl == "solution":  # no learner code ran: this run is its own, trusted, reference
            reference = _answers_of(run)
            _save_answers(st, hidden_from, reference)
        reference = reference or Reference()
        notes += [f"hidden test {n} reports no value (course.answer): its points rest on in-process asserts"
                  for n in reference.silent]
        rr = RunResult.of(run)
        judge_answers(rr.results, run.answers, reference)
        rr.results += _uncollected_failures(run, ws)
        for r in rr.results:
            r.message = _redact(r.message, ws.hidden_sources)
        rr.errors = [_redact(_localise(e, ws.path), ws.hidden_sources) for e in rr.errors]
        entries = grade_stage(st, rr, with_hidden=True)
    finally:
        shutil.rmtree(ws.path, ignore_errors=True)
    if tamper:
        for e in entries:
            e.score, e.state = 0.0, "tampering"
            e.output = "tampering detected: this stage scores 0; your instructor has the details"
    return StageGrade(st, entries, tamper, notes)


# ---- hidden tests judged on plain data, outside the learner's process ---------------------

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
    import hashlib
    from importlib import metadata

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
        write_atomic(path, json.dumps({"answers": ref.answers, "silent": ref.silent}))
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
        run = run_tests([hdir], "solution", root=ws.path, timeout=timeout, env=_child_env(sandbox, "solution"),
                        hidden=True)
    finally:
        shutil.rmtree(ws.path, ignore_errors=True)
    ref = _answers_of(run)
    _save_answers(st, hidden_from, ref)
    return ref


def judge_answers(results: list[TestResult], given: dict[str, dict[str, dict]], reference: Reference) -> None:
    """A hidden test that passed in its own process keeps its pass only if every answer the
    reference gave arrived, as plain data, and matches within the reference's tolerance."""
    from course import answers

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


def _localise(text: str, ws: Path) -> str:
    return text.replace(str(ws) + os.sep, "").replace(str(ws), ".")


def _check_canaries_and_collection(run: Run, ws: Workspace) -> list[str]:
    if run.collect_failed or run.tampered:  # a tampering run stops early: its canaries never ran
        return []
    out = []
    cf = run.results.get(ws.canary_fail)
    cp = run.results.get(ws.canary_pass)
    collect_errors = bool(run.errors)
    if ws.canary_fail:
        if cf is None:
            if not collect_errors:
                out.append("a grader's check test was never reported (tests were removed from the run)")
        elif cf.outcome != "failed":
            out.append(f"a grader's check test that must fail was reported {cf.outcome}")
        if cp is None:
            if not collect_errors:
                out.append("a grader's check test was never reported (tests were removed from the run)")
        elif cp.outcome != "passed" and not cp.contained:  # a crash or time-out is contained, not a lie
            out.append(f"a grader's check test that must pass was reported {cp.outcome}: {cp.message[:120]}")
    # every marked test function of a file that collected must be in the collection
    collected_files: dict[str, set[str]] = {}
    for node in run.collected:
        parts = node.split("::")
        collected_files.setdefault(parts[0], set()).update(p.split("[")[0] for p in parts[1:])
    for rel in ws.test_files:
        key = str(rel).replace(os.sep, "/")
        if key not in collected_files:
            continue  # not collected at all: a collection error, scored by _uncollected_failures
        missing = set(marked_functions(ws.path / rel)) - collected_files[key]
        if missing:
            out.append(f"tests of {key} were left out of the collection: {sorted(missing)[:3]}")
    return out


def _uncollected_failures(run: Run, ws: Workspace) -> list[TestResult]:
    """A failing result for every marked test function of a file that did not collect."""
    files = {n.split("::")[0] for n in run.collected}
    out = []
    for rel in ws.test_files:
        key = str(rel).replace(os.sep, "/")
        if key in files or key == ws.canary_fail.split("::")[0]:
            continue
        why = next((e for e in run.errors if key in e), run.errors[0] if run.errors else
                   "no test of it was collected (skipped or stopped at import), so its tests count as not passed")
        for fn, ex in marked_functions(ws.path / rel).items():
            out.append(TestResult(f"{key}::{fn}", exercise=ex, outcome="failed",
                                  message=f"{key} was not collected: {_localise(why, ws.path)}"))
    return out


def grade(stages: list[manifest.Stage], impl: str = "student", hidden: Path | None = None,
          timeout: float = DEFAULT_TEST_TIMEOUT, progress=None, submission: Path | None = None,
          report: list | None = None) -> list[Entry]:
    """Grade `stages`; returns the Gradescope entries. `report` (a list) receives the
    instructor's lines: tampering, notes, what the sandbox could not do."""
    if hidden is not None and not Path(hidden).is_dir():
        raise FileNotFoundError(f"hidden test folder {hidden} does not exist")
    if submission is not None and not Path(submission).is_dir():
        raise FileNotFoundError(f"submission folder {submission} does not exist")
    seen, unique = set(), []
    for st in stages:
        if st.number not in seen:
            seen.add(st.number)
            unique.append(st)
    sandbox = Sandbox.create()
    lines = report if report is not None else []
    if sandbox.note:
        lines.append(f"sandbox: {sandbox.note}")
    entries: list[Entry] = []
    hidden_from = Path(hidden).resolve() if hidden else None
    try:
        references: dict[str, Reference] = {}
        if impl == "student":  # every reference answer before any learner code runs
            for st in unique:
                if gradeable(st):
                    if progress:
                        progress(f"the reference's answers to stage {st.number}'s hidden tests ...")
                    references[st.number] = reference_answers(st, hidden_from, timeout=timeout, sandbox=sandbox)
        for st in unique:
            if not gradeable(st):
                lines.append(f"stage {st.number} is planned (no tests yet): not graded")
                continue
            if progress:
                progress(f"grading stage {st.number} ({st.folder}) ...")
            g = grade_one(st, impl, submission=Path(submission).resolve() if submission else None,
                          hidden_from=hidden_from, timeout=timeout, sandbox=sandbox,
                          reference=references.get(st.number))
            entries += g.entries
            for n in g.notes:
                lines.append(f"stage {st.number}: {n}")
            used = hints_used(Path(submission) if submission else root(), st)
            if used:
                lines.append(f"stage {st.number}: hints used (`course hint`, as the learner's progress file "
                             f"records them): " + ", ".join(f"{k} {v}" for k, v in used.items()))
            if g.tampering:
                lines.append(f"TAMPERING DETECTED in stage {st.number}: " + "; ".join(g.tampering))
                entries.append(Entry(f"{st.number} tampering detected", 0.0, 0,
                                     "; ".join(g.tampering), visibility="hidden", stage=st.number, state="tampering"))
    finally:
        sandbox.close()
    return entries


def hints_used(base: Path, st: manifest.Stage) -> dict[str, int]:
    """{exercise id: hints shown} of a stage, from the learner's `.course/progress.json`
    (read as plain JSON, never run; a missing, odd or huge file is no hints). The learner
    writes that file, so it is information for the instructor, never points."""
    path = base / ".course" / "progress.json"
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_STUB_BYTES:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
        hints = data.get("_hints", {}) if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
    ids = [e.id for e in st.exercises]
    return {k: v for k in ids for v in [hints.get(k)] if isinstance(v, int) and not isinstance(v, bool) and v > 0}


# ---- outputs -----------------------------------------------------------------------------

def gradescope_json(entries: list[Entry]) -> dict:
    score = sum(e.score for e in entries)
    total = sum(e.max_score for e in entries)
    return {"score": round(score, 2),
            "output": f"{score:.1f} / {total:g} points over {len({e.stage for e in entries if e.stage})} stage(s)",
            "visibility": "visible", "stdout_visibility": "hidden",
            "tests": [e.as_gradescope() for e in entries]}


def markdown_summary(entries: list[Entry], show_hidden: bool = False, report: list[str] | None = None) -> str:
    shown = [e for e in entries if show_hidden or e.visibility == "visible"]
    score = sum(e.score for e in shown)
    total = sum(e.max_score for e in shown)
    lines = [f"## Course grade: {score:.1f} / {total:g}", "",
             "| exercise | score | state | notes |", "| --- | ---: | --- | --- |"]
    for e in shown:
        note = e.output.replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| {e.name} | {e.score:.1f} / {e.max_score:g} | {e.state} | {note} |")
    hidden = [e for e in entries if e.visibility == "after_due_date"]
    if hidden and not show_hidden:
        lines += ["", f"{len(hidden)} hidden test(s) are graded and shown after the due date."]
    lines += ["", "Property tests (Hypothesis) ran derandomised: every submission meets the same examples, "
                  "so the same code gets the same grade."]
    if report:
        lines += ["", "### For the instructor", ""] + [f"- {ln}" for ln in report]
    return "\n".join(lines) + "\n"


def console_table(entries: list[Entry], width: int = 80) -> str:
    rows = [(e.name if len(e.name) <= 44 else e.name[:43] + "…", f"{e.score:.1f}/{e.max_score:g}", e.state)
            for e in entries]
    lines = [f"{'exercise':<45} {'score':>10}  state", "-" * min(width, 66)]
    lines += [f"{n:<45} {s:>10}  {st}" for n, s, st in rows]
    score = sum(e.score for e in entries)
    total = sum(e.max_score for e in entries)
    lines += ["-" * min(width, 66), f"{'total':<45} {f'{score:.1f}/{total:g}':>10}"]
    return "\n".join(lines)


def check_writable(path: str | Path) -> str | None:
    """Why `path` cannot be written atomically, or None."""
    p = Path(path)
    if p.is_dir():
        return f"{p} is a folder"
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return f"the folder {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"the folder {parent} is not writable"
    return None


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to a temporary file next to `path`, then rename it into place."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def dump_json(entries: list[Entry]) -> str:
    return json.dumps(gradescope_json(entries), indent=1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `course grade`")
