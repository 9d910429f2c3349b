"""Exercise 6.4: paged attention in PyTorch equals contiguous attention (fp32, <= 1e-5)
over random block sizes, ragged lengths and chunk schedules; never reads past a
sequence's length (stale slots may hold NaN); and through `cache.attend`, stage 04's
forward_cached on the paged cache equals the model's full forward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import course

p = course.load("paged")

pytestmark = pytest.mark.exercise("6.4")


def scatter_into_blocks(K: torch.Tensor, V: torch.Tensor, lengths: list[int], bs: int, num_blocks: int,
                        gen: torch.Generator, fill: float = float("nan")):
    """Dense K, V (B, H, L, D) -> pools (num_blocks, bs, H, D) and block tables: each
    row's blocks at random distinct places, every other slot filled with `fill`."""
    B, H, L, D = K.shape
    k_pool = torch.full((num_blocks, bs, H, D), fill, dtype=K.dtype)
    v_pool = torch.full((num_blocks, bs, H, D), fill, dtype=V.dtype)
    need = [p.blocks_needed(n, bs) for n in lengths]
    ids = torch.randperm(num_blocks, generator=gen)[:sum(need)].tolist()
    width = max(need)
    tables = torch.full((B, width), -1, dtype=torch.long)
    for b, n in enumerate(lengths):
        mine, ids = ids[:need[b]], ids[need[b]:]
        tables[b, :need[b]] = torch.tensor(mine)
        for t in range(n):
            k_pool[mine[t // bs], t % bs] = K[b, :, t]
            v_pool[mine[t // bs], t % bs] = V[b, :, t]
    return k_pool, v_pool, tables


def dense_reference(q, K, V, q_pos):
    """Per row: query t attends to keys 0..q_pos[b, t] of the dense K, V."""
    L = K.shape[2]
    mask = (torch.arange(L) <= q_pos[:, :, None])[:, None]
    return F.scaled_dot_product_attention(q, K, V, attn_mask=mask)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=40)
@given(bs=st.integers(1, 9), B=st.integers(1, 4), T=st.integers(1, 5), H=st.integers(1, 3),
       D=st.sampled_from([4, 6, 8]), data=st.data())
def test_paged_equals_contiguous_attention(bs, B, T, H, D, data):
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    starts = data.draw(st.lists(st.integers(0, 20), min_size=B, max_size=B))   # cached before the chunk
    news = data.draw(st.lists(st.integers(1, T), min_size=B, max_size=B))      # real new tokens (ragged)
    lengths = [s + n for s, n in zip(starts, news)]
    L = max(lengths)
    K, V = torch.randn(B, H, L, D, generator=gen), torch.randn(B, H, L, D, generator=gen)
    q = torch.randn(B, H, T, D, generator=gen)
    q_pos = torch.tensor([[s + min(t, n - 1) for t in range(T)] for s, n in zip(starts, news)])  # pads repeat
    num_blocks = sum(p.blocks_needed(n, bs) for n in lengths) + data.draw(st.integers(0, 5))
    k_pool, v_pool, tables = scatter_into_blocks(K, V, lengths, bs, num_blocks, gen)
    got = p.paged_attention(q, k_pool, v_pool, tables, q_pos)
    want = dense_reference(q, torch.nan_to_num(K), torch.nan_to_num(V), q_pos)
    assert got.shape == (B, H, T, D)
    assert torch.isfinite(got).all(), "read a stale (NaN) slot past a sequence's length"
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=lambda m: (
        f"block size {bs}, rows of {lengths} keys, q_pos {q_pos.tolist()}: query (b, t) attends to "
        f"keys 0..q_pos[b, t] of row b, that key itself included (the longest row needs "
        f"max(q_pos) + 1 keys, read from its blocks in table order). {m}"))


def test_decode_of_equal_and_unequal_lengths():
    gen = torch.Generator().manual_seed(3)
    for lengths in ([9, 9, 9], [1, 17, 5]):
        K, V = torch.randn(3, 2, 17, 8, generator=gen), torch.randn(3, 2, 17, 8, generator=gen)
        q = torch.randn(3, 2, 1, 8, generator=gen)
        q_pos = torch.tensor(lengths)[:, None] - 1
        k_pool, v_pool, tables = scatter_into_blocks(K, V, lengths, 4, 20, gen)
        got = p.paged_attention(q, k_pool, v_pool, tables, q_pos)
        torch.testing.assert_close(got, dense_reference(q, K, V, q_pos), atol=1e-5, rtol=1e-5, msg=lambda m, lengths=lengths: (
            f"decode of rows of {lengths} keys (block size 4): the query at position n - 1 attends "
            f"to all n keys of its row, its own included. {m}"))


def test_float64_in_float64_out_to_float64_rounding():
    """y is in q's dtype and computed at q's precision: the model of the forward_cached test
    below runs in float64, to 1e-10."""
    gen = torch.Generator().manual_seed(11)
    lengths = [7, 3]
    K = torch.randn(2, 2, 7, 8, generator=gen, dtype=torch.float64)
    V = torch.randn(2, 2, 7, 8, generator=gen, dtype=torch.float64)
    q = torch.randn(2, 2, 3, 8, generator=gen, dtype=torch.float64)
    q_pos = torch.tensor([[4, 5, 6], [0, 1, 2]])
    k_pool, v_pool, tables = scatter_into_blocks(K, V, lengths, 3, 8, gen)
    got = p.paged_attention(q, k_pool, v_pool, tables, q_pos)
    assert got.dtype == torch.float64, f"float64 q and pools gave y in {got.dtype}: y is in q's dtype"
    err = float((got - dense_reference(q, K, V, q_pos)).abs().max())
    assert err < 1e-12, (
        f"float64 q and pools: y is {err:.1e} from float64 attention (allowed 1e-12): compute at q's "
        f"precision (no .float() on the way: float32 scores are ~1e-7 off, and stage 04's float64 "
        f"model then misses the full forward)")


@pytest.mark.parametrize("bs", [2, 5, 16])
def test_forward_cached_with_attend_equals_the_full_forward(model, chunked_forward, bs):
    """The cache's own `attend` (no dense view): ragged chunked prefill, then decode."""
    torch.manual_seed(1)
    seqs = torch.randint(0, 256, (4, 40))
    cache = p.PagedKVCache.for_model(model, 4, max_len=48, block_size=bs, num_blocks=80)
    schedule = ([6, 1, 11, 3], [9, 4, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1])
    for b, got, want in chunked_forward(model, cache, seqs, schedule):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10, msg=lambda m, b=b: (
            f"row {b}: forward_cached through the paged cache's attend (block size {bs}, ragged chunks "
            f"{[list(c) for c in schedule]}, then decode) differs from the float64 model's full forward: "
            f"each query sees its own row's keys 0..q_pos, at q's precision. {m}"))


@pytest.mark.parametrize("H, H_kv", [(4, 2), (9, 3), (6, 1)], ids=["4-on-2", "smollm2-9-on-3", "mqa-6-on-1"])
def test_grouped_query_heads_read_head_h_over_the_group(H, H_kv):
    """Pools of H_kv K/V heads (a Llama's cache holds those, not the H query heads): query
    head h reads K/V head h // (H / H_kv), as `repeat_interleave` lays them out. A chunk of
    3 queries in ragged rows, then a decode; NaN in every stale slot."""
    gen = torch.Generator().manual_seed(30 + H)
    lengths, D, bs = [11, 4, 7], 8, 3
    L = max(lengths)
    K, V = torch.randn(3, H_kv, L, D, generator=gen), torch.randn(3, H_kv, L, D, generator=gen)
    k_pool, v_pool, tables = scatter_into_blocks(K, V, lengths, bs, 16, gen)
    group = H // H_kv
    Kq, Vq = K.repeat_interleave(group, dim=1), V.repeat_interleave(group, dim=1)  # K/V head of each query head
    for T in (3, 1):
        q = torch.randn(3, H, T, D, generator=gen)
        q_pos = torch.tensor([[n - T + t for t in range(T)] for n in lengths])
        got = p.paged_attention(q, k_pool, v_pool, tables, q_pos)
        assert got.shape == (3, H, T, D), f"{H} query heads on {H_kv} K/V heads: y is q's shape (3, {H}, {T}, {D})"
        torch.testing.assert_close(got, dense_reference(q, Kq, Vq, q_pos), atol=1e-5, rtol=1e-5,
                                   msg=lambda m, T=T: (
            f"{H} query heads on pools of {H_kv} K/V heads, {T} new token(s) a row: query head h reads K/V "
            f"head h // {group} (groups of {group} consecutive query heads share one K/V head: "
            f"`repeat_interleave`, or `enable_gqa`; `repeat` tiles them in the wrong order). {m}"))


def test_forward_cached_with_attend_on_a_llama_equals_the_full_forward(llama, chunked_forward):
    """SmolLM2's architecture in miniature (conftest's `llama`: RoPE, 9 query heads on 3 K/V
    heads, float64): its pools hold the 3 K/V heads; ragged chunked prefill, then decode."""
    torch.manual_seed(2)
    seqs = torch.randint(0, 257, (3, 30))
    cache = p.PagedKVCache.for_model(llama, 3, max_len=48, block_size=4, num_blocks=30)
    assert cache.k.shape[3] == 3, f"a Llama's pools hold its 3 K/V heads a token, got {tuple(cache.k.shape)}"
    schedule = ([5, 1, 9], [7, 3, 1], [1, 1, 1], [1, 1, 1])
    for b, got, want in chunked_forward(llama, cache, seqs, schedule):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10, msg=lambda m, b=b: (
            f"row {b} of a Llama (9 query heads on 3 K/V heads, RoPE): forward_cached through the paged "
            f"cache's attend (ragged chunks {[list(c) for c in schedule]}, then decode) differs from the "
            f"full forward: query head h reads K/V head h // 3 of its own row's keys 0..q_pos. {m}"))
