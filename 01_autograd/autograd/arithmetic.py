# GENERATED from solutions/autograd/arithmetic.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 01_autograd/01_autograd.ipynb. Exercises in this file (line of each hole, then the commands):
#   1.2 Arithmetic with broadcasting: lines 38, 45, 52, 59, 73, 77, 111; `course check 1.2`, `course hint 1.2`
"""Exercise 1.2: + - * / ** and negation, with NumPy broadcasting both ways."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .tensor import Tensor


class ArithmeticMixin:
    """Tensor's arithmetic. One contract for every binary op `a <op> b` (a: this tensor):

    - b may be a Tensor, a Python or NumPy number (it takes a's dtype) or an ndarray;
      anything else is Python's TypeError (given: the op returns NotImplemented);
    - the result is NumPy's, broadcasting and dtype included (float32 with a number stays
      float32, float32 with float64 gives float64); shapes that do not broadcast are a
      ValueError naming both shapes, a's first;
    - the result is a node of the graph whose parents are (a, b), as the lesson's §1 records
      one; its backward(g) returns for each input x: d(loss)/dx, the upstream g times
      d(out)/dx, in x's OWN shape, every element's gradient summed over all the outputs it
      was broadcast to (PyTorch's to rounding), or None when x does not require grad
      (constants get none).
    """

    __slots__ = ()

    def __add__(self, other: object) -> Tensor:
        """a + b (and `b + a` through __radd__)."""
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        raise NotImplementedError('Exercise 1.2: Arithmetic with broadcasting — see 01_autograd.ipynb')

    def __sub__(self, other: object) -> Tensor:
        """a - b (and `b - a` through __rsub__)."""
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        raise NotImplementedError('Exercise 1.2: Arithmetic with broadcasting — see 01_autograd.ipynb')

    def __mul__(self, other: object) -> Tensor:
        """a * b (and `b * a` through __rmul__)."""
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        raise NotImplementedError('Exercise 1.2: Arithmetic with broadcasting — see 01_autograd.ipynb')

    def __truediv__(self, other: object) -> Tensor:
        """a / b (and `b / a` through __rtruediv__)."""
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        raise NotImplementedError('Exercise 1.2: Arithmetic with broadcasting — see 01_autograd.ipynb')

    def __pow__(self, other: object) -> Tensor:
        """a ** b (and `b ** a` through __rpow__); the exponent may be a tensor too.

        The gradients are PyTorch's, at the corners too: where b == 0, a ** b is the constant
        1 and a gets gradient 0, at a == 0 as well (not 0 * 0**-1 = nan); where a == 0 and
        b >= 0, b gets 0 (not 1 * log 0). Elsewhere the exponent's gradient involves log(a),
        defined for a > 0: it is computed only when the exponent requires grad, so `t ** 3`
        works for any t. Backward raises no floating-point warning for these corners.
        """
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        raise NotImplementedError('Exercise 1.2: Arithmetic with broadcasting — see 01_autograd.ipynb')

    def __neg__(self) -> Tensor:
        """-a."""
        raise NotImplementedError('Exercise 1.2: Arithmetic with broadcasting — see 01_autograd.ipynb')

    # Reflected forms (`2 * t`, `1 - t`, `array / t`): lift the left operand, reuse the op.
    def __radd__(self, other: object) -> Tensor:
        return self.__add__(other)

    def __rmul__(self, other: object) -> Tensor:
        return self.__mul__(other)

    def __rsub__(self, other: object) -> Tensor:
        other = _as_operand(other, self)
        return NotImplemented if other is None else other.__sub__(self)

    def __rtruediv__(self, other: object) -> Tensor:
        other = _as_operand(other, self)
        return NotImplemented if other is None else other.__truediv__(self)

    def __rpow__(self, other: object) -> Tensor:
        other = _as_operand(other, self)
        return NotImplemented if other is None else other.__pow__(self)

    # -- given: the Tensor state these methods use, set by `Tensor.__init__` and `Tensor.from_op`
    #    (tensor.py) and declared here so that a reader sees what they touch. They also call
    #    `self.from_op` (a Tensor staticmethod).
    data: np.ndarray


def _unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`grad` (the gradient of a broadcast result) summed down to an input's `shape`.

    `shape` is one that NumPy broadcasts to `grad.shape`. The result has exactly `shape`:
    each element is the sum of `grad` over every position that element was broadcast to.
    It may be `grad` itself when nothing was broadcast; `grad` is never written into.
    """
    raise NotImplementedError('Exercise 1.2: Arithmetic with broadcasting — see 01_autograd.ipynb')


# ---------------------------------------------------------------------- given helpers
def _as_operand(value: object, like: Tensor) -> Tensor | None:
    """The other operand of a binary op as a Tensor, or None if it is not supported.

    Python and NumPy numbers take `like`'s dtype (so `x32 * 2.0` stays float32, as in
    PyTorch); arrays follow `Tensor`'s rule. Returning None lets the op return
    NotImplemented, and Python then raises its TypeError naming both operand types.
    (`type(like)` is the Tensor class, which this file cannot import: it is built from
    the mixins.)
    """
    tensor = type(like)
    if isinstance(value, tensor):
        return value
    if isinstance(value, (int, float, np.integer, np.floating)):
        return tensor(np.asarray(value, dtype=like.dtype))
    if isinstance(value, np.ndarray):
        return tensor(value)
    return None


def _apply(ufunc: np.ufunc, a: Tensor, b: Tensor, symbol: str) -> np.ndarray:
    """`ufunc(a.data, b.data)`, with a ValueError naming both shapes when they don't fit."""
    try:
        return ufunc(a.data, b.data)
    except ValueError:
        raise ValueError(f"shapes {a.shape} and {b.shape} do not fit for {symbol}") from None
