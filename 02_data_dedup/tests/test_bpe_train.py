"""Exercise 2.13: training byte-level BPE, checked against a slow reference and by hand
(the cases of Stanford CS336's assignment 1: counts over pre-tokens, the tie rule, special
tokens never merged)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course

dd = course.load("dedup")
pytestmark = pytest.mark.exercise("2.13")


def slow_merges(pieces: dict[bytes, int], num_merges: int) -> list[tuple[bytes, bytes]]:
    """Recount every pair from scratch at every step: the rule, readably."""
    words = {tuple(bytes([b]) for b in p): n for p, n in pieces.items()}
    merges = []
    for _ in range(num_merges):
        counts: dict = {}
        for w, n in words.items():
            for pair in zip(w, w[1:]):
                counts[pair] = counts.get(pair, 0) + n
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], p))
        merges.append(best)
        new = {}
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + n
        words = new
    return merges


def test_the_handout_example():
    # CS336's example, with pre-tokens counted as GPT-2's regex cuts them
    corpus = ["low low low low low lower lower widest widest widest newest newest newest newest newest newest"]
    result = dd.train_bpe(corpus, 256 + 6)
    assert result.merges == [("s", "t"), ("e", "st"), ("o", "w"), ("l", "ow"), ("w", "est"), ("n", "e")], (
        "ties go to the lexicographically greatest pair: (s, t) and (e, s) both occur 9 times; (s, t) wins")
    assert result.tokens[256:] == ["st", "est", "ow", "low", "west", "ne"]
    assert result.tokens[:256] == [dd.bytes_to_unicode()[b] for b in range(256)]


def test_ties_go_to_the_greatest_pair():
    # (b"a", b"b") and (b"c", b"d") occur equally often: the greater pair, (c, d), merges first
    assert dd.learn_merges({b"ab": 3, b"cd": 3}, 2) == [(b"c", b"d"), (b"a", b"b")]
    # compared as bytes: b"\xc3" (the first byte of "é") is greater than b"z"
    assert dd.learn_merges({"zé".encode(): 1, b"za": 1}, 1)[0] == ("é".encode()[:1], "é".encode()[1:]), (
        "ties compare the pairs as bytes, (left, right) as a tuple")
    assert dd.learn_merges({b"aab": 1, b"ab": 5}, 1) == [(b"a", b"b")], "the count wins before the tie rule"


def test_counts_are_weighted_and_overlapping():
    # b"aaa" once holds (a, a) twice; b"ab" twice holds (a, b) twice: a tie, (a, b) is greater
    assert dd.learn_merges({b"aaa": 1, b"ab": 2}, 1) == [(b"a", b"b")]
    assert dd.learn_merges({b"aaa": 1, b"ab": 1}, 1) == [(b"a", b"a")], "overlapping pairs each count"
    # after (a, a), b"aaa" is [aa, a]: left to right, no overlap
    assert dd.learn_merges({b"aaa": 5}, 2) == [(b"a", b"a"), (b"aa", b"a")]
    assert dd.learn_merges({b"x": 9}, 3) == [], "no pairs left: no merges"


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_learn_merges_matches_the_slow_reference(seed):
    rng = np.random.default_rng(seed)
    pieces = {}
    for _ in range(int(rng.integers(1, 25))):
        p = bytes(rng.choice(np.frombuffer(b"aabbc\xc3\xa9 ", np.uint8), int(rng.integers(1, 9))))
        pieces[p] = pieces.get(p, 0) + int(rng.integers(1, 6))
    n = int(rng.integers(1, 30))
    assert dd.learn_merges(pieces, n) == slow_merges(pieces, n), f"pieces {pieces}"


def test_special_tokens_are_never_merged():
    corpus = ["hello<|endoftext|>hello<|endoftext|>" * 20 + "<|end", "<|endoftext|>" * 50]
    result = dd.train_bpe(corpus, 256 + 1 + 40, ["<|endoftext|>"])
    assert result.tokens[0] == "<|endoftext|>"
    learned = [dd.token_to_bytes(t) for t in result.tokens[257:]]
    assert all(b"endoftext" not in t and b"o<" not in t and b">h" not in t for t in learned), (
        f"no merge may learn from or across a special token: {[t for t in learned if b'>' in t or b'<' in t]}")


def test_vocabulary_layout_and_size():
    docs = [r["text"] for r in dd.iter_corpus(packages=["json"])]
    result = dd.train_bpe(docs, 400, ["<|im_start|>", "<|im_end|>"])
    assert len(result.tokens) == 400 and len(result.merges) == 400 - 258
    assert result.tokens[:2] == ["<|im_start|>", "<|im_end|>"]
    tok = dd.ByteLevelBPE(result.tokens, result.merges, ["<|im_start|>", "<|im_end|>"])
    assert tok.token_to_id(dd.bytes_to_unicode()[ord("a")]) == 2 + ord("a")
    for a, b in result.merges:
        assert a + b in tok._ids, "every merge spells a token"
    assert dd.train_bpe(list(reversed(docs)), 400, ["<|im_start|>", "<|im_end|>"]) == result, (
        "the vocabulary must not depend on the order of the documents")


def test_train_bpe_refuses_bad_input():
    with pytest.raises(ValueError, match="vocab_size"):
        dd.train_bpe(["abc"], 256, ["<s>"])
    with pytest.raises(ValueError, match="single byte"):
        dd.train_bpe(["abc"], 300, ["a"])
    with pytest.raises(ValueError, match="twice"):
        dd.train_bpe(["abc"], 300, ["<s>", "<s>"])
    with pytest.raises(TypeError):
        dd.train_bpe("abc", 300)
