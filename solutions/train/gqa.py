"""Exercise 3.18: grouped-query attention (GQA; Ainslie et al., 2023): few KV heads, many query heads."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def grouped_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                            mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
    """Scaled dot-product attention where groups of query heads share one key/value head.

    q (B, H, T, D); k, v (B, H_kv, S, D) with H_kv dividing H; returns (B, H, T, D) in q's dtype.
    With group = H // H_kv, query head h attends with KV head h // group: heads
    0..group-1 share KV head 0, the next `group` share KV head 1, and so on (Hugging Face's
    `repeat_kv` order; H_kv == H is ordinary multi-head attention, H_kv == 1 multi-query).
    For each (b, h): softmax(q k^T / sqrt(D) over the visible keys) v, where key s is visible
    to query t iff mask[b, h, t, s] is True (mask: bool, broadcastable to (B, H, T, S); None:
    all), or, with is_causal instead of a mask, iff s <= t (is_causal needs S == T). A query
    with no visible key gets zeros (`F.scaled_dot_product_attention`'s rule). q, k, v are not
    modified.
    ValueError: shapes that do not fit these rules, H not a multiple of H_kv; TypeError: a
    mask that is not bool; ValueError: both a mask and is_causal.
    """
    _check(q, k, v, mask, is_causal)
    # BEGIN SOLUTION 3.18
    # DECISION: which KV head serves query head h: h // group (contiguous groups), not
    #   h % H_kv (heads dealt round-robin), and how to make K and V line up with the H
    #   query heads without copying more than needed.
    # HINT: Query heads come in H_kv consecutive groups of group = H // H_kv heads; all heads
    #   of a group read the same K and V.
    # HINT: Expanding K and V to H heads, each KV head repeated group times IN PLACE
    #   (0,0,1,1 for H=4, H_kv=2), is torch.repeat_interleave(k, group, dim=1). k.repeat(1,
    #   group, 1, 1) gives 0,1,0,1: the wrong heads.
    # HINT: Then it is ordinary attention: F.scaled_dot_product_attention(q, k, v,
    #   attn_mask=mask, is_causal=is_causal) (or softmax(q k^T / sqrt(D)) v written out).
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
    # END SOLUTION


def _check(q, k, v, mask, is_causal) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a (batch, heads, time, head_dim) tensor, "
                             f"got {getattr(t, 'shape', type(t).__name__)}")
    B, H, T, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"k and v must be (batch={B}, kv_heads, keys, head_dim={D}), got k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    if k.shape[1] < 1 or H % k.shape[1]:
        raise ValueError(f"the {k.shape[1]} KV heads must divide the {H} query heads")
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True: may attend), got {getattr(mask, 'dtype', mask)!r}")
        want = (B, H, T, k.shape[2])
        try:
            fits = tuple(torch.broadcast_shapes(mask.shape, want)) == want
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to (B, H, T, S) = {want}")
        if is_causal:
            raise ValueError("give a mask or is_causal=True, not both")
    if is_causal and k.shape[2] != T:
        raise ValueError(f"is_causal needs as many keys as queries, got {k.shape[2]} keys for {T} queries")
