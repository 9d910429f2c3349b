"""The learning-rate schedule of both parts of the stage: linear warmup, then cosine decay."""

from __future__ import annotations

import math

from solutions.checks import check_int


def lr_schedule(step: int, *, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> float:
    """The learning rate (a float) for optimizer step `step`, 0-based. A pure function.

    - the first `warmup_steps` steps warm up along a straight line that never gives 0: step 0
      gets max_lr / warmup_steps, step warmup_steps - 1 gets max_lr (warmup_steps == 0: none);
    - steps warmup_steps .. total_steps - 1 follow half a cosine period, from max_lr at step
      warmup_steps down towards min_lr, which it would reach at step total_steps (halfway
      between those two steps the rate is the mean of max_lr and min_lr);
    - every step from total_steps on gets min_lr (warmup_steps == total_steps: no cosine).
    Equal (to 1e-9) to PyTorch's LinearLR(start_factor=1/warmup_steps, total_iters=max(1,
    warmup_steps - 1)) over the warmup steps, then CosineAnnealingLR(T_max=total_steps -
    warmup_steps, eta_min=min_lr).
    ValueError: step not an int >= 0 (NumPy integers are ints; bools and floats are not),
    unless 0 <= warmup_steps <= total_steps and total_steps >= 1, unless 0 <= min_lr <= max_lr.
    """
    check_int("step", step, 0)
    if not 0 <= warmup_steps <= total_steps or total_steps < 1:
        raise ValueError(f"need 0 <= warmup_steps <= total_steps and total_steps >= 1, got "
                         f"warmup_steps={warmup_steps}, total_steps={total_steps}")
    if not 0 <= min_lr <= max_lr:
        raise ValueError(f"need 0 <= min_lr <= max_lr, got min_lr={min_lr}, max_lr={max_lr}")
    # BEGIN SOLUTION 3.3
    # DECISION: the boundaries: which steps are warmup (step < warmup_steps, counted from 1 so step
    #   0 moves), where the cosine's progress is 0 and 1, and what happens when warmup_steps ==
    #   total_steps (no division by zero: the floor).
    # HINT: Three regimes decided by `step`: warmup, cosine, floor; return from each.
    # HINT: Warmup counts step + 1, so the very first step already moves (never lr 0): max_lr *
    #   (step + 1) / warmup_steps.
    # HINT: The cosine's progress is 0 at warmup_steps and 1 at total_steps: progress = (step -
    #   warmup_steps) / (total_steps - warmup_steps); lr = min_lr + (max_lr - min_lr) * (1 + cos(pi
    #   * progress)) / 2. Guard the division when total_steps == warmup_steps (that step is already
    #   the floor).
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))
    # END SOLUTION
