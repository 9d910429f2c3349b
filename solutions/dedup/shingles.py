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
    # BEGIN SOLUTION 2.3
    # DECISION: the window's boundaries (every start including the last, a short text as one
    #   shingle, the empty text as none), what a word is (str.split()), and for shingle_hashes how
    #   to cut spans out of one code-point array without building the strings.
    # HINT: char_shingles: handle the text shorter than k (and the empty one) first; then a
    #   set comprehension over every start 0 .. len(text) - k, the last included.
    if len(text) < k:
        return {text} if text else set()
    return {text[i:i + k] for i in range(len(text) - k + 1)}
    # END SOLUTION


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
    # BEGIN SOLUTION 2.3
    # HINT: word_shingles: the same as char_shingles over the list `text.split()`, each
    #   window of n words joined with " ".
    words = text.split()
    if len(words) < n:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}
    # END SOLUTION


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
    # BEGIN SOLUTION 2.3
    # HINT: shingle_hashes: a shingle is a span of one array of code points, and
    #   `span_hashes(codes, starts, ends)` hashes all spans at once; finish with `sorted_unique`.
    # HINT: shingle_hashes: for "char", `codes = _codepoints(text)` and spans [i, i + n) (one
    #   span [0, len) when shorter); for "word", `codes = words_joined(_codepoints(text))` and
    #   n-gram i runs from the start of word i (0, and each space + 1) to the end of word
    #   i + n - 1 (each space, and the length).
    codes = _codepoints(text)
    if kind == "word":
        codes = words_joined(codes)
    length = len(codes)
    if length == 0:
        return np.empty(0, np.uint32)
    if kind == "char":
        starts = np.arange(max(length - n + 1, 1))
        ends = np.minimum(starts + n, length)
    else:
        spaces = np.flatnonzero(codes == ord(" "))
        word_starts = np.concatenate(([0], spaces + 1))
        word_ends = np.concatenate((spaces, [length]))
        if len(word_starts) < n:  # fewer than n words: one shingle, all of them
            starts, ends = np.array([0]), np.array([length])
        else:  # n-gram i runs from the start of word i to the end of word i + n - 1
            starts, ends = word_starts[: len(word_starts) - n + 1], word_ends[n - 1:]
    return sorted_unique(span_hashes(codes, starts, ends))
    # END SOLUTION


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
