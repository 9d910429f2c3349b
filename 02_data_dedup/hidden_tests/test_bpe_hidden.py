"""Stage 02's tokenizer, held-out cases (exercises 2.9-2.13): other texts, vocabularies and
seeds than the visible tests, each reported with `course.answer` and checked against a
slow reference or Hugging Face `tokenizers`."""

from __future__ import annotations

import numpy as np
import pytest

import course

dd = course.load("dedup")


def slow_merge(ids, ranks):
    ids = list(ids)
    while len(ids) > 1:
        found = [(ranks[p][0], i) for i, p in enumerate(zip(ids, ids[1:])) if p in ranks]
        if not found:
            return ids
        _, i = min(found)
        ids[i:i + 2] = [ranks[(ids[i], ids[i + 1])][1]]
    return ids


# ---------------------------------------------------------------------- 2.9
@pytest.mark.exercise("2.9")
def test_byte_map_every_value():
    m = dd.bytes_to_unicode()
    course.answer("map", [m[b] for b in range(256)])
    printable = [b for b in range(256) if m[b] == chr(b)]
    assert len(printable) == 188 and 127 not in printable and 173 not in printable and 160 not in printable
    assert m[173] == "\u0143" and m[161] == "¡" and m[33] == "!" and m[126] == "~"


# ---------------------------------------------------------------------- 2.10
@pytest.mark.exercise("2.10")
@pytest.mark.parametrize("scheme", ["gpt2", "smollm"])
def test_pretokenize_corners(scheme):
    texts = ["'S 's 'LL x'll", "a\r\n\r\n  b", "   ", "\n", "1 22 333 4444", "i18n l10n", "💩💩 x💩",
             "tab\tsep\t\tvalue", "τέλος١٢٣", "  \u0301a", "x  \n  1", "''s"]
    got = [dd.pretokenize(t, scheme) for t in texts]
    course.answer("pieces", got)
    tk = pytest.importorskip("tokenizers.pre_tokenizers")
    level = tk.ByteLevel(add_prefix_space=False, use_regex=True)
    pt = level if scheme == "gpt2" else tk.Sequence([tk.Digits(individual_digits=True), level])
    for t, g in zip(texts, got):
        assert g == [dd.token_to_bytes(p).decode() for p, _ in pt.pre_tokenize_str(t)], repr(t)


# ---------------------------------------------------------------------- 2.11
@pytest.mark.exercise("2.11")
def test_merge_ids_random_tables_other_seeds():
    rng = np.random.default_rng(1234)
    results = []
    for _ in range(200):
        n_base = int(rng.integers(2, 4))
        ranks, symbols = {}, list(range(n_base))
        for rank in range(int(rng.integers(1, 16))):
            pair = (int(rng.choice(symbols)), int(rng.choice(symbols)))
            if pair not in ranks:
                ranks[pair] = (rank, len(symbols))
                symbols.append(len(symbols))
        ids = rng.integers(0, n_base, int(rng.integers(0, 60))).tolist()
        got = dd.merge_ids(ids, ranks)
        assert got == slow_merge(ids, ranks)
        results.append(got)
    course.answer("merged", results)


@pytest.mark.exercise("2.11")
def test_encode_with_a_trained_vocabulary_and_specials():
    tk = pytest.importorskip("tokenizers")
    from tokenizers import AddedToken, models, pre_tokenizers

    docs = [r["text"] for r in dd.iter_corpus(packages=["pydoc_data"])][:60]
    result = dd.train_bpe(docs, 700, ["<|endoftext|>", "<|fim|>"], pretokenizer="smollm")
    tok = dd.ByteLevelBPE(result.tokens, result.merges, ["<|endoftext|>", "<|fim|>"], pretokenizer="smollm")
    hf = tk.Tokenizer(models.BPE({t: i for i, t in enumerate(result.tokens)}, result.merges))
    hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<|endoftext|>", "<|fim|>")])
    texts = ["<|fim|>def f(x):\n    return 42<|endoftext|>", "version 3.11.7 <|endoftext|><|fim|>",
             "<|endoftext", "Ünïcödé  \n\n\t 100%"] + docs[60:70] + docs[::7]
    got = [tok.encode(t) for t in texts]
    course.answer("ids", got)
    assert got == [hf.encode(t, add_special_tokens=False).ids for t in texts]


