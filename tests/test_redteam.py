"""The red team: each attack a learner could commit in their stub, graded by `course grade
--submission` against a small instructor's course (stage 01 with a few quick numpy tests,
a hidden test and a Hypothesis test), must score 0 or be flagged "tampering detected";
a correct solution whose exercises crash, exit, loop in C or hang inside Hypothesis keeps
the points of every other exercise.

Each attack is one `course grade` run of a few seconds (per-test limit 3 s)."""
from __future__ import annotations

import json
import os
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.helpers import SECRET, run, small_course


@pytest.fixture(scope="module")
def course_root(tmp_path_factory) -> Path:
    return small_course(tmp_path_factory.mktemp("instructor"))


def _stub(course_root: Path) -> dict[str, str]:
    """The learner's package as the course ships it: {file name: text}."""
    return {p.name: p.read_text() for p in sorted((course_root / "01_autograd" / "autograd").glob("*.py"))}


def _solution(course_root: Path) -> dict[str, str]:
    """The reference package's files, as a learner who copied them would submit them."""
    return {p.name: p.read_text() for p in sorted((course_root / "solutions" / "autograd").glob("*.py"))}


def _plus(files: dict[str, str], code: str) -> dict[str, str]:
    """The package with `code` appended to its `__init__.py` (it runs when the package loads)."""
    return {**files, "__init__.py": files["__init__.py"] + code}


