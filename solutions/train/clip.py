"""Gradient clipping by global norm, on the stage-01 engine (PyTorch's `clip_grad_norm_`)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from solutions.autograd import Tensor

from .arguments import check_positive


def clip_grad_norm(params: Iterable[Tensor], max_norm: float) -> float:
    """Scale all gradients by one factor, in place, so their global L2 norm is <= `max_norm`.

    Returns the global norm BEFORE clipping, a Python float: the L2 norm of all the gradients
    seen together as one long vector, accumulated in float64 (0.0 when no parameter has a
    gradient). The gradients afterwards are `torch.nn.utils.clip_grad_norm_`'s, to 1e-10: its
    clip coefficient is max_norm / (norm + 1e-6), and it never scales a gradient up (under the
    limit no gradient changes). One factor for all keeps the step's direction. The gradients
    are scaled in place (the same arrays); a parameter whose grad is None is skipped and
    stays None; `params` may be any iterable (it is read once).
    ValueError: max_norm not a positive number.
    """
    check_positive(max_norm=max_norm)
    grads = [p.grad for p in params if p.grad is not None]
    # BEGIN SOLUTION 3.4
    # DECISION: which norm (one global L2 norm over all gradients as one vector, in float64, not one
    #   per tensor), when to scale (only a factor below 1: never scale up), and what is returned
    #   (the norm before clipping).
    # HINT: First the norm of everything together: the square root of the sum, over all
    #   gradients, of their summed squares (not a norm per parameter).
    # HINT: Never scaling up means: only if the factor max_norm / (norm + 1e-6) is below 1,
    #   multiply every gradient by it in place (g *= scale); return the norm you measured
    #   before scaling.
    total = math.sqrt(sum(float(np.square(g, dtype=np.float64).sum()) for g in grads))
    scale = max_norm / (total + 1e-6)
    if scale < 1.0:
        for g in grads:
            g *= scale
    return total
    # END SOLUTION
