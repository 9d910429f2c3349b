"""Exercises 2.9 (the byte-to-unicode map), 2.10 (the pre-tokenizer) and 2.12 (decoding)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course

dd = course.load("dedup")



def keep() -> list[int]:
    """The bytes that stand for themselves, read off the oracle: `tokenizers`' byte-level
    alphabet holds chr(b) exactly for them (the test states no rule of its own)."""
    pre_tokenizers = pytest.importorskip("tokenizers.pre_tokenizers")
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    return [b for b in range(256) if chr(b) in alphabet]

# text with what pre-tokenizers disagree on: digits (ASCII and Arabic-Indic), runs of
# spaces and newlines, contractions, CJK, emoji (astral), combining marks, \x1c (Python
# calls it whitespace, Unicode does not), NEL and the no-break space
hard_alphabet = list("ab Z9 0\n\t'sdlmtrve.,_(){}#") + ["'s", "'ll", "  ", "\n\n", "    ", "\u00a0", "\u3000",
                                                        "\x1c", "\x85", "中文", "😀", "👍🏽", "e\u0301", "٣", "Ⅻ", "𝔘"]
hard_text = st.lists(st.sampled_from(hard_alphabet), max_size=40).map("".join)


def tokenizers_pieces(text: str, scheme: str) -> list[str]:
    """The oracle: Hugging Face `tokenizers`' pre-tokenizers, mapped back to text."""
    pre_tokenizers = pytest.importorskip("tokenizers.pre_tokenizers")
    level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    pt = level if scheme == "gpt2" else pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), level])
    return [dd.token_to_bytes(p).decode("utf-8") for p, _ in pt.pre_tokenize_str(text)]


# ------------------------------------------------------------------------------ 2.9
@pytest.mark.exercise("2.9")
def test_byte_map_is_gpt2s():
    m = dd.bytes_to_unicode()
    assert sorted(m) == list(range(256)) and len(set(m.values())) == 256, "256 bytes, 256 distinct characters"
    kept = keep()
    for b in kept:
        assert m[b] == chr(b), (f"byte {b} ({chr(b)!r}) is printable in Latin-1 and not whitespace: it must stand "
                                f"for itself, got {m[b]!r}")
    others = [b for b in range(256) if b not in kept]
    got = [ord(m[b]) for b in others]
    assert got == list(range(256, 256 + len(others))), (
        f"the other {len(others)} bytes (whitespace, controls, and whatever Latin-1 does not print), in "
        f"increasing byte order, map to chr(256), chr(257), ...: got {[hex(g) for g in got[30:40]]} for bytes "
        f"{others[30:40]}")
    assert (m[0], m[10], m[32], m[127], m[160], m[173]) == ("Ā", "Ċ", "Ġ", "ġ", "ł", "Ń")


@pytest.mark.exercise("2.9")
def test_bytes_127_to_160_are_not_printable():
    m = dd.bytes_to_unicode()
    for b in range(127, 161):
        assert m[b] == chr(0x121 + b - 127), (
            f"byte {b} does not print in Latin-1 (DEL, a C1 control or the no-break space), so it is one of "
            f"the bytes numbered from chr(256) on, in byte order: expected U+{0x121 + b - 127:04X}, got {m[b]!r}")


@pytest.mark.exercise("2.9")
def test_token_strings_round_trip_every_byte_string():
    rng = np.random.default_rng(3)
    for n in [0, 1, 5, 40]:
        data = bytes(rng.integers(0, 256, n, dtype=np.uint8))
        assert dd.token_to_bytes(dd.bytes_to_token(data)) == data
    assert dd.bytes_to_token(b" hello\n") == "ĠhelloĊ"
    assert dd.bytes_to_token("é".encode()) == "Ã©"


# ------------------------------------------------------------------------------ 2.10
@pytest.mark.exercise("2.10")
def test_pretokenize_examples():
    p = dd.pretokenize
    assert p("hello  world") == ["hello", " ", " world"]
    assert p("x\n\n  y") == ["x", "\n\n ", " y"]
    assert p("I'll don't it's") == ["I", "'ll", " don", "'t", " it", "'s"]
    assert p("x = 2024;") == ["x", " =", " 2024", ";"]
    assert p("    return x  \n") == ["   ", " return", " x", "  \n"]
    assert p("") == [] and p("a") == ["a"]
    assert p("über 中文 😀!") == ["über", " 中文", " 😀!"]


