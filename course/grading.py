"""Running a stage's tests in a subprocess, and grading them.

Each stage runs in its own pytest process, so a learner's syntax error, import error or
crash in one stage is reported for that stage while the others are still graded. Every
test has a time limit (pytest-timeout), so an infinite loop fails one test, not the run.

Scoring: an exercise is worth its manifest points, earned in proportion to its tests that
pass (all tests of an exercise passing = full points). An instructor's hidden tests are
extra Gradescope entries worth `@pytest.mark.exercise("1.3", points=N)` points (1 if not
given), visible after the due date.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from course import manifest
from course.loader import root

DEFAULT_TEST_TIMEOUT = 60  # seconds per test
STAGE_TIMEOUT = 20 * 60  # seconds for a whole stage's run, a backstop


@dataclass
class RunResult:
    """One pytest run: per-test results (see the plugin) and what went wrong around them."""

    results: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # collection errors, crashes, time-outs
    output: str = ""
    returncode: int = 0


def run_pytest(paths: list[str | Path], impl: str, *, timeout: int = DEFAULT_TEST_TIMEOUT,
               extra: list[str] | None = None, stage_timeout: int = STAGE_TIMEOUT) -> RunResult:
    """Run pytest on `paths` against `impl` in a subprocess and read back its results."""
    with tempfile.TemporaryDirectory(prefix="course-") as tmp:
        res_file = Path(tmp) / "results.json"
        cmd = [sys.executable, "-m", "pytest", *map(str, paths), f"--impl={impl}",
               f"--course-results={res_file}", f"--timeout={timeout}", "-q", "-rN",
               "--no-header", "-p", "no:cacheprovider", *(extra or [])]
        env = dict(os.environ, COURSE_IMPL=impl, COURSE_ROOT=str(root()), PYTHONUNBUFFERED="1")
        env.setdefault("COURSE_NO_RECORD", "1")
        try:
            proc = subprocess.run(cmd, cwd=root(), env=env, capture_output=True, text=True,
                                  timeout=stage_timeout)
            out, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or "") if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
            return RunResult(errors=[f"the run exceeded {stage_timeout} s and was stopped"], output=out,
                             returncode=-1)
        run = RunResult(output=out, returncode=rc)
        if res_file.exists():
            data = json.loads(res_file.read_text(encoding="utf-8"))
            run.results = data["results"]
            run.errors = data.get("errors", [])
        else:
            tail = "\n".join(out.strip().splitlines()[-6:])
            run.errors.append(f"pytest did not finish (exit {rc}):\n{tail}")
        return run


def stage_test_dir(st: manifest.Stage) -> Path:
    return root() / st.folder / "tests"


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
    state: str = ""  # done / partial / TODO / failing / error

    def as_gradescope(self) -> dict:
        return {"name": self.name, "score": round(self.score, 2), "max_score": self.max_score,
                "output": self.output, "visibility": self.visibility}


def _first_problem(rs: list[dict]) -> str:
    for r in rs:
        if r["outcome"] == "failed":
            return f"{r['nodeid'].split('::')[-1]}: {r['message']}"
    return ""


def grade_stage(st: manifest.Stage, run: RunResult) -> list[Entry]:
    by_ex: dict[str, list[dict]] = {e.id: [] for e in st.exercises}
    for r in run.results:
        if r.get("exercise") in by_ex:
            by_ex[r["exercise"]].append(r)
    entries = []
    for ex in st.exercises:
        rs = by_ex[ex.id]
        name = f"{ex.id} {ex.title}"
        if not rs:
            why = run.errors[0] if run.errors else "no test of this exercise ran"
            entries.append(Entry(name, 0.0, ex.points, f"ERROR: {why}", stage=st.number, exercise=ex.id,
                                 state="error"))
            continue
        passed = sum(r["outcome"] == "passed" for r in rs)
        counted = [r for r in rs if r["outcome"] != "skipped"]
        frac = passed / len(counted) if counted else 1.0
        if frac == 1.0:
            state, out = "done", f"{passed}/{len(counted)} tests passed"
        else:
            todo = any(r.get("todo") for r in rs)
            state = "TODO" if todo and passed == 0 else ("partial" if passed else "failing")
            out = f"{passed}/{len(counted)} tests passed. First problem: {_first_problem(rs)}"
        entries.append(Entry(name, ex.points * frac, ex.points, out, stage=st.number, exercise=ex.id,
                             state=state))
    return entries


def grade_hidden(run: RunResult, stages: list[manifest.Stage]) -> list[Entry]:
    wanted = {e.id for s in stages for e in s.exercises}
    entries = []
    for r in run.results:
        ex = r.get("exercise")
        if ex not in wanted:
            continue
        pts = float(r.get("points") or 1)
        ok = r["outcome"] == "passed"
        entries.append(Entry(f"hidden {ex}: {r['nodeid'].split('::')[-1]}", pts if ok else 0.0, pts,
                             "passed" if ok else r["message"], visibility="after_due_date",
                             stage=manifest.stage_of(ex).number, exercise=ex,
                             state="done" if ok else "failing"))
    for e in run.errors:
        entries.append(Entry("hidden tests: error", 0.0, 0.0, e, visibility="after_due_date", state="error"))
    return entries


def grade(stages: list[manifest.Stage], impl: str = "student", hidden: Path | None = None,
          timeout: int = DEFAULT_TEST_TIMEOUT, progress=None) -> list[Entry]:
    entries: list[Entry] = []
    for st in stages:
        if progress:
            progress(f"grading stage {st.number} ({st.folder}) ...")
        entries += grade_stage(st, run_pytest([stage_test_dir(st)], impl, timeout=timeout))
    if hidden is not None:
        if not Path(hidden).is_dir():
            raise FileNotFoundError(f"hidden test folder {hidden} does not exist")
        if progress:
            progress(f"running hidden tests in {hidden} ...")
        entries += grade_hidden(run_pytest([Path(hidden).resolve()], impl, timeout=timeout), stages)
    return entries


def gradescope_json(entries: list[Entry]) -> dict:
    score = sum(e.score for e in entries)
    total = sum(e.max_score for e in entries)
    return {"score": round(score, 2),
            "output": f"{score:.1f} / {total:g} points over {len({e.stage for e in entries if e.stage})} stage(s)",
            "visibility": "visible", "stdout_visibility": "hidden",
            "tests": [e.as_gradescope() for e in entries]}


def markdown_summary(entries: list[Entry], show_hidden: bool = False) -> str:
    shown = [e for e in entries if show_hidden or e.visibility == "visible"]
    score = sum(e.score for e in shown)
    total = sum(e.max_score for e in shown)
    lines = [f"## Course grade: {score:.1f} / {total:g}", "",
             "| exercise | score | state | notes |", "| --- | ---: | --- | --- |"]
    for e in shown:
        note = e.output.replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| {e.name} | {e.score:.1f} / {e.max_score:g} | {e.state} | {note} |")
    hidden = [e for e in entries if e.visibility != "visible"]
    if hidden and not show_hidden:
        lines += ["", f"{len(hidden)} hidden test(s) are graded and shown after the due date."]
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
