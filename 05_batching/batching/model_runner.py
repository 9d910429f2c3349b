# GENERATED from solutions/batching/model_runner.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 05_batching/05_batching.ipynb. Exercises in this file (line of each hole, then the commands):
#   5.2 Static batching and the ragged step: line 32; `course check 5.2`, `course hint 5.2`
"""The model side of an engine step: one ragged forward over the planned chunks (5.2), and
sampling each ready request's next token."""

from __future__ import annotations

import torch

from solutions.gpt import GPT
from solutions.kv_cache import forward_cached, sample

from .request import Request


def forward_chunks(model: GPT, cache, chunks: list[tuple[Request, int]]) -> tuple[list[Request], torch.Tensor]:
    """Run every planned chunk through `model` against the `cache` rows the requests own.

    chunks: (request, n), n >= 1, each request once: its next n pending tokens,
    `request.tokens[request.num_computed : request.num_computed + n]`, at cache row
    `request.slot` (rows at different positions, chunks of different lengths: ragged), via
    stage 04's `forward_cached` (it appends their K/V to the rows). Afterwards each request's
    `num_computed` has grown by its n. A forward's rows are right-padded to its longest
    chunk: a decode (n == 1) must not be padded to a long prompt chunk.

    Returns (ready, logits): the requests whose chunk reached their newest token (a decode,
    or the last chunk of a prefill: `num_pending == 0` afterwards), in any order, and
    logits (len(ready), vocab) at that position, row i predicting ready[i]'s next token;
    an empty tensor when none is ready. A request mid-prefill is not ready.
    """
    raise NotImplementedError('Exercise 5.2: Static batching and the ragged step — see 05_batching.ipynb')


def sample_tokens(requests: list[Request], logits: torch.Tensor) -> list[int]:
    """Next token per request with its own sampling parameters: greedy rows in one
    argmax, the others one by one with their own generator."""
    tokens = [0] * len(requests)
    greedy = [i for i, r in enumerate(requests) if r.sampling.temperature == 0]
    if greedy:
        for i, t in zip(greedy, sample(logits[greedy], temperature=0.0).tolist()):
            tokens[i] = t
    for i, r in enumerate(requests):
        if r.sampling.temperature > 0:
            p = r.sampling
            tokens[i] = int(sample(logits[i:i + 1], temperature=p.temperature, top_k=p.top_k, top_p=p.top_p,
                                   generator=r.generator)[0])
    return tokens
