"""Stage 04, held-out cases: other model shapes, batch layouts and sampling corners.

4.1 runs against the REFERENCE preallocated cache (`solutions.kv_cache.KVCache`), so it is
checked on its own; the caches (4.2-4.4) against a dense reference; generation (4.6)
against the recompute baseline and the model's full forward. Tolerances as in the visible
tests: ATOL 1e-4 on float32 logits, 4 sigma on frequencies of 20 000 draws.
"""

from __future__ import annotations

import pytest
import torch

import course
from solutions.gpt import GPT, GPTConfig
from solutions.kv_cache import KVCache as ReferenceCache

kc = course.load("kv_cache")

ATOL = 1e-4


@pytest.fixture(scope="module")
def one_head() -> GPT:
    """Another shape than the visible tests': 3 layers, ONE head of 8, context 24."""
    torch.manual_seed(77)
    return GPT(GPTConfig(block_size=24, n_layer=3, n_head=1, n_embd=8)).eval()


def seq(n, seed):
    return torch.randint(0, 257, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def full(model, s):
    with torch.no_grad():
        return model(torch.tensor([s]))[0]


# ---------------------------------------------------------------------- 4.1
@pytest.mark.exercise("4.1")
def test_one_head_model_decoding_rows_of_unequal_lengths(one_head):
    seqs = [seq(n, n) for n in (20, 7, 13, 1)]
    cache = ReferenceCache.for_model(one_head, 4)
    start = [len(s) - 3 if len(s) > 3 else 0 for s in seqs]
    width = max(start)
    prompt = torch.tensor([s[:k] + [0] * (width - k) for s, k in zip(seqs, start)])
    n_new = torch.tensor(start)
    kc.forward_cached(one_head, prompt, cache, n_new=n_new)
    course.answer("lengths", cache.lengths.tolist())
    assert cache.lengths.tolist() == start
    for t in range(3):  # three decode steps, every row at its own position
        rows = [b for b, s in enumerate(seqs) if start[b] + t < len(s)]
        tok = torch.tensor([[seqs[b][start[b] + t]] for b in rows])
        out = kc.forward_cached(one_head, tok, cache, rows=torch.tensor(rows))
        course.answer(f"step_{t}", out, rtol=1e-4, atol=ATOL)  # float32 logits
        for i, b in enumerate(rows):
            torch.testing.assert_close(out[i, 0], full(one_head, seqs[b])[start[b] + t], atol=ATOL, rtol=0)


@pytest.mark.exercise("4.1")
def test_rows_in_reverse_order_and_a_single_token_prompt(tiny):
    cache = ReferenceCache.for_model(tiny, 5)
    a, b = seq(9, 1), seq(1, 2)
    idx = torch.tensor([b + [0] * 8, a])
    out = kc.forward_cached(tiny, idx, cache, rows=[4, 0], n_new=[1, 9])
    # only the real tokens' logits (b's padding positions are free)
    course.answer("logits", [out[1], out[0, 0]], rtol=1e-4, atol=ATOL)
    course.answer("lengths", cache.lengths.tolist())
    torch.testing.assert_close(out[1], full(tiny, a), atol=ATOL, rtol=0)
    torch.testing.assert_close(out[0, 0], full(tiny, b)[0], atol=ATOL, rtol=0)
    assert cache.lengths.tolist() == [9, 0, 0, 0, 1]


@pytest.mark.exercise("4.1")
def test_prefill_up_to_the_full_context(one_head):
    s = seq(24, 5)
    cache = ReferenceCache.for_model(one_head, 1)
    out = kc.forward_cached(one_head, torch.tensor([s[:10]]), cache)
    out2 = kc.forward_cached(one_head, torch.tensor([s[10:]]), cache)
    course.answer("logits", torch.cat([out[0], out2[0]]), rtol=1e-4, atol=ATOL)
    torch.testing.assert_close(torch.cat([out[0], out2[0]]), full(one_head, s), atol=ATOL, rtol=0)
    with pytest.raises(ValueError):  # past the context; CacheFullError (a ValueError) would do too
        kc.forward_cached(one_head, torch.tensor([[1]]), cache)
    course.answer("lengths_after_refusal", cache.lengths.tolist())  # nothing advanced


# ---------------------------------------------------------------------- 4.2-4.4
CACHES = [pytest.param("ConcatKVCache", marks=pytest.mark.exercise("4.2"), id="concat"),
          pytest.param("KVCache", marks=pytest.mark.exercise("4.3"), id="prealloc"),
          pytest.param("QuantizedKVCache", marks=pytest.mark.exercise("4.4"), id="int8")]


@pytest.mark.parametrize("name", CACHES)
def test_odd_dimensions_write_and_view(name):
    dims = dict(n_layer=1, batch=2, n_head=3, max_len=5, head_dim=3)
    cache = getattr(kc, name)(**dims)
    ref = torch.zeros(2, 3, 5, 3)
    g = torch.Generator().manual_seed(0)
    for positions in ([0, 0], [1, 2], [4, 3]):
        rows = torch.tensor([0, 1])
        pos = torch.tensor(positions)
        k = torch.randn(2, 3, 3, generator=g)
        cache.reserve(rows, pos + 1)
        cache.write(0, rows, pos, k, -k)
        ref[rows, :, pos] = k
    K, V = cache.view(0, slice(0, 2), 5)
    assert K.shape == V.shape == (2, 3, 5, 3) and K.dtype == torch.float32
    tol = 0 if name != "QuantizedKVCache" else (ref.abs().amax(-1, keepdim=True) / 254 + 1e-6)
    written = torch.zeros(2, 1, 5, 1, dtype=torch.bool)
    written[0, 0, [0, 1, 4]] = True
    written[1, 0, [0, 2, 3]] = True
    # what was written (the rest of a view is free); int8 round-trips within half a step
    atol = 1e-7 if name != "QuantizedKVCache" else float(2 * tol.max())
    course.answer("written", [torch.where(written, K, 0.0), torch.where(written, V, 0.0)], rtol=1e-6, atol=atol)
    course.answer("dtype", str(K.dtype))
    assert (((K - ref).abs() <= tol) | ~written).all() and (((V + ref).abs() <= tol) | ~written).all()
    K1, _ = cache.view(0, torch.tensor([1]), 4)
    course.answer("shapes", [list(K.shape), list(V.shape), list(K1.shape)])
    assert K1.shape == (1, 3, 4, 3)


@pytest.mark.parametrize("name", CACHES)
def test_float64_model_through_each_cache(name, one_head):
    model = GPT(one_head.config).double().eval()
    model.load_state_dict(one_head.state_dict())
    s = seq(12, 9)
    cache = getattr(kc, name).for_model(model, 1)
    outs = [kc.forward_cached(model, torch.tensor([s[:6]]), cache)[0]]
    for t in range(6, 12):
        outs.append(kc.forward_cached(model, torch.tensor([[s[t]]]), cache)[0])
    got = torch.cat(outs)
    course.answer("dtype", str(got.dtype))
    tol = 1e-9 if name != "QuantizedKVCache" else 0.05
    course.answer("logits", got, rtol=1e-6, atol=tol)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, full(model, s), atol=tol, rtol=0)


