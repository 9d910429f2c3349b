"""Fixtures of stage 08's hidden tests: the visible tests' fixtures (`model`, `report_numbers_ok`,
one thread),
shared from `../tests/conftest.py`, not copied."""

from course.pytest_plugin import visible_conftest

globals().update(visible_conftest(__file__))
