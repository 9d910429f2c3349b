# GENERATED from solutions/train/optim.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.1 SGD with momentum: line 39; `course check 3.1`, `course hint 3.1`
#   3.2 AdamW: line 79; `course check 3.2`, `course hint 3.2`
"""Optimisers on the stage-01 engine, as `torch.optim` does them: SGD with momentum, AdamW."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from solutions.autograd import SGD as PlainSGD, Tensor


class SGD(PlainSGD):
    """Stage 01's SGD (params, `lr` read at each step, zero_grad) plus momentum and L2 decay.

    ValueError unless 0 <= momentum < 1 and weight_decay >= 0. `velocity[i]`, zeros shaped
    like `params[i].data` at first, is parameter i's running velocity.
    """

    def __init__(self, params: Iterable[Tensor], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, lr)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        self.momentum, self.weight_decay = float(momentum), float(weight_decay)
        self.velocity = [np.zeros_like(p.data) for p in self.params]

    def step(self) -> None:
        """One in-place update of each parameter with a gradient: `torch.optim.SGD`'s (dampening 0,
        no Nesterov) to 1e-10, step after step; weight_decay is L2, the penalty weight_decay/2 ·
        ||p||² on the loss. `self.velocity[i]`, zeros at first, is param i's, kept across steps.
        Skips a parameter whose grad is None (data, velocity unchanged); grads stay unmodified.
        """
        raise NotImplementedError('Exercise 3.1: SGD with momentum — see 03_training_loop.ipynb')


class AdamW(PlainSGD):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as `torch.optim.AdamW` does it.

    Shares stage 01's optimiser interface (params, mutable `lr`, zero_grad). ValueError
    unless `betas` is two numbers in [0, 1), eps > 0 and weight_decay >= 0. State: `t`, the
    number of steps taken (0 at first), and `m[i]`, `v[i]`, zeros shaped like
    `params[i].data` at first: parameter i's running mean of gradients and of squared
    gradients.
    """

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        super().__init__(params, lr)
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas}")
        if eps <= 0 or weight_decay < 0:
            raise ValueError(f"eps must be > 0 and weight_decay >= 0, got eps={eps}, weight_decay={weight_decay}")
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps, self.weight_decay = float(eps), float(weight_decay)
        self.t = 0  # steps taken
        self.m = [np.zeros_like(p.data) for p in self.params]
        self.v = [np.zeros_like(p.data) for p in self.params]

    def step(self) -> None:
        """One in-place update of each parameter with a gradient; `torch.optim.AdamW`'s, to 1e-10.

        Each call is one optimizer step, counted in `self.t` (1 after the first call; every call
        counts, with or without gradients): the update of `torch.optim.AdamW` (amsgrad off) with
        the same lr, betas, eps and weight_decay, step after step, also when `self.lr` changes
        between steps (it is read at each step). `m[i]` and `v[i]` hold parameter i's running
        means of g and g² (rates beta1, beta2) WITHOUT bias correction, as torch's `exp_avg`
        and `exp_avg_sq` do. The decay is decoupled: it never enters m or v, and a weight whose
        gradients have all been zero shrinks by exactly the factor 1 - lr * weight_decay a
        step. Bias correction makes the first step move every weight by about lr, whatever the
        gradient's scale. A parameter whose grad is None is skipped entirely (no decay either;
        its m and v unchanged). Grads are not modified.
        """
        raise NotImplementedError('Exercise 3.2: AdamW — see 03_training_loop.ipynb')
