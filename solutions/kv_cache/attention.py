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
    # BEGIN SOLUTION 4.1
    # DECISION: the positions and the mask of a ragged batch: each real token's absolute position
    #   from its row's cached length, which keys it may see (its own row, up to itself), where
    #   padding goes (embedded at 0, never written), and when the lengths advance (after the last
    #   layer, after every check).
    # HINT: Positions first: token t of row b sits at start[b] + t, where start is the rows'
    #   cached lengths. From them follow the new lengths, how many keys to read (the longest
    #   new length), and the (row, position) each real token is written to.
    # HINT: Check the context and `cache.reserve` before anything is written. Then run the
    #   blocks as `GPT.forward` does, except that each layer writes the real tokens' k, v to
    #   the cache as (N, H_kv, D) and attends over what the cache returns (`attend`, or `view`).
    #   The pieces (kv_cache/decoder.py): x = model.embed(idx, pos); per block, q, k, v =
    #   attn.qkv(ln_1(x), pos) (q (B, H, T, D), k and v (B, H_kv, T, D): H_kv < H on a Llama,
    #   whose query heads share K/V heads: scaled_dot_product_attention's `enable_gqa`),
    #   x + attn.out(y), then x + mlp(ln_2(x)); model.head(x) the logits.
    # HINT: The mask is (B, 1, T, length) booleans: key j is visible to token t of row b iff
    #   j <= start[b] + t. Padding is embedded at position 0; advance cache.lengths last.
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
    # a (B, H, T, D) tensor as (N, H, D) (`tokens_of`: a one-line selector per case, hence the
    # lambdas, noqa E731).
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
        q, k, v = block.attn.qkv(block.ln_1(x), pos)        # q (B, H, T, D), k, v (B, H_kv, T, D)
        cache.write(layer, tok_rows, tok_pos, tokens_of(k), tokens_of(v))
        if attend is not None:
            y = attend(layer, rows, q, pos)                 # reads its own memory layout
        else:
            K, V = cache.view(layer, rows, length)          # (B, H, length, D)
            y = F.scaled_dot_product_attention(q, K, V, attn_mask=mask, is_causal=is_causal,
                                               enable_gqa=K.shape[1] != q.shape[1])
        x = x + block.attn.out(y)
        x = x + block.mlp(block.ln_2(x))
    cache.lengths[rows] = new_lengths.to(cache.lengths.device)
    return model.head(x)
    # END SOLUTION


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
