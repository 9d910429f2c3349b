"""Exercises 2.3 (shingles) and 2.4 (MinHash), with datasketch as the oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course

dd = course.load("dedup")

# Texts whose whitespace comes in every kind str.split() knows, with non-ASCII letters.
texty = st.lists(st.sampled_from(list("abc \t\n\u00e9\u4e2d\u2028\x1c") + ["  ", "de"]), max_size=50).map("".join)


# ------------------------------------------------------------------------------ 2.3


@pytest.mark.exercise("2.3")
def test_char_shingles_examples():
    assert dd.char_shingles("abcd", 3) == {"abc", "bcd"}
    assert dd.char_shingles("abab", 2) == {"ab", "ba"}
    assert dd.char_shingles("ab", 5) == {"ab"}  # shorter than k: the text itself
    assert dd.char_shingles("", 5) == set()


@pytest.mark.exercise("2.3")
def test_word_shingles_examples():
    assert dd.word_shingles("a  b\nc", 2) == {"a b", "b c"}
    assert dd.word_shingles("def f(x):\n    return x", 3) == {"def f(x): return", "f(x): return x"}
    assert dd.word_shingles("one two", 5) == {"one two"}  # fewer than n words: all of them
    assert dd.word_shingles(" \n\t", 5) == set()


@pytest.mark.exercise("2.3")
@settings(max_examples=120, deadline=None)
@given(texty, st.sampled_from(["word", "char"]), st.integers(1, 6))
def test_shingle_hashes_equal_hashes_of_the_readable_shingles(text, kind, n):
    fast = dd.shingle_hashes(text, kind, n)
    readable = dd.word_shingles(text, n) if kind == "word" else dd.char_shingles(text, n)
    assert fast.dtype == np.uint32
    assert np.all(np.diff(fast.astype(np.int64)) > 0)  # sorted and distinct
    expected = np.unique(dd.hash_strings(sorted(readable))) if readable else np.empty(0, np.uint32)
    np.testing.assert_array_equal(fast, expected)


@pytest.mark.exercise("2.3")
def test_shingle_hashes_ignore_layout_for_words_not_for_chars():
    a = "def f(x):\n    return x + 1"
    b = "def f(x): return x + 1"
    np.testing.assert_array_equal(dd.shingle_hashes(a, "word", 3), dd.shingle_hashes(b, "word", 3))
    assert not np.array_equal(dd.shingle_hashes(a, "char", 3), dd.shingle_hashes(b, "char", 3))


@pytest.mark.given
def test_shingle_arguments_rejected():
    with pytest.raises(ValueError, match="n must be a positive int"):
        dd.word_shingles("a b", 0)
    with pytest.raises(ValueError, match="k must be a positive int"):
        dd.char_shingles("a b", -1)
    with pytest.raises(ValueError, match="kind must be one of"):
        dd.shingle_hashes("a b", "line", 2)
    with pytest.raises(TypeError, match="str"):
        dd.shingle_hashes(b"a b", "word", 2)
    with pytest.raises(ValueError, match="empty string"):
        dd.hash_strings(["a", ""])
    with pytest.raises(TypeError, match="strings"):
        dd.hash_strings(["a", 3])


@pytest.mark.given
def test_span_hashes_depend_on_content_only():
    codes = dd._codepoints("xabcyabcz")
    h = dd.span_hashes(codes, [1, 5, 0], [4, 8, 3])
    assert h[0] == h[1] != h[2]
    np.testing.assert_array_equal(dd.hash_strings(["abc", "xab"]), h[[0, 2]])


# ------------------------------------------------------------------------------ 2.4


def _sets_with_overlap(rng, inter: int, only_a: int, only_b: int) -> tuple[np.ndarray, np.ndarray]:
    """Two sets of random distinct 32-bit keys with |A∩B| = inter, |A-B| = only_a, |B-A| = only_b."""
    total = inter + only_a + only_b
    keys = np.unique(rng.integers(0, 2**32, 2 * total + 16, dtype=np.uint64))
    keys = rng.permutation(keys)[:total].astype(np.uint32)
    a = np.concatenate([keys[:inter], keys[inter:inter + only_a]])
    b = np.concatenate([keys[:inter], keys[inter + only_a:]])
    return a, b


@pytest.mark.exercise("2.4")
def test_signature_shape_dtype_and_definition():
    """The signature is, per permutation, the minimum of (a*x + b) mod 2**32 over the keys."""
    hasher = dd.MinHasher(num_perm=64, seed=3)
    rng = np.random.default_rng(0)
    docs = [np.unique(rng.integers(0, 2**32, size, dtype=np.uint64)).astype(np.uint32)
            for size in (1, 31, 32, 33, 200, 1000)]
    sig = hasher.signatures(docs)
    assert sig.shape == (len(docs), 64) and sig.dtype == np.uint32
    for doc, row in zip(docs, sig):
        slow = ((doc.astype(np.uint64)[:, None] * hasher.a + hasher.b) % 2**32).min(axis=0)
        np.testing.assert_array_equal(row, slow)


@pytest.mark.exercise("2.4")
def test_signatures_do_not_depend_on_the_batch():
    hasher = dd.MinHasher(num_perm=32, seed=5)
    texts = [f"document number {i} " + "shared words appear here " * (i % 7 + 1) for i in range(40)]
    together = hasher.signatures(texts)
    alone = np.stack([hasher.signatures([t])[0] for t in texts])
    reversed_ = hasher.signatures(texts[::-1])[::-1]
    np.testing.assert_array_equal(together, alone)
    np.testing.assert_array_equal(together, reversed_)


@pytest.mark.exercise("2.4")
@pytest.mark.parametrize("rows_per_block", [1, 2, 5])
def test_a_document_spread_over_blocks_keeps_its_minimum(rows_per_block):
    """`rows_per_block` bounds the memory, nothing else: with blocks smaller than a document
    (its keys spread over several blocks), each block can only lower what the blocks before it
    found."""
    hasher = dd.MinHasher(num_perm=16, seed=2)
    rng = np.random.default_rng(rows_per_block)
    docs = [np.unique(rng.integers(0, 2**32, size, dtype=np.uint64)).astype(np.uint32)
            for size in (300, 5, 64, 33, 1)]
    got = hasher.signatures(docs, rows_per_block=rows_per_block)
    want = hasher.signatures(docs)  # the default block holds every row here
    for d, doc in enumerate(docs):
        slow = ((doc.astype(np.uint64)[:, None] * hasher.a + hasher.b) % 2**32).min(axis=0)
        np.testing.assert_array_equal(want[d], slow)
        np.testing.assert_array_equal(got[d], slow, err_msg=(
            f"document {d} ({len(doc)} keys) with rows_per_block={rows_per_block}: each position must be "
            "the minimum over all the document's keys, whichever blocks they fell in"))


@pytest.mark.exercise("2.4")
def test_texts_sets_and_hash_arrays_give_the_same_signature():
    hasher = dd.MinHasher(num_perm=48, seed=9, shingle="char", n=4)
    text = "import os\nprint(os.getcwd())\n"
    from_text = hasher.signatures([text])
    from_set = hasher.signatures([dd.char_shingles(text, 4)])
    from_keys = hasher.signatures([dd.shingle_hashes(text, "char", 4)])
    np.testing.assert_array_equal(from_text, from_set)
    np.testing.assert_array_equal(from_text, from_keys)


@pytest.mark.exercise("2.4")
def test_empty_document_and_seed():
    sig = dd.MinHasher(num_perm=16, seed=1).signatures(["", "a b c d e f"])
    assert np.all(sig[0] == dd.EMPTY) and not np.all(sig[1] == dd.EMPTY)
    again = dd.MinHasher(num_perm=16, seed=1).signatures(["a b c d e f"])
    other = dd.MinHasher(num_perm=16, seed=2).signatures(["a b c d e f"])
    np.testing.assert_array_equal(sig[1:], again)
    assert not np.array_equal(again, other)


@pytest.mark.exercise("2.4")
def test_estimate_jaccard_counts_agreeing_positions():
    a = np.array([1, 2, 3, 4], np.uint32)
    b = np.array([1, 0, 3, 0], np.uint32)
    assert dd.estimate_jaccard(a, b) == 0.5
    many = dd.estimate_jaccard(np.stack([a, a, b]), np.stack([a, b, a]))
    np.testing.assert_allclose(many, [1.0, 0.5, 0.5])


@pytest.mark.exercise("2.4")
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 300), st.integers(0, 300), st.integers(0, 300), st.integers(0, 2**32 - 1))
def test_estimate_within_statistical_bound(inter, only_a, only_b, seed):
    """Each agreement is a Bernoulli(J) draw: the estimate has std sqrt(J(1-J)/P).

    The bound is 5 standard deviations plus 1/P (a 1-in-3.5-million miss for an ideal
    MinHash, so a failure means a bug, not bad luck).
    """
    if inter + only_a + only_b == 0:
        return
    rng = np.random.default_rng(seed)
    a, b = _sets_with_overlap(rng, inter, only_a, only_b)
    true_j = inter / (inter + only_a + only_b)
    num_perm = 256
    sig = dd.MinHasher(num_perm=num_perm, seed=11).signatures([a, b])
    est = dd.estimate_jaccard(sig[0], sig[1])
    assert abs(est - true_j) <= 5 * np.sqrt(true_j * (1 - true_j) / num_perm) + 1 / num_perm


@pytest.mark.exercise("2.4")
def test_estimator_unbiased_with_the_predicted_spread():
    """Over 400 independent pairs at J = 0.5: mean error ~ 0, spread ~ sqrt(J(1-J)/P)."""
    rng = np.random.default_rng(2024)
    num_perm, true_j = 128, 0.5
    docs = []
    for _ in range(400):
        docs += _sets_with_overlap(rng, 100, 50, 50)
    sig = dd.MinHasher(num_perm=num_perm, seed=4).signatures(docs)
    est = dd.estimate_jaccard(sig[0::2], sig[1::2])
    sigma = np.sqrt(true_j * (1 - true_j) / num_perm)
    assert abs(est.mean() - true_j) <= 4 * sigma / np.sqrt(len(est))
    assert 0.8 * sigma <= est.std() <= 1.2 * sigma


@pytest.mark.exercise("2.4")
def test_estimates_agree_with_datasketch(planted):
    """Same documents, same shingles, same num_perm: both estimate the same Jaccard.

    Each estimate has std <= sqrt(0.25/128) = 0.044 (mean absolute error about 0.8 std,
    ~0.03 over these pairs), so the two differ per pair by less than 6 * sqrt(2) * 0.044
    = 0.38 and on average by well under 0.07; both are within 0.045 of the exact Jaccard
    on average.
    """
    from datasketch import MinHash

    num_perm = 128
    shingles = planted.sets
    ours = dd.MinHasher(num_perm=num_perm, seed=1).signatures([set(s) for s in shingles])
    theirs = MinHash.bulk([[s.encode("utf-8") for s in doc] for doc in shingles], num_perm=num_perm, seed=1)
    pairs = [p for p, s in planted.sims.items() if s > 0.2]  # the related pairs (same base)
    assert len(pairs) >= 200
    i, j = np.array(pairs).T
    truth = np.array([planted.sims[p] for p in pairs])
    est_ours = dd.estimate_jaccard(ours[i], ours[j])
    est_theirs = np.array([theirs[a].jaccard(theirs[b]) for a, b in pairs])
    assert np.max(np.abs(est_ours - est_theirs)) < 0.38
    assert np.mean(np.abs(est_ours - est_theirs)) < 0.07
    assert np.mean(np.abs(est_ours - truth)) < 0.045
    assert np.mean(np.abs(est_theirs - truth)) < 0.045


@pytest.mark.given
def test_minhasher_arguments_rejected():
    with pytest.raises(ValueError, match="num_perm"):
        dd.MinHasher(num_perm=0)
    with pytest.raises(ValueError, match="seed"):
        dd.MinHasher(seed=-1)
    with pytest.raises(ValueError, match="shingle"):
        dd.MinHasher(shingle="line")
    hasher = dd.MinHasher(num_perm=8)
    with pytest.raises(TypeError, match="list of documents"):
        hasher.signatures("just one text")
    with pytest.raises(TypeError, match="docs\\[0\\]"):
        hasher.shingle_keys([42, "text"])
    with pytest.raises(ValueError, match="docs\\[0\\]"):
        hasher.shingle_keys([np.array([-1, 2])])
    with pytest.raises(ValueError, match="last dimension"):
        dd.estimate_jaccard(np.zeros(4), np.zeros(5))
