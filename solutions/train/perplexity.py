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
    # BEGIN SOLUTION 3.12
    # DECISION: the unit of the interval (one value per document, never per token or byte), the
    #   scored sequence's boundaries (a leading EOT, a trailing one only when the whole text fits;
    #   bytes counts only byte targets), and how evaluate's per-target means become one
    #   document's sums, its short last window included.
    # HINT: Build s as one int64 tensor: EOT, the kept bytes, and EOT only if nothing was cut.
    # HINT: evaluate(model, s[: k*T + 1], block_size=T) scores the k whole windows; the rest,
    #   s[k*T:], is one window of its own length. evaluate returns the mean: loss * tokens is the sum.
    # HINT: bytes counts the targets that are not EOT (s[1:] != EOT), never len(s) - 1.
    kept = data[:max_bytes]
    ids = [EOT, *kept] + ([EOT] if len(kept) == len(data) else [])
    s = torch.tensor(ids, dtype=torch.int64)
    n = len(s) - 1
    k = n // block_size
    nats = 0.0
    if k:
        ev = evaluate(model, s[: k * block_size + 1], block_size=block_size)
        nats += ev["loss"] * ev["tokens"]
    rest = n - k * block_size
    if rest:
        ev = evaluate(model, s[k * block_size:], block_size=rest)
        nats += ev["loss"] * ev["tokens"]
    n_bytes = int((s[1:] != EOT).sum())
    return DocScore(nats=nats, bits=nats / LN2, tokens=n, bytes=n_bytes)
    # END SOLUTION


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
    # BEGIN SOLUTION 3.12
    # HINT: statistics.mean and statistics.stdev (the sample sd, n - 1) over the values.
    # HINT: the half-width is z * sd / sqrt(n), n the number of values (documents).
    mean = statistics.mean(values)
    half = z * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean=mean, low=mean - half, high=mean + half, n=len(values))
    # END SOLUTION


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
    # BEGIN SOLUTION 3.12
    # HINT: one value per document: [s.bits / s.bytes for s in scores] (never one per byte or token:
    #   the bytes of one file are not independent draws, and a long file would outvote the others).
    # HINT: mean_interval on those values; perplexity is exp of the interval on nats / tokens.
    bpb, loss = [s.bits / s.bytes for s in scores], [s.nats / s.tokens for s in scores]
    if len(scores) < 2:
        row.update(bpb=bpb[0], bpb_low=None, bpb_high=None, ppl=math.exp(loss[0]), ppl_low=None, ppl_high=None)
        return row
    b, n = mean_interval(bpb, z), mean_interval(loss, z)
    row.update(bpb=b.mean, bpb_low=b.low, bpb_high=b.high,
               ppl=math.exp(n.mean), ppl_low=math.exp(n.low), ppl_high=math.exp(n.high))
    return row
    # END SOLUTION


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

