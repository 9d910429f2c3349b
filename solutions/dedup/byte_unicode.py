"""The byte-to-unicode map (exercise 2.9): every byte as one printable character.

A byte-level BPE vocabulary is a list of byte strings, but GPT-2, Hugging Face's
`vocab.json` and GGUF's `tokenizer.ggml.tokens` store each token as text, one character
per byte, through a fixed map in which no byte becomes whitespace or a control character
(the space byte 0x20 is written `Ġ`, the newline `Ċ`).
"""

from __future__ import annotations

from functools import cache


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from each byte 0..255 to one printable character, a bijection.

    A byte b stands for itself, chr(b), exactly when its Latin-1 character chr(b) is
    printable and not whitespace as Python's `str.isprintable` and `str.isspace` see it: 188
    bytes. The other 68 bytes (the controls, the spaces, DEL, the no-break space, the soft
    hyphen), taken in increasing order, map to chr(256), chr(257), ... in that order: byte 0
    -> `Ā` (U+0100), byte 10 (newline) -> `Ċ`, byte 32 (space) -> `Ġ` (U+0120), byte 127 ->
    `ġ` (U+0121), byte 160 -> `ł` (U+0142), byte 173 -> `Ń` (U+0143), the last.

    Returns a new dict {byte: character} with 256 entries and 256 distinct one-character
    values, keys in increasing order (the caller may modify it).
    """
    # BEGIN SOLUTION 2.9
    # DECISION: how to tell the 188 bytes that keep their own character from the 68 that do not
    #   (the docstring gives the rule, not the ranges), and numbering the 68 from 256 in byte
    #   order (the order fixes every token string of every GPT-2-style vocabulary).
    # HINT: Which characters of 0..255 does the rule keep? Print them: they form three runs.
    # HINT: Three ranges keep themselves: ord("!")..ord("~"), ord("¡")..ord("¬"),
    #   ord("®")..ord("ÿ"), ends included. Every other byte gets the next unused code point
    #   from 256 on.
    # HINT: Walk b = 0..255 in order with a counter n = 0: a byte in the three ranges maps
    #   to chr(b); any other to chr(256 + n), then n += 1.
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1)) | set(
        range(ord("®"), ord("ÿ") + 1))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table
    # END SOLUTION


@cache
def _tables() -> tuple[tuple[str, ...], dict[str, int]]:
    forward = bytes_to_unicode()
    return tuple(forward[b] for b in range(256)), {c: b for b, c in forward.items()}


def byte_chars() -> tuple[str, ...]:
    """`bytes_to_unicode()` as a tuple indexed by byte (given code; computed once)."""
    return _tables()[0]


def unicode_to_bytes() -> dict[str, int]:
    """The inverse map, character -> byte (given code; a new dict each call)."""
    return dict(_tables()[1])


def token_to_bytes(token: str) -> bytes:
    """The bytes a vocabulary string stands for (given code).

    A string written in the byte alphabet (every character a value of `bytes_to_unicode`)
    is mapped back byte by byte: `token_to_bytes("Ġhello") == b" hello"`. Any other string
    (an added token such as a special token spelled outside the alphabet) stands for its own
    UTF-8 bytes, as Hugging Face's ByteLevel decoder reads it.
    """
    inverse = _tables()[1]
    try:
        return bytes(inverse[c] for c in token)
    except KeyError:
        return token.encode("utf-8")


def bytes_to_token(data: bytes) -> str:
    """The vocabulary string of `data` (given code): `bytes_to_token(b" hi") == "Ġhi"`."""
    chars = _tables()[0]
    return "".join(chars[b] for b in data)
