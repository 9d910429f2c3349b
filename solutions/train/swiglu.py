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
        # BEGIN SOLUTION 3.17
        # DECISION: which projection is the gate (the one that goes through the SiLU) and which
        #   enters linearly, and where the two meet (an elementwise product, hidden_dim wide).
        # HINT: Two projections of the same x, each (..., hidden_dim): a gate and a value.
        # HINT: F.silu(self.gate_proj(x)) * self.up_proj(x), then self.down_proj of that
        #   product back to dim.
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        # END SOLUTION
