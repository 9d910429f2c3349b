"""Exercise 2.1 at the exact limits of every quality bound.

A bound is inclusive: a document of exactly `min_chars` characters, exactly `max_chars`,
or with a line of exactly `max_line_chars` is kept; one character more (or less) is not.
The other tests sit far from the limits; an off-by-one (`<=` for `<`) only shows here.
"""

from __future__ import annotations

import pytest

import course

dd = course.load("dedup")

CFG = dd.QualityConfig(min_chars=20, max_chars=400, min_printable=0.9, max_line_chars=80, min_letters=0.3)


def _letters(n: int) -> str:
    """n characters of ordinary prose, lines of 44 characters."""
    return ("the quick brown fox jumps over the lazy dog\n" * (n // 44 + 1))[:n].rstrip("\n").ljust(n, "x")


@pytest.mark.exercise("2.1")
@pytest.mark.parametrize("n, expected", [(19, "too_short"), (20, None), (21, None)])
def test_min_chars_is_inclusive(n, expected):
    text = _letters(n)
    assert len(text) == n
    got = dd.quality_reason(text, CFG)
    assert got == expected, (f"a document of {n} characters with min_chars={CFG.min_chars}: "
                             f"expected {expected!r}, got {got!r}")


@pytest.mark.exercise("2.1")
@pytest.mark.parametrize("n, expected", [(399, None), (400, None), (401, "too_long")])
def test_max_chars_is_inclusive(n, expected):
    text = _letters(n)
    got = dd.quality_reason(text, CFG)
    assert got == expected, (f"a document of {n} characters with max_chars={CFG.max_chars}: "
                             f"expected {expected!r}, got {got!r}")


@pytest.mark.exercise("2.1")
@pytest.mark.parametrize("width, expected", [(79, None), (80, None), (81, "long_line")])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_max_line_chars_is_inclusive(width, expected, where):
    line = ("abcdefghij" * 9)[:width]
    body = _letters(100)
    text = {"first": line + "\n" + body, "middle": body + "\n" + line + "\n" + body,
            "last": body + "\n" + line}[where]
    got = dd.quality_reason(text, CFG)
    assert got == expected, (f"a line of {width} characters ({where} line) with max_line_chars="
                             f"{CFG.max_line_chars}: expected {expected!r}, got {got!r}")


@pytest.mark.exercise("2.1")
def test_a_line_is_counted_without_its_newline():
    """Lines are split at "\\n": an 80-character line followed by a newline is 80 long."""
    cfg = dd.QualityConfig(min_chars=1, max_line_chars=80, min_letters=0.3)
    assert dd.quality_reason("a" * 80 + "\n" + "b" * 80, cfg) is None
    assert dd.quality_reason("a" * 80 + "\n" + "b" * 81, cfg) == "long_line"


@pytest.mark.exercise("2.1")
def test_zero_min_chars_keeps_the_empty_text():
    assert dd.quality_reason("", dd.QualityConfig(min_chars=0)) is None
    assert dd.quality_reason("", dd.QualityConfig(min_chars=1)) == "too_short"
