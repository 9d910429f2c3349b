"""Exercises 2.1 (normalisation, quality filters) and 2.2 (exact deduplication)."""

from __future__ import annotations

import hashlib
import itertools
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course

dd = course.load("dedup")

# Text with the characters normalisation is about: line endings, trailing whitespace of
# several kinds, combining accents, and ordinary letters.
messy_text = st.lists(
    st.sampled_from(list("ab \t\r\n\x0c\u00a0\u2028e\u0301\u00e9\u212b\u00c5") + ["\r\n"]), max_size=60,
).map("".join)


# ------------------------------------------------------------------------------ 2.1


@pytest.mark.exercise("2.1")
def test_normalize_examples():
    assert dd.normalize_text("a \r\nb\t\rc  \n") == "a\nb\nc"
    assert dd.normalize_text("\n\n  x = 1\n\n\n    y = 2   \n\n") == "  x = 1\n\n\n    y = 2"
    # NFC: letter + combining acute becomes one code point; the Angstrom sign becomes Å
    assert dd.normalize_text("e\u0301") == "\u00e9"
    assert dd.normalize_text("\u212b") == "\u00c5"
    assert dd.normalize_text("") == ""


@pytest.mark.exercise("2.1")
@settings(max_examples=150, deadline=None)
@given(messy_text)
def test_normalize_is_idempotent_and_canonical(text):
    once = dd.normalize_text(text)
    assert dd.normalize_text(once) == once
    assert unicodedata.is_normalized("NFC", once)
    assert "\r" not in once
    assert all(line == line.rstrip() for line in once.split("\n"))
    assert not once.startswith("\n") and not once.endswith("\n")


@pytest.mark.exercise("2.1")
def test_normalize_makes_equivalent_texts_equal():
    a = "def f():\r\n    return 'caf\u00e9'   \r\n"
    b = "def f():\n    return 'cafe\u0301'\n\n"
    assert dd.normalize_text(a) == dd.normalize_text(b)


def _letters(n: int) -> str:
    return ("the quick brown fox jumps over the lazy dog\n" * (n // 44 + 1))[:n]


@pytest.mark.exercise("2.1")
def test_quality_reasons_each_and_in_order():
    cfg = dd.QualityConfig(min_chars=20, max_chars=400, min_printable=0.9, max_line_chars=80, min_letters=0.3)
    good = _letters(300)
    assert dd.quality_reason(good, cfg) is None
    assert dd.quality_reason("short", cfg) == "too_short"
    assert dd.quality_reason(_letters(401), cfg) == "too_long"
    assert dd.quality_reason(good[:200] + "\x00\x01\x02" * 10, cfg) == "not_printable"
    assert dd.quality_reason(good[:100] + "x" * 81, cfg) == "long_line"
    assert dd.quality_reason(good[:60] + "\n" + "0, 1, 2, 3, 4,\n" * 10, cfg) == "few_letters"
    # first failing reason wins: too long AND unprintable is counted as too_long
    assert dd.quality_reason("\x00" * 500, cfg) == "too_long"


@pytest.mark.exercise("2.1")
def test_quality_printable_counts_tab_newline_and_unicode():
    cfg = dd.QualityConfig(min_chars=1, min_printable=1.0, min_letters=0.5)
    assert dd.quality_reason("caf\u00e9\tna\u00efve\nstra\u00dfe \u00fcber", cfg) is None
    assert dd.quality_reason("caf\u00e9\x85na\u00efve", cfg) == "not_printable"  # C1 control
    assert dd.quality_reason("\u00e9\u00e8\u00ea\u00eb  \u4e2d\u6587", cfg) is None  # non-ASCII letters count
    assert dd.quality_reason("\u00e9 1 2 3 4 5 6 7 8 9", cfg) == "few_letters"


@pytest.mark.given
def test_quality_config_and_types_rejected():
    with pytest.raises(ValueError, match="min_chars"):
        dd.QualityConfig(min_chars=-1)
    with pytest.raises(ValueError, match="min_chars"):
        dd.QualityConfig(min_chars=10, max_chars=5)
    with pytest.raises(ValueError, match="min_printable"):
        dd.QualityConfig(min_printable=1.5)
    with pytest.raises(TypeError, match="str"):
        dd.quality_reason(b"bytes")
    with pytest.raises(TypeError, match="QualityConfig"):
        dd.quality_reason("text", {"min_chars": 3})
    with pytest.raises(TypeError, match="str"):
        dd.normalize_text(None)
    assert dd.QUALITY_REASONS == ("too_short", "too_long", "not_printable", "long_line", "few_letters")


# ------------------------------------------------------------------------------ 2.2


@pytest.mark.exercise("2.2")
def test_text_digest_is_sha256_of_utf8():
    for text in ["", "hello", "caf\u00e9 \u4e2d\u6587"]:
        assert dd.text_digest(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.mark.exercise("2.2")
def test_exact_deduper_remembers_first_copy():
    d = dd.ExactDeduper()
    assert d.add("a", "x = 1") is None
    assert d.add("b", "y = 2") is None
    assert d.add("c", "x = 1") == "a"
    assert d.add("d", "x = 1") == "a"
    assert d.add("e", "x = 1 ") is None  # exact means exact: normalise first
    assert len(d) == 3


@pytest.mark.exercise("2.2")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "dd", "", "caf\u00e9"]), max_size=25))
def test_exact_dedup_keeps_first_in_order_and_is_idempotent(texts):
    records = [{"id": str(i), "text": t, "source": "s"} for i, t in enumerate(texts)]
    out = list(dd.exact_dedup(records))
    expected_ids, seen = [], set()
    for r in records:
        if r["text"] not in seen:
            seen.add(r["text"])
            expected_ids.append(r["id"])
    assert [r["id"] for r in out] == expected_ids
    assert list(dd.exact_dedup(out)) == out  # dedup of its own output removes nothing


@pytest.mark.exercise("2.2")
def test_exact_dedup_streams():
    """A generator in, a generator out: it never needs the whole input."""
    endless = ({"id": str(i), "text": f"doc {i % 1000}", "source": "s"} for i in itertools.count())
    first = list(itertools.islice(dd.exact_dedup(endless), 1000))
    assert [r["id"] for r in first] == [str(i) for i in range(1000)]


@pytest.mark.given
def test_exact_deduper_rejects_non_strings():
    with pytest.raises(TypeError, match="str"):
        dd.ExactDeduper().add("a", b"bytes")
    with pytest.raises(TypeError, match="str"):
        dd.text_digest(3)
