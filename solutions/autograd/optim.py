"""Exercise 1.8 (with layers.py): the optimiser SGD."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .tensor import Tensor


class SGD:
    """Plain stochastic gradient descent: p <- p - lr * p.grad for every parameter.

    `params`: Tensors with requires_grad (a list, or a Module's `parameters()`), kept in
    `self.params`; `lr` > 0, kept in `self.lr` (stage 03's optimisers subclass this class
    and change `lr` between steps). No parameters, a negative lr: ValueError; a parameter
    that is not a Tensor requiring grad: TypeError (given).
    """

    def __init__(self, params: Iterator[Tensor] | Sequence[Tensor], lr: float) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("SGD got no parameters")
        for p in self.params:
            if not isinstance(p, Tensor) or not p.requires_grad:
                raise TypeError(f"SGD parameters must be Tensors with requires_grad=True, got {p!r:.60}")
        if not lr > 0:
            raise ValueError(f"SGD learning rate must be positive, got {lr}")
        self.lr = float(lr)

    def step(self) -> None:
        """Update every parameter that has a gradient IN PLACE: afterwards `p.data` is the same
        array object as before (the model and the optimiser share it). A parameter whose
        `.grad` is None is left unchanged; no `.grad` is changed."""
        # BEGIN SOLUTION 1.8
        # HINT: `p.data -= ...` writes into the array everyone holds; `p.data = p.data - ...`
        #   would give this tensor a new array. Skip a parameter whose grad is None.
        for p in self.params:
            if p.grad is not None:
                p.data -= self.lr * p.grad
        # END SOLUTION

    def zero_grad(self) -> None:
        """Set every parameter's `.grad` to None."""
        for p in self.params:
            p.zero_grad()
