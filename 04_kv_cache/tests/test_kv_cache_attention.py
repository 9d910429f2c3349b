"""Exercise 4.1: attention against a cache (`forward_cached`).

These tests need no cache of the learner's: they run `forward_cached` against `DictCache`
below, the cache protocol at its simplest (a dict of tokens, slow and obviously right), so
4.1 can be checked before 4.2-4.4 exist.

Each core property is checked on two decoders (conftest's `decoder`): the course's GPT and a
tiny Llama, SmolLM2's architecture (RoPE rotating q and k at each token's position, 4 query
heads sharing 2 K/V heads), whose cache holds the K/V heads only.

The oracle is the model's own full forward `model(idx)` (plain causal attention over the
whole sequence). A cached forward computes the same sums in a different order (one key set
per query instead of a causal mask), so logits agree to float32 rounding, ~1e-6 on these
models; ATOL = 1e-4 leaves room for that and nothing else.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import course

kc = course.load("kv_cache")

ATOL = 1e-4


class DictCache:
    """The cache protocol at its simplest: {(layer, row, position): (k, v)}; unwritten = 0."""

    def __init__(self, model, batch: int, max_len: int | None = None):
        cfg = model.config
        self.n_layer, self.batch = cfg.n_layer, batch
        self.max_len = max_len or cfg.block_size
        self.zero = torch.zeros(kc.kv_heads(model), cfg.head_dim)  # K/V heads: fewer on a Llama
        self.lengths = torch.zeros(batch, dtype=torch.long)
        self.store: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self.writes: list[tuple[int, int, int]] = []

    def reserve(self, rows, new_lengths):
        if int(new_lengths.max()) > self.max_len:
            raise kc.CacheFullError(f"needs {int(new_lengths.max())} > {self.max_len}")

    def write(self, layer, rows, positions, k, v):
        assert rows.shape == positions.shape == k.shape[:1] == v.shape[:1]
        for r, p, kk, vv in zip(rows.tolist(), positions.tolist(), k, v):
            self.store[layer, r, p] = (kk.clone(), vv.clone())
            self.writes.append((layer, r, p))

    def view(self, layer, rows, length):
        rows = list(range(self.batch))[rows] if isinstance(rows, slice) else rows.tolist()
        get = lambda r, p, i: self.store.get((layer, r, p), (self.zero, self.zero))[i]  # noqa: E731
        return tuple(torch.stack([torch.stack([get(r, p, i) for p in range(length)], dim=1) for r in rows])
                     for i in (0, 1))


def full_logits(model, seq: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([seq]))[0]


def rand_seq(n: int, seed: int) -> list[int]:
    return torch.randint(0, 257, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def padded(seqs: list[list[int]], fill: int = 0) -> torch.Tensor:
    width = max(map(len, seqs))
    return torch.tensor([s + [fill] * (width - len(s)) for s in seqs])


@pytest.mark.exercise("4.1")
def test_prefill_equals_the_full_forward(decoder):
    seq = rand_seq(40, 0)
    cache = DictCache(decoder, 1)
    logits = kc.forward_cached(decoder, torch.tensor([seq]), cache)
    assert logits.shape == (1, 40, decoder.config.vocab_size)
    torch.testing.assert_close(logits[0], full_logits(decoder, seq), atol=ATOL, rtol=0)
    assert cache.lengths.tolist() == [40]
    assert sorted(cache.writes) == sorted((layer, 0, p) for layer in range(2) for p in range(40))


@pytest.mark.exercise("4.1")
def test_decode_steps_equal_the_full_forward(decoder):
    seq = rand_seq(30, 1)
    cache = DictCache(decoder, 1)
    kc.forward_cached(decoder, torch.tensor([seq[:10]]), cache)
    ref = full_logits(decoder, seq)
    for t in range(10, 30):
        out = kc.forward_cached(decoder, torch.tensor([[seq[t]]]), cache)
        assert out.shape == (1, 1, decoder.config.vocab_size)
        torch.testing.assert_close(out[0, 0], ref[t], atol=ATOL, rtol=0, msg=lambda m, t=t: (
            f"decode of the token at position {t} ({t} cached): its logits differ from the full "
            f"forward's at {t}. A new token at absolute position p attends to every position 0..p "
            f"of its row: the whole cached prefix (cache.view of the new length, not just the new "
            f"tokens) and itself; on a Llama its q and k are also rotated at p, the absolute position "
            f"(attn.qkv(h, pos)), not at its index among the new tokens. {m}"))
        assert cache.lengths.tolist() == [t + 1], (
            f"after decoding position {t}, cache.lengths is {cache.lengths.tolist()}; it becomes "
            f"the new length, [{t + 1}], after the last layer")


@pytest.mark.exercise("4.1")
def test_chunked_prefill_equals_an_unchunked_run(decoder):
    """A prompt fed in chunks, each attending to the chunks before it through the cache."""
    seq = rand_seq(50, 2)
    cache = DictCache(decoder, 1)
    chunks = [(0, 7), (7, 8), (8, 31), (31, 50)]
    out = torch.cat([kc.forward_cached(decoder, torch.tensor([seq[a:b]]), cache) for a, b in chunks], dim=1)
    torch.testing.assert_close(out[0], full_logits(decoder, seq), atol=ATOL, rtol=0, msg=lambda m: (
        f"a prompt fed in chunks {chunks} differs from the full forward: token t of a chunk is at "
        f"position lengths + t, and attends to the earlier chunks through the cache and to the "
        f"chunk's tokens up to itself. {m}"))


@pytest.mark.exercise("4.1")
def test_ragged_prefill_never_sees_padding_or_other_rows(decoder):
    seqs = [rand_seq(n, 10 + n) for n in (5, 17, 1, 12)]
    n_new = torch.tensor([len(s) for s in seqs])
    outs = []
    for fill in (0, 200):  # what the padding holds must not matter
        cache = DictCache(decoder, 4)
        outs.append(kc.forward_cached(decoder, padded(seqs, fill), cache, n_new=n_new))
        assert cache.lengths.tolist() == n_new.tolist()
        assert all(p < len(seqs[r]) for _, r, p in cache.writes), "padding was written to the cache"
    for b, s in enumerate(seqs):
        ref = full_logits(decoder, s)
        for out in outs:
            torch.testing.assert_close(out[b, : len(s)], ref, atol=ATOL, rtol=0)


@pytest.mark.exercise("4.1")
def test_mixed_prefill_chunk_and_decode_in_one_call(decoder):
    """One call: row 0 decodes one token, row 1 continues a prefill with a chunk of 8, row 2
    starts a fresh prompt of 12 — what stage 05's continuous batching will do."""
    seqs = [rand_seq(31, 20), rand_seq(18, 21), rand_seq(12, 22)]
    cache = DictCache(decoder, 3)
    kc.forward_cached(decoder, padded([seqs[0][:30], seqs[1][:10]]), cache, n_new=[30, 10])
    assert cache.lengths.tolist() == [30, 10, 0]
    step = [seqs[0][30:31], seqs[1][10:18], seqs[2]]
    out = kc.forward_cached(decoder, padded(step), cache, n_new=[1, 8, 12])
    assert out.shape == (3, 12, decoder.config.vocab_size)
    assert cache.lengths.tolist() == [31, 18, 12]
    for b, (seq, new) in enumerate(zip(seqs, step)):
        ref = full_logits(decoder, seq)[len(seq) - len(new):]
        torch.testing.assert_close(out[b, : len(new)], ref, atol=ATOL, rtol=0)


