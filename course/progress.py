"""The learner's progress: what `course status` shows, computed in milliseconds.

An exercise is
  - TODO     while the learner's module still raises its stub's NotImplementedError and no
             run of the module as it is now says otherwise,
  - done, partial, failing, blocked (and TODO)
             as the latest recorded run of the module as it is now graded it (see
             `course.feedback`: the same scoring and words as `course check`),
  - started  when the module changed since its latest recorded run (its points are that
             run's until the next one).

Every pytest run in student mode records its results (see the pytest plugin) in
`.course/progress.json` under the course root: per exercise, each of its tests' result
(`course.results.TestResult.to_dict()`) and the hash of the module they ran against. A run
of some of the tests (`pytest -k ...`) updates those tests and keeps the others, as long as
the module did not change. Tests of given code are recorded per stage, apart. States and
points come from `course.grading.score_exercise`, the rule of `course grade`. What an older
version wrote and this one cannot read (an entry without tests, a test without an id) is
left out, as if never run.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from course import feedback, layout, manifest
from course.grading import score_exercise
from course.loader import root
from course.results import TestResult, as_results, has_hole

GIVEN_KEY = "_given"  # {stage number: {"passed": n, "failed": n, "skipped": n, "module_hash": h}}


def progress_file() -> Path:
    return root() / ".course" / "progress.json"


def package_hash(st: manifest.Stage) -> str | None:
    """A hash of the learner's package as it is now (every file, by name); None if absent."""
    h = hashlib.sha256()
    files = layout.stub_files(st)
    if not layout.stub_entry(st).is_file():
        return None
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            data = b"\0missing"
        h.update(path.name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:16]