@pytest.mark.exercise("2.10")
def test_smollm_splits_every_digit():
    p = dd.pretokenize
    assert p("x = 2024;", "smollm") == ["x", " =", " ", "2", "0", "2", "4", ";"], "smollm: each digit its own piece"
    assert p("x  12", "smollm") == ["x", "  ", "1", "2"], (
        "smollm: a digit ends the stretch before it, so the spaces before it stay one piece")
    assert p("x  12", "gpt2") == ["x", " ", " 12"]
    assert p("a1b", "smollm") == ["a", "1", "b"] and p("v2.0", "smollm") == ["v", "2", ".", "0"]
    assert p("٣٤ Ⅻ", "smollm") == ["٣", "٤", " ", "Ⅻ"], "every \\p{N} character is a digit here, not only 0-9"


@pytest.mark.exercise("2.10")
@pytest.mark.parametrize("scheme", ["gpt2", "smollm"])
@settings(max_examples=200, deadline=None)
@given(text=hard_text)
def test_pretokenize_matches_tokenizers(scheme, text):
    got = dd.pretokenize(text, scheme)
    assert "".join(got) == text, "the pieces must concatenate to the text"
    want = tokenizers_pieces(text, scheme)
    assert got == want, f"{scheme} pieces of {text!r}: got {got}, tokenizers gives {want}"


@pytest.mark.exercise("2.10")
def test_whitespace_is_unicodes_white_space_property():
    # U+001C is whitespace to Python's str.isspace (and re's \s) but not to Unicode's
    # White_Space property, which GPT-2's regex (the `regex` package) and tokenizers use
    assert dd.pretokenize("a\x1c\x1c b") == ["a", "\x1c\x1c", " b"]
    for text in ["a\u00a0\u00a0b", "x\x85\x85y", "\u3000\u3000z", "a\u2028 b"]:
        assert dd.pretokenize(text) == tokenizers_pieces(text, "gpt2"), f"pieces of {text!r}"


@pytest.mark.given
def test_pretokenize_refuses_bad_input():
    with pytest.raises(TypeError, match="str"):
        dd.pretokenize(b"bytes")
    with pytest.raises(ValueError, match="scheme"):
        dd.pretokenize("x", "llama3")


# ------------------------------------------------------------------------------ 2.12
def byte_vocab(extra: list[str] = ()) -> "dd.ByteLevelBPE":
    """The 256 byte tokens, then `extra` tokens made of two of them: a tiny vocabulary."""
    chars = [dd.bytes_to_unicode()[b] for b in range(256)]
    merges = []
    for t in extra:
        merges.append((t[0], t[1:]))
    return dd.ByteLevelBPE(chars + list(extra), merges)


@pytest.mark.exercise("2.12")
def test_decode_joins_bytes_before_utf8():
    tok = byte_vocab()
    e_acute = [tok.token_to_id(dd.bytes_to_unicode()[b]) for b in "é".encode()]
    assert tok.decode(e_acute) == "é", "a character split over two tokens must come back whole"
    emoji = [tok.token_to_id(dd.bytes_to_unicode()[b]) for b in "😀".encode()]
    assert tok.decode(emoji) == "😀"
    assert tok.decode([]) == ""
    assert tok.decode(np.array(emoji, dtype=np.int64)) == "😀", "NumPy ints are ids too"


@pytest.mark.exercise("2.12")
def test_decode_replaces_invalid_utf8_never_raises():
    tok = byte_vocab()
    ids = [tok.token_to_id(dd.bytes_to_unicode()[b]) for b in b"a\xff\xc3b\xe2\x82"]
    assert tok.decode(ids) == b"a\xff\xc3b\xe2\x82".decode("utf-8", errors="replace"), (
        "invalid UTF-8 becomes U+FFFD as bytes.decode(errors='replace') places it; decode never raises")
    rng = np.random.default_rng(0)
    for _ in range(200):
        ids = rng.integers(0, tok.vocab_size, rng.integers(1, 12)).tolist()
        data = b"".join(dd.token_to_bytes(tok.tokens[i]) for i in ids)
        assert tok.decode(ids) == data.decode("utf-8", errors="replace")


@pytest.mark.exercise("2.12")
def test_decode_refuses_ids_outside_the_vocabulary():
    tok = byte_vocab()
    with pytest.raises(ValueError, match="256"):
        tok.decode([1, 256])
    with pytest.raises(ValueError, match="-1"):
        tok.decode([-1])
    with pytest.raises(TypeError):
        tok.decode([1.0])
