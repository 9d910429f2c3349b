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
    # BEGIN SOLUTION 6.4
    # DECISION: what to gather (whole blocks, only as many as the longest row needs) and how to keep
    #   stale slots out (zero them, since masking the scores alone lets 0 x NaN through); the causal
    #   mask from each query's absolute position.
    # HINT: Gather whole blocks, not tokens: only as many as the longest row needs
    #   (L = its last query's position + 1), with one `index_select` per pool, then view
    #   them as (B, nb * block_size, H, D) and cut to L.
    # HINT: Zero the gathered keys and values past each row's last query: masking the
    #   scores is not enough, because 0 x NaN is still NaN.
    # HINT: One `F.scaled_dot_product_attention` with the mask `keys <= q_pos` (B, 1, T, L);
    #   pass `scale` through.
    B, H, T, D = q.shape
    bs, Hk = k_pool.shape[1], k_pool.shape[2]
    last = q_pos.max(dim=1).values                            # (B,) last key each row needs
    L = int(last.max()) + 1
    nb = blocks_needed(L, bs)
    bt = block_tables[:, :nb].clamp_min(0).reshape(-1)        # (B * nb,) physical block ids
    K = k_pool.index_select(0, bt).view(B, nb * bs, Hk, D)[:, :L]  # (B, L, H_kv, D), one copy
    V = v_pool.index_select(0, bt).view(B, nb * bs, Hk, D)[:, :L]
    keys = torch.arange(L, device=q.device)
    stale = (keys > last[:, None]).nonzero(as_tuple=True)     # (row, key) past the row's length
    any_stale = len(stale[0]) > 0
    if any_stale:                                              # zero just those, in place (K, V are copies)
        K[stale] = 0
        V[stale] = 0
    mask, causal = None, False
    if T == 1 and not any_stale:
        pass                                                   # decode, equal lengths: all visible
    elif L == T and bool((q_pos == keys).all()):
        causal = True                                          # fresh prefill of full rows: plain causal
    else:
        mask = (keys <= q_pos[:, :, None])[:, None]            # (B, 1, T, L)
    return F.scaled_dot_product_attention(q, K.transpose(1, 2), V.transpose(1, 2), attn_mask=mask,
                                          is_causal=causal, scale=scale, enable_gqa=Hk != H)
    # END SOLUTION


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
