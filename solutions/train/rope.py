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
    # BEGIN SOLUTION 3.16
    # DECISION: which coordinates form a rotating pair (the two halves of the head, i and
    #   i + D/2), and which axes the angles broadcast over (one angle per row b, token t and
    #   pair i; the same for every head).
    # HINT: Rotating the plane vector (u, w) counter-clockwise by a gives (u cos a - w sin a,
    #   u sin a + w cos a); here u = x[..., i] and w = x[..., i + half], for every i at once.
    # HINT: The frequencies: inv_freq = 1 / theta ** (torch.arange(0, D, 2) / D), D/2 of
    #   them in float32, fast for the first pairs and slow for the last.
    # HINT: The angles are positions (B, T) times inv_freq (D/2,): (B, T, D/2). Insert the
    #   head axis so they broadcast against x (B, H, T, D/2): angles[:, None]. Keep the row
    #   axis: every row has its own positions.
    # HINT: Split x into x1 = x[..., :D/2] and x2 = x[..., D/2:], take cos and sin of the
    #   angles in x's dtype, and concatenate (x1 cos - x2 sin, x1 sin + x2 cos) on the last axis.
    half = x.shape[-1] // 2
    inv_freq = 1.0 / theta ** (torch.arange(0, 2 * half, 2, dtype=torch.float32, device=x.device) / (2 * half))
    angles = positions[:, None, :, None].float() * inv_freq  # (B, 1, T, D/2): one angle per row
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    # END SOLUTION


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
