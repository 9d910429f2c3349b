# GENERATED from solutions/kv_cache/gguf_quants.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 04_kv_cache/04_kv_cache.ipynb. Exercises in this file (line of each hole, then the commands):
#   4.12 GGUF's Q8_0 and Q4_1 blocks back to float32: lines 24, 36; `course check 4.12`, `course hint 4.12`
"""Exercise 4.12: GGUF's Q8_0 and Q4_1 blocks back to float32 (llama.cpp's ggml-quants.c)."""

from __future__ import annotations

import numpy as np

from .gguf_reader import F16, F32, GGML_TYPES, Q4_1, Q8_0, GGUFTensor

BLOCK = 32  # weights a block, both types


def dequantize_q8_0(raw: np.ndarray) -> np.ndarray:
    """Q8_0 blocks -> float32 weights: `raw` uint8 of n * 34 bytes (any shape, read as 1-D)
    -> float32 of n * 32 values, 1-D, in block order.

    A block is 34 bytes: d, a float16 scale (2 bytes, little-endian), then 32 int8 values
    q[0..31]; weight i of the block is float32(d) * float32(q[i]) (float32 arithmetic, so
    the result is bit-exact with `gguf.quants.dequantize`). ValueError naming `raw` unless
    it is uint8 and a whole number of blocks."""
    blocks = _blocks(raw, GGML_TYPES[Q8_0][2], "Q8_0")
    raise NotImplementedError("Exercise 4.12: GGUF's Q8_0 and Q4_1 blocks back to float32 — see 04_kv_cache.ipynb")


def dequantize_q4_1(raw: np.ndarray) -> np.ndarray:
    """Q4_1 blocks -> float32 weights: `raw` uint8 of n * 20 bytes -> float32 of n * 32, 1-D.

    A block is 20 bytes: d (float16 scale), m (float16 MINIMUM), then 16 bytes of 4-bit
    values: byte j holds q[j] in its LOW nibble and q[j + 16] in its HIGH nibble (not the
    even/odd interleave of 4.8's `pack_int4`). Weight i is float32(d) * q[i] + float32(m),
    in float32 (bit-exact with `gguf.quants.dequantize`). ValueError naming `raw` unless it
    is uint8 and a whole number of blocks."""
    blocks = _blocks(raw, GGML_TYPES[Q4_1][2], "Q4_1")
    raise NotImplementedError("Exercise 4.12: GGUF's Q8_0 and Q4_1 blocks back to float32 — see 04_kv_cache.ipynb")


def dequantize_tensor(tensor: GGUFTensor) -> np.ndarray:
    """A GGUF tensor's weights as float32 of `tensor.shape` (given): F32 as stored (a view of
    the file, read-only), F16 widened, Q8_0 and Q4_1 by the functions above. ValueError
    naming the type for any other."""
    if tensor.ggml_type == F32:
        flat = tensor.data.view(np.float32)
    elif tensor.ggml_type == F16:
        flat = tensor.data.view(np.float16).astype(np.float32)
    elif tensor.ggml_type == Q8_0:
        flat = dequantize_q8_0(tensor.data)
    elif tensor.ggml_type == Q4_1:
        flat = dequantize_q4_1(tensor.data)
    else:
        name = GGML_TYPES.get(tensor.ggml_type, (str(tensor.ggml_type),))[0]
        raise ValueError(f"tensor {tensor.name}: ggml type {name} is not one this course dequantises "
                         "(F32, F16, Q8_0, Q4_1)")
    return np.asarray(flat).reshape(tensor.shape)


def _blocks(raw: np.ndarray, size: int, name: str) -> np.ndarray:
    """`raw` as (n_blocks, size) uint8 (given: the argument check)."""
    if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8:
        shown = raw.dtype if isinstance(raw, np.ndarray) else type(raw).__name__
        raise ValueError(f"raw must be a uint8 array of {name} blocks, got {shown}")
    if raw.size % size:
        raise ValueError(f"raw must be whole {name} blocks of {size} bytes, got {raw.size} bytes")
    return np.asarray(raw).reshape(-1, size)
