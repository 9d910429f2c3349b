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
        # BEGIN SOLUTION 4.2
        # DECISION: the layout's axes (rows dim 0, positions dim 2) and when to grow: only by what
        #   the longest new length needs, after the room check, as new tensors.
        # HINT: torch.cat cannot grow a tensor in place: it builds a new one. Append a block
        #   of zeros along the positions axis (dim 2) of every layer's K and V.
        # HINT: Check the room first (the given `self._check_room(new_lengths)` raises), and
        #   grow only by what max(new_lengths) needs beyond the current length
        #   (`self.k[0].shape[2]`).
        self._check_room(new_lengths)
        need = int(new_lengths.max()) if new_lengths.numel() else 0
        have = self.k[0].shape[2]
        if need <= have:
            return
        pad = torch.zeros(self.batch, self.n_head, need - have, self.head_dim, dtype=self.dtype, device=self.device)
        self.k = [torch.cat([k, pad], dim=2) for k in self.k]  # a full copy of the cache ...
        self.v = [torch.cat([v, pad], dim=2) for v in self.v]  # ... at every growth step
        # END SOLUTION

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None:
        """Store token i's k[i], v[i] (each (H, D)) at row rows[i], position positions[i]."""
        # BEGIN SOLUTION 4.2
        # HINT: write and view are one indexed assignment and one slice of `self.k[layer]`
        #   (and `self.v[layer]`): rows index dim 0, positions dim 2.
        self.k[layer][rows, :, positions] = k
        self.v[layer][rows, :, positions] = v
        # END SOLUTION

    def view(self, layer: int, rows, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of `rows`, positions 0..length-1: each (B, H, length, D)."""
        # BEGIN SOLUTION 4.2
        return self.k[layer][rows, :, :length], self.v[layer][rows, :, :length]
        # END SOLUTION

    def reset(self, rows=None) -> None:
        """Forget rows; forgetting all of them also frees the storage (L back to 0)."""
        super().reset(rows)
        if rows is None:
            empty = torch.zeros(self.batch, self.n_head, 0, self.head_dim, dtype=self.dtype, device=self.device)
            self.k = [empty] * self.n_layer
            self.v = [empty] * self.n_layer
