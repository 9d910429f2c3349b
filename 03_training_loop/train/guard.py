# GENERATED from solutions/train/guard.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.8 Training step: accumulation and NaN guard: line 24; `course check 3.8`, `course hint 3.8`
"""The guard against a non-finite loss: stop before one NaN step turns every weight into NaN."""

from __future__ import annotations

import math


class NonFiniteLossError(FloatingPointError):
    """Training produced a NaN or infinite loss (or gradient norm) and was stopped."""


def check_finite(value: float, *, step: int, what: str = "loss") -> float:
    """`value` itself if it is finite (any real: 0, negative, huge); else NonFiniteLossError.

    The loop calls it on the loss and the gradient norm BEFORE `optimizer.step()`, so the
    weights and the last checkpoint are still good when it raises. The error's message
    reads "step <step>: the <what> is <value>; ..." (value as str() prints nan, inf or -inf)
    and says what to do next, naming the learning rate ("lower max_lr", warmup, clipping,
    bad data, resume from the last checkpoint). NonFiniteLossError is a FloatingPointError.
    """
    raise NotImplementedError('Exercise 3.8: Training step: accumulation and NaN guard — see 03_training_loop.ipynb')
