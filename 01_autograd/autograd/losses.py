# GENERATED from solutions/autograd/losses.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 01_autograd/01_autograd.ipynb. Exercises in this file (line of each hole, then the commands):
#   1.7 Softmax and cross-entropy: lines 23, 36, 43, 73; `course check 1.7`, `course hint 1.7`
"""Exercise 1.7: softmax, log_softmax and the fused cross-entropy loss."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .reductions import _one_axis
from .tensor import Tensor


def _log_softmax_data(x: np.ndarray, axis: int) -> np.ndarray:
    """log(softmax(x)) along `axis` of a plain array: same shape and dtype.

    Stable: no overflow nor invalid-value warning for any finite x (rows such as
    [1000, 0, -1000] or [5e4, 5e4, 5e4]), and exact where the answer is: [1000, 0, -1000]
    gives [0, -1000, -2000]. Adding a constant to a slice along `axis` changes nothing.
    """
    raise NotImplementedError('Exercise 1.7: Softmax and cross-entropy — see 01_autograd.ipynb')


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis` (one int), as stable as `_log_softmax_data`.

    `x`: a Tensor or an ndarray (anything else is a TypeError; so is an axis that is not one
    int, and one out of range a ValueError naming it: given). One op: its backward gives x
    PyTorch's gradient, of x's shape and dtype, in memory linear in x's size: it never forms
    the (C, C) Jacobian of a slice of C elements (a test measures what backward allocates).
    """
    x = _to_tensor(x, "softmax input")
    axis = _one_axis(axis, x.ndim)
    raise NotImplementedError('Exercise 1.7: Softmax and cross-entropy — see 01_autograd.ipynb')


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """log(softmax(x)) along `axis`: the same contract as `softmax` (memory included)."""
    x = _to_tensor(x, "log_softmax input")
    axis = _one_axis(axis, x.ndim)
    raise NotImplementedError('Exercise 1.7: Softmax and cross-entropy — see 01_autograd.ipynb')


def cross_entropy(logits: Tensor, targets: np.ndarray | Sequence[int]) -> Tensor:
    """Mean over the batch of -log softmax(logits)[b, targets[b]]: PyTorch's `F.cross_entropy`.

    logits: (B, C), a Tensor or an ndarray; targets: (B,) integer class ids in [0, C) (an
    ndarray or a list; a Tensor, floats, another shape, an id out of range or an empty
    batch are errors naming what is wrong: given). Returns a 0-d tensor of the logits'
    dtype, ONE node whose only parent is `logits` (`loss._parents == (logits,)`), not a
    graph of small ops; its backward gives the logits PyTorch's gradient. A prediction
    that is certain and right costs exactly 0.0, with a gradient of exactly 0.
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
    raise NotImplementedError('Exercise 1.7: Softmax and cross-entropy — see 01_autograd.ipynb')


# ---------------------------------------------------------------------- given helpers
def _to_tensor(x: object, what: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return Tensor(x)
    raise TypeError(f"{what} must be a Tensor or an ndarray, got {type(x).__name__}")
