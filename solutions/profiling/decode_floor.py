"""Given: a Llama's step on the roofline, and batch-1 decode against the memory-bandwidth floor.

At batch 1 a decode step multiplies one token's activations by every weight matrix once: it
must read every weight byte, and does ~2 FLOPs per weight, so no schedule can make it faster
than (bytes it reads) / (the memory's bandwidth). That time is the *floor*.

    llama_step_cost(config, batch=, new_tokens=, context=)   FLOPs and bytes of a Llama's step
    model_step_cost(model, ...)        step_cost (8.5) for a GPT, llama_step_cost for a Llama
    measure_matvec_bandwidth(device)   bytes/s of one F.linear of a single row over a weight
                                       larger than the caches (what a decode step does)
    decode_floor(cost, seconds, bandwidth)   the floor of a measured step, and its share of it
    floor_section(data)                the report's lines on it (`course profile` appends them)
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from solutions.checks import check_int, check_ints

from .cost import Cost, step_cost
from .report import _num
from .roofline import Peak
from .timers import _device_of, time_fn

#: Bytes of the weight `measure_matvec_bandwidth` streams by default: 8x the 32 MiB L3 cache
#: of the course machine, so that each call reads it from DRAM.
MATVEC_BYTES = 256 << 20


def llama_step_cost(config, *, batch: int, new_tokens: int, context: int, dtype_bytes: int = 4) -> Cost:
    """FLOPs and bytes of one `forward_cached` call of stage 03's `Llama` (a `LlamaConfig`):
    `batch` rows, each `new_tokens` new tokens after `context` cached ones. N = batch x
    new_tokens, L = context + new_tokens, C = dim, F = hidden_dim, V = vocab_size, H_kv·D =
    n_kv_heads x head_dim; a multiply-add is 2 FLOPs. Detail keys as `step_cost`'s:
      "matmul": per layer q and o (C->C), k and v (C->H_kv·D), gate and up (C->F), down
                (F->C), and the head (C->V), on the N new tokens: 2·N·(2C² + 2C·H_kv·D + 3C·F)
                a layer + 2·N·C·V;
      "attention": per layer Q·Kᵀ and P·V over ALL query heads (grouping K/V heads saves bytes,
                not FLOPs): 2·(2·N·L·C);
      "weights": every parameter read once (the norms' gains included); the embedding table
                whole when the head is tied to it (the head reads it all), else only the N
                looked-up rows plus the head;
      "kv_read": per layer every row's L keys and values of the K/V heads: 2·batch·L·H_kv·D;
      "kv_write": per layer the new tokens' K and V: 2·N·H_kv·D;
    bytes = values x dtype_bytes. Not counted: RMSNorm, RoPE, SiLU, softmax, adds, activations.
    ValueError as `step_cost`'s (context + new_tokens <= max_seq_len)."""
    check_ints(1, batch=batch, new_tokens=new_tokens)
    check_int("context", context, 0)
    check_int("dtype_bytes", dtype_bytes, 1)
    if context + new_tokens > config.max_seq_len:
        raise ValueError(f"context {context} + new_tokens {new_tokens} exceeds the model's context "
                         f"{config.max_seq_len}")
    C, Fh, V, n = config.dim, config.hidden_dim, config.vocab_size, config.n_layers
    kvd = config.n_kv_heads * config.head_dim
    N, L = batch * new_tokens, context + new_tokens
    matmul = n * 2 * N * (2 * C * C + 2 * C * kvd + 3 * C * Fh) + 2 * N * C * V
    attention = n * 2 * (2 * N * L * C)
    per_layer = 2 * C * C + 2 * C * kvd + 3 * C * Fh + 2 * C  # the Linears and two RMSNorm gains
    embedding = V * C if config.tie_embeddings else N * C + V * C  # tied: the head's read; else lookup + head
    weights = (n * per_layer + C + embedding) * dtype_bytes  # + the final norm's gain
    kv_read = n * 2 * batch * L * kvd * dtype_bytes
    kv_write = n * 2 * N * kvd * dtype_bytes
    detail = {"matmul": float(matmul), "attention": float(attention), "weights": float(weights),
              "kv_read": float(kv_read), "kv_write": float(kv_write)}
    return Cost(float(matmul + attention), float(weights + kv_read + kv_write), detail)


def model_step_cost(config, *, batch: int, new_tokens: int, context: int, dtype_bytes: int = 4) -> Cost:
    """`step_cost` (8.5) for a GPTConfig, `llama_step_cost` for a LlamaConfig."""
    from solutions.train import LlamaConfig

    fn = llama_step_cost if isinstance(config, LlamaConfig) else step_cost
    return fn(config, batch=batch, new_tokens=new_tokens, context=context, dtype_bytes=dtype_bytes)


def measure_matvec_bandwidth(device=None, *, nbytes: int = MATVEC_BYTES, dtype: torch.dtype = torch.float32,
                             in_features: int = 4096, seconds: float = 0.3,
                             clock: Callable[[], float] = time.perf_counter) -> Peak:
    """The memory bandwidth a decode step can use: Peak(weight bytes / median seconds of
    `F.linear(x, w)`, conditions) for x one row (1, in_features) and w an (nbytes // (in_features
    x element size), in_features) weight of `dtype` — the product a batch-1 decode step makes
    with each Linear, over a weight much larger than the caches, so every call streams it
    from memory. Only the weight's bytes count (x and the output are 1/rows of them).
    Timed with `time_fn` (warm-up, `clock`), repeats sized to about `seconds` (3..50).
    `conditions` starts "matvec (1 x {in}) @ ({rows} x {in}).T, {MiB} MiB of {dtype} on {device}"."""
    device = _device_of(device)
    esize = torch.empty((), dtype=dtype).element_size()
    rows = max(1, nbytes // (in_features * esize))
    w = torch.randn(rows, in_features, device=device).to(dtype)
    x = torch.randn(1, in_features, device=device).to(dtype)
    fn = lambda: F.linear(x, w)  # noqa: E731
    one = time_fn(fn, warmup=1, repeat=1, device=device, clock=clock).median
    repeat = int(min(50, max(3, seconds / max(one, 1e-9))))
    t = time_fn(fn, warmup=1, repeat=repeat, device=device, clock=clock)
    size = w.numel() * esize
    return Peak(size / t.median, f"matvec (1 x {in_features}) @ ({rows} x {in_features}).T, {size >> 20} MiB of "
                                 f"{str(dtype).replace('torch.', '')} on {device}, {torch.get_num_threads()} "
                                 f"thread(s), median of {repeat}")


def decode_floor(step_bytes: float, seconds: float, bandwidth: float) -> dict:
    """{"bytes", "floor_s" = bytes / bandwidth, "step_s" = seconds, "of_floor" = floor_s /
    seconds (1.0: the step runs at the memory's speed), "bandwidth"}. ValueError unless all > 0."""
    for name, v in (("step_bytes", step_bytes), ("seconds", seconds), ("bandwidth", bandwidth)):
        if not (isinstance(v, (int, float)) and v > 0):
            raise ValueError(f"{name} must be a number > 0, got {v!r}")
    floor = step_bytes / bandwidth
    return {"bytes": float(step_bytes), "floor_s": floor, "step_s": float(seconds), "of_floor": floor / seconds,
            "bandwidth": float(bandwidth)}


def floor_section(data: dict) -> list[str]:
    """Markdown lines on the batch-1 decode step against the memory floor, from `collect`'s
    data["roofline"]["decode_floor"] (none when it is absent). Every figure from the data
    after one unit scale, as in write_report."""
    r = data.get("roofline") or {}
    f = r.get("decode_floor")
    if not f:
        return []
    lines = ["", "## Batch-1 decode against the memory-bandwidth floor", "",
             f"Memory bandwidth of a decode step's product, measured in this run: "
             f"{_num(r['matvec_bandwidth'] * 1e-9)} GB/s ({r['matvec_bandwidth_conditions']}); "
             f"the copy above: {_num(r['peak_bandwidth'] * 1e-9)} GB/s.", "",
             "| step | bytes read (MB) | floor (ms) | measured (ms) | of the floor's speed |",
             "| --- | ---: | ---: | ---: | ---: |",
             f"| decode b=1 | {_num(f['bytes'] * 1e-6)} | {_num(1e3 * f['floor_s'])} | {_num(1e3 * f['step_s'])} | "
             f"{_num(100 * f['of_floor'])}% |"]
    ops = ((data.get("ops") or {}).get("b1") or {}).get("top")
    if ops:
        lines += ["", "Where the batch-1 step's time goes (the profiler's top operators, share of self time): "
                  + ", ".join(f"`{t['name']}` {_num(100 * t['share'])}%" for t in ops[:5]) + "."]
    return lines
