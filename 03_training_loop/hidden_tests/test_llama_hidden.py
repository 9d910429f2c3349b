"""Stage 03, held-out cases of 3.15-3.18: other sizes, dtypes, thetas, positions and head
groupings than the visible tests show, against transformers' own code; each reports its outputs."""
from __future__ import annotations

import pytest
import torch

import course

train = course.load("train")
transformers = pytest.importorskip("transformers")


def llama_hf():
    """transformers' Llama modules, imported by the first test that compares with them."""
    return pytest.importorskip("transformers.models.llama.modeling_llama")


# ---------------------------------------------------------------------- 3.15
@pytest.mark.exercise("3.15")
@pytest.mark.parametrize("dtype, eps", [(torch.float32, 1e-6), (torch.float64, 1e-5), (torch.bfloat16, 1e-5)])
def test_rmsnorm_other_shapes_and_dtypes(dtype, eps):
    torch.manual_seed(11)
    norm = train.RMSNorm(24, eps=eps)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(24))
    norm = norm.to(dtype)
    ref = llama_hf().LlamaRMSNorm(24, eps=eps).to(dtype)
    ref.load_state_dict(norm.state_dict())
    x = (torch.randn(2, 3, 5, 24) * torch.logspace(-4, 1, 5)[None, None, :, None]).to(dtype)
    got = norm(x)
    course.answer("y", got.float(), rtol=1e-5, atol=1e-6 if dtype != torch.bfloat16 else 1e-2)
    assert got.dtype == dtype
    torch.testing.assert_close(got, ref(x), rtol=1e-5, atol=1e-6 if dtype != torch.bfloat16 else 0)


# ---------------------------------------------------------------------- 3.16
@pytest.mark.exercise("3.16")
@pytest.mark.parametrize("theta, D", [(500000.0, 32), (10000.0, 2)])
def test_rope_far_positions_left_padded_rows(theta, D):
    torch.manual_seed(12)
    B, H, T = 3, 3, 9
    x = torch.randn(B, H, T, D)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, :4] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0) + torch.tensor([[0], [0], [4000]])
    got = train.apply_rope(x, positions, theta)
    course.answer("rotated", got, rtol=1e-4, atol=1e-5)
    cfg = transformers.LlamaConfig(hidden_size=H * D, num_attention_heads=H, head_dim=D,
                                   rope_parameters={"rope_type": "default", "rope_theta": theta})
    cos, sin = llama_hf().LlamaRotaryEmbedding(cfg)(x, positions)
    torch.testing.assert_close(got, llama_hf().apply_rotary_pos_emb(x, x, cos, sin)[0], rtol=1e-5, atol=2e-5)


@pytest.mark.exercise("3.16")
def test_rope_in_bfloat16():
    torch.manual_seed(13)
    x = torch.randn(2, 2, 6, 16).to(torch.bfloat16)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [9, 10, 11, 12, 13, 14]])
    got = train.apply_rope(x, positions, 10000.0)
    assert got.dtype == torch.bfloat16
    course.answer("rotated", got.float(), rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------------- 3.17
@pytest.mark.exercise("3.17")
def test_swiglu_two_dimensional_input():
    torch.manual_seed(14)
    mlp = train.SwiGLU(40, 56)
    ref = llama_hf().LlamaMLP(transformers.LlamaConfig(hidden_size=40, intermediate_size=56, num_attention_heads=4))
    ref.load_state_dict(mlp.state_dict())
    x = torch.randn(7, 40) * 3
    got = mlp(x)
    course.answer("y", got, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got, ref(x), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- 3.18
@pytest.mark.exercise("3.18")
def test_gqa_decode_against_a_cache():
    """Two new queries over nine cached keys, eight query heads on two KV heads."""
    torch.manual_seed(15)
    B, H, n_kv, T, S, D = 2, 8, 2, 2, 9, 8
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, n_kv, S, D), torch.randn(B, n_kv, S, D)
    lengths = torch.tensor([9, 5])  # row 1 has only 5 keys; its queries sit at 3 and 4
    q_pos = lengths[:, None] - T + torch.arange(T)
    mask = (torch.arange(S)[None, None, :] <= q_pos[:, :, None])[:, None]
    got = train.grouped_query_attention(q, k, v, mask=mask)
    course.answer("y", got, rtol=1e-4, atol=1e-5)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, llama_hf().repeat_kv(k, H // n_kv), llama_hf().repeat_kv(v, H // n_kv), attn_mask=mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.exercise("3.18", points=2)
def test_llama_other_shape_with_left_padding():
    torch.manual_seed(16)
    cfg = train.LlamaConfig(vocab_size=71, dim=40, n_layers=2, n_heads=10, n_kv_heads=5, hidden_dim=64,
                            rope_theta=250000.0, norm_eps=1e-6, tie_embeddings=False)
    model = train.Llama(cfg).eval()
    hf = transformers.LlamaForCausalLM(cfg.to_hf()).eval()
    hf.load_state_dict(model.state_dict())
    idx = torch.randint(0, 71, (2, 17))
    mask = torch.ones(2, 17, dtype=torch.long)
    mask[0, :6] = 0
    with torch.no_grad():
        ours = model(idx, attention_mask=mask)
        theirs = hf(idx, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    real = mask.bool()
    course.answer("logits", ours[real], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours[real], theirs[real], rtol=1e-5, atol=1e-5)