@pytest.mark.exercise("4.2")
def test_concat_cache_grows_only_to_what_is_needed():
    cache = kc.ConcatKVCache(n_layer=2, batch=2, n_head=1, max_len=50, head_dim=2)
    cache.reserve(slice(0, 2), torch.tensor([3, 1]))
    course.answer("after_first", [list(k.shape) for k in cache.k])
    assert all(k.shape[2] == 3 for k in cache.k)
    cache.reserve(slice(0, 2), torch.tensor([2, 2]))
    course.answer("after_second", [list(k.shape) for k in cache.k])
    assert all(k.shape[2] == 3 for k in cache.k), "no growth when the cache is long enough"
    with pytest.raises(kc.CacheFullError) as e:
        cache.reserve(slice(0, 2), torch.tensor([51, 0]))
    course.answer("error", type(e.value).__name__)


@pytest.mark.exercise("4.3")
def test_preallocated_views_of_a_middle_slice_share_memory():
    cache = kc.KVCache(n_layer=2, batch=4, n_head=2, max_len=6, head_dim=3)
    cache.write(1, torch.tensor([2]), torch.tensor([5]), torch.ones(1, 2, 3), torch.full((1, 2, 3), 2.0))
    K, V = cache.view(1, slice(1, 3), 6)
    course.answer("view", [K, V])  # zeros but the one written position
    course.answer("storage_shape", list(cache.k.shape))
    assert K.untyped_storage().data_ptr() == cache.k.untyped_storage().data_ptr()
    assert (K[1, :, 5] == 1).all() and (V[1, :, 5] == 2).all() and (K[0] == 0).all()


