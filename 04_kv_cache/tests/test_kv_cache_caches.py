"""Exercises 4.2-4.4: the three caches behind the protocol (reserve / write / view).

Each cache is checked against a dense reference (a plain tensor written with the same
tokens), for no-copy reads where it promises them, for a clear error past max_len, and
end to end: `forward_cached` through it equals the model's full forward.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

import course

kc = course.load("kv_cache")

ATOL = 1e-4  # float32 rounding of a reordered sum (see test_kv_cache_attention.py)

FLOAT = [pytest.param("ConcatKVCache", marks=pytest.mark.exercise("4.2"), id="concat"),
         pytest.param("KVCache", marks=pytest.mark.exercise("4.3"), id="prealloc")]
ALL = FLOAT + [pytest.param("QuantizedKVCache", marks=pytest.mark.exercise("4.4"), id="int8")]
DIMS = dict(n_layer=2, batch=3, n_head=2, max_len=16, head_dim=8)


def cache_cls(name: str):
    return getattr(kc, name)


# A failing example is reported as found, without Hypothesis's shrinking: on a busy machine
# shrinking the int8 cache's failures took longer than the grader's 60 s per test, and the
# learner saw a timeout instead of the assertion. The messages say what was expected.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def int8_error_bound(x: torch.Tensor) -> torch.Tensor:
    """Absmax INT8 is within half a step, max|x| / 254, of x in every element (plus rounding)."""
    return x.abs().amax(dim=-1, keepdim=True) / 254 * (1 + 1e-5) + 1e-7


def worst(got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor | float = 0.0) -> str:
    """Where got is furthest outside bound of want: 'index (..), got g, expected w (+- b)'."""
    excess = (got - want).abs() - bound
    i = tuple(int(j) for j in torch.unravel_index(excess.argmax(), excess.shape))
    b = bound[i[:-1] + (0,)] if isinstance(bound, torch.Tensor) else bound
    return f"at index {i}: got {float(got[i]):.6g}, expected {float(want[i]):.6g} (+- {float(b):.3g})"


@pytest.mark.parametrize("name", ALL)
@settings(deadline=None, max_examples=20, phases=NO_SHRINK)
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
        assert K.shape == V.shape == want_k.shape, f"view(layer, {pick}, {length}): shape {tuple(K.shape)}, expected {tuple(want_k.shape)}"
        assert K.dtype == V.dtype == torch.float32, f"view returns the cache's dtype float32, got {K.dtype}"
        for what, got, want in (("K", K, want_k), ("V", V, want_v)):
            if name == "QuantizedKVCache":
                bound = int8_error_bound(want)
                assert bool(((got - want).abs() <= bound).all()), (
                    f"layer {layer}, view of rows {pick}: dequantised {what} must be within half a step "
                    f"(max|x| / 254 per token and head) of what was written; {worst(got, want, bound)}")
            else:
                assert torch.equal(got, want), (
                    f"layer {layer}, view of rows {pick}: {what} must be exactly what was written "
                    f"(zeros where nothing was); {worst(got, want)}")


@pytest.mark.exercise("4.3")
def test_preallocated_buffers_have_the_documented_layout():
    cache = kc.KVCache(**DIMS)
    for buf in (cache.k, cache.v):
        assert buf.shape == (2, 3, 2, 16, 8) and buf.dtype == torch.float32, (
            f"k and v must be float32 (n_layer, batch, n_head, max_len, head_dim) = (2, 3, 2, 16, 8), "
            f"got {buf.dtype} {tuple(buf.shape)}")
        assert bool((buf == 0).all()), "fresh buffers must be zeros (masked garbage could be NaN)"


@pytest.mark.exercise("4.3")
def test_reading_the_preallocated_cache_copies_nothing(tiny):
    """A view of contiguous rows shares the buffer's storage; decode steps never reallocate
    the buffers, and what attention reads during forward_cached is the buffer itself."""
    cache = kc.KVCache.for_model(tiny, 3)
    K, V = cache.view(1, slice(0, 2), 10)
    assert K.shape == (2, 2, 10, 16), f"view(1, slice(0, 2), 10) must be (2, 2, 10, 16), got {tuple(K.shape)}"
    assert K.untyped_storage().data_ptr() == cache.k.untyped_storage().data_ptr(), (
        "view with a slice of rows must return a view of the buffer k (same storage), not a copy")
    assert V.untyped_storage().data_ptr() == cache.v.untyped_storage().data_ptr(), (
        "view with a slice of rows must return a view of the buffer v (same storage), not a copy")

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
@settings(deadline=None, max_examples=30, phases=NO_SHRINK)
@given(shape=st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 40)),
       scale=st.floats(1e-3, 1e3), seed=st.integers(0, 2**16))
def test_quantize_int8_round_trip_is_within_half_a_step(shape, scale, seed):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale
    q, s = kc.quantize_int8(x)
    assert q.dtype == torch.int8 and q.shape == x.shape, f"q must be int8 of x's shape {shape}, got {q.dtype} {tuple(q.shape)}"
    assert s.shape == shape[:-1] + (1,) and s.dtype == torch.float32, (
        f"scale must be float32 of shape {shape[:-1] + (1,)} (one per vector), got {s.dtype} {tuple(s.shape)}")
    assert int(q.abs().max()) <= 127, f"q must be in [-127, 127], got {int(q.abs().max())}"
    assert bool((q.abs().amax(-1) == 127).all()), "each vector's largest element maps to +-127 (scale = max|x| / 127)"
    back = kc.dequantize_int8(q, s)
    assert back.dtype == torch.float32, f"dequantize_int8 returns float32 by default, got {back.dtype}"
    bound = int8_error_bound(x)
    assert bool(((back - x).abs() <= bound).all()), (
        f"q * scale must be within scale / 2 of x (q = round(x / scale)); {worst(back, x, bound)}")


class NanCasts(TorchFunctionMode):
    """Records every torch call that turns a tensor holding NaN or inf into integers (a cast
    to int8, an int8 buffer assigned from it): what such a cast gives is up to the CPU."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        to_int = (isinstance(out, torch.Tensor) and not out.is_floating_point() and out.dtype != torch.bool) or (
            bool(args) and isinstance(args[0], torch.Tensor) and args[0].dtype == torch.int8)
        if to_int and any(t.is_floating_point() and not bool(t.isfinite().all()) for t in tensors):
            self.seen.append(getattr(func, "__name__", str(func)))
        return out


