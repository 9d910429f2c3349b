"""The Llama decoder (given composition of 3.15-3.18) against `transformers`' LlamaForCausalLM.

Random small configurations (grouped-query, multi-head and multi-query attention, tied and
untied heads, odd lengths, several thetas and eps), the same weights loaded into both: logits
equal within float32 tolerance (1e-5; the kernels differ, so not bit for bit in general). With
padding (left or right), the real tokens' logits are compared, Hugging Face given the
positions its `generate` computes from the mask. The state-dict tests are of given code.
"""
from __future__ import annotations

import pytest
import torch

import course

train = course.load("train")
transformers = pytest.importorskip("transformers")

TOL = dict(rtol=1e-5, atol=1e-5)


def _pair(seed=0, **kw):
    """A course Llama with non-trivial norm gains, and LlamaForCausalLM with the same weights."""
    torch.manual_seed(seed)
    cfg = train.LlamaConfig(**(dict(vocab_size=97, dim=48, n_layers=2, n_heads=6, n_kv_heads=2, hidden_dim=80) | kw))
    model = train.Llama(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    hf = transformers.LlamaForCausalLM(cfg.to_hf()).eval()
    hf.load_state_dict(model.state_dict())
    return model, hf


def _rule(what):
    return lambda m: f"{what}: logits must equal LlamaForCausalLM's on the same weights\n{m}"


@pytest.mark.exercise("3.18")
@pytest.mark.parametrize("kw, T", [
    (dict(n_heads=6, n_kv_heads=2), 13),                                     # GQA
    (dict(n_heads=6, n_kv_heads=6, tie_embeddings=False), 7),                # MHA, own head
    (dict(n_heads=6, n_kv_heads=1, rope_theta=100000.0, norm_eps=1e-6), 1),  # MQA, SmolLM2's theta
    (dict(dim=64, n_heads=4, n_kv_heads=2, n_layers=3), 31),
])
def test_logits_equal_llama_for_causal_lm(kw, T):
    model, hf = _pair(seed=T, **kw)
    idx = torch.randint(0, 97, (3, T))
    with torch.no_grad():
        ours, theirs = model(idx), hf(idx).logits
    assert ours.shape == (3, T, 97) and ours.dtype == torch.float32
    torch.testing.assert_close(ours, theirs, **TOL, msg=_rule(f"{kw}, T={T}"))


@pytest.mark.exercise("3.18")
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_rows_equal_transformers_and_each_row_alone(side):
    model, hf = _pair(seed=5)
    lengths = [11, 4, 8]
    T = max(lengths)
    idx = torch.randint(0, 97, (3, T))
    mask = torch.zeros(3, T, dtype=torch.long)
    for b, n in enumerate(lengths):
        if side == "left":
            mask[b, T - n:] = 1
        else:
            mask[b, :n] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # what transformers' generate passes
    with torch.no_grad():
        ours = model(idx, attention_mask=mask)
        theirs = hf(idx, attention_mask=mask, position_ids=positions).logits
    real = mask.bool()
    assert torch.isfinite(ours).all(), "padding must not turn any logit into NaN or inf"
    torch.testing.assert_close(ours[real], theirs[real], **TOL, msg=_rule(f"{side} padding, real tokens"))
    for b, n in enumerate(lengths):
        alone = model(idx[b:b + 1][real[b:b + 1]].view(1, n))
        torch.testing.assert_close(ours[b][real[b]], alone[0], **TOL,
                                   msg=lambda m: f"row {b} padded ({side}) must give the logits of the row alone\n{m}")


@pytest.mark.exercise("3.18")
def test_positions_per_row_equal_transformers():
    """Rows continuing at different offsets (what a batched engine's prefill of later chunks sees)."""
    model, hf = _pair(seed=6, max_seq_len=128)
    idx = torch.randint(0, 97, (3, 5))
    positions = torch.arange(5).expand(3, 5) + torch.tensor([[0], [17], [90]])
    with torch.no_grad():
        ours = model(idx, positions=positions)
        theirs = hf(idx, position_ids=positions).logits
    torch.testing.assert_close(ours, theirs, **TOL, msg=_rule("each row at its own positions"))


@pytest.mark.exercise("3.18")
def test_gradients_equal_transformers():
    model, hf = _pair(seed=7, n_layers=1)
    model.train(), hf.train()
    idx = torch.randint(0, 97, (2, 9))
    for net, logits in ((model, model(idx)), (hf, hf(idx).logits)):
        torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten()).backward()
    theirs = dict(hf.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name].grad, rtol=1e-4, atol=1e-6,
                                   msg=lambda m: f"gradient of {name} must equal LlamaForCausalLM's\n{m}")