def _grade(course_root: Path, tmp_path: Path, learner_files: dict[str, str] | None, *extra: str,
           submission: Path | None = None):
    sub = submission or tmp_path / "submission"
    if learner_files is not None:
        (sub / "01_autograd" / "autograd").mkdir(parents=True, exist_ok=True)
        for name, text in learner_files.items():
            (sub / "01_autograd" / "autograd" / name).write_text(text)
    out, md = tmp_path / "results.json", tmp_path / "summary.md"
    proc = run([sys.executable, "-m", "course", "grade", "--submission", str(sub), "--stages", "01",
                "--timeout", "3", "--json", str(out), "--summary", str(md), *extra], impl="student", timeout=300,
               env={"COURSE_ROOT": str(course_root)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    return res, md.read_text(), proc


def _tests(res: dict, name: str) -> list[dict]:
    return [t for t in res["tests"] if t["name"].startswith(name)]


def _zero_or_tampering(res: dict, proc) -> None:
    tampered = "TAMPERING DETECTED" in proc.stderr
    assert res["score"] == 0 or tampered, (res, proc.stderr[-2000:])
    if tampered:
        assert res["score"] == 0, res
        assert any(t["visibility"] == "hidden" and "tampering" in t["name"] for t in res["tests"])


def test_the_stub_scores_zero_and_the_solution_full(course_root, tmp_path):
    res, _, proc = _grade(course_root, tmp_path, _stub(course_root))
    assert res["score"] == 0 and "TAMPERING" not in proc.stderr, proc.stderr
    res, _, proc = _grade(course_root, tmp_path, _solution(course_root), "--stages", "01,1")
    assert "TAMPERING" not in proc.stderr, proc.stderr
    names = [t["name"] for t in res["tests"]]
    assert len(names) == len(set(names)), "a stage named twice was graded twice"
    for ex in ("1.2", "1.3", "1.4", "1.5", "1.6"):
        t = next(t for t in res["tests"] if t["name"].startswith(ex + " ") and "hidden" not in t["name"])
        assert t["score"] == t["max_score"] > 0, t
    hid = _tests(res, "1.2 Arithmetic with broadcasting (hidden")
    assert hid and hid[0]["visibility"] == "after_due_date" and hid[0]["score"] == hid[0]["max_score"]


def test_crashes_loops_and_hangs_cost_only_their_exercise(course_root, tmp_path):
    """The solution, with 1.1 raising KeyboardInterrupt (pytest stops the session), 1.3
    calling os._exit, 1.4 segfaulting, 1.5 looping inside C code and 1.6 hanging inside a
    Hypothesis test: 1.2 keeps its points, visible and hidden, and nothing is "tampering"."""
    learner = _plus(_solution(course_root), '''

import ctypes as _ctypes
import itertools as _itertools
import os as _os


def _exit_now(self, *a, **k):
    _os._exit(3)


def _segfault(self, other):
    _ctypes.string_at(0)


def _c_loop(self, *shape):
    return sum(_itertools.count())


def _hang(self):
    while True:
        pass


def _interrupt(self, *a, **k):
    raise KeyboardInterrupt


Tensor.sum = _exit_now
Tensor.__matmul__ = _segfault
Tensor.reshape = _c_loop
Tensor.relu = _hang
Tensor.backward = _interrupt
''')
    t0 = time.monotonic()
    res, md, proc = _grade(course_root, tmp_path, learner)
    assert "TAMPERING" not in proc.stderr, proc.stderr
    by = {t["name"].split(" ")[0]: t for t in res["tests"] if t["visibility"] == "visible"}
    assert by["1.2"]["score"] == by["1.2"]["max_score"] > 0
    assert _tests(res, "1.2 Arithmetic with broadcasting (hidden")[0]["score"] > 0
    for ex, word in (("1.1", "session stopped"), ("1.3", "exited with code 3"), ("1.4", "SIGSEGV"), ("1.5", "Timeout"), ("1.6", "Timeout")):
        assert by[ex]["score"] == 0, by[ex]
        assert word in by[ex]["output"] and "test_rt_" in by[ex]["output"], by[ex]  # names the test
    assert time.monotonic() - t0 < 120


def _import_pytest(text: str) -> str:
    future = "from __future__ import annotations\n"
    if future in text:
        return text.replace(future, future + "import pytest as _pytest\n", 1)
    return "import pytest as _pytest\n" + text


PATCH_HELPERS = """
import builtins as _b, math as _m
import numpy as _np
import numpy.testing as _npt
import pytest as _pt
def _agree(*a, **k):
    return True
def _quiet(*a, **k):
    return None
for _name in [n for n in dir(_npt) if n.startswith("assert_")]:
    setattr(_npt, _name, _quiet)
_np.allclose = _np.array_equal = _agree
_m.isclose = _agree
try:
    import torch as _torch, torch.testing as _tt
    _tt.assert_close = _quiet
    _torch.allclose = _torch.equal = _agree
except ImportError:
    pass
"""


ATTACKS = {
    # the stub's NotImplementedError turned into a skip
    "skip-instead-of-raise": lambda stub: {
        name: _import_pytest(text.replace("raise NotImplementedError(", "_pytest.skip("))
        if "raise NotImplementedError(" in text else text for name, text in stub.items()},
    # every report rewritten to "passed"
    "patch-test-report": lambda stub: _plus(stub, '''
import _pytest.reports as _r
_orig_init = _r.TestReport.__init__
def _init(self, *a, **k):
    _orig_init(self, *a, **k)
    self.outcome, self.longrepr = "passed", None
_r.TestReport.__init__ = _init
'''),
    # a plugin registered from the stub, forcing every call to pass
    "register-plugin": lambda stub: _plus(stub, '''
import sys as _sys
import pytest as _pytest
class _Forge:
    @_pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        out = yield
        rep = out.get_result()
        rep.outcome, rep.longrepr = "passed", None
_sys.modules["course.result_stream"]._current_config.pluginmanager.register(_Forge(), "forge")
'''),
    # the test functions never run
    "patch-runtest": lambda stub: _plus(stub, '''
import _pytest.python as _p
_p.Function.runtest = lambda self: None
'''),
    # forged events written to the grader's channel when the process exits
    "atexit-forged-events": lambda stub: _plus(stub, '''
import atexit as _atexit, json as _json, os as _os, sys as _sys
def _forge():
    fd = next(int(a.split("=", 1)[1]) for a in _sys.argv if a.startswith("--course-events-fd="))
    for n in ("01_autograd/tests/test_autograd_rt.py::test_rt_add",):
        _os.write(fd, (_json.dumps({"ev": "result", "nodeid": n, "outcome": "passed"}) + "\\n").encode())
_atexit.register(_forge)
'''),
    # the reference solution, imported
    "import-solution": lambda stub: _plus(stub, "\nfrom solutions.autograd import *  # noqa\n"),
    # nothing implemented: the comparison helpers the tests call are replaced by ones that
    # always agree
    "patch-comparison-helpers": lambda stub: _plus(stub, PATCH_HELPERS),
}


# Issue 22's attack, written afresh and generic (any stage's package): nothing implemented,
# every public name replaced by an object that agrees with everything, and the comparison
# helpers and builtins the tests lean on replaced by ones that always pass.
AGREE = """
class _Agree:
    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): return self
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __lt__ = __le__ = __gt__ = __ge__ = __eq__
    def __bool__(self): return True
    def __len__(self): return 1
    def __iter__(self): return iter(())
    def __getitem__(self, key): return self
    def __float__(self): return 0.0
    def __int__(self): return 0
    __index__ = __int__
    def __hash__(self): return 0
    def _same(self, *a, **k): return self
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _same
    __matmul__ = __rmatmul__ = __pow__ = __rpow__ = __neg__ = __abs__ = __pos__ = _same
for _name in [n for n in list(globals()) if not n.startswith("_")]:
    globals()[_name] = _Agree()
def __getattr__(name):
    return _Agree()
"""
ATTACKS["always-equal-and-patched-helpers"] = lambda stub: _plus(stub, AGREE + PATCH_HELPERS + """
_b.isinstance = lambda *a, **k: True
""")
# variant: the objects alone, no helper touched
ATTACKS["always-equal-objects-only"] = lambda stub: _plus(stub, AGREE)
# variant: a helper replaced only for the length of one call, the original put back by the
# fake itself, so after the test everything is as it was
ATTACKS["patch-during-the-call"] = lambda stub: _plus(stub, """
import numpy.testing as _npt
_orig = _npt.assert_allclose
def _once(*a, **k):
    _npt.assert_allclose = _orig  # put back: nothing to see after the test
class _Arm:
    def __get__(self, obj, owner):
        _npt.assert_allclose = _once
        return lambda *a, **k: None
Tensor.backward = _Arm()
""")
# variant: a numpy array subclass whose comparisons lie, returned where arrays are expected
LIAR_CLASS = """
import numpy as _np
class _Liar(_np.ndarray):
    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        shape = _np.broadcast_shapes(*[_np.shape(x) for x in inputs])
        return _np.ones(shape, bool) if ufunc.nout == 1 else tuple(_np.ones(shape) for _ in range(ufunc.nout))
    def __eq__(self, other): return True
def _liar(*a, **k):
    return _np.zeros(()).view(_Liar)
"""
ATTACKS["lying-ndarray-subclass"] = lambda stub: _plus(stub, LIAR_CLASS + """
Tensor.grad = property(_liar)
Tensor.data = property(_liar, lambda self, v: None)
""")
FLAGGED = ("patch-test-report", "register-plugin", "patch-runtest", "atexit-forged-events", "import-solution",
           "patch-comparison-helpers", "always-equal-objects-only",
           "patch-during-the-call", "lying-ndarray-subclass")


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attack_scores_zero_or_is_flagged(course_root, tmp_path, attack):
    res, md, proc = _grade(course_root, tmp_path, ATTACKS[attack](_stub(course_root)))
    _zero_or_tampering(res, proc)
    if attack in FLAGGED:
        assert "TAMPERING DETECTED" in proc.stderr, (attack, proc.stderr[-2000:])
        assert "For the instructor" in md


def test_hidden_tests_are_judged_on_plain_data_outside_the_learners_process(course_root, tmp_path):
    """An attack the in-process checks do not see (the comparison helper swapped through the
    module's dict and put back, wrong answers) passes the visible test it fools, and still
    scores 0 on the hidden test: its reported values differ from the reference's."""
    learner = _plus(_solution(course_root), """
import numpy.testing as _npt
_orig = _npt.__dict__["assert_allclose"]
def _pass_once(*a, **k):
    _npt.__dict__["assert_allclose"] = _orig
_add = Tensor.__add__
def _wrong(self, other):
    if self.shape == other.shape:
        return _add(self, other)
    _npt.__dict__["assert_allclose"] = _pass_once  # broadcasting: the next check is fooled
    out = _add(self, other)
    out.data = out.data + 1.0  # wrong, and the helper that would say so is swapped
    return out
Tensor.__add__ = _wrong
""")
    res, md, proc = _grade(course_root, tmp_path, learner)
    assert "TAMPERING DETECTED" not in proc.stderr, proc.stderr[-2000:]
    hidden = [t for t in res["tests"] if t["visibility"] == "after_due_date" and t["name"].startswith("1.2 ")]
    assert hidden and hidden[0]["score"] == 0, hidden
    assert "differ from the reference" in hidden[0]["output"], hidden
    visible = _tests(res, "1.2 ")
    assert any(t["visibility"] == "visible" and t["score"] > 0 for t in visible), visible  # same shapes: right


def test_learner_edits_to_tests_and_solutions_count_for_nothing(course_root, tmp_path):
    sub = tmp_path / "submission"
    (sub / "01_autograd" / "tests").mkdir(parents=True)
    (sub / "solutions" / "autograd").mkdir(parents=True)
    (sub / "01_autograd" / "tests" / "test_autograd_rt.py").write_text(
        'import pytest\n\n@pytest.mark.exercise("1.2")\ndef test_rt_add():\n    pass\n')
    (sub / "solutions" / "autograd" / "__init__.py").write_text("raise SystemExit('never read')\n")
    res, _, proc = _grade(course_root, tmp_path, _stub(course_root), submission=sub)
    assert res["score"] == 0


def test_a_linked_stub_is_refused(course_root, tmp_path):
    sub = tmp_path / "submission"
    (sub / "01_autograd").mkdir(parents=True)
    (sub / "01_autograd" / "autograd").symlink_to(course_root / "solutions" / "autograd")
    res, _, proc = _grade(course_root, tmp_path, None, submission=sub)
    assert res["score"] == 0 and "is a link" in proc.stderr


def test_a_detached_child_cannot_rewrite_results_after_grading(course_root, tmp_path):
    learner = _plus(_stub(course_root), '''
import os as _os, time as _time
def _outputs():
    pid = _os.getppid()
    argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    return [argv[i + 1].decode() for i, a in enumerate(argv) if a in (b"--json", b"--summary")]
_paths = _outputs()
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _time.sleep(2.5)
        for p in _paths:
            try:
                open(p, "w").write('{"score": 1000, "tests": []}')
            except OSError:
                pass
        _os._exit(0)
    _os._exit(0)
''')
    res, md, proc = _grade(course_root, tmp_path, learner)
    time.sleep(4)
    res2 = json.loads((tmp_path / "results.json").read_text())
    assert res2 == res and res["score"] == 0
    assert (tmp_path / "summary.md").read_text() == md


def test_hidden_source_never_reaches_the_outputs(course_root, tmp_path):
    learner = _plus(_stub(course_root), '''
import glob as _glob, os as _os
_src = "".join(open(p).read() for p in _glob.glob(_os.path.join(_os.environ["COURSE_ROOT"], "*", "hidden_tests", "*.py")))
print(_src)
def _leak(self, other):
    raise AssertionError(_src)
Tensor.__add__ = _leak
''')
    res, md, proc = _grade(course_root, tmp_path, learner)
    assert res["score"] == 0
    for text in (json.dumps(res), md, proc.stdout, proc.stderr):
        assert SECRET not in text


def test_a_pth_file_in_the_venv_is_blocked_or_flagged(course_root, tmp_path):
    site = Path(sysconfig.get_paths()["purelib"])
    pth = site / f"zz_course_redteam_{os.getpid()}.pth"
    learner = _plus(_stub(course_root), f'''
try:
    open({str(pth)!r}, "w").write("# course red-team test: harmless\\n")
except OSError:
    pass
''')
    try:
        res, _, proc = _grade(course_root, tmp_path, learner)
        assert res["score"] == 0
        if pth.exists():
            assert "TAMPERING DETECTED" in proc.stderr and "site-packages" in proc.stderr, proc.stderr
    finally:
        pth.unlink(missing_ok=True)


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="needs root and a system Python")
def test_the_sandbox_drops_privileges_limits_and_reaps(tmp_path):
    """As root: the child runs as an unused user id that cannot write root's files, under
    resource limits, and a detached grandchild is killed by `reap`."""
    import subprocess

    from course.sandbox import Sandbox

    from course.sandbox import UID_RANGE, _uid_in_use

    sb = Sandbox(uid=next(u for u in UID_RANGE if not _uid_in_use(u)))
    target = tmp_path / "owned_by_root.txt"
    target.write_text("root's")
    os.chmod(tmp_path, 0o755)
    probe = (f"import os, resource, subprocess, sys\n"
             f"print(os.getuid(), resource.getrlimit(resource.RLIMIT_CORE)[0])\n"
             f"try:\n    open({str(target)!r}, 'w').write('x')\n    print('wrote')\n"
             f"except OSError:\n    print('refused')\n"
             f"subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); time.sleep(60)'],\n"
             f"                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n")
    proc = subprocess.run([SYSTEM_PYTHON, "-c", probe], capture_output=True, text=True, timeout=60,
                          **sb.popen_kwargs())
    uid, core, wrote = proc.stdout.split()[:3]
    assert int(uid) == sb.uid and int(core) == 0 and wrote == "refused", proc.stdout + proc.stderr
    assert target.read_text() == "root's"
    from course.sandbox import _pids, _proc_state, _proc_uid

    def alive():
        return [p for p in _pids() if _proc_uid(p) == sb.uid and _proc_state(p) not in ("Z", "X", "")]

    assert alive(), "the detached grandchild should still be alive"
    sb.reap()
    deadline = time.monotonic() + 10  # a SIGKILLed process leaves the process table when the kernel gets to it
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(), "reap left a process of the sandbox user"


def test_replaced_helpers_are_tampering_under_plain_pytest_too(course_root, tmp_path):
    """`pytest` and `course check` say so: the guarded helpers are put back after the test
    that replaced them, the test fails, and the closing lines name what was replaced."""
    import shutil

    work = tmp_path / "c"
    shutil.copytree(course_root, work)
    files = ATTACKS["patch-comparison-helpers"](_stub(work))
    for name, text in files.items():
        (work / "01_autograd" / "autograd" / name).write_text(text)
    proc = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "01_autograd/tests"], cwd=work,
               impl="student", env={"COURSE_ROOT": str(work)}, timeout=300)
    assert "TAMPERING: " in proc.stdout and "numpy.testing.assert_allclose" in proc.stdout, proc.stdout[-2000:]
    assert "failed" in proc.stdout.splitlines()[-1], proc.stdout[-1500:]
    proc = run([sys.executable, "-m", "course", "check", "01"], cwd=work, impl="student",
               env={"COURSE_ROOT": str(work)}, timeout=300)
    assert proc.returncode == 1 and "TAMPERING: " in proc.stdout, proc.stdout[-2000:]
    assert "numpy.testing.assert_allclose" in " ".join(proc.stdout.split()), proc.stdout[-2000:]


