# GENERATED from solutions/kv_cache/int8_cache.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 04_kv_cache/04_kv_cache.ipynb. Exercises in this file (line of each hole, then the commands):
#   4.4 QuantizedKVCache: INT8 K/V: lines 26, 31, 50, 55, 61, 65; `course check 4.4`, `course hint 4.4`
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
    raise NotImplementedError('Exercise 4.4: QuantizedKVCache: INT8 K/V — see 04_kv_cache.ipynb')


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """q (..., D) int8 and scale (..., 1) -> q * scale as `dtype` (..., D)."""
    raise NotImplementedError('Exercise 4.4: QuantizedKVCache: INT8 K/V — see 04_kv_cache.ipynb')


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
        raise NotImplementedError('Exercise 4.4: QuantizedKVCache: INT8 K/V — see 04_kv_cache.ipynb')

    def bytes_per_token(self) -> int:
        """K + V bytes per token, all layers: int8 values plus one float32 scale per head —
        exactly what one position of the four buffers takes."""
        raise NotImplementedError('Exercise 4.4: QuantizedKVCache: INT8 K/V — see 04_kv_cache.ipynb')

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None:
        """Store token i's k[i], v[i] (each (H, D)), quantised per head (values and scales),
        at row rows[i], position positions[i], in place."""
        raise NotImplementedError('Exercise 4.4: QuantizedKVCache: INT8 K/V — see 04_kv_cache.ipynb')

    def view(self, layer: int, rows, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantised K, V of `rows`, positions 0..length-1: each (B, H, length, D), `dtype`."""
        raise NotImplementedError('Exercise 4.4: QuantizedKVCache: INT8 K/V — see 04_kv_cache.ipynb')
