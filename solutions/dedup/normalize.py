"""Normalisation (exercise 2.1): one canonical string for texts that look the same."""

from __future__ import annotations

import unicodedata


def normalize_text(text: str) -> str:
    """The canonical form of `text`: equal-looking documents become equal strings.

    Returns a str that is, in this order of steps:
    - Unicode NFC (`"e\\u0301"` and `"\\u00e9"` both give `"\\u00e9"`; `"\\u212b"` gives `"\\u00c5"`);
    - with every line ending `\\r\\n` or lone `\\r` turned into `\\n` (`"a\\r\\r\\nb"` has two
      line breaks: `"a\\n\\nb"`);
    - with trailing whitespace, as `str.rstrip()` sees it (spaces, tabs, no-break and
      ideographic spaces, ...), removed from every line (lines split at `\\n`);
    - without the blank lines at the start and at the end (a line of only whitespace is
      blank): the result neither starts nor ends with `\\n`.
    Indentation and blank lines inside the text are kept: in code they matter.
    Idempotent: `normalize_text(normalize_text(t)) == normalize_text(t)`.
    Raises TypeError if `text` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"normalize_text expects a str, got {type(text).__name__}")
    # BEGIN SOLUTION 2.1
    # HINT: normalize_text: four steps in the docstring's order, each one line of string
    #   methods (`unicodedata.normalize` for NFC); replace "\r\n" before the lone "\r".
    # HINT: normalize_text: split at "\n", `rstrip()` each line, join with "\n", then strip
    #   only "\n" from both ends (the first line's indentation stays).
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text.strip("\n")
    # END SOLUTION
