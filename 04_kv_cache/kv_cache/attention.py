# GENERATED from solutions/kv_cache/attention.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 04_kv_cache/04_kv_cache.ipynb. Exercises in this file (line of each hole, then the commands):
#   4.1 Attention against a cache: line 39; `course check 4.1`, `course hint 4.1`
"""Exercise 4.1: attention against a cache — prefill, chunked prefill and decode, one call."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .base import CacheProtocol
from .decoder import Decoder, check_decoder


@torch.no_grad()
def forward_cached(model: Decoder, idx: torch.Tensor, cache: CacheProtocol, *,
                   rows: slice | torch.Tensor | Sequence[int] | None = None,
                   n_new: torch.Tensor | Sequence[int] | None = None) -> torch.Tensor:
    """Run new tokens through `model` (GPT or Llama) against `cache`; return logits (B, T, V), its dtype.

    idx (B, T) int64/int32, right-padded; batch row b is cache row rows[b] (None: 0..B-1);
    n_new (B,): how many of idx[b]'s tokens are real (None: all T; 0: the row is untouched).
    Real token t of row b has absolute position p = cache.lengths[rows[b]] + t: it is embedded
    (and rotated) at p, its K, V are written at p (each layer; padding never), and it attends to positions
    0..p of its own row only. Padded tokens are embedded at position 0 (q_pos 0 for `attend`);
    their logits are unspecified. Real ones equal `model(whole sequence)` to float32 rounding.
    The cache is used only through CacheProtocol, and what it sees must hold: nothing is
    written before `reserve(rows, new lengths)` has accepted them; in each layer the real
    tokens' K, V are in the cache (`write`) before that layer reads it, by `attend(layer,
    rows, q, q_pos)` where the cache has that method, else by `view(layer, rows, longest new
    length)`; rows reach it as checked below (None -> slice(0, B); a slice stays a slice);
    its lengths[rows] hold the new lengths only once the last layer is done. The model runs
    piece by piece (its pieces: the lesson's table). Errors, before any write or advance:
    ValueError naming "context" past model.config.block_size; reserve's CacheFullError.
    """
    rows, n_new = _check_cached_call(model, idx, cache, rows, n_new)
    raise NotImplementedError('Exercise 4.1: Attention against a cache — see 04_kv_cache.ipynb')


def _check_cached_call(model: Decoder, idx: torch.Tensor, cache: CacheProtocol, rows, n_new):
    """Validate forward_cached's arguments; return (rows as a slice or (B,) int64 tensor, n_new
    as a (B,) int64 tensor, or None when every token is real)."""
    check_decoder(model)
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
        raise ValueError(f"idx must be a (batch, time) tensor, got {getattr(idx, 'shape', type(idx).__name__)}")
    if idx.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"idx must hold integer token ids, got {idx.dtype}")
    B, T = idx.shape
    if T < 1:
        raise ValueError("idx has no positions (time dimension 0)")
    if cache.n_layer != model.config.n_layer:
        raise ValueError(f"the cache has {cache.n_layer} layers, the model {model.config.n_layer}")
    if rows is None:
        if B > cache.batch:
            raise ValueError(f"batch of {B} sequences but the cache has {cache.batch} rows")
        rows = slice(0, B)
    elif isinstance(rows, (list, tuple)) and all(type(r) is int for r in rows):
        # host ints (an engine's slots): checked here, copied to the device once, no round trip
        if len(rows) != B:
            raise ValueError(f"rows must have one cache row per sequence, shape ({B},), got ({len(rows)},)")
        if B and (min(rows) < 0 or max(rows) >= cache.batch):
            raise ValueError(f"rows {list(rows)} are outside the cache's rows 0..{cache.batch - 1}")
        if len(set(rows)) != B:
            raise ValueError(f"rows must be distinct, got {list(rows)}")
        rows = torch.tensor(rows, dtype=torch.long, device=cache.lengths.device)
    elif not isinstance(rows, slice):
        rows = torch.as_tensor(rows, dtype=torch.long, device=cache.lengths.device)
        if rows.shape != (B,):
            raise ValueError(f"rows must have one cache row per sequence, shape ({B},), got {tuple(rows.shape)}")
        if B and (int(rows.min()) < 0 or int(rows.max()) >= cache.batch):
            raise ValueError(f"rows {rows.tolist()} are outside the cache's rows 0..{cache.batch - 1}")
        if torch.unique(rows).numel() != B:
            raise ValueError(f"rows must be distinct, got {rows.tolist()}")
    elif len(range(cache.batch)[rows]) != B:
        raise ValueError(f"rows {rows} selects {len(range(cache.batch)[rows])} cache rows for {B} sequences")
    if (n_new is not None and isinstance(n_new, (list, tuple)) and len(n_new) == B
            and all(type(n) is int for n in n_new)):
        # host ints (an engine's chunk lengths): checked here, copied to the device once, no round trip
        if B and (min(n_new) < 0 or max(n_new) > T):
            raise ValueError(f"n_new must be in 0..{T} (the width of idx), got {list(n_new)}")
        if all(n == T for n in n_new):
            return rows, None  # no padding: the fast path
        n_new = torch.tensor(n_new, dtype=torch.long, device=cache.lengths.device)
    elif n_new is not None:
        n_new = torch.as_tensor(n_new, dtype=torch.long, device=cache.lengths.device)
        if n_new.shape != (B,):
            raise ValueError(f"n_new must have shape ({B},), got {tuple(n_new.shape)}")
        if B and (int(n_new.min()) < 0 or int(n_new.max()) > T):
            raise ValueError(f"n_new must be in 0..{T} (the width of idx), got {n_new.tolist()}")
        if bool((n_new == T).all()):
            n_new = None  # no padding: the fast path
    return rows, n_new
