"""Exercise 1.3: the reductions sum, mean and max, over any axes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from solutions.checks import is_int

if TYPE_CHECKING:
    from .tensor import Tensor


class ReductionMixin:
    """Tensor's reductions. For each: `axis` is an int, a tuple of ints (negative ones
    count from the end) or None for all axes; `keepdims=True` keeps the reduced axes with
    size 1. The result has this tensor's dtype; its backward gives this tensor a gradient of
    its own shape and dtype, PyTorch's to rounding. An axis out of range or repeated is a
    ValueError, one that is not an int a TypeError (given, `_normalize_axes`)."""

    __slots__ = ()

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Sum over `axis`. Each element's gradient is the gradient of the sum it went into."""
        axes = _normalize_axes(axis, self.ndim)
        # BEGIN SOLUTION 1.3
        # DECISION: how a reduced gradient goes back to the input's shape (the reduced axes put
        #   back, then broadcast), and how max shares its gradient among ties (equally).
        # HINT: every element contributed once to its sum, so g (one value per sum) goes back
        #   to every element of that sum: put the reduced axes back with size 1 (unless
        #   keepdims kept them: `np.expand_dims(g, axes)`), then `np.broadcast_to` the input's
        #   shape (a read-only view is fine: backward never writes into a gradient).
        data = self.data.sum(axis=axes, keepdims=keepdims)
        shape = self.shape

        def backward(g: np.ndarray):
            if not keepdims:
                g = np.expand_dims(g, axes)
            return (np.broadcast_to(g, shape),)

        return self.from_op(data, (self,), backward)
        # END SOLUTION

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Mean over `axis`: the sum over it divided by the number of elements summed.

        A mean over no elements is a ValueError (given).
        """
        axes = _normalize_axes(axis, self.ndim)
        count = int(np.prod([self.shape[i] for i in axes]))
        if count == 0:
            raise ValueError(f"mean over axis {axis} of a tensor of shape {self.shape}: no elements")
        # BEGIN SOLUTION 1.3
        # HINT: build it from ops that already have a backward: a sum and a product.
        return self.sum(axes, keepdims) * (1.0 / count)
        # END SOLUTION

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Maximum over `axis`.

        The gradient goes only to the elements equal to the maximum of their slice; where k
        of them tie, each gets 1/k of it (like `torch.amax`): [5, 1, 5].max() gives
        [1/2, 0, 1/2]. The max of an empty tensor is a ValueError (given).
        """
        axes = _normalize_axes(axis, self.ndim)
        if self.data.size == 0:
            raise ValueError(f"max of an empty tensor (shape {self.shape})")
        # BEGIN SOLUTION 1.3
        # HINT: compare the input with the maximum (reduced axes put back) to get a mask of
        #   the winners; count them per slice (a sum with keepdims) and hand each g / count.
        x = self.data
        data = x.max(axis=axes, keepdims=keepdims)

        def backward(g: np.ndarray):
            top = data if keepdims else np.expand_dims(data, axes)
            if not keepdims:
                g = np.expand_dims(g, axes)
            winners = x == top
            ties = winners.sum(axis=axes, keepdims=True, dtype=g.dtype)
            return (winners * (g / ties),)

        return self.from_op(data, (self,), backward)
        # END SOLUTION

    # -- given: the Tensor state these methods use, set by `Tensor.__init__` and `Tensor.from_op`
    #    (tensor.py) and declared here so that a reader sees what they touch. They also call
    #    `self.from_op` and read the properties `shape` and `ndim`.
    data: np.ndarray


# ---------------------------------------------------------------------- given helpers
def _normalize_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """`axis` as a sorted tuple of non-negative axes (all axes for None)."""
    if axis is None:
        return tuple(range(ndim))
    if is_int(axis):
        axes: tuple = (axis,)
    elif isinstance(axis, (tuple, list)):
        axes = tuple(axis)
    else:
        raise TypeError(f"axis must be an int or a tuple of ints, got {axis!r}")
    for ax in axes:
        if not is_int(ax):
            raise TypeError(f"axis must be an int or a tuple of ints, got {axis!r}")
        if not -ndim <= ax < ndim:
            raise ValueError(f"axis {ax} is out of range for a tensor with {ndim} dimensions")
    normalized = tuple(sorted(int(ax) % ndim for ax in axes))
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"repeated axis in {axis!r}")
    return normalized


def _one_axis(axis: int, ndim: int) -> int:
    """One axis (an int, negative counting from the end) as a non-negative int."""
    if not is_int(axis):
        raise TypeError(f"axis must be an int, got {axis!r}")
    return _normalize_axes(axis, ndim)[0]
