# GENERATED from solutions/train/engine_loop.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.6 The training loop on the engine: lines 33, 60; `course check 3.6`, `course hint 3.6`
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
    raise NotImplementedError('Exercise 3.6: The training loop on the engine — see 03_training_loop.ipynb')


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
    raise NotImplementedError('Exercise 3.6: The training loop on the engine — see 03_training_loop.ipynb')
