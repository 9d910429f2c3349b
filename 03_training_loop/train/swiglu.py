# GENERATED from solutions/train/swiglu.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.17 The SwiGLU MLP: line 36; `course check 3.17`, `course hint 3.17`
"""Exercise 3.17: the SwiGLU feed-forward block of Llama-family decoders (Shazeer, 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from solutions.checks import check_int


class SwiGLU(nn.Module):
    """A gated MLP: x (..., dim) -> (..., dim), in x's dtype.

        SwiGLU(x) = down_proj( silu(gate_proj(x)) * up_proj(x) ),   silu(z) = z * sigmoid(z)

    Three bias-free linear maps, named as Hugging Face's `LlamaMLP` names them (the state-dict
    keys `mlp.gate_proj.weight` (hidden_dim, dim), `mlp.up_proj.weight` (hidden_dim, dim),
    `mlp.down_proj.weight` (dim, hidden_dim)). The SiLU goes on the GATE projection only; the
    up projection enters linearly, and the product is elementwise. x is not modified.
    """

    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.dim, self.hidden_dim = check_int("dim", dim, 1), check_int("hidden_dim", hidden_dim, 1)
        self.gate_proj = nn.Linear(dim, hidden_dim, bias=False)
        self.up_proj = nn.Linear(dim, hidden_dim, bias=False)
        self.down_proj = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 1 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have last axis {self.dim}, got shape {tuple(x.shape)}")
        raise NotImplementedError('Exercise 3.17: The SwiGLU MLP — see 03_training_loop.ipynb')
