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
    # BEGIN SOLUTION 4.12
    # DECISION: which bytes are what: split each block and reinterpret (view) the pieces, never
    #   cast them (Q8_0: a float16 then 32 signed int8; Q4_1: two float16, d then the minimum m,
    #   then 16 bytes whose LOW nibbles are elements 0..15 and HIGH nibbles 16..31, the halves
    #   concatenated, not interleaved).
    # HINT: `blocks` is (n, 34) uint8. blocks[:, :2] viewed as np.float16 is (n, 1): d.
    # HINT: blocks[:, 2:] viewed as np.int8 is q; widen both to float32 before multiplying
    #   and flatten (n, 32) to 1-D.
    d = blocks[:, :2].view(np.float16).astype(np.float32)
    q = blocks[:, 2:].view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)
    # END SOLUTION


def dequantize_q4_1(raw: np.ndarray) -> np.ndarray:
    """Q4_1 blocks -> float32 weights: `raw` uint8 of n * 20 bytes -> float32 of n * 32, 1-D.

    A block is 20 bytes: d (float16 scale), m (float16 MINIMUM), then 16 bytes of 4-bit
    values: byte j holds q[j] in its LOW nibble and q[j + 16] in its HIGH nibble (not the
    even/odd interleave of 4.8's `pack_int4`). Weight i is float32(d) * q[i] + float32(m),
    in float32 (bit-exact with `gguf.quants.dequantize`). ValueError naming `raw` unless it
    is uint8 and a whole number of blocks."""
    blocks = _blocks(raw, GGML_TYPES[Q4_1][2], "Q4_1")
    # BEGIN SOLUTION 4.12
    # HINT: The nibble order: the low nibbles of the 16 bytes are elements 0..15 and the high
    #   nibbles 16..31, so the two halves are concatenated, not interleaved.
    # HINT: Bytes 0:2 are d, 2:4 are m (view each pair as np.float16, then float32), 4:20
    #   the 16 packed bytes.
    # HINT: `qs & 0x0F` and `qs >> 4` are the two halves; np.concatenate them along the last
    #   axis (low first), widen to float32, then d * q + m. Q4_1's m is a float minimum, not
    #   an integer zero point: it is added, after the scale.
    d = blocks[:, 0:2].view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].view(np.float16).astype(np.float32)
    qs = blocks[:, 4:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
    return (d * q + m).reshape(-1)
    # END SOLUTION


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