@pytest.mark.exercise("4.1")
def test_rows_map_batch_entries_to_cache_rows_and_leave_others_alone(decoder):
    seqs = [rand_seq(9, 30), rand_seq(14, 31)]
    cache = DictCache(decoder, 4)
    kc.forward_cached(decoder, padded(seqs), cache, rows=torch.tensor([3, 1]), n_new=[9, 14])
    assert {r for _, r, _ in cache.writes} == {1, 3}, (
        f"rows=[3, 1]: batch row b is cache row rows[b], so writes go to cache rows {{1, 3}} only, "
        f"got writes to rows {sorted({r for _, r, _ in cache.writes})}")
    assert cache.lengths.tolist() == [0, 14, 0, 9], (
        f"rows=[3, 1], n_new=[9, 14]: cache.lengths[rows[b]] grows by n_new[b] and other rows stay, "
        f"expected [0, 14, 0, 9], got {cache.lengths.tolist()}")
    # decode row 1 alone, then row 3 alone: each continues its own sequence
    for row, seq in ((1, seqs[1]), (3, seqs[0])):
        tok = rand_seq(1, row)
        out = kc.forward_cached(decoder, torch.tensor([tok]), cache, rows=torch.tensor([row]))
        torch.testing.assert_close(out[0, 0], full_logits(decoder, seq + tok)[-1], atol=ATOL, rtol=0,
                                   msg=lambda m, row=row: (
                                       f"decoding cache row {row} alone (rows=[{row}]) does not continue "
                                       f"that row's sequence: batch row b reads and writes cache row "
                                       f"rows[b]. {m}"))
    assert cache.lengths.tolist() == [0, 15, 0, 10]


