"""Stage 04: the KV cache — generate text without recomputing the past.

A decoder generates one token at a time, and every new token attends to the keys and
values of all the tokens before it. Those keys and values never change once computed
(positions are absolute and attention is causal), so recomputing them at every step, as
`model(idx)` does, is pure waste: step t costs O(t) token-forwards and a whole generation
O(T^2). A KV cache stores each layer's K and V once; a decode step then runs ONE new
position per sequence through the model and attends to the cached past: O(1)
token-forwards per step, O(T) in all. What remains grows with the context is attention's
read of the cache — memory traffic, which is why how the cache is stored matters.

The pieces (shapes: B batch, H heads, T new positions, L cached length, D head dim):

    forward_cached(model, idx, cache)   prefill (T = prompt length), chunked prefill and
                                        decode (T = 1) for a ragged batch, against a cache
    ConcatKVCache                       the naive cache: grows by torch.cat (copies it all)
    KVCache                             preallocated (n_layer, batch, H, max_len, D) buffers,
                                        written in place, read as views (no copies)
    QuantizedKVCache                    INT8 K/V + per-token, per-head absmax scales
    sample(logits, ...)                 greedy, temperature, top-k, top-p
    generate(model, prompts, n, ...)    the loop, with any cache or none (recompute)

The cache protocol. `forward_cached` talks to a cache only through these members, so a
different memory layout (stage 06's paged cache, with block tables) plugs in unchanged:

    cache.n_layer, cache.batch, cache.max_len        ints
    cache.lengths                                    (batch,) int64: tokens cached per row
    cache.reserve(rows, new_lengths)                 make room for rows to hold new_lengths
                                                     tokens, or raise CacheFullError
    cache.write(layer, rows, positions, k, v)        store N tokens: rows, positions (N,)
                                                     int64; k, v (N, H, D)
    cache.view(layer, rows, length) -> (K, V)        (B, H, length, D) each; rows is a
                                                     slice (contiguous rows) or (B,) int64
    cache.attend(layer, rows, q, q_pos) -> y         OPTIONAL. A cache that has it computes
                                                     attention itself, reading its own layout
                                                     (stage 06: blocks) instead of a dense view:
                                                     q (B, H, T, D), q_pos (B, T) int64 absolute
                                                     positions (query t of row b sees keys
                                                     0..q_pos[b, t]; padding has q_pos 0) ->
                                                     y (B, H, T, D)

`forward_cached` itself advances `cache.lengths` after all layers have been written.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence

import torch
import torch.nn.functional as F

from solutions.gpt import GPT, GPTConfig, load_default, on_one_thread


class CacheFullError(ValueError):
    """A row would need more positions than the cache holds (`max_len`)."""


class CacheProtocol(Protocol):
    """What `forward_cached` needs from a cache (see the module docstring)."""

    n_layer: int
    batch: int
    max_len: int
    lengths: torch.Tensor

    def reserve(self, rows: slice | torch.Tensor, new_lengths: torch.Tensor) -> None: ...

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None: ...

    def view(self, layer: int, rows: slice | torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]: ...


# ---- the caches --------------------------------------------------------------------------

class _CacheBase:
    """What every cache shares: its dimensions, the per-row `lengths`, `reset`, `for_model`.

    Row b of the cache holds one sequence; `lengths[b]` of its positions are valid. Data
    past a row's length is stale and never attended to (it is masked), so forgetting a row
    is just `lengths[b] = 0`.
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        for name, value in (("n_layer", n_layer), ("batch", batch), ("n_head", n_head),
                            ("max_len", max_len), ("head_dim", head_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        self.n_layer, self.batch, self.n_head = n_layer, batch, n_head
        self.max_len, self.head_dim = max_len, head_dim
        self.dtype, self.device = dtype, torch.device(device)
        self.lengths = torch.zeros(batch, dtype=torch.long, device=self.device)

    @classmethod
    def for_model(cls, model: GPT, batch: int, max_len: int | None = None, **kw):
        """A cache shaped for `model` (its layers, heads, head size, dtype and device).
        `max_len` defaults to the model's context, `block_size`."""
        if not isinstance(model, GPT):
            raise TypeError(f"for_model expects a solutions.gpt.GPT, got {type(model).__name__}")
        cfg: GPTConfig = model.config
        max_len = cfg.block_size if max_len is None else max_len
        if isinstance(max_len, int) and max_len > cfg.block_size:
            raise ValueError(f"max_len {max_len} exceeds the model's context {cfg.block_size}")
        weight = model.transformer.wte.weight
        kw.setdefault("dtype", weight.dtype)
        kw.setdefault("device", weight.device)
        return cls(cfg.n_layer, batch, cfg.n_head, max_len, cfg.head_dim, **kw)

    def reset(self, rows: slice | torch.Tensor | Sequence[int] | None = None) -> None:
        """Forget rows (all rows if None): their lengths go back to 0."""
        if rows is None:
            self.lengths.zero_()
            return
        if not isinstance(rows, slice):
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


class ConcatKVCache(_CacheBase):
    """The naive cache, the baseline: per layer a (batch, H, L, D) tensor that grows by
    `torch.cat` whenever a row needs a position beyond the current length L.

    Every growth step allocates a new tensor and copies the whole cache into it, so a
    decode step costs O(L) memory traffic per layer on top of the attention itself, and the
    allocator churns. `max_len` is only the limit; nothing is allocated up front.
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        super().__init__(n_layer, batch, n_head, max_len, head_dim, dtype=dtype, device=device)
        self.reset()

    def reset(self, rows=None) -> None:
        """Forget rows; forgetting all of them also frees the storage."""
        super().reset(rows)
        if rows is None:
            empty = torch.zeros(self.batch, self.n_head, 0, self.head_dim, dtype=self.dtype, device=self.device)
            self.k = [empty] * self.n_layer
            self.v = [empty] * self.n_layer

    def reserve(self, rows, new_lengths: torch.Tensor) -> None:
        """Grow every layer's K and V with torch.cat until they hold max(new_lengths) positions."""
        # BEGIN SOLUTION 4.2
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
        self.k[layer][rows, :, positions] = k
        self.v[layer][rows, :, positions] = v
        # END SOLUTION

    def view(self, layer: int, rows, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of `rows`, positions 0..length-1: each (B, H, length, D)."""
        # BEGIN SOLUTION 4.2
        return self.k[layer][rows, :, :length], self.v[layer][rows, :, :length]
        # END SOLUTION


class KVCache(_CacheBase):
    """Preallocated K and V buffers, each (n_layer, batch, n_head, max_len, head_dim).

    Layout: layer first, so one layer's cache `k[layer]` is one contiguous
    (batch, H, max_len, D) block, and rows 0..B-1, positions 0..L-1 of it is a strided
    VIEW — attention reads it in place, no copy. Writes go to per-row positions with one
    indexed assignment (`index_put_`), never reallocating. Memory is paid up front for
    max_len positions per row, used or not: the price of never copying (stage 06 pays
    only for blocks in use).
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        super().__init__(n_layer, batch, n_head, max_len, head_dim, dtype=dtype, device=device)
        shape = (n_layer, batch, n_head, max_len, head_dim)
        # BEGIN SOLUTION 4.3
        # zeros, not empty: masked positions are multiplied by a weight of 0, and 0 * NaN
        # (uninitialised memory) would still be NaN
        self.k = torch.zeros(shape, dtype=dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=dtype, device=self.device)
        # END SOLUTION

    def reserve(self, rows, new_lengths: torch.Tensor) -> None:
        """Nothing to allocate; only refuse to run past max_len (CacheFullError)."""
        # BEGIN SOLUTION 4.3
        self._check_room(new_lengths)
        # END SOLUTION

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None:
        """Store token i's k[i], v[i] (each (H, D)) at row rows[i], position positions[i], in place."""
        # BEGIN SOLUTION 4.3
        self.k[layer][rows, :, positions] = k
        self.v[layer][rows, :, positions] = v
        # END SOLUTION

    def view(self, layer: int, rows, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of `rows`, positions 0..length-1: each (B, H, length, D). A slice of rows
        returns views of the buffers (no copy); a tensor of row ids has to gather (a copy)."""
        # BEGIN SOLUTION 4.3
        return self.k[layer][rows, :, :length], self.v[layer][rows, :, :length]
        # END SOLUTION


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric absmax INT8 over the last dim: x (..., D) -> (q (..., D) int8, scale (..., 1) float32).

    scale = max|x| / 127 per vector, q = round(x / scale) in [-127, 127], so that
    q * scale is within scale / 2 of x in every element. One scale per token per head
    keeps an outlier in one head or one token from costing the others their precision.
    """
    # BEGIN SOLUTION 4.4
    scale = x.abs().amax(dim=-1, keepdim=True).float() / 127.0
    q = torch.round(x.float() / scale.clamp_min(torch.finfo(torch.float32).tiny)).clamp_(-127, 127)
    return q.to(torch.int8), scale
    # END SOLUTION


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """q (..., D) int8 and scale (..., 1) -> q * scale as `dtype`."""
    # BEGIN SOLUTION 4.4
    return q.to(dtype) * scale.to(dtype)
    # END SOLUTION


class QuantizedKVCache(KVCache):
    """A KVCache that stores K and V as INT8 with one float32 scale per token, per head.

    One token costs 2 * n_layer * n_head * (head_dim * 1 + 4) bytes instead of
    2 * n_layer * n_head * head_dim * itemsize: about half of fp16, a quarter of fp32.
    `view` dequantises, so reading allocates a float copy of what it reads: memory is
    saved where it is stored, paid back in time at every read.
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        _CacheBase.__init__(self, n_layer, batch, n_head, max_len, head_dim, dtype=dtype, device=device)
        shape = (n_layer, batch, n_head, max_len, head_dim)
        # BEGIN SOLUTION 4.4
        self.k = torch.zeros(shape, dtype=torch.int8, device=self.device)
        self.v = torch.zeros(shape, dtype=torch.int8, device=self.device)
        self.k_scale = torch.zeros(shape[:-1] + (1,), dtype=torch.float32, device=self.device)
        self.v_scale = torch.zeros(shape[:-1] + (1,), dtype=torch.float32, device=self.device)
        # END SOLUTION

    def bytes_per_token(self) -> int:
        """K + V bytes per token, all layers: int8 values plus one float32 scale per head."""
        # BEGIN SOLUTION 4.4
        return 2 * self.n_layer * self.n_head * (self.head_dim * 1 + 4)
        # END SOLUTION

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None:
        """Quantise k, v (N, H, D) per token and head, and store values and scales in place."""
        # BEGIN SOLUTION 4.4
        for values, scales, x in ((self.k, self.k_scale, k), (self.v, self.v_scale, v)):
            q, scale = quantize_int8(x)
            values[layer][rows, :, positions] = q
            scales[layer][rows, :, positions] = scale
        # END SOLUTION

    def view(self, layer: int, rows, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantised K, V of `rows`, positions 0..length-1: each (B, H, length, D), `dtype`."""
        # BEGIN SOLUTION 4.4
        return tuple(dequantize_int8(values[layer][rows, :, :length], scales[layer][rows, :, :length], self.dtype)
                     for values, scales in ((self.k, self.k_scale), (self.v, self.v_scale)))
        # END SOLUTION


# ---- attention against a cache -----------------------------------------------------------

def _check_cached_call(model: GPT, idx: torch.Tensor, cache: CacheProtocol, rows, n_new):
    """Validate forward_cached's arguments; return (rows as a slice or (B,) tensor, n_new or None)."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a solutions.gpt.GPT, got {type(model).__name__}")
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
    if n_new is not None:
        n_new = torch.as_tensor(n_new, dtype=torch.long, device=cache.lengths.device)
        if n_new.shape != (B,):
            raise ValueError(f"n_new must have shape ({B},), got {tuple(n_new.shape)}")
        if B and (int(n_new.min()) < 0 or int(n_new.max()) > T):
            raise ValueError(f"n_new must be in 0..{T} (the width of idx), got {n_new.tolist()}")
        if bool((n_new == T).all()):
            n_new = None  # no padding: the fast path
    return rows, n_new


@torch.no_grad()
def forward_cached(model: GPT, idx: torch.Tensor, cache: CacheProtocol, *,
                   rows: slice | torch.Tensor | Sequence[int] | None = None,
                   n_new: torch.Tensor | Sequence[int] | None = None) -> torch.Tensor:
    """Run new tokens through `model` against `cache`: prefill, chunked prefill or decode.

    idx (B, T) int64, right-padded. Row b of the batch is cache row rows[b] (rows=None:
    rows 0..B-1). n_new (B,) = how many of idx[b]'s tokens are real (default: all T).
    Token t of row b sits at absolute position p = cache.lengths[row] + t: it is embedded
    with position p, its K/V are written to the cache at p, and it attends to cache
    positions 0..p of its own row (its cached prefix and the new tokens up to itself) —
    never to padding, never to another row. Then cache.lengths[row] += n_new[b].
    Returns logits (B, T, V); padded positions' logits are unspecified.

    One idea makes this work: with absolute positions, attention of the new tokens over
    [cached K/V ; new K/V] gives exactly what a full forward over the whole sequence gives
    at those positions, so prefill (T = prompt), chunked prefill (a prompt in pieces) and
    decode (T = 1) are the same call, and may be mixed in one batch.
    """
    rows, n_new = _check_cached_call(model, idx, cache, rows, n_new)
    # BEGIN SOLUTION 4.1
    B, T = idx.shape
    device = idx.device
    start = cache.lengths[rows].to(device)                  # (B,) tokens already cached
    t = torch.arange(T, device=device)
    pos = start[:, None] + t                                # (B, T) absolute positions
    real = None if n_new is None else t < n_new[:, None]    # (B, T) real tokens, None: all
    new_lengths = start + (T if n_new is None else n_new)   # (B,)
    length = int(new_lengths.max())                         # keys to read: 0..length-1
    if length > model.config.block_size:
        raise ValueError(f"a row would reach position {length - 1}, beyond the model's context "
                         f"{model.config.block_size} (cached lengths {start.tolist()}, T={T})")
    cache.reserve(rows, new_lengths)

    # The N real tokens to write: their cache row and position, and how to pick them out of
    # a (B, H, T, D) tensor as (N, H, D).
    row_ids = torch.arange(cache.batch, device=device)[rows]  # (B,) cache row of each sequence
    if real is None and T == 1:  # decode: one token per row, at the row's length
        tok_rows, tok_pos = row_ids, start
        tokens_of = lambda x: x[:, :, 0]  # noqa: E731
    elif real is None:
        tok_rows, tok_pos = row_ids.repeat_interleave(T), pos.reshape(-1)
        tokens_of = lambda x: x.transpose(1, 2).flatten(0, 1)  # noqa: E731
    else:
        b_idx, t_idx = real.nonzero(as_tuple=True)
        tok_rows, tok_pos = row_ids[b_idx], pos[b_idx, t_idx]
        tokens_of = lambda x: x[b_idx, :, t_idx]  # noqa: E731
        pos = torch.where(real, pos, 0)  # padding gets a harmless position for the embedding

    # The attention mask (B, 1, T, length): key j is visible to new token t iff j <= pos[b, t].
    # Two common cases need none: decode of equal-length rows (every cached key is visible),
    # and a fresh unpadded prefill (plain causal attention).
    is_causal, mask = False, None
    if T == 1 and real is None and int(new_lengths.min()) == length:
        pass
    elif real is None and length == T:  # every row starts empty and fills all T positions
        is_causal = True
    else:
        mask = (torch.arange(length, device=device) <= (start[:, None] + t)[:, :, None])[:, None]

    attend = getattr(cache, "attend", None)  # optional: a cache that attends in place (stage 06)
    x = model.embed(idx, pos)                               # (B, T, C)
    for layer, block in enumerate(model.blocks):
        q, k, v = block.attn.qkv(block.ln_1(x))             # each (B, H, T, D)
        cache.write(layer, tok_rows, tok_pos, tokens_of(k), tokens_of(v))
        if attend is not None:
            y = attend(layer, rows, q, pos)                 # reads its own memory layout
        else:
            K, V = cache.view(layer, rows, length)          # (B, H, length, D)
            y = F.scaled_dot_product_attention(q, K, V, attn_mask=mask, is_causal=is_causal)
        x = x + block.attn.out(y)
        x = x + block.mlp(block.ln_2(x))
    cache.lengths[rows] = new_lengths.to(cache.lengths.device)
    return model.head(x)
    # END SOLUTION


# ---- sampling ----------------------------------------------------------------------------

def _is_int(value) -> bool:
    """A Python or NumPy integer (np.int64 ids are as good as ints), never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def check_sampling(temperature, top_k, top_p) -> None:
    if (isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0
            or not math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float))
                              or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be None or in (0, 1], got {top_p!r}")


def sample(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None,
           top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Pick one token per row: logits (B, V) -> ids (B,) int64.

    temperature == 0: greedy (argmax). Otherwise divide the logits by temperature (< 1
    sharpens, > 1 flattens), keep only the top_k largest (if given), then only the
    nucleus: the smallest set of most likely tokens whose probability reaches top_p (if
    given; the most likely token is always kept), renormalise and draw with `generator`
    (the same seed gives the same draws).

    The order matters: temperature first, so the nucleus is measured on the tempered
    probabilities (a flatter distribution needs more tokens to reach top_p). And top_k
    keeps exactly k tokens per row, even when several logits tie with the k-th largest
    (which of the tied ones stay is `torch.topk`'s choice): masking `logits < kth_value`
    keeps every tie, so a row of equal logits would keep them all; the tests require k.
    """
    check_sampling(temperature, top_k, top_p)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        raise ValueError(f"logits must be a floating (batch, vocab) tensor, got "
                         f"{getattr(logits, 'shape', type(logits).__name__)} {getattr(logits, 'dtype', '')}")
    bad = logits.isnan() | (logits == float("inf"))  # -inf is fine: a masked token
    if bad.any() or (logits == float("-inf")).all(dim=-1).any():
        rows = sorted(set(bad.any(dim=-1).nonzero().flatten().tolist())
                      | set((logits == float("-inf")).all(dim=-1).nonzero().flatten().tolist()))
        raise ValueError(f"logits must be finite (or -inf for a masked token, with one finite per row); "
                         f"rows {rows[:8]} hold NaN, +inf or only -inf")
    # BEGIN SOLUTION 4.5
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        top = logits.topk(top_k, dim=-1)
        logits = torch.full_like(logits, float("-inf")).scatter_(-1, top.indices, top.values)
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs          # probability of the more likely tokens
        drop_sorted = mass_before >= top_p                  # the nucleus already reached top_p
        drop = torch.empty_like(drop_sorted).scatter_(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    # END SOLUTION


# ---- generation --------------------------------------------------------------------------

CACHES = {"prealloc": KVCache, "concat": ConcatKVCache, "int8": QuantizedKVCache}


@dataclass
class GenerationResult:
    """tokens[i]: the new tokens of prompt i (the stop token, if one ended it, not included);
    finish_reasons[i]: "stop" (a stop token came) or "length" (max_new_tokens reached)."""

    tokens: list[list[int]]
    finish_reasons: list[str]
    seconds: float = field(default=0.0, compare=False)  # wall time of the whole call


def _check_generate(model, prompts, max_new_tokens, stop, cache) -> list[int]:
    """Validate generate's arguments; return the stop ids as a list."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a solutions.gpt.GPT, got {type(model).__name__}")
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError(f"prompts must be a non-empty list of token-id lists, got {prompts!r:.80}")
    vocab, context = model.config.vocab_size, model.config.block_size
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    for i, p in enumerate(prompts):
        if not isinstance(p, (list, tuple)) or not p:
            raise ValueError(f"prompt {i} must be a non-empty list of token ids, got {p!r:.80}")
        if not all(_is_int(t) and 0 <= t < vocab for t in p):
            raise ValueError(f"prompt {i} holds ids outside 0..{vocab - 1} or non-ints: {list(p)!r:.80}")
        if len(p) + max_new_tokens > context:
            raise ValueError(f"prompt {i} has {len(p)} tokens; with max_new_tokens={max_new_tokens} it "
                             f"would exceed the model's context of {context}")
    if cache is not None and cache not in CACHES:
        raise ValueError(f"cache must be one of {sorted(CACHES)} or None (recompute), got {cache!r}")
    if stop is not None and not _is_int(stop) and not isinstance(stop, Iterable):
        raise ValueError(f"stop must be None, a token id or a list of token ids in 0..{vocab - 1}, got {stop!r}")
    stop_ids = [] if stop is None else [stop] if _is_int(stop) else list(stop)
    if not all(_is_int(s) and 0 <= s < vocab for s in stop_ids):
        raise ValueError(f"stop must be None, a token id or a list of token ids in 0..{vocab - 1}, got {stop!r}")
    return [int(s) for s in stop_ids]


@torch.no_grad()
def generate(model: GPT, prompts: list[list[int]], max_new_tokens: int, *, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None, stop: int | Iterable[int] | None = None,
             cache: str | None = "prealloc", generator: torch.Generator | None = None) -> GenerationResult:
    """Continue each prompt by up to max_new_tokens tokens (a static batch, ragged prompts).

    cache: "prealloc" (KVCache), "concat" (ConcatKVCache), "int8" (QuantizedKVCache), or
    None: the recompute baseline, a full forward over every sequence at every step.
    With a cache: one prefill of the right-padded prompts (n_new = prompt lengths), then
    one decode step per token. A sequence ends at a stop token ("stop") or after
    max_new_tokens ("length"); the batch runs until every sequence has ended.
    """
    stop_ids = _check_generate(model, prompts, max_new_tokens, stop, cache)
    check_sampling(temperature, top_k, top_p)
    t0 = time.perf_counter()
    B = len(prompts)
    if max_new_tokens == 0:
        return GenerationResult([[] for _ in prompts], ["length"] * B, time.perf_counter() - t0)
    # BEGIN SOLUTION 4.6
    device = model.transformer.wte.weight.device
    lengths = torch.tensor([len(p) for p in prompts], device=device)  # (B,) tokens so far
    width = int(lengths.max())
    seqs = torch.zeros(B, width + max_new_tokens, dtype=torch.long, device=device)  # right-padded
    for i, p in enumerate(prompts):
        seqs[i, : len(p)] = torch.tensor(p, device=device)
    rows = torch.arange(B, device=device)

    if cache is None:
        def logits_after(token: torch.Tensor | None) -> torch.Tensor:
            """Recompute: append the token, run the model over every whole sequence again."""
            if token is not None:
                seqs[rows, lengths] = token
                lengths.add_(1)
            return model(seqs[:, : int(lengths.max())])[rows, lengths - 1]
    else:
        kv = CACHES[cache].for_model(model, B, max_len=width + max_new_tokens)

        def logits_after(token: torch.Tensor | None) -> torch.Tensor:
            """Prefill the prompts once; then decode: only the newest token of each sequence."""
            if token is None:
                return forward_cached(model, seqs[:, :width], kv, n_new=lengths)[rows, lengths - 1]
            return forward_cached(model, token[:, None], kv)[:, 0]

    out = torch.zeros(B, max_new_tokens, dtype=torch.long, device=device)
    n_out = torch.full((B,), max_new_tokens, device=device)  # tokens each sequence keeps
    stopped = torch.zeros(B, dtype=torch.bool, device=device)
    stop_t = torch.tensor(stop_ids, dtype=torch.long, device=device)
    token = None
    for step in range(max_new_tokens):
        token = sample(logits_after(token), temperature=temperature, top_k=top_k, top_p=top_p,
                       generator=generator)
        out[:, step] = token
        if stop_ids:  # a sequence that stops keeps running with the batch; its tail is dropped
            hit = torch.isin(token, stop_t) & ~stopped
            n_out = torch.where(hit, step, n_out)
            stopped |= hit
            if bool(stopped.all()):
                break
    tokens = [row[:n] for row, n in zip(out.tolist(), n_out.tolist())]
    reasons = ["stop" if s else "length" for s in stopped.tolist()]
    # END SOLUTION
    return GenerationResult(tokens, reasons, time.perf_counter() - t0)


def generate_alone(model: GPT, prompt: Sequence[int], max_new_tokens: int, sampling=None,
                   stop: Iterable[int] = ()) -> tuple[list[int], str]:
    """(tokens, finish reason) of one request generated by itself with `generate`: the oracle
    that the batched engines of stages 05–07 must match token for token.

    `sampling`: None or greedy, or any object with `temperature`, `top_k`, `top_p` and `seed`
    (stage 05's `SamplingParams`); a sampled request draws from a generator seeded with its
    `seed`, as those engines seed each request's own generator.
    """
    kw = {}
    if sampling is not None and sampling.temperature > 0:
        kw = dict(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                  generator=torch.Generator().manual_seed(sampling.seed))
    res = generate(model, [list(prompt)], max_new_tokens, stop=list(stop) or None, **kw)
    return res.tokens[0], res.finish_reasons[0]


# ---- demo --------------------------------------------------------------------------------

@on_one_thread
def demo() -> None:
    """Generate from the course's default model with the cache, next to the recompute baseline."""
    model, tok = load_default()
    prompts = ["def fibonacci(n):\n", "import os\n", "class Stack:\n    def push(self"]
    ids = [tok.encode(p) for p in prompts]
    n_new = 256 - max(map(len, ids))
    for cache in ("prealloc", None):
        generate(model, ids, 8, cache=cache)  # warm-up
    results = {cache: generate(model, ids, n_new, cache=cache) for cache in ("prealloc", "int8", None)}
    sampled = generate(model, ids, 120, temperature=0.8, top_p=0.95, generator=torch.Generator().manual_seed(0))
    for p, out in zip(prompts, sampled.tokens):
        print(f"{p + tok.decode(out)!r}")
    print(f"\n(sampled: temperature 0.8, top-p 0.95; below: greedy, {n_new} new tokens per prompt)\n")
    for cache, res in results.items():
        n = sum(map(len, res.tokens))
        same = res.tokens == results[None].tokens
        print(f"{str(cache or 'recompute'):>9}: {n} tokens in {res.seconds:.2f} s = {n / res.seconds:5.0f} tokens/s"
              f"{'  (same tokens as recompute)' if same else ''}")
    print(f"speed-up of the preallocated cache over recompute: {results[None].seconds / results['prealloc'].seconds:.1f}x")
