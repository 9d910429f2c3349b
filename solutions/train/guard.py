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
    # BEGIN SOLUTION 3.8
    # DECISION: where the guard sits (loss and norm checked before optimizer.step, so no weight
    #   changes on a NaN) and how accumulation is scaled (each micro-batch's loss divided by A,
    #   grads zeroed once, the DDP all-reduce only in the last backward).
    # HINT: math.isfinite is False for nan, inf and -inf alike.
    # HINT: The message is what a person reads when a long run dies: start it with
    #   f"step {step}: the {what} is {value}" and then say what to change (the learning rate).
    if not math.isfinite(value):
        raise NonFiniteLossError(
            f"step {step}: the {what} is {value}; stopped before the optimizer step, so the weights "
            "are unchanged. Usual causes: a learning rate too high for this model (lower max_lr or "
            "lengthen the warmup), gradient clipping switched off, or bad data. Resume from the last "
            "checkpoint with a smaller learning rate.")
    return value
    # END SOLUTION
