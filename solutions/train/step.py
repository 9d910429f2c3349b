"""One optimizer step of the GPT over several micro-batches (gradient accumulation), DDP-aware."""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from .distributed import all_reduce_mean
from .guard import check_finite


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer,
               micro_batches: list[tuple[torch.Tensor, torch.Tensor]], *,
               max_norm: float = 1.0, step: int = 0) -> tuple[float, float]:
    """One optimizer step over A micro-batches (x, y): returns (loss, grad norm), two floats.

    The gradient is exactly that of the mean loss over the whole batch: A micro-batches of B
    rows give the step of one batch of A·B rows (to float rounding); gradients left in
    `.grad` before the call do not count. loss = the mean over the A micro-batches of
    `lm_loss(model, x, y)` and over the processes (`all_reduce_mean`'s mean: the same on every
    rank; in one process the local mean); norm = the global gradient norm BEFORE clipping to
    `max_norm`, as `torch.nn.utils.clip_grad_norm_` measures it. With a DDP model the
    gradients are all-reduced once per step, in the LAST micro-batch's backward (`grad_sync`
    switches one backward's all-reduce on or off). A NaN or inf loss or norm raises
    `check_finite`'s NonFiniteLossError (step=step; what="gradient norm" for the norm) and
    no weight changes. ValueError: no micro-batches.
    """
    if not micro_batches:
        raise ValueError("train_step needs at least one micro-batch")
    # BEGIN SOLUTION 3.8
    # HINT: .backward() adds into .grad: decide what each micro-batch must add, and what
    #   .grad must hold before the first one, so that the sum is one big batch's gradient.
    # HINT: Backpropagating each micro-batch's loss divided by A sums, in .grad, to the
    #   gradient of the mean loss: zero the grads once, then backward every micro-batch.
    # HINT: Wrap each forward and backward in `with grad_sync(model, enabled=<last one>):`
    #   and keep a detached running sum of the losses for the step's loss.
    # HINT: After the loop: check the (all-reduced) mean loss, clip and check the norm, and
    #   only then optimizer.step().
    optimizer.zero_grad(set_to_none=True)
    n = len(micro_batches)
    total = torch.zeros(())
    for i, (x, y) in enumerate(micro_batches):
        with grad_sync(model, enabled=i == n - 1):
            loss = lm_loss(model, x, y)
            (loss / n).backward()
        total += loss.detach()
    mean_loss = check_finite(float(all_reduce_mean(total / n)), step=step)
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    check_finite(norm, step=step, what="gradient norm")
    optimizer.step()
    return mean_loss, norm
    # END SOLUTION


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) of a model mapping (B, T) ids to (B, T, V) logits."""
    logits = model(x)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def grad_sync(model: nn.Module, enabled: bool):
    """Context for one micro-batch's backward: with DDP, all-reduce gradients only if `enabled`.

    A DDP model averages gradients across processes inside `backward()`. With gradient
    accumulation that is wasted work on every micro-batch but the last: `model.no_sync()`
    lets the gradients accumulate locally, and the last backward reduces their sum once.
    A plain model has nothing to synchronise.
    """
    if enabled or not isinstance(model, DDP):
        return nullcontext()
    return model.no_sync()
