"""Exercise 4.4: INT8 keys and values — absmax quantisation and `QuantizedKVCache`."""

from __future__ import annotations

import torch

from .base import _CacheBase
from .prealloc_cache import KVCache


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric absmax INT8 over the last dim: x (..., D) floating -> (q (..., D) int8,
    scale (..., 1) float32).

    One scale per vector, computed in float32, chosen so that the vector's largest
    magnitude maps to exactly 127 (its largest element to q = +-127); every q * scale is the
    multiple of the scale nearest x (a tie goes to the even multiple, as torch.round breaks
    ties), q in [-127, 127], so within scale / 2 of x in every element. An all-zero vector
    gives scale 0 and q 0, with no NaN or inf on the way (0 / 0 is NaN, and what a NaN
    becomes as int8 depends on the CPU). One scale per token per head keeps an outlier in
    one head or one token from costing the others their precision.
    """
    # BEGIN SOLUTION 4.4
    # DECISION: the quantisation's axis and grain: one scale per token and head vector (its largest
    #   magnitude maps to 127), symmetric, an all-zero vector guarded; where the scales live beside
    #   the int8 values.
    # HINT: One scale per vector, so that its largest magnitude becomes 127: divide, round,
    #   clamp, and keep an all-zero vector from dividing by zero (clamp the divisor).
    scale = x.abs().amax(dim=-1, keepdim=True).float() / 127.0
    q = torch.round(x.float() / scale.clamp_min(torch.finfo(torch.float32).tiny)).clamp_(-127, 127)
    return q.to(torch.int8), scale
    # END SOLUTION


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """q (..., D) int8 and scale (..., 1) -> q * scale as `dtype` (..., D)."""
    # BEGIN SOLUTION 4.4
    # HINT: One multiplication, both operands in the requested dtype.
    return q.to(dtype) * scale.to(dtype)
    # END SOLUTION


class QuantizedKVCache(KVCache):
    """A KVCache that stores K and V as INT8 with one float32 scale per token, per head.

    Buffers, all ZEROS when fresh: `k`, `v` int8 (n_layer, batch, n_head, max_len, head_dim);
    `k_scale`, `v_scale` float32 (n_layer, batch, n_head, max_len, 1). A written token's
    values and scales are `quantize_int8` of its k and v, per head over D, stored in place;
    `view` returns their `dequantize_int8` in the cache's `dtype` (a float copy: memory
    saved where it is stored is paid back in time at every read). `reserve` is
    KVCache's. One token costs what one position of the four buffers takes: about half of
    an fp16 cache, a quarter of fp32 (a little more: the scales).
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        _CacheBase.__init__(self, n_layer, batch, n_head, max_len, head_dim, dtype=dtype, device=device)
        shape = (n_layer, batch, n_head, max_len, head_dim)
        # BEGIN SOLUTION 4.4
        # HINT: Four buffers, named as in the class docstring: int8 values, and float32
        #   scales with a last dimension of 1 (one per token and head).
        self.k = torch.zeros(shape, dtype=torch.int8, device=self.device)
        self.v = torch.zeros(shape, dtype=torch.int8, device=self.device)
        self.k_scale = torch.zeros(shape[:-1] + (1,), dtype=torch.float32, device=self.device)
        self.v_scale = torch.zeros(shape[:-1] + (1,), dtype=torch.float32, device=self.device)
        # END SOLUTION

    def bytes_per_token(self) -> int:
        """K + V bytes per token, all layers: int8 values plus one float32 scale per head —
        exactly what one position of the four buffers takes."""
        # BEGIN SOLUTION 4.4
        # HINT: Per layer, K and V each store head_dim one-byte values and one 4-byte scale
        #   for each head.
        return 2 * self.n_layer * self.n_head * (self.head_dim * 1 + 4)
        # END SOLUTION

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None:
        """Store token i's k[i], v[i] (each (H, D)), quantised per head (values and scales),
        at row rows[i], position positions[i], in place."""
        # BEGIN SOLUTION 4.4
        # HINT: write stores q and scale of each of k, v at the same [rows, :, positions] of
        #   their buffers; view slices values and scales as KVCache does and dequantises them.
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
