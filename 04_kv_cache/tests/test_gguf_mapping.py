"""4.13: GGUF's Llama tensors under `LlamaForCausalLM`'s names, Q and K un-permuted, against
transformers' own GGUF loading: `AutoModelForCausalLM.from_pretrained(dir, gguf_file=name)` on
tiny Llama files gguf wrote (grouped-query and multi-head attention, F32 / Q8_0 / Q4_1 tensors),
so a wrong permutation, head count or name fails here. (SmolLM2's real file: test_smollm2.py.)"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

import course

kc = course.load("kv_cache")
pytestmark = pytest.mark.exercise("4.13")
Q = gguf.GGMLQuantizationType


def llama_cpp_permute(w, n_head):
    """convert_hf_to_gguf.py's `LlamaModel.permute` (llama.cpp): Hugging Face's rows -> GGUF's."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def from_pretrained(path):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()


CASES = {"gqa 4/2, quantised": dict(n_head=4, n_kv=2, types={"token_embd": Q.Q8_0, "attn_q": Q.Q4_1,
                                                              "attn_k": Q.Q4_1, "ffn_down": Q.Q8_0}),
         "mha 2/2": dict(n_head=2, n_kv=2, seed=3),
         "gqa 8/2, head_dim 8": dict(n_head=8, n_kv=2, seed=4, types={"attn_k": Q.Q8_0})}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory, write_llama_gguf):
    path = write_llama_gguf(tmp_path_factory.mktemp("map") / "tiny.gguf", **CASES[request.param])
    return request.param, path, from_pretrained(path)


def test_every_tensor_equals_transformers_own_loading(case):
    which, path, hf = case
    g = kc.read_gguf(path)
    ours, theirs = kc.llama_state_dict(g), hf.state_dict()
    assert sorted(ours) == sorted(set(theirs) - {"lm_head.weight"}), \
        f"{which}: names {sorted(set(ours) ^ (set(theirs) - {'lm_head.weight'}))[:4]} differ from LlamaForCausalLM's"
    for name, w in ours.items():
        assert w.dtype == torch.float32 and w.shape == theirs[name].shape, f"{which}: {name} {tuple(w.shape)} {w.dtype}"
        if not torch.equal(w, theirs[name]):
            rule = (" (llama.cpp stores each head's rows interleaved: GGUF row 2j + k is Hugging Face's row "
                    "k * head_dim/2 + j; undo it over the query heads for q_proj, the KV heads for k_proj)"
                    if "q_proj" in name or "k_proj" in name else "")
            raise AssertionError(f"{which}: {name} differs from transformers' parameter{rule}")


def test_the_config_equals_transformers(case):
    which, path, hf = case
    g = kc.read_gguf(path)
    c, h = kc.llama_config(g), hf.config
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "max_position_embeddings", "tie_word_embeddings"):
        assert c[key] == getattr(h, key), f"{which}: {key} {c[key]!r}, transformers {getattr(h, key)!r}"
    assert c["rms_norm_eps"] == pytest.approx(h.rms_norm_eps, rel=1e-7)
    assert c["rope_theta"] == h.rope_parameters["rope_theta"]


def test_the_course_llama_computes_transformers_logits(case):
    which, path, hf = case
    g = kc.read_gguf(path)
    model = kc.llama_from_gguf(g)
    idx = torch.tensor([[5, 17, 3, 90, 42, 0, 7, 64, 1]])
    with torch.no_grad():
        torch.testing.assert_close(model(idx), hf(idx).logits, atol=1e-4, rtol=1e-4, msg=lambda m: f"{which}: {m}")


@pytest.mark.parametrize("n_head,head_dim", [(1, 8), (3, 64), (2, 16)])
def test_unpermute_inverts_llama_cpp_permute(n_head, head_dim):
    w = np.arange(n_head * head_dim * 3, dtype=np.float32).reshape(n_head * head_dim, 3)
    stored = llama_cpp_permute(w, n_head)
    back = kc.unpermute_qk(stored, n_head)
    assert back.shape == w.shape and back.dtype == w.dtype
    assert np.array_equal(back, w), (
        f"rows {back[:, 0].astype(int).tolist()[:head_dim]}...: unpermute_qk must invert llama.cpp's permute "
        "(GGUF row 2j + k of a head is Hugging Face's row k * head_dim/2 + j), per head")


def test_unpermute_a_small_head_by_hand():
    stored = np.array([[0.0], [4.0], [1.0], [5.0], [2.0], [6.0], [3.0], [7.0]])  # one head of 8, interleaved
    assert kc.unpermute_qk(stored, 1)[:, 0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
    two = np.concatenate([stored, stored + 10])
    assert kc.unpermute_qk(two, 2)[:, 0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17], \
        "each head is un-permuted by itself"


def test_names():
    assert kc.hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert kc.hf_name("output_norm.weight") == "model.norm.weight"
    assert kc.hf_name("output.weight") == "lm_head.weight"
    assert kc.hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight"
    assert kc.hf_name("blk.0.attn_output.weight") == "model.layers.0.self_attn.o_proj.weight"
    assert kc.hf_name("blk.3.ffn_gate.weight") == "model.layers.3.mlp.gate_proj.weight"
    assert kc.hf_name("blk.3.ffn_down.weight") == "model.layers.3.mlp.down_proj.weight"
    assert kc.hf_name("blk.29.attn_norm.weight") == "model.layers.29.input_layernorm.weight"
    assert kc.hf_name("blk.29.ffn_norm.weight") == "model.layers.29.post_attention_layernorm.weight"
    for bad in ("blk.1.attn_qkv.weight", "blk.x.attn_q.weight", "token_embd", "blk.1.attn_q.weight.extra"):
        with pytest.raises(ValueError, match="gguf_name"):
            kc.hf_name(bad)


def test_unpermute_bad_head_counts():
    w = np.zeros((24, 4), dtype=np.float32)
    for bad in (0, 5, 24, 2.0):
        with pytest.raises(ValueError, match="n_heads"):
            kc.unpermute_qk(w, bad)
    assert kc.unpermute_qk(w, 3).shape == (24, 4) and kc.unpermute_qk(w, 12).shape == (24, 4)
