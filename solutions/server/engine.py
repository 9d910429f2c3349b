"""The engine the server runs, and the sizes that bound its steps (given code)."""

from __future__ import annotations

import torch
from torch import nn

from solutions.batching import ContinuousBatching, Engine
from solutions.gpt import GPT
from solutions.paged import PagedEngine

#: The server's defaults, chosen by measurement (the stage 07 lesson, "How many rows a step"):
#: up to 128 rows a step, 2048 tokens a step (vLLM's CPU serving defaults, `max_num_seqs` and
#: `max_num_batched_tokens`), KV memory for 64 whole contexts.
MAX_BATCH_SIZE, MAX_TOKENS_PER_STEP, KV_CONTEXTS = 128, 2048, 64


def make_engine(model: GPT, *, max_batch_size: int = MAX_BATCH_SIZE,
                max_tokens_per_step: int | None = MAX_TOKENS_PER_STEP, block_size: int = 16,
                num_blocks: int | None = None) -> Engine:
    """The engine the server runs: stage 06's PagedEngine (paged KV blocks, prefix caching,
    copy-on-write forks for n > 1) over stage 05's continuous batching with chunked prefill.

    What bounds a step is the KV memory (`num_blocks`, default: `KV_CONTEXTS` whole contexts
    of the model) and the token budget (`max_tokens_per_step`, vLLM's
    `max_num_batched_tokens`); `max_batch_size` (vLLM's `max_num_seqs`) only caps the rows."""
    if num_blocks is None:
        num_blocks = -(-KV_CONTEXTS * model.config.block_size // block_size)
    scheduler = ContinuousBatching(max_batch_size, max_tokens_per_step=max_tokens_per_step)
    return PagedEngine(model, scheduler, block_size=block_size, num_blocks=num_blocks)


def gemm_layout(model: GPT) -> GPT:
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
