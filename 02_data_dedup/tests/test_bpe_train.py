"""Exercise 2.13: training byte-level BPE, checked against a slow reference and by hand
(the cases of Stanford CS336's assignment 1: counts over pre-tokens, the tie rule, special
tokens never merged)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course

dd = course.load("dedup")
pytestmark = pytest.mark.exercise("2.13")


def _merged(words: dict, best: tuple) -> dict:
    """Every word with each non-overlapping occurrence of the pair `best`, left to right, made one symbol."""
    new: dict[tuple[str, ...], int] = {}
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
    return new


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
        words = _merged(words, best)
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


def test_merges_never_cross_pieces():
    # run together, b"a" x5 and b"b" x5 would hold (a, a), (a, b), (b, b): apart they hold no pair
    assert dd.learn_merges({b"a": 5, b"b": 5}, 3) == [], (
        "pairs are counted inside each piece only: pieces of one byte hold no pair, so no merge")
    assert dd.learn_merges({b"xa": 2, b"by": 2, b"a": 9}, 1) == [(b"x", b"a")], (
        "(a, b) spans two pieces and never counts; (x, a) and (b, y) tie at 2, (x, a) is greater")


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


# ------------------------------------------------ train_bpe against a slow trainer and HF's
def slow_train(docs, vocab_size, special_tokens=(), tie="greatest bytes"):
    """The whole of train_bpe, readably: cut at the special tokens, pre-tokenize, then at
    every step recount every pair of every pre-token from scratch and merge the best one.

    tie="greatest bytes" is this course's (CS336's) rule: highest count, then the greatest
    (left bytes, right bytes). tie="smallest ids" is the rule of Hugging Face's BpeTrainer
    (`impl Ord for Merge` in tokenizers/src/models/bpe/trainer.rs: equal counts pop the
    smallest (left id, right id)), whose ids are the special tokens, then the 256 byte
    characters sorted by code point, then each new token in the order it was made.
    Returns (tokens, merges, tied, counts): tokens in this course's id order for "greatest
    bytes", in HF's id order for "smallest ids"; tied[k] says whether merge k had a tied
    count; counts[k] is every pair's count just before merge k.
    """
    chars = [dd.bytes_to_unicode()[b] for b in range(256)]
    specials = list(special_tokens)
    words: dict[tuple[str, ...], int] = {}
    cut = "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True))
    for doc in docs:
        for stretch in (re.split(cut, doc) if specials else [doc]):
            for piece in dd.pretokenize(stretch):
                w = tuple(chars[b] for b in piece.encode("utf-8"))
                words[w] = words.get(w, 0) + 1
    tokens = specials + (chars if tie == "greatest bytes" else sorted(chars))
    ids = {t: i for i, t in enumerate(tokens)}
    merges, tied, counts_at = [], [], []
    while len(tokens) < vocab_size:
        counts: dict[tuple[str, str], int] = {}
        for w, n in words.items():
            for pair in zip(w, w[1:]):
                counts[pair] = counts.get(pair, 0) + n
        if not counts:
            break
        counts_at.append(counts)
        top = max(counts.values())
        best_ones = [p for p, c in counts.items() if c == top]
        tied.append(len(best_ones) > 1)
        if tie == "greatest bytes":
            best = max(best_ones, key=lambda p: (dd.token_to_bytes(p[0]), dd.token_to_bytes(p[1])))
        else:
            best = min(best_ones, key=lambda p: (ids[p[0]], ids[p[1]]))
        merges.append(best)
        if best[0] + best[1] not in ids:
            ids[best[0] + best[1]] = len(tokens)
            tokens.append(best[0] + best[1])
        words = _merged(words, best)
    return tokens, merges, tied, counts_at


def which_rule(got, want, counts):
    """Which rule a wrong merge breaks, from the correct counts at that step."""
    if got not in counts:
        return (f"{got} never stand next to each other inside one pre-token: merges never cross a "
                "pre-token boundary or a special token, and special tokens are never merged")
    if counts[got] != counts[want]:
        return (f"{got} occurs {counts[got]} times and {want} {counts[want]}: the highest count wins, "
                "counted over all pre-tokens, weighted by their repeats, overlapping pairs each counted "
                "(b'aaa' holds (a, a) twice)")
    return (f"{got} and {want} tie at {counts[got]} under the counting rules: a tie goes to the greatest "
            "(left bytes, right bytes), the left symbol compared first (if your tie rule is that, your "
            "counts differ: over pre-tokens only, weighted by repeats, overlapping pairs each counted)")


def random_docs(seed, letters="abcé", n_words=30, n_docs=5, specials=()):
    """Documents of repeated random words over a few letters (ties are common), with the
    special tokens planted inside words and between them."""
    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(list(letters), int(rng.integers(1, 7)))) for _ in range(n_words)]
    glue = [" ", " ", "  ", "\n", *specials]
    docs = []
    for _ in range(n_docs):
        parts = [str(w) + str(rng.choice(glue)) for w in rng.choice(words, 20)]
        docs.append("".join(parts))
    return docs


@pytest.mark.parametrize("seed,specials,extra", [
    (0, (), 30), (1, ("<s>",), 40), (2, ("<|endoftext|>", "<s>"), 60), (3, ("<|im_start|>",), 25),
    (4, (), 80)])
def test_train_bpe_matches_the_slow_trainer(seed, specials, extra):
    docs = random_docs(seed, specials=specials)
    vocab = len(specials) + 256 + extra
    result = dd.train_bpe(docs, vocab, list(specials))
    tokens, merges, tied, counts = slow_train(docs, vocab, specials)
    assert any(tied), "these corpora are meant to force ties"
    for k, (got, want) in enumerate(zip(result.merges, merges)):
        assert tuple(got) == want, f"merge {k}: got {tuple(got)}, the rule gives {want}: " + which_rule(
            tuple(got), want, counts[k])
    assert len(result.merges) == len(merges), "one merge per new token, until vocab_size or no pairs left"
    assert result.tokens == tokens, "tokens: the special tokens, the 256 bytes in byte order, then one per new merge"


def test_forced_ties_between_mirror_words():
    # every pair of "ab ba cd dc xy yx" occurs equally often: only the tie rule decides
    docs = ["ab ba cd dc xy yx"] * 3
    result = dd.train_bpe(docs, 256 + 20)
    tokens, merges, tied, _ = slow_train(docs, 256 + 20)
    assert all(tied[:10])
    assert [tuple(m) for m in result.merges][:6] == [("y", "x"), ("x", "y"), ("d", "c"), ("c", "d"), ("b", "a"), ("a", "b")], (
        "equal counts: the greatest pair as bytes wins ((y, x) before (x, y), (d, c) before (c, d))")
    assert [tuple(m) for m in result.merges] == merges and result.tokens == tokens
    assert len(result.tokens) == 256 + 11, "no pairs left after 11 merges: fewer tokens than vocab_size"


def test_train_bpe_matches_hugging_face_until_the_first_tie():
    """HF's BpeTrainer and this course count the same pairs the same way; only ties differ
    (HF: smallest ids; here: greatest bytes). So the merges agree up to the first tie, and
    a slow trainer with HF's tie rule reproduces HF's merges and vocabulary entirely."""
    pytest.importorskip("tokenizers")
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    for seed in (10, 11, 12, 13):
        docs = random_docs(seed, letters="abcdeé", n_words=40)
        vocab = 1 + 256 + 30
        hf = Tokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        hf.train_from_iterator(docs, trainers.BpeTrainer(
            vocab_size=vocab, special_tokens=["<s>"], min_frequency=0, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        model = json.loads(hf.to_str())["model"]
        hf_merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
        hf_tokens = sorted(model["vocab"], key=model["vocab"].get)
        ours = [tuple(m) for m in dd.train_bpe(docs, vocab, ["<s>"]).merges]
        tied = slow_train(docs, vocab, ["<s>"])[2]
        first_tie = tied.index(True) if True in tied else len(tied)
        assert first_tie >= 1
        assert ours[:first_tie] == hf_merges[:first_tie], (
            f"seed {seed}: before the first tie (merge {first_tie}) the counts alone decide, "
            "so the merges must be HF's")
        assert slow_train(docs, vocab, ["<s>"], tie="smallest ids")[:2] == (hf_tokens, hf_merges), (
            "with HF's tie rule the slow trainer is HF's trainer: the counting rules are the same")
