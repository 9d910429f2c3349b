"""Step 7 of grading: an exercise's tests become points and a state, and a stage's results
become its Gradescope entries.

An exercise is worth its manifest points, earned in proportion to its *visible* tests that
pass. A skipped test counts as not passed; a `gpu` test skipped because the machine has no
CUDA is reported and left out of the count (an exercise with only such tests is worth 0
here and says so). An exercise with hidden tests gets a second entry, visible after the due
date, worth its manifest points again, earned in proportion to the *weight* of its hidden
tests that pass; a hidden test weighs its marker's `points=N` (1 if not given).
`score_exercise` is that rule; `course check` and `course status` score with it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from course import manifest
from course.cuda import has_cuda
from course.results import Run, TestResult, as_results


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


def _first_problem(rs: list[TestResult]) -> str:
    for r in rs:
        if r.outcome != "passed":
            msg = r.message or (f"skipped: {r.skip_reason}" if r.outcome == "skipped" else "")
            return f"{r.nodeid.split('::')[-1]}: {msg}"
    return ""


def not_counted(r: TestResult) -> bool:
    """A gpu test skipped by the plugin on a machine without CUDA: reported, not counted."""
    return r.outcome == "skipped" and r.gpu and r.skip_reason.endswith("needs CUDA") and not has_cuda()


def _state(ex_id: str, counted: list[TestResult], npass: int) -> str:
    failed = [r for r in counted if r.outcome == "failed"]
    if npass == len(counted):
        return "done"
    if failed and all(r.todo_id not in (None, ex_id) for r in failed):
        return "blocked"
    if not npass and any(r.todo_id for r in counted):
        return "TODO"
    return "partial" if npass else "failing"


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
    counted = [r for r in rs if not not_counted(r)]
    uncounted = len(rs) - len(counted)
    if not counted:
        return Score("no-gpu", 0.0, 0, uncounted=uncounted)
    weights = [r.points if weighted and r.points and r.points > 0 else 1.0 for r in counted]
    passed = [r.outcome == "passed" for r in counted]
    state = _state(ex_id, counted, sum(passed))
    frac = sum(w for w, ok in zip(weights, passed) if ok) / sum(weights)
    return Score(state, points * frac, points, sum(passed), len(counted),
                 sum(r.outcome == "skipped" for r in counted), uncounted,
                 "" if state == "done" else _first_problem(counted))


def _visible_output(s: Score, errors: list[str]) -> str:
    if s.state == "error":
        return f"ERROR: {errors[0] if errors else 'no test of this exercise ran'}"
    if s.state == "no-gpu":
        return f"not graded here: all {s.uncounted} test(s) need CUDA and this machine has none"
    gpu_note = f"; {s.uncounted} gpu test(s) not counted (no CUDA)" if s.uncounted else ""
    out = f"{s.passed}/{s.counted} tests passed"
    if s.state == "done":
        return out + gpu_note
    skipped = f" ({s.skipped} skipped, counted as not passed)" if s.skipped else ""
    return out + f"{skipped}{gpu_note}. First problem: {s.problem}"


def _by_exercise(st: manifest.Stage, results: list[TestResult], hidden: bool) -> dict[str, list[TestResult]]:
    out: dict[str, list[TestResult]] = {e.id: [] for e in st.exercises}
    for r in results:
        if r.exercise in out and r.hidden == hidden:
            out[r.exercise].append(r)
    return out


def grade_stage(st: manifest.Stage, run: Run, with_hidden: bool = False) -> list[Entry]:
    """Entries of one stage from a run: one per exercise (visible tests), and with
    `with_hidden` one per exercise that has hidden tests."""
    results = run.in_order()
    vis = _by_exercise(st, results, hidden=False)
    entries = []
    for ex in st.exercises:
        s = score_exercise(ex.id, ex.points, vis[ex.id])
        entries.append(Entry(f"{ex.id} {ex.title}", s.points, s.out_of, _visible_output(s, run.errors),
                             stage=st.number, exercise=ex.id, state=s.state))
    if not with_hidden:
        return entries
    hid = _by_exercise(st, results, hidden=True)
    for ex in st.exercises:
        s = score_exercise(ex.id, ex.points, hid[ex.id], weighted=True)
        if s.state in ("error", "no-gpu"):
            continue
        out = f"{s.passed}/{s.counted} hidden tests passed" + (f". First problem: {s.problem}" if s.problem else "")
        entries.append(Entry(f"{ex.id} {ex.title} (hidden tests)", s.points, s.out_of, out,
                             visibility="after_due_date", stage=st.number, exercise=ex.id, state=s.state))
    return entries
