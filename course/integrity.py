"""Steps 2 and 6 of grading: what is checked around the learner's code, never by running it.

Before anything runs (the parent parses, never runs, learner code): a syntax error in a
graded file is reported with the learner's file and line; a graded file that imports the
graded stage's reference solution is flagged as tampering (`static_checks`).

After the run (`run_problems`): protocol anomalies, canaries that did not end as they must,
collected tests missing from the results, test functions missing from the collection, and
files added to the virtual environment's site-packages during the run each mark the stage
"tampering detected". A test file that did not collect fails every test it marks
(`uncollected_failures`); output that quotes a hidden test's source is withheld (`redact`).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from course import layout, manifest
from course.results import Run, TestResult
from course.workspace import Workspace


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


# ---- before the run: the learner's files, parsed ---------------------------------------------

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


def static_checks(st: manifest.Stage, texts: dict[str, str]) -> tuple[str | None, list[str]]:
    """(the first syntax problem of the graded files, or None; tampering found in them)."""
    for name, text in texts.items():
        problem = syntax_problem(text, layout.stub_rel(st, name))
        if problem:
            return problem, []
    return None, [f"{layout.stub_rel(st, name)}: {why}" for name, text in texts.items()
                  for why in [imports_reference(text, st)] if why]


# ---- after the run: what the run should have been ----------------------------------------------

def site_packages_state() -> dict[str, float]:
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


def site_packages_changes(before: dict[str, float]) -> list[str]:
    """Tampering: files of site-packages added, removed or modified since `before`."""
    after = site_packages_state()
    changed = sorted(set(after) ^ set(before) | {p for p in after if p in before and after[p] != before[p]})
    if not changed:
        return []
    return [f"files in the virtual environment's site-packages changed during the run: "
            f"{', '.join(os.path.basename(c) for c in changed[:3])}"]


def localise(text: str, ws: Path) -> str:
    return text.replace(str(ws) + os.sep, "").replace(str(ws), ".")


def _canary_problems(run: Run, ws: Workspace) -> list[str]:
    out = []
    cf = run.results.get(ws.canary_fail)
    cp = run.results.get(ws.canary_pass)
    collect_errors = bool(run.errors)
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
    return out


def _collection_problems(run: Run, ws: Workspace) -> list[str]:
    """Every marked test function of a file that collected must be in the collection."""
    collected_files: dict[str, set[str]] = {}
    for node in run.collected:
        parts = node.split("::")
        collected_files.setdefault(parts[0], set()).update(p.split("[")[0] for p in parts[1:])
    out = []
    for rel in ws.test_files:
        key = str(rel).replace(os.sep, "/")
        if key not in collected_files:
            continue  # not collected at all: a collection error, scored by uncollected_failures
        missing = set(marked_functions(ws.path / rel)) - collected_files[key]
        if missing:
            out.append(f"tests of {key} were left out of the collection: {sorted(missing)[:3]}")
    return out


def run_problems(run: Run, ws: Workspace) -> list[str]:
    """Tampering the run shows: protocol anomalies, canaries, tests left out of the collection."""
    out = [f"the test process broke the grading protocol: {a}" for a in run.anomalies[:5]]
    if run.collect_failed or run.tampered:  # a tampering run stops early: its canaries never ran
        return out
    return out + (_canary_problems(run, ws) if ws.canary_fail else []) + _collection_problems(run, ws)


def drop_canaries(run: Run, ws: Workspace) -> None:
    """The canaries are the grader's, not the learner's: out of the run before scoring."""
    for c in (ws.canary_fail, ws.canary_pass):
        run.results.pop(c, None)
        run.collected.pop(c, None)


def uncollected_failures(run: Run, ws: Workspace) -> list[TestResult]:
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
                                  message=f"{key} was not collected: {localise(why, ws.path)}"))
    return out


def redact(text: str, hidden_sources: list[str]) -> str:
    """Withhold output that quotes a hidden test's source (learner code can read it)."""
    if not text or not hidden_sources:
        return text
    for src in hidden_sources:
        for line in src.splitlines():
            s = line.strip()
            if len(s) >= 24 and s in text:
                return "(output withheld: it quotes a hidden test's source)"
    return text
