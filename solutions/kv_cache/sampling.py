"""Exercise 4.5: choosing the next token — greedy, temperature, top-k, top-p; 4.7: the
repetition penalty."""

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
    # DECISION: how the rules become masks: exactly k kept on a tie (topk's own indices, not a
    #   comparison with the k-th value), the nucleus boundary on a sorted row (a token stays while
    #   the mass BEFORE it is below top_p, so the one that reaches top_p stays), that decision taken
    #   back to vocabulary order, all on the tempered top-k logits, and one draw for all rows.
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


def apply_repetition_penalty(logits: torch.Tensor, context: torch.Tensor,
                             penalty: float | torch.Tensor) -> torch.Tensor:
    """The repetition penalty of CTRL (Keskar et al. 2019), as Hugging Face's
    `RepetitionPenaltyLogitsProcessor` and vLLM apply it: new logits (B, V), `logits` (B, V)
    floating not modified.

    `context` (B, L) int64 (L may be 0): row b's token ids so far (prompt AND generated), entries < 0
    are padding (ragged rows) and stand for no token. `penalty`: a number > 0, or a (B,)
    tensor of them (one per row). For every token id t that occurs in context[b] (once or
    ten times: the same), out[b, t] = logits[b, t] / penalty[b] if logits[b, t] > 0, else
    logits[b, t] * penalty[b] (so a penalty > 1 makes a seen token less likely whatever its
    sign; -inf stays -inf); every other entry is logits[b, t]. A penalty of 1 changes nothing.
    The result has the dtype of `logits`. ValueError for a penalty <= 0 (or not finite), a
    context that is not a (B, L) int64 tensor, an id >= V, or bad logits (as `sample`)."""
    penalty = _check_penalty(logits, context, penalty)
    # BEGIN SOLUTION 4.7
    # DECISION: what counts as seen and how to hold it: a (B, V) mask (five occurrences mark once;
    #   padding marks nothing, not token 0), and the sign rule applied only where it is set.
    # HINT: First the question "has row b seen token t?" as a (B, V) bool mask: scatter True
    #   at each row's context ids. A token seen five times is still one True.
    # HINT: Padding (< 0) must mark nothing: send it to a spare column V (scatter into
    #   B x (V + 1), then drop the last column) -- never to token 0.
    # HINT: Then `torch.where(logits > 0, logits / p, logits * p)` with p the (B, 1)
    #   penalties, kept only where the mask is True.
    B, V = logits.shape
    ids = torch.where(context < 0, V, context)
    seen = torch.zeros(B, V + 1, dtype=torch.bool, device=logits.device)
    seen.scatter_(1, ids, True)
    p = penalty.to(logits.dtype)[:, None]
    penalised = torch.where(logits > 0, logits / p, logits * p)
    return torch.where(seen[:, :V], penalised, logits)
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


def _check_penalty(logits, context, penalty) -> torch.Tensor:
    """`penalty` as a (B,) float tensor on logits' device, after checking all three arguments."""
    _check_logits(logits)
    B, V = logits.shape
    if not isinstance(context, torch.Tensor) or context.dim() != 2 or context.shape[0] != B \
            or context.dtype != torch.int64:
        raise ValueError(f"context must be a ({B}, L) int64 tensor of token ids, got "
                         f"{getattr(context, 'shape', type(context).__name__)} {getattr(context, 'dtype', '')}")
    if context.numel() and int(context.max()) >= V:
        raise ValueError(f"context holds token id {int(context.max())}, outside the vocabulary 0..{V - 1}")
    if isinstance(penalty, torch.Tensor):
        if penalty.shape != (B,) or not bool(torch.isfinite(penalty).all()) or not bool((penalty > 0).all()):
            raise ValueError(f"penalty must be a number > 0 or a ({B},) tensor of them, got {penalty!r:.80}")
        return penalty.to(logits.device, torch.float32)
    if not is_number(penalty) or penalty <= 0:
        raise ValueError(f"penalty must be a finite number > 0 (1 = no penalty), got {penalty!r}")
    return torch.full((B,), float(penalty), device=logits.device)
