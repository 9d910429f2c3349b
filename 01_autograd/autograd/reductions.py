# GENERATED from solutions/autograd/reductions.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 01_autograd/01_autograd.ipynb. Exercises in this file (line of each hole, then the commands):
#   1.3 Reductions: sum, mean, max: lines 31, 42, 54; `course check 1.3`, `course hint 1.3`
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
        raise NotImplementedError('Exercise 1.3: Reductions: sum, mean, max — see 01_autograd.ipynb')

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Mean over `axis`: the sum over it divided by the number of elements summed.

        A mean over no elements is a ValueError (given).
        """
        axes = _normalize_axes(axis, self.ndim)
        count = int(np.prod([self.shape[i] for i in axes]))
        if count == 0:
            raise ValueError(f"mean over axis {axis} of a tensor of shape {self.shape}: no elements")
        raise NotImplementedError('Exercise 1.3: Reductions: sum, mean, max — see 01_autograd.ipynb')

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Maximum over `axis`.

        The gradient goes only to the elements equal to the maximum of their slice; where k
        of them tie, each gets 1/k of it (like `torch.amax`): [5, 1, 5].max() gives
        [1/2, 0, 1/2]. The max of an empty tensor is a ValueError (given).
        """
        axes = _normalize_axes(axis, self.ndim)
        if self.data.size == 0:
            raise ValueError(f"max of an empty tensor (shape {self.shape})")
        raise NotImplementedError('Exercise 1.3: Reductions: sum, mean, max — see 01_autograd.ipynb')

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
