"""The learner's progress: what `course status` shows, computed in milliseconds.

An exercise is
  - TODO     while the learner's module still raises its stub's NotImplementedError and no
             run of the module as it is now says otherwise,
  - done, partial, failing, blocked (and TODO)
             as the latest recorded run of the module as it is now graded it (see
             `course.feedback`: the same scoring and words as `course check`),
  - started  when its code changed since its latest recorded run (its points are that
             run's until the next one).

Every pytest run in student mode records its results (see the pytest plugin) in
`.course/progress.json` under the course root: per exercise, each of its tests' result
(`course.results.TestResult.to_dict()`) and the hash of the code they ran against: the
exercise's own functions, those of the exercises it requires, and the package's shared code
(`exercise_hashes`), so an edit to one exercise leaves the others as recorded. A run
of some of the tests (`pytest -k ...`) updates those tests and keeps the others, as long as
its code did not change. Tests of given code are recorded per stage, apart. States and
points come from `course.grading.score_exercise`, the rule of `course grade`. What an older
version wrote and this one cannot read (an entry without tests, a test without an id) is
left out, as if never run.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from course import feedback, layout, manifest
from course.loader import root
from course.results import TestResult, as_results, has_hole
from course.scoring import score_exercise

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


# ---- per exercise: the code it touches ----------------------------------------------------
# An exercise's code is the functions (or classes) holding its marked regions, found in the
# reference (its `# BEGIN SOLUTION N.M` markers) where this repository has it, else in the
# learner's files while its holes are there, and remembered in the progress file (REGIONS_KEY)
# for when they are filled. Its key hashes that code, the code of the exercises it requires,
# and the package's shared code (everything outside any exercise's functions), so an edit
# to 3.9's function leaves 3.1-3.8 as they were recorded. A region found nowhere falls back
# to the whole file (or the whole package), which can only say "changed" too often.

REGIONS_KEY = "_regions"  # {stage number: {exercise id: [[file name, qualname], ...]}}
_HOLE = re.compile(r"raise\s+NotImplementedError\(\s*['\"]Exercise (\d+\.\d+):")


def _scopes(source: str) -> list[tuple[int, int, str]]:
    """(first line, last line, qualname) of every function and class, outer before inner."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out: list[tuple[int, int, str]] = []

    def walk(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                q = f"{prefix}{child.name}"
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append((first, child.end_lineno or child.lineno, q))
                walk(child, q + ".")

    walk(tree, "")
    return out


def _scope_at(scopes, line: int) -> str:
    """The innermost function or class holding `line`, or "" (module level)."""
    best = ""
    for first, last, q in scopes:
        if first <= line <= last:
            best = q  # outer ones come first: the last match is the innermost
    return best


def _found_regions(st: manifest.Stage) -> dict[str, set[tuple[str, str]]]:
    """{exercise id: {(file name, qualname)}} from the reference's markers and the learner's holes."""
    from course import stubs

    out: dict[str, set[tuple[str, str]]] = {}
    for path in layout.solution_files(st):
        try:
            src = path.read_text(encoding="utf-8")
            regs = stubs.regions(src, str(path))
        except (OSError, ValueError):
            continue
        scopes = _scopes(src)
        for r in regs:
            out.setdefault(r.exercise, set()).add((path.name, _scope_at(scopes, r.begin)))
    for path in layout.stub_files(st):
        try:
            src = path.read_text(encoding="utf-8")
        except OSError:
            continue
        scopes = None
        for n, line in enumerate(src.splitlines(), 1):
            m = _HOLE.search(line)
            if m:
                scopes = scopes if scopes is not None else _scopes(src)
                out.setdefault(m.group(1), set()).add((path.name, _scope_at(scopes, n)))
    return out


def exercise_regions(st: manifest.Stage, data: dict | None = None) -> dict[str, list[tuple[str, str]]]:
    """Where each exercise of the stage has its code: [(file name, qualname)] ("" is the
    whole file); found now or remembered from an earlier look (see above)."""
    data = _load() if data is None else data
    saved = data.get(REGIONS_KEY) if isinstance(data.get(REGIONS_KEY), dict) else {}
    mine = saved.get(st.number) if isinstance(saved.get(st.number), dict) else {}
    out: dict[str, set[tuple[str, str]]] = {}
    for ex_id, places in mine.items():
        if isinstance(places, list):
            out[ex_id] = {(str(f), str(q)) for f, q in (x for x in places if isinstance(x, list) and len(x) == 2)}
    for ex_id, places in _found_regions(st).items():
        out.setdefault(ex_id, set()).update(places)
    return {k: sorted(v) for k, v in out.items()}


def _remember_regions(data: dict, st: manifest.Stage, regions: dict[str, list[tuple[str, str]]]) -> None:
    saved = data.get(REGIONS_KEY) if isinstance(data.get(REGIONS_KEY), dict) else {}
    saved[st.number] = {k: [list(x) for x in v] for k, v in regions.items()}
    data[REGIONS_KEY] = saved


def _segments(st: manifest.Stage) -> tuple[dict[tuple[str, str], str], dict[str, str], dict[str, list]]:
    """({(file, qualname): its source}, {file: its whole text}, {file: its scopes})."""
    texts: dict[str, str] = {}
    for path in layout.stub_files(st):
        try:
            texts[path.name] = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            texts[path.name] = "\0missing"
    scopes = {name: _scopes(text) for name, text in texts.items()}
    segs: dict[tuple[str, str], str] = {}
    for name, text in texts.items():
        lines = text.splitlines()
        for first, last, q in scopes[name]:
            segs[(name, q)] = "\n".join(lines[first - 1:last])
    return segs, texts, scopes


def exercise_hashes(st: manifest.Stage, data: dict | None = None) -> dict[str, str] | None:
    """{exercise id: a hash of the code its results depend on} (see above); None without
    the learner's package."""
    if not layout.stub_entry(st).is_file():
        return None
    regions = exercise_regions(st, data)
    segs, texts, _ = _segments(st)
    owned = {place for places in regions.values() for place in places if place[1]}
    shared = hashlib.sha256()
    for name, text in sorted(texts.items()):
        lines = text.splitlines()
        drop = set()
        for (f, q) in owned:
            if f == name and (f, q) in segs:
                first = next((a for a, b, qq in _scopes_cache(texts, name) if qq == q), None)
                if first is not None:
                    last = next(b for a, b, qq in _scopes_cache(texts, name) if qq == q)
                    drop.update(range(first, last + 1))
        kept = "\n".join(ln for i, ln in enumerate(lines, 1) if i not in drop)
        shared.update(name.encode() + b"\0" + kept.encode() + b"\0")
    shared_hex = shared.hexdigest()
    out = {}
    for ex in st.exercises:
        h = hashlib.sha256(shared_hex.encode())
        try:
            deps = [ex.id] + [r for r in feedback.requires_closure(ex.id) if manifest.stage_of(r) is st]
        except KeyError:
            deps = [ex.id]
        for dep in deps:
            places = regions.get(dep) or [(name, "") for name in texts]  # not found: the whole package
            for f, q in places:
                h.update(f"{dep}\0{f}\0{q}\0".encode())
                h.update((segs.get((f, q), "\0missing") if q else texts.get(f, "\0missing")).encode())
        out[ex.id] = h.hexdigest()[:16]
    return out


_SCOPES: dict[int, list] = {}


def _scopes_cache(texts: dict[str, str], name: str) -> list:
    key = hash(texts[name])
    if key not in _SCOPES:
        _SCOPES[key] = _scopes(texts[name])
    return _SCOPES[key]


def exercise_at(st: manifest.Stage, file_name: str, line: int, data: dict | None = None) -> str | None:
    """The exercise whose function holds line `line` of the learner's file `file_name`, if any."""
    path = layout.stub_dir(st) / file_name
    try:
        scopes = _scopes(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    inner = [(a, b, q) for a, b, q in scopes if a <= line <= b]
    if not inner:
        return None
    for _a, _b, q in reversed(inner):  # innermost first
        for ex_id, places in exercise_regions(st, data).items():
            if (file_name, q) in places:
                return ex_id
    return None


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
    ex_hashes: dict[str, dict[str, str] | None] = {}

    def module_hash(st: manifest.Stage) -> str | None:
        if st.number not in hashes:
            hashes[st.number] = package_hash(st)
        return hashes[st.number]

    def code_hash(st: manifest.Stage, ex_id: str) -> str | None:
        if st.number not in ex_hashes:
            _remember_regions(data, st, exercise_regions(st, data))
            ex_hashes[st.number] = exercise_hashes(st, data)
        return (ex_hashes[st.number] or {}).get(ex_id)

    for ex_id, rs in by_ex.items():
        try:
            st = manifest.stage_of(ex_id)
        except KeyError:
            continue
        h = code_hash(st, ex_id)  # this exercise's code (and what it requires), not the package's
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
            "module_hash": h,  # exercise_hashes(): its own code's hash
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
    recorded_done: bool = False  # its latest recorded run had every test passing (even if changed since)

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


def status(stages: list[str] | None = None) -> list[ExerciseStatus]:
    """Every exercise's state, points and blockers, from the saved results (no test runs);
    `stages`: of those stage numbers only (what `course check N.M` needs: less to hash)."""
    data = _load()
    out: list[ExerciseStatus] = []
    tests_of: dict[str, list[TestResult]] = {}
    for st in manifest.STAGES:
        if stages is not None and st.number not in stages:
            continue
        text = package_text(st)
        hashes = exercise_hashes(st, data) if text is not None else None
        for ex in st.exercises:
            h = (hashes or {}).get(ex.id)
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
    for r in out:
        r.recorded_done = bool(tests_of.get(r.exercise.id)) and score_exercise(
            r.exercise.id, r.exercise.points, tests_of[r.exercise.id]).state == "done"
    # "blocked by X" only while X's own recorded result is short of full marks
    states = {r.exercise.id: ("done" if r.recorded_done else r.state) for r in out}
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
