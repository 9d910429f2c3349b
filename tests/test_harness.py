"""Unit tests of the harness itself: the stub generator, the loader, the manifest."""
from __future__ import annotations

import ast
import re

import pytest

import course
from course import loader, manifest, stubs

SOLUTION = '''"""A module."""
import math


def area(r):
    """Area of a circle."""
    # BEGIN SOLUTION 1.1
    return math.pi * r * r
    # END SOLUTION


class Shape:
    def grow(self, k):
        # BEGIN SOLUTION 1.2
        self.k = k
        return self
        # END SOLUTION
'''


def _first_two_exercises():
    st = manifest.STAGES[0]
    if len(st.exercises) < 2:
        pytest.skip("needs a stage with two exercises")
    return st, st.exercises[0], st.exercises[1]


def test_make_stub_replaces_regions_and_keeps_given_code():
    st, e1, e2 = _first_two_exercises()
    src = SOLUTION.replace("1.1", e1.id).replace("1.2", e2.id)
    out = stubs.make_stub(src, st.module)
    ast.parse(out)
    assert "math.pi" not in out and "self.k = k" not in out
    assert f"NotImplementedError('Exercise {e1.id}: {e1.title} — see {st.folder}.ipynb')" in out
    assert '"""Area of a circle."""' in out and "class Shape:" in out and "import math" in out
    # the raise sits at the marker's indentation
    assert re.search(r"^        raise NotImplementedError\('Exercise " + re.escape(e2.id), out, re.M)
    assert out.startswith("# GENERATED from ")
    # the header names each exercise's holes by their lines in the stub, and its commands
    lines = out.splitlines()
    for ex in (e1, e2):
        at = [n for n, line in enumerate(lines, 1) if f"'Exercise {ex.id}:" in line]
        assert f"#   {ex.id} {ex.title}: line {at[0]}; `course check {ex.id}`, `course hint {ex.id}`" in out


def test_hints_come_first_in_their_region_and_the_stub_drops_them():
    st, e1, e2 = _first_two_exercises()
    src = SOLUTION.replace("1.1", e1.id).replace("1.2", e2.id).replace(
        f"    # BEGIN SOLUTION {e1.id}\n",
        f"    # BEGIN SOLUTION {e1.id}\n    # HINT: think of a square.\n    #   of side r.\n    # HINT: pi r^2.\n")
    assert stubs.hints(src) == {e1.id: ["think of a square. of side r.", "pi r^2."]}
    out = stubs.make_stub(src, st.module)
    assert "HINT" not in out and "square" not in out
    late = src.replace("    return math.pi * r * r\n", "    return math.pi * r * r\n    # HINT: too late\n")
    with pytest.raises(stubs.MarkerError, match="a hint must come first"):
        stubs.hints(late)


def test_a_given_file_says_so():
    st = manifest.STAGES[0]
    out = stubs.make_stub('"""Given."""\nX = 1\n', st.module, "solutions/x/given.py")
    assert out.splitlines()[1].startswith("# Nothing to write here") and "X = 1" in out


@pytest.mark.parametrize("bad, why", [
    ("# BEGIN SOLUTION 1.1\nx = 1\n", "never closed"),
    ("x = 1\n# END SOLUTION\n", "without BEGIN"),
    ("# BEGIN SOLUTION 1.1\n# BEGIN SOLUTION 1.1\n# END SOLUTION\n", "inside the region"),
    ("# BEGIN SOLUTION one\n# END SOLUTION\n", "malformed marker"),
    ("# BEGIN SOLUTION 99.1\nx = 1\n# END SOLUTION\n", "no exercise"),
])
def test_malformed_markers_are_clear_errors(bad, why):
    with pytest.raises(stubs.MarkerError, match=why):
        stubs.make_stub(bad, manifest.STAGES[0].module)


def test_manifest_ids_are_unique_and_numbered_by_stage():
    seen = set()
    for st in manifest.STAGES:
        assert st.folder == f"{st.number}_{st.folder.split('_', 1)[1]}"
        for ex in st.exercises:
            assert re.fullmatch(r"\d+\.\d+", ex.id), ex.id
            assert int(ex.id.split(".")[0]) == int(st.number), (st.number, ex.id)
            assert ex.id not in seen, f"duplicate exercise id {ex.id}"
            assert ex.points > 0 and ex.title.strip()
            seen.add(ex.id)
    assert manifest.stage("1") is manifest.stage("01") is manifest.STAGES[0]
    with pytest.raises(KeyError, match="no stage"):
        manifest.stage("99")


