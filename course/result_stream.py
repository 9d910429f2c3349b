"""Every test's result, assembled from its phases, and the event stream the grading parent
reads (hooks of the course's pytest plugin, which re-exports them).

- Each test's `TestResult` is folded from its setup, call and teardown reports (the first
  failure decides it, else a skip; the durations add up), marked failed if it replaced a
  guarded helper (`course.guard`), and kept in the config's stash in order.
- `--course-events-fd N`: one JSON line per event (collected, start, answer, result, tamper,
  finish) to file descriptor N as it happens; `course grade` and `course check` read it in the
  parent process, which decides and writes the results (see `course.runner`).
- `--course-results FILE`: every result as JSON at the end; the learner's own runs are also
  recorded for `course status` (`course.progress`).
- The closing line of the terminal report: `course: exercises: 0/8 done (...); given code: ...`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from course import answers, loader
from course.failure_report import collect_error_message, first_line
from course.guard import TAMPER_KEY, replaced_helpers
from course.results import META, RAN, TestResult, todo_line

RESULTS_KEY = pytest.StashKey[list]()  # the TestResult of every test that ran, in order
ERRORS_KEY = pytest.StashKey[list]()
_META_KEY = pytest.StashKey[dict]()  # nodeid -> TestResult of a collected test (META only)
_RUNNING_KEY = pytest.StashKey[dict]()  # nodeid -> TestResult being assembled from its phases


def init_stash(config: pytest.Config) -> None:
    """The lists this module appends to, made at `pytest_configure`."""
    config.stash[RESULTS_KEY] = []
    config.stash[ERRORS_KEY] = []
    config.stash[TAMPER_KEY] = []


def exercise_of(item: pytest.Item) -> str | None:
    """The exercise a test grades (its `exercise("N.M")` marker), None for given code."""
    m = item.get_closest_marker("exercise")
    if m is None:
        return None
    if not m.args or not isinstance(m.args[0], str):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.exercise needs an id like \"1.3\"")
    return m.args[0]


_current_config: pytest.Config | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    global _current_config
    _current_config = session.config


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        if _current_config is not None:
            _current_config.stash[ERRORS_KEY].append(collect_error_message(report))


# ---- the event stream read by the grading parent -------------------------------------

_events_fd: int | None = None


def _emit(event: dict) -> None:
    if _events_fd is None:
        return
    data = (json.dumps(event, separators=(",", ":")) + "\n").encode()
    try:
        while data:
            n = os.write(_events_fd, data)
            data = data[n:]
    except OSError:
        pass


def _item_meta(item: pytest.Item) -> TestResult:
    try:
        ex = exercise_of(item)
    except pytest.UsageError:
        ex = None
    m = item.get_closest_marker("exercise")
    return TestResult.from_dict({"nodeid": item.nodeid, "exercise": ex,
                                 "points": (m.kwargs.get("points") if m is not None else None),
                                 "given": item.get_closest_marker("given") is not None,
                                 "gpu": item.get_closest_marker("gpu") is not None})


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    global _events_fd
    metas = [_item_meta(it) for it in session.items]
    session.config.stash[_META_KEY] = {m.nodeid: m for m in metas}
    fd = session.config.getoption("--course-events-fd", None)
    if fd is None:
        return
    _events_fd = fd
    _emit({"ev": "collected", "tests": [m.to_dict(META) for m in metas],
           "errors": list(session.config.stash.get(ERRORS_KEY, []))})
    answers.set_sink(_emit_answer)


_in_test: str | None = None  # the test between its start and finish events


def _emit_answer(record: dict) -> None:
    """`course.answer` under grading: the value, as plain data, for the running test."""
    if _in_test is not None:
        _emit({"ev": "answer", "nodeid": _in_test, **record})


def pytest_runtest_logstart(nodeid: str, location) -> None:
    global _in_test
    _in_test = nodeid
    _emit({"ev": "start", "nodeid": nodeid})


def _meta(nodeid: str) -> TestResult:
    return _current_config.stash.get(_META_KEY, {}).get(nodeid) or TestResult(nodeid)


def _running(nodeid: str) -> TestResult:
    """The result of a running test, assembled phase by phase (it starts as passed)."""
    running = _current_config.stash.setdefault(_RUNNING_KEY, {})
    if nodeid not in running:
        running[nodeid] = replace(_meta(nodeid), outcome="passed")
    return running[nodeid]


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Fold one phase's report (setup, call, teardown) into the test's result: the first
    failure decides it, else a skip; the durations add up."""
    if _current_config is None:
        return
    r = _running(report.nodeid)
    r.duration += report.duration
    todo = next((str(v) for k, v in report.user_properties if k == "todo"), None)
    if report.failed and r.outcome != "failed":
        r.outcome, r.todo = "failed", todo
        r.message = todo_line(todo) if todo else first_line(report)
        if report.when == "teardown":
            r.message = "error in teardown: " + r.message
    elif report.skipped and r.outcome == "passed":
        r.outcome = "skipped"
        lr = report.longrepr
        r.skip_reason = str(lr[2]) if isinstance(lr, tuple) and len(lr) == 3 else str(lr or "")


def pytest_runtest_logfinish(nodeid: str, location) -> None:
    global _in_test
    _in_test = None
    if _current_config is None:
        return
    r = _current_config.stash.get(_RUNNING_KEY, {}).pop(nodeid, None)
    r = r or replace(_meta(nodeid), outcome="failed", message="no report")
    r.duration = round(r.duration, 4)
    swapped = replaced_helpers()
    if swapped:
        _current_config.stash[TAMPER_KEY].append((nodeid, swapped))
        if r.outcome == "passed":
            r = replace(r, outcome="failed", message=f"tampering: {', '.join(swapped[:3])} replaced during the test")
    _current_config.stash[RESULTS_KEY].append(r)
    _emit({"ev": "result", "nodeid": nodeid, **r.to_dict(RAN)})
    if swapped:  # after the result: the runner stops the process at this event, the result already read
        _emit({"ev": "tamper", "nodeid": nodeid, "replaced": swapped[:10]})


# ---- the end of the run ---------------------------------------------------------------

def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """A closing line: `course: exercises: 0/8 done (...); given code: 50 passed`."""
    from course.feedback import terminal_summary

    line = terminal_summary(config.stash.get(RESULTS_KEY, []))
    if line:
        terminalreporter.write_line(f"course: {line}")
    for nodeid, swapped in config.stash.get(TAMPER_KEY, [])[:5]:
        terminalreporter.write_line(f"course: TAMPERING: {', '.join(swapped[:5])} replaced during {nodeid}; "
                                    "the grader scores this stage 0", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _emit({"ev": "finish", "exitstatus": int(exitstatus)})
    path = session.config.getoption("--course-results", None)
    results = session.config.stash.get(RESULTS_KEY, [])
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({
            "impl": loader.current_impl(),
            "time": time.time(),
            "exitstatus": int(exitstatus),
            "results": [r.to_dict() for r in results],
            "errors": session.config.stash.get(ERRORS_KEY, []),
            "tampering": [{"nodeid": n, "replaced": w} for n, w in session.config.stash.get(TAMPER_KEY, [])],
        }, indent=1), encoding="utf-8")
    # Remember the learner's latest results for `course status` (never for the solution runs).
    if (loader.current_impl() == "student" and results and not os.environ.get("COURSE_NO_RECORD")
            and not session.config.stash.get(TAMPER_KEY, [])):
        try:
            from course.progress import record

            record(results)
        except Exception:  # progress is a convenience; it must never break a test run
            pass
