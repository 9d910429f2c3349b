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
    # BEGIN SOLUTION 8.3
    # DECISION: what identifies a storage (device and data pointer, so views and tied weights count
    #   once), how far to walk an object (modules' parameters and buffers, containers, one level of
    #   attributes), and on the CPU which profiler field to sum so no byte is counted twice.
    # HINT: A tensor's storage is `t.untyped_storage()`; a view's own `t.data_ptr()` points
    #   into it at an offset, the storage's `data_ptr()` does not: that is what identifies it.
    # HINT: Collect storages in a dict keyed by (str(t.device), storage.data_ptr()), the
    #   value its nbytes(); the answer is the sum of the values.
    # HINT: Walk the objects recursively: tensors are added, modules add their
    #   parameters() and buffers(), dicts / lists / tuples are walked item by item, and any
    #   other object's vars() are walked one level deeper at most.
    seen: dict[tuple[str, int], int] = {}

    def add(t: torch.Tensor) -> None:
        s = t.untyped_storage()
        seen[(str(t.device), s.data_ptr())] = s.nbytes()

    def walk(o, depth: int) -> None:
        if isinstance(o, torch.Tensor):
            add(o)
        elif isinstance(o, torch.nn.Module):
            for t in (*o.parameters(), *o.buffers()):
                add(t)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v, depth)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v, depth)
        elif depth > 0 and hasattr(o, "__dict__"):
            for v in vars(o).values():
                walk(v, depth - 1)

    for o in objs:
        walk(o, 1)
    return sum(seen.values())
    # END SOLUTION


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
    # BEGIN SOLUTION 8.3
    # HINT: CUDA has counters (`reset_peak_memory_stats`, then `max_memory_allocated` minus
    #   `memory_allocated` before); on the CPU wrap fn() in `with profile(activities=
    #   [ProfilerActivity.CPU], profile_memory=True) as prof:`, then sort prof.events() by
    #   e.time_range.start and keep a running sum and its maximum: an op adds its
    #   `self_cpu_memory_usage`, a "[memory]" event its `cpu_memory_usage`.
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - before)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    for e in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage
        peak = max(peak, live)
    return int(peak)
    # END SOLUTION


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
    # BEGIN SOLUTION 8.3
    # HINT: The two sizes come from the functions above; the step is measured once, with
    #   tracemalloc running around the peak_step_memory call (try / finally to stop it).
    device = engine.device
    params = nbytes(model)
    kv = kv_pool_bytes(engine.cache)
    tracemalloc.start()
    try:
        activations = peak_step_memory(engine.step, device=device)
        python_state = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if device.type == "cuda":
        allocator = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        process = torch.cuda.memory_reserved(device)
    else:
        allocator, process = None, rss_bytes()
    return MemoryBreakdown(params, kv, activations, python_state, allocator, process, str(device))
    # END SOLUTION


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
