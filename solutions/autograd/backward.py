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
    # BEGIN SOLUTION 1.1
    # DECISION: the order (a node only after all its parents, walked without recursion and each node
    #   expanded once) and the invariant of the pass (a node's gradient is complete, summed over
    #   every consumer, before it is passed on; gradients added, never written in place).
    # HINT: a depth-first search that appends a node once all its parents are appended
    #   (post-order) gives this order. Recursion would overflow on a long chain: keep an
    #   explicit stack of (node, parents_done) pairs, and a set of the ids already expanded,
    #   so that a node reached by many paths is expanded once.
    order: list[Tensor] = []
    visited: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    while stack:
        node, parents_done = stack.pop()
        if parents_done:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))  # comes back here after its parents
        for parent in node._parents:
            if parent.requires_grad and id(parent) not in visited:
                stack.append((parent, False))
    return order
    # END SOLUTION


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
        # BEGIN SOLUTION 1.1
        # HINT: visit the nodes in reverse topological order: a node then comes after every
        #   node that consumes it, so its gradient is complete (summed over all consumers)
        #   before its `_backward` passes it on.
        # HINT: keep this pass's gradients in a dict {id(node): array}, seeded with ones or a
        #   copy of `grad` in this tensor's dtype. Add a parent's gradient to its entry with
        #   `+`, never in place (`+=`): one array may be handed to several parents.
        # HINT: cast each parent's gradient to the parent's dtype; a leaf (no `_backward`)
        #   hands its gradient to `_keep_leaf_grad(node, g, kept)` (given, below), with one
        #   empty `kept` set per pass.
        if grad is None:
            seed = np.ones_like(self.data)
        else:
            seed = np.array(grad, dtype=self.dtype)  # a copy: the caller keeps theirs
            if seed.shape != self.shape:
                raise ValueError(f"backward(grad=...) got a gradient of shape {seed.shape} for a "
                                 f"tensor of shape {self.shape}")
        grads: dict[int, np.ndarray] = {id(self): seed}
        kept: set[int] = set()  # for _keep_leaf_grad: arrays already handed to a leaf
        for node in reversed(topological_order(self)):
            g = grads.pop(id(node), None)
            if g is None:
                continue
            if node._backward is None:  # a leaf: keep the gradient
                _keep_leaf_grad(node, g, kept)
                continue
            for parent, pg in zip(node._parents, node._backward(g)):
                if pg is None or not parent.requires_grad:
                    continue
                if pg.dtype != parent.data.dtype:
                    pg = pg.astype(parent.data.dtype)
                key = id(parent)
                grads[key] = pg if key not in grads else grads[key] + pg  # a reused node sums
        # END SOLUTION

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
