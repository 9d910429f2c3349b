"""The course's pytest plugin (registered through the `pytest11` entry point).

- `--impl student|solution`: which implementation `course.load` returns (default: the
  environment's `COURSE_IMPL`, else `student`).
- markers: `exercise("1.3")` (a graded test of one exercise), `given` (a test of given
  code), `gpu` (needs CUDA; skipped without it).
- a learner's `NotImplementedError("Exercise 1.3: ...")` is reported as one line,
  `TODO: Exercise 1.3: ...`, instead of a traceback.
- fixture `one_thread`: torch on one thread for a module's tests (restored afterwards).
  Stages whose tests run thousands of tiny matrix products use it from their conftest:
  a second thread only adds synchronisation there, or waiting for a core on a busy machine.
- `--course-results FILE`: write every test's outcome, exercise and first failure line as
  JSON (used by `course check`, `course grade` and `course status`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from course import loader

_RESULTS_KEY = pytest.StashKey[list]()
_ERRORS_KEY = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("course")
    g.addoption("--impl", choices=loader.IMPLS, default=None,
                help="test the learner's stubs (student) or the reference solutions (solution)")
    g.addoption("--course-results", default=None, metavar="FILE",
                help="write per-test outcomes with their exercise ids to FILE as JSON")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "exercise(id): a graded test of exercise `id` (\"stage.number\")")
    config.addinivalue_line("markers", "given: a test of given code (not graded)")
    config.addinivalue_line("markers", "gpu: needs CUDA; skipped without it")
    impl = config.getoption("--impl", None)
    if impl:
        loader.set_impl(impl)
    config.stash[_RESULTS_KEY] = []
    config.stash[_ERRORS_KEY] = []


def pytest_report_header(config: pytest.Config) -> str:
    return f"course: impl={loader.current_impl()} root={loader.root()}"


def _in_stage_tests(item: pytest.Item) -> bool:
    """Is this test one of the course's own stage tests (NN_stage/tests/...)?"""
    try:
        rel = Path(str(item.path)).resolve().relative_to(loader.root())
    except ValueError:
        return False
    return len(rel.parts) >= 3 and rel.parts[0][:2].isdigit() and rel.parts[1] == "tests"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from course import manifest

    for item in items:
        ex = exercise_of(item)
        if ex is not None:
            try:
                manifest.exercise(ex)
            except KeyError:
                raise pytest.UsageError(f"{item.nodeid}: exercise {ex!r} is not in course/manifest.py") from None
        elif _in_stage_tests(item) and item.get_closest_marker("given") is None:
            raise pytest.UsageError(
                f"{item.nodeid}: a stage test needs @pytest.mark.exercise(\"N.M\") or @pytest.mark.given")
    has_cuda = None
    for item in items:
        if item.get_closest_marker("gpu") is None:
            continue
        if has_cuda is None:
            try:
                import torch

                has_cuda = torch.cuda.is_available()
            except Exception:
                has_cuda = False
        if not has_cuda:
            item.add_marker(pytest.mark.skip(reason="needs CUDA"))


@pytest.fixture(scope="module")
def one_thread():
    """Run the module's tests with torch on one thread, then put the count back."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def exercise_of(item: pytest.Item) -> str | None:
    m = item.get_closest_marker("exercise")
    if m is None:
        return None
    if not m.args or not isinstance(m.args[0], str):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.exercise needs an id like \"1.3\"")
    return m.args[0]


def _error_line(text: str) -> str:
    """The most telling line of a long error report (the last `E   ...` line)."""
    lines = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    if lines:
        return lines[-1][:300]
    rest = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return rest[-1][:300] if rest else "error"


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        if _current_config is not None:
            _current_config.stash[_ERRORS_KEY].append(
                f"could not collect {report.nodeid}: {_error_line(report.longreprtext)}")


_current_config: pytest.Config | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    global _current_config
    _current_config = session.config


class TodoRepr:
    """A one-line failure report for an unfilled exercise (shown in the summary line too)."""

    def __init__(self, message: str, path: str, lineno: int):
        self.message = message
        self.reprcrash = _Crash(path, lineno, message)

    def toterminal(self, tw) -> None:
        tw.line(self.message, red=True, bold=True)

    def __str__(self) -> str:
        return self.message


class _Crash:
    def __init__(self, path: str, lineno: int, message: str):
        self.path, self.lineno, self.message = path, lineno, message


def _todo_message(excinfo) -> str | None:
    """The stub's message if this failure is an unfilled exercise, else None.

    Looks through chained exceptions and exception groups (Hypothesis raises a group when
    it finds several distinct failures)."""
    todo = [excinfo.value] if excinfo is not None else []
    seen = set()
    while todo:
        exc = todo.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        if isinstance(exc, NotImplementedError) and str(exc).startswith("Exercise "):
            return str(exc)
        todo += [exc.__cause__, exc.__context__, *getattr(exc, "exceptions", ())]
    return None


def _first_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).strip().splitlines()[0][:300] if str(crash.message).strip() else "failed"
    text = str(report.longrepr or "").strip().splitlines()
    return text[-1][:300] if text else report.outcome


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.failed and call.excinfo is not None:
        msg = _todo_message(call.excinfo)
        if msg is not None:
            path, lineno, _ = item.location
            report.longrepr = TodoRepr(f"TODO: {msg}", path, (lineno or 0) + 1)
            report.user_properties.append(("todo", msg))
    if report.when == "call" or (report.when == "setup" and not report.passed):
        try:
            ex = exercise_of(item)
        except pytest.UsageError:
            ex = None
        todo = next((v for k, v in report.user_properties if k == "todo"), None)
        m = item.get_closest_marker("exercise")
        item.config.stash[_RESULTS_KEY].append({
            "nodeid": item.nodeid,
            "exercise": ex,
            "points": (m.kwargs.get("points") if m is not None else None),
            "given": item.get_closest_marker("given") is not None,
            "outcome": report.outcome,  # passed / failed / skipped
            "todo": todo,
            "message": "" if report.passed else (f"TODO: {todo}" if todo else _first_line(report)),
            "duration": round(report.duration, 4),
        })


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("--course-results", None)
    results = session.config.stash.get(_RESULTS_KEY, [])
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({
            "impl": loader.current_impl(),
            "time": time.time(),
            "exitstatus": int(exitstatus),
            "results": results,
            "errors": session.config.stash.get(_ERRORS_KEY, []),
        }, indent=1), encoding="utf-8")
    # Remember the learner's latest results for `course status` (never for the solution runs).
    if loader.current_impl() == "student" and results and not os.environ.get("COURSE_NO_RECORD"):
        try:
            from course.progress import record

            record(results)
        except Exception:  # progress is a convenience; it must never break a test run
            pass
