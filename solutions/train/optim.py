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
        # BEGIN SOLUTION 3.1
        # DECISION: where the decay enters (added to the gradient, before the velocity) and what the
        #   first velocity is (the gradient itself: zeros times momentum plus g), and that the
        #   velocity persists across calls while the caller's gradient is never changed.
        # HINT: The penalty weight_decay/2 * ||p||² adds its gradient, weight_decay * p, to the
        #   step's gradient, so the velocity carries the decay too; make that sum a new array
        #   (writing it into p.grad would change the caller's gradient).
        # HINT: Keep one velocity array per parameter (self.velocity) and update it in place,
        #   so it carries over from step to step.
        # HINT: Per parameter with a gradient: g = grad + weight_decay * data, then v = momentum *
        #   v + g, then data -= lr * v.
        for p, v in zip(self.params, self.velocity):
            if p.grad is None:
                continue
            g = p.grad + self.weight_decay * p.data if self.weight_decay else p.grad
            v *= self.momentum
            v += g
            p.data -= self.lr * v
        # END SOLUTION


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
        # BEGIN SOLUTION 3.2
        # DECISION: the order within a step (count t first; decay the weights, not the gradient,
        #   before the Adam update), which moments are stored (uncorrected) and which are used
        #   (bias-corrected), and where eps sits (outside the square root).
        # HINT: Count the step first (self.t += 1): both bias corrections 1 - beta**t use it.
        # HINT: Decay the weights directly (p.data *= 1 - lr * weight_decay) before the Adam update;
        #   the decay never enters m or v. That is torch's order: decaying after the Adam step
        #   moves a weight by lr² * weight_decay * (its step) more, far past 1e-10.
        # HINT: m = beta1 * m + (1 - beta1) * g and v = beta2 * v + (1 - beta2) * g * g, in place.
        # HINT: Divide each by its correction only in the step: p.data -= lr * (m / c1) / (sqrt(v /
        #   c2) + eps). The stored m and v stay uncorrected.
        self.t += 1
        beta1, beta2 = self.betas
        correction1, correction2 = 1 - beta1**self.t, 1 - beta2**self.t
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            g = p.grad
            p.data *= 1 - self.lr * self.weight_decay
            m *= beta1
            m += (1 - beta1) * g
            v *= beta2
            v += (1 - beta2) * g * g
            p.data -= self.lr * (m / correction1) / (np.sqrt(v / correction2) + self.eps)
        # END SOLUTION