@pytest.mark.exercise("4.4")
def test_quantize_int8_of_zeros_is_zero():
    """An all-zero vector (next to ordinary ones) has scale 0 and q 0, without a NaN on the way:
    0 / 0 is NaN, and NaN cast to int8 is 0 on some CPUs and -128 on others."""
    x = torch.zeros(2, 3, 8)
    x[1, 2] = torch.linspace(-2, 2, 8)
    with NanCasts() as casts:
        q, s = kc.quantize_int8(x)
    assert not casts.seen, (
        f"quantize_int8 of an all-zero vector cast NaN or inf to integers ({', '.join(casts.seen)}): "
        f"scale 0 makes x / scale = 0 / 0; guard the division so that an all-zero vector gives q 0")
    assert bool(torch.isfinite(s).all()), f"scales must be finite, got {s.flatten().tolist()}"
    zero = torch.ones(2, 3, dtype=torch.bool)
    zero[1, 2] = False
    assert bool((s[zero] == 0).all()), f"an all-zero vector's scale must be 0, got {s[zero].flatten().tolist()}"
    assert bool((q[zero] == 0).all()), f"an all-zero vector's q must be 0, got {q[zero].unique().tolist()}"
    assert q[1, 2].tolist() == [-127, -91, -54, -18, 18, 54, 91, 127], "the non-zero vector next to them"
    back = kc.dequantize_int8(q, s)
    assert bool(torch.isfinite(back).all()) and bool((back[zero] == 0).all()), "zeros must dequantise to 0"


@pytest.mark.exercise("4.4")
def test_the_int8_cache_stores_an_all_zero_head_as_zeros():
    """A head whose key (or value) vector is all zeros is stored as scale 0, values 0."""
    cache = kc.QuantizedKVCache(**DIMS)
    k = torch.randn(2, 2, 8, generator=torch.Generator().manual_seed(0))
    k[0, 1] = 0
    v = torch.zeros(2, 2, 8)
    with NanCasts() as casts:
        cache.reserve(slice(0, 3), torch.tensor([4, 0, 2]))
        cache.write(1, torch.tensor([0, 2]), torch.tensor([3, 1]), k, v)
        K, V = cache.view(1, slice(0, 3), 4)
    assert not casts.seen, f"writing an all-zero head cast NaN or inf to int8 ({', '.join(casts.seen)}): guard quantize_int8"
    for name in ("k", "v", "k_scale", "v_scale"):
        buf = getattr(cache, name)
        assert bool(torch.isfinite(buf.float()).all()), f"cache.{name} holds NaN or inf after writing zeros"
    assert bool((cache.v[1] == 0).all()) and bool((cache.v_scale[1] == 0).all()), "all-zero values must be stored as 0, scale 0"
    assert float(cache.k_scale[1, 0, 1, 3, 0]) == 0 and bool((cache.k[1, 0, 1, 3] == 0).all())
    assert bool((V == 0).all()) and bool((K[0, 1, 3] == 0).all()), "an all-zero head must read back as zeros"


@pytest.mark.exercise("4.4")
def test_int8_buffers_have_the_documented_layout():
    """k, v: int8 (n_layer, batch, n_head, max_len, head_dim); k_scale, v_scale: float32
    (n_layer, batch, n_head, max_len, 1); all four zeros when fresh."""
    cache = kc.QuantizedKVCache(**DIMS)
    want = {"k": (torch.int8, (2, 3, 2, 16, 8)), "v": (torch.int8, (2, 3, 2, 16, 8)),
            "k_scale": (torch.float32, (2, 3, 2, 16, 1)), "v_scale": (torch.float32, (2, 3, 2, 16, 1))}
    for name, (dtype, shape) in want.items():
        buf = getattr(cache, name, None)
        assert isinstance(buf, torch.Tensor), f"QuantizedKVCache must keep its buffer `{name}` (a tensor), as documented"
        assert (buf.dtype, tuple(buf.shape)) == (dtype, shape), (
            f"cache.{name}: expected {dtype} {shape}, got {buf.dtype} {tuple(buf.shape)}")
        assert bool((buf == 0).all()), f"cache.{name} must be zeros when fresh (torch.zeros, not torch.empty)"


@pytest.mark.exercise("4.4")
def test_int8_bytes_per_token_against_the_float_caches():
    """Per token: 2 (K, V) x layers x heads x (head_dim int8 bytes + a 4-byte scale)."""
    dims = dict(n_layer=4, batch=1, n_head=4, max_len=1, head_dim=32)
    fp32 = kc.KVCache(**dims).bytes_per_token()
    fp16 = kc.KVCache(**dims, dtype=torch.float16).bytes_per_token()
    int8 = kc.QuantizedKVCache(**dims).bytes_per_token()
    assert (fp32, fp16, int8) == (4096, 2048, 2 * 4 * 4 * (32 + 4)), (
        f"bytes per token (fp32, fp16, INT8) must be (4096, 2048, 1152): INT8 pays head_dim bytes plus a "
        f"4-byte scale per head, for K and V in every layer; got {(fp32, fp16, int8)}")
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
