# GENERATED from solutions/train/rope.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.16 Rotary position embeddings, positions per row: line 31; `course check 3.16`, `course hint 3.16`
"""Exercise 3.16: rotary position embeddings (RoPE; Su et al., 2021), positions per row."""

from __future__ import annotations

import torch

from .arguments import check_positive


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Rotate queries or keys by their positions: x (B, H, T, D) -> a new tensor, same shape and dtype.

    positions (B, T), integer: token t of batch row b sits at positions[b, t]; rows are
    independent (a batched or paged engine gives each row its own positions, and left-padded
    rows start later). Hugging Face Llama's "rotate half" layout: with half = D // 2, for each
    i in 0..half-1 the pair (x[..., i], x[..., i + half]) — NOT (x[..., 2i], x[..., 2i + 1]) —
    read as a vector in the plane (first coordinate x[..., i]), is rotated counter-clockwise by
    the angle a = positions[b, t] * inv_freq[i], inv_freq[i] = theta ** (-2i / D), the same for
    every head h: a unit vector on coordinate i turns towards coordinate i + half.
    Precision, as `LlamaRotaryEmbedding`: inv_freq is 1 / theta ** (arange(0, D, 2) / D) in
    float32, the angles positions.float() * inv_freq in float32, and cos and sin are rounded
    to x's dtype before they meet x (float32 results then equal Hugging Face's
    `apply_rotary_pos_emb` to rounding). x is not modified.
    ValueError: x not 4-D, D odd, positions not (B, T) of x; TypeError: positions not integer;
    ValueError: theta not a positive number.
    """
    _check(x, positions, theta)
    raise NotImplementedError('Exercise 3.16: Rotary position embeddings, positions per row — see 03_training_loop.ipynb')


def _check(x: torch.Tensor, positions: torch.Tensor, theta: float) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        got = getattr(x, "shape", type(x).__name__)
        raise ValueError(f"x must be a (batch, heads, time, head_dim) tensor, got {got}")
    if x.shape[-1] % 2:
        raise ValueError(f"head_dim must be even (RoPE rotates pairs), got {x.shape[-1]}")
    if not isinstance(positions, torch.Tensor) or positions.dtype.is_floating_point or positions.dtype == torch.bool:
        got = getattr(positions, "dtype", type(positions).__name__)
        raise TypeError(f"positions must be an integer tensor, got {got}")
    B, _, T, _ = x.shape
    if tuple(positions.shape) != (B, T):
        raise ValueError(f"positions must have shape (batch, time) = ({B}, {T}), one position per token "
                         f"of each row, got {tuple(positions.shape)}")
    check_positive(theta=theta)
