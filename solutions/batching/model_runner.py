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
    # BEGIN SOLUTION 5.2
    # DECISION: how to group ragged chunks into forwards (which rows share a padded forward, so a
    #   decode is never padded to a prompt chunk), where each row's next-token logits sit (its last
    #   real position, not the padding), and which requests are ready; for static batching, when a
    #   batch may start.
    # HINT: one `forward_cached(model, idx, cache, rows=..., n_new=...)` serves many rows at
    #   once: idx (B, longest chunk) right-padded, n_new the real length of each row, rows
    #   the cache rows (a list of slots; a slice when they are consecutive avoids a copy).
    # HINT: group the chunks in two, decodes (n == 1) and longer ones, so that no decode is
    #   padded; in each group fill idx, call forward_cached, and read row b's logits at
    #   position n_new[b] - 1. (The reference goes one step further: it splits the longer
    #   ones by length too, so that a short prompt is not padded to a long one.)
    # HINT: add n to each request's `num_computed`, then keep the logits of those with
    #   nothing pending left; `torch.stack` them.
    device = embedding(model).device
    ready, rows_logits = [], []
    groups = [[c for c in chunks if c[1] == 1]]
    for c in sorted((c for c in chunks if c[1] > 1), key=lambda c: -c[1]):  # longest first
        g = groups[-1] if len(groups) > 1 else []
        if g and (len(g) + 1) * g[0][1] - sum(n for _, n in g) - c[1] > PAD_TOKENS:
            g = []  # padding this chunk to the group's longest would cost more than its own forward
        if not g:
            groups.append(g)
        g.append(c)
    for group in filter(None, groups):
        group = sorted(group, key=lambda c: c[0].slot)
        slots = [r.slot for r, _ in group]
        # consecutive cache rows are read as a view of the cache; scattered ones are gathered (a copy)
        rows = slice(slots[0], slots[-1] + 1) if slots[-1] - slots[0] == len(slots) - 1 else slots
        n_new = [n for _, n in group]  # Python ints: the host knows them, no device round trip
        width = max(n_new)
        # the ids, right-padded, built on the host and copied to the device in one transfer
        idx = torch.tensor([r.tokens[r.num_computed:r.num_computed + n] + [0] * (width - n) for r, n in group],
                           dtype=torch.long, device=device)
        logits = forward_cached(model, idx, cache, rows=rows, n_new=n_new)
        last = logits[torch.arange(len(group), device=device),
                      torch.tensor([n - 1 for n in n_new], device=device)]  # (B, V)
        for b, (r, n) in enumerate(group):
            r.num_computed += n
            if r.num_pending == 0:
                ready.append(r)
                rows_logits.append(last[b])
    return ready, (torch.stack(rows_logits) if ready else torch.empty(0))
    # END SOLUTION


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
