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
- `--course-results FILE`: write every test's result (`course.results.TestResult`: outcome,
  exercise, first failure line, ...) as JSON (kept for tools that read a file after the run).
- `--course-events-fd N`: stream one JSON line per event (collected, start, result,
  finish) to file descriptor N as it happens. `course grade` and `course check` read it
  in the parent process, which decides and writes the results (see `course.runner`).
- hidden tests (`NN_stage/hidden_tests/`) are left out of a plain `pytest NN_stage`; they
  run with `--hidden-tests`, or when named on the command line (`pytest NN_stage/hidden_tests`).
- a per-test time limit that kills: pytest-timeout's `--timeout` (ini `timeout`) is
  enforced by this plugin (its `pytest_timeout_set_timer` hook, in `course.time_limit`): an alarm raises
  `CourseTimeout`, a BaseException that Hypothesis does not catch and retry, and a
  faulthandler watchdog ends the process a few seconds later if the test is stuck inside C
  code (`sum(itertools.count())`), printing where it was. The limit scales with the
  machine: `--timeout` seconds times its measured slowdown (see `course.slowdown`), and a
  time-out says which limit it hit and how to raise it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from course import answers, loader
from course.cuda import has_cuda
from course.guard import GUARD_HOOK, TAMPER_KEY, keep_guarded, replaced_helpers
from course.results import HIDDEN_DIR, META, RAN, Crash, TestResult, todo_line, todo_of_message

# the per-test time limit's hooks are this plugin's: pytest finds a plugin's hooks by name
from course.time_limit import (
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_timeout_cancel_timer,
    pytest_timeout_set_timer,
)

__all__ = ["pytest_runtest_call", "pytest_runtest_setup", "pytest_runtest_teardown", "pytest_timeout_cancel_timer",
           "pytest_timeout_set_timer", "visible_conftest"]  # and the hooks below

_RESULTS_KEY = pytest.StashKey[list]()  # the TestResult of every test that ran, in order
_ERRORS_KEY = pytest.StashKey[list]()
_META_KEY = pytest.StashKey[dict]()  # nodeid -> TestResult of a collected test (META only)
_RUNNING_KEY = pytest.StashKey[dict]()  # nodeid -> TestResult being assembled from its phases


def pytest_addhooks(pluginmanager) -> None:
    """Rewrite the asserts of test files and conftests only, not of every installed package
    that ships a pytest plugin (pytest marks them all: hypothesis, this course, its
    solutions). The test process runs with -B (and learners' machines often cannot write
    site-packages), so nothing rewritten is cached: rewriting hypothesis's hundred modules
    cost seconds of every `course check`. Learner code is loaded by path, never rewritten."""
    if GUARD_HOOK not in sys.meta_path:  # before any conftest can import torch (stage 05's does)
        sys.meta_path.insert(0, GUARD_HOOK)
    hook = getattr(pluginmanager, "rewrite_hook", None)
    must = getattr(hook, "_must_rewrite", None)
    if isinstance(must, set):
        must.difference_update({m for m in must if m.split(".")[0] in _NOT_REWRITTEN})
        cache = getattr(hook, "_marked_for_rewrite_cache", None)
        if isinstance(cache, dict):
            cache.clear()


# packages whose modules pytest would rewrite only because they ship a pytest11 plugin
_NOT_REWRITTEN = ("hypothesis", "_hypothesis_pytestplugin", "course", "solutions", "anyio", "nbval",
                  "pytest_timeout", "xdist", "typeguard", "pytest_asyncio")


def pytest_load_initial_conftests(early_config: pytest.Config, parser, args) -> None:
    """nbval (and with it nbformat, seconds to import) is blocked by pyproject's addopts
    (`-p no:nbval`); a run that asks for notebooks (`--nbval`, `--nbval-lax`) gets it back here,
    before its options are parsed."""
    if not any(str(a).startswith("--nbval") or str(a) in ("--nbdime",) for a in args):
        return
    pm = early_config.pluginmanager
    if pm.get_plugin("nbval") is not None or "no:nbval" in _explicit_plugin_args(early_config):
        return
    pm.unblock("nbval")
    pm.import_plugin("nbval", consider_entry_points=True)