def test_impl_selection_and_bad_impl(monkeypatch):
    monkeypatch.setattr(loader, "_forced_impl", None)
    monkeypatch.setenv("COURSE_IMPL", "solution")
    assert loader.current_impl() == "solution"
    monkeypatch.setenv("COURSE_IMPL", "teacher")
    with pytest.raises(ValueError, match="impl must be one of"):
        loader.current_impl()
    monkeypatch.delenv("COURSE_IMPL")
    assert loader.current_impl() == "student"


def test_student_module_loads_under_a_private_name():
    st = manifest.STAGES[0]
    mod = course.load(st.module, impl="student")
    assert mod.__name__ == f"course_student.{st.module}"
    assert mod.__file__ == str(loader.student_path(st.module))
    sol = course.load(st.module, impl="solution")
    assert sol.__name__ == f"solutions.{st.module}" and sol is not mod


def test_hidden_tests_need_asking_for_and_markers(tmp_path):
    """`pytest NN_stage` leaves hidden_tests/ out; --hidden-tests or naming the folder brings
    it in; an unmarked hidden test is refused like an unmarked visible one."""
    import sys

    from tests.helpers import run, small_course

    base = small_course(tmp_path / "course")
    env = {"COURSE_ROOT": str(base)}

    def collect(*args):
        return run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:nbval", *args], cwd=base, env=env,
                   impl="solution", timeout=300)

    plain = collect("01_autograd")
    assert plain.returncode == 0 and "hidden_tests" not in plain.stdout, plain.stdout[-2000:]
    for args in (("01_autograd", "--hidden-tests"), ("01_autograd/hidden_tests",)):
        proc = collect(*args)
        assert proc.returncode == 0 and "hidden_tests/test_autograd_rt_hidden.py" in proc.stdout, proc.stdout
    (base / "01_autograd" / "hidden_tests" / "test_autograd_unmarked.py").write_text("def test_x():\n    pass\n")
    proc = collect("01_autograd", "--hidden-tests")
    assert proc.returncode != 0 and "needs @pytest.mark.exercise" in proc.stdout + proc.stderr


LOOPS = '''
import itertools
from hypothesis import given, settings, strategies as st


@settings(max_examples=20, deadline=None, database=None)
@given(st.integers())
def test_hypothesis_loop(x):
    while True:
        pass


def test_fine():
    pass


def test_zz_c_loop():
    sum(itertools.count())
'''


