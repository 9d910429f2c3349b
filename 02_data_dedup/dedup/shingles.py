# GENERATED from solutions/dedup/shingles.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 02_data_dedup/02_data_dedup.ipynb. Exercises in this file (line of each hole, then the commands):
#   2.3 Shingles: character and word n-grams: lines 25, 40, 58; `course check 2.3`, `course hint 2.3`
"""Shingles (exercise 2.3): a document as a set of character k-grams or word n-grams."""

from __future__ import annotations

import numpy as np

from .arguments import positive_int
from .hashing import _codepoints, sorted_unique, span_hashes


def char_shingles(text: str, k: int = 5) -> set[str]:
    """The set of character k-grams of `text`: `text[i:i + k]` for every start i.

    `char_shingles("abcd", 3) == {"abc", "bcd"}`, `char_shingles("abab", 2) == {"ab", "ba"}`.
    A non-empty text shorter than k is one shingle, the text itself (so short documents
    still compare); the empty text has none. Raises ValueError ("k must be a positive
    int") unless k is an int >= 1, TypeError if `text` is not a str.
    """
    positive_int("k", k)
    if not isinstance(text, str):
        raise TypeError(f"char_shingles expects a str, got {type(text).__name__}")
    raise NotImplementedError('Exercise 2.3: Shingles: character and word n-grams — see 02_data_dedup.ipynb')


def word_shingles(text: str, n: int = 5) -> set[str]:
    """The set of word n-grams of `text`, each written as its n words joined by one space.

    Words are what `str.split()` returns (runs of non-whitespace, any Unicode whitespace
    between), so the n-grams do not depend on indentation or line breaks:
    `word_shingles("a  b\\nc", 2) == {"a b", "b c"}`. A text with fewer than n words is one
    shingle, all of its words (`word_shingles("one two", 5) == {"one two"}`); a text without
    words has none. Raises ValueError ("n must be a positive int"), TypeError as `char_shingles`.
    """
    positive_int("n", n)
    if not isinstance(text, str):
        raise TypeError(f"word_shingles expects a str, got {type(text).__name__}")
    raise NotImplementedError('Exercise 2.3: Shingles: character and word n-grams — see 02_data_dedup.ipynb')


def shingle_hashes(text: str, kind: str = "word", n: int = 5) -> np.ndarray:
    """The sorted, distinct 32-bit hashes of the text's shingles, without building them.

    Returns uint32, shape (n_shingles,), strictly increasing: exactly
    `np.unique(hash_strings(list(word_shingles(text, n))))` for kind="word" (`char_shingles`
    for kind="char"), and an empty uint32 array when there are no shingles. So word hashes
    ignore the layout (`"def f(x):\\n    return x"` and `"def f(x): return x"` agree), char
    hashes do not. Raises ValueError for a kind not in `SHINGLE_KINDS` ("kind must be one
    of") or a bad n, TypeError if `text` is not a str.
    """
    if kind not in SHINGLE_KINDS:
        raise ValueError(f"kind must be one of {SHINGLE_KINDS}, got {kind!r}")
    positive_int("n", n)
    if not isinstance(text, str):
        raise TypeError(f"shingle_hashes expects a str, got {type(text).__name__}")
    raise NotImplementedError('Exercise 2.3: Shingles: character and word n-grams — see 02_data_dedup.ipynb')


SHINGLE_KINDS = ("word", "char")

# _IS_SPACE[c]: is code point c whitespace for str.split()? A table over all of Unicode
# (1.1 MB), so that one gather classifies every character of a text.
_IS_SPACE = np.zeros(0x110000, dtype=bool)
_IS_SPACE[[c for c in range(0x3001) if chr(c).isspace()]] = True  # none lies above U+3000


def words_joined(codes: np.ndarray) -> np.ndarray:
    """The code points of `" ".join(text.split())`, computed from the text's code points.

    Whitespace runs between words become one space; whitespace before the first or after
    the last word disappears. Array operations only, no Python string per word.
    """
    space = np.take(_IS_SPACE, codes)
    keep = ~space
    if not keep.any():
        return codes[:0]
    keep[:-1] |= space[:-1] & keep[1:]  # the last space of each run before a word ...
    keep[: np.argmin(space)] = False  # ... except the run before the first word
    joined = codes[keep]
    joined[space[keep]] = ord(" ")
    return joined