@pytest.mark.exercise("4.1")
def test_a_row_with_no_new_tokens_is_untouched(tiny):
    seqs = [rand_seq(6, 40), rand_seq(4, 41)]
    cache = DictCache(tiny, 2)
    kc.forward_cached(tiny, padded(seqs), cache, n_new=[6, 4])
    n_writes = len(cache.writes)
    out = kc.forward_cached(tiny, torch.tensor([[7], [8]]), cache, n_new=[0, 1])
    assert cache.lengths.tolist() == [6, 5]
    assert len(cache.writes) == n_writes + 2  # one token, two layers
    torch.testing.assert_close(out[1, 0], full_logits(tiny, seqs[1] + [8])[-1], atol=ATOL, rtol=0)


@pytest.mark.exercise("4.1")
@settings(deadline=None, max_examples=15)
@given(data=st.data())
def test_any_schedule_of_chunks_equals_the_full_forward(decoder, data):
    """Hypothesis: several rows, each fed its sequence in random chunks, in random subsets
    of rows per call (ragged, padded, rows given), give the full forward's logits."""
    n_rows = data.draw(st.integers(1, 3), label="rows")
    seqs = [data.draw(st.lists(st.integers(0, 256), min_size=1, max_size=20), label=f"seq{r}") for r in range(n_rows)]
    cache = DictCache(decoder, n_rows + 1)  # one spare row nobody uses
    fed = [0] * n_rows
    got: list[list[torch.Tensor]] = [[] for _ in range(n_rows)]
    while any(f < len(s) for f, s in zip(fed, seqs)):
        todo = [r for r in range(n_rows) if fed[r] < len(seqs[r])]
        chosen = data.draw(st.lists(st.sampled_from(todo), min_size=1, unique=True), label="call rows")
        sizes = [data.draw(st.integers(1, len(seqs[r]) - fed[r]), label="chunk") for r in chosen]
        chunks = [seqs[r][fed[r]: fed[r] + n] for r, n in zip(chosen, sizes)]
        out = kc.forward_cached(decoder, padded(chunks, fill=5), cache, rows=torch.tensor(chosen), n_new=sizes)
        for b, (r, n) in enumerate(zip(chosen, sizes)):
            got[r].append(out[b, :n])
            fed[r] += n
    assert cache.lengths.tolist() == [len(s) for s in seqs] + [0], (
        f"after feeding every row its sequence, cache.lengths is {cache.lengths.tolist()}, expected "
        f"{[len(s) for s in seqs] + [0]} (each row its own length; the spare row untouched)")
    for r, s in enumerate(seqs):
        torch.testing.assert_close(torch.cat(got[r]), full_logits(decoder, s), atol=ATOL, rtol=0, msg=lambda m, r=r: (
            f"cache row {r}, fed in chunks by calls over random subsets of rows (rows= given, ragged, "
            f"padded), differs from its full forward: batch row b reads and writes cache row rows[b], "
            f"its token t sits at lengths[rows[b]] + t and sees its own row's positions up to itself. {m}"))


