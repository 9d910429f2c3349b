"""Exercise 1.4: the matrix product `@`, 2-D and batched."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .arithmetic import _apply, _as_operand, _unbroadcast

if TYPE_CHECKING:
    from .tensor import Tensor


class MatmulMixin:
    """Tensor's `@` (and `array @ tensor` through __rmatmul__)."""

    __slots__ = ()

    def __matmul__(self, other: object) -> Tensor:
        """(..., n, k) @ (..., k, m) -> (..., n, m); the batch axes (...) broadcast as in NumPy.

        Operands as for arithmetic (a Tensor or an ndarray), both with at least 2 dimensions
        (else a ValueError naming both shapes, given); inner sizes or batch axes that do not
        fit are a ValueError naming both shapes, the left one first. dtype as NumPy's.
        Backward: each operand that requires grad gets PyTorch's gradient in its OWN shape
        (a right operand of shape (k, m) or (1, k, m) shared by a batch gets the sum over
        the batch); None for one that does not.
        """
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        if self.ndim < 2 or other.ndim < 2:
            raise ValueError(f"@ needs operands with at least 2 dimensions, got shapes "
                             f"{self.shape} and {other.shape}")
        # BEGIN SOLUTION 1.4
        # DECISION: which axes to transpose (the last two only) and which to sum back (batch axes an
        #   operand was broadcast along), so each operand's gradient has its own shape.
        # HINT: for one matrix product C = A @ B with upstream gradient dC:
        #   dA = dC @ B^T and dB = A^T @ dC. Batched, transpose only the last two axes
        #   (`np.swapaxes(x, -1, -2)`); NumPy's @ broadcasts the batch axes for you.
        # HINT: a batch axis that was broadcast must be summed back, for either operand:
        #   `_unbroadcast(..., operand.shape)`. For a 2-D right operand you can instead fold the
        #   batch into rows: `a.data.reshape(-1, k).T @ g.reshape(-1, m)`, one product.
        a, b = self, other
        data = _apply(np.matmul, a, b, "@")

        def backward(g: np.ndarray):
            ga = gb = None
            if a.requires_grad:
                ga = _unbroadcast(g @ np.swapaxes(b.data, -1, -2), a.shape)
            if b.requires_grad:
                if b.ndim == 2:  # one matrix shared by the whole batch: fold batch into rows
                    k, m = a.shape[-1], g.shape[-1]
                    gb = a.data.reshape(-1, k).T @ g.reshape(-1, m)
                else:
                    gb = _unbroadcast(np.swapaxes(a.data, -1, -2) @ g, b.shape)
            return ga, gb

        return self.from_op(data, (a, b), backward)
        # END SOLUTION

    def __rmatmul__(self, other: object) -> Tensor:
        other = _as_operand(other, self)
        return NotImplemented if other is None else other.__matmul__(self)

    # -- given: the Tensor state these methods use, set by `Tensor.__init__` and `Tensor.from_op`
    #    (tensor.py) and declared here so that a reader sees what they touch. Only Tensor's
    #    `from_op` and its properties `shape` and `ndim`: no attribute directly.
