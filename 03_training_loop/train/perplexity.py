# GENERATED from solutions/train/perplexity.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.12 Bits per byte per document, with a confidence interval: lines 38, 58, 75; `course check 3.12`, `course hint 3.12`
"""Bits per byte and perplexity per held-out document, with a confidence interval over documents (3.12)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from solutions.checks import check_int, is_number
from solutions.tokenizer import EOT

from .evaluation import LN2, evaluate

DOC_BYTES = 512  # the bytes of each document that are scored (its first 512): the same bytes for every model


def score_document(model: nn.Module, text: str, *, block_size: int, max_bytes: int = DOC_BYTES) -> DocScore:
    """The model's cost on the start of one document, read as `load_tokens` streams it.

    The scored sequence is s = [EOT] + the first `max_bytes` UTF-8 bytes of `text`, + [EOT]
    only when the whole text fits (the end-of-text mark is then predicted too); its
    n = len(s) - 1 targets are s[1:], in consecutive windows of `block_size` targets from the
    first (the windows of 3.9's `evaluate`, except that a shorter last one, n - k·block_size
    targets with k = n // block_size, counts too): each target is predicted from what precedes
    it in its window, in eval mode. Returns DocScore with nats = the summed cross-entropy over
    the n targets, tokens = n, bytes = the targets that are bytes (not EOT; at least 1),
    bits = nats / LN2. The model's mode and weights are left as they were.
    ValueError: text empty or not a str (TypeError); block_size or max_bytes not an int >= 1.
    """
    data = _checked_bytes(text, block_size, max_bytes)
    raise NotImplementedError('Exercise 3.12: Bits per byte per document, with a confidence interval — see 03_training_loop.ipynb')


def mean_interval(values: Sequence[float], z: float = 1.96) -> Interval:
    """The mean of `values` and its normal-approximation confidence interval.

    mean ± z·sd/√n, with sd the sample standard deviation (n - 1 in the denominator, as
    `statistics.stdev`) and n = len(values): one value per DOCUMENT, never per token (the
    tokens of one document are not independent draws, so their spread understates the
    uncertainty). z = 1.96 gives about 95 %. Returns Interval(mean, low, high, n).
    ValueError: fewer than 2 values, a value that is not a finite number, z not > 0.
    """
    values = list(values)
    if len(values) < 2:
        raise ValueError(f"values must hold at least 2 numbers (one per document), got {len(values)}")
    bad = [v for v in values if not is_number(v)]
    if bad:
        raise ValueError(f"values must be finite numbers, got {bad[0]!r}")
    if not is_number(z) or z <= 0:
        raise ValueError(f"z must be a number > 0, got {z!r}")
    raise NotImplementedError('Exercise 3.12: Bits per byte per document, with a confidence interval — see 03_training_loop.ipynb')


def source_row(scores: Sequence[DocScore], z: float = 1.96) -> dict:
    """The row of one source: its documents' bits per byte and perplexity, with intervals.

    Every document counts once, whatever its length: bpb = the mean over documents of each
    document's bits / bytes, its interval `mean_interval` of those values (n = documents);
    ppl = exp(the mean over documents of nats / tokens), its interval exp(low) .. exp(high)
    of `mean_interval` of those values. With one document there is no interval (the four
    bounds are None). Keys: docs, tokens, bytes (sums), bpb, bpb_low, bpb_high, ppl,
    ppl_low, ppl_high. ValueError: no scores.
    """
    if not scores:
        raise ValueError("scores must hold at least one document's score")
    row: dict[str, float | None] = {"docs": len(scores), "tokens": sum(s.tokens for s in scores),
                                    "bytes": sum(s.bytes for s in scores)}
    raise NotImplementedError('Exercise 3.12: Bits per byte per document, with a confidence interval — see 03_training_loop.ipynb')


def _checked_bytes(text: str, block_size: int, max_bytes: int) -> bytes:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text:
        raise ValueError("text must be a non-empty document")
    check_int("block_size", block_size, 1)
    check_int("max_bytes", max_bytes, 1)
    return text.encode("utf-8")


@dataclass(frozen=True)
class DocScore:
    """One document's cost: summed nats and bits over `tokens` targets, `bytes` of them bytes."""

    nats: float
    bits: float
    tokens: int
    bytes: int

    @property
    def bpb(self) -> float:
        return self.bits / self.bytes

    @property
    def loss(self) -> float:
        """nats per token (targets, EOT included)."""
        return self.nats / self.tokens


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    @property
    def half(self) -> float:
        return (self.high - self.low) / 2

