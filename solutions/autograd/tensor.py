"""The Tensor: an n-dimensional array that remembers how it was computed; `no_grad`.

Given code. Its operations are the exercises, written in mixin classes of their own files
(backward.py, arithmetic.py, reductions.py, matmul.py, shapes.py, nonlinear.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .arithmetic import ArithmeticMixin
from .backward import BackwardMixin
from .matmul import MatmulMixin
from .nonlinear import NonlinearMixin
from .reductions import ReductionMixin
from .shapes import ShapeMixin

# One step of the chain rule: the gradient of an op's output in, one gradient (or None)
# per input out, each with that input's shape.
BackwardFn = Callable[[np.ndarray], Sequence["np.ndarray | None"]]

_grad_enabled = True


class no_grad:
    """`with no_grad():` operations inside record no graph (evaluation, optimiser updates).

    Nests: the previous mode is restored on exit.
    """

    def __enter__(self) -> no_grad:
        global _grad_enabled
        self._previous = _grad_enabled
        _grad_enabled = False
        return self

    def __exit__(self, *exc: object) -> None:
        global _grad_enabled
        _grad_enabled = self._previous


def is_grad_enabled() -> bool:
    """False inside `no_grad()`."""
    return _grad_enabled


class Tensor(BackwardMixin, ArithmeticMixin, ReductionMixin, MatmulMixin, ShapeMixin, NonlinearMixin):
    """An n-dimensional array that remembers how it was computed.

    `Tensor(data, requires_grad=False)`: `data` is a NumPy array, a Python number or a
    (nested) list of numbers. Floating-point arrays keep their dtype and are NOT copied (the
    tensor shares memory with the array, like `torch.from_numpy`); Python numbers, booleans
    and integer arrays become float64. Anything else (strings, None, complex) is a TypeError,
    and so is a Tensor (use `t.detach()`).

    Attributes: `.data` (the ndarray), `.grad` (an ndarray of `.data`'s shape and dtype, or
    None), `.requires_grad`, and for tensors made by an operation `._parents` (its inputs)
    and `._backward` (its chain-rule step, see `Tensor.from_op`).

    Conventions, the same as PyTorch's: only leaves (tensors made with `requires_grad=True`)
    keep a `.grad`; `.grad` accumulates over `backward()` calls until `zero_grad()`;
    operations inside `with no_grad():` record nothing.
    """

    __slots__ = ("data", "grad", "requires_grad", "_parents", "_backward")
    # NumPy must not treat a Tensor as an array-like: `array + tensor` has to reach
    # Tensor.__radd__ (and record a graph) instead of NumPy looping over it.
    __array_ufunc__ = None

    def __init__(self, data: object, requires_grad: bool = False) -> None:
        if isinstance(data, Tensor):
            raise TypeError("Tensor(...) got a Tensor; use t.detach() to share its data "
                            "or Tensor(t.numpy().copy()) for a copy")
        if isinstance(data, np.ndarray):
            array = data
        elif isinstance(data, (int, float, np.integer, np.floating, np.bool_, list, tuple)):
            array = np.asarray(data)
        else:
            raise TypeError(f"Tensor data must be an ndarray, a number or a list of numbers, "
                            f"got {type(data).__name__}")
        if array.dtype.kind in "biu":
            array = array.astype(np.float64)
        elif array.dtype.kind != "f":
            raise TypeError(f"Tensor data must be real numbers, got dtype {array.dtype}")
        self.data: np.ndarray = array
        self.grad: np.ndarray | None = None
        self.requires_grad = bool(requires_grad)
        self._parents: tuple[Tensor, ...] = ()
        self._backward: BackwardFn | None = None

    @staticmethod
    def from_op(data: np.ndarray, parents: tuple[Tensor, ...], backward: BackwardFn) -> Tensor:
        """The result of an operation: `data`, computed from `parents`.

        `backward(g)` gets the gradient of the loss with respect to this result (shape of
        `data`) and returns one gradient per parent, in order, each of that parent's shape
        (None for a parent that needs none). It must not write into `g`: the same array may
        be handed to several parents.

        The graph is recorded only if gradients are enabled and some parent requires a
        gradient; otherwise the result is a plain constant, and building it costs nothing
        more than computing `data`. Every operation of the engine ends with this call (the
        mixins' methods reach it as `self.from_op`).
        """
        if type(data) is not np.ndarray:  # NumPy turns 0-d results into scalars
            data = np.asarray(data)
        out = Tensor.__new__(Tensor)
        out.data = data
        out.grad = None
        if _grad_enabled and any(p.requires_grad for p in parents):
            out.requires_grad = True
            out._parents = parents
            out._backward = backward
        else:
            out.requires_grad = False
            out._parents = ()
            out._backward = None
        return out

    # ------------------------------------------------------------------ plain properties
    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def size(self) -> int:
        return self.data.size

    def __repr__(self) -> str:
        flag = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({np.array2string(self.data, precision=4, threshold=20)}, dtype={self.dtype}{flag})"

    def item(self) -> float:
        """The value of a one-element tensor as a Python float."""
        if self.data.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return float(self.data.item())

    def numpy(self) -> np.ndarray:
        """The data array itself (shared, not copied)."""
        return self.data

    def detach(self) -> Tensor:
        """A tensor sharing this one's data, cut from the graph (no gradient flows back)."""
        return Tensor(self.data)

    def zero_grad(self) -> None:
        """Forget the accumulated gradient (set it to None, as PyTorch does by default)."""
        self.grad = None
