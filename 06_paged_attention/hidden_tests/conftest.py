"""Fixtures of stage 06's hidden tests: the visible tests' own fixtures and checks
(`model`, `alone`, `serve`, `contiguous`, `check_paged`, one thread), shared from
`../tests/conftest.py`, not copied."""

from course.pytest_plugin import visible_conftest

globals().update(visible_conftest(__file__))
