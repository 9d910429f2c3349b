"""Exercise 4.6: `generate` — the decoding loop, with any cache or none."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import torch

from .attention import forward_cached
from .decoder import Decoder, embedding
from .options import CACHES, GenerationResult, check_generate
from .sampling import sample


@torch.no_grad()
def generate(model: Decoder, prompts: list[list[int]], max_new_tokens: int, *, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None, stop: int | Iterable[int] | None = None,
             cache: str | None = "prealloc", generator: torch.Generator | None = None) -> GenerationResult:
    """Continue each prompt by up to max_new_tokens tokens (a static batch, ragged prompts).

    Returns a GenerationResult (tokens, finish_reasons: see there). cache: a key of CACHES,
    one such cache for the batch (a row per prompt, max_len the longest prompt +
    max_new_tokens) that takes the right-padded prompts in ONE `forward_cached` call and each
    new token in one more (T = 1); or None: recompute, every sequence's full forward each step.
    Each step draws every row's next token with ONE `sample` call on the (B, V) logits of all
    rows (temperature, top_k, top_p, generator as given): a seed reproduces a run. A row that
    hit a stop token keeps running with the batch, its tail dropped, until every row has
    stopped or max_new_tokens steps ran. Greedy, each row continues as its prompt alone
    would: with a float cache, recompute's tokens exactly. Bad arguments: `check_generate`.
    """
    stop_ids = check_generate(model, prompts, max_new_tokens, stop, cache, temperature, top_k, top_p)
    t0, B = time.perf_counter(), len(prompts)
    if max_new_tokens == 0:
        return GenerationResult([[] for _ in prompts], ["length"] * B, time.perf_counter() - t0)
    # BEGIN SOLUTION 4.6
    # DECISION: where each row's next-token logits are (its LAST real token, with right-padded
    #   prompts), how the cached and recompute paths share one loop, and how stop tokens end rows
    #   (the first hit per row; stop once all rows have one).
    # HINT: Lay the prompts out right-padded in one (B, longest prompt + max_new_tokens)
    #   tensor of ids, and keep each row's length: both paths need the logits of each row's
    #   LAST real token.
    # HINT: One function "logits after this token" hides the two paths: recompute appends the
    #   token and runs the model over everything; the cache prefills once (n_new = the prompt
    #   lengths), then runs only the newest token, `token[:, None]`. The cache is
    #   `CACHES[cache].for_model(model, B, max_len=...)`.
    # HINT: The loop: sample, record the token, and for stop tokens remember each row's first
    #   hit (how many tokens it keeps); stop early once every row has hit one.
    device = embedding(model).device
    lengths = torch.tensor([len(p) for p in prompts], device=device)  # (B,) tokens so far
    width = int(lengths.max())
    seqs = torch.zeros(B, width + max_new_tokens, dtype=torch.long, device=device)  # right-padded
    for i, p in enumerate(prompts):
        seqs[i, : len(p)] = torch.tensor(p, device=device)
    rows = torch.arange(B, device=device)

    if cache is None:
        def logits_after(token: torch.Tensor | None) -> torch.Tensor:
            """Recompute: append the token, run the model over every whole sequence again."""
            if token is not None:
                seqs[rows, lengths] = token
                lengths.add_(1)
            return model(seqs[:, : int(lengths.max())])[rows, lengths - 1]
    else:
        kv = CACHES[cache].for_model(model, B, max_len=width + max_new_tokens)

        def logits_after(token: torch.Tensor | None) -> torch.Tensor:
            """Prefill the prompts once; then decode: only the newest token of each sequence."""
            if token is None:
                return forward_cached(model, seqs[:, :width], kv, n_new=lengths)[rows, lengths - 1]
            return forward_cached(model, token[:, None], kv)[:, 0]

    out = torch.zeros(B, max_new_tokens, dtype=torch.long, device=device)
    n_out = torch.full((B,), max_new_tokens, device=device)  # tokens each sequence keeps
    stopped = torch.zeros(B, dtype=torch.bool, device=device)
    stop_t = torch.tensor(stop_ids, dtype=torch.long, device=device)
    token = None
    for step in range(max_new_tokens):
        token = sample(logits_after(token), temperature=temperature, top_k=top_k, top_p=top_p,
                       generator=generator)
        out[:, step] = token
        if stop_ids:  # a sequence that stops keeps running with the batch; its tail is dropped
            hit = torch.isin(token, stop_t) & ~stopped
            n_out = torch.where(hit, step, n_out)
            stopped |= hit
            if bool(stopped.all()):
                break
    tokens = [row[:n] for row, n in zip(out.tolist(), n_out.tolist())]
    reasons = ["stop" if s else "length" for s in stopped.tolist()]
    # END SOLUTION
    return GenerationResult(tokens, reasons, time.perf_counter() - t0)


def generate_alone(model: Decoder, prompt: Sequence[int], max_new_tokens: int, sampling=None,
                   stop: Iterable[int] = ()) -> tuple[list[int], str]:
    """(tokens, finish reason) of one request generated by itself with `generate`: the oracle
    that the batched engines of stages 05–07 must match token for token.

    `sampling`: None or greedy, or any object with `temperature`, `top_k`, `top_p` and `seed`
    (stage 05's `SamplingParams`); a sampled request draws from a generator seeded with its
    `seed`, as those engines seed each request's own generator (on the model's device).
    """
    kw = {}
    if sampling is not None and sampling.temperature > 0:
        device = embedding(model).device
        kw = dict(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                  generator=torch.Generator(device=device).manual_seed(sampling.seed))
    res = generate(model, [list(prompt)], max_new_tokens, stop=list(stop) or None, **kw)
    return res.tokens[0], res.finish_reasons[0]
