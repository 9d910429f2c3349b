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
        # BEGIN SOLUTION 1.2
        # DECISION: which axes a broadcast input's gradient is summed over (the leading axes it
        #   lacks and those where it has size 1), and each operation's local derivative, with the
        #   corners of ** chosen as PyTorch does.
        # HINT: compute the forward with `_apply(np.add, a, b, "+")` (it names both shapes on
        #   a mismatch) and return `self.from_op(data, (a, b), backward)`, where `backward(g)`
        #   returns one gradient per input: here g for both, since d(a+b)/da = d(a+b)/db = 1.
        # HINT: an input broadcast along an axis fed every position of that axis, so its
        #   gradient is g summed over that axis: pass each input's gradient through
        #   `_unbroadcast(grad, input.shape)`, and return None where `input.requires_grad` is False.
        a, b = self, other
        data = _apply(np.add, a, b, "+")

        def backward(g: np.ndarray):
            return (_unbroadcast(g, a.shape) if a.requires_grad else None,
                    _unbroadcast(g, b.shape) if b.requires_grad else None)

        return self.from_op(data, (a, b), backward)
        # END SOLUTION

    def __sub__(self, other: object) -> Tensor:
        """a - b (and `b - a` through __rsub__)."""
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        # BEGIN SOLUTION 1.2
        a, b = self, other
        data = _apply(np.subtract, a, b, "-")

        def backward(g: np.ndarray):
            return (_unbroadcast(g, a.shape) if a.requires_grad else None,
                    _unbroadcast(-g, b.shape) if b.requires_grad else None)

        return self.from_op(data, (a, b), backward)
        # END SOLUTION

    def __mul__(self, other: object) -> Tensor:
        """a * b (and `b * a` through __rmul__)."""
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        # BEGIN SOLUTION 1.2
        a, b = self, other
        data = _apply(np.multiply, a, b, "*")

        def backward(g: np.ndarray):
            return (_unbroadcast(g * b.data, a.shape) if a.requires_grad else None,
                    _unbroadcast(g * a.data, b.shape) if b.requires_grad else None)

        return self.from_op(data, (a, b), backward)
        # END SOLUTION

    def __truediv__(self, other: object) -> Tensor:
        """a / b (and `b / a` through __rtruediv__)."""
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        # BEGIN SOLUTION 1.2
        # HINT: the local derivatives: d(a/b)/da = 1/b, d(a/b)/db = -a/b**2 = -(a/b)/b (the
        #   forward result, reused); d(a**b)/da = b * a**(b-1), d(a**b)/db = a**b * log(a).
        a, b = self, other
        data = _apply(np.divide, a, b, "/")

        def backward(g: np.ndarray):
            ga = g / b.data
            # d(a/b)/db = -a/b**2 = -(a/b)/b: reuse the forward result
            return (_unbroadcast(ga, a.shape) if a.requires_grad else None,
                    _unbroadcast(-ga * data, b.shape) if b.requires_grad else None)

        return self.from_op(data, (a, b), backward)
        # END SOLUTION

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
        # BEGIN SOLUTION 1.2
        # HINT: t ** 0 is the constant 1, so its gradient is 0 everywhere; but the formula
        #   b * a**(b-1) at a = 0 is 0 * inf = nan. Pick the corner values with `np.where`
        #   (computing the formula under `np.errstate(divide="ignore", invalid="ignore")`).
        a, b = self, other
        data = _apply(np.power, a, b, "**")

        def backward(g: np.ndarray):
            ga = gb = None
            with np.errstate(divide="ignore", invalid="ignore"):  # the corners, replaced below
                if a.requires_grad:  # d(a**b)/da = b * a**(b-1), and 0 where b == 0
                    da = np.where(b.data == 0, 0, b.data * a.data ** (b.data - 1))
                    ga = _unbroadcast(g * da, a.shape)
                if b.requires_grad:  # d(a**b)/db = a**b * log(a), and 0 where a == 0 <= b
                    db = np.where((a.data == 0) & (b.data >= 0), 0, data * np.log(a.data))
                    gb = _unbroadcast(g * db, b.shape)
            return ga, gb

        return self.from_op(data, (a, b), backward)
        # END SOLUTION

    def __neg__(self) -> Tensor:
        """-a."""
        # BEGIN SOLUTION 1.2
        return self.from_op(-self.data, (self,), lambda g: (-g,))
        # END SOLUTION

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
    # BEGIN SOLUTION 1.2
    # HINT: sum over the leading axes `grad` has and `shape` lacks, and over the axes where
    #   `shape` has size 1 and `grad` does not (`grad.sum(axis=axes)`), then reshape to `shape`.
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1)
    summed = grad.sum(axis=axes)
    return summed if summed.shape == shape else summed.reshape(shape)
    # END SOLUTION


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
