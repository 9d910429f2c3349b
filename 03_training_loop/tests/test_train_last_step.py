"""Exercises 3.6 and 3.9, what the other tests let through: the evaluation after the last
step when the step count is not a multiple of `eval_every`, and bits per byte counted over
byte targets only (an independent check with a model whose loss is known exactly)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import course
from solutions.autograd import Tensor
from solutions.tokenizer import EOT, VOCAB_SIZE

train = course.load("train")

TOKENS = np.frombuffer(Tensor.__doc__.encode() * 40, dtype=np.uint8).astype(np.int64)


@pytest.mark.exercise("3.6")
@pytest.mark.parametrize("steps, eval_every, expected", [(7, 5, [5, 7]), (3, 5, [3]), (6, 3, [3, 6])])
def test_engine_loop_evaluates_after_the_last_step(steps, eval_every, expected):
    model = train.MLPLanguageModel(context=4, embed_dim=8, hidden=16, rng=0)
    opt = train.SGD(model.parameters(), lr=0.05)
    lines = []
    h = train.train_mlp_lm(model, opt, TOKENS[:3000], TOKENS[3000:3600], steps=steps, batch_size=8,
                           max_lr=0.05, warmup_steps=1, min_lr=0.01, eval_every=eval_every, seed=0,
                           log=lines.append)
    assert h["val_step"] == expected, (f"{steps} steps with eval_every={eval_every} must evaluate at "
                                       f"{expected} (every {eval_every} steps AND after the last), got {h['val_step']}")
    assert len(h["val_loss"]) == len(expected) and len(lines) == len(expected)
    # the last evaluation is of the final weights
    assert h["val_loss"][-1] == pytest.approx(train.evaluate_mlp_lm(model, TOKENS[3000:3600]), rel=1e-6)


class Uniform(nn.Module):
    """Logits all equal: every target costs exactly ln(vocabulary) nats."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*x.shape, VOCAB_SIZE)


@pytest.mark.exercise("3.9")
@pytest.mark.parametrize("eot_every", [4, 9, 10_000])
def test_bits_per_byte_divides_by_byte_targets_only(eot_every):
    n = 8 * 16 + 1
    tokens = torch.tensor([EOT if i % eot_every == eot_every - 1 else 97 + i % 26 for i in range(n)],
                          dtype=torch.int16)
    ev = train.evaluate(Uniform(), tokens, block_size=16, batch_size=3)
    targets = tokens[1:n].long()
    byte_targets = int((targets != EOT).sum())
    assert ev["tokens"] == 128
    assert ev["loss"] == pytest.approx(math.log(VOCAB_SIZE), rel=1e-6)
    expected = 128 * math.log2(VOCAB_SIZE) / byte_targets
    assert ev["bpb"] == pytest.approx(expected, rel=1e-6), (
        f"{128 - byte_targets} of the 128 targets are end-of-text marks: bits per byte is the total "
        f"loss in bits over the {byte_targets} byte targets = {expected:.4f}, got {ev['bpb']:.4f}")
