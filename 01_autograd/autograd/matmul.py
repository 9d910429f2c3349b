# GENERATED from solutions/autograd/matmul.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 01_autograd/01_autograd.ipynb. Exercises in this file (line of each hole, then the commands):
#   1.4 Matrix multiply, 2-D and batched: line 39; `course check 1.4`, `course hint 1.4`
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
        raise NotImplementedError('Exercise 1.4: Matrix multiply, 2-D and batched — see 01_autograd.ipynb')

    def __rmatmul__(self, other: object) -> Tensor:
        other = _as_operand(other, self)
        return NotImplemented if other is None else other.__matmul__(self)

    # -- given: the Tensor state these methods use, set by `Tensor.__init__` and `Tensor.from_op`
    #    (tensor.py) and declared here so that a reader sees what they touch. Only Tensor's
    #    `from_op` and its properties `shape` and `ndim`: no attribute directly.
