# GENERATED from solutions/kv_cache/concat_cache.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 04_kv_cache/04_kv_cache.ipynb. Exercises in this file (line of each hole, then the commands):
#   4.2 ConcatKVCache: the torch.cat baseline: lines 34, 39, 43; `course check 4.2`, `course hint 4.2`
"""Exercise 4.2: `ConcatKVCache`, the naive cache that grows by `torch.cat` (the baseline)."""

from __future__ import annotations

import torch

from .base import _CacheBase


class ConcatKVCache(_CacheBase):
    """The naive cache, the baseline of the protocol (`CacheProtocol`).

    `k`, `v`: lists of n_layer tensors, each (batch, H, L, D) in the cache's dtype and device,
    one L for all layers. L starts at 0 (`reset()`; `max_len` is only a limit, nothing is
    allocated up front) and only `reserve` changes it. Every growth allocates new tensors and
    copies the whole cache into them: O(L) memory traffic per layer and step, on top of the
    attention itself. `write` and `view` work on positions < L (reserve comes first); a view
    of positions never written reads zeros.
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        super().__init__(n_layer, batch, n_head, max_len, head_dim, dtype=dtype, device=device)
        self.reset()

    def reserve(self, rows, new_lengths: torch.Tensor) -> None:
        """Room for `rows` to hold new_lengths (B,) tokens. A row past max_len: CacheFullError
        (a ValueError), nothing changed. Otherwise L becomes max(L, max(new_lengths)): if it
        grew, every layer's K and V are NEW tensors of exactly that many positions, the old
        positions' values kept and the new ones zeros; if not, nothing changed."""
        raise NotImplementedError('Exercise 4.2: ConcatKVCache: the torch.cat baseline — see 04_kv_cache.ipynb')

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None:
        """Store token i's k[i], v[i] (each (H, D)) at row rows[i], position positions[i]."""
        raise NotImplementedError('Exercise 4.2: ConcatKVCache: the torch.cat baseline — see 04_kv_cache.ipynb')

    def view(self, layer: int, rows, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of `rows`, positions 0..length-1: each (B, H, length, D)."""
        raise NotImplementedError('Exercise 4.2: ConcatKVCache: the torch.cat baseline — see 04_kv_cache.ipynb')

    def reset(self, rows=None) -> None:
        """Forget rows; forgetting all of them also frees the storage (L back to 0)."""
        super().reset(rows)
        if rows is None:
            empty = torch.zeros(self.batch, self.n_head, 0, self.head_dim, dtype=self.dtype, device=self.device)
            self.k = [empty] * self.n_layer
            self.v = [empty] * self.n_layer
