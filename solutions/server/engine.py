"""The engine the server runs, and the sizes that bound its steps (given code)."""

from __future__ import annotations

import torch
from torch import nn

from solutions.batching import ContinuousBatching, Engine
from solutions.kv_cache import Decoder, embedding, kv_heads
from solutions.paged import PagedEngine

from .fairness import FairBatching
from .lanes import LaneBatching

#: The server's defaults, chosen by measurement (the stage 07 lesson, "How many rows a step"):
#: up to 128 rows a step, 2048 tokens a step (vLLM's CPU serving defaults, `max_num_seqs` and
#: `max_num_batched_tokens`), KV memory for 64 whole contexts. KV_BYTES bounds that memory for
#: a large model: SmolLM2-135M's K/V are 46,080 bytes a token in float32 (2 x 30 layers x 3 K/V
#: heads x 64 x 4 bytes; the course model's 3 KB), so 64 of its 8192-token contexts would be
#: 24 GB; 1 GiB holds 23,301 tokens (vLLM's CPU backend sizes its KV cache in bytes too,
#: VLLM_CPU_KVCACHE_SPACE).
MAX_BATCH_SIZE, MAX_TOKENS_PER_STEP, KV_CONTEXTS, KV_BYTES = 128, 2048, 64, 1 << 30

#: How the engine chooses between requests (`--scheduling-policy`): "fair" shares it between
#: clients (fairness.py), "priority" does so in two lanes (lanes.py, 7.8), "fcfs" is stage 05's
#: first come, first served over all of them.
SCHEDULING_POLICIES = {"fair": FairBatching, "fcfs": ContinuousBatching, "priority": LaneBatching}


def kv_bytes_per_token(model: Decoder) -> int:
    """Bytes of K and V one token holds in the cache: 2 x layers x K/V heads x head dim x
    the model's element size (the cache is in the model's dtype)."""
    cfg = model.config
    return 2 * cfg.n_layer * kv_heads(model) * cfg.head_dim * embedding(model).element_size()


def default_blocks(model: Decoder, block_size: int = 16) -> int:
    """The server's KV memory in blocks: KV_CONTEXTS whole contexts of the model, at most
    KV_BYTES of K/V, but at least one whole context (a prompt the context allows must fit)."""
    context = model.config.block_size
    tokens = min(KV_CONTEXTS * context, max(context, KV_BYTES // kv_bytes_per_token(model)))
    return -(-tokens // block_size)


def make_engine(model: Decoder, *, max_batch_size: int = MAX_BATCH_SIZE,
                max_tokens_per_step: int | None = MAX_TOKENS_PER_STEP, block_size: int = 16,
                num_blocks: int | None = None, scheduling_policy: str = "fair") -> Engine:
    """The engine the server runs: stage 06's PagedEngine (paged KV blocks, prefix caching,
    copy-on-write forks for n > 1) over stage 05's continuous batching with chunked prefill.

    What bounds a step is the KV memory (`num_blocks`, default `default_blocks`: KV_CONTEXTS
    whole contexts of the model, at most KV_BYTES) and the token budget (`max_tokens_per_step`, vLLM's
    `max_num_batched_tokens`); `max_batch_size` (vLLM's `max_num_seqs`) only caps the rows.
    `scheduling_policy`: a key of SCHEDULING_POLICIES (default "fair": one client's flood
    does not hold up the others; "priority": the same in two lanes, lanes.py)."""
    if scheduling_policy not in SCHEDULING_POLICIES:
        raise ValueError(f"scheduling_policy must be one of {sorted(SCHEDULING_POLICIES)}, got {scheduling_policy!r}")
    if num_blocks is None:
        num_blocks = default_blocks(model, block_size)
    scheduler = SCHEDULING_POLICIES[scheduling_policy](max_batch_size, max_tokens_per_step=max_tokens_per_step)
    return PagedEngine(model, scheduler, block_size=block_size, num_blocks=num_blocks)


def gemm_layout(model: Decoder) -> Decoder:
    """`model` with every float32 CPU `nn.Linear` weight stored column-major, in place: the
    same values and shape, strides (1, out_features). `F.linear(x, W)` multiplies x by W's
    transpose, and with this layout that transpose is a plain row-major matrix, which the
    CPU's GEMM multiplies faster when a step has few rows (about 1.5x at 1-16 rows, 1.1x at
    64, the same at 2048: 07_serving/bench_batch.py's "gemm layout" rows). The tied output
    head is left alone: its weight is the token embedding's, whose lookups read rows. The
    engine process applies it to its own copy of the model (`engine_process.py`)."""
    embedded = {m.weight.data_ptr() for m in model.modules() if isinstance(m, nn.Embedding)}
    with torch.no_grad():
        for m in model.modules():
            w = m.weight if isinstance(m, nn.Linear) else None
            if (w is not None and w.device.type == "cpu" and w.dtype == torch.float32 and w.dim() == 2
                    and w.data_ptr() not in embedded):
                w.data = w.t().contiguous().t()
    return model