@pytest.mark.exercise("4.1")
def test_running_past_the_models_context_is_an_error(tiny):
    cache = DictCache(tiny, 1, max_len=1000)  # the cache has room; the model's positions do not
    kc.forward_cached(tiny, torch.zeros(1, 60, dtype=torch.long), cache)
    n_writes = len(cache.writes)
    with pytest.raises(ValueError, match="context"):
        kc.forward_cached(tiny, torch.zeros(1, 5, dtype=torch.long), cache)
    assert cache.lengths.tolist() == [60], "a call refused for the context must not advance cache.lengths"
    assert len(cache.writes) == n_writes, "a call refused for the context must not write to the cache"
    try:  # positions 60..63: the last four of the context, legal
        kc.forward_cached(tiny, torch.zeros(1, 4, dtype=torch.long), cache)
    except ValueError as e:
        raise AssertionError(f"filling the context exactly (60 cached + 4 = 64 = block_size) is legal, "
                             f"but raised {e!r}") from None
    with pytest.raises(ValueError, match="context"):
        kc.forward_cached(tiny, torch.zeros(1, 1, dtype=torch.long), cache)


@pytest.mark.exercise("4.1")
def test_padding_is_embedded_inside_the_context(tiny):
    """A legal mixed call at the edge of the context: row 0 has 62 of the 64 positions cached
    and decodes ONE token (position 62), row 1 starts a prompt of 10. Row 0's 9 padded tokens
    must be embedded at position 0, not at lengths + t = 63..71, past the model's context."""
    context = tiny.config.block_size
    long_seq, prompt = rand_seq(context - 1, 50), rand_seq(10, 51)
    cache = DictCache(tiny, 2)
    kc.forward_cached(tiny, torch.tensor([long_seq[:-1]]), cache)  # row 0: 62 cached
    step = padded([long_seq[-1:], prompt])
    try:
        out = kc.forward_cached(tiny, step, cache, n_new=[1, 10])
    except ValueError as e:
        raise AssertionError(
            f"a legal call (row 0: {context - 2} cached + 1 new, row 1: 10 new; context {context}) raised "
            f"{e!r}: padded tokens must be embedded at position 0 (they are never written and their "
            f"logits are unspecified), not at cache.lengths + t, which runs past the context") from None
    assert cache.lengths.tolist() == [context - 1, 10]
    torch.testing.assert_close(out[0, 0], full_logits(tiny, long_seq)[-1], atol=ATOL, rtol=0)
    torch.testing.assert_close(out[1], full_logits(tiny, prompt), atol=ATOL, rtol=0)


class SpyCache(DictCache):
    """A DictCache that records the order of the protocol's calls and what each one sees."""

    def __init__(self, model, batch: int):
        super().__init__(model, batch)
        self.events: list[tuple] = []

    def reserve(self, rows, new_lengths):
        self.events.append(("reserve", new_lengths.tolist(), self.lengths.tolist()))
        super().reserve(rows, new_lengths)

    def write(self, layer, rows, positions, k, v):
        self.events.append(("write", layer, len(rows), self.lengths.tolist()))
        super().write(layer, rows, positions, k, v)

    def view(self, layer, rows, length):
        self.events.append(("view", layer, length, self.lengths.tolist()))
        return super().view(layer, rows, length)