@pytest.mark.exercise("4.4")
def test_quantize_an_outlier_and_negative_halves():
    x = torch.tensor([[1000.0, 1.0, -1.0, 0.0], [-3.0, 1.5, 0.75, 0.0]])
    q, scale = kc.quantize_int8(x)
    course.answer("q", q)
    course.answer("scale", scale)
    course.answer("dtypes", [str(q.dtype), str(scale.dtype)])
    assert q.dtype == torch.int8 and scale.shape == (2, 1) and scale.dtype == torch.float32
    assert q[0].tolist() == [127, 0, 0, 0]  # 1.0 / (1000/127) rounds to 0: the outlier's price
    assert q[1].tolist() == [-127, 64, 32, 0]  # round half to even: 63.5 -> 64, 31.75 -> 32
    back = kc.dequantize_int8(q, scale, torch.float64)
    course.answer("back", back)
    course.answer("back_dtype", str(back.dtype))
    assert back.dtype == torch.float64
    assert ((back - x.double()).abs() <= scale.double() / 2 + 1e-9).all()


@pytest.mark.exercise("4.4")
@pytest.mark.parametrize("n_layer, n_head, head_dim", [(1, 1, 1), (5, 3, 7)])
def test_int8_bytes_per_token_other_shapes(n_layer, n_head, head_dim):
    cache = kc.QuantizedKVCache(n_layer=n_layer, batch=1, n_head=n_head, max_len=2, head_dim=head_dim)
    course.answer("bytes_per_token", cache.bytes_per_token())
    assert cache.bytes_per_token() == 2 * n_layer * n_head * (head_dim + 4)


# ---------------------------------------------------------------------- 4.5
N = 20_000
TOL = 0.015


