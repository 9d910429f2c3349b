"""Exercises 3.15-3.18: the pieces of a Llama-family block, each against `transformers`' own
code (LlamaRMSNorm, LlamaRotaryEmbedding + apply_rotary_pos_emb, LlamaMLP, repeat_kv) and
against the written definition. Sizes follow CS336 assignment 1's cases (batch 4, 12 tokens,
64 features, 128 hidden, theta 10,000) plus odd lengths, per-row positions and other thetas.
Tolerances: float32 results, different kernels: 1e-6 absolute on O(1) values unless stated.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import course

train = course.load("train")


def llama_hf():
    """transformers' Llama modules (the oracle), imported by the first test that compares with
    them: about 3 s of imports (torch._dynamo among them) that a check of 3.1-3.14 need not pay."""
    return pytest.importorskip("transformers.models.llama.modeling_llama")


def hf_config(**kw):
    return llama_hf().LlamaConfig(**kw)


def _close(got, want, rule, atol=1e-6, rtol=1e-5):
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol, msg=lambda m: f"{rule}\n{m}")


# ---------------------------------------------------------------------- 3.15 RMSNorm
RMS_RULE = "RMSNorm(x) = x / sqrt(mean(x ** 2 over the last axis) + eps) * weight"


def _rmsnorm(dim, eps, seed=0):
    torch.manual_seed(seed)
    norm = train.RMSNorm(dim, eps=eps)
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.5 * torch.randn(dim))
    return norm


@pytest.mark.exercise("3.15")
@pytest.mark.parametrize("eps", [1e-5, 1e-6])
def test_rmsnorm_matches_llama_rmsnorm(eps):
    norm = _rmsnorm(64, eps)
    ref = llama_hf().LlamaRMSNorm(64, eps=eps)
    ref.load_state_dict(norm.state_dict())
    x = torch.randn(4, 12, 64)
    keep = x.clone()
    got = norm(x)
    assert got.shape == x.shape and got.dtype == x.dtype
    _close(got, ref(x), RMS_RULE)
    x64 = x.double()
    by_hand = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * norm.weight.double()
    _close(got.double(), by_hand, RMS_RULE)
    assert torch.equal(x, keep), "RMSNorm must not modify its input"


@pytest.mark.exercise("3.15")
def test_rmsnorm_puts_eps_inside_the_root():
    norm = _rmsnorm(16, 1e-5, seed=1)
    x = torch.randn(3, 5, 16) * 1e-3  # mean square ~1e-6, below eps: where eps sits matters
    x[1, 2] = 0.0
    got = norm(x)
    assert torch.isfinite(got).all(), "an all-zero token must give zeros, not NaN: eps goes inside the root"
    assert torch.equal(got[1, 2], torch.zeros(16)), "an all-zero token must give zeros"
    x64 = x.double()
    want = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight.double()
    _close(got.double(), want, "eps goes INSIDE the square root: x / sqrt(mean(x ** 2) + eps), "
           "not x / (sqrt(mean(x ** 2)) + eps) and not without eps", atol=1e-7)


@pytest.mark.exercise("3.15")
def test_rmsnorm_normalises_each_token_over_its_features():
    norm = train.RMSNorm(8, eps=1e-5)  # weight = ones: the output's RMS is ~1 per token
    x = torch.randn(2, 6, 8) * torch.logspace(0, 3, 6)[None, :, None]  # tokens of very different scales
    got = norm(x)
    rms = got.pow(2).mean(-1).sqrt()
    _close(rms, torch.ones_like(rms), "each token is normalised over its own features (the last axis): "
           "every token's output has RMS 1 when weight is 1, whatever the other tokens are", atol=1e-4)
    x2 = x.clone()
    x2[0, 0] *= 1000.0
    _close(norm(x2)[0, 1:], got[0, 1:], "scaling one token must not change any other token "
           "(the mean runs over the last axis, not over time or the batch)")


@pytest.mark.exercise("3.15")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rmsnorm_in_half_precision_equals_llama_rmsnorm(dtype):
    norm = _rmsnorm(32, 1e-5, seed=2).to(dtype)
    ref = llama_hf().LlamaRMSNorm(32, eps=1e-5).to(dtype)
    ref.load_state_dict(norm.state_dict())
    x = (torch.randn(3, 7, 32) * 4).to(dtype)
    got = norm(x)
    assert got.dtype == dtype
    assert torch.equal(got, ref(x)), ("in half precision: normalise in float32, cast back to x's dtype, "
                                      "then multiply by weight (LlamaRMSNorm's order)")


@pytest.mark.given
def test_rmsnorm_refuses_a_wrong_width():
    with pytest.raises(ValueError, match="last axis 8"):
        train.RMSNorm(8)(torch.randn(2, 4))
    with pytest.raises(ValueError, match="eps"):
        train.RMSNorm(8, eps=0.0)


# ---------------------------------------------------------------------- 3.16 RoPE
ROPE_RULE = ("RoPE, Hugging Face Llama's layout: the pair (x[..., i], x[..., i + D/2]) is rotated by "
             "positions[b, t] * theta ** (-2i / D)")


def hf_rope(x, positions, theta):
    """transformers' own RoPE: LlamaRotaryEmbedding's cos/sin, apply_rotary_pos_emb."""
    B, H, T, D = x.shape
    cfg = hf_config(hidden_size=H * D, num_attention_heads=H, head_dim=D,
                        rope_parameters={"rope_type": "default", "rope_theta": theta})
    cos, sin = llama_hf().LlamaRotaryEmbedding(cfg)(x, positions)
    return llama_hf().apply_rotary_pos_emb(x, x, cos, sin)[0]


@pytest.mark.exercise("3.16")
def test_rope_pairs_coordinate_i_with_i_plus_half():
    D, p = 8, 3
    x = torch.zeros(1, 1, 1, D)
    x[..., 0] = 1.0  # a unit vector on coordinate 0
    got = train.apply_rope(x, torch.tensor([[p]]), 10000.0)[0, 0, 0]
    want = torch.zeros(D)
    want[0], want[D // 2] = math.cos(p), math.sin(p)  # inv_freq[0] = 1: angle p, into coordinate D/2
    _close(got, want, "RoPE pairs coordinate i with i + D/2 (rotate half), not 2i with 2i + 1, and turns the pair "
           f"COUNTER-clockwise: a unit vector on coordinate 0 at position {p} must become cos({p}) on 0 and "
           f"+sin({p}) on {D // 2}")


@pytest.mark.exercise("3.16")
def test_rope_rotates_each_row_by_its_own_positions():
    torch.manual_seed(1)
    x = torch.randn(4, 3, 5, 16)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11], [0, 0, 0, 1, 2], [40, 41, 42, 43, 44]])
    got = train.apply_rope(x, positions, 10000.0)
    for b in range(4):
        alone = train.apply_rope(x[b:b + 1], positions[b:b + 1], 10000.0)
        _close(got[b:b + 1], alone, f"row {b} must be rotated by its own positions {positions[b].tolist()} "
               "(positions are per row; no row may use another row's)")


@pytest.mark.exercise("3.16")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rope_in_half_precision_equals_transformers(dtype):
    torch.manual_seed(4)
    x = torch.randn(2, 2, 6, 16).to(dtype)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [90, 91, 92, 93, 94, 95]])
    got = train.apply_rope(x, positions, 10000.0)
    assert got.dtype == dtype, f"apply_rope keeps x's dtype: {dtype} in, got {got.dtype}"
    want = hf_rope(x, positions, 10000.0)
    differ = int((got != want).sum())
    assert differ == 0, (
        f"in {dtype}, RoPE must equal transformers' bit for bit: the angles in float32, cos and sin rounded "
        f"to x's dtype BEFORE they meet x (not the result rounded at the end): {differ} of {got.numel()} "
        "elements differ")


@pytest.mark.exercise("3.16")
def test_rope_is_a_rotation_that_encodes_relative_position():
    torch.manual_seed(2)
    D = 32
    q, k = torch.randn(1, 1, 1, D), torch.randn(1, 1, 1, D)
    zero = train.apply_rope(q, torch.tensor([[0]]), 10000.0)
    _close(zero, q, "position 0 is the identity (every angle is 0)")
    dots = []
    for m, n in [(5, 2), (105, 102), (1003, 1000)]:
        qm = train.apply_rope(q, torch.tensor([[m]]), 10000.0)
        kn = train.apply_rope(k, torch.tensor([[n]]), 10000.0)
        _close(qm.norm(), q.norm(), "a rotation keeps each vector's length")
        dots.append(float((qm * kn).sum()))
    assert max(dots) - min(dots) < 1e-3, (f"q at m and k at n must score q.k by m - n alone (RoPE's point): "
                                          f"m - n = 3 at three offsets gave {dots}")


@pytest.mark.exercise("3.16")
@pytest.mark.parametrize("T, D, theta", [(12, 64, 10000.0), (7, 16, 100000.0), (1, 8, 500.0)])
def test_rope_matches_transformers(T, D, theta):
    torch.manual_seed(T)
    x = torch.randn(3, 2, T, D)
    positions = torch.arange(T).expand(3, T) + torch.tensor([[0], [5], [300]])  # each row its own
    keep = x.clone()
    got = train.apply_rope(x, positions, theta)
    assert got.shape == x.shape and got.dtype == x.dtype
    _close(got, hf_rope(x, positions, theta), ROPE_RULE, atol=2e-6)
    assert torch.equal(x, keep), "apply_rope must not modify x"


@pytest.mark.given
def test_rope_refuses_bad_positions():
    x = torch.randn(2, 1, 3, 8)
    with pytest.raises(ValueError, match=r"\(batch, time\) = \(2, 3\)"):
        train.apply_rope(x, torch.arange(3), 10000.0)  # one row of positions for a batch of two
    with pytest.raises(TypeError, match="integer"):
        train.apply_rope(x, torch.zeros(2, 3), 10000.0)
    with pytest.raises(ValueError, match="even"):
        train.apply_rope(torch.randn(2, 1, 3, 7), torch.zeros(2, 3, dtype=torch.long), 10000.0)
    with pytest.raises(ValueError, match="theta"):
        train.apply_rope(x, torch.zeros(2, 3, dtype=torch.long), 0.0)


# ---------------------------------------------------------------------- 3.17 SwiGLU
SWIGLU_RULE = "SwiGLU(x) = down_proj(silu(gate_proj(x)) * up_proj(x))"


@pytest.mark.exercise("3.17")
@pytest.mark.parametrize("dim, hidden", [(64, 128), (24, 40)])
def test_swiglu_matches_llama_mlp(dim, hidden):
    torch.manual_seed(dim)
    mlp = train.SwiGLU(dim, hidden)
    assert sorted(mlp.state_dict()) == ["down_proj.weight", "gate_proj.weight", "up_proj.weight"]
    ref = llama_hf().LlamaMLP(hf_config(hidden_size=dim, intermediate_size=hidden, num_attention_heads=4))
    ref.load_state_dict(mlp.state_dict())
    x = torch.randn(4, 12, dim)
    _close(mlp(x), ref(x), SWIGLU_RULE, atol=1e-5)


@pytest.mark.exercise("3.17")
def test_swiglu_puts_the_silu_on_the_gate():
    torch.manual_seed(3)
    mlp = train.SwiGLU(8, 16)
    x = torch.randn(5, 8)
    g, u = F.linear(x, mlp.gate_proj.weight), F.linear(x, mlp.up_proj.weight)
    got = mlp(x)
    swapped = F.linear(F.silu(u) * g, mlp.down_proj.weight)
    assert not torch.allclose(got, swapped, atol=1e-6), \
        "the SiLU went on up_proj(x): it belongs on gate_proj(x), and up_proj(x) enters linearly"
    _close(got, F.linear(F.silu(g) * u, mlp.down_proj.weight), SWIGLU_RULE)


# ---------------------------------------------------------------------- 3.18 GQA
def _per_head_reference(q, k, v, mask):
    """softmax(q k^T / sqrt(D)) v in float64, one query head at a time, head h on KV head h // group."""
    B, H, T, D = q.shape
    group = H // k.shape[1]
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for h in range(H):
        s = q[:, h].double() @ k[:, h // group].double().transpose(-1, -2) / math.sqrt(D)
        s = s.masked_fill(~mask[:, 0], float("-inf"))
        out[:, h] = torch.softmax(s, -1) @ v[:, h // group].double()
    return out


@pytest.mark.exercise("3.18")
@pytest.mark.parametrize("n_kv", [1, 2, 3, 6])
def test_gqa_query_head_h_reads_kv_head_h_over_group(n_kv):
    torch.manual_seed(n_kv)
    B, H, T, D = 2, 6, 5, 8
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, n_kv, T, D), torch.randn(B, n_kv, T, D)
    keep = [t.clone() for t in (q, k, v)]
    got = train.grouped_query_attention(q, k, v, is_causal=True)
    assert got.shape == (B, H, T, D) and got.dtype == q.dtype
    want = _per_head_reference(q, k, v, torch.ones(T, T, dtype=torch.bool).tril()[None, None].expand(B, 1, T, T))
    group = H // n_kv
    for h in range(H):
        _close(got[:, h].double(), want[:, h], f"query head {h} of {H} must attend with KV head {h // group} "
               f"= h // (H // H_kv) with {n_kv} KV heads (groups of consecutive heads), not h % H_kv = {h % n_kv}",
               atol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), keep)), "q, k, v must not be modified"


