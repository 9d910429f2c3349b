# GENERATED from solutions/profiling/sweep.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 08_profiling/08_profiling.ipynb. Exercises in this file (line of each hole, then the commands):
#   8.4 Throughput vs batch, and the knee: lines 33, 54; `course check 8.4`, `course hint 8.4`
"""Throughput against batch size, and the knee where a bigger batch stops paying (8.4)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from solutions.checks import is_int
from solutions.kv_cache.decoder import Decoder, embedding

from .steps import decode_step_fn
from .timers import time_fn


def batch_sweep(model: Decoder, batch_sizes: Sequence[int], *, context: int = 64, repeat: int = 5,
                warmup: int = 2, device=None, clock: Callable[[], float] = time.perf_counter) -> list[SweepPoint]:
    """Decode throughput against batch size: one `SweepPoint` per DISTINCT batch size,
    sorted by batch size. Each point times `decode_step_fn(model, B, context)` with
    `time_fn` (passing on `warmup`, `repeat`, `device` (default: the model's) and `clock`):
    step_s its median, tokens_per_s the tokens one step makes per second, spread the
    Timing's spread.
    Raises ValueError unless batch_sizes is a non-empty sequence of ints >= 1."""
    sizes = list(batch_sizes)
    if not sizes or any(not is_int(b) or b < 1 for b in sizes):
        raise ValueError(f"batch_sizes must be a non-empty list of ints >= 1, got {batch_sizes!r}")
    raise NotImplementedError('Exercise 8.4: Throughput vs batch, and the knee — see 08_profiling.ipynb')


def find_knee(batch_sizes: Sequence[float], throughputs: Sequence[float], *, min_gain: float = 0.1) -> Knee | None:
    """The knee: over the points sorted by batch size, the FIRST point i (never the last
    one) from which the batch never pays again: EVERY later point j gained, from b_i to b_j,
    strictly less than `min_gain` per doubling of the batch (exactly `min_gain` still pays).
    A gain per doubling compounds (two doublings at 10% each are 21%), and b_i -> b_j is
    log2(b_j / b_i) doublings, a fraction when the spacing is uneven. Each j is judged against
    b_i itself, not against its neighbour, so a noisy dip followed by recovery is no knee.

    Returns Knee(batch=b_i (an int when integral), index=i in the sorted order,
    throughput=y_i, min_gain, gains): gains[k] is the gain per doubling from sorted point k
    to k+1, as a fraction (0.1 for 10%; inf where y[k] == 0). None when no point qualifies
    (a single point; a curve still paying at its end).
    Raises ValueError on unequal lengths or no points, non-positive or duplicate batch
    sizes, non-finite or negative throughputs, or min_gain <= 0.
    """
    b = np.asarray(batch_sizes, dtype=float)
    y = np.asarray(throughputs, dtype=float)
    _check_curve(b, y, min_gain, batch_sizes, throughputs)
    raise NotImplementedError('Exercise 8.4: Throughput vs batch, and the knee — see 08_profiling.ipynb')


@dataclass(frozen=True)
class SweepPoint:
    """One batch size: the median decode step time, the throughput it gives (batch / step
    time, tokens per second) and the latency each row pays per token (= the step time)."""

    batch: int
    step_s: float
    tokens_per_s: float
    spread: float


@dataclass(frozen=True)
class Knee:
    """The knee of a throughput curve: beyond `batch`, doubling the batch adds less than
    `min_gain` of throughput. `gains[i]`: the gain per doubling from point i to point i+1."""

    batch: int
    index: int
    throughput: float
    min_gain: float
    gains: tuple[float, ...]


def _check_curve(b: np.ndarray, y: np.ndarray, min_gain: float, batch_sizes, throughputs) -> None:
    """find_knee's argument checks (ValueError)."""
    if b.shape != y.shape or b.ndim != 1:
        raise ValueError(f"batch_sizes and throughputs must be 1-D of the same length, got {b.shape} and {y.shape}")
    if b.size == 0:
        raise ValueError("find_knee needs at least one point")
    if (b <= 0).any() or len(set(b.tolist())) != b.size:
        raise ValueError(f"batch sizes must be positive and distinct, got {list(batch_sizes)}")
    if not np.isfinite(y).all() or (y < 0).any():
        raise ValueError(f"throughputs must be finite and >= 0, got {list(throughputs)}")
    if not min_gain > 0:
        raise ValueError(f"min_gain must be > 0, got {min_gain!r}")