def test_the_same_submission_gets_the_same_grade(course_root, tmp_path):
    """Property tests run derandomised under `course grade`: a bug a Hypothesis test finds
    only on some examples costs the same points in every grade. (Without it, six grades of
    this submission gave 10, 5, 5, 5, 0 and 5 points for 1.6.)"""
    # relu wrong only for inputs in (1.1, 1.3): a property test finds it on some runs, not all,
    # unless its examples are the same every time
    buggy = _plus(_solution(course_root), '''
_relu = Tensor.relu
def _sometimes(self):
    import numpy as _np
    out = _relu(self)
    if _np.any((self.data > 1.1) & (self.data < 1.3)):
        out.data = out.data * 0.5
    return out
Tensor.relu = _sometimes
''')
    scores = []
    for k in range(3):
        (tmp_path / f"g{k}").mkdir()
        res, _, proc = _grade(course_root, tmp_path / f"g{k}", buggy)
        scores.append(next(t["score"] for t in res["tests"] if t["name"].startswith("1.6 ")))
    assert len(set(scores)) == 1, scores


# ---- the same attacks on the real stages ------------------------------------------------
# Generic versions for any stage's package: every public callable of the package answers
# with a lying object, and (for the second) swaps a helper for a one-shot fake while it runs.
DURING_THE_CALL = """
import numpy.testing as _npt
_orig = _npt.assert_allclose
def _once(*a, **k):
    _npt.assert_allclose = _orig  # put back: nothing to see after the test
def _arm(*a, **k):
    _npt.assert_allclose = _once
    return _Agree()
for _name in [n for n in list(globals()) if not n.startswith("_")]:
    globals()[_name] = _arm
"""
LIAR = LIAR_CLASS + """
for _name in [n for n in list(globals()) if not n.startswith("_") and callable(globals()[n])]:
    globals()[_name] = _liar
"""
REAL_ATTACKS = {
    "always-equal-and-patched-helpers": AGREE + PATCH_HELPERS,
    "always-equal-objects-only": AGREE,
    "patch-during-the-call": AGREE + DURING_THE_CALL,
    "lying-ndarray-subclass": LIAR,
}