def _visible(name: str):
    """A visible test module of this stage, by file name (its helpers and oracles)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "tests" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_visible_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.exercise("2.11")
def test_every_corpus_document_gets_smollm2s_ids():
    """SmolLM2's ids of EVERY corpus document (the visible test: a sample of them)."""
    visible = _visible("test_bpe_smollm2")
    meta = visible.smollm2_metadata()
    digests = visible.check_corpus_ids((meta, {}, visible.oracle(meta)), list(dd.iter_corpus()))
    course.answer("digests", digests)


# ---------------------------------------------------------------------- 2.12
@pytest.mark.exercise("2.12")
def test_decode_random_bytes_and_merged_tokens():
    chars = [dd.bytes_to_unicode()[b] for b in range(256)]
    extra = ["Ġt", "Ã©", "ðŁ"]  # " t", "é", and the first two bytes of a 4-byte emoji
    tok = dd.ByteLevelBPE(chars + extra, [("Ġ", "t"), ("Ã", "©"), ("ð", "Ł")])
    rng = np.random.default_rng(99)
    seqs = [rng.integers(0, tok.vocab_size, int(rng.integers(0, 10))).tolist() for _ in range(300)]
    got = [tok.decode(s) for s in seqs]
    course.answer("texts", got)
    for s, g in zip(seqs, got):
        assert g == b"".join(dd.token_to_bytes(tok.tokens[i]) for i in s).decode("utf-8", errors="replace")
    with pytest.raises(ValueError):
        tok.decode([tok.vocab_size])


# ---------------------------------------------------------------------- 2.13
@pytest.mark.exercise("2.13")
def test_train_on_pydoc_topics():
    docs = [r["text"] for r in dd.iter_corpus(packages=["pydoc_data"])][:80]
    result = dd.train_bpe(docs, 256 + 1 + 120, ["<|endoftext|>"])
    course.answer("merges", [list(m) for m in result.merges])
    course.answer("tokens", result.tokens)
    assert len(result.tokens) == 377 and result.tokens[0] == "<|endoftext|>"


@pytest.mark.exercise("2.13")
def test_learn_merges_other_pieces():
    rng = np.random.default_rng(77)
    outs = []
    for _ in range(40):
        pieces = {}
        for _ in range(int(rng.integers(1, 30))):
            p = bytes(rng.choice(np.frombuffer(b"xyyz\xe4\xb8\xad  ", np.uint8), int(rng.integers(1, 12))))
            pieces[p] = pieces.get(p, 0) + int(rng.integers(1, 4))
        outs.append([[a.hex(), b.hex()] for a, b in dd.learn_merges(pieces, 25)])
    course.answer("merges", outs)


@pytest.mark.exercise("2.13")
def test_train_bpe_against_the_slow_trainer_other_corpora():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "_visible_bpe_train", Path(__file__).parents[1] / "tests" / "test_bpe_train.py")
    visible = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(visible)
    outs = []
    for seed, specials, letters in ((101, ("<|endoftext|>",), "xyz "), (102, ("<a>", "<ab>"), "abé中"),
                                    (103, (), "aab"), (104, ("<s>",), "pq\u0301")):
        docs = visible.random_docs(seed, letters=letters, n_words=25, specials=specials)
        vocab = len(specials) + 256 + 45
        got = dd.train_bpe(docs, vocab, list(specials))
        tokens, merges = visible.slow_train(docs, vocab, specials)[:2]
        assert [tuple(m) for m in got.merges] == merges, f"seed {seed}: merges differ from the slow trainer's"
        assert got.tokens == tokens
        outs.append([list(m) for m in got.merges])
    course.answer("merges", outs)
