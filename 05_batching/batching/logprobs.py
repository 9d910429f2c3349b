# GENERATED from solutions/batching/logprobs.py by `course stubs --write`.
# Nothing to write here: given code of stage 05 (05_batching/05_batching.ipynb).
"""Log-probabilities an engine reports when a request asks for them (given code): vLLM's
`SamplingParams.logprobs` (each sampled token's, with the k most likely alternatives) and
`prompt_logprobs` (each prompt token's, given the tokens before it).

Which distribution: the model's raw next-token distribution, `log_softmax(logits)` in
float32, before temperature, top-p, repetition penalty or the min_tokens mask (vLLM's
default `logprobs_mode="raw_logprobs"`; its V1 sampler computes them from the logits before
any processing). So a token's log-probability does not depend on how it was drawn, and the
prompt's log-probabilities (an evaluation's loglikelihood) are the model's own.

A request that asks for none costs nothing: the engine calls these only for the rows that ask.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from solutions.kv_cache import Decoder, KVCache, forward_cached

#: Prompt positions per forward when scoring a prompt (bounds the (T, vocab) logits held at once).
PROMPT_CHUNK = 512


class TokenLogprob(NamedTuple):
    """One position: `token` (the id sampled, or the prompt's), its `logprob`, and `top`,
    the `k` most likely ids with theirs, most likely first."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def _entries(logprobs: torch.Tensor, tokens: torch.Tensor, k: int) -> list[TokenLogprob]:
    """Rows of float32 log-probabilities (B, V), the ids chosen (B,), top `k`: one entry per row."""
    chosen = logprobs.gather(1, tokens[:, None])[:, 0].tolist()
    if k > 0:
        values, ids = logprobs.topk(min(k, logprobs.shape[1]), dim=1)
        top = [tuple(zip(i, v)) for i, v in zip(ids.tolist(), values.tolist())]
    else:
        top = [()] * len(chosen)
    return [TokenLogprob(int(t), float(lp), tp) for t, lp, tp in zip(tokens.tolist(), chosen, top)]


def sample_logprobs(logits: torch.Tensor, tokens: list[int], ks: list[int]) -> list[TokenLogprob]:
    """The entries of one step's sampled tokens: row i of the raw `logits` (B, V), the token
    sampled from it `tokens[i]`, its top `ks[i]` alternatives (0: none)."""
    if not tokens:
        return []
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    ids = torch.tensor(tokens, dtype=torch.long, device=logits.device)
    k = max(ks)
    return [TokenLogprob(e.token, e.logprob, e.top[:ki]) for e, ki in zip(_entries(logprobs, ids, k), ks)]


def prompt_logprobs(model: Decoder, prompt: list[int] | tuple[int, ...], k: int,
                    chunk: int = PROMPT_CHUNK) -> list[TokenLogprob | None]:
    """Each prompt token's entry given the tokens before it, with its top `k`; the first
    token has none (None: nothing precedes it). A forward of its own over the prompt (the
    engine's prefill may have skipped cached tokens, and keeps only the last position's
    logits), `chunk` positions at a time through a one-row scratch cache."""
    prompt = [int(t) for t in prompt]
    out: list[TokenLogprob | None] = [None]
    if len(prompt) < 2:
        return out
    device = next(model.parameters()).device
    cache = KVCache.for_model(model, 1, max_len=len(prompt))
    with torch.no_grad():
        for start in range(0, len(prompt) - 1, chunk):
            idx = torch.tensor([prompt[start:start + chunk]], dtype=torch.long, device=device)
            logits = forward_cached(model, idx, cache)[0]  # (T, V): position t predicts token start + t + 1
            nxt = torch.tensor(prompt[start + 1:start + 1 + idx.shape[1]], dtype=torch.long, device=device)
            logprobs = torch.log_softmax(logits[:len(nxt)].float(), dim=-1)
            out += _entries(logprobs, nxt, k)
    return out
