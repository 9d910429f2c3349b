"""The learner's progress: what `course status` shows, computed in milliseconds.

An exercise is
  - TODO     while the learner's module still raises its stub's NotImplementedError,
  - done     when its tests all passed in the latest recorded run of that module as it is now,
  - failing  when some of its tests failed in that run,
  - started  when the stub line is gone but no run has been recorded since the file changed.

Every pytest run in student mode records its results (see the pytest plugin) in
`.course/progress.json` under the course root, keyed by the hash of the module it tested.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from course import manifest
from course.loader import root, student_path

STATES = ("done", "failing", "started", "TODO", "missing")


def progress_file() -> Path:
    return root() / ".course" / "progress.json"


def _file_hash(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def _load() -> dict:
    try:
        return json.loads(progress_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def record(results: list[dict]) -> None:
    """Merge one run's per-test results into the progress file."""
    by_ex: dict[str, list[dict]] = {}
    for r in results:
        if r.get("exercise"):
            by_ex.setdefault(r["exercise"], []).append(r)
    if not by_ex:
        return
    data = _load()
    for ex_id, rs in by_ex.items():
        try:
            st = manifest.stage_of(ex_id)
        except KeyError:
            continue
        failed = [r for r in rs if r["outcome"] == "failed"]
        data[ex_id] = {
            "state": "failing" if failed else "done",
            "passed": sum(r["outcome"] == "passed" for r in rs),
            "total": len(rs),
            "message": failed[0]["message"] if failed else "",
            "module_hash": _file_hash(student_path(st.module)),
            "time": time.time(),
        }
    path = progress_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    tmp.replace(path)


@dataclass
class ExerciseStatus:
    stage: manifest.Stage
    exercise: manifest.Exercise
    state: str
    message: str = ""


def _stub_pattern(ex_id: str) -> re.Pattern:
    return re.compile(r"raise\s+NotImplementedError\(\s*['\"]Exercise " + re.escape(ex_id) + r":")


def status() -> list[ExerciseStatus]:
    data = _load()
    out: list[ExerciseStatus] = []
    for st in manifest.STAGES:
        path = student_path(st.module)
        text = path.read_text(encoding="utf-8") if path.exists() else None
        h = _file_hash(path)
        for ex in st.exercises:
            if text is None:
                out.append(ExerciseStatus(st, ex, "missing", f"{path.name} not found"))
            elif _stub_pattern(ex.id).search(text):
                out.append(ExerciseStatus(st, ex, "TODO"))
            else:
                rec = data.get(ex.id)
                if rec and rec.get("module_hash") == h:
                    out.append(ExerciseStatus(st, ex, rec["state"], rec.get("message", "")))
                else:
                    out.append(ExerciseStatus(st, ex, "started", f"run `course check {st.number}`"))
    return out
