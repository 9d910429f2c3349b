"""The course harness: loader, stub generator, grading, CLI and pytest plugin.

Tests and notebooks reach the code under test through `course.load("autograd")`; see
`course.loader` for how the learner's module or the reference solution is chosen. A lesson
notebook starts with `course.lesson("autograd")` (the same, and cells that stop at an
unwritten exercise print one line instead of a traceback) and checks an exercise with
`course.check("1.3")`; see `course.notebook`. A hidden test reports its values with
`course.answer(name, value)`, judged outside the learner's process; see `course.answers`.
"""

from __future__ import annotations

import importlib

# Resolved on first use (PEP 562), so that `course check`, whose parent process only runs and
# reads a child, does not import NumPy through `answer`. The pytest plugin imports
# `course.answers` itself, before any test or learner code runs.
_HOME = {"answer": "course.answers", "load": "course.loader", "current_impl": "course.loader",
         "set_impl": "course.loader", "root": "course.loader", "lesson": "course.notebook",
         "check": "course.notebook", "needs": "course.notebook"}

__all__ = list(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'course' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
