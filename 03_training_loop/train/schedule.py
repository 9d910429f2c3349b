# GENERATED from solutions/train/schedule.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.3 Warmup + cosine learning-rate schedule: line 34; `course check 3.3`, `course hint 3.3`
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
    raise NotImplementedError('Exercise 3.3: Warmup + cosine learning-rate schedule — see 03_training_loop.ipynb')
