# GENERATED from solutions/train/clip.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.4 Gradient clipping by global norm: line 32; `course check 3.4`, `course hint 3.4`
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
    raise NotImplementedError('Exercise 3.4: Gradient clipping by global norm — see 03_training_loop.ipynb')
