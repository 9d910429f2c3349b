# GENERATED from solutions/kv_cache/base.py by `course stubs --write`.
# Nothing to write here: given code of stage 04 (04_kv_cache/04_kv_cache.ipynb).
"""Given code: the cache protocol `forward_cached` talks to, `CacheFullError`, `_CacheBase`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from solutions.checks import check_int

from .decoder import Decoder, check_decoder, embedding, kv_heads


class CacheFullError(ValueError):
    """A row would need more positions than the cache holds (`max_len`)."""


class CacheProtocol(Protocol):
    """What `forward_cached` needs from a cache, and all it uses: a different memory layout
    (stage 06's paged cache, with block tables) plugs in unchanged. B: the rows of one call,
    H heads, D head dim, N tokens written.

        n_layer, batch, max_len      ints
        lengths                      (batch,) int64: tokens cached per row. `forward_cached`
                                     advances it itself, after every layer has been written
        reserve(rows, new_lengths)   make room for rows to hold new_lengths (B,) tokens, or
                                     raise CacheFullError (a ValueError) and change nothing
        write(layer, rows, positions, k, v)
                                     store N tokens: rows, positions (N,) int64 (each token's
                                     cache row and absolute position); k, v (N, H, D)
        view(layer, rows, length) -> (K, V)
                                     positions 0..length-1 of rows, each (B, H, length, D) in
                                     the cache's dtype; rows: a slice (contiguous rows) or (B,)
                                     int64 row ids
        attend(layer, rows, q, q_pos) -> y
                                     OPTIONAL (stage 06 has it). A cache that has it computes
                                     attention itself, reading its own layout instead of a
                                     dense view: q (B, H, T, D); q_pos (B, T) int64, each
                                     query's absolute position (query t of row b sees keys
                                     0..q_pos[b, t] of its own row; a padded query has q_pos 0)
                                     -> y (B, H, T, D)
    """

    n_layer: int
    batch: int
    max_len: int
    lengths: torch.Tensor

    def reserve(self, rows: slice | torch.Tensor, new_lengths: torch.Tensor) -> None: ...

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None: ...

    def view(self, layer: int, rows: slice | torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]: ...


class _CacheBase:
    """What every cache shares: its dimensions, the per-row `lengths`, `reset`, `for_model`.

    Row b of the cache holds one sequence; `lengths[b]` of its positions are valid. Data
    past a row's length is stale and never attended to (it is masked), so forgetting a row
    is just `lengths[b] = 0`. Dimensions must be ints >= 1 (ValueError naming the one that
    is not); dtype a floating torch.dtype (TypeError).
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        self.n_layer, self.batch, self.n_head, self.max_len, self.head_dim = (
            check_int(name, value, 1) for name, value in (
                ("n_layer", n_layer), ("batch", batch), ("n_head", n_head),
                ("max_len", max_len), ("head_dim", head_dim)))
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        self.dtype, self.device = dtype, torch.device(device)
        self.lengths = torch.zeros(self.batch, dtype=torch.long, device=self.device)

    @classmethod
    def for_model(cls, model: Decoder, batch: int, max_len: int | None = None, **kw):
        """A cache shaped for `model`, a GPT or a Llama (its layers, K/V heads, head size, dtype
        and device: `n_head` is the heads a token's K and V have, `kv_heads(model)`, fewer than
        the query heads on a Llama). `max_len` defaults to the model's context, `block_size`."""
        check_decoder(model, "for_model's model")
        cfg = model.config
        max_len = cfg.block_size if max_len is None else max_len
        if isinstance(max_len, int) and max_len > cfg.block_size:
            raise ValueError(f"max_len {max_len} exceeds the model's context {cfg.block_size}")
        weight = embedding(model)
        kw.setdefault("dtype", weight.dtype)
        kw.setdefault("device", weight.device)
        return cls(cfg.n_layer, batch, kv_heads(model), max_len, cfg.head_dim, **kw)

    def reset(self, rows: slice | torch.Tensor | Sequence[int] | None = None) -> None:
        """Forget rows (all rows if None): their lengths go back to 0."""
        if rows is None:
            self.lengths.zero_()
            return
        if isinstance(rows, (list, tuple)) and all(type(r) is int for r in rows):  # host ints: no device round trip
            if rows and (min(rows) < 0 or max(rows) >= self.batch):
                raise ValueError(f"rows {list(rows)} are outside the cache's rows 0..{self.batch - 1}")
            rows = torch.tensor(rows, dtype=torch.long, device=self.device)
        elif not isinstance(rows, slice):
            rows = torch.as_tensor(rows, dtype=torch.long, device=self.device)
            if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= self.batch):
                raise ValueError(f"rows {rows.tolist()} are outside the cache's rows 0..{self.batch - 1}")
        self.lengths[rows] = 0

    def bytes_per_token(self) -> int:
        """K + V bytes one token takes across all layers: 2 * n_layer * n_head * head_dim * itemsize."""
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.n_layer * self.n_head * self.head_dim * itemsize

    def _check_room(self, new_lengths: torch.Tensor) -> None:
        """Raise CacheFullError when any row would need more than max_len positions."""
        need = int(new_lengths.max()) if new_lengths.numel() else 0
        if need > self.max_len:
            raise CacheFullError(
                f"a row needs {need} positions but the cache holds max_len={self.max_len} per row "
                f"(new lengths {new_lengths.tolist()})")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(n_layer={self.n_layer}, batch={self.batch}, n_head={self.n_head}, "
                f"max_len={self.max_len}, head_dim={self.head_dim}, dtype={self.dtype}, "
                f"lengths={self.lengths.tolist()})")