@pytest.mark.exercise("4.1")
def test_the_cache_is_called_in_the_documented_order(tiny):
    """reserve(new lengths) once, first; then per layer write (the real tokens only) before
    view (the longest new length); cache.lengths unchanged until the last layer is done."""
    seqs = [rand_seq(5, 60), rand_seq(3, 61)]
    cache = SpyCache(tiny, 2)
    kc.forward_cached(tiny, padded(seqs), cache, n_new=[5, 3])
    cache.events.clear()
    kc.forward_cached(tiny, padded([rand_seq(1, 62), rand_seq(4, 63)]), cache, n_new=[1, 4])
    kinds = [e[0] for e in cache.events]
    want = ["reserve"] + ["write", "view"] * tiny.config.n_layer
    assert kinds == want, f"calls {kinds}: expected reserve once, then write before view in each layer: {want}"
    assert cache.events[0][1] == [6, 7], f"reserve must get the rows' new lengths [6, 7], got {cache.events[0][1]}"
    writes = [e for e in cache.events if e[0] == "write"]
    views = [e for e in cache.events if e[0] == "view"]
    assert [e[1] for e in writes] == [e[1] for e in views] == list(range(tiny.config.n_layer)), "layers in order"
    assert all(e[2] == 5 for e in writes), "each layer writes the 5 real tokens (1 + 4), never padding"
    assert all(e[2] == 7 for e in views), "view reads the longest new length, 7 positions"
    assert all(e[-1] == [5, 3] for e in cache.events), (
        "cache.lengths changed during the call: it must become the new lengths only after the last layer")
    assert cache.lengths.tolist() == [6, 7]


class AttendCache(DictCache):
    """A DictCache with the optional `attend`: it computes attention itself (a stage-06 style
    cache), and records each call's q_pos."""

    def __init__(self, model, batch: int):
        super().__init__(model, batch)
        self.q_pos: list[torch.Tensor] = []
        self.viewed = 0

    def view(self, layer, rows, length):
        self.viewed += 1
        return super().view(layer, rows, length)

    def attend(self, layer, rows, q, q_pos):
        self.q_pos.append(q_pos.clone())
        K, V = super().view(layer, rows, int(q_pos.max()) + 1)
        mask = torch.arange(K.shape[2])[None, None, :] <= q_pos[:, :, None]  # (B, T, L)
        return torch.nn.functional.scaled_dot_product_attention(q, K, V, attn_mask=mask[:, None])


@pytest.mark.exercise("4.1")
def test_a_cache_with_attend_gets_each_querys_position(tiny):
    """A cache that has `attend(layer, rows, q, q_pos)` is asked for attention instead of a
    view: q_pos[b, t] is real token t's absolute position, 0 for a padded token."""
    seqs = [rand_seq(6, 70), rand_seq(2, 71)]
    cache = AttendCache(tiny, 2)
    kc.forward_cached(tiny, padded(seqs), cache, n_new=[6, 2])
    step = [rand_seq(1, 72), rand_seq(3, 73)]
    out = kc.forward_cached(tiny, padded(step), cache, n_new=[1, 3])
    assert cache.viewed == 0, "a cache that has attend must be asked to attend, not for a view"
    assert len(cache.q_pos) == 2 * tiny.config.n_layer, "attend must be called once per layer and call"
    got = cache.q_pos[-1].tolist()
    assert got == [[6, 0, 0], [2, 3, 4]], (
        f"q_pos of the second call: expected [[6, 0, 0], [2, 3, 4]] (absolute positions, 0 for "
        f"padding), got {got}")
    for b, (s, new) in enumerate(zip(seqs, step)):
        torch.testing.assert_close(out[b, : len(new)], full_logits(tiny, s + new)[len(s):], atol=ATOL, rtol=0)


@pytest.mark.given
@pytest.mark.parametrize("kwargs, match", [
    (dict(idx=torch.zeros(3, dtype=torch.long)), "batch, time"),
    (dict(idx=torch.zeros(1, 3)), "integer"),
    (dict(idx=torch.zeros(3, 2, dtype=torch.long)), "rows"),
    (dict(rows=[0, 0]), "distinct"),
    (dict(rows=[0, 5]), "outside"),
    (dict(rows=[0]), "one cache row per sequence"),
    (dict(n_new=[1, 3]), "n_new"),
    (dict(n_new=[1]), "n_new"),
])
def test_bad_arguments_are_clear_errors(tiny, kwargs, match):
    cache = DictCache(tiny, 2)
    args = dict(idx=torch.zeros(2, 2, dtype=torch.long)) | kwargs
    idx = args.pop("idx")
    with pytest.raises((ValueError, TypeError), match=match):
        kc.forward_cached(tiny, idx, cache, **args)
