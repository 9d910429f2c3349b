"""Exercises 4.2-4.4: the three caches behind the protocol (reserve / write / view).

Each cache is checked against a dense reference (a plain tensor written with the same
tokens), for no-copy reads where it promises them, for a clear error past max_len, and
end to end: `forward_cached` through it equals the model's full forward.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import course

kc = course.load("kv_cache")

ATOL = 1e-4  # float32 rounding of a reordered sum (see test_kv_cache_attention.py)

FLOAT = [pytest.param("ConcatKVCache", marks=pytest.mark.exercise("4.2"), id="concat"),
         pytest.param("KVCache", marks=pytest.mark.exercise("4.3"), id="prealloc")]
ALL = FLOAT + [pytest.param("QuantizedKVCache", marks=pytest.mark.exercise("4.4"), id="int8")]
DIMS = dict(n_layer=2, batch=3, n_head=2, max_len=16, head_dim=8)


def cache_cls(name: str):
    return getattr(kc, name)


def int8_error_bound(x: torch.Tensor) -> torch.Tensor:
    """Absmax INT8 is within half a step, max|x| / 254, of x in every element (plus rounding)."""
    return x.abs().amax(dim=-1, keepdim=True) / 254 * (1 + 1e-5) + 1e-7


@pytest.mark.parametrize("name", ALL)
@settings(deadline=None, max_examples=20)
@given(data=st.data())
def test_view_returns_what_was_written(name, data):
    """Random writes of tokens at (row, position), then views: equal to a dense reference."""
    cache = cache_cls(name)(**DIMS)
    ref_k = torch.zeros(DIMS["n_layer"], 3, 2, 16, 8)
    ref_v = torch.zeros_like(ref_k)
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16), label="seed"))
    for _ in range(data.draw(st.integers(1, 4), label="calls")):
        cells = data.draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 15)), min_size=1, max_size=12,
                                   unique=True), label="cells")
        rows = torch.tensor([r for r, _ in cells])
        positions = torch.tensor([p for _, p in cells])
        new_lengths = torch.zeros(3, dtype=torch.long).scatter_reduce(0, rows, positions + 1, "amax")
        cache.reserve(slice(0, 3), new_lengths)
        for layer in range(DIMS["n_layer"]):
            k, v = torch.randn(len(cells), 2, 8, generator=gen), torch.randn(len(cells), 2, 8, generator=gen)
            cache.write(layer, rows, positions, k, v)
            ref_k[layer][rows, :, positions] = k
            ref_v[layer][rows, :, positions] = v
    length = data.draw(st.integers(1, 16), label="length")
    cache.reserve(slice(0, 3), torch.full((3,), length))
    pick = data.draw(st.sampled_from([slice(0, 3), slice(1, 3), torch.tensor([2, 0])]), label="rows")
    for layer in range(DIMS["n_layer"]):
        K, V = cache.view(layer, pick, length)
        want_k, want_v = ref_k[layer][pick, :, :length], ref_v[layer][pick, :, :length]
        assert K.shape == want_k.shape and K.dtype == torch.float32
        if name == "QuantizedKVCache":
            assert ((K - want_k).abs() <= int8_error_bound(want_k)).all()
            assert ((V - want_v).abs() <= int8_error_bound(want_v)).all()
        else:
            assert torch.equal(K, want_k) and torch.equal(V, want_v)


@pytest.mark.exercise("4.3")
def test_preallocated_buffers_have_the_documented_layout():
    cache = kc.KVCache(**DIMS)
    for buf in (cache.k, cache.v):
        assert buf.shape == (2, 3, 2, 16, 8) and buf.dtype == torch.float32
        assert bool((buf == 0).all()), "fresh buffers must be zeros (masked garbage could be NaN)"


@pytest.mark.exercise("4.3")
def test_reading_the_preallocated_cache_copies_nothing(tiny):
    """A view of contiguous rows shares the buffer's storage; decode steps never reallocate
    the buffers, and what attention reads during forward_cached is the buffer itself."""
    cache = kc.KVCache.for_model(tiny, 3)
    K, V = cache.view(1, slice(0, 2), 10)
    assert K.shape == (2, 2, 10, 16)
    assert K.untyped_storage().data_ptr() == cache.k.untyped_storage().data_ptr()
    assert V.untyped_storage().data_ptr() == cache.v.untyped_storage().data_ptr()

    buffers = (cache.k.data_ptr(), cache.v.data_ptr())
    seen = []
    view = cache.view

    def spy(layer, rows, length):
        out = view(layer, rows, length)
        seen.append(tuple(t.untyped_storage().data_ptr() for t in out))
        return out

    cache.view = spy
    kc.forward_cached(tiny, torch.randint(0, 257, (3, 20)), cache, n_new=[20, 5, 13])
    for _ in range(5):
        kc.forward_cached(tiny, torch.randint(0, 257, (3, 1)), cache)
    assert (cache.k.data_ptr(), cache.v.data_ptr()) == buffers, "the buffers were reallocated"
    assert seen and all(ptrs == buffers for ptrs in seen), "attention read a copy, not the cache"


@pytest.mark.exercise("4.2")
def test_the_concat_cache_grows_by_copying(tiny):
    """The baseline's cost, made visible: every growth is a new tensor holding the old data."""
    cache = kc.ConcatKVCache.for_model(tiny, 2)
    kc.forward_cached(tiny, torch.randint(0, 257, (2, 6)), cache)
    before = cache.view(0, slice(0, 2), 6)[0].clone()
    ptr = cache.view(0, slice(0, 2), 6)[0].untyped_storage().data_ptr()
    kc.forward_cached(tiny, torch.randint(0, 257, (2, 1)), cache)
    K = cache.view(0, slice(0, 2), 7)[0]
    assert K.shape == (2, 2, 7, 16)
    assert K.untyped_storage().data_ptr() != ptr, "growing by torch.cat makes a new tensor"
    assert torch.equal(K[:, :, :6], before)


