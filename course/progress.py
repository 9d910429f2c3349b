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
`.course/progress.json` under the course root: per exercise, the outcome of each of its
tests and the hash of the module they ran against. A run of some of the tests (`pytest
-k ...`) updates those tests and keeps the others, as long as the module did not change.
Tests of given code are recorded per stage, apart.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from course import feedback, layout, manifest
from course.loader import root

STATES = ("done", "partial", "failing", "blocked", "started", "TODO", "error", "missing")
_KEEP = ("nodeid", "exercise", "points", "given", "gpu", "outcome", "todo", "message", "skip_reason")
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


def _stage_of_nodeid(nodeid: str) -> manifest.Stage | None:
    try:
        return manifest.stage(nodeid.replace("\\", "/").split("/", 1)[0])
    except KeyError:
        return None


def record(results: list[dict]) -> None:
    """Merge one run's per-test results into the progress file."""
    by_ex: dict[str, list[dict]] = {}
    given: dict[str, list[dict]] = {}
    for r in results:
        if "/hidden_tests/" in str(r.get("nodeid", "")).replace("\\", "/"):
            continue  # an instructor's tests: graded by `course grade`, not progress
        if r.get("exercise"):
            by_ex.setdefault(r["exercise"], []).append(r)
        elif r.get("given"):
            st = _stage_of_nodeid(r.get("nodeid", ""))
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
        tests = {t["nodeid"]: t for t in old.get("tests", [])} if old.get("module_hash") == h else {}
        for r in rs:
            tests[r["nodeid"]] = {k: r.get(k) for k in _KEEP}
        ts = list(tests.values())
        failed = [t for t in ts if t["outcome"] == "failed"]
        pick = feedback.pick_failure(ts, ex_id)
        data[ex_id] = {
            "state": "failing" if failed else "done",
            "passed": sum(t["outcome"] == "passed" for t in ts),
            "total": len(ts),
            "message": (pick or {}).get("message", "") if failed else "",
            "module_hash": h,
            "time": time.time(),
            "tests": ts,
        }
    g = data.get(GIVEN_KEY) if isinstance(data.get(GIVEN_KEY), dict) else {}
    for number, rs in given.items():
        g[number] = {k: sum(r["outcome"] == k for r in rs) for k in ("passed", "failed", "skipped")}
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


def _stub_pattern(ex_id: str) -> re.Pattern:
    return re.compile(r"raise\s+NotImplementedError\(\s*['\"]Exercise " + re.escape(ex_id) + r":")


def status() -> list[ExerciseStatus]:
    """Every exercise's state, points and blockers, from the saved results (no test runs)."""
    data = _load()
    out: list[ExerciseStatus] = []
    tests_of: dict[str, list[dict]] = {}
    for st in manifest.STAGES:
        text = package_text(st)
        h = package_hash(st)
        stage_tests = [t for ex in st.exercises for t in (data.get(ex.id) or {}).get("tests", [])]
        graded = feedback.scores(st, stage_tests) if stage_tests else {}
        for ex in st.exercises:
            rec = data.get(ex.id) if isinstance(data.get(ex.id), dict) else None
            tests_of[ex.id] = (rec or {}).get("tests", [])
            score, state, out_of = graded.get(ex.id, (0.0, "TODO", ex.points))
            if rec is not None and "tests" not in rec:  # written by an older course version
                rec = None
            if text is None:
                out.append(ExerciseStatus(st, ex, "missing", f"{st.folder}/{st.module}/ not found"))
            elif rec and rec.get("module_hash") == h:
                failed = [t for t in rec["tests"] if t["outcome"] == "failed"]
                if failed and all(feedback.todo_of(t) not in (None, ex.id) for t in failed):
                    state = "blocked"
                out.append(ExerciseStatus(st, ex, state, rec.get("message", ""), score, out_of))
            elif _stub_pattern(ex.id).search(text) and not (rec and score > 0):
                out.append(ExerciseStatus(st, ex, "TODO"))
            else:
                out.append(ExerciseStatus(st, ex, "started", f"changed since the last run: "
                                          f"`course check {st.number}`", score if rec else 0.0))
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
