"""The paged engine in bfloat16 on the CPU: block pools in the model's dtype on its device,
greedy tokens equal to float32's up to float32's first near-tie.

Where they must agree and where they need not: as in stage 05's test_batching_dtype.py
(which also measures the bfloat16 logit error, ~0.12 on the default model): a greedy choice
can differ only where float32's top two logits are closer than twice the error (TOLERANCE);
after the first such near-tie the continuations may part, before it they may not.
"""

from __future__ import annotations

import pytest
import torch

import course
from solutions.batching import ContinuousBatching, Request
from solutions.device import greedy_margins, must_agree
from solutions.gpt import load_default
from solutions.kv_cache import generate
from solutions.tokenizer import ByteTokenizer

p = course.load("paged")
pytestmark = pytest.mark.exercise("6.8")
N = 16
TOLERANCE = 0.5


def test_paged_engine_in_bfloat16_gives_float32s_greedy_tokens():
    """Five requests sharing a 16-token system prompt (a prefix-cache hit on a bfloat16
    block) on 4 rows of a bfloat16 paged engine: each answer is float32's `generate` up to
    float32's first near-tie, and those prefixes are most of the answers."""
    tok = ByteTokenizer()
    m32, _ = load_default()
    m16, _ = load_default(dtype=torch.bfloat16)
    system = tok.encode("#!/usr/bin/env python3\n")[:16]  # one whole block
    ids = [system + tok.encode(t) for t in ("def main():\n", "import os\n", "for i in range(10):\n",
                                             "class Stack:\n", "with open(path) as f:\n")]
    engine = p.PagedEngine(m16, ContinuousBatching(4), block_size=16)
    assert engine.cache.k.dtype == torch.bfloat16 and engine.cache.v.dtype == torch.bfloat16
    assert engine.cache.k.device == m16.transformer.wte.weight.device
    reqs = [engine.add_request(Request(x, N)) for x in ids]
    while engine.has_unfinished():
        engine.step()
    assert engine.prefix_hits >= 16
    refs = generate(m32, ids, N).tokens
    agreed = 0
    for x, ref, r in zip(ids, refs, reqs):
        k = must_agree(greedy_margins(m32, x, ref), TOLERANCE)
        assert r.output[:k] == ref[:k], f"bfloat16 {r.output} vs float32 {ref}: they must agree on the first {k}"
        agreed += k
    assert agreed >= 0.75 * N * len(ids), f"only {agreed} tokens were comparable"
