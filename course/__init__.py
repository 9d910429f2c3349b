"""The course harness: loader, stub generator, grading, CLI and pytest plugin.

Tests and notebooks reach the code under test through `course.load("autograd")`; see
`course.loader` for how the learner's module or the reference solution is chosen. A lesson
notebook starts with `course.lesson("autograd")` (the same, and cells that stop at an
unwritten exercise print one line instead of a traceback) and checks an exercise with
`course.check("1.3")`; see `course.notebook`. A hidden test reports its values with
`course.answer(name, value)`, judged outside the learner's process; see `course.answers`.
"""

from course.answers import answer
from course.loader import current_impl, load, root, set_impl
from course.notebook import check, lesson, needs

__all__ = ["answer", "load", "current_impl", "set_impl", "root", "lesson", "check", "needs"]
