"""Stage 01: a reverse-mode automatic differentiation engine on NumPy arrays.

The idea (micrograd's, at array level): every operation on a `Tensor` remembers its inputs
and a small function that turns the gradient of its output into gradients of its inputs:
one local step of the chain rule. `loss.backward()` walks that recorded graph from the loss
back to the leaves, in reverse topological order, calling those functions, and leaves
d(loss)/d(leaf) in each leaf's `.grad`.

    x = Tensor(np.random.randn(4, 3))                    # data: no gradient wanted
    w = Tensor(np.random.randn(3, 2), requires_grad=True)
    loss = (x @ w).relu().sum()
    loss.backward()                                      # w.grad: shape (3, 2), like w

Conventions, the same as PyTorch's:
- gradients of non-leaf tensors are not kept: only leaves (tensors you made with
  `requires_grad=True`) get a `.grad`;
- `.grad` accumulates: a second `backward()` adds to it, `zero_grad()` resets it;
- operations inside `with no_grad():` record nothing.

Exercises: 1.1 backward, 1.2 arithmetic with broadcasting, 1.3 reductions, 1.4 matmul,
1.5 shapes and indexing, 1.6 nonlinearities, 1.7 softmax and cross-entropy, 1.8 modules.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np

# One step of the chain rule: the gradient of an op's output in, one gradient (or None)
# per input out, each with that input's shape.
BackwardFn = Callable[[np.ndarray], Sequence["np.ndarray | None"]]

_grad_enabled = True


class no_grad:
    """`with no_grad():` operations inside record no graph (evaluation, optimiser updates).

    Nests: the previous mode is restored on exit.
    """

    def __enter__(self) -> "no_grad":
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


# ---------------------------------------------------------------------- 1.1 graph order
def topological_order(root: Tensor) -> list[Tensor]:
    """Every tensor `root` depends on that requires grad, each after all of its parents.

    A depth-first search that appends a node once all its parents are appended (post-
    order), with an explicit stack instead of recursion, so that a chain of 10,000 ops
    does not hit Python's recursion limit. Reversed, it is the order backward needs.
    """
    # BEGIN SOLUTION 1.1
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


class Tensor:
    """An n-dimensional array that remembers how it was computed.

    `Tensor(data, requires_grad=False)`: `data` is a NumPy array, a Python number or a
    (nested) list of numbers. Floating-point arrays keep their dtype and are NOT copied (the
    tensor shares memory with the array, like `torch.from_numpy`); Python numbers, booleans
    and integer arrays become float64.

    Attributes: `.data` (the ndarray), `.grad` (an ndarray of `.data`'s shape and dtype, or
    None), `.requires_grad`, and for tensors made by an operation `._parents` (its inputs)
    and `._backward` (its chain-rule step, see `Tensor.from_op`).
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
    def from_op(data: np.ndarray, parents: tuple["Tensor", ...], backward: BackwardFn) -> "Tensor":
        """The result of an operation: `data`, computed from `parents`.

        `backward(g)` gets the gradient of the loss with respect to this result (shape of
        `data`) and returns one gradient per parent, in order, each of that parent's shape
        (None for a parent that needs none). It must not write into `g`: the same array may
        be handed to several parents.

        The graph is recorded only if gradients are enabled and some parent requires a
        gradient; otherwise the result is a plain constant, and building it costs nothing
        more than computing `data`. Every operation in this module ends with this call.
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

    def detach(self) -> "Tensor":
        """A tensor sharing this one's data, cut from the graph (no gradient flows back)."""
        return Tensor(self.data)

    def zero_grad(self) -> None:
        """Forget the accumulated gradient (set it to None, as PyTorch does by default)."""
        self.grad = None

    # ------------------------------------------------------------------ 1.1 backward
    def backward(self, grad: "np.ndarray | Tensor | float | None" = None) -> None:
        """Backpropagate from this tensor: add d(self)/d(leaf) . grad to every leaf's `.grad`.

        `grad` is the gradient of some final quantity with respect to this tensor; for a
        one-element tensor (a loss) it defaults to 1. It is cast to this tensor's dtype.

        The one idea: visit the nodes in reverse topological order (a node after everything
        that consumes it), so a node's gradient is complete (summed over all its consumers)
        before its `_backward` passes it on.

        - The seed: ones for a one-element tensor, else a copy of `grad` in this tensor's
          dtype; a seed of the wrong shape is a ValueError naming both shapes.
        - Gradients of intermediate nodes live in a dict {id(node): array} for this pass
          only (they are not kept, as in PyTorch). A parent's entry is created or added to,
          never written into in place: an array may be shared (`a + b` hands g to both).
          Cast each gradient to its parent's dtype.
        - A leaf (no `_backward`) keeps its gradient: hand it to `_keep_leaf_grad(node, g,
          kept)` (given code below; `kept` is one empty set per pass), which adds it to
          `.grad` without ever letting two leaves share one array.
        """
        if not self.requires_grad:
            raise ValueError("backward() on a tensor that does not require grad: no input of its "
                             "graph was made with requires_grad=True (or it was built under no_grad)")
        if grad is None:
            if self.data.size != 1:
                raise ValueError(f"backward() without a gradient needs a one-element output, got shape "
                                 f"{self.shape}; pass grad= of that shape")
        elif isinstance(grad, Tensor):
            grad = grad.data
        # BEGIN SOLUTION 1.1
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

    # ------------------------------------------------------------------ 1.2 arithmetic
    def __add__(self, other: object) -> "Tensor":
        """a + b, with NumPy broadcasting (the other operand: Tensor, number or ndarray).

        Backward: g goes to both inputs, each summed back to its own shape by
        `_unbroadcast`. Compute the forward with `_apply(np.add, a, b, "+")` (a mismatch then
        names both shapes), record it with `Tensor.from_op`, and return None instead of a
        gradient for an input that does not require one.
        """
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        # BEGIN SOLUTION 1.2
        a, b = self, other
        data = _apply(np.add, a, b, "+")

        def backward(g: np.ndarray):
            return (_unbroadcast(g, a.shape) if a.requires_grad else None,
                    _unbroadcast(g, b.shape) if b.requires_grad else None)

        return Tensor.from_op(data, (a, b), backward)
        # END SOLUTION

    def __sub__(self, other: object) -> "Tensor":
        """a - b, broadcasting. Backward: g and -g (each unbroadcast)."""
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        # BEGIN SOLUTION 1.2
        a, b = self, other
        data = _apply(np.subtract, a, b, "-")

        def backward(g: np.ndarray):
            return (_unbroadcast(g, a.shape) if a.requires_grad else None,
                    _unbroadcast(-g, b.shape) if b.requires_grad else None)

        return Tensor.from_op(data, (a, b), backward)
        # END SOLUTION

    def __mul__(self, other: object) -> "Tensor":
        """a * b, broadcasting. Backward: g * b and g * a (each unbroadcast)."""
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        # BEGIN SOLUTION 1.2
        a, b = self, other
        data = _apply(np.multiply, a, b, "*")

        def backward(g: np.ndarray):
            return (_unbroadcast(g * b.data, a.shape) if a.requires_grad else None,
                    _unbroadcast(g * a.data, b.shape) if b.requires_grad else None)

        return Tensor.from_op(data, (a, b), backward)
        # END SOLUTION

    def __truediv__(self, other: object) -> "Tensor":
        """a / b, broadcasting. Backward: g / b and -g * a / b**2 (each unbroadcast)."""
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        # BEGIN SOLUTION 1.2
        a, b = self, other
        data = _apply(np.divide, a, b, "/")

        def backward(g: np.ndarray):
            ga = g / b.data
            # d(a/b)/db = -a/b**2 = -(a/b)/b: reuse the forward result
            return (_unbroadcast(ga, a.shape) if a.requires_grad else None,
                    _unbroadcast(-ga * data, b.shape) if b.requires_grad else None)

        return Tensor.from_op(data, (a, b), backward)
        # END SOLUTION

    def __pow__(self, other: object) -> "Tensor":
        """a ** b, broadcasting; b may be a tensor too.

        Backward: g * b * a**(b-1) for the base, and g * a**b * log(a) for the exponent
        (compute it only when the exponent requires grad: log needs a > 0).
        """
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        # BEGIN SOLUTION 1.2
        a, b = self, other
        data = _apply(np.power, a, b, "**")

        def backward(g: np.ndarray):
            ga = gb = None
            if a.requires_grad:  # d(a**b)/da = b * a**(b-1)
                ga = _unbroadcast(g * b.data * a.data ** (b.data - 1), a.shape)
            if b.requires_grad:  # d(a**b)/db = a**b * log(a)  (defined for a > 0)
                gb = _unbroadcast(g * data * np.log(a.data), b.shape)
            return ga, gb

        return Tensor.from_op(data, (a, b), backward)
        # END SOLUTION

    def __neg__(self) -> "Tensor":
        """-a. Backward: -g."""
        # BEGIN SOLUTION 1.2
        return Tensor.from_op(-self.data, (self,), lambda g: (-g,))
        # END SOLUTION

    # Reflected forms (`2 * t`, `1 - t`, `array @ t`): lift the left operand, reuse the op.
    def __radd__(self, other: object) -> "Tensor":
        return self.__add__(other)

    def __rmul__(self, other: object) -> "Tensor":
        return self.__mul__(other)

    def __rsub__(self, other: object) -> "Tensor":
        other = _as_operand(other, self)
        return NotImplemented if other is None else other.__sub__(self)

    def __rtruediv__(self, other: object) -> "Tensor":
        other = _as_operand(other, self)
        return NotImplemented if other is None else other.__truediv__(self)

    def __rpow__(self, other: object) -> "Tensor":
        other = _as_operand(other, self)
        return NotImplemented if other is None else other.__pow__(self)

    def __rmatmul__(self, other: object) -> "Tensor":
        other = _as_operand(other, self)
        return NotImplemented if other is None else other.__matmul__(self)

    # ------------------------------------------------------------------ 1.3 reductions
    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> "Tensor":
        """Sum over `axis` (an int, a tuple of ints, or None for all axes).

        Backward: every input element contributed once to its sum, so each gets the
        gradient of the sum it went into: put the reduced axes back (size 1) and
        broadcast g to the input's shape.
        """
        axes = _normalize_axes(axis, self.ndim)
        # BEGIN SOLUTION 1.3
        data = self.data.sum(axis=axes, keepdims=keepdims)
        shape = self.shape

        def backward(g: np.ndarray):
            if not keepdims:
                g = np.expand_dims(g, axes)
            return (np.broadcast_to(g, shape),)

        return Tensor.from_op(data, (self,), backward)
        # END SOLUTION

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> "Tensor":
        """Mean over `axis`: the sum divided by the number of elements summed."""
        axes = _normalize_axes(axis, self.ndim)
        count = int(np.prod([self.shape[i] for i in axes]))
        if count == 0:
            raise ValueError(f"mean over axis {axis} of a tensor of shape {self.shape}: no elements")
        # BEGIN SOLUTION 1.3
        return self.sum(axes, keepdims) * (1.0 / count)
        # END SOLUTION

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> "Tensor":
        """Maximum over `axis`.

        Backward: only the element(s) that are the maximum moved the output; where several
        tie, they share the gradient equally (like `torch.amax`).
        """
        axes = _normalize_axes(axis, self.ndim)
        if self.data.size == 0:
            raise ValueError(f"max of an empty tensor (shape {self.shape})")
        # BEGIN SOLUTION 1.3
        x = self.data
        data = x.max(axis=axes, keepdims=keepdims)

        def backward(g: np.ndarray):
            top = data if keepdims else np.expand_dims(data, axes)
            if not keepdims:
                g = np.expand_dims(g, axes)
            winners = x == top
            ties = winners.sum(axis=axes, keepdims=True, dtype=g.dtype)
            return (winners * (g / ties),)

        return Tensor.from_op(data, (self,), backward)
        # END SOLUTION

    # ------------------------------------------------------------------ 1.4 matmul
    def __matmul__(self, other: object) -> "Tensor":
        """Matrix product, 2-D or batched: (..., n, k) @ (..., k, m) -> (..., n, m).

        Leading (batch) axes broadcast like elementwise ops. Backward, per matrix:
        dA = dC @ B^T and dB = A^T @ dC, then summed back over broadcast batch axes.
        """
        other = _as_operand(other, self)
        if other is None:
            return NotImplemented
        if self.ndim < 2 or other.ndim < 2:
            raise ValueError(f"@ needs operands with at least 2 dimensions, got shapes "
                             f"{self.shape} and {other.shape}")
        # BEGIN SOLUTION 1.4
        a, b = self, other
        data = _apply(np.matmul, a, b, "@")

        def backward(g: np.ndarray):
            ga = gb = None
            if a.requires_grad:
                ga = _unbroadcast(g @ np.swapaxes(b.data, -1, -2), a.shape)
            if b.requires_grad:
                if b.ndim == 2:  # one matrix shared by the whole batch: fold batch into rows
                    k, m = a.shape[-1], g.shape[-1]
                    gb = a.data.reshape(-1, k).T @ g.reshape(-1, m)
                else:
                    gb = _unbroadcast(np.swapaxes(a.data, -1, -2) @ g, b.shape)
            return ga, gb

        return Tensor.from_op(data, (a, b), backward)
        # END SOLUTION

    # ------------------------------------------------------------------ 1.5 shapes, indexing
    def reshape(self, *shape: int | Sequence[int]) -> "Tensor":
        """The same elements in a new shape: `t.reshape(2, -1)` or `t.reshape((2, -1))`."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        # BEGIN SOLUTION 1.5
        try:
            data = self.data.reshape(shape)
        except ValueError:
            raise ValueError(f"cannot reshape a tensor of shape {self.shape} "
                             f"({self.size} elements) into {tuple(shape)}") from None
        in_shape = self.shape
        return Tensor.from_op(data, (self,), lambda g: (g.reshape(in_shape),))
        # END SOLUTION

    def transpose(self, *axes: int) -> "Tensor":
        """Permute the axes (reverse them when none are given), like `ndarray.transpose`."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(range(self.ndim))[::-1]
        perm = tuple(ax + self.ndim if isinstance(ax, int) and ax < 0 else ax for ax in axes)
        if sorted(perm) != list(range(self.ndim)):
            raise ValueError(f"transpose axes {axes} are not a permutation of the axes of shape {self.shape}")
        # BEGIN SOLUTION 1.5
        inverse = tuple(np.argsort(perm))
        return Tensor.from_op(self.data.transpose(perm), (self,), lambda g: (g.transpose(inverse),))
        # END SOLUTION

    @property
    def T(self) -> "Tensor":
        """All axes reversed; the matrix transpose for a 2-D tensor."""
        return self.transpose()

    def __getitem__(self, index: object) -> "Tensor":
        """NumPy indexing: ints, slices, None, Ellipsis, integer and boolean arrays.

        Backward scatters g into a zero array of the input's shape at the indexed places.
        An integer array may pick the same element twice (`t[[0, 0]]`), and then both
        gradients must be added: `np.add.at` accumulates, where `zeros[index] = g` would
        keep only the last.
        """
        items = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, Tensor) for i in items):
            raise TypeError("index a Tensor with ints, slices or integer ndarrays, not with a Tensor")
        # BEGIN SOLUTION 1.5
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

        return Tensor.from_op(data, (self,), backward)
        # END SOLUTION

    # ------------------------------------------------------------------ 1.6 nonlinearities
    def exp(self) -> "Tensor":
        """e**x; its derivative is itself."""
        # BEGIN SOLUTION 1.6
        data = np.exp(self.data)
        return Tensor.from_op(data, (self,), lambda g: (g * data,))
        # END SOLUTION

    def log(self) -> "Tensor":
        """Natural logarithm; d/dx = 1/x."""
        # BEGIN SOLUTION 1.6
        x = self.data
        return Tensor.from_op(np.log(x), (self,), lambda g: (g / x,))
        # END SOLUTION

    def tanh(self) -> "Tensor":
        """Hyperbolic tangent; d/dx = 1 - tanh(x)**2, from the output."""
        # BEGIN SOLUTION 1.6
        data = np.tanh(self.data)
        return Tensor.from_op(data, (self,), lambda g: (g * (1 - data * data),))
        # END SOLUTION

    def relu(self) -> "Tensor":
        """max(x, 0); the gradient passes where x > 0 and is 0 elsewhere."""
        # BEGIN SOLUTION 1.6
        data = np.maximum(self.data, 0)
        return Tensor.from_op(data, (self,), lambda g: (g * (data > 0),))
        # END SOLUTION

    def sigmoid(self) -> "Tensor":
        """1 / (1 + e**-x), computed as (1 + tanh(x/2)) / 2, which cannot overflow.

        d/dx = s (1 - s), from the output s.
        """
        # BEGIN SOLUTION 1.6
        data = np.tanh(self.data * 0.5)
        data += 1
        data *= 0.5
        return Tensor.from_op(data, (self,), lambda g: (g * data * (1 - data),))
        # END SOLUTION


