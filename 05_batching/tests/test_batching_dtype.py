"""The engine in bfloat16 on the CPU: the course's default model loaded in bfloat16, the KV
cache in the model's dtype, greedy tokens equal to float32's where they must be.

Where they must agree, and where they need not: bfloat16 keeps 8 significant bits, so every
logit of the default model (|logit| <= ~20) moves by up to ~0.12 against float32 (measured
by the first test, which fails if the error grows past MAX_ERROR). Greedy can choose another
token only where float32's top two logits are closer than twice the error: from the first
such near-tie on, the two continuations may part (their contexts differ) and are not
compared; before it, every token must be float32's. TOLERANCE = 2 x MAX_ERROR.
"""

from __future__ import annotations

import pytest
import torch

import course
from solutions.device import greedy_margins, must_agree
from solutions.gpt import load_default
from solutions.kv_cache import generate
from solutions.tokenizer import ByteTokenizer

b = course.load("batching")
PROMPTS = ["def fibonacci(n):\n", "import os\n", "class Stack:\n    def push(self", "for i in range(10):\n",
           "# Return the sum of a list\n", "with open(path) as f:\n"]
N = 16
MAX_ERROR = 0.25  # the largest |bfloat16 logit - float32 logit| allowed (measured: ~0.12)
TOLERANCE = 2 * MAX_ERROR


@pytest.fixture(scope="module")
def models():
    tok = ByteTokenizer()
    m32, _ = load_default()
    m16, _ = load_default(dtype=torch.bfloat16)
    ids = [tok.encode(p) for p in PROMPTS]
    refs = generate(m32, ids, N).tokens  # float32 greedy (batched: float32 rounding, far below TOLERANCE)
    return m32, m16, ids, refs


@pytest.mark.given
def test_bfloat16_logits_are_float32s_within_the_stated_error(models):
    """The premise of the comparisons: the bfloat16 model is the float32 one rounded (same
    weights to bfloat16, tied head), and its logits stay within MAX_ERROR of float32's."""
    m32, m16, ids, refs = models
    assert {p.dtype for p in m16.parameters()} == {torch.bfloat16}
    assert m16.lm_head.weight is m16.transformer.wte.weight
    for (name, p32), p16 in zip(m32.named_parameters(), m16.parameters()):
        assert torch.equal(p32.to(torch.bfloat16), p16), name
    seq = torch.tensor([ids[0] + refs[0]])
    with torch.no_grad():
        err = (m16(seq).float() - m32(seq)).abs().max().item()
    assert 0 < err < MAX_ERROR


def _agreed(m32, ids, refs, outputs) -> int:
    agreed = 0
    for p, ref, out in zip(ids, refs, outputs):
        k = must_agree(greedy_margins(m32, p, ref), TOLERANCE)
        assert out[:k] == ref[:k], f"bfloat16 {out} vs float32 {ref}: they must agree on the first {k} tokens"
        agreed += k
    return agreed


@pytest.mark.exercise("5.4")
def test_continuous_batching_in_bfloat16_gives_float32s_greedy_tokens(models):
    """Six requests through the engine at once (continuous batching, 4 rows, so some wait
    and join mid-run) on the bfloat16 model: the cache is bfloat16, and each answer is
    float32's `generate` up to float32's first near-tie (most of every answer here)."""
    m32, m16, ids, refs = models
    engine = b.Engine(m16, b.ContinuousBatching(4))
    assert engine.cache.k.dtype == torch.bfloat16 and engine.cache.k.device == m16.transformer.wte.weight.device
    reqs = [engine.add_request(b.Request(p, N)) for p in ids]
    while engine.has_unfinished():
        engine.step()
    assert _agreed(m32, ids, refs, [r.output for r in reqs]) >= 0.75 * N * len(ids)


@pytest.mark.exercise("5.4")
def test_sampling_in_bfloat16_is_reproducible_with_a_seed(models):
    """A seeded sampled request draws from its own generator on the model's device: the same
    seed gives the same tokens in a second engine, another seed other tokens."""
    _, m16, ids, _ = models

    def run(seed: int) -> list[int]:
        engine = b.Engine(m16, b.ContinuousBatching(2))
        r = engine.add_request(b.Request(ids[1], N, sampling=b.SamplingParams(temperature=1.0, seed=seed)))
        assert r.generator.device == m16.transformer.wte.weight.device
        while engine.has_unfinished():
            engine.step()
        return r.output

    first = run(3)
    assert run(3) == first and run(4) != first
