"""Normalisation (exercise 2.1): one canonical string for texts that look the same."""

from __future__ import annotations

import unicodedata


def normalize_text(text: str) -> str:
    """The canonical form of `text`: equal-looking documents become equal strings.

    The result is in Unicode NFC (`"e\\u0301"` and `"\\u00e9"` both give `"\\u00e9"`;
    `"\\u212b"` gives `"\\u00c5"`) and breaks lines only with `\\n`: each `\\r\\n` and each
    lone `\\r` of the input is one line break (`"a\\r\\r\\nb"` gives `"a\\n\\nb"`). No line
    (split at `\\n`) ends in whitespace as `str.rstrip()` sees it (spaces, tabs, no-break and
    ideographic spaces, ...), and the blank lines (only whitespace) at the start and at the
    end are gone: the result neither starts nor ends with `\\n`. Nothing else changes:
    indentation (the first line's too) and blank lines inside the text are kept; in code
    they matter.
    Idempotent: `normalize_text(normalize_text(t)) == normalize_text(t)`.
    Raises TypeError if `text` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"normalize_text expects a str, got {type(text).__name__}")
    # BEGIN SOLUTION 2.1
    # DECISION: the order of the normalisation steps (line endings before trailing whitespace, \r\n
    #   before a lone \r, so the result is idempotent), what is stripped and what must stay
    #   (indentation, inner blank lines), and the filters' boundaries (inclusive bounds, the first
    #   failing reason only).
    # HINT: normalize_text: four steps, each one line of string methods, in this order: NFC
    #   (`unicodedata.normalize`), the line endings (replace "\r\n" before the lone "\r"),
    #   the trailing whitespace of every line, the blank lines at both ends.
    # HINT: normalize_text: split at "\n", `rstrip()` each line, join with "\n", then strip
    #   only "\n" from both ends (the first line's indentation stays).
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text.strip("\n")
    # END SOLUTION
