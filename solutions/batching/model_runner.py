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
    # BEGIN SOLUTION 5.2
    # HINT: one `forward_cached(model, idx, cache, rows=..., n_new=...)` serves many rows at
    #   once: idx (B, longest chunk) right-padded, n_new the real length of each row, rows
    #   the cache rows (a list of slots; a slice when they are consecutive avoids a copy).
    # HINT: group the chunks in two, decodes (n == 1) and longer ones, so that no decode is
    #   padded; in each group fill idx, call forward_cached, and read row b's logits at
    #   position n_new[b] - 1.
    # HINT: add n to each request's `num_computed`, then keep the logits of those with
    #   nothing pending left; `torch.stack` them.
    device = model.transformer.wte.weight.device
    ready, rows_logits = [], []
    groups = ([c for c in chunks if c[1] == 1], [c for c in chunks if c[1] > 1])
    for group in filter(None, groups):
        group = sorted(group, key=lambda c: c[0].slot)
        slots = [r.slot for r, _ in group]
        # consecutive cache rows are read as a view of the cache; scattered ones are gathered (a copy)
        rows = slice(slots[0], slots[-1] + 1) if slots[-1] - slots[0] == len(slots) - 1 else slots
        n_new = torch.tensor([n for _, n in group], device=device)
        idx = torch.zeros(len(group), int(n_new.max()), dtype=torch.long, device=device)
        for b, (r, n) in enumerate(group):
            idx[b, :n] = torch.tensor(r.tokens[r.num_computed:r.num_computed + n], device=device)
        logits = forward_cached(model, idx, cache, rows=rows, n_new=n_new)
        last = logits[torch.arange(len(group), device=device), n_new - 1]  # (B, V)
        for b, (r, n) in enumerate(group):
            r.num_computed += n
            if r.num_pending == 0:
                ready.append(r)
                rows_logits.append(last[b])
    return ready, (torch.stack(rows_logits) if ready else torch.empty(0))
    # END SOLUTION


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
