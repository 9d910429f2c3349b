# GENERATED from solutions/autograd/backward.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 01_autograd/01_autograd.ipynb. Exercises in this file (line of each hole, then the commands):
#   1.1 Backward in topological order: lines 26, 63; `course check 1.1`, `course hint 1.1`
"""Exercise 1.1: the nodes of a graph in topological order, and backward along them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .tensor import Tensor


def topological_order(root: Tensor) -> list[Tensor]:
    """Every tensor `root` depends on that requires grad, each after all of its parents.

    Returns a list holding `root` (last) and each of its ancestors reachable through
    `_parents` along tensors that require grad, each exactly once (by identity), each after
    every one of its parents; constants (requires_grad False) are left out. The graph is
    not changed. Must cope with a chain of 10,000 ops (deeper than Python's recursion
    limit), and take time linear in the nodes however many paths join them (each stacked
    diamond doubles the paths).
    """
    raise NotImplementedError('Exercise 1.1: Backward in topological order — see 01_autograd.ipynb')


class BackwardMixin:
    """`Tensor.backward` (the Tensor class, tensor.py, is built from this and the ops' mixins)."""

    __slots__ = ()

    def backward(self, grad: np.ndarray | Tensor | float | None = None) -> None:
        """Backpropagate from this tensor into the `.grad` of every leaf it depends on.

        `grad`: the gradient of some final quantity with respect to this tensor (an ndarray,
        Tensor or number of this tensor's shape, cast to its dtype); None means ones and is
        allowed only for a one-element tensor (a loss).

        After the call every leaf L (requires_grad, no `_backward`) that this tensor depends
        on has `L.grad` increased by d(self)/d(L) . grad: the sum over every path from L to
        self, each path the product of the `_backward` steps along it. `.grad` accumulates
        over calls (None counts as zero) and is an array of L's shape and dtype, writeable,
        owned by L alone: never shared with another leaf nor with `grad`, which is left
        unchanged. Intermediate tensors get no `.grad`, and the graph stays as it was, so
        backward may run again. Each node's `_backward` is called once per pass, with the
        node's whole gradient; a None it returns for a parent means no gradient.

        Errors, all ValueError: this tensor does not require grad; `grad` is None for a
        tensor of more than one element (naming its shape); `grad` has another shape than
        this tensor (naming both shapes).
        """
        if not self.requires_grad:
            raise ValueError("backward() on a tensor that does not require grad: no input of its "
                             "graph was made with requires_grad=True (or it was built under no_grad)")
        if grad is None:
            if self.data.size != 1:
                raise ValueError(f"backward() without a gradient needs a one-element output, got shape "
                                 f"{self.shape}; pass grad= of that shape")
        elif isinstance(grad, type(self)):  # a Tensor
            grad = grad.data
        raise NotImplementedError('Exercise 1.1: Backward in topological order — see 01_autograd.ipynb')

    # -- given: the Tensor state these methods use, set by `Tensor.__init__` and `Tensor.from_op`
    #    (tensor.py) and declared here so that a reader sees what they touch. They also read
    #    the properties `shape` and `dtype`, and every graph node's `grad`, `_parents`, `_backward`.
    data: np.ndarray
    requires_grad: bool


def _keep_leaf_grad(leaf: Tensor, g: np.ndarray, kept: set[int]) -> None:
    """Add the gradient `g` to `leaf.grad` (given code: `backward` calls it for each leaf).

    The first gradient a leaf gets becomes its `.grad`; later ones are added in place
    (the leaf owns its `.grad`). Keeping `g` itself saves a copy per leaf, but only when
    that is safe: `g` must be a fresh, writable array that no other leaf holds (`kept`:
    the ids of the arrays handed to leaves in this backward pass). A view, a read-only
    broadcast, or an array another leaf already holds (`a + b` hands one g to both) is
    copied, so that an optimiser scaling one `.grad` in place never changes another.
    This is a performance detail, not the idea of backward.
    """
    if leaf.grad is not None:
        leaf.grad += g
    elif g.flags.owndata and g.flags.writeable and id(g) not in kept:
        leaf.grad = g
    else:  # a view, read-only, or shared with another leaf: own a copy
        leaf.grad = g.copy()
    kept.add(id(leaf.grad))
