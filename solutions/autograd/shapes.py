"""Exercise 1.5: reshape, transpose and indexing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .tensor import Tensor


class ShapeMixin:
    """Tensor's shape operations. Each moves elements without changing them, keeps the dtype,
    and its backward hands this tensor a gradient of this tensor's shape."""

    __slots__ = ()

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """The same elements (C order) in a new shape: `t.reshape(2, -1)` or `t.reshape((2, -1))`.

        A shape with another number of elements is a ValueError naming this tensor's shape
        first, then the one asked for: "(2, 3) ... (4, 2)".
        """
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        # BEGIN SOLUTION 1.5
        # DECISION: how each view's gradient is put back: the inverse permutation for a transpose,
        #   and for indexing a scatter that adds repeated picks rather than keeping the last.
        # HINT: reshaping moves no element, so the gradient is g put back into the input's shape.
        #   NumPy's reshape raises a ValueError that names neither shape: catch it, raise yours.
        try:
            data = self.data.reshape(shape)
        except ValueError:
            raise ValueError(f"cannot reshape a tensor of shape {self.shape} "
                             f"({self.size} elements) into {tuple(shape)}") from None
        in_shape = self.shape
        return self.from_op(data, (self,), lambda g: (g.reshape(in_shape),))
        # END SOLUTION

    def transpose(self, *axes: int) -> Tensor:
        """Permute the axes, like `ndarray.transpose`: `t.transpose(2, 0, 1)` or with one tuple;
        negative axes count from the end; no axes reverses them. Axes that are not a
        permutation are a ValueError naming the shape (given)."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(range(self.ndim))[::-1]
        perm = tuple(ax + self.ndim if isinstance(ax, int) and ax < 0 else ax for ax in axes)
        if sorted(perm) != list(range(self.ndim)):
            raise ValueError(f"transpose axes {axes} are not a permutation of the axes of shape {self.shape}")
        # BEGIN SOLUTION 1.5
        # HINT: the gradient is g transposed back, by the inverse permutation (`np.argsort(perm)`).
        inverse = tuple(np.argsort(perm))
        return self.from_op(self.data.transpose(perm), (self,), lambda g: (g.transpose(inverse),))
        # END SOLUTION

    @property
    def T(self) -> Tensor:
        """All axes reversed; the matrix transpose for a 2-D tensor."""
        return self.transpose()

    def __getitem__(self, index: object) -> Tensor:
        """NumPy indexing: ints, slices (negative steps too), None, Ellipsis, integer arrays and
        boolean masks, alone or in a tuple; the result is NumPy's `data[index]`.

        The gradient has this tensor's shape: zero where nothing was picked, and an element
        picked several times (`t[[0, 0, 2]]`) gets the sum of the gradients of all its picks.
        Indexing with a Tensor is a TypeError (given).
        """
        items = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, type(self)) for i in items):
            raise TypeError("index a Tensor with ints, slices or integer ndarrays, not with a Tensor")
        # BEGIN SOLUTION 1.5
        # HINT: scatter g into zeros of the input's shape at `index`. `zeros[index] = g` keeps
        #   only the last of repeated picks; `np.add.at(zeros, index, g)` adds them all (and is
        #   slower: ints and slices never pick an element twice).
        x = self.data
        data = x[index]
        basic = all(i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice)) for i in items)

        def backward(g: np.ndarray):
            full = np.zeros_like(x)
            if basic:  # ints and slices never pick an element twice: plain assignment
                full[index] = g
            else:
                np.add.at(full, index, g)
            return (full,)

        return self.from_op(data, (self,), backward)
        # END SOLUTION

    # -- given: the Tensor state these methods use, set by `Tensor.__init__` and `Tensor.from_op`
    #    (tensor.py) and declared here so that a reader sees what they touch. They also call
    #    `self.from_op` and read the properties `shape`, `ndim` and `size`.
    data: np.ndarray
