"""The course's pytest plugin (registered through the `pytest11` entry point).

- `--impl student|solution`: which implementation `course.load` returns (default: the
  environment's `COURSE_IMPL`, else `student`).
- markers: `exercise("1.3")` (a graded test of one exercise), `given` (a test of given
  code), `gpu` (needs CUDA; skipped without it).
- a learner's `NotImplementedError("Exercise 1.3: ...")` is reported as one line,
  `TODO: Exercise 1.3: ...`, instead of a traceback; any other failure gets one telling line
  (`course.failure_report`).
- fixture `one_thread`: torch on one thread for a module's tests (restored afterwards).
  Stages whose tests run thousands of tiny matrix products use it from their conftest:
  a second thread only adds synchronisation there, or waiting for a core on a busy machine.
- `--course-results FILE`: write every test's result (`course.results.TestResult`: outcome,
  exercise, first failure line, ...) as JSON (kept for tools that read a file after the run).
- `--course-events-fd N`: stream one JSON line per event (collected, start, result,
  finish) to file descriptor N as it happens. `course grade` and `course check` read it
  in the parent process, which decides and writes the results (see `course.runner`; the
  results and the stream: `course.result_stream`).
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

import os
import sys
from pathlib import Path

import pytest

from course import loader
from course.cuda import has_cuda

# the plugin's other hooks live beside it, one concern a module; pytest finds a plugin's hooks
# by name, so they are re-exported here: a failing test's one-line report, the results and the
# event stream the grading parent reads, and the per-test time limit
from course.failure_report import pytest_exception_interact, pytest_runtest_makereport
from course.guard import GUARD_HOOK, keep_guarded
from course.result_stream import (
    exercise_of,
    init_stash,
    pytest_collection_finish,
    pytest_collectreport,
    pytest_runtest_logfinish,
    pytest_runtest_logreport,
    pytest_runtest_logstart,
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
)
from course.results import HIDDEN_DIR
from course.time_limit import (
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_timeout_cancel_timer,
    pytest_timeout_set_timer,
)

__all__ = ["exercise_of", "pytest_collection_finish", "pytest_collectreport", "pytest_exception_interact",
           "pytest_runtest_call", "pytest_runtest_logfinish", "pytest_runtest_logreport", "pytest_runtest_logstart",
           "pytest_runtest_makereport", "pytest_runtest_setup", "pytest_runtest_teardown", "pytest_sessionfinish",
           "pytest_sessionstart", "pytest_terminal_summary", "pytest_timeout_cancel_timer", "pytest_timeout_set_timer",
           "visible_conftest"]  # and the hooks below


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
    init_stash(config)
    _bound_shrinking(os.environ.get("COURSE_SHRINK_SECONDS"))
    _derandomize(os.environ.get("COURSE_DERANDOMIZE"))


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


def _no_shrinking_at_a_todo() -> None:
    """A property test that stops at an unwritten exercise (the stub's `NotImplementedError(
    "Exercise N.M: ...")`) stops there on every example, so Hypothesis does not shrink its
    failure: there is no smaller counterexample to find, and the search cost seconds a test
    (each stage's visible and hidden tests on its stubs, derandomised as `course grade` runs
    them, 2026-12-07: stage 05 18.8 -> 5.4 s of CPU, stage 03 22.1 -> 10.1 s). A failure of the
    learner's own code is shrunk as before."""
    import functools

    try:
        from hypothesis.internal.conjecture.engine import ConjectureRunner
    except ImportError:
        return
    shrink = getattr(ConjectureRunner, "shrink_interesting_test_cases", None)  # Hypothesis 6.170's name
    if shrink is None or getattr(shrink, "course_todo_aware", False):
        return
    from course.failure_report import todo_of_exception

    @functools.wraps(shrink)
    def shrink_unless_todo(self) -> None:
        found = list(self.interesting_test_cases.values())
        if found and all(todo_of_exception(getattr(r, "expected_exception", None)) for r in found):
            return
        shrink(self)

    shrink_unless_todo.course_todo_aware = True  # type: ignore[attr-defined]
    ConjectureRunner.shrink_interesting_test_cases = shrink_unless_todo  # type: ignore[method-assign]


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

    if "hypothesis" in sys.modules:  # a collected module uses it (never imported for the others)
        _no_shrinking_at_a_todo()

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
