"""The work that gets measured (given): a decoding engine, one decode step, one prefill chunk.

`ServingEngine` is stage 06's `PagedEngine`, the engine stage 07's server runs; stage 05's
`Engine` has the same API, so switching is that one line (or pass `engine_cls=` to
`decode_engine`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from solutions.batching import ContinuousBatching, Request
from solutions.checks import check_int
from solutions.kv_cache import KVCache, forward_cached
from solutions.kv_cache.decoder import Decoder, embedding
from solutions.paged import PagedEngine as ServingEngine  # what stage 07 serves; stage 05's Engine has its API

#: The positions an engine of `decode_engine` / `engine_max_len` holds per row at most: a
#: model's whole context when it is this short (the default model's 256), else this many
#: (SmolLM2's 8,192 would make a pool of 32 rows 12 GB in float32).
DECODE_MAX_LEN = 256


def engine_max_len(model) -> int | None:
    """None (the engine's default, the model's context) when the context is at most
    DECODE_MAX_LEN, else DECODE_MAX_LEN: the `max_len` to build a measured engine with."""
    return None if model.config.block_size <= DECODE_MAX_LEN else DECODE_MAX_LEN


def decode_engine(model: Decoder, batch: int, *, prompt_len: int = 32, max_new_tokens: int | None = None,
                  engine_cls=ServingEngine, seed: int = 0):
    """A fresh engine (continuous batching, `batch` rows) holding `batch` requests that are
    already prefilled and decoding: its next `step()` is a pure decode step of `batch` rows.
    Requests generate up to `max_new_tokens` (default: to the end of the context, at most
    DECODE_MAX_LEN positions: `engine_max_len`)."""
    check_int("batch", batch, 1)
    max_len = engine_max_len(model)
    context = model.config.block_size if max_len is None else max_len
    if not 1 <= prompt_len < context:
        raise ValueError(f"prompt_len must be in 1..{context - 1}, got {prompt_len!r}")
    max_new_tokens = context - prompt_len if max_new_tokens is None else max_new_tokens
    engine = (engine_cls(model, ContinuousBatching(batch)) if max_len is None
              else engine_cls(model, ContinuousBatching(batch), max_len=max_len))
    rng = np.random.default_rng(seed)
    for i in range(batch):
        prompt = rng.integers(0, model.config.vocab_size - 1, prompt_len).tolist()
        engine.add_request(Request(prompt, max_new_tokens, request_id=f"decode-{i}"))
    while any(r.phase != "decode" or not r.output for r in engine.requests.values()):
        engine.step()
    return engine


def decode_step_fn(model: Decoder, batch: int, context: int) -> Callable[[], torch.Tensor]:
    """A callable that runs ONE decode step of `batch` rows, each at position `context`
    (its K/V for positions 0..context-1 already in a stage-04 KVCache), and puts the
    cache back, so every call does exactly the same work."""
    if not 0 <= context < model.config.block_size:
        raise ValueError(f"context must be in 0..{model.config.block_size - 1}, got {context!r}")
    return _cached_step(model, batch, context, 1)


def prefill_chunk_fn(model: Decoder, chunk: int, *, context: int = 0, batch: int = 1) -> Callable[[], torch.Tensor]:
    """A callable that runs one prefill chunk of `chunk` tokens for `batch` rows after
    `context` cached tokens, and puts the cache back."""
    if chunk < 1 or context < 0 or context + chunk > model.config.block_size:
        raise ValueError(f"context {context!r} + chunk {chunk!r} must fit the context {model.config.block_size}")
    return _cached_step(model, batch, context, chunk)


def _cached_step(model: Decoder, batch: int, context: int, new: int) -> Callable[[], torch.Tensor]:
    """`forward_cached` of `new` fixed random tokens per row after `context` cached ones,
    the cache's lengths put back to `context` after each call."""
    device = embedding(model).device
    cache = KVCache.for_model(model, batch, max_len=context + new)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    if context:
        forward_cached(model, torch.randint(0, vocab, (batch, context), generator=gen).to(device), cache)
    idx = torch.randint(0, vocab, (batch, new), generator=gen).to(device)

    def step() -> torch.Tensor:
        logits = forward_cached(model, idx, cache)
        cache.lengths.fill_(context)
        return logits

    return step