@pytest.mark.parametrize("name", ALL)
def test_running_past_max_len_is_a_clear_error_not_corruption(tiny, name):
    cache = cache_cls(name).for_model(tiny, 2, max_len=10)
    kc.forward_cached(tiny, torch.randint(0, 257, (2, 8)), cache, n_new=[8, 3])
    snapshot = [t.clone() for t in cache.view(0, slice(0, 2), 8)]
    with pytest.raises(kc.CacheFullError, match="max_len=10"):
        kc.forward_cached(tiny, torch.randint(0, 257, (2, 3)), cache)  # row 0 would need 11
    with pytest.raises(ValueError):  # CacheFullError is a ValueError
        cache.reserve(slice(0, 1), torch.tensor([11]))
    assert cache.lengths.tolist() == [8, 3], "a refused call must not advance the cache"
    for a, b in zip(snapshot, cache.view(0, slice(0, 2), 8)):
        assert torch.equal(a, b), "a refused call must not write"
    kc.forward_cached(tiny, torch.randint(0, 257, (2, 2)), cache)  # fits: rows reach 10 and 5
    assert cache.lengths.tolist() == [10, 5]


@pytest.mark.parametrize("name", FLOAT)
def test_generation_steps_through_each_float_cache_equal_the_full_forward(tiny, name):
    seqs = [torch.randint(0, 257, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (30, 12, 21)]
    cache = cache_cls(name).for_model(tiny, 3, max_len=40)
    width = max(map(len, seqs))
    prompt = torch.tensor([s[:8] + [0] * (8 - len(s[:8])) for s in seqs])
    got = [[row] for row in kc.forward_cached(tiny, prompt, cache)]
    for t in range(8, width):  # decode every row one token at a time (ragged ends: row 1 is
        tok = torch.tensor([[s[t] if t < len(s) else 0] for s in seqs])  # fed filler past its end)
        out = kc.forward_cached(tiny, tok, cache)
        for b in range(3):
            got[b].append(out[b])
    for b, s in enumerate(seqs):
        with torch.no_grad():
            ref = tiny(torch.tensor([s]))[0]
        torch.testing.assert_close(torch.cat(got[b])[: len(s)], ref, atol=ATOL, rtol=0)


@pytest.mark.exercise("4.3")
def test_reset_forgets_rows_and_the_row_is_reusable(tiny):
    cache = kc.KVCache.for_model(tiny, 2)
    kc.forward_cached(tiny, torch.randint(0, 257, (2, 9)), cache)
    cache.reset([1])
    assert cache.lengths.tolist() == [9, 0]
    seq = torch.randint(0, 257, (1, 5))
    out = kc.forward_cached(tiny, seq, cache, rows=torch.tensor([1]))
    with torch.no_grad():
        torch.testing.assert_close(out, tiny(seq), atol=ATOL, rtol=0)
    cache.reset()
    assert cache.lengths.tolist() == [0, 0]


# ---- INT8 ----------------------------------------------------------------------------------

@pytest.mark.exercise("4.4")
@settings(deadline=None, max_examples=30)
@given(shape=st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 40)),
       scale=st.floats(1e-3, 1e3), seed=st.integers(0, 2**16))