def _explicit_plugin_args(config: pytest.Config) -> list[str]:
    """The `-p X` values given on the command line itself (not through addopts)."""
    args = list(config.invocation_params.args)
    out = [a[2:] for a in args if a.startswith("-p") and len(a) > 2]
    out += [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-p"]
    return out


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("course")
    g.addoption("--impl", choices=loader.IMPLS, default=None,
                help="test the learner's stubs (student) or the reference solutions (solution)")
    g.addoption("--course-results", default=None, metavar="FILE",
                help="write per-test outcomes with their exercise ids to FILE as JSON")
    g.addoption("--course-events-fd", type=int, default=None, metavar="N",
                help="stream per-test events as JSON lines to file descriptor N (used by course grade)")
    g.addoption("--course-done", default=None, metavar="FILE",
                help="deselect the test ids listed in FILE, one a line (a resumed grading run)")
    g.addoption("--exercise", action="append", default=None, metavar="N.M",
                help="run only the tests of this exercise (repeatable): `pytest 06_paged_attention --exercise 6.3`")
    g.addoption("--hidden-tests", action="store_true", default=False,
                help="also collect the stages' hidden_tests/ folders (the grader and `make test` do)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "exercise(id): a graded test of exercise `id` (\"stage.number\")")
    config.addinivalue_line("markers", "given: a test of given code (not graded)")
    config.addinivalue_line("markers", "gpu: needs CUDA; skipped without it")
    impl = config.getoption("--impl", None)
    if impl:
        loader.set_impl(impl)
    config.stash[_RESULTS_KEY] = []
    config.stash[_ERRORS_KEY] = []
    _bound_shrinking(os.environ.get("COURSE_SHRINK_SECONDS"))
    _derandomize(os.environ.get("COURSE_DERANDOMIZE"))
    config.stash[TAMPER_KEY] = []


def _derandomize(flag: str | None) -> None:
    """Under `course grade` and `course check` (the runner sets COURSE_DERANDOMIZE=1),
    property tests draw the same examples every run: the same code gets the same grade."""
    if not flag:
        return
    try:
        from hypothesis import settings
    except ImportError:
        return
    settings.register_profile("course-derandomized", derandomize=True, database=None)
    settings.load_profile("course-derandomized")


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    _refuse_additions(session.config)  # before anything is collected: `course grade` refuses them too
    keep_guarded()  # before the test modules import the learner's code


def _refuse_additions(config: pytest.Config) -> None:
    """What `course grade` would refuse in a learner's package under test (a subfolder of
    modules, a conftest.py: `course.submission.refused_additions`) stops this run too."""
    from course import manifest
    from course.submission import refused_additions

    if loader.current_impl() != "student":
        return
    base = loader.root()
    parts = set()
    for arg in config.args or ["."]:
        p = Path(str(arg).split("::")[0])
        p = (Path(config.invocation_params.dir) / p) if not p.is_absolute() else p
        try:
            parts.add((p.resolve().relative_to(base).parts or ("",))[0])
        except ValueError:
            continue
    refused = [why for st in manifest.STAGES if st.folder in parts or "" in parts
               for why in refused_additions(st, base)]
    if refused:
        raise pytest.UsageError("\n".join(refused))


def _bound_shrinking(seconds: str | None) -> None:
    """Under `course check`, a failing Hypothesis test shrinks for at most `seconds` (and
    100 shrinks), so its report comes within a bounded time; plain pytest keeps
    Hypothesis's own limits."""
    if not seconds:
        return
    try:
        from hypothesis.internal.conjecture import engine
    except ImportError:
        return
    if hasattr(engine, "MAX_SHRINKING_SECONDS"):
        engine.MAX_SHRINKING_SECONDS = max(1, int(float(seconds)))
    if hasattr(engine, "MAX_SHRINKS"):
        engine.MAX_SHRINKS = min(engine.MAX_SHRINKS, 100)


def pytest_report_header(config: pytest.Config) -> str:
    return f"course: impl={loader.current_impl()} root={loader.root()}"


def _in_stage_tests(item: pytest.Item) -> bool:
    """Is this test one of the course's own stage tests (NN_stage/tests/... or hidden_tests/...)?"""
    try:
        rel = Path(str(item.path)).resolve().relative_to(loader.root())
    except ValueError:
        return False
    return len(rel.parts) >= 3 and rel.parts[0][:2].isdigit() and rel.parts[1] in ("tests", HIDDEN_DIR)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config):
    """Leave a stage's hidden_tests/ out of a plain run (`pytest 01_autograd`), unless asked
    for with --hidden-tests or named on the command line."""
    if collection_path.name != HIDDEN_DIR or config.getoption("--hidden-tests", False):
        return None
    here = collection_path.resolve()
    for arg in config.args:
        p = Path(str(arg).split("::")[0])
        p = (Path(config.invocation_params.dir) / p).resolve() if not p.is_absolute() else p.resolve()
        if p == here or here in p.parents:
            return None
    return True


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
    wanted = config.getoption("--exercise", None)
    if wanted:
        for ex in wanted:
            try:
                manifest.exercise(ex)
            except KeyError:
                raise pytest.UsageError(f"--exercise {ex}: no such exercise in course/manifest.py") from None
        keep = [it for it in items if exercise_of(it) in wanted]
        gone = [it for it in items if exercise_of(it) not in wanted]
        if gone:
            config.hook.pytest_deselected(items=gone)
            items[:] = keep
    done_file = config.getoption("--course-done", None)
    if done_file:
        done = set(Path(done_file).read_text(encoding="utf-8").splitlines())
        keep = [it for it in items if it.nodeid not in done]
        gone = [it for it in items if it.nodeid in done]
        if gone:
            config.hook.pytest_deselected(items=gone)
            items[:] = keep
    for item in items:
        if item.get_closest_marker("gpu") is not None and not has_cuda():
            item.add_marker(pytest.mark.skip(reason="needs CUDA"))


@pytest.fixture(scope="module")
def one_thread():
    """Run the module's tests with torch on one thread, then put the count back."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def visible_conftest(hidden_conftest: str) -> dict:
    """The names defined by a stage's `tests/conftest.py`, for its `hidden_tests/conftest.py`.

    A stage folder is no package and pytest's importlib mode gives a conftest no importable
    name, so hidden tests cannot `import` the visible tests' fixtures. Their conftest does

        from course.pytest_plugin import visible_conftest
        globals().update(visible_conftest(__file__))

    and so defines the same fixtures (autouse ones included) and helpers, without a copy.
    """
    import importlib.util
    import sys

    path = Path(hidden_conftest).resolve().parent.parent / "tests" / "conftest.py"
    name = f"_course_visible_conftest_{path.parent.parent.name}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return {k: v for k, v in vars(module).items() if not k.startswith("__")}


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


def _collect_error_message(report: pytest.CollectReport) -> str:
    """`NN_stage/module.py:LINE: SyntaxError: ... (while collecting ...)` when the learner's
    module stopped the import (see `pytest_exception_interact`), else the last error line."""
    from course.feedback import LearnerErrorRepr

    if isinstance(report.longrepr, LearnerErrorRepr):
        return f"{report.longrepr.lines[0]} (while collecting {report.nodeid})"
    return f"could not collect {report.nodeid}: {_error_line(report.longreprtext)}"


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        if _current_config is not None:
            _current_config.stash[_ERRORS_KEY].append(_collect_error_message(report))


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


_current_config: pytest.Config | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    global _current_config
    _current_config = session.config


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
        if isinstance(exc, NotImplementedError) and todo_of_message(str(exc)) is not None:
            return str(exc)
        todo += [exc.__cause__, exc.__context__, *getattr(exc, "exceptions", ())]
    return None


def _first_line(report: pytest.TestReport) -> str:
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


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """A closing line: `course: exercises: 0/8 done (...); given code: 50 passed`."""
    from course.feedback import terminal_summary

    line = terminal_summary(config.stash.get(_RESULTS_KEY, []))
    if line:
        terminalreporter.write_line(f"course: {line}")
    for nodeid, swapped in config.stash.get(TAMPER_KEY, [])[:5]:
        terminalreporter.write_line(f"course: TAMPERING: {', '.join(swapped[:5])} replaced during {nodeid}; "
                                    "the grader scores this stage 0", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _emit({"ev": "finish", "exitstatus": int(exitstatus)})
    path = session.config.getoption("--course-results", None)
    results = session.config.stash.get(_RESULTS_KEY, [])
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({
            "impl": loader.current_impl(),
            "time": time.time(),
            "exitstatus": int(exitstatus),
            "results": [r.to_dict() for r in results],
            "errors": session.config.stash.get(_ERRORS_KEY, []),
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
           "errors": list(session.config.stash.get(_ERRORS_KEY, []))})
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
    todo = next((v for k, v in report.user_properties if k == "todo"), None)
    if report.failed and r.outcome != "failed":
        r.outcome, r.todo = "failed", todo
        r.message = todo_line(todo) if todo else _first_line(report)
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
    _current_config.stash[_RESULTS_KEY].append(r)
    _emit({"ev": "result", "nodeid": nodeid, **r.to_dict(RAN)})
    if swapped:  # after the result: the runner stops the process at this event, the result already read
        _emit({"ev": "tamper", "nodeid": nodeid, "replaced": swapped[:10]})
