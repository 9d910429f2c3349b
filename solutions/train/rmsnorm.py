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
        # BEGIN SOLUTION 3.15
        # DECISION: which axis the mean runs over (one token's features, not the batch or the
        #   time axis), where eps goes (inside the root, added to the mean square), and where the
        #   rounding back to x's dtype falls relative to the gain (before it, as HF's forward).
        # HINT: Each token is normalised on its own: the mean of the squares runs over the last
        #   axis only, kept as a size-1 axis so it broadcasts back (keepdim=True).
        # HINT: Divide by sqrt(mean_square + eps), i.e. multiply by torch.rsqrt(mean_square +
        #   eps). x / (sqrt(mean_square) + eps) is another function: an all-zero row gives NaN
        #   there, and small activations come out different.
        # HINT: Work on x.float(); cast the normalised values back with .to(x.dtype), and only
        #   then multiply by self.weight (LlamaRMSNorm's order: `weight * hidden.to(dtype)`;
        #   multiplying in float32 and casting last can differ in the last bit of a half).
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)
        # END SOLUTION

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"
