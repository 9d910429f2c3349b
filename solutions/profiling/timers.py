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
    # BEGIN SOLUTION 8.1
    # DECISION: where the waits go: which sync() calls a run needs so that it is charged its own
    #   queued work and nothing queued before it, and which clock a timer may read (only `clock`).
    # HINT: Three phases: warm-up calls (untimed), then `repeat` timed runs, then the median. Read
    #   the time only through `clock()`, never time.perf_counter directly.
    # HINT: Pick the sync once: the given `sync`, else `lambda: synchronize(device)`; `synchronized`
    #   is whether a sync was given or the device is cuda / mps.
    # HINT: A warm-up call's queued work must be done before the next call starts: sync() after each
    #   one. A run must not start its clock while earlier work is still queued, and must not stop it
    #   before its own work is done.
    # HINT: One run is: sync(); t0 = clock(); fn() `number` times; sync(); then (clock() - t0) /
    #   number. Return Timing(statistics.median(times), tuple(times), ...).
    device = _device_of(device)
    synchronized = sync is not None or device.type in ("cuda", "mps")
    if sync is None:
        sync = lambda: synchronize(device)  # noqa: E731  (the parameter's default, filled in: not a new function)
    for _ in range(warmup):
        fn()
        sync()
    times = []
    for _ in range(repeat):
        sync()
        t0 = clock()
        for _ in range(number):
            fn()
        sync()
        times.append((clock() - t0) / number)
    return Timing(statistics.median(times), tuple(times), warmup, synchronized)
    # END SOLUTION


def time_naive(fn: Callable[[], object], *, clock: Callable[[], float] = time.perf_counter) -> float:
    """What a naive timer reports, in seconds: `clock()` around ONE call of fn — no warm-up,
    no synchronisation, nothing else called (a queued GPU kernel is not waited for)."""
    # BEGIN SOLUTION 8.1
    # HINT: Two clock reads around a single call, and their difference.
    t0 = clock()
    fn()
    return clock() - t0
    # END SOLUTION


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
