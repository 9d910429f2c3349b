"""`course.load(name)`: the module under test, the learner's or the reference solution.

Which one is decided, first match wins, by
  1. the `impl=` argument,
  2. the pytest option `--impl student|solution` (the plugin calls `set_impl`),
  3. the environment variable `COURSE_IMPL` (inherited by notebooks and subprocesses),
  4. the learner's default, `student`.

The learner's file `NN_stage/<name>.py` is loaded from its path under a private module
name (`course_student.<name>`), so it never clashes with an installed package that happens
to share its name (`train`, `profiling`, ...), nor with `solutions.<name>`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from course import manifest

IMPLS = ("student", "solution")
_forced_impl: str | None = None


def _check_impl(impl: str) -> str:
    impl = impl.strip().lower()
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    return impl


def set_impl(impl: str | None) -> None:
    """Force an implementation for this process (and, through the environment, its children)."""
    global _forced_impl
    _forced_impl = None if impl is None else _check_impl(impl)
    if _forced_impl is not None:
        os.environ["COURSE_IMPL"] = _forced_impl


def current_impl() -> str:
    if _forced_impl is not None:
        return _forced_impl
    return _check_impl(os.environ.get("COURSE_IMPL", "student") or "student")


def root() -> Path:
    """The course repository's root: `COURSE_ROOT`, else the folder holding `course/`."""
    env = os.environ.get("COURSE_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent.parent
    if (here / "solutions").is_dir():
        return here
    cwd = Path.cwd().resolve()
    for p in (cwd, *cwd.parents):
        if (p / "course").is_dir() and (p / "solutions").is_dir():
            return p
    return here


def student_path(name: str) -> Path:
    st = manifest.stage(name)
    return root() / st.folder / f"{st.module}.py"


def _load_student(name: str) -> ModuleType:
    st = manifest.stage(name)
    path = student_path(name)
    if not path.exists():
        raise FileNotFoundError(
            f"the learner's module {path} is missing; regenerate it with `course stubs --write`"
        )
    modname = f"course_student.{st.module}"
    cached = sys.modules.get(modname)
    if cached is not None and getattr(cached, "__file__", None) == str(path):
        return cached
    if "course_student" not in sys.modules:
        pkg = ModuleType("course_student")
        pkg.__path__ = []  # a namespace for learner modules, nothing importable by path
        sys.modules["course_student"] = pkg
    spec = importlib.util.spec_from_file_location(modname, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module  # before exec: dataclasses and pickle look it up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return module


def load(name: str, impl: str | None = None) -> ModuleType:
    """Return stage module `name` ("autograd", "dedup", ...) as the learner's or the solution."""
    impl = current_impl() if impl is None else _check_impl(impl)
    st = manifest.stage(name)
    if impl == "solution":
        return importlib.import_module(f"solutions.{st.module}")
    return _load_student(st.module)
