# GENERATED from solutions/profiling/roofline.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 08_profiling/08_profiling.ipynb. Exercises in this file (line of each hole, then the commands):
#   8.5 The roofline: FLOPs, bytes, regime: lines 27, 36, 61; `course check 8.5`, `course hint 8.5`
"""The roofline (8.5): this machine's measured peaks, and the regime a measured step is in."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from solutions.checks import is_number

from .cost import Cost
from .timers import _device_of, time_fn


def measure_peak_flops(device=None, *, n: int | None = None, dtype: torch.dtype = torch.float32,
                       seconds: float = 0.3, clock: Callable[[], float] = time.perf_counter) -> Peak:
    """This machine's matmul FLOP/s: Peak(the FLOPs of one n×n @ n×n product / its median
    seconds, conditions) — timed with `time_fn` (warm-up, synchronised, `clock`), the number of
    repeats chosen so they take about `seconds` in all (3..50). n defaults to 512 on the
    CPU, 4096 on CUDA. `conditions` starts "{n}x{n} {dtype's name} matmul on {device}", the
    name without "torch." ("512x512 float32 matmul on cpu")."""
    raise NotImplementedError('Exercise 8.5: The roofline: FLOPs, bytes, regime — see 08_profiling.ipynb')


def measure_peak_bandwidth(device=None, *, size: int | None = None, seconds: float = 0.3,
                           clock: Callable[[], float] = time.perf_counter) -> Peak:
    """This machine's memory bandwidth: Peak(the bytes one copy moves / its median seconds,
    conditions) of a copy (`dst.copy_(src)`, float32) of a `size`-byte buffer much larger than the caches
    (default 64 MiB on the CPU, 1 GiB on CUDA) — a copy reads and writes every byte. Timed
    like measure_peak_flops; `conditions` starts "copy of {size in MiB} MiB on {device}"."""
    raise NotImplementedError('Exercise 8.5: The roofline: FLOPs, bytes, regime — see 08_profiling.ipynb')


def classify(name: str, cost: Cost, seconds: float, peak_flops: float, peak_bandwidth: float, *,
             min_efficiency: float = 0.5) -> RooflinePoint:
    """Place a step that did `cost` in `seconds` on this machine's roofline: a RooflinePoint.

    intensity   cost.intensity, FLOPs per byte moved
    achieved    the FLOP/s the step reached
    attainable  the most FLOP/s a step of this intensity can reach here: no more than
                `peak_flops`, and no more than `peak_bandwidth` bytes/s can feed it
    efficiency  achieved as a fraction of attainable
    regime      "overhead" when efficiency is below min_efficiency (strictly: at exactly
                min_efficiency it is not); else "compute" when the compute roof is the one
                that binds at this intensity, "bandwidth" when the bandwidth roof does (at
                the ridge, where both roofs meet, it is "compute")

    Raises ValueError unless seconds, peak_flops and peak_bandwidth are finite numbers > 0
    and 0 < min_efficiency <= 1.
    """
    for pname, v in (("seconds", seconds), ("peak_flops", peak_flops), ("peak_bandwidth", peak_bandwidth)):
        if not (is_number(v) and v > 0):
            raise ValueError(f"{pname} must be a finite number > 0, got {v!r}")
    if not 0 < min_efficiency <= 1:
        raise ValueError(f"min_efficiency must be in (0, 1], got {min_efficiency!r}")
    raise NotImplementedError('Exercise 8.5: The roofline: FLOPs, bytes, regime — see 08_profiling.ipynb')


@dataclass(frozen=True)
class Peak:
    """A measured peak rate (FLOP/s or bytes/s) and the conditions it was measured under."""

    value: float
    conditions: str


@dataclass(frozen=True)
class RooflinePoint:
    """A step placed on the roofline. `attainable`: the roof at its intensity (FLOP/s);
    `achieved`: the FLOP/s it reached; `efficiency`: achieved as a fraction of attainable;
    `regime`: "compute", "bandwidth" or "overhead" (see `classify`)."""

    name: str
    flops: float
    bytes: float
    seconds: float
    intensity: float
    achieved: float
    attainable: float
    efficiency: float
    regime: str