def test_plain_pytest_has_a_time_limit_that_kills(tmp_path):
    """A loop in a Hypothesis test fails that one test (Hypothesis cannot swallow the alarm
    and replay the loop); a loop inside C code is ended by the watchdog, which names it."""
    import sys
    import time

    from tests.helpers import run

    (tmp_path / "test_loops.py").write_text(LOOPS)
    t0 = time.monotonic()
    proc = run([sys.executable, "-m", "pytest", "-q", "-p", "no:nbval", "-p", "no:cacheprovider", "--timeout=2",
                "test_loops.py"], cwd=tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 90
    assert out.startswith("F."), out[:300]  # the Hypothesis test failed, the next one ran
    # the watchdog: the limit (2 s x the machine's slowdown) + 10 s
    assert re.search(r"Timeout \(0:00:\d\d", out) and "in test_zz_c_loop" in out, out[-3000:]
    assert proc.returncode != 0


LIGHT = '''
import sys


def test_nothing_heavy_was_imported():
    heavy = [m for m in ("torch", "nbformat", "jsonschema") if m in sys.modules]
    assert not heavy, heavy
'''

LATE_TAMPER = '''
def test_a_patch_after_a_late_import():
    import torch
    torch.allclose = lambda *a, **k: True
'''

AROUND_THE_GUARD = '''
import sys


def test_around_the_guard():
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_GuardOnImport"]
    import torch
    torch.allclose = lambda *a, **k: True
'''


def test_collection_imports_neither_torch_nor_nbformat_and_torch_is_still_guarded(tmp_path):
    """A test that needs neither pays for neither (torch and nbformat cost seconds each on a
    busy machine); torch's helpers are kept the moment torch is first imported, so a learner
    who imports torch late and patches it is caught, and so is one who imports it around the
    course's import hook."""
    import sys

    from tests.helpers import run

    from tests.helpers import ROOT

    ini = ["-c", str(ROOT / "pyproject.toml"), f"--rootdir={tmp_path}"]  # the course's addopts
    (tmp_path / "test_light.py").write_text(LIGHT)
    proc = run([sys.executable, "-m", "pytest", "-q", *ini, "test_light.py"], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    (tmp_path / "test_late.py").write_text(LATE_TAMPER)
    proc = run([sys.executable, "-m", "pytest", "-q", *ini, "test_late.py"], cwd=tmp_path, timeout=300)
    out = " ".join(proc.stdout.split())
    assert "TAMPERING: torch.allclose replaced during test_late.py::test_a_patch_after_a_late_import" in out, out
    (tmp_path / "test_around.py").write_text(AROUND_THE_GUARD)
    proc = run([sys.executable, "-m", "pytest", "-q", *ini, "test_around.py"], cwd=tmp_path, timeout=300)
    out = " ".join(proc.stdout.split())
    assert "TAMPERING: torch (imported around the course's import guard)" in out, out
    assert "sys.meta_path (the course's import guard removed)" in out, out


SLOW_BUT_CORRECT = """
import time


def test_slow_but_correct():
    time.sleep(2.5)
"""


@pytest.mark.parametrize("slowdown, passes", [("4", True), ("1", False)])
def test_limits_scale_with_the_machine_and_a_timeout_names_its_limit(tmp_path, monkeypatch, slowdown, passes):
    """`--timeout 1` on a machine measured 4x slower than the reference is 4 s: a correct test
    of 2.5 s passes; at 1x it times out, with a message that says which limit, from what, and
    how to raise it, never at a file of the learner's (course check, course grade, plain pytest
    share the rule)."""
    from course import feedback
    from course.runner import run_tests

    (tmp_path / "test_slow.py").write_text(SLOW_BUT_CORRECT)
    monkeypatch.setenv("COURSE_SLOWDOWN", slowdown)
    run = run_tests([tmp_path / "test_slow.py"], "solution", root=tmp_path, timeout=1, hidden=False)
    (r,) = run.in_order()
    assert (r.outcome == "passed") is passes, r
    if not passes:
        assert r.message.startswith("Timeout: the test ran"), r.message
        assert "past its limit of 1 s (--timeout 1 x 1 for this machine" in r.message, r.message
        assert "raise it with --timeout 2" in r.message and ".py:" not in r.message, r.message
        assert feedback.failure_message(None) is None


STUCK_PAST_THE_WATCHDOG = """
import faulthandler
import time

from course.time_limit import _REAL_STDERR


def test_stuck_in_c():
    # what the plugin's watchdog does to a test stuck in C code, here at once: dump, exit 1
    faulthandler.dump_traceback_later(0.3, exit=True, file=_REAL_STDERR)
    time.sleep(30)
"""


def test_a_test_ended_by_the_childs_watchdog_is_a_timeout_not_a_crash(tmp_path, monkeypatch):
    """The child's faulthandler watchdog (exit code 1 after its `Timeout (...)!` header) can
    fire before the parent's own kill when the machine got busier between their two
    measurements (seen at load 8: a C loop graded as `exited with code 1 ... (os._exit?)`):
    either way the test failed by its time limit, and the message says so."""
    from course.runner import run_tests

    (tmp_path / "test_stuck.py").write_text(STUCK_PAST_THE_WATCHDOG)
    monkeypatch.setenv("COURSE_SLOWDOWN", "1")
    run = run_tests([tmp_path / "test_stuck.py"], "solution", root=tmp_path, timeout=20, hidden=False)
    (r,) = run.in_order()
    assert r.outcome == "failed" and r.contained == "timeout", r
    assert r.message.startswith("Timeout (the test process's watchdog ended it): the test ran"), r.message
    assert "os._exit" not in r.message, r.message


def test_every_exercise_marker_is_a_string_literal():
    """`course check N.M` imports only the test files that mention `exercise("N.M")`
    (course.cli.exercise_test_files): that holds while every marker names its id literally."""
    from tests.helpers import ROOT

    bad = []
    for path in sorted(ROOT.glob("[0-9][0-9]_*/tests/**/*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "exercise"
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "mark"):
                if not (node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"exercise markers that are not a string literal: {bad}"


IN_THE_WORKER = """
import itertools
import os
import sys

import torch  # at collection: a cold child's import of it must not count against the 1 s limit


def test_a_where(tmp_path_factory):
    parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\\0")
    with open(os.environ["WHERE_FILE"], "w") as f:
        f.write(" ".join(p.decode() for p in parent) + "\\n" + " ".join(sys.argv[1:3]))


def test_b_fails():
    assert 1 + 1 == 3, "one and one make two"


def test_c_crash():
    os._exit(3)


def test_d_passes():
    pass


def test_e_c_loop():
    sum(itertools.count())


def test_f_tamper():
    torch.allclose = lambda *a, **k: True
"""


def test_the_warm_worker_grades_as_a_plain_child(tmp_path, monkeypatch):
    """`course check`'s warm worker (course.worker) forks the test process instead of starting
    one: a failure, a crash (os._exit), a C loop past its limit and a patched torch helper come
    out exactly as from a plain child; the fork is the test process
    (the worker itself runs no test and imports no course code), and each resumed process is
    a new fork."""
    import os
    import time

    from course import worker
    from course.runner import run_tests

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_w.py").write_text(IN_THE_WORKER)
    monkeypatch.setenv("COURSE_SLOWDOWN", "1")
    import shutil
    import tempfile

    # a socket's path has at most 107 bytes: pytest's tmp_path under xdist is too deep for one
    # (CI's run: the worker could not bind and the test waited its 240 s); a deep folder means
    # no worker, never a wait
    monkeypatch.setenv("COURSE_WORKER", "1")
    monkeypatch.setenv("COURSE_WORKER_DIR", str(tmp_path / ("deep" * 20)))
    assert worker.ensure_started(dict(os.environ)) is None
    sockets = tempfile.mkdtemp(prefix="cw-")
    monkeypatch.setenv("COURSE_WORKER_DIR", sockets)
    monkeypatch.setenv("WHERE_FILE", str(tmp_path / "where.txt"))

    def outcomes(run):
        return [(r.nodeid.split("::")[-1], r.outcome, r.contained, r.message[:60]) for r in run.in_order()]

    monkeypatch.setenv("COURSE_WORKER", "0")
    plain = run_tests([tmp_path / "tests"], "solution", root=tmp_path, timeout=1, hidden=False, cache_bytecode=True)
    assert "worker.py" not in (tmp_path / "where.txt").read_text()
    monkeypatch.setenv("COURSE_WORKER", "1")
    env = dict(os.environ)
    # a socket file left by a worker that died (SIGKILL): nothing listens on it, so it is no
    # worker; ensure_started replaces it instead of taking it for one (every check ran cold)
    import socket

    path = worker.socket_path(env)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(path)
    assert worker.ensure_started(env) is not None, "a dead worker's socket file was taken for a running worker"
    try:
        t0 = time.monotonic()
        while not worker._listening(path):
            assert time.monotonic() - t0 < 240, "the worker did not start"
            time.sleep(0.5)
        warm = run_tests([tmp_path / "tests"], "solution", root=tmp_path, timeout=1, hidden=False,
                         cache_bytecode=True)
    finally:
        worker.stop(env)
        t0 = time.monotonic()
        while os.path.exists(path) and time.monotonic() - t0 < 30:  # a stopped worker removes its file
            time.sleep(0.2)
        left = os.path.exists(path)
        shutil.rmtree(sockets, ignore_errors=True)
    assert not left, "the stopped worker left its socket file, which the next ensure_started took for a worker"
    parent, args = (tmp_path / "where.txt").read_text().splitlines()
    assert "course/worker.py" in parent and args.startswith(str(tmp_path / "tests")), (parent, args)
    assert outcomes(warm) == outcomes(plain), (outcomes(warm), outcomes(plain))
    assert warm.processes == plain.processes >= 3 and warm.tampered and plain.tampered
    got = {name: (outcome, contained) for name, outcome, contained, _ in outcomes(warm)}
    assert got["test_a_where"] == ("passed", "") and got["test_b_fails"][0] == "failed"
    assert got["test_c_crash"] == ("failed", "crash") and got["test_e_c_loop"] == ("failed", "timeout"), got
