"""Exercise 4.8: INT4 weights — group-wise asymmetric quantisation, zero points, two per byte."""

from __future__ import annotations

import torch

from solutions.checks import check_int

INT4_MAX = 15  # 4 bits hold 0..15


def quantize_int4(w: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric INT4 over groups of `group_size` columns: w (out, in) floating ->
    (packed uint8 (out, in // 2), scale float32 (out, in // group_size), zero uint8 (same)).

    Group g of row o is w[o, g*group_size : (g+1)*group_size] (along the input dim). Per
    group, in float32: the 16 levels 0..15 span, in equal steps of `scale`, the group's
    range widened to include 0 (lo = min(min w, 0), hi = max(max w, 0): 0 always
    representable, as GPTQ's quantiser does it); `zero` is the level 0.0 falls on, rounded
    as torch.round rounds (a tie to even), in 0..15; an element's level q is zero plus its
    value's nearest whole number of scales (a tie to the even number, too), kept in 0..15;
    `packed` holds the levels as `pack_int4` packs them. Afterwards `dequantize_int4` is
    within scale / 2 of w in every element of the group. An all-zero group gives scale 0,
    zero 0, q 0, with no NaN on the way. Bad input: w not a 2-D floating tensor (TypeError),
    an odd width, or a group_size that is not an int >= 1 dividing the width (ValueError
    naming group_size).
    """
    _check_groups(w, group_size)
    # BEGIN SOLUTION 4.8
    # DECISION: the grouping axis (groups along each output row's inputs), the asymmetric range
    #   widened to include 0, the zero point's rounding, and the nibble order of the packing (even
    #   position low, odd high).
    # HINT: View w as (out, n_groups, group_size): every statistic is then a reduction over the last
    #   dim, kept with keepdim=True so that it broadcasts back over its group.
    # HINT: Widen the range to include 0 before taking the scale: 16 levels make 15 steps, scale =
    #   (hi - lo) / 15; guard the division for an all-zero group (scale 0) as quantize_int8 does.
    # HINT: The zero point is the integer that 0.0 maps to, round(-lo / scale); q = clamp(round(w /
    #   scale) + zero, 0, 15); pack q with pack_int4 after viewing it back as (out, in).
    out, width = w.shape
    groups = w.float().reshape(out, width // group_size, group_size)
    lo = groups.amin(dim=-1, keepdim=True).clamp(max=0.0)
    hi = groups.amax(dim=-1, keepdim=True).clamp(min=0.0)
    scale = (hi - lo) / INT4_MAX
    safe = scale.clamp_min(torch.finfo(torch.float32).tiny)
    zero = torch.round(-lo / safe).clamp(0, INT4_MAX)
    q = (torch.round(groups / safe) + zero).clamp(0, INT4_MAX)
    return pack_int4(q.reshape(out, width).to(torch.uint8)), scale[..., 0], zero[..., 0].to(torch.uint8)
    # END SOLUTION


def dequantize_int4(packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group_size: int,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The weight back from `quantize_int4`'s three tensors: (q - zero) * scale of each
    element's group, as `dtype`, shape (out, in) with in = 2 * packed.shape[1]."""
    # BEGIN SOLUTION 4.8
    # HINT: Unpack, view as (out, n_groups, group_size), subtract the zero point BEFORE
    #   multiplying by the scale (both broadcast over the group), view back as (out, in).
    q = unpack_int4(packed)
    out, width = q.shape
    groups = q.reshape(out, width // group_size, group_size).float()
    return ((groups - zero[..., None].float()) * scale[..., None]).reshape(out, width).to(dtype)
    # END SOLUTION


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """q (..., n) integers in 0..15, n even -> uint8 (..., n // 2): byte j holds q[..., 2j] in
    its LOW four bits and q[..., 2j + 1] in its high four bits."""
    # BEGIN SOLUTION 4.8
    # HINT: Even and odd positions are q[..., 0::2] and q[..., 1::2]; shift one by 4 bits
    #   and OR them together, in uint8.
    q = q.to(torch.uint8)
    return q[..., 0::2] | (q[..., 1::2] << 4)
    # END SOLUTION


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 (..., m) -> uint8 (..., 2m) in 0..15, the inverse of `pack_int4`."""
    # BEGIN SOLUTION 4.8
    # HINT: The low nibble is `& 0xF`, the high one `>> 4`; interleave them again by
    #   stacking on a new last dim and flattening it.
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)
    # END SOLUTION


def _check_groups(w: torch.Tensor, group_size: int) -> None:
    """The argument checks of `quantize_int4` (given)."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
        shown = f"shape {tuple(w.shape)}, dtype {w.dtype}" if isinstance(w, torch.Tensor) else type(w).__name__
        raise TypeError(f"w must be a 2-D floating tensor (out_features, in_features), got {shown}")
    check_int("group_size", group_size, 1)
    width = w.shape[1]
    if width % group_size:
        raise ValueError(f"group_size must divide the width (in_features {width}), got {group_size}")
    if width % 2:
        raise ValueError(f"the width (in_features) must be even to pack two INT4 values per byte, got {width}")
