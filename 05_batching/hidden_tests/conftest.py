"""Fixtures of stage 05's hidden tests: the visible tests' fixtures (`model`, `alone`, `checked`,
`serve_trace`, `assert_alone`, one thread),
shared from `../tests/conftest.py`, not copied."""

from course.pytest_plugin import visible_conftest

globals().update(visible_conftest(__file__))