@pytest.mark.exercise("3.18")
def test_gqa_with_a_mask_equals_repeat_kv_then_attention():
    torch.manual_seed(4)
    B, H, n_kv, T, S, D = 3, 4, 2, 3, 7, 16  # 3 new queries over 7 cached keys, as in a decode cache
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, n_kv, S, D), torch.randn(B, n_kv, S, D)
    mask = torch.rand(B, 1, T, S) < 0.6
    mask[..., 0] = True
    got = train.grouped_query_attention(q, k, v, mask=mask)
    group = H // n_kv
    want = F.scaled_dot_product_attention(q, llama_hf().repeat_kv(k, group), llama_hf().repeat_kv(v, group),
                                          attn_mask=mask)
    _close(got, want, "with a mask: key s is visible to query t iff mask[b, h, t, s]; heads grouped as "
           "transformers' repeat_kv groups them (query head h on KV head h // group)", atol=1e-5)
    _close(got.double(), _per_head_reference(q, k, v, mask), "masked attention, head h on KV head h // group",
           atol=1e-5)


@pytest.mark.exercise("3.18")
def test_gqa_query_without_a_visible_key_gets_zeros():
    q, k, v = torch.randn(1, 2, 2, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    mask = torch.tensor([[False, False, False], [True, True, False]])[None, None]
    got = train.grouped_query_attention(q, k, v, mask=mask)
    assert torch.equal(got[0, :, 0], torch.zeros(2, 4)), \
        "a query that sees no key gets zeros (scaled_dot_product_attention's rule), not NaN"
    assert torch.isfinite(got).all()


@pytest.mark.given
def test_gqa_refuses_shapes_that_do_not_group():
    q = torch.randn(1, 6, 3, 8)
    with pytest.raises(ValueError, match="divide"):
        train.grouped_query_attention(q, torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8))
    with pytest.raises(TypeError, match="bool"):
        train.grouped_query_attention(q, torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), mask=torch.ones(3, 3))
    with pytest.raises(ValueError, match="not both"):
        train.grouped_query_attention(q, torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8),
                                      mask=torch.ones(3, 3, dtype=torch.bool), is_causal=True)
    with pytest.raises(ValueError, match="as many keys"):
        train.grouped_query_attention(q, torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), is_causal=True)
