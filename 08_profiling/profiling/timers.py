# GENERATED from solutions/profiling/timers.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 08_profiling/08_profiling.ipynb. Exercises in this file (line of each hole, then the commands):
#   8.1 Honest timers: warm-up, repeats, sync: lines 38, 44; `course check 8.1`, `course hint 8.1`
"""Honest timers (8.1): warm-up, repeats, the median, synchronisation, an injectable clock."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from solutions.checks import check_int


def time_fn(fn: Callable[[], object], *, warmup: int = 2, repeat: int = 7, number: int = 1, device=None,
            sync: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter) -> Timing:
    """Time `fn()` honestly; returns a `Timing` (`times`: the per-call seconds of each of the
    `repeat` runs, in run order; `median`: their median; `warmup`: as given; `synchronized`:
    True when `sync` is given or `device` is cuda / mps).

    `warmup` untimed calls of fn come first (warmup=0 times the very first call); a run is
    exactly `number` calls between two `clock()` reads, its time their difference / `number`.
    A run is charged all the work its own calls queued (a GPU call returns before its work
    is done) and none queued before it (by a warm-up call, an earlier run, anyone). `sync()`
    (default `synchronize(device)`) is the only wait: once per warm-up call, and twice per
    run, each run waiting for itself whatever ran before it; nothing else is called (the
    tests count). Only `clock` is read (tests pass a fake clock that moves when work completes).
    Raises ValueError (ints: warmup >= 0, repeat >= 1, number >= 1) and TypeError (fn not callable).
    """
    check_int("warmup", warmup, 0)
    check_int("repeat", repeat, 1)
    check_int("number", number, 1)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    raise NotImplementedError('Exercise 8.1: Honest timers: warm-up, repeats, sync — see 08_profiling.ipynb')


def time_naive(fn: Callable[[], object], *, clock: Callable[[], float] = time.perf_counter) -> float:
    """What a naive timer reports, in seconds: `clock()` around ONE call of fn — no warm-up,
    no synchronisation, nothing else called (a queued GPU kernel is not waited for)."""
    raise NotImplementedError('Exercise 8.1: Honest timers: warm-up, repeats, sync — see 08_profiling.ipynb')


@dataclass(frozen=True)
class Timing:
    """Seconds per call over `repeat` timed runs: their median, and every run's time;
    `synchronized`: whether a device (or a given `sync`) was waited for around each run."""

    median: float
    times: tuple[float, ...]
    warmup: int
    synchronized: bool

    @property
    def spread(self) -> float:
        """(max - min) / median: how noisy the repeats were (0 = identical)."""
        return (max(self.times) - min(self.times)) / self.median if self.median > 0 else 0.0

    @property
    def min(self) -> float:
        return min(self.times)


def _device_of(device) -> torch.device:
    return device if isinstance(device, torch.device) else torch.device(device or "cpu")


def synchronize(device=None) -> None:
    """Wait until every kernel queued on `device` has finished (a no-op on the CPU).

    A CUDA call returns as soon as its kernel is QUEUED; the GPU runs it later. A timer
    read right after the call measures the launch, not the work."""
    device = _device_of(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def timing_pitfalls(fn: Callable[[], object], *, device=None, repeat: int = 7,
                    clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """The same work timed three ways, in seconds: `cold` (the very first call, no
    warm-up — call this on a fresh fn), `unsynced` (warm, but without synchronising: on a
    GPU only the launch), `honest` (`time_fn`'s median). On a CPU `unsynced` ≈ `honest`."""
    cold = time_naive(fn, clock=clock)
    honest = time_fn(fn, warmup=2, repeat=repeat, device=device, clock=clock)
    unsynced = time_fn(fn, warmup=0, repeat=repeat, sync=lambda: None, clock=clock).median
    return {"cold_s": cold, "unsynced_s": unsynced, "honest_s": honest.median, "honest_spread": honest.spread}
