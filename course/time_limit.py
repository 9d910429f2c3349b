"""The per-test time limit of the course's pytest plugin, enforced for pytest-timeout.

pytest-timeout's `--timeout` (ini `timeout`, a test's `timeout` marker) is enforced here
(its `pytest_timeout_set_timer` hook): an alarm raises `CourseTimeout`, a BaseException that
Hypothesis does not catch and retry, and a faulthandler watchdog ends the process
HARD_GRACE seconds later if the test is stuck inside C code (`sum(itertools.count())`),
printing where it was. The limit scales with the machine: `--timeout` seconds times its
measured slowdown (`course.slowdown.machine_slowdown`), and a time-out says which limit it hit
and how to raise it. `course.pytest_plugin` registers these hooks as its own.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
import time

import pytest

HARD_GRACE = 10.0  # seconds after the time limit before the watchdog ends the process

try:  # the real stderr, saved before pytest captures fd 2: the watchdog writes here
    _REAL_STDERR = os.fdopen(os.dup(2), "w", closefd=True)
except OSError:  # pragma: no cover - no stderr at all
    _REAL_STDERR = None


class CourseTimeout(BaseException):
    """Raised by the per-test alarm. A BaseException, so that neither the learner's
    `except Exception` nor Hypothesis (which catches failures to shrink and replay them)
    can swallow it and run the hanging code again without a timer."""


_in_phase = False  # inside a test's setup, call or teardown (not pytest's own reporting)


_timer: dict = {}  # the running test's timer: start, base limit, slowdown


def _on_alarm(signum, frame):
    from course.slowdown import machine_slowdown, timeout_message

    if not _in_phase:
        # The alarm came while pytest itself was between phases (making or logging a
        # report): an exception there would crash the whole session (INTERNALERROR).
        # Fire again shortly, inside the next phase, or never if the test is done.
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        return
    start, base, slow = _timer["start"], _timer["base"], _timer["slow"]
    now = machine_slowdown()  # the machine may have got busier since the test started
    remaining = start + base * now.factor - time.monotonic()
    if now.factor > slow.factor and remaining > 0.05:
        _timer["slow"] = now
        _arm(remaining)
        return
    raise CourseTimeout(timeout_message(time.monotonic() - start, base, slow))


def _arm(seconds: float) -> None:
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    if _REAL_STDERR is not None:
        try:
            faulthandler.dump_traceback_later(seconds + HARD_GRACE, exit=True, file=_REAL_STDERR)
        except (OSError, ValueError):
            pass


def _in_test_phase():
    global _in_phase
    _in_phase = True
    try:
        return (yield)
    finally:
        _in_phase = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _in_test_phase())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _in_test_phase())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    return (yield from _in_test_phase())


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool:
    """Arm the alarm (a Python-level loop fails this one test) and a watchdog thread in C
    (faulthandler) that ends the process HARD_GRACE s later if the alarm could not be
    delivered (a loop inside C code). The parent of a grading run kills it even then.

    The limit is `--timeout` (ini `timeout`, a test's `timeout` marker) times the machine's
    slowdown (`course.slowdown.machine_slowdown`: CPU speed measured once, load average per
    CPU), re-measured when the alarm fires: correct code on a busy machine is not timed out."""
    from course.slowdown import machine_slowdown

    base = float(settings.timeout)
    slow = machine_slowdown(measure=not _timer)  # the CPU speed once a process, then the load
    _timer.update(start=time.monotonic(), base=base, slow=slow)
    _arm(base * slow.factor)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool:
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    faulthandler.cancel_dump_traceback_later()
    return True
