"""Given code: the course's GPT (solutions/gpt.py) against transformers' GPT2LMHeadModel, and the
committed default model that stages 04-08 load."""
from __future__ import annotations

import math

import pytest
import torch

import course
from solutions.gpt import DEFAULT_WEIGHTS, GPT, GPTConfig, default_meta, load_default
from solutions.tokenizer import EOT, ByteTokenizer

pytestmark = pytest.mark.given
train = course.load("train")

transformers = pytest.importorskip("transformers")


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    m = GPT(GPTConfig(**({"block_size": 32, "n_layer": 2, "n_head": 4, "n_embd": 32} | kw))).eval()
    with torch.no_grad():  # non-trivial LayerNorm and bias values, so that a mix-up would show
        for name, p in m.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return m


def test_logits_equal_transformers_on_converted_weights():
    model = _model()
    hf = model.to_hf()
    idx = torch.randint(0, 257, (3, 32))
    with torch.no_grad():
        ours, theirs = model(idx), hf(idx).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)  # float32, different kernels


def test_from_hf_round_trip_is_exact():
    model = _model(seed=1)
    back = GPT.from_hf(model.to_hf())
    assert back.config == model.config
    sd, sd2 = model.state_dict(), back.state_dict()
    assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k]) for k in sd)
    assert back.lm_head.weight is back.transformer.wte.weight  # still tied


def test_the_course_gpt_trains_like_the_transformers_model():
    """Same weights, same batches, same loop: the same losses (the peer of bench.py's timing)."""
    model = _model(seed=2)
    hf = model.to_hf().train()
    model.train()
    opt_a = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt_b = torch.optim.AdamW(hf.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        x = torch.randint(0, 257, (4, 32), generator=g)
        y = torch.roll(x, -1, 1)
        losses = []
        for net, opt, fwd in ((model, opt_a, model), (hf, opt_b, lambda i: hf(i).logits)):
            loss = torch.nn.functional.cross_entropy(fwd(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-5)


@pytest.mark.skipif(not DEFAULT_WEIGHTS.exists(), reason="the default model is not trained yet")
def test_load_default_sanity():
    model, tok = load_default()
    meta = default_meta()
    assert isinstance(tok, ByteTokenizer) and not model.training
    assert DEFAULT_WEIGHTS.stat().st_size < 5e6  # committed: a few MB at most
    for key in ("config", "seed", "steps", "tokens_seen", "val_loss", "val_bpb", "train_seconds", "corpus"):
        assert key in meta, key
    assert 0.5 < meta["val_bpb"] < 3.5  # well below uniform guessing (8.0 bits/byte)
    assert meta["val_bpb"] == pytest.approx(meta["val_loss"] / math.log(2), rel=0.05)
    ids = train.generate(model, [EOT] + tok.encode("def "), 40, temperature=0.0)
    text = tok.decode(ids)
    assert isinstance(text, str) and len(text) > 0
    assert ids == train.generate(model, [EOT] + tok.encode("def "), 40, temperature=0.0)  # greedy: repeatable
