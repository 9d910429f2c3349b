# GENERATED from solutions/profiling/memory.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 08_profiling/08_profiling.ipynb. Exercises in this file (line of each hole, then the commands):
#   8.3 Memory accounting: lines 33, 50, 65; `course check 8.3`, `course hint 8.3`
"""Memory accounting (8.3): parameters, the KV pool, a step's activations, the allocator."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from solutions.kv_cache.decoder import Decoder

from .engine_profile import _warm_profiler
from .timers import _device_of, synchronize


def nbytes(*objs) -> int:
    """Bytes held by the tensors in `objs`, each storage counted ONCE, at its full size.

    An obj may be a tensor, an `nn.Module` (its parameters AND buffers), a list / tuple /
    dict (its values) of those, or any object whose attributes (`vars(obj)`, one level deep)
    are tensors or lists of tensors (a cache). Views and tied weights share storage (the
    GPT's `lm_head.weight` IS `wte.weight`; `x[1]`, `x.t()` are views of x): a storage
    shared by several tensors counts once, and a view alone counts the whole storage it
    views (a view of 10 of 1000 floats holds 4000 bytes). Storages on different devices
    are different storages. Nothing is changed; no tensor is copied.
    """
    raise NotImplementedError('Exercise 8.3: Memory accounting — see 08_profiling.ipynb')


def peak_step_memory(fn: Callable[[], object], *, device=None) -> int:
    """Peak bytes of tensors allocated while `fn()` runs (fn called once), above what was
    allocated before; an int >= 0. Two buffers of n floats live at once -> at least 8n,
    and not more than a few KiB above it.

    On CUDA it is the caching allocator's own peak statistic, relative to what was
    allocated before, the device synchronised before and after fn. On the CPU, which has no
    such counter, it comes from `torch.profiler`'s memory profile of the call
    (`profile_memory=True`): the largest net total, bytes allocated minus bytes freed,
    reached at any moment of the call (counted from 0 at its start); a byte allocated by an
    op nested inside another is counted once, and so is a free outside any op.
    """
    device = _device_of(device)
    _warm_profiler()  # the first profiler session of a process pays a one-off start-up
    raise NotImplementedError('Exercise 8.3: Memory accounting — see 08_profiling.ipynb')


def memory_breakdown(model: Decoder, engine) -> MemoryBreakdown:
    """Account one engine's memory; returns a `MemoryBreakdown` (fields below) on
    `engine.device`, running exactly ONE `engine.step()`.

    params = `nbytes(model)`; kv_pool = `kv_pool_bytes(engine.cache)`; activations =
    `peak_step_memory(engine.step, device=...)`; python_state = tracemalloc's peak
    (`get_traced_memory()[1]`) over that same step, traced alone (tracemalloc is not
    running afterwards, even if the step raises); on CUDA allocator = `memory_reserved -
    memory_allocated` and process = `memory_reserved`, on the CPU allocator = None and
    process = `rss_bytes()`.
    """
    _warm_profiler()  # before tracemalloc starts: under it, the profiler's one-off start-up takes seconds
    raise NotImplementedError('Exercise 8.3: Memory accounting — see 08_profiling.ipynb')


@dataclass
class MemoryBreakdown:
    """Bytes: params (weights + buffers), kv_pool (the cache, used or not), activations
    (peak of one engine step, measured), python_state (the engine's Python objects —
    requests, lists — peak seen by tracemalloc during the step); allocator: on CUDA
    reserved - allocated (cached by the allocator, not in use), on CPU None.
    process: RSS (CPU) or reserved (CUDA) bytes, for comparison."""

    params: int
    kv_pool: int
    activations: int
    python_state: int
    allocator: int | None
    process: int
    device: str

    @property
    def total(self) -> int:
        return self.params + self.kv_pool + self.activations + self.python_state + (self.allocator or 0)

    @property
    def kv_share(self) -> float:
        """The KV pool's share of the accounted total."""
        return self.kv_pool / self.total if self.total else float("nan")


def kv_pool_bytes(cache) -> int:
    """The KV pool's bytes: `cache.nbytes` where the cache states it as an int (stage 06's
    paged pool), else every tensor the cache holds (`nbytes(cache)`)."""
    n = getattr(cache, "nbytes", None)
    if isinstance(n, int):
        return n
    return nbytes(cache)


def rss_bytes() -> int:
    """This process's resident set size (physical memory in use), in bytes."""
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:  # Linux without psutil
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
