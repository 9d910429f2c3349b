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
        # BEGIN SOLUTION 1.6
        # DECISION: which quantity to keep for backward (the output, where the derivative is written
        #   with it) and how to write sigmoid so neither direction overflows.
        # HINT: the derivative of exp is exp itself: keep the forward array and reuse it in
        #   backward. tanh and sigmoid too have derivatives written with their own output:
        #   1 - tanh(x)**2 and s * (1 - s).
        data = np.exp(self.data)
        return self.from_op(data, (self,), lambda g: (g * data,))
        # END SOLUTION

    def log(self) -> Tensor:
        """Natural logarithm (for x > 0)."""
        # BEGIN SOLUTION 1.6
        x = self.data
        return self.from_op(np.log(x), (self,), lambda g: (g / x,))
        # END SOLUTION

    def tanh(self) -> Tensor:
        """Hyperbolic tangent."""
        # BEGIN SOLUTION 1.6
        data = np.tanh(self.data)
        return self.from_op(data, (self,), lambda g: (g * (1 - data * data),))
        # END SOLUTION

    def relu(self) -> Tensor:
        """max(x, 0). Its gradient is g where x > 0 and 0 elsewhere, at x == 0 too (like PyTorch)."""
        # BEGIN SOLUTION 1.6
        # HINT: the mask `out > 0` is the derivative; multiplying g by a boolean array is one pass.
        data = np.maximum(self.data, 0)
        return self.from_op(data, (self,), lambda g: (g * (data > 0),))
        # END SOLUTION

    def sigmoid(self) -> Tensor:
        """1 / (1 + e**-x), without overflow: for any finite x (say -1000 or 1000) neither the
        forward nor the backward raises a floating-point warning (the tests run them under
        `np.errstate(all="raise")`). It saturates to exactly 0 and 1 there, with gradient 0;
        sigmoid(0) is 0.5 with gradient 0.25."""
        # BEGIN SOLUTION 1.6
        # HINT: e**-x overflows for x = -1000; the same function written as (1 + tanh(x/2)) / 2
        #   cannot overflow, and its gradient follows from the output s: s * (1 - s).
        data = np.tanh(self.data * 0.5)
        data += 1
        data *= 0.5
        return self.from_op(data, (self,), lambda g: (g * data * (1 - data),))
        # END SOLUTION

    # -- given: the Tensor state these methods use, set by `Tensor.__init__` and `Tensor.from_op`
    #    (tensor.py) and declared here so that a reader sees what they touch. They also call
    #    `self.from_op` (a Tensor staticmethod).
    data: np.ndarray