def _attack_every_package(sub: Path, code: str, stages) -> None:
    from course import layout

    for st in stages:
        dst = layout.stub_dir(st, sub)
        dst.mkdir(parents=True)
        for p in sorted(layout.stub_dir(st).glob("*.py")):
            text = p.read_text(encoding="utf-8")
            (dst / p.name).write_text(text + code if p.name == "__init__.py" else text, encoding="utf-8")


def _grade_real(tmp_path: Path, stages: str, sub: Path):
    out = tmp_path / "results.json"
    proc = run([sys.executable, "-m", "course", "grade", "--submission", str(sub), "--stages", stages,
                "--timeout", "10", "--json", str(out)], impl="student", timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc


@pytest.mark.timeout(1800)
def test_the_always_equal_attack_scores_zero_or_is_flagged_on_every_stage(tmp_path, tmp_path_factory):
    from tests.helpers import existing_stages, record_reference_answers

    stages = existing_stages()
    # the grade reads the reference's answers from the course's cache: recorded once a session
    # (tests/helpers.py), not again by each grade that needs them while another computes them
    record_reference_answers(stages, tmp_path_factory)
    _attack_every_package(tmp_path / "sub", REAL_ATTACKS["always-equal-and-patched-helpers"], stages)
    res, proc = _grade_real(tmp_path, ",".join(st.number for st in stages), tmp_path / "sub")
    for st in stages:
        flagged = f"TAMPERING DETECTED in stage {st.number}" in proc.stderr
        earned = sum(t["score"] for t in res["tests"] if t["name"].startswith(f"{int(st.number)}."))
        assert flagged or earned == 0, (st.number, earned, proc.stderr[-2000:])


@pytest.mark.timeout(900)
@pytest.mark.parametrize("attack", [a for a in REAL_ATTACKS if a != "always-equal-and-patched-helpers"])
def test_the_variants_are_flagged_on_stage_04(tmp_path, tmp_path_factory, attack):
    from course import manifest
    from tests.helpers import record_reference_answers

    record_reference_answers([manifest.stage("04")], tmp_path_factory)
    _attack_every_package(tmp_path / "sub", REAL_ATTACKS[attack], [manifest.stage("04")])
    res, proc = _grade_real(tmp_path, "04", tmp_path / "sub")
    assert res["score"] == 0, res
    assert "TAMPERING DETECTED in stage 04" in proc.stderr, (attack, proc.stderr[-2000:])
