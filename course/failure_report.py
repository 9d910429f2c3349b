"""A failing test's report on one line (hooks of the course's pytest plugin, which re-exports them).

- An unfilled exercise (`NotImplementedError("Exercise 1.3: ...")`, also inside chained
  exceptions and Hypothesis' exception groups) is reported as one line, `TODO: Exercise 1.3:
  ...`, instead of a traceback (`TodoRepr`).
- A test module that cannot be imported because of the learner's module is reported at the
  learner's file and line, not the test's (`pytest_exception_interact`).
- Any other failure gets one informative line for the summary and the results
  (`course.feedback.sharpen_report`, `first_line`).
"""

from __future__ import annotations

import pytest

from course.results import Crash, todo_of_message


def error_line(text: str) -> str:
    """The most telling line of a long error report (the last `E   ...` line)."""
    lines = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    if lines:
        return lines[-1][:300]
    rest = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return rest[-1][:300] if rest else "error"


def collect_error_message(report: pytest.CollectReport) -> str:
    """`NN_stage/module.py:LINE: SyntaxError: ... (while collecting ...)` when the learner's
    module stopped the import (see `pytest_exception_interact`), else the last error line."""
    from course.feedback import LearnerErrorRepr

    if isinstance(report.longrepr, LearnerErrorRepr):
        return f"{report.longrepr.lines[0]} (while collecting {report.nodeid})"
    return f"could not collect {report.nodeid}: {error_line(report.longreprtext)}"


def pytest_exception_interact(node, call: pytest.CallInfo, report) -> None:
    """A test module that cannot be imported because of the learner's module (a syntax or
    import error there) is reported at the learner's file and line, not the test's."""
    if isinstance(report, pytest.CollectReport) and report.failed and call.excinfo is not None:
        from course import feedback

        found = feedback.collect_error(call.excinfo.value)
        if found is not None:
            head, lines = found
            path, _, rest = head.partition(":")
            lineno = int(rest.split(":", 1)[0]) if rest.split(":", 1)[0].isdigit() else 0
            report.longrepr = feedback.LearnerErrorRepr(lines, path, lineno)


class TodoRepr:
    """A one-line failure report for an unfilled exercise (shown in the summary line too)."""

    def __init__(self, message: str, path: str, lineno: int):
        self.message = message
        self.reprcrash = Crash(path, lineno, message)

    def toterminal(self, tw) -> None:
        tw.line(self.message, red=True, bold=True)

    def __str__(self) -> str:
        return self.message


def _todo_message(excinfo) -> str | None:
    """The stub's message if this failure is an unfilled exercise, else None."""
    return todo_of_exception(excinfo.value if excinfo is not None else None)


def todo_of_exception(exc: BaseException | None) -> str | None:
    """The stub's message if `exc` is, or was raised from, an unfilled exercise's
    `NotImplementedError("Exercise N.M: ...")`, else None.

    Looks through chained exceptions and exception groups (Hypothesis raises a group when
    it finds several distinct failures)."""
    todo = [exc]
    seen = set()
    while todo:
        exc = todo.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        if isinstance(exc, NotImplementedError) and todo_of_message(str(exc)) is not None:
            return str(exc)
        todo += [exc.__cause__, exc.__context__, *getattr(exc, "exceptions", ())]
    return None


def first_line(report: pytest.TestReport) -> str:
    """The failure on one line: the exception's type and its first non-empty lines (see
    `course.feedback.summarize`; an `np.testing` message starts with a blank line)."""
    from course.feedback import summarize_text

    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2])  # (path, line, "Skipped: why")
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return summarize_text(str(crash.message)) if str(crash.message).strip() else "failed"
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
            from course import feedback

            report.longrepr = TodoRepr(feedback.todo_line(msg, item.get_closest_marker("exercise")), path,
                                       (lineno or 0) + 1)
            report.user_properties.append(("todo", msg))
        else:  # one informative line for the summary and the results (see course.feedback)
            from course.feedback import sharpen_report

            sharpen_report(report, call.excinfo.value)
