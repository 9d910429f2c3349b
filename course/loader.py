"""`course.load(name)`: the module under test, the learner's or the reference solution.

Which one is decided, first match wins, by
  1. the `impl=` argument,
  2. the pytest option `--impl student|solution` (the plugin calls `set_impl`),
  3. the environment variable `COURSE_IMPL` (inherited by notebooks and subprocesses),
  4. the learner's default, `student`.

The learner's package `NN_stage/<name>/` is loaded from its path under a private module
name (`course_student.<name>`, its files `course_student.<name>.<file>`), so it never
clashes with an installed package that happens to share its name (`train`, `profiling`,
...), nor with `solutions.<name>`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from course import layout, manifest
from course.layout import root  # noqa: F401 — `course.loader.root`, as callers have always imported it

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


def student_path(name: str) -> Path:
    """The file `course.load` runs for the learner's package: `NN_stage/<name>/__init__.py`."""
    return layout.stub_entry(manifest.stage(name))


def _forget(modname: str) -> None:
    for key in [k for k in sys.modules if k == modname or k.startswith(modname + ".")]:
        del sys.modules[key]


def _load_student(name: str) -> ModuleType:
    st = manifest.stage(name)
    path = student_path(name)
    if not path.exists():
        raise FileNotFoundError(
            f"the learner's package {path.parent} (its {path.name}) is missing; "
            "regenerate it with `course stubs --write`"
        )
    modname = f"course_student.{st.module}"
    cached = sys.modules.get(modname)
    if cached is not None and getattr(cached, "__file__", None) == str(path):
        return cached
    if "course_student" not in sys.modules:
        pkg = ModuleType("course_student")
        pkg.__path__ = []  # a namespace for learner packages, nothing importable by path
        sys.modules["course_student"] = pkg
    # a package: its files import each other relatively (`from .allocator import ...`), as
    # `course_student.<name>.allocator`, never the reference's `solutions.<name>.allocator`
    spec = importlib.util.spec_from_file_location(modname, path, submodule_search_locations=[str(path.parent)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    _forget(modname)
    sys.modules[modname] = module  # before exec: dataclasses and pickle look it up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        _forget(modname)
        raise
    return module


def load(name: str, impl: str | None = None) -> ModuleType:
    """Return stage module `name` ("autograd", "dedup", ...) as the learner's or the solution."""
    impl = current_impl() if impl is None else _check_impl(impl)
    st = manifest.stage(name)
    if impl == "solution":
        if not layout.has_solution(st):
            raise ModuleNotFoundError(
                f"the reference solution of stage {st.number} (solutions/{st.module}/) is not in this repository "
                f"(a learner's release has none for its own stage): test your code with --impl student",
                name=f"solutions.{st.module}")
        return importlib.import_module(f"solutions.{st.module}")
    return _load_student(st.module)
