"""The course harness: loader, stub generator, grading, CLI and pytest plugin.

Tests and notebooks reach the code under test through `course.load("autograd")`; see
`course.loader` for how the learner's module or the reference solution is chosen.
"""

from course.loader import current_impl, load, root, set_impl

__all__ = ["load", "current_impl", "set_impl", "root"]
