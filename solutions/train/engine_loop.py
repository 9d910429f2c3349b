"""The whole training loop by hand, on the stage-01 engine: evaluate and train the MLP LM."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from solutions.autograd import SGD as PlainSGD, cross_entropy, no_grad
from solutions.checks import check_ints

from .clip import clip_grad_norm
from .mlp_lm import MLPLanguageModel, sample_contexts
from .schedule import lr_schedule


def evaluate_mlp_lm(model: MLPLanguageModel, tokens: np.ndarray, max_windows: int = 4096) -> float:
    """Mean next-token cross-entropy (nats, a float) of the model on a token stream.

    Deterministic: the mean over the first n = min(max_windows, N - context) windows, at
    offsets 0, 1, ..., n-1 (window s = tokens[s : s+context], target tokens[s+context]), each
    once. No graph is recorded and no parameter's grad changes. Two calls agree exactly.
    ValueError: max_windows not an int >= 1; the stream holds no window (N <= context).
    """
    check_ints(1, max_windows=max_windows)
    tokens = np.asarray(tokens)
    n = min(max_windows, len(tokens) - model.context)
    if n < 1:
        raise ValueError(f"a stream of {len(tokens)} tokens holds no window of {model.context} + 1")
    # BEGIN SOLUTION 3.6
    # DECISION: what one step must guarantee: the gradient stepped on is this batch's alone (nothing
    #   left from the previous step), clipped before the update, with step k's learning rate set
    #   before it; one generator for the whole run; when to evaluate (every eval_every steps and
    #   after the last, once).
    # HINT: The windows of sample_contexts, but at the fixed offsets 0 .. n-1 instead of
    #   random ones: the same gather with starts = np.arange(n).
    # HINT: Run the forward and cross_entropy inside `with no_grad():` and return .item().
    starts = np.arange(n)
    X = tokens[starts[:, None] + np.arange(model.context)].astype(np.int64)
    Y = tokens[starts + model.context].astype(np.int64)
    with no_grad():
        return cross_entropy(model(X), Y).item()
    # END SOLUTION


def train_mlp_lm(model: MLPLanguageModel, optimizer: PlainSGD, train_tokens: np.ndarray,
                 val_tokens: np.ndarray, *, steps: int, batch_size: int = 64, max_lr: float = 3e-3,
                 warmup_steps: int = 20, min_lr: float = 3e-4, max_norm: float = 1.0,
                 eval_every: int = 50, seed: int = 0,
                 log: Callable[[str], None] | None = print) -> dict[str, list[float]]:
    """Train the engine's MLP LM for `steps` optimizer steps; returns the history (a dict of lists).

    Step k = 0 .. steps-1 is taken at lr = lr_schedule(k, max_lr=, warmup_steps=,
    total_steps=steps, min_lr=) (the `optimizer.lr` its `optimizer.step()` reads), on the
    batch `sample_contexts(train_tokens, batch_size, model.context, rng)` that is the k-th draw
    of ONE rng = np.random.default_rng(seed) for the whole run: the same seed and model give
    the same history (equal, not just close). The update of step k uses the gradient of step
    k's batch loss alone (gradients of earlier steps never add into it), clipped to global
    norm `max_norm`.
    History keys, one entry per step: "step" (k + 1), "loss" (the batch loss, a float), "lr",
    "grad_norm" (the norm before clipping). Evaluations: every `eval_every` steps AND after the
    last step (once, if both), `evaluate_mlp_lm(model, val_tokens)` of the weights after that
    step, appended to "val_loss", with k + 1 in "val_step"; each one also calls `log` with one
    line (a str naming the step, train and val loss), unless `log` is None.
    ValueError: steps, batch_size or eval_every not an int >= 1.
    """
    check_ints(1, steps=steps, batch_size=batch_size, eval_every=eval_every)
    history: dict[str, list[float]] = {"step": [], "loss": [], "lr": [], "grad_norm": [],
                                       "val_step": [], "val_loss": []}
    # BEGIN SOLUTION 3.6
    # HINT: The engine's backward adds into .grad, and clip_grad_norm and optimizer.step read
    #   .grad: decide what .grad must hold when each of them reads it.
    # HINT: One step is: set optimizer.lr, draw a batch, forward and cross_entropy,
    #   optimizer.zero_grad(), loss.backward(), clip_grad_norm, optimizer.step().
    # HINT: Make the rng once, before the loop, and evaluate when (k + 1) % eval_every == 0
    #   OR k + 1 == steps: the last step is evaluated even when steps is no multiple.
    rng = np.random.default_rng(seed)
    params = list(model.parameters())
    for step in range(steps):
        optimizer.lr = lr_schedule(step, max_lr=max_lr, warmup_steps=warmup_steps, total_steps=steps,
                                   min_lr=min_lr)
        X, Y = sample_contexts(train_tokens, batch_size, model.context, rng)
        loss = cross_entropy(model(X), Y)
        optimizer.zero_grad()
        loss.backward()
        norm = clip_grad_norm(params, max_norm)
        optimizer.step()
        history["step"].append(step + 1)
        history["loss"].append(loss.item())
        history["lr"].append(optimizer.lr)
        history["grad_norm"].append(norm)
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            val = evaluate_mlp_lm(model, val_tokens)
            history["val_step"].append(step + 1)
            history["val_loss"].append(val)
            if log is not None:
                log(f"step {step + 1:>5}: train loss {loss.item():.3f}, val loss {val:.3f}, lr {optimizer.lr:.2e}")
    return history
    # END SOLUTION
