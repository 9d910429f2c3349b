"""The pre-tokenizer (exercise 2.10): text cut into pieces, which BPE never merges across.
GPT-2's regex (Radford et al. 2019, `encoder.py`); SmolLM2's (llama.cpp's `smollm`) first
isolates every digit."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import NamedTuple

SCHEMES = ("gpt2", "smollm")


def split_pattern(c: CharClasses, scheme: str = "gpt2") -> str:
    """A pre-tokenizer as one regular expression over the fragments of `c`.

    `scheme="gpt2"`: GPT-2's alternatives, in this order (the first that matches wins): the
    contractions 's 't 're 've 'm 'll 'd (lowercase, ASCII apostrophe); an optional space
    (U+0020 only) and 1+ letters; an optional space and 1+ numbers; an optional space and 1+
    `other` characters; a run of spaces not followed by a non-space (`\\s+(?!\\S)`: before a
    word the run leaves its last space to the word); any run of spaces. `"hello  world"` ->
    `["hello", " ", " world"]`, `"x\\n\\n  y"` -> `["x", "\\n\\n ", " y"]` (`re.findall`).

    `scheme="smollm"` (SmolLM2, as its `tokenizer.json` says: `Digits(individual_digits=True)`,
    then GPT-2's split on each stretch between digits): every number character is a piece of
    its own, and GPT-2's rules cut the text between them as if each digit were the end of the
    text: `"x  12"` gives `["x", "  ", "1", "2"]` where GPT-2 gives `["x", " ", " 12"]`.

    The pieces concatenate to the text. Returns the pattern as a str; ValueError for a
    scheme not in `SCHEMES`. `c` holds one-character fragments (`CharClasses`, given below).
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    # BEGIN SOLUTION 2.10
    # DECISION: how GPT-2's alternatives are written with only the four one-character fragments
    #   (no \p{L}, no \s or \S: the lookahead `(?!\S)` too must be said with them), and for
    #   smollm, what a digit does to its neighbours: it is a piece alone and ends the stretch
    #   before it, like the end of the text.
    # HINT: Wrap each fragment in (?:...) before a `+`. The seven gpt2 alternatives, joined
    #   with `|`, in the docstring's order: `'s|'t|'re|'ve|'m|'ll|'d`, then ` ?` + letters, ...
    # HINT: `(?!\S)` means "followed by a space or by the end of the text": with the
    #   fragments, `(?=(?:SPACE)|\Z)`.
    # HINT: smollm: one number alone (no ` ?`, no `+`), and a run of spaces may also stop
    #   before a number: `(?=SPACE|NUMBER|\Z)`. Check `"x  1"` -> `["x", "  ", "1"]`.
    L, N, S, O = (f"(?:{x})" for x in c)  # noqa: E741  (letters, numbers, spaces, other: as the regex reads)
    if scheme == "gpt2":
        return rf"'s|'t|'re|'ve|'m|'ll|'d| ?{L}+| ?{N}+| ?{O}+|{S}+(?={S}|\Z)|{S}+"
    return rf"'s|'t|'re|'ve|'m|'ll|'d| ?{L}+|{N}| ?{O}+|{S}+(?={S}|{N}|\Z)|{S}+"
    # END SOLUTION


def pretokenize(text: str, scheme: str = "gpt2") -> list[str]:
    """The pieces of `text` under a scheme of `split_pattern`, in order (`re.findall` of its
    pattern, compiled once); they concatenate to `text`, and `""` has none. TypeError if
    `text` is not a str, ValueError for a scheme not in `SCHEMES` (given code)."""
    if not isinstance(text, str):
        raise TypeError(f"pretokenize expects a str, got {type(text).__name__}")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    return compiled(text.isascii(), scheme).findall(text)


# ---------------------------------------------------------------- given code
class CharClasses(NamedTuple):
    """Four regular-expression fragments, each matching exactly one character (given).

    `letter` is \\p{L} (Unicode categories Lu Ll Lt Lm Lo), `number` \\p{N} (Nd Nl No),
    `space` \\s as Unicode's White_Space property (what the `regex` package and Rust's
    engines call \\s; Python's own \\s adds U+001C..U+001F), and `other` any character that
    is none of the three. Each is safe inside `(?:...)` and may be repeated with `+`.
    """
    letter: str
    number: str
    space: str
    other: str


_WHITE_SPACE = (*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
                0x2029, 0x202F, 0x205F, 0x3000)  # Unicode's White_Space property
_ASTRAL = "\U00010000-\U0010ffff"


def _class(runs: list[tuple[int, int]]) -> str:
    """A character-class body (no brackets) of the code point runs (first, last)."""
    esc = re.escape
    return "".join(esc(chr(a)) if a == b else f"{esc(chr(a))}-{esc(chr(b))}" for a, b in runs)


@lru_cache(maxsize=2)
def char_classes(ascii_only: bool = False) -> CharClasses:
    """The fragments for all of Unicode (this Python's `unicodedata`), or for ASCII text only.

    Python's `re` tests a class of many ranges fast only below U+10000, so each class is a
    Basic Multilingual Plane class or, for an astral character, an astral one:
    `[bmp ranges]|(?=[astral])[astral ranges]`. Built once (a fraction of a second).
    """
    if ascii_only:
        return CharClasses("[A-Za-z]", "[0-9]", r"[\t\n\x0b\x0c\r ]", r"[^A-Za-z0-9\t\n\x0b\x0c\r ]")
    ws = set(_WHITE_SPACE)
    kind = {"L": "L", "N": "N"}
    # planes 4-13 hold no character yet and 15-16 are private use: all "other"
    labels = "".join("S" if cp in ws else kind.get(unicodedata.category(chr(cp))[0], "O")
                     for cp in (*range(0x40000), *range(0xE0000, 0xF0000)))
    labels = labels[:0x40000] + "O" * (0xE0000 - 0x40000) + labels[0x40000:] + "O" * 0x20000
    runs: dict[str, tuple[list, list]] = {k: ([], []) for k in "LNSO"}
    for m in re.finditer(r"L+|N+|S+|O+", labels):
        first, last = m.start(), m.end() - 1
        bmp, astral = runs[m.group()[0]]
        if first < 0x10000:
            bmp.append((first, min(last, 0xFFFF)))
        if last >= 0x10000:
            astral.append((max(first, 0x10000), last))

    def cls(k: str) -> str:
        bmp, astral = runs[k]
        return f"[{_class(bmp)}]" + (f"|(?=[{_ASTRAL}])[{_class(astral)}]" if astral else "")

    return CharClasses(cls("L"), cls("N"), cls("S"), cls("O"))


@lru_cache(maxsize=8)
def compiled(ascii_only: bool, scheme: str) -> re.Pattern:
    """`split_pattern(char_classes(ascii_only), scheme)`, compiled once."""
    return re.compile(split_pattern(char_classes(ascii_only), scheme))
