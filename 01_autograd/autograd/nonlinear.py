# GENERATED from solutions/autograd/nonlinear.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 01_autograd/01_autograd.ipynb. Exercises in this file (line of each hole, then the commands):
#   1.6 Nonlinearities: lines 25, 29, 33, 37, 44; `course check 1.6`, `course hint 1.6`
"""Exercise 1.6: the elementwise nonlinearities exp, log, tanh, relu and sigmoid."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .tensor import Tensor


class NonlinearMixin:
    """Tensor's elementwise functions f. Each result has this tensor's shape (0-d included)
    and dtype (float32 stays float32); its backward gives this tensor g * f'(x), PyTorch's
    gradient to rounding."""

    __slots__ = ()

    def exp(self) -> Tensor:
        """e**x."""
        raise NotImplementedError('Exercise 1.6: Nonlinearities — see 01_autograd.ipynb')

    def log(self) -> Tensor:
        """Natural logarithm (for x > 0)."""
        raise NotImplementedError('Exercise 1.6: Nonlinearities — see 01_autograd.ipynb')

    def tanh(self) -> Tensor:
        """Hyperbolic tangent."""
        raise NotImplementedError('Exercise 1.6: Nonlinearities — see 01_autograd.ipynb')

    def relu(self) -> Tensor:
        """max(x, 0). Its gradient is g where x > 0 and 0 elsewhere, at x == 0 too (like PyTorch)."""
        raise NotImplementedError('Exercise 1.6: Nonlinearities — see 01_autograd.ipynb')

    def sigmoid(self) -> Tensor:
        """1 / (1 + e**-x), without overflow: for any finite x (say -1000 or 1000) neither the
        forward nor the backward raises a floating-point warning (the tests run them under
        `np.errstate(all="raise")`). It saturates to exactly 0 and 1 there, with gradient 0;
        sigmoid(0) is 0.5 with gradient 0.25."""
        raise NotImplementedError('Exercise 1.6: Nonlinearities — see 01_autograd.ipynb')

    # -- given: the Tensor state these methods use, set by `Tensor.__init__` and `Tensor.from_op`
    #    (tensor.py) and declared here so that a reader sees what they touch. They also call
    #    `self.from_op` (a Tensor staticmethod).
    data: np.ndarray