def package_text(st: manifest.Stage) -> str | None:
    """The learner's files of the stage, concatenated (None if the package is absent)."""
    if not layout.stub_entry(st).is_file():
        return None
    parts = []
    for path in layout.stub_files(st):
        try:
            parts.append(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
    return "\n".join(parts)


def _load() -> dict:
    try:
        data = json.loads(progress_file().read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _saved_tests(rec) -> list[TestResult]:
    """The tests of a saved exercise entry; what does not read as a test result is left out."""
    tests = rec.get("tests") if isinstance(rec, dict) else None
    out = []
    for t in tests if isinstance(tests, list) else []:
        try:
            out.append(TestResult.from_dict(t))
        except ValueError:
            pass
    return out


def _stage_of_nodeid(nodeid: str) -> manifest.Stage | None:
    try:
        return manifest.stage(nodeid.replace("\\", "/").split("/", 1)[0])
    except KeyError:
        return None


def record(results) -> None:
    """Merge one run's per-test results into the progress file."""
    by_ex: dict[str, list[TestResult]] = {}
    given: dict[str, list[TestResult]] = {}
    for r in as_results(results):
        if r.hidden:
            continue  # an instructor's tests: graded by `course grade`, not progress
        if r.exercise:
            by_ex.setdefault(r.exercise, []).append(r)
        elif r.given:
            st = _stage_of_nodeid(r.nodeid)
            if st is not None:
                given.setdefault(st.number, []).append(r)
    if not by_ex and not given:
        return
    data = _load()
    hashes: dict[str, str | None] = {}

    def module_hash(st: manifest.Stage) -> str | None:
        if st.number not in hashes:
            hashes[st.number] = package_hash(st)
        return hashes[st.number]

    for ex_id, rs in by_ex.items():
        try:
            st = manifest.stage_of(ex_id)
        except KeyError:
            continue
        h = module_hash(st)
        old = data.get(ex_id) if isinstance(data.get(ex_id), dict) else {}
        tests = {t.nodeid: t for t in _saved_tests(old)} if old.get("module_hash") == h else {}
        tests.update((r.nodeid, r) for r in rs)
        ts = list(tests.values())
        s = score_exercise(ex_id, manifest.exercise(ex_id).points, ts)
        pick = feedback.pick_failure(ts, ex_id)
        data[ex_id] = {
            "state": s.state,
            "passed": s.passed,
            "total": len(ts),
            "message": pick.message if pick is not None else "",
            "module_hash": h,
            "time": time.time(),
            "tests": [t.to_dict() for t in ts],
        }
    g = data.get(GIVEN_KEY) if isinstance(data.get(GIVEN_KEY), dict) else {}
    for number, rs in given.items():
        g[number] = {k: sum(r.outcome == k for r in rs) for k in ("passed", "failed", "skipped")}
        g[number]["module_hash"] = module_hash(manifest.stage(number))
    if given:
        data[GIVEN_KEY] = g
    _save(data)


def _save(data: dict) -> None:
    path = progress_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{time.time_ns()}.tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    tmp.replace(path)


HINTS_KEY = "_hints"  # {exercise id: how many of its hints the learner has been shown}


def hints_shown(ex_id: str | None = None):
    """How many hints of `ex_id` were shown (`course hint`); without an id, {id: count}."""
    h = _load().get(HINTS_KEY)
    h = {k: v for k, v in h.items() if isinstance(v, int)} if isinstance(h, dict) else {}
    return h if ex_id is None else h.get(ex_id, 0)


def record_hint(ex_id: str, shown: int) -> None:
    data = _load()
    h = data.get(HINTS_KEY) if isinstance(data.get(HINTS_KEY), dict) else {}
    h[ex_id] = max(shown, h.get(ex_id, 0) if isinstance(h.get(ex_id), int) else 0)
    data[HINTS_KEY] = h
    _save(data)


@dataclass
class ExerciseStatus:
    stage: manifest.Stage
    exercise: manifest.Exercise
    state: str
    message: str = ""
    score: float = 0.0  # points earned in the latest recorded run (see course.grading)
    out_of: float | None = None  # points it is graded out of (None: the manifest's)
    blocked_by: list[str] = field(default_factory=list)  # exercises to finish first

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def max_points(self) -> float:
        return self.exercise.points if self.out_of is None else self.out_of

    @property
    def pending(self) -> bool:
        """Still to do here (an exercise graded only on a CUDA machine is not, without one)."""
        return not self.done and self.state != "no-gpu"


def status() -> list[ExerciseStatus]:
    """Every exercise's state, points and blockers, from the saved results (no test runs)."""
    data = _load()
    out: list[ExerciseStatus] = []
    tests_of: dict[str, list[TestResult]] = {}
    for st in manifest.STAGES:
        text = package_text(st)
        h = package_hash(st)
        for ex in st.exercises:
            rec = data.get(ex.id) if isinstance(data.get(ex.id), dict) else None
            if rec is not None and "tests" not in rec:  # written by an older course version
                rec = None
            tests_of[ex.id] = _saved_tests(rec)
            s = score_exercise(ex.id, ex.points, tests_of[ex.id])
            if text is None:
                out.append(ExerciseStatus(st, ex, "missing", f"{st.folder}/{st.module}/ not found"))
            elif rec and rec.get("module_hash") == h:
                out.append(ExerciseStatus(st, ex, s.state, str(rec.get("message") or ""), s.points, s.out_of))
            elif has_hole(text, ex.id) and not (rec and s.points > 0):
                out.append(ExerciseStatus(st, ex, "TODO"))
            else:
                out.append(ExerciseStatus(st, ex, "started", f"changed since the last run: "
                                          f"`course check {st.number}`", s.points if rec else 0.0))
    states = {r.exercise.id: r.state for r in out}
    for r in out:
        if r.pending:
            recorded = tests_of.get(r.exercise.id, []) if r.state not in ("TODO", "started") else []
            r.blocked_by = feedback.blocked_by(r.exercise.id, states, recorded)
    return out


def given(stage_number: str) -> dict | None:
    """The latest recorded outcomes of a stage's given-code tests: {"passed": n, ...}."""
    g = _load().get(GIVEN_KEY) or {}
    rec = g.get(stage_number)
    return rec if isinstance(rec, dict) else None