# ---------------------------------------------------------------------- helpers for the ops
def _as_operand(value: object, like: Tensor) -> Tensor | None:
    """The other operand of a binary op as a Tensor, or None if it is not supported.

    Python and NumPy numbers take `like`'s dtype (so `x32 * 2.0` stays float32, as in
    PyTorch); arrays follow `Tensor`'s rule. Returning None lets the op return
    NotImplemented, and Python then raises its TypeError naming both operand types.
    """
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (int, float, np.integer, np.floating)):
        return Tensor(np.asarray(value, dtype=like.dtype))
    if isinstance(value, np.ndarray):
        return Tensor(value)
    return None


def _apply(ufunc: np.ufunc, a: Tensor, b: Tensor, symbol: str) -> np.ndarray:
    """`ufunc(a.data, b.data)`, with a ValueError naming both shapes when they don't fit."""
    try:
        return ufunc(a.data, b.data)
    except ValueError:
        raise ValueError(f"shapes {a.shape} and {b.shape} do not fit for {symbol}") from None


def _normalize_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """`axis` as a sorted tuple of non-negative axes (all axes for None)."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axes: tuple = (axis,)
    elif isinstance(axis, (tuple, list)):
        axes = tuple(axis)
    else:
        raise TypeError(f"axis must be an int or a tuple of ints, got {axis!r}")
    for ax in axes:
        if not isinstance(ax, (int, np.integer)) or isinstance(ax, bool):
            raise TypeError(f"axis must be an int or a tuple of ints, got {axis!r}")
        if not -ndim <= ax < ndim:
            raise ValueError(f"axis {ax} is out of range for a tensor with {ndim} dimensions")
    normalized = tuple(sorted(int(ax) % ndim for ax in axes))
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"repeated axis in {axis!r}")
    return normalized


def _one_axis(axis: int, ndim: int) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"axis must be an int, got {axis!r}")
    return _normalize_axes(axis, ndim)[0]


def _unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum `grad` down to `shape`: the backward of NumPy's broadcasting.

    An input broadcast along an axis fed every position of that axis, so its gradient
    is the sum over that axis: sum the leading axes the input did not have, and the axes
    where the input had size 1 (keeping them), then drop the leading ones.
    """
    # BEGIN SOLUTION 1.2
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1)
    summed = grad.sum(axis=axes)
    return summed if summed.shape == shape else summed.reshape(shape)
    # END SOLUTION