@pytest.mark.exercise("4.5")
def test_each_row_its_own_distribution_and_top_k_of_the_whole_vocab():
    probs = torch.tensor([[0.7, 0.2, 0.1, 0.0], [0.1, 0.1, 0.1, 0.7]])
    logits = probs.clamp_min(1e-30).log().repeat(N // 2, 1)
    ids = kc.sample(logits, top_k=4, top_p=1.0, generator=torch.Generator().manual_seed(3))
    # frequencies, not the draws themselves: within the test's own allowance of the truth
    course.answer("frequencies", [torch.bincount(ids[r::2], minlength=4).double() / (N // 2) for r in range(2)],
                  rtol=0, atol=2 * TOL)
    course.answer("drawn", [sorted(set(ids[r::2].tolist())) for r in range(2)])  # the 0.0 token never
    for r in range(2):
        got = torch.bincount(ids[r::2], minlength=4).double() / (N // 2)
        assert (got - probs[r].double()).abs().max() < 2 * TOL, (
            f"row {r}: top_k=4 of 4 and top_p=1.0 keep every token, drawn with the row's own probabilities "
            f"{probs[r].tolist()}; the draws' frequencies were {[round(float(g), 3) for g in got]}")


@pytest.mark.exercise("4.5")
def test_masked_logits_are_never_drawn_and_ties_keep_exactly_k():
    logits = torch.tensor([[0.0, float("-inf"), 0.0, float("-inf"), 0.0]]).expand(N, -1)
    ids = kc.sample(logits, temperature=3.0, generator=torch.Generator().manual_seed(1))
    course.answer("masked_drawn", sorted(set(ids.tolist())))
    course.answer("masked_frequencies", torch.bincount(ids, minlength=5).double() / N, rtol=0, atol=2 * TOL)
    assert set(ids.tolist()) == {0, 2, 4}
    flat = torch.zeros(N, 10)
    ids = kc.sample(flat, top_k=3, generator=torch.Generator().manual_seed(2))
    # which 3 of the tied stay is torch.topk's choice: report how many, and their shares
    kept = torch.bincount(ids, minlength=10)
    course.answer("tied_kept", int((kept > 0).sum()))
    course.answer("tied_shares", sorted((kept[kept > 0].double() / N).tolist()), rtol=0, atol=2 * TOL)
    assert len(set(ids.tolist())) == 3, "top_k=3 on 10 tied logits keeps exactly 3 tokens"


@pytest.mark.exercise("4.5")
def test_greedy_on_float64_and_tiny_top_p():
    logits = torch.randn(50, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    greedy = kc.sample(logits, temperature=0)
    course.answer("greedy", greedy)
    assert torch.equal(greedy, logits.argmax(-1))
    ids = kc.sample(logits, top_p=1e-6, generator=torch.Generator().manual_seed(0))
    course.answer("tiny_top_p", ids)
    assert torch.equal(ids, logits.argmax(-1)), "the most likely token is always in the nucleus"


# ---------------------------------------------------------------------- 4.6
@pytest.mark.exercise("4.6")
@pytest.mark.parametrize("cache", ["prealloc", "concat", None])
def test_generate_on_another_model_against_the_full_forward(one_head, cache):
    prompts = [seq(3, 1), seq(10, 2), seq(1, 3)]
    res = kc.generate(one_head, prompts, 8, cache=cache)
    course.answer("tokens", res.tokens)  # greedy: fixed by the model
    course.answer("finish_reasons", res.finish_reasons)
    for p, toks in zip(prompts, res.tokens):
        s = list(p)
        for _ in range(8):  # greedy, one full forward per token
            s.append(int(full(one_head, s)[-1].argmax()))
        assert toks == s[len(p):]


@pytest.mark.exercise("4.6")
def test_generate_fills_the_context_exactly_and_stops_on_any_of_several_tokens(one_head):
    prompt = seq(20, 4)
    res = kc.generate(one_head, [prompt], 4, cache="prealloc")  # 20 + 4 = the context of 24
    course.answer("full_context", [res.tokens, res.finish_reasons])
    assert len(res.tokens[0]) == 4
    base = kc.generate(one_head, [seq(2, 8), seq(5, 9)], 12, cache=None).tokens
    course.answer("base", base)
    stops = {base[0][3], base[1][6]}
    want = [next((row[:i] for i, t in enumerate(row) if t in stops), row) for row in base]
    got = kc.generate(one_head, [seq(2, 8), seq(5, 9)], 12, cache="prealloc", stop=sorted(stops))
    course.answer("stopped", [got.tokens, got.finish_reasons])
    assert got.tokens == want
    assert got.finish_reasons == ["stop" if len(w) < 12 else "length" for w in want]


@pytest.mark.exercise("4.6")
def test_sampling_in_generate_uses_the_generator(one_head):
    kw = dict(temperature=1.0, top_p=0.9, cache="prealloc")
    a = kc.generate(one_head, [seq(4, 1)] * 3, 10, generator=torch.Generator().manual_seed(5), **kw)
    b = kc.generate(one_head, [seq(4, 1)] * 3, 10, generator=torch.Generator().manual_seed(5), **kw)
    c = kc.generate(one_head, [seq(4, 1)] * 3, 10, generator=torch.Generator().manual_seed(6), **kw)
    # ONE `sample` call per step on all rows, ONE multinomial draw in it (the docstrings): a seed
    # fixes the tokens
    course.answer("seed_5", a.tokens)
    course.answer("seed_6", c.tokens)
    assert a.tokens == b.tokens and a.tokens != c.tokens


# ---- 4.7: the repetition penalty (other shapes and corners than the visible tests) -------------

def _penalised_by_hand(logits, context, penalty):
    out = logits.clone()
    for b in range(logits.shape[0]):
        for t in {int(i) for i in context[b] if i >= 0}:
            x = float(logits[b, t])
            out[b, t] = x / penalty[b] if x > 0 else x * penalty[b]
    return out


@pytest.mark.exercise("4.7")
def test_repetition_penalty_on_an_empty_context_a_padded_row_and_every_id():
    gen = torch.Generator().manual_seed(21)
    logits = torch.randn(3, 300, generator=gen) * 4
    assert torch.equal(kc.apply_repetition_penalty(logits, torch.empty(3, 0, dtype=torch.long), 2.0), logits), \
        "an empty context (L = 0) penalises nothing"
    context = torch.full((3, 300), -1, dtype=torch.long)
    context[1] = torch.arange(300)          # row 1 has seen every id; row 0 only padding
    context[2, :5] = torch.tensor([299, 0, 299, 0, 150])
    penalty = torch.tensor([3.0, 1.5, 0.25])
    got = kc.apply_repetition_penalty(logits, context, penalty)
    assert torch.equal(got, _penalised_by_hand(logits, context, penalty.tolist()))
    assert torch.equal(got[0], logits[0]), "a row of padding only penalises nothing"
    course.answer("penalised", got)
    course.answer("changed_per_row", (got != logits).sum(dim=1).tolist(), exact=True)


@pytest.mark.exercise("4.7")
def test_repetition_penalty_keeps_half_precision_and_masked_tokens():
    logits = torch.tensor([[2.0, -3.0, float("-inf"), 0.5, 8.0]], dtype=torch.bfloat16)
    got = kc.apply_repetition_penalty(logits, torch.tensor([[2, 1, 4, 4, 1]]), 2.0)
    assert got.dtype == torch.bfloat16, "the result has the dtype of logits"
    assert got.float().tolist() == [[2.0, -6.0, float("-inf"), 0.5, 4.0]]
    course.answer("bf16", got.float(), exact=True)


# ---------------------------------------------------------------------- 4.8, 4.9, 4.10 (weight quantisation)
def _groups_within_half_step(w, back, scale, group_size):
    out, width = w.shape
    err = (w.float() - back).abs().reshape(out, width // group_size, group_size).amax(-1)
    return float((err / (scale / 2).clamp_min(1e-30)).max())


@pytest.mark.exercise("4.8")
def test_int4_of_the_default_models_width_in_bfloat16_and_one_sided_groups():
    w = (torch.randn(5, 192, generator=torch.Generator().manual_seed(31)) * 0.1).to(torch.bfloat16)
    w[2, :64] = -w[2, :64].abs() - 0.01  # row 2: groups with negative values only
    w[3, 64:128] = w[3, 64:128].abs() + 0.01  # row 3, group 1: positive only
    packed, scale, zero = kc.quantize_int4(w, 64)
    assert tuple(packed.shape) == (5, 96) and tuple(scale.shape) == tuple(zero.shape) == (5, 3)
    back = kc.dequantize_int4(packed, scale, zero, 64, dtype=torch.bfloat16)
    assert back.dtype == torch.bfloat16
    back32 = kc.dequantize_int4(packed, scale, zero, 64)
    assert _groups_within_half_step(w, back32, scale, 64) <= 1 + 1e-5
    assert zero[2, 0] == 15 and zero[3, 1] == 0  # 0.0 is the top (bottom) of a one-sided range
    course.answer("scale", scale, rtol=1e-5, atol=1e-8)
    course.answer("zero", zero, exact=True)
    course.answer("packed", packed, exact=True)


@pytest.mark.exercise("4.8")
def test_int4_packing_of_a_3d_tensor():
    q = torch.randint(0, 16, (2, 3, 8), generator=torch.Generator().manual_seed(32)).to(torch.uint8)
    packed = kc.pack_int4(q)
    assert tuple(packed.shape) == (2, 3, 4)
    assert torch.equal(packed, q[..., 0::2] + 16 * q[..., 1::2])
    assert torch.equal(kc.unpack_int4(packed), q)
    course.answer("packed3d", packed, exact=True)


@pytest.mark.exercise("4.9")
def test_quant_linear_int4_without_bias_and_int8_of_another_width():
    torch.manual_seed(33)
    lin = torch.nn.Linear(96, 40, bias=False)
    q4 = kc.QuantLinear(lin, bits=4, group_size=32)
    w = q4.dequantize()
    assert _groups_within_half_step(lin.weight.detach(), w, q4.scale, 32) <= 1 + 1e-5
    x = torch.randn(7, 96, generator=torch.Generator().manual_seed(34))
    torch.testing.assert_close(q4(x), x @ w.T, rtol=1e-5, atol=1e-5)
    assert q4.weight_bytes() == 40 * 48 + 40 * 3 * 5
    lin8 = torch.nn.Linear(24, 10)  # 24 columns: no kernel here, dequantise-then-matmul
    q8 = kc.QuantLinear(lin8, bits=8)
    torch.testing.assert_close(q8.scale[:, 0], lin8.weight.detach().abs().amax(1) / 127, rtol=1e-6, atol=0)
    x8 = torch.randn(2, 3, 24, generator=torch.Generator().manual_seed(35))
    torch.testing.assert_close(q8(x8), x8 @ q8.dequantize().T + lin8.bias.detach(), rtol=1e-5, atol=1e-5)
    course.answer("int4_weight", w, rtol=1e-5, atol=1e-6)
    course.answer("int8_qweight", q8.qweight, exact=True)


@pytest.mark.exercise("4.9")
def test_quantize_model_on_a_one_head_model(one_head):
    q = kc.quantize_model(one_head, bits=4, group_size=8)
    layers = [n for n, m in q.named_modules() if isinstance(m, kc.QuantLinear)]
    assert len(layers) == 4 * 3 and all(q.get_submodule(n).bits == 4 for n in layers)
    sizes = kc.weight_bytes(q)
    # 3 layers of c_attn (24x8), c_proj (8x8), c_fc (32x8), c_proj (8x32): 1/2 byte + 5/8 byte per weight
    assert sizes["linear"] == 3 * (24 * 8 + 8 * 8 + 32 * 8 + 8 * 32) * 9 // 8
    idx = torch.randint(0, 257, (1, 12), generator=torch.Generator().manual_seed(36))
    with torch.no_grad():
        got = q(idx)
    assert torch.isfinite(got).all()
    course.answer("linear_bytes", sizes["linear"], exact=True)
    course.answer("logits", got[0, -1], rtol=1e-4, atol=1e-4)


@pytest.mark.exercise("4.10")
def test_awq_on_another_planted_case_and_a_coarse_grid():
    g = torch.Generator().manual_seed(37)
    w = torch.randn(32, 48, generator=g)
    x = torch.randn(300, 48, generator=g)
    x[:, 7] *= 50.0
    s, alpha = kc.awq_search(w, x, group_size=16, grid=3)
    assert alpha in (0.0, 1 / 3, 2 / 3) and alpha > 0

    def err(scale):
        wq = kc.dequantize_int4(*kc.quantize_int4(w * scale, 16), 16) / scale
        return float(((x @ w.T - x @ wq.T) ** 2).mean())

    assert err(s) < 0.8 * err(torch.ones(48))
    course.answer("alpha", alpha, rtol=1e-9)
    course.answer("scales", s, rtol=1e-4, atol=1e-6)
