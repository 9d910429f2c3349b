"""Stage 08: profiling — where the time and the memory of the whole stack go.

The capstone. Stages 04–07 built a serving stack (a KV cache, a batching engine, paged
memory, an HTTP server); this stage reads it like a performance engineer. Before you
optimise anything, find out which of three regimes a piece of work is in (Horace He,
"Making Deep Learning Go Brrrr From First Principles", 2022):

- **compute-bound**: the arithmetic units are busy; only fewer FLOPs or faster math help;
- **bandwidth-bound**: moving bytes (weights, the KV cache) from memory is the limit;
  only moving fewer bytes (batching reads the weights once for many rows, quantising)
  helps;
- **overhead-bound**: neither — the time goes to Python, the dispatcher, kernel launches,
  allocation. A faster matmul changes nothing; doing fewer, bigger operations does.

The roofline model (Williams, Waterman & Patterson, CACM 2009) makes the first two
exact: with arithmetic intensity I = FLOPs / bytes moved, attainable FLOP/s =
min(peak FLOP/s, I × peak bandwidth); a step running far below its roof is in overhead.

The pieces:

    time_fn, time_naive              honest timers: warm-up, repeats, median, CUDA sync  (8.1)
    profile_engine                   torch.profiler around engine steps, labelled        (8.2)
    nbytes, peak_step_memory,
      memory_breakdown               parameters, KV pool, activations, allocator         (8.3)
    batch_sweep, find_knee           throughput vs batch, and where it stops paying      (8.4)
    step_cost, measure_peak_*,
      classify                       the roofline: FLOPs and bytes of a step, its regime (8.5)
    parse_request_log,
      latency_breakdown, recommend   where a request's time goes, and what to change     (8.6)
    write_report                     the Markdown report with its plots                  (8.7)

`collect(...)` runs all of it on the default model; `course profile` calls it and
`write_report`. Everything here reaches the stack through earlier stages' solutions:
the engine is `ServingEngine` below — stage 06's `PagedEngine`, the one stage 07's server
runs; stage 05's `Engine` has the same API, so switching is that one line (or pass
`engine_cls=` to `decode_engine`).
"""

from __future__ import annotations

import bisect
import json
import math
import os
import platform
import statistics
import time
import tracemalloc
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from solutions.batching import ContinuousBatching, Request, default_model, replay, request_metrics
from solutions.paged import PagedEngine as ServingEngine  # what stage 07 serves; stage 05's Engine has its API
from solutions.gpt import GPT, GPTConfig, on_one_thread
from solutions.kv_cache import KVCache, forward_cached
from solutions.workload import make_trace

__all__ = [
    "Timing", "synchronize", "time_fn", "time_naive", "timing_pitfalls",
    "label_engine", "decode_engine", "OpStat", "EngineProfile", "profile_engine",
    "nbytes", "kv_pool_bytes", "rss_bytes", "peak_step_memory", "MemoryBreakdown", "memory_breakdown",
    "decode_step_fn", "prefill_chunk_fn", "SweepPoint", "batch_sweep", "Knee", "find_knee",
    "Cost", "weight_count", "step_cost", "Peak", "measure_peak_flops", "measure_peak_bandwidth", "RooflinePoint",
    "classify",
    "plot_roofline", "LOG_KEYS", "RequestLog", "parse_request_log", "record_from_request", "parse_metrics",
    "PHASE_METRICS", "phase_shares_from_metrics",
    "latency_breakdown", "Recommendation", "recommend", "SECTIONS", "cpu_sleep", "cpu_clock_ok", "collect",
    "write_report", "demo",
]


def _device_of(device) -> torch.device:
    return device if isinstance(device, torch.device) else torch.device(device or "cpu")


# ---- 8.1 honest timers ----------------------------------------------------------------------

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