def _to_tensor(x: object, what: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return Tensor(x)
    raise TypeError(f"{what} must be a Tensor or an ndarray, got {type(x).__name__}")


# ---------------------------------------------------------------------- 1.7 softmax, loss
def _log_softmax_data(x: np.ndarray, axis: int) -> np.ndarray:
    """log(softmax(x)) along `axis` without overflow.

    log_softmax(x) = x - log(sum(exp(x))), and subtracting the maximum m first changes
    nothing (it cancels) but keeps every exponent <= 0: x - m - log(sum(exp(x - m))).
    """
    # BEGIN SOLUTION 1.7
    shifted = x - x.max(axis=axis, keepdims=True)
    shifted -= np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return shifted
    # END SOLUTION


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`, stable for large inputs.

    Backward with s = softmax(x): dx = s * (g - sum(g * s)), the sum along `axis`.
    """
    x = _to_tensor(x, "softmax input")
    axis = _one_axis(axis, x.ndim)
    # BEGIN SOLUTION 1.7
    data = np.exp(_log_softmax_data(x.data, axis))

    def backward(g: np.ndarray):
        return (data * (g - (g * data).sum(axis=axis, keepdims=True)),)

    return Tensor.from_op(data, (x,), backward)
    # END SOLUTION


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """log(softmax(x)) along `axis`, stable for large inputs.

    Backward: dx = g - softmax(x) * sum(g), the sum along `axis`.
    """
    x = _to_tensor(x, "log_softmax input")
    axis = _one_axis(axis, x.ndim)
    # BEGIN SOLUTION 1.7
    data = _log_softmax_data(x.data, axis)

    def backward(g: np.ndarray):
        return (g - np.exp(data) * g.sum(axis=axis, keepdims=True),)

    return Tensor.from_op(data, (x,), backward)
    # END SOLUTION


def cross_entropy(logits: Tensor, targets: np.ndarray | Sequence[int]) -> Tensor:
    """Mean negative log-likelihood of integer class `targets` under softmax(`logits`).

    logits: (B, C); targets: (B,) ints in [0, C). Returns a scalar tensor.

    One fused op instead of log_softmax + indexing + mean: its backward is simply
    (softmax(logits) - onehot(targets)) / B, one (B, C) array, no graph of small steps.
    """
    logits = _to_tensor(logits, "cross_entropy logits")
    if isinstance(targets, Tensor):
        raise TypeError("cross_entropy targets must be an integer ndarray of class ids, not a Tensor")
    targets = np.asarray(targets)
    if logits.ndim != 2:
        raise ValueError(f"cross_entropy needs logits of shape (batch, classes), got {logits.shape}")
    batch, classes = logits.shape
    if targets.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy targets must be integer class ids, got dtype {targets.dtype}")
    if targets.shape != (batch,):
        raise ValueError(f"cross_entropy targets must have shape ({batch},) for logits {logits.shape}, "
                         f"got {targets.shape}")
    if batch == 0:
        raise ValueError("cross_entropy of an empty batch")
    if targets.min() < 0 or targets.max() >= classes:
        bad = targets[(targets < 0) | (targets >= classes)][0]
        raise ValueError(f"cross_entropy target {bad} is not a class id in [0, {classes})")
    # BEGIN SOLUTION 1.7
    rows = np.arange(batch)
    logp = _log_softmax_data(logits.data, axis=1)
    data = -logp[rows, targets].mean()

    def backward(g: np.ndarray):
        grad = np.exp(logp)  # softmax, a fresh array we may write into
        grad[rows, targets] -= 1
        grad *= g / batch
        return (grad,)

    return Tensor.from_op(data, (logits,), backward)
    # END SOLUTION


# ---------------------------------------------------------------------- 1.8 modules
class Module:
    """A container of parameters, like `torch.nn.Module`, much reduced.

    `parameters()` finds every Tensor attribute that requires grad, and those of every
    Module attribute (or list/tuple of Modules), depth first, each once.
    Calling a module calls its `forward`.
    """

    def parameters(self) -> Iterator[Tensor]:
        seen: set[int] = set()
        for p in self._walk():
            if id(p) not in seen:
                seen.add(id(p))
                yield p

    def _walk(self) -> Iterator[Tensor]:
        for value in vars(self).values():
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items:
                if isinstance(item, Tensor) and item.requires_grad:
                    yield item
                elif isinstance(item, Module):
                    yield from item._walk()

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.zero_grad()

    def forward(self, *args: object) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: object) -> Tensor:
        return self.forward(*args)


class Linear(Module):
    """y = x @ weight + bias, for x of shape (..., in_features).

    weight: (in_features, out_features), stored this way round so that the forward needs
    no transpose (PyTorch stores its transpose, (out, in)). Initialisation as PyTorch's
    default: weight and bias uniform in [-1/sqrt(in_features), 1/sqrt(in_features)], so
    that each output starts with a variance that does not grow with the fan-in.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 rng: "np.random.Generator | int | None" = None, dtype: "np.dtype | type" = np.float32) -> None:
        if in_features < 1 or out_features < 1:
            raise ValueError(f"Linear needs positive sizes, got in_features={in_features}, "
                             f"out_features={out_features}")
        rng = np.random.default_rng(rng)
        bound = 1.0 / np.sqrt(in_features)
        self.weight = Tensor(rng.uniform(-bound, bound, (in_features, out_features)).astype(dtype),
                             requires_grad=True)
        self.bias = (Tensor(rng.uniform(-bound, bound, out_features).astype(dtype), requires_grad=True)
                     if bias else None)

    def forward(self, x: Tensor) -> Tensor:
        # BEGIN SOLUTION 1.8
        out = x @ self.weight
        return out if self.bias is None else out + self.bias
        # END SOLUTION


class MLP(Module):
    """A multi-layer perceptron: Linear layers of `sizes` (e.g. [784, 256, 256, 10]) with
    `activation` ("relu" or "tanh") between them and none after the last (it gives logits).

    One generator made from `rng` initialises the layers in order, so a seed fixes them all.
    """

    def __init__(self, sizes: Sequence[int], activation: str = "relu", *,
                 rng: "np.random.Generator | int | None" = None, dtype: "np.dtype | type" = np.float32) -> None:
        sizes = list(sizes)
        if len(sizes) < 2:
            raise ValueError(f"MLP needs at least an input and an output size, got sizes={sizes}")
        if activation not in ("relu", "tanh"):
            raise ValueError(f"activation must be 'relu' or 'tanh', got {activation!r}")
        self.activation = activation
        # BEGIN SOLUTION 1.8
        rng = np.random.default_rng(rng)
        self.layers = [Linear(i, o, rng=rng, dtype=dtype) for i, o in zip(sizes[:-1], sizes[1:])]
        # END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        # BEGIN SOLUTION 1.8
        for layer in self.layers[:-1]:
            x = layer(x)
            x = x.relu() if self.activation == "relu" else x.tanh()
        return self.layers[-1](x)
        # END SOLUTION


class SGD:
    """Plain stochastic gradient descent: p <- p - lr * p.grad, in place, for every
    parameter that has a gradient. Stage 03 adds momentum and AdamW on the same interface."""

    def __init__(self, params: "Iterator[Tensor] | Sequence[Tensor]", lr: float) -> None:
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
        # BEGIN SOLUTION 1.8
        for p in self.params:
            if p.grad is not None:
                p.data -= self.lr * p.grad
        # END SOLUTION

    def zero_grad(self) -> None:
        for p in self.params:
            p.zero_grad()


# ---------------------------------------------------------------------- data and demo (given)
def make_spirals(n_per_class: int = 100, n_classes: int = 3, noise: float = 0.2,
                 rng: "np.random.Generator | int | None" = 0) -> tuple[np.ndarray, np.ndarray]:
    """Interleaved 2-D spirals: X (N, 2) float32 in about [-1, 1], y (N,) int64 class ids.

    Class c's points sweep out one arm: radius r in [0, 1], angle 4r + 2 pi c / n_classes,
    plus Gaussian noise on the angle. No straight line separates them: a good first test
    that a network learns a non-linear boundary.
    """
    if n_per_class < 1 or n_classes < 2 or noise < 0:
        raise ValueError(f"make_spirals needs n_per_class >= 1, n_classes >= 2, noise >= 0; got "
                         f"{n_per_class}, {n_classes}, {noise}")
    rng = np.random.default_rng(rng)
    r = np.tile(np.linspace(0.0, 1.0, n_per_class), n_classes)
    y = np.repeat(np.arange(n_classes), n_per_class)
    angle = 4.0 * r + 2 * np.pi * y / n_classes + rng.normal(0.0, noise, r.shape)
    X = np.stack([r * np.sin(angle), r * np.cos(angle)], axis=1)
    return X.astype(np.float32), y.astype(np.int64)


def demo() -> None:
    """Train a small MLP on spirals with this engine, then with PyTorch from the same weights.

    float64, so that the two losses agree to the digits printed: the engine computes the
    same function and the same gradients, not merely a similar one.
    """
    import time

    import torch

    # Small on purpose: every matrix product (240 x 32 x 32) stays under the size at which
    # OpenBLAS splits work across threads, so the run takes about a second even on a busy machine.
    X, y = make_spirals(80, 3, rng=0)
    X = X.astype(np.float64)
    sizes, steps, lr = [2, 32, 32, 3], 1000, 0.5

    model = MLP(sizes, rng=0, dtype=np.float64)
    torch_model = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                      torch.nn.ReLU(), torch.nn.Linear(32, 3)).double()
    with torch.no_grad():  # same initial weights (PyTorch stores the transpose)
        for ours, theirs in zip(model.layers, torch_model[::2]):
            theirs.weight.copy_(torch.from_numpy(ours.weight.data.T))
            theirs.bias.copy_(torch.from_numpy(ours.bias.data))

    start = time.perf_counter()
    opt, losses = SGD(model.parameters(), lr=lr), []
    for _ in range(steps):
        loss = cross_entropy(model(Tensor(X)), y)
        model.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    engine_seconds = time.perf_counter() - start

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 64-wide layers: more threads only add synchronisation
    start = time.perf_counter()
    torch_opt, torch_losses = torch.optim.SGD(torch_model.parameters(), lr=lr), []
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    for _ in range(steps):
        torch_loss = torch.nn.functional.cross_entropy(torch_model(Xt), yt)
        torch_opt.zero_grad()
        torch_loss.backward()
        torch_opt.step()
        torch_losses.append(torch_loss.item())
    torch_seconds = time.perf_counter() - start
    torch.set_num_threads(threads)

    print(f"MLP {'-'.join(map(str, sizes))} on {len(X)} spiral points: full-batch SGD, lr {lr}, float64")
    print(f"{'step':>5}  {'engine loss':>12}  {'torch loss':>12}")
    for step in range(0, steps, 200):
        print(f"{step:>5}  {losses[step]:>12.6f}  {torch_losses[step]:>12.6f}")
    print(f"{steps - 1:>5}  {losses[-1]:>12.6f}  {torch_losses[-1]:>12.6f}")
    with no_grad():
        accuracy = (model(Tensor(X)).data.argmax(axis=1) == y).mean()
    print(f"training accuracy {accuracy:.1%}; {steps} steps took {engine_seconds:.2f} s with the engine, "
          f"{torch_seconds:.2f} s with PyTorch")
