# GENERATED from solutions/train/rmsnorm.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.15 RMSNorm: line 40; `course check 3.15`, `course hint 3.15`
"""Exercise 3.15: RMSNorm, the normalisation of Llama-family decoders (Zhang & Sennrich, 2019)."""

from __future__ import annotations

import torch
from torch import nn

from solutions.checks import check_int

from .arguments import check_positive


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last axis, with a learned gain `weight` (dim,).

    forward(x): x (..., dim), any floating dtype -> the same shape and dtype:

        y = x / sqrt(mean(x ** 2 over the last axis) + eps) * weight

    As Hugging Face's `LlamaRMSNorm`: eps INSIDE the square root (an all-zero vector gives
    zeros, never NaN); no mean is subtracted, no bias; the statistics in float32. float32
    results equal LlamaRMSNorm's to rounding, float16 and bfloat16 results bit for bit (so the
    cast back to x's dtype falls where its forward puts it). x is not modified. ValueError:
    x's last axis is not `dim` (given). `weight` (key `...layernorm.weight`) starts at ones.
    """

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.dim = check_int("dim", dim, 1)
        check_positive(eps=eps)
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(self.dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 1 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have last axis {self.dim}, got shape {tuple(x.shape)}")
        raise NotImplementedError('Exercise 3.15: RMSNorm — see 03_training_loop.ipynb')

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"
