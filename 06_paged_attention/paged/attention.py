# GENERATED from solutions/paged/attention.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 06_paged_attention/06_paged_attention.ipynb. Exercises in this file (line of each hole, then the commands):
#   6.4 Paged attention in PyTorch: line 30; `course check 6.4`, `course hint 6.4`
"""Paged attention in PyTorch (6.4): causal attention read through the block tables."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .block_table import blocks_needed


def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                    q_pos: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """Causal attention of new queries over K/V stored in blocks: prefill, chunked prefill
    and decode alike. Returns y (B, H, T, D) in q's dtype.

    q (B, H, T, D): row b's T new queries (their keys are already in the pools).
    k_pool, v_pool (num_blocks, block_size, H_kv, D): ONE layer's pools; H_kv divides H, and
    query head h reads K/V head h // (H / H_kv) (grouped-query attention; H_kv = H: none).
    block_tables (B, max_blocks) int: row b's physical blocks; entries past its last block
    are ignored (-1 is fine). q_pos (B, T) int64: each query's absolute position; query
    (b, t) attends to keys 0..q_pos[b, t] of row b, no others (padding queries may have any
    position whose keys exist). y = softmax(q K^T * scale + causal mask) V, scale D ** -0.5
    when None. Slots past a row's last query may hold anything, NaN included: they must
    not change y. Shape errors: ValueError naming the argument (given, `_check_paged_args`).
    """
    _check_paged_args(q, k_pool, v_pool, block_tables, q_pos)
    raise NotImplementedError('Exercise 6.4: Paged attention in PyTorch — see 06_paged_attention.ipynb')


def _check_paged_args(q, k_pool, v_pool, block_tables, q_pos) -> None:
    """Shapes of `paged_attention`'s (and the kernel's) arguments, or a ValueError naming one."""
    if not (isinstance(q, torch.Tensor) and q.dim() == 4):
        raise ValueError(f"q must be a (B, H, T, D) tensor, got {getattr(q, 'shape', type(q).__name__)}")
    B, H, T, D = q.shape
    if (k_pool.dim() != 4 or k_pool.shape[3] != D or not 1 <= k_pool.shape[2] <= H or H % k_pool.shape[2]
            or v_pool.shape != k_pool.shape):
        raise ValueError(f"k_pool and v_pool must both be (num_blocks, block_size, H_kv, {D}) with H_kv dividing "
                         f"{H} (the query heads), got {tuple(k_pool.shape)} and {tuple(v_pool.shape)}")
    if block_tables.dim() != 2 or block_tables.shape[0] != B:
        raise ValueError(f"block_tables must be ({B}, max_blocks), got {tuple(block_tables.shape)}")
    if q_pos.shape != (B, T):
        raise ValueError(f"q_pos must be ({B}, {T}), got {tuple(q_pos.shape)}")
