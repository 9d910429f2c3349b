# GENERATED from solutions/kv_cache/prealloc_cache.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 04_kv_cache/04_kv_cache.ipynb. Exercises in this file (line of each hole, then the commands):
#   4.3 KVCache: preallocated, written in place: lines 30, 34, 39, 44; `course check 4.3`, `course hint 4.3`
"""Exercise 4.3: `KVCache`, preallocated buffers written in place and read without copies."""

from __future__ import annotations

import torch

from .base import _CacheBase


class KVCache(_CacheBase):
    """Preallocated buffers `k`, `v`, each (n_layer, batch, n_head, max_len, head_dim) in the
    cache's dtype and device, ZEROS when fresh (a masked position is multiplied by a weight
    of 0, and 0 * NaN from uninitialised memory would still be NaN).

    Layout: layer first, so `k[layer]` is one contiguous (batch, H, max_len, D) block, and
    rows a..b-1, positions 0..L-1 of it is a strided VIEW: `view` with a slice of rows returns
    views of the buffers (same storage, no copy); with a tensor of row ids it has to gather
    (a copy). `write` stores in place: the buffers are never reallocated (their data_ptr
    stays). Memory is paid up front for max_len positions per row, used or not: the price of
    never copying (stage 06 pays only for blocks in use).
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        super().__init__(n_layer, batch, n_head, max_len, head_dim, dtype=dtype, device=device)
        shape = (n_layer, batch, n_head, max_len, head_dim)
        raise NotImplementedError('Exercise 4.3: KVCache: preallocated, written in place — see 04_kv_cache.ipynb')

    def reserve(self, rows, new_lengths: torch.Tensor) -> None:
        """Allocates nothing: a row past max_len is a CacheFullError, anything else changes nothing."""
        raise NotImplementedError('Exercise 4.3: KVCache: preallocated, written in place — see 04_kv_cache.ipynb')

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None:
        """Store token i's k[i], v[i] (each (H, D)) at row rows[i], position positions[i], in place."""
        raise NotImplementedError('Exercise 4.3: KVCache: preallocated, written in place — see 04_kv_cache.ipynb')

    def view(self, layer: int, rows, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of `rows`, positions 0..length-1: each (B, H, length, D). A slice of rows
        returns views of the buffers (no copy); a tensor of row ids has to gather (a copy)."""
        raise NotImplementedError('Exercise 4.3: KVCache: preallocated, written in place — see 04_kv_cache.ipynb')