def test_quantize_int8_round_trip_is_within_half_a_step(shape, scale, seed):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale
    q, s = kc.quantize_int8(x)
    assert q.dtype == torch.int8 and q.shape == x.shape and s.shape == shape[:-1] + (1,)
    assert int(q.abs().max()) <= 127
    assert bool((q.abs().amax(-1) == 127).all()), "each vector's largest element maps to +-127"
    back = kc.dequantize_int8(q, s)
    assert back.dtype == torch.float32
    assert bool(((back - x).abs() <= int8_error_bound(x)).all())


@pytest.mark.exercise("4.4")
def test_quantize_int8_of_zeros_is_zero():
    q, s = kc.quantize_int8(torch.zeros(2, 3, 8))
    assert bool((q == 0).all()) and torch.isfinite(s).all()
    assert bool((kc.dequantize_int8(q, s) == 0).all())


@pytest.mark.exercise("4.4")
def test_int8_bytes_per_token_against_the_float_caches():
    """Per token: 2 (K, V) x layers x heads x (head_dim int8 bytes + a 4-byte scale)."""
    dims = dict(n_layer=4, batch=1, n_head=4, max_len=1, head_dim=32)
    fp32 = kc.KVCache(**dims).bytes_per_token()
    fp16 = kc.KVCache(**dims, dtype=torch.float16).bytes_per_token()
    int8 = kc.QuantizedKVCache(**dims).bytes_per_token()
    assert (fp32, fp16, int8) == (4096, 2048, 2 * 4 * 4 * (32 + 4))
    cache = kc.QuantizedKVCache(**dims)
    stored = sum(t[:, :, :, 0].numel() * t.element_size() for t in (cache.k, cache.v, cache.k_scale, cache.v_scale))
    assert stored == int8, "bytes_per_token must be what one position of the buffers really takes"
    llama = dict(n_layer=32, batch=1, n_head=32, max_len=1, head_dim=128)  # LLaMA-2-7B
    assert kc.KVCache(**llama, dtype=torch.float16).bytes_per_token() == 512 * 1024  # 0.5 MiB
    assert kc.QuantizedKVCache(**llama).bytes_per_token() / (512 * 1024) == pytest.approx(132 / 256)


@pytest.mark.exercise("4.4")
def test_int8_logits_stay_close_to_the_float_caches(trained):
    """Teacher-forced over 200 positions of one sequence (prefill + decode steps): the INT8
    cache's logits are within 0.05 * (the logits' standard deviation) of the float cache's
    at every position. Measured on the default model: under a tenth of that."""
    seq = torch.randint(0, 257, (1, 200), generator=torch.Generator().manual_seed(0))
    outs = []
    for cls in (kc.KVCache, kc.QuantizedKVCache):
        cache = cls.for_model(trained, 1)
        steps = [kc.forward_cached(trained, seq[:, :100], cache)]
        steps += [kc.forward_cached(trained, seq[:, t: t + 1], cache) for t in range(100, 200)]
        outs.append(torch.cat(steps, dim=1)[0])
    ref, int8 = outs
    err = (int8 - ref).abs().max()
    assert err <= 0.05 * ref.std(), f"max |logit error| {err:.4f} vs logit std {ref.std():.3f}"
    assert (int8.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.99


# ---- given code -----------------------------------------------------------------------------

@pytest.mark.given
@pytest.mark.parametrize("kwargs", [dict(n_layer=0), dict(batch=-1), dict(max_len=2.5), dict(head_dim=True)])
def test_bad_dimensions_are_clear_errors(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        kc.KVCache(**(DIMS | kwargs))


@pytest.mark.given
def test_bad_dtype_and_model_are_clear_errors(tiny):
    with pytest.raises(TypeError, match="dtype"):
        kc.KVCache(**DIMS, dtype=torch.int8)
    with pytest.raises(TypeError, match="GPT"):
        kc.KVCache.for_model("gpt2", 1)
    with pytest.raises(ValueError, match="context"):
        kc.KVCache.for_model(tiny, 1, max_len=65)
    with pytest.raises(ValueError, match="outside"):
        kc.ConcatKVCache.for_model(tiny, 2).reset([2])