@pytest.mark.exercise("3.18")
def test_pieces_compose_to_forward():
    """The verbs the cached engines call (embed, blocks' ln_1 / attn.qkv / attn.attend / attn.out /
    ln_2 / mlp, head) give forward's logits; k and v come with n_kv_heads heads, rotated."""
    model, _ = _pair(seed=8)
    idx = torch.randint(0, 97, (2, 6))
    pos = torch.arange(6).expand(2, 6)
    with torch.no_grad():
        x = model.embed(idx, pos)
        for block in model.blocks:
            q, k, v = block.attn.qkv(block.ln_1(x), pos)
            assert q.shape == (2, 6, 6, 8) and k.shape == v.shape == (2, 2, 6, 8)
            x = x + block.attn.out(block.attn.attend(q, k, v, is_causal=True))
            x = x + block.mlp(block.ln_2(x))
        torch.testing.assert_close(model.head(x), model(idx), rtol=0, atol=0)


# ---------------------------------------------------------------------- given code
@pytest.mark.given
@pytest.mark.parametrize("tie", [True, False])
def test_state_dict_keys_are_llama_for_causal_lms(tie):
    model, hf = _pair(seed=9, tie_embeddings=tie)
    assert list(model.state_dict()) == list(hf.state_dict())  # the same keys, in the same order
    back = train.Llama(model.config)
    back.load_state_dict(hf.state_dict(), strict=True)
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), hf.state_dict().values()))
    assert (back.lm_head.weight is back.model.embed_tokens.weight) == tie
    again = train.Llama.from_hf(hf)
    assert again.config == model.config and not again.training


@pytest.mark.given
def test_tied_model_loads_without_a_head_key_and_refuses_a_different_head():
    model, _ = _pair(seed=10)
    sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    other = train.Llama(model.config)
    other.load_state_dict(sd, strict=True)
    assert torch.equal(other.lm_head.weight, model.model.embed_tokens.weight)
    sd["lm_head.weight"] = torch.zeros_like(model.lm_head.weight)
    with pytest.raises(RuntimeError, match="ties them"):
        other.load_state_dict(sd)


@pytest.mark.given
def test_config_from_transformers_round_trips_and_refuses_what_it_cannot_compute():
    cfg = train.LlamaConfig(vocab_size=50, dim=32, n_layers=3, n_heads=4, n_kv_heads=1, hidden_dim=72,
                            norm_eps=1e-6, rope_theta=100000.0, max_seq_len=512, tie_embeddings=False)
    assert train.LlamaConfig.from_hf(cfg.to_hf()) == cfg
    assert train.Llama.from_hf_config(cfg.to_hf()).config == cfg
    assert (cfg.head_dim, cfg.n_layer, cfg.block_size) == (8, 3, 512)
    hf_cfg = cfg.to_hf()
    hf_cfg.attention_bias = True
    with pytest.raises(ValueError, match="attention_bias"):
        train.LlamaConfig.from_hf(hf_cfg)
    with pytest.raises(ValueError, match="n_kv_heads"):
        train.LlamaConfig(vocab_size=50, dim=32, n_layers=1, n_heads=4, n_kv_heads=3, hidden_dim=8)
    with pytest.raises(ValueError, match="even head_dim"):
        train.LlamaConfig(vocab_size=50, dim=12, n_layers=1, n_heads=4, n_kv_heads=1, hidden_dim=8)
    with pytest.raises(ValueError, match="vocab_size"):
        train.LlamaConfig(vocab_size=0, dim=32, n_layers=1, n_heads=4, n_kv_heads=1, hidden_dim=8)


@pytest.mark.given
def test_forward_refuses_bad_input():
    model = train.random_llama(max_seq_len=16)
    with pytest.raises(ValueError, match="batch, time"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.zeros(1, 5))
    with pytest.raises(ValueError, match=r"positions must be \(batch, time\)"):
        model(torch.zeros(2, 5, dtype=torch.long), positions=torch.arange(5))
    with pytest.raises(ValueError, match="context 0..15"):
        model(torch.zeros(1, 5, dtype=torch.long), positions=torch.arange(12, 17)[None])
    with pytest.raises(ValueError, match="context 0..15"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.zeros(2, 5, dtype=torch.long), attention_mask=torch.ones(2, 4))


@pytest.mark.exercise("3.18")
def test_the_training_loop_trains_a_llama(one_thread):
    """`train.train` builds a Llama when the TrainConfig's model is a LlamaConfig (the path a
    retrained default model takes); on a stream of repeated phrases its loss falls."""
    from dataclasses import asdict

    model_cfg = train.LlamaConfig(vocab_size=257, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=64,
                                  max_seq_len=32)
    cfg = train.TrainConfig(model=model_cfg, batch_size=8, block_size=32, steps=20, max_lr=1e-2, min_lr=1e-3,
                            warmup_steps=3, eval_every=0, eval_tokens=1024)
    assert train.TrainConfig(**asdict(cfg)).model == model_cfg  # read back from a checkpoint's dict
    stream = torch.tensor(list(b"def add(a, b):\n    return a + b\n" * 200), dtype=torch.int16)
    model, history = train.train(cfg, stream, stream, progress=False)
    assert isinstance(model, train.Llama)
    first, last = sum(history["loss"][:3]) / 3, sum(history["loss"][-3:]) / 3
    assert last < 0.6 * first, f"20 steps on a repeated phrase: loss {first:.2f} -> {last:.2f}"
