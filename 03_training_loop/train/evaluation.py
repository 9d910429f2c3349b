# GENERATED from solutions/train/evaluation.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.9 Evaluation: loss and bits per byte: line 39; `course check 3.9`, `course hint 3.9`
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
    raise NotImplementedError('Exercise 3.9: Evaluation: loss and bits per byte — see 03_training_loop.ipynb')


def _whole_windows(tokens: torch.Tensor, block_size: int, max_tokens: int | None) -> int:
    """How many windows `evaluate` runs: (N - 1) // block_size, capped at max_tokens // block_size."""
    _check_stream(tokens)
    n_windows = (len(tokens) - 1) // block_size
    if max_tokens is not None:
        n_windows = min(n_windows, max_tokens // block_size)
    if n_windows < 1:
        raise ValueError(f"{len(tokens)} tokens (max_tokens={max_tokens}) hold no window of {block_size} + 1")
    return n_windows
