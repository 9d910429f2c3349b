# GENERATED from solutions/kv_cache/weight_quant.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 04_kv_cache/04_kv_cache.ipynb. Exercises in this file (line of each hole, then the commands):
#   4.8 INT4 weights: groups, zero points, packing: lines 32, 39, 45, 50; `course check 4.8`, `course hint 4.8`
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
    raise NotImplementedError('Exercise 4.8: INT4 weights: groups, zero points, packing — see 04_kv_cache.ipynb')


def dequantize_int4(packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group_size: int,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The weight back from `quantize_int4`'s three tensors: (q - zero) * scale of each
    element's group, as `dtype`, shape (out, in) with in = 2 * packed.shape[1]."""
    raise NotImplementedError('Exercise 4.8: INT4 weights: groups, zero points, packing — see 04_kv_cache.ipynb')


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """q (..., n) integers in 0..15, n even -> uint8 (..., n // 2): byte j holds q[..., 2j] in
    its LOW four bits and q[..., 2j + 1] in its high four bits."""
    raise NotImplementedError('Exercise 4.8: INT4 weights: groups, zero points, packing — see 04_kv_cache.ipynb')


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 (..., m) -> uint8 (..., 2m) in 0..15, the inverse of `pack_int4`."""
    raise NotImplementedError('Exercise 4.8: INT4 weights: groups, zero points, packing — see 04_kv_cache.ipynb')


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