def synchronize(device=None) -> None:
    """Wait until every kernel queued on `device` has finished (a no-op on the CPU).

    A CUDA call returns as soon as its kernel is QUEUED; the GPU runs it later. A timer
    read right after the call measures the launch, not the work."""
    device = _device_of(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _check_counts(warmup, repeat, number) -> None:
    for name, v, lo in (("warmup", warmup, 0), ("repeat", repeat, 1), ("number", number, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")


def time_fn(fn: Callable[[], object], *, warmup: int = 2, repeat: int = 7, number: int = 1, device=None,
            sync: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter) -> Timing:
    """Time `fn()` honestly: `warmup` untimed calls, then `repeat` timed runs of `number`
    calls each; return the per-call time of every run and their median.

    Synchronise (`sync()`, default `synchronize(device)`) after each warm-up call, BEFORE
    reading the clock at the start of a run (so earlier queued work is not charged to this
    one) and after the run's last call, before reading the clock again (so the work itself
    is). Why each piece: the first calls pay one-off costs (allocating, caching kernels,
    warming caches) that a steady-state server never pays again; one run is noise, the
    median of several is robust to a stray interruption; on a GPU an unsynchronised timer
    measures the launch. `clock` is injectable so tests can feed a fake one.
    """
    _check_counts(warmup, repeat, number)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    # BEGIN SOLUTION 8.1
    device = _device_of(device)
    synchronized = sync is not None or device.type in ("cuda", "mps")
    if sync is None:
        sync = lambda: synchronize(device)  # noqa: E731
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
    """What a naive timer reports: ONE call, no warm-up, no synchronisation."""
    # BEGIN SOLUTION 8.1
    t0 = clock()
    fn()
    return clock() - t0
    # END SOLUTION


def timing_pitfalls(fn: Callable[[], object], *, device=None, repeat: int = 7,
                    clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """The same work timed three ways, in seconds: `cold` (the very first call, no
    warm-up — call this on a fresh fn), `unsynced` (warm, but without synchronising: on a
    GPU only the launch), `honest` (`time_fn`'s median). On a CPU `unsynced` ≈ `honest`."""
    cold = time_naive(fn, clock=clock)
    honest = time_fn(fn, warmup=2, repeat=repeat, device=device, clock=clock)
    unsynced = time_fn(fn, warmup=0, repeat=repeat, sync=lambda: None, clock=clock).median
    return {"cold_s": cold, "unsynced_s": unsynced, "honest_s": honest.median, "honest_spread": honest.spread}


# ---- 8.2 torch.profiler around engine steps ---------------------------------------------------

def label_engine(engine):
    """Label an engine's step phases for the profiler, without changing the engine: the
    instance's `scheduler.schedule`, `_forward` and `_sample` are wrapped in
    `record_function("schedule" / "forward" / "sample")`. Idempotent; returns the engine."""
    if getattr(engine, "_profiling_labels", False):
        return engine

    def wrap(obj, attr: str, label: str) -> None:
        inner = getattr(obj, attr)

        def labelled(*a, **kw):
            with record_function(label):
                return inner(*a, **kw)

        setattr(obj, attr, labelled)

    wrap(engine.scheduler, "schedule", "schedule")
    wrap(engine, "_forward", "forward")
    wrap(engine, "_sample", "sample")
    engine._profiling_labels = True
    return engine


def decode_engine(model: GPT, batch: int, *, prompt_len: int = 32, max_new_tokens: int | None = None,
                  engine_cls=ServingEngine, seed: int = 0):
    """A fresh engine (continuous batching, `batch` rows) holding `batch` requests that are
    already prefilled and decoding: its next `step()` is a pure decode step of `batch` rows.
    Requests generate up to `max_new_tokens` (default: to the end of the context)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    context = model.config.block_size
    if not 1 <= prompt_len < context:
        raise ValueError(f"prompt_len must be in 1..{context - 1}, got {prompt_len!r}")
    max_new_tokens = context - prompt_len if max_new_tokens is None else max_new_tokens
    engine = engine_cls(model, ContinuousBatching(batch))
    rng = np.random.default_rng(seed)
    for i in range(batch):
        prompt = rng.integers(0, model.config.vocab_size - 1, prompt_len).tolist()
        engine.add_request(Request(prompt, max_new_tokens, request_id=f"decode-{i}"))
    while any(r.phase != "decode" or not r.output for r in engine.requests.values()):
        engine.step()
    return engine


@dataclass(frozen=True)
class OpStat:
    """One operator over the profiled steps: calls, self time (its own, children excluded)
    and total time (children included), in seconds, summed over the steps; `step_self_s`,
    the MEDIAN over the steps of its self time in one step (robust to the one step in
    which the process was descheduled mid-operator, common on a shared machine); on CUDA
    also device self time."""

    name: str
    calls: int
    self_s: float
    total_s: float
    step_self_s: float = 0.0
    device_self_s: float = 0.0


@dataclass
class EngineProfile:
    """What `profile_engine` found over its `steps` active (recorded) steps.

    ops: every `aten::` operator, most self time per step (median over steps) first.
    labels: seconds spent in each labelled phase (schedule / forward / sample) and in the
    whole step ("step"), the median over the steps. ops_per_step:
    aten operators called per step, nested calls included (aten::linear calls aten::addmm);
    top_level_ops_per_step: only those called from Python, not from another aten op — the
    dispatcher round-trips your code pays for. kernels_per_step: GPU kernels (and memory
    copies) launched, not counting the labels the profiler mirrors on the GPU (None on CPU).
    by_shape: (name, input shapes, calls, self s) from
    `key_averages(group_by_input_shape=True)`, most self time first."""

    steps: int
    device: str
    ops: list[OpStat]
    labels: dict[str, float]
    ops_per_step: float
    top_level_ops_per_step: float
    kernels_per_step: float | None
    by_shape: list[tuple[str, str, int, float]]
    trace_path: str | None = None

    def top(self, n: int = 10) -> list[OpStat]:
        return self.ops[:n]

    def table(self, n: int = 10) -> str:
        """The top-n operators as an aligned text table: calls per step, median self time
        per step, and its share of all operators' (median) self time."""
        total = sum(o.step_self_s for o in self.ops) or 1.0
        lines = [f"{'operator':<48} {'calls/step':>10} {'self µs/step':>13} {'share':>6}"]
        for o in self.top(n):
            lines.append(f"{o.name[:48]:<48} {o.calls / self.steps:>10.1f} {1e6 * o.step_self_s:>13.1f} "
                         f"{o.step_self_s / total:>6.1%}")
        return "\n".join(lines)


_profiler_warm = False


def _warm_profiler() -> None:
    """The first profiler session of a process pays a one-off start-up (the tracing
    library initialises) that inflates the first recorded operators several times over;
    pay it once, on nothing, before the first real profile."""
    global _profiler_warm
    if not _profiler_warm:
        with profile(activities=[ProfilerActivity.CPU]):
            torch.ones(8) @ torch.ones(8)
        _profiler_warm = True


def profile_engine(engine, *, wait: int = 1, warmup: int = 1, active: int = 3, trace_path: str | Path | None = None,
                   record_shapes: bool = True) -> EngineProfile:
    """Profile `wait + warmup + active` calls of `engine.step()` with `torch.profiler`.

    Label the phases (`label_engine`), run the profiler with
    `schedule(wait=wait, warmup=warmup, active=active, repeat=1)` — the profiler ignores the
    `wait` steps, traces but discards the `warmup` steps (tracing has its own start-up
    cost), and records the `active` ones — calling `prof.step()` after every engine step.
    Activities: CPU, plus CUDA when the model is on a GPU. Then summarise the recorded
    steps from `prof.key_averages()` (and `group_by_input_shape=True`); from
    `prof.events()` count operators per step and take per-step medians (each event belongs
    to the `ProfilerStep#k` event whose time range holds its start); write a Chrome trace
    (`prof.export_chrome_trace`, open it in https://ui.perfetto.dev) if `trace_path` is given.
    Raises ValueError if the engine runs out of work before the last active step.
    """
    for name, v, lo in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    _warm_profiler()
    # BEGIN SOLUTION 8.2
    label_engine(engine)
    device = engine.device
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sched = schedule(wait=wait, warmup=warmup, active=active, repeat=1)
    with profile(activities=activities, schedule=sched, record_shapes=record_shapes) as prof:
        for i in range(wait + warmup + active):
            if not engine.step().ran:
                raise ValueError(f"the engine ran out of work at step {i} of {wait + warmup + active}")
            synchronize(device)
            prof.step()
    averages = prof.key_averages()
    cpu = torch.autograd.DeviceType.CPU  # on CUDA, labels are mirrored on the GPU timeline too: skip those
    everything = [e for e in prof.events() if getattr(e, "device_type", cpu) == cpu]
    steps = sorted((e.time_range.start, e.time_range.end) for e in everything if e.name.startswith("ProfilerStep"))
    starts = [s for s, _ in steps]
    per_step: dict[str, list[float]] = {}  # name -> seconds in each recorded step
    for e in everything:
        is_op = e.name.startswith("aten::")
        if not (is_op or e.name in ("schedule", "forward", "sample")):
            continue
        i = bisect.bisect_right(starts, e.time_range.start) - 1
        if i >= 0 and e.time_range.start < steps[i][1]:
            per_step.setdefault(e.name, [0.0] * len(steps))[i] += \
                1e-6 * (e.self_cpu_time_total if is_op else e.cpu_time_total)
    median = lambda name: statistics.median(per_step[name]) if name in per_step else 0.0  # noqa: E731
    ops = sorted((OpStat(a.key, a.count, a.self_cpu_time_total * 1e-6, a.cpu_time_total * 1e-6, median(a.key),
                         getattr(a, "self_device_time_total", 0.0) * 1e-6)
                  for a in averages if a.key.startswith("aten::")), key=lambda o: (-o.step_self_s, -o.self_s))
    labels = {k: median(k) for k in ("schedule", "forward", "sample") if k in per_step}
    labels["step"] = statistics.median(1e-6 * (b - a) for a, b in steps)
    events = [e for e in everything if e.name.startswith("aten::")]
    top_level = [e for e in events if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]
    kernels = None
    if device.type == "cuda":
        kernels = sum(a.count for a in averages  # kernels and copies; not the labels mirrored on the GPU
                      if getattr(a, "device_type", None) == torch.autograd.DeviceType.CUDA
                      and not getattr(a, "is_user_annotation", False)
                      and a.key not in ("schedule", "forward", "sample")
                      and not a.key.startswith("ProfilerStep")) / active
    by_shape = sorted(((a.key, str(a.input_shapes), a.count, a.self_cpu_time_total * 1e-6)
                       for a in prof.key_averages(group_by_input_shape=True) if a.key.startswith("aten::")),
                      key=lambda r: -r[3])
    if trace_path is not None:
        prof.export_chrome_trace(str(trace_path))
    return EngineProfile(active, str(device), ops, labels, len(events) / active, len(top_level) / active,
                         kernels, by_shape, None if trace_path is None else str(trace_path))
    # END SOLUTION


# ---- 8.3 memory accounting ---------------------------------------------------------------------

def nbytes(*objs) -> int:
    """Bytes held by the tensors in `objs`, each storage counted ONCE.

    An obj may be a tensor, an `nn.Module` (its parameters and buffers), a list / tuple /
    dict of those, or any object whose attributes (`vars(obj)`, one level deep) are tensors
    or lists of tensors (a cache). A tensor holds numel × element_size bytes; but views and
    tied weights share storage (the GPT's `lm_head.weight` IS `wte.weight`), so count each
    storage once, by its `untyped_storage().data_ptr()`, at its full `nbytes()`.
    """
    # BEGIN SOLUTION 8.3
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


def kv_pool_bytes(cache) -> int:
    """The KV pool's bytes: `cache.nbytes` where the cache states it (stage 06's paged
    pool), else every tensor the cache holds."""
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


def peak_step_memory(fn: Callable[[], object], *, device=None) -> int:
    """Peak bytes of tensors allocated while `fn()` runs, above what was allocated before.

    On CUDA: the caching allocator's own statistics (`torch.cuda.reset_peak_memory_stats`,
    `memory_allocated`, `max_memory_allocated`). On the CPU there is no such counter:
    run fn under `torch.profiler` with `profile_memory=True` and replay its allocation
    events in time order (each op's `self_cpu_memory_usage`, and the `[memory]` events
    for frees outside any op) — the running sum's maximum is the peak.
    """
    device = _device_of(device)
    # BEGIN SOLUTION 8.3
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


def memory_breakdown(model: GPT, engine) -> MemoryBreakdown:
    """Account one engine's memory: parameters and the KV pool from tensor sizes
    (`nbytes`, `kv_pool_bytes`), the activations of one `engine.step()` measured
    (`peak_step_memory`), the Python-side state of that step with `tracemalloc`, and the
    allocator's reserve on CUDA (`torch.cuda.memory_reserved - memory_allocated`)."""
    # BEGIN SOLUTION 8.3
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


# ---- 8.4 throughput vs batch, and the knee --------------------------------------------------------

def decode_step_fn(model: GPT, batch: int, context: int) -> Callable[[], torch.Tensor]:
    """A callable that runs ONE decode step of `batch` rows, each at position `context`
    (its K/V for positions 0..context-1 already in a stage-04 KVCache), and puts the
    cache back, so every call does exactly the same work."""
    if not 0 <= context < model.config.block_size:
        raise ValueError(f"context must be in 0..{model.config.block_size - 1}, got {context!r}")
    device = model.transformer.wte.weight.device
    cache = KVCache.for_model(model, batch, max_len=context + 1)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    if context:
        forward_cached(model, torch.randint(0, vocab, (batch, context), generator=gen).to(device), cache)
    idx = torch.randint(0, vocab, (batch, 1), generator=gen).to(device)

    def step() -> torch.Tensor:
        logits = forward_cached(model, idx, cache)
        cache.lengths.fill_(context)
        return logits

    return step


def prefill_chunk_fn(model: GPT, chunk: int, *, context: int = 0, batch: int = 1) -> Callable[[], torch.Tensor]:
    """A callable that runs one prefill chunk of `chunk` tokens for `batch` rows after
    `context` cached tokens, and puts the cache back."""
    if chunk < 1 or context < 0 or context + chunk > model.config.block_size:
        raise ValueError(f"context {context!r} + chunk {chunk!r} must fit the context {model.config.block_size}")
    device = model.transformer.wte.weight.device
    cache = KVCache.for_model(model, batch, max_len=context + chunk)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    if context:
        forward_cached(model, torch.randint(0, vocab, (batch, context), generator=gen).to(device), cache)
    idx = torch.randint(0, vocab, (batch, chunk), generator=gen).to(device)

    def step() -> torch.Tensor:
        logits = forward_cached(model, idx, cache)
        cache.lengths.fill_(context)
        return logits

    return step


@dataclass(frozen=True)
class SweepPoint:
    """One batch size: the median decode step time, the throughput it gives (batch / step
    time, tokens per second) and the latency each row pays per token (= the step time)."""

    batch: int
    step_s: float
    tokens_per_s: float
    spread: float


def batch_sweep(model: GPT, batch_sizes: Sequence[int], *, context: int = 64, repeat: int = 5,
                warmup: int = 2, device=None, clock: Callable[[], float] = time.perf_counter) -> list[SweepPoint]:
    """Decode throughput against batch size: for each B, time (`time_fn`, with `clock`) one
    decode step of B rows at position `context` (`decode_step_fn`); tokens/s = B / median
    step time. Returns the points sorted by batch size."""
    sizes = list(batch_sizes)
    if not sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes):
        raise ValueError(f"batch_sizes must be a non-empty list of ints >= 1, got {batch_sizes!r}")
    # BEGIN SOLUTION 8.4
    device = device or model.transformer.wte.weight.device
    points = []
    for b in sorted(set(sizes)):
        t = time_fn(decode_step_fn(model, b, context), warmup=warmup, repeat=repeat, device=device, clock=clock)
        points.append(SweepPoint(b, t.median, b / t.median, t.spread))
    return points
    # END SOLUTION


@dataclass(frozen=True)
class Knee:
    """The knee of a throughput curve: beyond `batch`, doubling the batch adds less than
    `min_gain` of throughput. `gains[i]`: the gain per doubling from point i to point i+1."""

    batch: int
    index: int
    throughput: float
    min_gain: float
    gains: tuple[float, ...]


def find_knee(batch_sizes: Sequence[float], throughputs: Sequence[float], *, min_gain: float = 0.1) -> Knee | None:
    """The smallest batch size b_i after which the curve never again pays: for EVERY later
    point j, throughput_j < throughput_i × (1 + min_gain) ** log2(b_j / b_i) — i.e. from
    b_i on, doubling the batch buys less than `min_gain` (10%) more throughput, measured
    against b_i itself, so a noisy dip followed by a recovery is not a knee.

    The points are sorted by batch size first. None when there is no knee inside the
    sweep: a single point (nothing to compare), or a curve still paying at its end. Only
    points with a later point can be the knee (the last one has no evidence).
    Raises ValueError on unequal lengths, duplicate or non-positive batch sizes,
    non-finite or negative throughputs, or min_gain <= 0.
    """
    b = np.asarray(batch_sizes, dtype=float)
    y = np.asarray(throughputs, dtype=float)
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
    # BEGIN SOLUTION 8.4
    order = np.argsort(b)
    b, y = b[order], y[order]
    with np.errstate(divide="ignore", invalid="ignore"):
        gains = tuple(float((y[i + 1] / y[i]) ** (1.0 / math.log2(b[i + 1] / b[i])) - 1.0) if y[i] > 0 else math.inf
                      for i in range(len(b) - 1))
    for i in range(len(b) - 1):
        later = slice(i + 1, None)
        roof = y[i] * (1.0 + min_gain) ** np.log2(b[later] / b[i])
        if (y[later] < roof).all():
            return Knee(int(b[i]) if float(b[i]).is_integer() else float(b[i]), i, float(y[i]), min_gain, gains)
    return None
    # END SOLUTION


# ---- 8.5 the roofline -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Cost:
    """FLOPs and bytes of memory traffic of one model step. `detail` names the terms."""

    flops: float
    bytes: float
    detail: dict[str, float] = field(default_factory=dict)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved."""
        return self.flops / self.bytes if self.bytes else float("inf")


def weight_count(config: GPTConfig) -> dict[str, int]:
    """The model's parameters by role, from its config (tied head counted once, in wte)."""
    C, V, P, L = config.n_embd, config.vocab_size, config.block_size, config.n_layer
    per_layer = (2 * C) + (3 * C * C + 3 * C) + (C * C + C) + (2 * C) + (4 * C * C + 4 * C) + (4 * C * C + C)
    return {"wte": V * C, "wpe": P * C, "blocks": L * per_layer, "ln_f": 2 * C}


def step_cost(config: GPTConfig, *, batch: int, new_tokens: int, context: int, dtype_bytes: int = 4) -> Cost:
    """FLOPs and bytes of one `forward_cached` call: `batch` rows, each running
    `new_tokens` new tokens after `context` cached ones (decode: new_tokens=1; a prefill
    chunk: new_tokens=chunk). N = batch × new_tokens tokens; each attends to
    L = context + new_tokens keys (its cached prefix and the new ones). C = n_embd,
    V = vocab_size; a multiply-add is 2 FLOPs.

    FLOPs (`detail` keys):
      "matmul": the linear layers, per layer 2·N·(C·3C [qkv] + C·C [attn proj] + C·4C +
                4C·C [MLP]) = 24·N·C², times n_layer; plus the tied output head 2·N·C·V
                (forward_cached computes logits at every new position);
      "attention": per layer Q·Kᵀ and P·V, 2·N·L·C each (all heads together: H·D = C) —
                the full N × L rectangle, what a masked attention computes (a causal
                kernel may skip the upper half of a fresh prefill);
      LayerNorm, GELU, softmax, biases and residual adds are O(N·C) and not counted.
    Bytes:
      "weights": every parameter read once per step (batching shares this read), except
                the position table, of which only the N looked-up rows are read;
      "kv_read": per layer K and V of every row, 2·batch·L·C values;
      "kv_write": per layer the new tokens' K and V, 2·N·C values;
      activations are not counted (at decode they are small next to the weights).
    """
    for name, v, lo in (("batch", batch, 1), ("new_tokens", new_tokens, 1), ("context", context, 0),
                        ("dtype_bytes", dtype_bytes, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    if context + new_tokens > config.block_size:
        raise ValueError(f"context {context} + new_tokens {new_tokens} exceeds the model's context "
                         f"{config.block_size}")
    # BEGIN SOLUTION 8.5
    C, V, n_layer = config.n_embd, config.vocab_size, config.n_layer
    N, L = batch * new_tokens, context + new_tokens
    matmul = n_layer * 24 * N * C * C + 2 * N * C * V
    attention = n_layer * 2 * (2 * N * L * C)
    w = weight_count(config)
    weights = (sum(w.values()) - w["wpe"] + N * C) * dtype_bytes
    kv_read = n_layer * 2 * batch * L * C * dtype_bytes
    kv_write = n_layer * 2 * N * C * dtype_bytes
    detail = {"matmul": float(matmul), "attention": float(attention), "weights": float(weights),
              "kv_read": float(kv_read), "kv_write": float(kv_write)}
    return Cost(float(matmul + attention), float(weights + kv_read + kv_write), detail)
    # END SOLUTION


@dataclass(frozen=True)
class Peak:
    """A measured peak rate (FLOP/s or bytes/s) and the conditions it was measured under."""

    value: float
    conditions: str


def measure_peak_flops(device=None, *, n: int | None = None, dtype: torch.dtype = torch.float32,
                       seconds: float = 0.3, clock: Callable[[], float] = time.perf_counter) -> Peak:
    """This machine's matmul FLOP/s: time an n×n @ n×n product (2·n³ FLOPs) with `time_fn`
    (warm-up, synchronised, median of repeats sized to take about `seconds` in all).
    n defaults to 512 on CPU, 4096 on CUDA: big enough to keep the units busy."""
    # BEGIN SOLUTION 8.5
    device = _device_of(device)
    n = n or (4096 if device.type == "cuda" else 512)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    one = time_fn(lambda: a @ b, warmup=1, repeat=1, device=device, clock=clock).median
    repeat = int(min(50, max(3, seconds / max(one, 1e-9))))
    t = time_fn(lambda: a @ b, warmup=1, repeat=repeat, device=device, clock=clock)
    return Peak(2 * n ** 3 / t.median, f"{n}x{n} {str(dtype).replace('torch.', '')} matmul on {device}, "
                                       f"{torch.get_num_threads()} thread(s), median of {repeat}")
    # END SOLUTION


def measure_peak_bandwidth(device=None, *, size: int | None = None, seconds: float = 0.3,
                           clock: Callable[[], float] = time.perf_counter) -> Peak:
    """This machine's memory bandwidth: time a copy of a buffer much larger than the
    caches (default 64 MiB on CPU, 1 GiB on CUDA); a copy reads and writes every byte, so
    bandwidth = 2 × size / time."""
    # BEGIN SOLUTION 8.5
    device = _device_of(device)
    size = size or ((1 << 30) if device.type == "cuda" else (64 << 20))
    src = torch.ones(size // 4, device=device)
    dst = torch.empty_like(src)
    one = time_fn(lambda: dst.copy_(src), warmup=1, repeat=1, device=device, clock=clock).median
    repeat = int(min(50, max(3, seconds / max(one, 1e-9))))
    t = time_fn(lambda: dst.copy_(src), warmup=1, repeat=repeat, device=device, clock=clock)
    return Peak(2 * src.numel() * 4 / t.median, f"copy of {size >> 20} MiB on {device}, "
                                                f"{torch.get_num_threads()} thread(s), median of {repeat}")
    # END SOLUTION


@dataclass(frozen=True)
class RooflinePoint:
    """A step placed on the roofline. `attainable`: the roof at its intensity,
    min(peak FLOP/s, intensity × peak bandwidth); `achieved`: flops / seconds;
    `efficiency`: achieved / attainable; `regime`: "compute", "bandwidth" or "overhead"."""

    name: str
    flops: float
    bytes: float
    seconds: float
    intensity: float
    achieved: float
    attainable: float
    efficiency: float
    regime: str


def classify(name: str, cost: Cost, seconds: float, peak_flops: float, peak_bandwidth: float, *,
             min_efficiency: float = 0.5) -> RooflinePoint:
    """Place a measured step on the roofline and name its regime.

    The ridge point is peak_flops / peak_bandwidth FLOPs per byte: a step with a lower
    intensity cannot reach peak compute (its roof is the bandwidth slope). If the step
    achieves less than `min_efficiency` of its roof, neither compute nor bandwidth
    explains its time: it is "overhead"-bound. Otherwise it is "compute"-bound when its
    intensity is at or above the ridge, else "bandwidth"-bound.
    """
    for pname, v in (("seconds", seconds), ("peak_flops", peak_flops), ("peak_bandwidth", peak_bandwidth)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{pname} must be a finite number > 0, got {v!r}")
    if not 0 < min_efficiency <= 1:
        raise ValueError(f"min_efficiency must be in (0, 1], got {min_efficiency!r}")
    # BEGIN SOLUTION 8.5
    intensity = cost.intensity
    attainable = min(peak_flops, intensity * peak_bandwidth)
    achieved = cost.flops / seconds
    efficiency = achieved / attainable
    if efficiency < min_efficiency:
        regime = "overhead"
    else:
        regime = "compute" if intensity >= peak_flops / peak_bandwidth else "bandwidth"
    return RooflinePoint(name, cost.flops, cost.bytes, seconds, intensity, achieved, attainable, efficiency, regime)
    # END SOLUTION


def plot_roofline(points: Sequence[RooflinePoint], peak_flops: float, peak_bandwidth: float, ax=None,
                  title: str = ""):
    """The roofline (log-log: FLOPs/byte against FLOP/s) with each measured step on it."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.2))
    ridge = peak_flops / peak_bandwidth
    lo = min([p.intensity for p in points] + [ridge]) / 4
    hi = max([p.intensity for p in points] + [ridge]) * 4
    xs = np.geomspace(lo, hi, 200)
    ax.loglog(xs, np.minimum(peak_flops, xs * peak_bandwidth), color="black", lw=1.5, label="roof (measured peaks)")
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    colors = {"compute": "tab:red", "bandwidth": "tab:blue", "overhead": "tab:orange"}
    for p in points:
        ax.scatter([p.intensity], [p.achieved], color=colors[p.regime], zorder=3)
        ax.annotate(f"{p.name}\n({p.regime}, {p.efficiency:.0%} of roof)", (p.intensity, p.achieved),
                    textcoords="offset points", xytext=(5, -18), fontsize=7)
    ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title or "roofline")
    ax.legend(loc="upper left", fontsize=8)
    return ax


# ---- 8.6 per-request latency -------------------------------------------------------------------

#: The keys of one line of stage 07's request log (logger "course.server", JSON per line).
LOG_KEYS = ("request_id", "prompt_tokens", "output_tokens", "queue_s", "ttft_s", "prefill_s", "decode_s", "e2e_s",
            "mean_tpot_s", "finish_reason", "prefix_hit_tokens")
_LOG_NUMBERS = ("queue_s", "ttft_s", "prefill_s", "decode_s", "e2e_s")


def record_from_request(request: Request, *, prefix_hit_tokens: int = 0) -> dict:
    """Stage 07's log record for a finished stage-05 request, with the server's definitions
    (seconds on the engine's clock; None where a span does not exist — an aborted request
    may never have been scheduled or produced a token):

        queue_s    arrival -> first scheduled        ttft_s   arrival -> first output token
        prefill_s  first scheduled -> first token    decode_s first -> last output token
        e2e_s      arrival -> finished               mean_tpot_s  decode_s / (tokens - 1)

    so queue + prefill + decode = e2e when the request finishes with its last token."""
    m = request_metrics(request)
    if m.e2e is None:
        raise ValueError(f"request {request.request_id} has not finished")
    times = request.token_times
    first_scheduled = None if m.queue is None else request.arrival + m.queue
    return {"request_id": m.request_id, "prompt_tokens": m.prompt_tokens, "output_tokens": m.output_tokens,
            "queue_s": m.queue, "ttft_s": m.ttft,
            "prefill_s": None if not times or first_scheduled is None else times[0] - first_scheduled,
            "decode_s": times[-1] - times[0] if times else None, "e2e_s": m.e2e, "mean_tpot_s": m.tpot,
            "finish_reason": m.finish_reason, "prefix_hit_tokens": prefix_hit_tokens}


@dataclass
class RequestLog:
    """Parsed request records, and the lines that were not records: (line number, why)."""

    records: list[dict]
    malformed: list[tuple[int, str]]


def parse_request_log(lines: Iterable[str | bytes]) -> RequestLog:
    """Parse stage 07's request log: one JSON object per line with exactly `LOG_KEYS`.

    A line may carry a logging prefix before the JSON (`2026-… INFO course.server {…}`):
    parse from its first "{". Blank lines are skipped. A time (`queue_s`, `ttft_s`,
    `prefill_s`, `decode_s`, `e2e_s`) is a finite number >= 0, or null where the span does
    not exist (a request aborted before it was scheduled). A line that is not a JSON
    object, lacks a key, or has any other time is not dropped silently: it goes to
    `malformed` with its 1-based line number and the reason. Extra keys are kept.
    """
    if isinstance(lines, (str, bytes)):
        raise TypeError("parse_request_log expects an iterable of lines; use text.splitlines()")
    # BEGIN SOLUTION 8.6
    records, bad = [], []
    for n, line in enumerate(lines, 1):
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        line = line.strip()
        if not line:
            continue
        start = line.find("{")
        if start < 0:
            bad.append((n, "no JSON object on the line"))
            continue
        try:
            rec = json.loads(line[start:])
        except json.JSONDecodeError as e:
            bad.append((n, f"not JSON: {e.msg}"))
            continue
        if not isinstance(rec, dict):
            bad.append((n, "not a JSON object"))
            continue
        missing = [k for k in LOG_KEYS if k not in rec]
        if missing:
            bad.append((n, f"missing keys {missing}"))
            continue
        wrong = [k for k in _LOG_NUMBERS if rec[k] is not None and (
            isinstance(rec[k], bool) or not isinstance(rec[k], (int, float))
            or not math.isfinite(rec[k]) or rec[k] < 0)]
        if wrong:
            bad.append((n, f"not a time >= 0: {wrong}"))
            continue
        records.append(rec)
    return RequestLog(records, bad)
    # END SOLUTION


def parse_metrics(text: str) -> dict[str, float]:
    """A Prometheus text exposition (a `/metrics` scrape) as {sample name{labels}: value},
    parsed by `prometheus_client`'s own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = float(s.value)
    return out


#: Stage 07's Prometheus histograms of the request phases (vLLM's names).
PHASE_METRICS = {"queue": "vllm:request_queue_time_seconds", "prefill": "vllm:request_prefill_time_seconds",
                 "decode": "vllm:request_decode_time_seconds", "e2e": "vllm:e2e_request_latency_seconds"}


def phase_shares_from_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """The phases' shares of end-to-end time from a `/metrics` scrape (`parse_metrics`):
    each phase histogram's `_sum` over the e2e histogram's `_sum`, every label set added
    up. The server observes the same spans it logs, so these agree with
    `latency_breakdown`'s shares over the same requests."""
    def total(name: str) -> float:
        hits = [v for k, v in metrics.items() if k == f"{name}_sum" or k.startswith(f"{name}_sum{{")]
        if not hits:
            raise ValueError(f"the scrape has no {name}_sum; is it stage 07's /metrics?")
        return float(sum(hits))

    e2e = total(PHASE_METRICS["e2e"])
    return {p: (total(PHASE_METRICS[p]) / e2e if e2e > 0 else float("nan")) for p in ("queue", "prefill", "decode")}


def latency_breakdown(records: Sequence[dict]) -> dict[str, dict[str, float]]:
    """Where the requests' time went. For each phase in ("queue", "prefill", "decode") and
    for "ttft" and "e2e": p50 and p99 (numpy linear percentiles) and mean, in seconds, over
    the records where that time exists (not None); for the three phases also `share`: the
    phase's sum / the sum of e2e, over the COMPLETE records (queue, prefill, decode and e2e
    all present), so the shares add up to 1 when the log is consistent.
    Raises ValueError when no record is complete."""
    if not records:
        raise ValueError("latency_breakdown needs at least one record")
    # BEGIN SOLUTION 8.6
    phases = ("queue", "prefill", "decode")
    complete = [r for r in records if all(r[f"{p}_s"] is not None for p in (*phases, "e2e"))]
    if not complete:
        raise ValueError(f"latency_breakdown needs at least one complete record, got {len(records)} records")
    total = float(sum(r["e2e_s"] for r in complete))
    out: dict[str, dict[str, float]] = {}
    for phase in (*phases, "ttft", "e2e"):
        v = np.array([r[f"{phase}_s"] for r in records if r[f"{phase}_s"] is not None], dtype=float)
        row = {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)), "mean": float(v.mean())}
        if phase in phases:
            part = sum(r[f"{phase}_s"] for r in complete)
            row["share"] = float(part / total) if total > 0 else float("nan")
        out[phase] = row
    return out
    # END SOLUTION


@dataclass(frozen=True)
class Recommendation:
    """The one change the measurements point at: a short `key`, the advice, and why."""

    key: str
    advice: str
    evidence: str


def recommend(breakdown: dict[str, dict[str, float]], *, decode_regime: str | None = None,
              knee_batch: int | None = None, max_batch_size: int | None = None) -> Recommendation:
    """The one change the data says to make next, from the phase that dominates e2e time.

    - "queue" dominates: requests wait for a row. If `knee_batch` — the batch up to which a
      bigger batch still pays: the sweep's knee, or its largest batch when it found no knee —
      is above the engine's `max_batch_size`, key "raise_batch" (more rows are nearly free);
      else "add_capacity" (a bigger batch no longer pays: another replica, or a faster step).
    - "prefill" dominates: key "prefill" — chunked prefill / prefix caching, shorter prompts.
    - "decode" dominates: by the decode step's roofline regime: "overhead" → key
      "cut_overhead" (fewer, bigger operations: a larger batch, fused kernels, CUDA
      graphs); "bandwidth" → "fewer_bytes" (a larger batch shares the weight read; quantise
      the weights / KV cache); "compute" → "fewer_flops" (a smaller model or lower precision);
      unknown → "profile_decode".
    `evidence` quotes the shares (and the regime / knee) the choice rests on.
    """
    for phase in ("queue", "prefill", "decode"):
        if phase not in breakdown or "share" not in breakdown[phase]:
            raise ValueError(f"breakdown lacks the share of {phase!r}; pass latency_breakdown(...)")
    if decode_regime not in (None, "compute", "bandwidth", "overhead"):
        raise ValueError(f"decode_regime must be None, 'compute', 'bandwidth' or 'overhead', got {decode_regime!r}")
    # BEGIN SOLUTION 8.6
    shares = {p: breakdown[p]["share"] for p in ("queue", "prefill", "decode")}
    top = max(shares, key=shares.get)
    evidence = ", ".join(f"{p} {s:.0%}" for p, s in shares.items()) + " of end-to-end time"
    if top == "queue":
        if knee_batch is not None and max_batch_size is not None and knee_batch > max_batch_size:
            return Recommendation("raise_batch", f"raise max_batch_size from {max_batch_size} toward {knee_batch}: "
                                  "throughput still grows there, so queued requests get rows almost for free",
                                  f"{evidence}; a bigger batch pays up to batch {knee_batch}")
        return Recommendation("add_capacity", "add capacity (another replica) or make each step faster: "
                              "a bigger batch no longer pays", evidence +
                              (f"; a bigger batch pays only up to batch {knee_batch}"
                               if knee_batch is not None else ""))
    if top == "prefill":
        return Recommendation("prefill", "shorten time to first token: chunked prefill, prefix caching, "
                              "shorter prompts", evidence)
    if decode_regime is None:
        return Recommendation("profile_decode", "decode dominates: profile a decode step to find its regime", evidence)
    advice = {"overhead": ("cut_overhead", "cut per-step overhead: fewer, bigger operations (a larger batch, fused "
                           "kernels, CUDA graphs) — a faster matmul would change nothing"),
              "bandwidth": ("fewer_bytes", "move fewer bytes per token: a larger batch shares the weight read; "
                            "quantise weights and the KV cache"),
              "compute": ("fewer_flops", "do fewer FLOPs: a smaller model or lower-precision math")}[decode_regime]
    return Recommendation(advice[0], advice[1], f"{evidence}; the decode step is {decode_regime}-bound")
    # END SOLUTION


# ---- 8.7 the report ------------------------------------------------------------------------------

#: The report's sections, in order (`course profile --stages` picks some).
SECTIONS = ("timers", "ops", "memory", "sweep", "roofline", "latency")


def _jsonable(o):
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    return o


def cpu_sleep(seconds: float) -> None:
    """Wait by burning CPU, so that `time.process_time` advances while we wait: the `sleep`
    of a trace replay whose engine runs on the CPU-time clock."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def cpu_clock_ok(device) -> bool:
    """Whether this process's CPU time (`time.process_time`) can time work on `device`: on
    the CPU with one torch thread it counts exactly the work, and — unlike the wall clock —
    not the time other jobs on a shared machine steal. (With n threads it would add up n.)"""
    return _device_of(device).type == "cpu" and torch.get_num_threads() == 1


def collect(model: GPT | None = None, *, sections: Sequence[str] = SECTIONS, device=None, quick: bool = False,
            trace_path: str | Path | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """Run the measurements of `sections` on `model` (default: the course's default model)
    and return them as one JSON-able dict — the report's single source of numbers.

    quick: fewer batch sizes and repeats (a few seconds; for demos and tests).
    Timings use the current torch thread count, recorded in `environment`; the timers,
    the sweep, the roofline's step times and the trace replay (its engine clock, with
    `cpu_sleep` to wait) use CPU time where `cpu_clock_ok` (one thread on the CPU), else
    the wall clock. The profiler always reports wall time.
    """
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown or not sections:
        raise ValueError(f"sections must be a non-empty subset of {SECTIONS}, got {list(sections)}")
    say = progress or (lambda msg: None)
    device = _device_of(device) if device is not None else None
    if model is None:
        model, what = default_model()
    else:
        what = "a given model"
    if device is not None:
        model = model.to(device)
    device = model.transformer.wte.weight.device
    cfg = model.config
    repeat = 3 if quick else 7
    batches = [1, 4, 16] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256]
    big = 16 if quick else 32
    context = min(64, cfg.block_size // 2)
    cpu_clock = cpu_clock_ok(device)
    clock = time.process_time if cpu_clock else time.perf_counter
    data: dict = {
        "environment": {"device": str(device), "device_name": (torch.cuda.get_device_name(device)
                                                               if device.type == "cuda" else platform.machine()),
                        "torch": torch.__version__, "threads": torch.get_num_threads(), "quick": quick,
                        "engine": ServingEngine.__name__,
                        "clock": "process CPU time" if cpu_clock else "wall clock"},
        "model": {"what": what, "params": model.num_params(), "n_layer": cfg.n_layer, "n_head": cfg.n_head,
                  "n_embd": cfg.n_embd, "vocab_size": cfg.vocab_size, "block_size": cfg.block_size,
                  "dtype": str(model.transformer.wte.weight.dtype).replace("torch.", "")},
        "conditions": {"context": context, "big_batch": big, "repeat": repeat},
    }
    if "timers" in sections:
        say("timers: cold vs warm vs unsynchronised")
        data["timers"] = {f"decode_b{b}": timing_pitfalls(decode_step_fn(model, b, context), device=device,
                                                          repeat=repeat, clock=clock) for b in (1, big)}
    if "ops" in sections:
        say("ops: torch.profiler around decode steps at batch 1 and batch %d" % big)
        data["ops"] = {}
        for b in (1, big):
            prof = profile_engine(decode_engine(model, b), wait=1, warmup=1, active=3,
                                  trace_path=trace_path if b == big else None)
            total = sum(o.step_self_s for o in prof.ops) or 1.0
            data["ops"][f"b{b}"] = {
                "batch": b, "steps": prof.steps, "step_ms": 1e3 * prof.labels["step"],
                "labels_ms": {k: 1e3 * v for k, v in prof.labels.items() if k != "step"},
                "ops_per_step": prof.ops_per_step, "top_level_ops_per_step": prof.top_level_ops_per_step,
                "kernels_per_step": prof.kernels_per_step,
                "top": [{"name": o.name, "calls_per_step": o.calls / prof.steps,
                         "self_us_per_step": 1e6 * o.step_self_s, "share": o.step_self_s / total}
                        for o in prof.top(8)],
                "by_shape": [{"name": n, "shapes": s, "calls": c, "self_us": 1e6 * t}
                             for n, s, c, t in prof.by_shape[:5]],
            }
    if "memory" in sections:
        say("memory: parameters, KV pool, activations")
        data["memory"] = {}
        for b in (1, big):
            mb = memory_breakdown(model, decode_engine(model, b))
            data["memory"][f"b{b}"] = {"batch": b, **asdict(mb), "kv_share": mb.kv_share, "total": mb.total}
    if "sweep" in sections or "roofline" in sections:
        say(f"sweep: decode throughput at batch {batches}")
        points = batch_sweep(model, batches, context=context, repeat=repeat, device=device, clock=clock)
        knee = find_knee([p.batch for p in points], [p.tokens_per_s for p in points], min_gain=0.1)
        data["sweep"] = {"context": context, "points": [asdict(p) for p in points],
                         "knee": None if knee is None else {"batch": knee.batch, "tokens_per_s": knee.throughput,
                                                            "min_gain": knee.min_gain}}
    if "roofline" in sections:
        say("roofline: peak FLOP/s and bandwidth, decode and prefill steps")
        dtype = model.transformer.wte.weight.dtype
        pf = measure_peak_flops(device, dtype=dtype, seconds=0.15 if quick else 0.3, clock=clock)
        pb = measure_peak_bandwidth(device, seconds=0.15 if quick else 0.3, clock=clock)
        nb = torch.empty((), dtype=dtype).element_size()
        by_batch = {p["batch"]: p for p in data["sweep"]["points"]}
        chunk = min(128, cfg.block_size - context)
        steps = [(f"decode b=1", step_cost(cfg, batch=1, new_tokens=1, context=context, dtype_bytes=nb),
                  by_batch[1]["step_s"]),
                 (f"decode b={max(by_batch)}", step_cost(cfg, batch=max(by_batch), new_tokens=1, context=context,
                                                         dtype_bytes=nb), by_batch[max(by_batch)]["step_s"]),
                 (f"prefill {chunk}", step_cost(cfg, batch=1, new_tokens=chunk, context=context, dtype_bytes=nb),
                  time_fn(prefill_chunk_fn(model, chunk, context=context), repeat=repeat, device=device,
                          clock=clock).median)]
        pts = [classify(n, c, s, pf.value, pb.value) for n, c, s in steps]
        data["roofline"] = {"peak_flops": pf.value, "peak_flops_conditions": pf.conditions,
                            "peak_bandwidth": pb.value, "peak_bandwidth_conditions": pb.conditions,
                            "ridge": pf.value / pb.value, "points": [asdict(p) for p in pts]}
    if "latency" in sections:
        say("latency: a trace replayed through the engine, stage 07's request records")
        n_req = 24 if quick else 64
        trace = make_trace(n_req, profile="mix", rate=200.0, seed=0)
        max_batch = 8
        sleep = cpu_sleep if cpu_clock else time.sleep
        warm = make_trace(8, profile="mix", rate=None, seed=1)
        replay(ServingEngine(model, ContinuousBatching(max_batch), clock=clock), warm, sleep=sleep)  # warm-up
        result = replay(ServingEngine(model, ContinuousBatching(max_batch), clock=clock), trace, sleep=sleep)
        lines = [json.dumps(record_from_request(r)) for r in result.requests]
        log = parse_request_log(lines)
        bd = latency_breakdown(log.records)
        sweep = data.get("sweep")
        knee_b = None if sweep is None else (sweep["knee"]["batch"] if sweep["knee"] else
                                             max(p["batch"] for p in sweep["points"]))
        regime = None
        if "roofline" in data:
            regime = next(p["regime"] for p in data["roofline"]["points"] if p["name"] == "decode b=1")
        rec = recommend(bd, decode_regime=regime, knee_batch=knee_b, max_batch_size=max_batch)
        data["latency"] = {"trace": trace.describe(), "requests": len(log.records), "malformed": len(log.malformed),
                           "max_batch_size": max_batch, "breakdown": bd, "recommendation": asdict(rec)}
    return _jsonable(data)


def _num(v: float, digits: int = 3) -> str:
    """A figure for the report: `digits` significant digits, no exponent for ordinary sizes."""
    if v is None:
        return "n/a"
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    decimals = max(0, digits - 1 - mag)
    return f"{v:.{decimals}f}"


def write_report(data: dict, out_dir: str | Path) -> Path:
    """Write `data` (from `collect`) as a report into the folder `out_dir` (which must exist):
    `report.md`, `report.json` (the same data), and one PNG per plot: `sweep.png`
    (throughput and step latency against batch size, the knee marked) when data has
    "sweep", `roofline.png` when it has "roofline", `latency.png` (the phases' shares) when
    it has "latency". The Markdown links every plot it wrote and ends with the JSON it was
    built from; every figure it prints is formatted from `data` (`_num` with a unit scale:
    ms = s × 1e3, GFLOP/s = FLOP/s × 1e-9, GB/s = bytes/s × 1e-9, % = share × 100, MiB =
    bytes / 2**20), never typed in. Returns the path of report.md.
    """
    out = Path(out_dir)
    if not out.is_dir():
        raise ValueError(f"out_dir {str(out)!r} is not an existing folder")
    # BEGIN SOLUTION 8.7
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    env, m = data["environment"], data["model"]
    md = [f"# Profile of the serving stack on {env['device']} ({env['device_name']})", "",
          f"Model: {m['what']}, {m['params']} parameters ({m['n_layer']} layers, {m['n_head']} heads, width "
          f"{m['n_embd']}, {m['dtype']}). Engine: `{env['engine']}`. torch {env['torch']}, {env['threads']} "
          f"thread(s); timings by {env['clock']} (the profiler's by the wall clock). "
          f"Every figure below is formatted from `report.json` (embedded at the end).", ""]
    if "timers" in data:
        md += ["## Timers: what a naive timer reports", "",
               "| step | first call (ms) | warm, unsynchronised (ms) | warm, synchronised median (ms) | spread |",
               "| --- | ---: | ---: | ---: | ---: |"]
        for name, t in data["timers"].items():
            md.append(f"| {name} | {_num(1e3 * t['cold_s'])} | {_num(1e3 * t['unsynced_s'])} | "
                      f"{_num(1e3 * t['honest_s'])} | {_num(100 * t['honest_spread'])}% |")
        md.append("")
    if "ops" in data:
        md += ["## Where a decode step's time goes (torch.profiler)", ""]
        for key, o in data["ops"].items():
            labels = ", ".join(f"{k} {_num(v)} ms" for k, v in o["labels_ms"].items())
            md += [f"Batch {o['batch']}: step {_num(o['step_ms'])} ms ({labels}); {_num(o['ops_per_step'])} aten "
                   f"ops per step, {_num(o['top_level_ops_per_step'])} called from Python"
                   + (f", {_num(o['kernels_per_step'])} GPU kernels" if o["kernels_per_step"] is not None else "")
                   + f" (medians over {o['steps']} recorded steps).", "",
                   "| operator | calls/step | self µs/step | share of self time |", "| --- | ---: | ---: | ---: |"]
            md += [f"| `{t['name']}` | {_num(t['calls_per_step'])} | {_num(t['self_us_per_step'])} | "
                   f"{_num(100 * t['share'])}% |" for t in o["top"]]
            md.append("")
    if "memory" in data:
        md += ["## Memory", "", "| batch | parameters (MiB) | KV pool (MiB) | activations, peak of a step (MiB) | "
               "Python state (MiB) | KV share | process (MiB) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for key, mm in data["memory"].items():
            md.append(f"| {mm['batch']} | {_num(mm['params'] / 2**20)} | {_num(mm['kv_pool'] / 2**20)} | "
                      f"{_num(mm['activations'] / 2**20)} | {_num(mm['python_state'] / 2**20)} | "
                      f"{_num(100 * mm['kv_share'])}% | {_num(mm['process'] / 2**20)} |")
        md.append("")
    if "sweep" in data:
        sw = data["sweep"]
        pts = sw["points"]
        knee = sw["knee"]
        fig, ax = plt.subplots(figsize=(6.4, 3.8))
        ax.plot([p["batch"] for p in pts], [p["tokens_per_s"] for p in pts], "o-", label="tokens/s")
        ax.set_xscale("log", base=2)
        ax.set_xticks([p["batch"] for p in pts], [str(p["batch"]) for p in pts])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("batch size (decode rows)")
        ax.set_ylabel("decode tokens/s")
        ax2 = ax.twinx()
        ax2.plot([p["batch"] for p in pts], [1e3 * p["step_s"] for p in pts], "s--", color="tab:orange",
                 label="ms per step")
        ax2.set_ylabel("ms per step (= per token per row)")
        if knee:
            ax.axvline(knee["batch"], color="grey", ls=":", label=f"knee: batch {knee['batch']}")
        handles = ax.get_legend_handles_labels()
        more = ax2.get_legend_handles_labels()
        ax.legend(handles[0] + more[0], handles[1] + more[1], loc="upper left", fontsize=8)
        ax.set_title(f"decode throughput vs batch (context {sw['context']})")
        fig.tight_layout()
        fig.savefig(out / "sweep.png", dpi=110)
        plt.close(fig)
        md += ["## Throughput against batch size", "", "![throughput vs batch](sweep.png)", "",
               "| batch | step (ms) | tokens/s | spread |", "| ---: | ---: | ---: | ---: |"]
        md += [f"| {p['batch']} | {_num(1e3 * p['step_s'])} | {_num(p['tokens_per_s'])} | {_num(100 * p['spread'])}% |"
               for p in pts]
        md += ["", (f"The knee: beyond batch {knee['batch']} doubling the batch adds less than "
                    f"{_num(100 * knee['min_gain'])}% throughput ({_num(knee['tokens_per_s'])} tokens/s there)."
                    if knee else "No knee inside the sweep: throughput still grows at its largest batch."), ""]
    if "roofline" in data:
        r = data["roofline"]
        pts = [RooflinePoint(**p) for p in r["points"]]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        plot_roofline(pts, r["peak_flops"], r["peak_bandwidth"], ax=ax, title=f"roofline on {env['device']}")
        fig.tight_layout()
        fig.savefig(out / "roofline.png", dpi=110)
        plt.close(fig)
        md += ["## Roofline", "", "![roofline](roofline.png)", "",
               f"Measured peaks: {_num(r['peak_flops'] * 1e-9)} GFLOP/s ({r['peak_flops_conditions']}), "
               f"{_num(r['peak_bandwidth'] * 1e-9)} GB/s ({r['peak_bandwidth_conditions']}); ridge at "
               f"{_num(r['ridge'])} FLOPs/byte.", "",
               "| step | FLOPs/byte | achieved GFLOP/s | roof GFLOP/s | of roof | regime |",
               "| --- | ---: | ---: | ---: | ---: | --- |"]
        md += [f"| {p.name} | {_num(p.intensity)} | {_num(p.achieved * 1e-9)} | {_num(p.attainable * 1e-9)} | "
               f"{_num(100 * p.efficiency)}% | {p.regime} |" for p in pts]
        md.append("")
    if "latency" in data:
        lat = data["latency"]
        bd = lat["breakdown"]
        phases = ("queue", "prefill", "decode")
        fig, ax = plt.subplots(figsize=(6.4, 2.0))
        left = 0.0
        for ph, color in zip(phases, ("tab:grey", "tab:blue", "tab:green")):
            ax.barh([0], [bd[ph]["share"]], left=left, color=color, label=f"{ph} {bd[ph]['share']:.0%}")
            left += bd[ph]["share"]
        ax.set_xlim(0, 1)
        ax.set_yticks([])
        ax.set_xlabel("share of end-to-end time, all requests")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.02), ncol=3, fontsize=8, frameon=False)
        fig.tight_layout()
        fig.savefig(out / "latency.png", dpi=110)
        plt.close(fig)
        rec = lat["recommendation"]
        md += ["## Where a request's time goes", "", f"Trace: {lat['trace']}; max batch {lat['max_batch_size']}; "
               f"{lat['requests']} request records ({lat['malformed']} malformed).", "", "![latency](latency.png)", "",
               "| phase | p50 (ms) | p99 (ms) | mean (ms) | share of e2e |", "| --- | ---: | ---: | ---: | ---: |"]
        for ph in (*phases, "ttft", "e2e"):
            row = bd[ph]
            share = f"{_num(100 * row['share'])}%" if "share" in row else ""
            md.append(f"| {ph} | {_num(1e3 * row['p50'])} | {_num(1e3 * row['p99'])} | {_num(1e3 * row['mean'])} | "
                      f"{share} |")
        md += ["", f"**The change the data says to make next** (`{rec['key']}`): {rec['advice']}. Evidence: "
               f"{rec['evidence']}.", ""]
    payload = json.dumps(data, indent=1, sort_keys=True)
    md += ["## The data", "", "```json", payload, "```", ""]
    (out / "report.json").write_text(payload + "\n", encoding="utf-8")
    path = out / "report.md"
    path.write_text("\n".join(md), encoding="utf-8")
    return path
    # END SOLUTION


# ---- demo ------------------------------------------------------------------------------------------

@on_one_thread
def demo() -> None:
    """The profile summary that ends `course demo`: a quick look at the default model's
    decode step (a few seconds)."""
    model, what = default_model()
    print(f"model: {what}, {model.num_params():,} parameters; 1 torch thread, CPU")
    for b in (1, 16):
        prof = profile_engine(decode_engine(model, b), wait=1, warmup=1, active=3)
        top = ", ".join(f"{o.name} {o.step_self_s / sum(x.step_self_s for x in prof.ops):.0%}" for o in prof.top(3))
        print(f"decode step, batch {b:>2}: {1e3 * prof.labels['step']:.2f} ms under the profiler (wall clock), "
              f"{prof.top_level_ops_per_step:.0f} ops from Python; top self time: {top}")
    cpu = time.process_time  # one thread on the CPU: CPU time is the work, not what others steal
    points = batch_sweep(model, [1, 4, 16, 32], context=64, repeat=3, warmup=1, clock=cpu)
    knee = find_knee([p.batch for p in points], [p.tokens_per_s for p in points])
    print("decode tokens/s by batch: " + ", ".join(f"{p.batch}: {p.tokens_per_s:.0f}" for p in points)
          + (f"; knee at batch {knee.batch}" if knee else "; no knee inside the sweep"))
    cfg = model.config
    pf, pb = measure_peak_flops(seconds=0.05, clock=cpu), measure_peak_bandwidth(seconds=0.05, clock=cpu)
    for p in points[:1] + points[-1:]:
        pt = classify(f"decode b={p.batch}", step_cost(cfg, batch=p.batch, new_tokens=1, context=64),
                      p.step_s, pf.value, pb.value)
        print(f"{pt.name}: {pt.intensity:.1f} FLOPs/byte, {pt.efficiency:.0%} of its roof -> {pt.regime}-bound")
    print(f"(peaks: {pf.value / 1e9:.0f} GFLOP/s, {pb.value / 1e9:.1f} GB/s; step times in CPU time; "
          "full report: course profile)")
