# GENERATED from solutions/batching/model_runner.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 05_batching/05_batching.ipynb. Exercises in this file (line of each hole, then the commands):
#   5.2 Static batching and the ragged step: line 37; `course check 5.2`, `course hint 5.2`
"""The model side of an engine step: one ragged forward over the planned chunks (5.2), and
sampling each ready request's next token."""

from __future__ import annotations

import torch

from solutions.kv_cache import Decoder, apply_repetition_penalty, embedding, forward_cached, sample

from .request import Request

#: Padded positions one forward may carry before a prompt chunk gets a forward of its own: a
#: padded position costs a real one's compute, a forward call a fixed cost worth 18-40 positions
#: (a (1, T) forward of the default model on one thread: 0.42-0.92 ms + 21-23 µs a position in
#: two runs of 07_serving/bench_batch.py's "forward" row on the course machine, its README).
PAD_TOKENS = 32


def forward_chunks(model: Decoder, cache, chunks: list[tuple[Request, int]]) -> tuple[list[Request], torch.Tensor]:
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
    """Next token per request with its own sampling parameters: the logits shaped per row
    (`shape_logits`), then greedy rows in one argmax; a request with a `seed` draws alone
    from its own generator (its tokens are those `generate` gives with that seed, whatever
    else runs); the unseeded ones in one draw per (temperature, top_k, top_p), from the
    generator of the group's first request (they promise no particular stream: one draw
    for 64 rows instead of 64). The ids stay on the device until ONE copy to the host at
    the end (the only host copy of a step's tokens)."""
    if not requests:
        return []
    logits = shape_logits(requests, logits)
    device = logits.device
    ids = torch.empty(len(requests), dtype=torch.long, device=device)
    greedy = [i for i, r in enumerate(requests) if r.sampling.temperature == 0]
    if greedy:
        rows = torch.tensor(greedy, device=device)
        ids[rows] = sample(logits[rows], temperature=0.0)
    unseeded: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):
        p = r.sampling
        if p.temperature > 0 and p.seed is None:
            unseeded.setdefault((p.temperature, p.top_k, p.top_p), []).append(i)
        elif p.temperature > 0:
            ids[i:i + 1] = sample(logits[i:i + 1], temperature=p.temperature, top_k=p.top_k, top_p=p.top_p,
                                  generator=r.generator)
    for (temperature, top_k, top_p), group in unseeded.items():
        rows = torch.tensor(group, device=device)
        ids[rows] = sample(logits[rows], temperature=temperature, top_k=top_k, top_p=top_p,
                           generator=requests[group[0]].generator)
    return ids.tolist()


def shape_logits(requests: list[Request], logits: torch.Tensor) -> torch.Tensor:
    """The logits each request samples from, row i for requests[i] (vLLM's per-row logits
    processors, batched: a few tensor operations for all rows, no Python loop over the
    vocabulary): `repetition_penalty` (stage 04's `apply_repetition_penalty` over each
    row's prompt + output, ragged rows padded with -1), and -inf on the stop tokens of a
    request that has made fewer than `min_tokens` tokens. `logits` itself is returned,
    unchanged, when no request asks for either (greedy stays `generate`'s argmax)."""
    if not any(r.sampling.shapes_logits for r in requests):
        return logits
    logits = logits.clone()
    device = logits.device
    pen = [i for i, r in enumerate(requests) if r.sampling.repetition_penalty != 1]
    if pen:
        lengths = torch.tensor([requests[i].num_tokens for i in pen], device=device)
        flat = torch.tensor([t for i in pen for t in requests[i].tokens], dtype=torch.long, device=device)
        context = torch.full((len(pen), int(lengths.max())), -1, dtype=torch.long, device=device)
        context[torch.arange(context.shape[1], device=device) < lengths[:, None]] = flat
        penalty = torch.tensor([requests[i].sampling.repetition_penalty for i in pen], device=device)
        rows = torch.tensor(pen, device=device)
        logits[rows] = apply_repetition_penalty(logits[rows], context, penalty)
    masked = [(i, t) for i, r in enumerate(requests) if len(r.output) < r.sampling.min_tokens for t in r.stop]
    if masked:
        rows, ids = torch.tensor(masked, dtype=torch.long, device=device).T
        logits[rows, ids] = float("-inf")
    return logits
