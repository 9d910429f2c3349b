"""Exercise 4.5: choosing the next token — greedy, temperature, top-k, top-p."""

from __future__ import annotations

import torch

from solutions.checks import is_int, is_number


def sample(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None,
           top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Pick one token per row: logits (B, V) floating -> ids (B,) int64. `logits` is not modified.

    temperature == 0: greedy, the argmax (the generator is not used). Otherwise the ids are
    ONE draw `torch.multinomial(probs, 1, generator=generator)` for all rows (the same seed
    gives the same draws), probs (float32, rows summing to 1) being the softmax of logits /
    temperature (< 1 sharpens, > 1 flattens) over each row's candidates, 0 elsewhere: the
    top_k largest (if given; exactly k per row, even when several tie with the k-th: which of
    the tied stay is `torch.topk`'s choice), and of these, if top_p is given, only the
    nucleus: the smallest set of most likely tokens whose probability (tempered, over the
    top_k) reaches top_p; the most likely token is always kept. A -inf logit (a masked token)
    is never drawn. The temperature comes first, so the nucleus is measured on the tempered
    probabilities (a flatter distribution needs more tokens to reach top_p).
    ValueError for bad arguments (`check_sampling`) or logits that are not (B, V) floating,
    hold NaN / +inf, or a row of -inf.
    """
    check_sampling(temperature, top_k, top_p)
    _check_logits(logits)
    # BEGIN SOLUTION 4.5
    # HINT: Greedy needs no distribution. Otherwise apply the rules in the docstring's order
    #   (temperature, top-k, top-p) to float32 logits, then softmax and draw.
    # HINT: top-k: keep exactly the k entries `torch.topk` returns, by scattering them into
    #   a row of -inf (comparing with the k-th value would keep every tie).
    # HINT: top-p: sort each row descending; a token stays while the probability of the
    #   tokens before it is still below top_p. Scatter that decision back to vocabulary order.
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        top = logits.topk(top_k, dim=-1)
        logits = torch.full_like(logits, float("-inf")).scatter_(-1, top.indices, top.values)
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs          # probability of the more likely tokens
        drop_sorted = mass_before >= top_p                  # the nucleus already reached top_p
        drop = torch.empty_like(drop_sorted).scatter_(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    # END SOLUTION


def check_sampling(temperature, top_k, top_p) -> None:
    """ValueError naming the parameter unless temperature is a finite number >= 0, top_k None
    or an int >= 1, top_p None or a number in (0, 1]."""
    if not is_number(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and (not is_int(top_k) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None and (not is_number(top_p) or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be None or in (0, 1], got {top_p!r}")


def _check_logits(logits) -> None:
    """ValueError unless logits is a floating (B, V) tensor, finite or -inf, one finite per row."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        raise ValueError(f"logits must be a floating (batch, vocab) tensor, got "
                         f"{getattr(logits, 'shape', type(logits).__name__)} {getattr(logits, 'dtype', '')}")
    bad = logits.isnan() | (logits == float("inf"))  # -inf is fine: a masked token
    if bad.any() or (logits == float("-inf")).all(dim=-1).any():
        rows = sorted(set(bad.any(dim=-1).nonzero().flatten().tolist())
                      | set((logits == float("-inf")).all(dim=-1).nonzero().flatten().tolist()))
        raise ValueError(f"logits must be finite (or -inf for a masked token, with one finite per row); "
                         f"rows {rows[:8]} hold NaN, +inf or only -inf")
