# GENERATED from solutions/autograd/layers.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 01_autograd/01_autograd.ipynb. Exercises in this file (line of each hole, then the commands):
#   1.8 Linear, MLP and SGD: lines 29, 67, 71; `course check 1.8`, `course hint 1.8`
"""Exercise 1.8 (with optim.py): the layers Linear and MLP."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solutions.checks import check_ints

from .module import Module
from .tensor import Tensor


class Linear(Module):
    """y = x @ weight + bias, for x of shape (..., in_features): y is (..., out_features).

    `weight`: (in_features, out_features), stored this way round (PyTorch stores its
    transpose); `bias`: (out_features,), or None with bias=False. Both are parameters
    (requires_grad), of `dtype` (float32 by default). An input whose last axis is not
    in_features gets `@`'s ValueError naming both shapes, the input's first.
    """

    def forward(self, x: Tensor) -> Tensor:
        """y = x @ weight (+ bias), of x's dtype; the gradients of x, weight and bias flow back."""
        raise NotImplementedError('Exercise 1.8: Linear, MLP and SGD — see 01_autograd.ipynb')

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 rng: np.random.Generator | int | None = None, dtype: np.dtype | type = np.float32) -> None:
        """Initialised as PyTorch's default: weight, then bias, uniform in +-1/sqrt(in_features)
        (each output then starts with a variance that does not grow with the fan-in), drawn
        from `np.random.default_rng(rng)`. Sizes below 1 are a ValueError."""
        check_ints(1, in_features=in_features, out_features=out_features)
        rng = np.random.default_rng(rng)
        bound = 1.0 / np.sqrt(in_features)
        self.weight = Tensor(rng.uniform(-bound, bound, (in_features, out_features)).astype(dtype),
                             requires_grad=True)
        self.bias = (Tensor(rng.uniform(-bound, bound, out_features).astype(dtype), requires_grad=True)
                     if bias else None)


class MLP(Module):
    """A multi-layer perceptron: Linear layers of `sizes` ([784, 256, 256, 10]: three layers)
    with `activation` ("relu" or "tanh") after each but the last, which gives the logits.

    `self.layers` is the list of the Linear layers, in order: layer i maps sizes[i] to
    sizes[i + 1], of `dtype`. Their initial values are exactly those of such Linear layers
    made one after another while ONE random stream runs on, the stream of
    `np.random.default_rng(rng)` (a test rebuilds them so): one seed fixes them all, two
    seeds differ, layers of the same shape differ from each other (`MLP([8, 8, 8, 8],
    rng=0)`: three different weight matrices), and two MLPs given one Generator differ.
    `parameters()` is then each layer's weight and bias, layer by layer.
    Fewer than two sizes, or another activation, is a ValueError (given).
    """

    def __init__(self, sizes: Sequence[int], activation: str = "relu", *,
                 rng: np.random.Generator | int | None = None, dtype: np.dtype | type = np.float32) -> None:
        sizes = list(sizes)
        if len(sizes) < 2:
            raise ValueError(f"MLP needs at least an input and an output size, got sizes={sizes}")
        if activation not in ("relu", "tanh"):
            raise ValueError(f"activation must be 'relu' or 'tanh', got {activation!r}")
        self.activation = activation
        raise NotImplementedError('Exercise 1.8: Linear, MLP and SGD — see 01_autograd.ipynb')

    def forward(self, x: Tensor) -> Tensor:
        """x (..., sizes[0]) -> logits (..., sizes[-1]), of x's dtype."""
        raise NotImplementedError('Exercise 1.8: Linear, MLP and SGD — see 01_autograd.ipynb')
