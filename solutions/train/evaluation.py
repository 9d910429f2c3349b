"""Evaluation of a GPT on a token stream: loss in nats per token and bits per byte."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from solutions.checks import check_ints
from solutions.tokenizer import EOT

from .data import _check_stream

LN2 = math.log(2.0)  # nats per bit


@torch.no_grad()
def evaluate(model: nn.Module, tokens: torch.Tensor, *, block_size: int, batch_size: int = 16,
             max_tokens: int | None = None) -> dict[str, float]:
    """{"loss", "bpb", "tokens"} of `model` on a token stream, deterministically.

    n = (N - 1) // block_size consecutive non-overlapping windows (window w: inputs
    tokens[wT : wT+T], targets tokens[wT+1 : wT+T+1]), at most max_tokens // block_size of
    them if max_tokens is given, `batch_size` windows per forward, in eval mode (no dropout:
    two calls agree exactly), without gradients. "tokens" = the number of targets (n·T); "loss" = the summed
    per-target cross-entropy / "tokens" (nats per token); "bpb" = the same sum in bits / the
    number of targets that are bytes (targets != EOT): end-of-text marks cost bits but are
    not bytes. The model's train/eval mode is restored afterwards; no weight changes.
    TypeError: tokens not a 1-D integer torch.Tensor. ValueError: block_size or batch_size
    not an int >= 1; no whole window (N < block_size + 1, or max_tokens < block_size).
    """
    check_ints(1, block_size=block_size, batch_size=batch_size)
    n_windows = _whole_windows(tokens, block_size, max_tokens)
    # BEGIN SOLUTION 3.9
    # DECISION: how to walk n windows batch_size at a time (the last batch shorter) so that the
    #   result does not depend on batch_size (running sums divided once, not a mean of batch
    #   means), which targets count as bytes (not EOT), and how the caller's mode comes back.
    # HINT: Remember model.training, call model.eval(), and model.train(<remembered>) at the end.
    # HINT: Window w starts at w * block_size; gather a batch of them with
    #   starts[:, None] + arange(block_size + 1), as get_batch does with random starts.
    # HINT: Sum the losses (cross_entropy(..., reduction="sum")), count all targets and the
    #   byte targets (y != EOT), and divide once at the end (bits = nats / LN2). A mean of
    #   per-batch means would weight a short last batch as much as a full one.
    was_training = model.training
    model.eval()
    nats, targets, byte_targets = 0.0, 0, 0
    offsets = torch.arange(block_size + 1)
    for first in range(0, n_windows, batch_size):
        starts = torch.arange(first, min(first + batch_size, n_windows)) * block_size
        windows = tokens[starts[:, None] + offsets].long()
        x, y = windows[:, :-1], windows[:, 1:]
        logits = model(x)
        nats += float(F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum"))
        targets += y.numel()
        byte_targets += int((y != EOT).sum())
    model.train(was_training)
    return {"loss": nats / targets, "bpb": nats / LN2 / max(byte_targets, 1), "tokens": targets}
    # END SOLUTION


def _whole_windows(tokens: torch.Tensor, block_size: int, max_tokens: int | None) -> int:
    """How many windows `evaluate` runs: (N - 1) // block_size, capped at max_tokens // block_size."""
    _check_stream(tokens)
    n_windows = (len(tokens) - 1) // block_size
    if max_tokens is not None:
        n_windows = min(n_windows, max_tokens // block_size)
    if n_windows < 1:
        raise ValueError(f"{len(tokens)} tokens (max_tokens={max_tokens}) hold no window of {block_size} + 1")
    return n_windows
