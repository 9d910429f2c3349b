"""Stage 03: the training loop — optimisers, schedules, clipping, checkpoints, data parallel.

A model learns by repeating one step: draw a batch, compute the loss, backpropagate,
clip the gradients, let the optimiser move the weights with the learning rate the
schedule gives for this step. Part 1 writes every piece of that loop by hand on the
stage-01 NumPy engine and trains a byte-level MLP language model (Bengio et al., 2003).
Part 2 runs the same loop in PyTorch on the course's GPT, adding what a real run needs:
gradient accumulation, evaluation in bits per byte, checkpoints that resume exactly, a
guard against a NaN loss, and data parallelism across processes (`torchrun`).

    python -m solutions.train --preset tiny         # writes out/tiny/gpt.pt (a run folder)
    python -m solutions.train --preset default --replace-default-model   # retrains the
                                                    # committed solutions/assets/gpt_default.pt
    torchrun --nproc_per_node 2 -m solutions.train --preset tiny --data DIR

Exercises: 3.1 SGD with momentum, 3.2 AdamW, 3.3 the learning-rate schedule, 3.4 gradient
clipping, 3.5 the MLP language model, 3.6 the engine's training loop, 3.7 random-window
batches, 3.8 the non-finite guard, 3.9 the training step with gradient accumulation,
3.10 evaluation, 3.11 checkpoints that resume exactly, 3.12 distributed data parallel.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

if __name__ == "__main__":  # the command line only: importing this module changes no setting
    # Idle OpenMP threads sleep instead of spinning (an explicit setting wins). On a machine
    # shared with other jobs, spinning threads take the cores the working threads need, and a
    # 2-thread training step became up to 9x slower than a 1-thread one. The OpenMP runtime
    # reads this once, when torch loads it: so here, before the imports below load torch.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from solutions.autograd import SGD as PlainSGD
from solutions.autograd import Linear, Module, Tensor, cross_entropy, no_grad
from solutions.dedup import build_train_split
from solutions.fileio import atomic_write, check_outputs, load_checked, save_checked, write_text_atomic
from solutions.gpt import DEFAULT_WEIGHTS, GPT, GPTConfig, load_default, save_checkpoint
from solutions.tokenizer import EOT, VOCAB_SIZE, ByteTokenizer

REPO = Path(__file__).resolve().parent.parent
CORPUS_DIR = REPO / "data" / "corpus"  # where stage 02 writes the splits (not committed)
RUNS_DIR = REPO / "out"  # where a run writes what it is not told to write elsewhere (not committed)


def _check_positive(**values: float) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{name} must be a positive number, got {v!r}")


# =========================================================================================
# Part 1 — the loop by hand, on the stage-01 engine
# =========================================================================================

class SGD(PlainSGD):
    """Stage 01's SGD plus momentum and (L2) weight decay, as `torch.optim.SGD` does it.

    Plain SGD follows the gradient of this one batch, which is noisy and zig-zags across
    narrow valleys. Momentum keeps a running velocity per parameter,

        g = grad + weight_decay * p          (L2 decay: a pull toward zero, via the gradient)
        v = momentum * v + g                 (v starts at zero: the first v is g)
        p = p - lr * v

    so directions the gradients agree on build up speed and directions they flip on cancel.
    `lr` may be changed between steps (the schedule does). Parameters without a gradient are
    skipped. Works on any list of engine parameters (Tensors with `.data` and `.grad`).
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
        # BEGIN SOLUTION 3.1
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

    Adam scales each parameter's step by a running estimate of its gradient's size, so
    every parameter moves about `lr` per step whatever the scale of its gradients. Per
    parameter, at step t = 1, 2, ...:

        p = p * (1 - lr * weight_decay)            decoupled decay: shrink the weights directly
        m = beta1 * m + (1 - beta1) * g            mean of the gradients (momentum)
        v = beta2 * v + (1 - beta2) * g * g        mean of the squared gradients
        m_hat = m / (1 - beta1**t)                 bias correction: m and v start at 0, so
        v_hat = v / (1 - beta2**t)                 early averages are too small by exactly this
        p = p - lr * m_hat / (sqrt(v_hat) + eps)

    Why decoupled: in Adam, L2 decay added to g is divided by sqrt(v_hat) like the rest of
    the gradient, so weights with large gradients are hardly decayed at all. Shrinking p
    directly decays every weight at the same rate `lr * weight_decay`.
    Shares stage 01's optimiser interface (params, mutable `lr`, zero_grad); parameters
    without a gradient are skipped.
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
        # BEGIN SOLUTION 3.2
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


def lr_schedule(step: int, *, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> float:
    """The learning rate for optimizer step `step` (0-based): linear warmup, then cosine decay.

    - warmup, steps 0 .. warmup_steps-1: max_lr * (step + 1) / warmup_steps, rising to max_lr.
      At the start the weights are random and Adam's moment estimates rest on a handful of
      batches; full-size steps then can throw the model somewhere it never recovers from.
    - cosine, steps warmup_steps .. total_steps: from max_lr down to min_lr along half a
      cosine, progress = (step - warmup_steps) / (total_steps - warmup_steps):
      lr = min_lr + (max_lr - min_lr) * (1 + cos(pi * progress)) / 2. Big steps while the
      loss falls fast, small ones at the end to settle into the minimum.
    - after total_steps: min_lr (the floor).
    The same function drives both parts of the stage (and matches PyTorch's LinearLR then
    CosineAnnealingLR).
    """
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    if not 0 <= warmup_steps <= total_steps or total_steps < 1:
        raise ValueError(f"need 0 <= warmup_steps <= total_steps and total_steps >= 1, got "
                         f"warmup_steps={warmup_steps}, total_steps={total_steps}")
    if not 0 <= min_lr <= max_lr:
        raise ValueError(f"need 0 <= min_lr <= max_lr, got min_lr={min_lr}, max_lr={max_lr}")
    # BEGIN SOLUTION 3.3
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))
    # END SOLUTION


def clip_grad_norm(params: Iterable[Tensor], max_norm: float) -> float:
    """Scale all gradients together so their global L2 norm is at most `max_norm`, in place.

    The global norm is sqrt(sum over every parameter of sum(grad**2)): all gradients as one
    long vector. If it exceeds max_norm, multiply every gradient by max_norm / (norm + 1e-6)
    (PyTorch's `clip_grad_norm_` formula); otherwise leave them alone. Scaling all of them
    by one factor keeps the step's DIRECTION and only caps its length, so one bad batch
    (a spike in the loss) cannot throw the weights far. Returns the norm before clipping.
    Parameters without a gradient are skipped.
    """
    _check_positive(max_norm=max_norm)
    grads = [p.grad for p in params if p.grad is not None]
    # BEGIN SOLUTION 3.4
    total = math.sqrt(sum(float(np.square(g, dtype=np.float64).sum()) for g in grads))
    scale = max_norm / (total + 1e-6)
    if scale < 1.0:
        for g in grads:
            g *= scale
    return total
    # END SOLUTION


def sample_contexts(tokens: np.ndarray, batch_size: int, context: int,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`batch_size` random (context, next byte) pairs from a token stream.

    tokens: (N,) integer ids. Returns X (batch_size, context) int64, the `context` tokens at
    a random offset s, and Y (batch_size,) int64, the token that follows them, tokens[s+context].
    Every offset 0 <= s <= N - context - 1 is equally likely (draw them with `rng.integers`);
    build X with one fancy-indexing gather (s[:, None] + arange(context)), no Python loop.
    """
    _check_positive(batch_size=batch_size, context=context)
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
        raise ValueError(f"tokens must be a 1-D integer stream, got shape {tokens.shape}, dtype {tokens.dtype}")
    if len(tokens) < context + 1:
        raise ValueError(f"a stream of {len(tokens)} tokens is too short for a context of {context} + 1")
    # BEGIN SOLUTION 3.5
    starts = rng.integers(0, len(tokens) - context, size=batch_size)
    X = tokens[starts[:, None] + np.arange(context)].astype(np.int64)
    Y = tokens[starts + context].astype(np.int64)
    return X, Y
    # END SOLUTION


class MLPLanguageModel(Module):
    """A byte-level neural language model in the style of Bengio et al. (2003).

    The previous `context` tokens predict the next one:

        idx (B, context) -> embedding rows (B, context, embed_dim)
                         -> concatenated   (B, context * embed_dim)
                         -> tanh(Linear)   (B, hidden)
                         -> Linear         (B, vocab_size) logits

    The embedding is a learned (vocab_size, embed_dim) table; looking a token up is
    indexing the table with it, which the engine differentiates (gradients of a row used
    twice add up). Unlike an n-gram count table, similar bytes get similar vectors, so
    what is learned about one context carries over to similar ones.
    """

    def __init__(self, context: int = 8, embed_dim: int = 16, hidden: int = 256,
                 vocab_size: int = VOCAB_SIZE, *, rng: np.random.Generator | int | None = 0) -> None:
        _check_positive(context=context, embed_dim=embed_dim, hidden=hidden, vocab_size=vocab_size)
        rng = np.random.default_rng(rng)
        self.context, self.vocab_size = context, vocab_size
        self.embedding = Tensor(rng.normal(0.0, 1.0, (vocab_size, embed_dim)).astype(np.float32),
                                requires_grad=True)
        self.hidden = Linear(context * embed_dim, hidden, rng=rng)
        self.out = Linear(hidden, vocab_size, rng=rng)

    def forward(self, idx: np.ndarray) -> Tensor:
        """idx: (B, context) integer token ids -> (B, vocab_size) logits for the next token."""
        idx = np.asarray(idx)
        if idx.ndim != 2 or idx.shape[1] != self.context or idx.dtype.kind not in "iu":
            raise ValueError(f"idx must be integer ids of shape (batch, {self.context}), "
                             f"got shape {idx.shape}, dtype {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() >= self.vocab_size):
            raise ValueError(f"token ids must be in [0, {self.vocab_size}), got {idx.min()}..{idx.max()}")
        # BEGIN SOLUTION 3.5
        x = self.embedding[idx]              # (B, context, embed_dim)
        x = x.reshape(idx.shape[0], -1)      # (B, context * embed_dim): the concatenation
        return self.out(self.hidden(x).tanh())
        # END SOLUTION


class TorchMLPLanguageModel(nn.Module):
    """The same MLP language model in PyTorch (for the speed comparison and as an oracle).

    `from_engine(model)` copies an engine model's weights, so both compute the same
    function; the engine's Linear weight is (in, out), PyTorch's is its transpose.
    """

    def __init__(self, context: int = 8, embed_dim: int = 16, hidden: int = 256, vocab_size: int = VOCAB_SIZE):
        super().__init__()
        self.context = context
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.hidden = nn.Linear(context * embed_dim, hidden)
        self.out = nn.Linear(hidden, vocab_size)

    @classmethod
    def from_engine(cls, model: MLPLanguageModel) -> "TorchMLPLanguageModel":
        vocab, embed = model.embedding.shape
        twin = cls(model.context, embed, model.hidden.weight.shape[1], vocab)
        with torch.no_grad():
            twin.embedding.weight.copy_(torch.from_numpy(model.embedding.data))
            for ours, theirs in ((model.hidden, twin.hidden), (model.out, twin.out)):
                theirs.weight.copy_(torch.from_numpy(ours.weight.data.T))
                theirs.bias.copy_(torch.from_numpy(ours.bias.data))
        return twin

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embedding(idx).flatten(1)
        return self.out(torch.tanh(self.hidden(x)))


def evaluate_mlp_lm(model: MLPLanguageModel, tokens: np.ndarray, max_windows: int = 4096) -> float:
    """Mean next-token loss (nats) of the MLP LM on a token stream, deterministically.

    The first `max_windows` windows at offsets 0, 1, 2, ... (every position once, no
    randomness, so two evaluations of the same model agree exactly), forward only, inside
    `no_grad()` (nothing to backpropagate: recording the graph would only cost memory).
    """
    _check_positive(max_windows=max_windows)
    tokens = np.asarray(tokens)
    n = min(max_windows, len(tokens) - model.context)
    if n < 1:
        raise ValueError(f"a stream of {len(tokens)} tokens holds no window of {model.context} + 1")
    # BEGIN SOLUTION 3.6
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
    """Train the engine's MLP language model: the whole loop by hand. Returns the history.

    For each step 0 .. steps-1:
      1. set `optimizer.lr` from `lr_schedule(step, ...)`;
      2. draw a batch with `sample_contexts(train_tokens, batch_size, model.context, rng)`,
         rng = np.random.default_rng(seed) made once before the loop (a seeded run repeats);
      3. forward, `cross_entropy` loss, `optimizer.zero_grad()`, `loss.backward()`;
      4. `clip_grad_norm(model.parameters(), max_norm)`, then `optimizer.step()`;
      5. append step+1 to "step", the loss to "loss", the lr to "lr", the pre-clip norm to
         "grad_norm";
      6. every `eval_every` steps and after the last one: `evaluate_mlp_lm(model, val_tokens)`,
         appended to "val_loss" with step+1 in "val_step", and, if `log` is given, one line
         log(f"step {step+1}: train loss ..., val loss ...").
    """
    _check_positive(steps=steps, batch_size=batch_size, eval_every=eval_every)
    history: dict[str, list[float]] = {"step": [], "loss": [], "lr": [], "grad_norm": [],
                                       "val_step": [], "val_loss": []}
    # BEGIN SOLUTION 3.6
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


def pick_next(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Sample one token id from (V,) logits at `temperature` (0: the most likely one)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    return int(rng.choice(len(p), p=p / p.sum()))


def sample_mlp_lm(model: MLPLanguageModel, prompt: str, max_new_tokens: int = 200,
                  temperature: float = 0.8, seed: int = 0) -> str:
    """Continue `prompt` byte by byte with the MLP LM (prompt left-padded with EOT)."""
    tok, rng = ByteTokenizer(), np.random.default_rng(seed)
    ids = [EOT] * model.context + tok.encode(prompt)
    start = len(ids)
    with no_grad():
        for _ in range(max_new_tokens):
            logits = model(np.array([ids[-model.context:]])).data[0]
            ids.append(pick_next(logits, temperature, rng))
    return prompt + tok.decode(ids[start:])


# =========================================================================================
# Part 2 — the same loop in PyTorch, on the course's GPT
# =========================================================================================

LN2 = math.log(2.0)  # nats per bit


def load_tokens(path: str | Path) -> torch.Tensor:
    """One split (JSONL records {"id", "text", "source"}) as one token stream.

    Each document's UTF-8 bytes followed by `EOT`, all documents concatenated: shape (N,),
    dtype int16 (ids 0..256 need 9 bits; int16 holds the stream at a quarter of int64's size,
    and `get_batch` widens only the windows it draws).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no token split at {path}")
    parts = []
    eot = np.array([EOT], dtype=np.int16)
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)["text"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: not a JSONL record with a 'text' field ({e})") from None
            parts.append(np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int16))
            parts.append(eot)
    if not parts:
        raise ValueError(f"{path} holds no documents")
    return torch.from_numpy(np.concatenate(parts))


def _check_stream(tokens: object) -> None:
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"tokens must be a 1-D integer torch.Tensor (a token stream), got {type(tokens).__name__}")
    if tokens.dim() != 1 or tokens.is_floating_point():
        raise TypeError(f"tokens must be a 1-D integer torch.Tensor (a token stream), got shape "
                        f"{tuple(tokens.shape)}, dtype {tokens.dtype}")


def get_batch(tokens: torch.Tensor, batch_size: int, block_size: int,
              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` windows at random offsets of the token stream: inputs and next-token targets.

    tokens: (N,) integer ids. Returns x, y, each (batch_size, block_size) int64, where a
    window starting at s is x = tokens[s : s+T] and y = tokens[s+1 : s+T+1]: y is x shifted
    by one, so position t of a window is trained to predict token t+1. Every start
    0 <= s <= N - T - 1 is equally likely; all offsets come from `generator`, so the
    generator's state IS the data position (a checkpoint that saves it resumes exactly).
    Build all windows with one gather (starts[:, None] + arange(T)), not a Python loop.
    """
    _check_positive(batch_size=batch_size, block_size=block_size)
    _check_stream(tokens)
    if len(tokens) < block_size + 1:
        raise ValueError(f"a stream of {len(tokens)} tokens is too short for windows of {block_size} + 1")
    # BEGIN SOLUTION 3.7
    starts = torch.randint(0, len(tokens) - block_size, (batch_size,), generator=generator)
    idx = starts[:, None] + torch.arange(block_size + 1)  # (B, T+1)
    windows = tokens[idx].long()
    return windows[:, :-1], windows[:, 1:]
    # END SOLUTION


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) of a model mapping (B, T) ids to (B, T, V) logits."""
    logits = model(x)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


class NonFiniteLossError(FloatingPointError):
    """Training produced a NaN or infinite loss (or gradient norm) and was stopped."""


def check_finite(value: float, *, step: int, what: str = "loss") -> float:
    """Return `value` if it is finite; otherwise raise NonFiniteLossError with a clear message.

    One NaN in the loss becomes NaN gradients, and one optimizer step with NaN gradients
    turns every weight into NaN: the run is silently dead from then on. So the loop checks
    the loss (and the gradient norm) BEFORE `optimizer.step()` and stops with a message that
    names the step, the value and what to do, while the weights and the last checkpoint are
    still good.
    """
    # BEGIN SOLUTION 3.8
    if not math.isfinite(value):
        raise NonFiniteLossError(
            f"step {step}: the {what} is {value}; stopped before the optimizer step, so the weights "
            "are unchanged. Usual causes: a learning rate too high for this model (lower max_lr or "
            "lengthen the warmup), gradient clipping switched off, or bad data. Resume from the last "
            "checkpoint with a smaller learning rate.")
    return value
    # END SOLUTION


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


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer,
               micro_batches: list[tuple[torch.Tensor, torch.Tensor]], *,
               max_norm: float = 1.0, step: int = 0) -> tuple[float, float]:
    """One optimizer step over several micro-batches (gradient accumulation): (loss, grad norm).

    A batch too big for memory is split into A micro-batches; backpropagating each
    micro-batch's loss divided by A sums to exactly the gradient of the whole batch's mean
    loss, so A micro-batches of B equal one batch of A·B (at A× the time, 1/A the memory).
    The step: zero the gradients; for each micro-batch, loss = lm_loss, backward(loss / A)
    inside `grad_sync(model, last micro-batch)`; the step's loss is the mean of the
    micro-batch losses (averaged across processes with `all_reduce_mean`); check it with
    `check_finite`; clip the gradients to global norm `max_norm` with
    `torch.nn.utils.clip_grad_norm_` (which returns the norm before clipping: check it too);
    then `optimizer.step()`. A non-finite loss raises before the weights change.
    """
    if not micro_batches:
        raise ValueError("train_step needs at least one micro-batch")
    # BEGIN SOLUTION 3.9
    optimizer.zero_grad(set_to_none=True)
    n = len(micro_batches)
    total = torch.zeros(())
    for i, (x, y) in enumerate(micro_batches):
        with grad_sync(model, enabled=i == n - 1):
            loss = lm_loss(model, x, y)
            (loss / n).backward()
        total += loss.detach()
    loss = check_finite(float(all_reduce_mean(total / n)), step=step)
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    check_finite(norm, step=step, what="gradient norm")
    optimizer.step()
    return loss, norm
    # END SOLUTION


@torch.no_grad()
def evaluate(model: nn.Module, tokens: torch.Tensor, *, block_size: int, batch_size: int = 16,
             max_tokens: int | None = None) -> dict[str, float]:
    """Loss (nats/token) and bits per byte of `model` on a token stream, deterministically.

    The stream is cut into consecutive non-overlapping windows of `block_size` (targets
    shifted by one, as in `get_batch`), at most `max_tokens` targets in all, evaluated
    `batch_size` windows at a time in eval mode (no dropout) without gradients; the model's
    train/eval mode is restored afterwards. Sum the per-token losses and divide once.

    Bits per byte = total loss in bits / number of byte targets (targets != EOT): the cost
    of the end-of-text marks is charged to the text, so the figure compares with any other
    model's on the same bytes, whatever its tokenizer. Returns {"loss", "bpb", "tokens"}.
    """
    _check_positive(block_size=block_size, batch_size=batch_size)
    _check_stream(tokens)
    n_windows = (len(tokens) - 1) // block_size
    if max_tokens is not None:
        n_windows = min(n_windows, max_tokens // block_size)
    if n_windows < 1:
        raise ValueError(f"{len(tokens)} tokens (max_tokens={max_tokens}) hold no window of {block_size} + 1")
    # BEGIN SOLUTION 3.10
    was_training = model.training
    model.eval()
    nats, targets, byte_targets = 0.0, 0, 0
    offsets = torch.arange(block_size + 1)
    for first in range(0, n_windows, batch_size):
        starts = torch.arange(first, min(first + batch_size, n_windows)) * block_size
        windows = tokens[starts[:, None] + offsets].long()
        x, y = windows[:, :-1], windows[:, 1:]
        logits = model(x)
        nats += float(F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum"))
        targets += y.numel()
        byte_targets += int((y != EOT).sum())
    model.train(was_training)
    return {"loss": nats / targets, "bpb": nats / LN2 / max(byte_targets, 1), "tokens": targets}
    # END SOLUTION


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DDP wrapper (or the model itself)."""
    return model.module if isinstance(model, DDP) else model


def save_training_state(path: str | Path, *, model: nn.Module, optimizer: torch.optim.Optimizer,
                        step: int, data_rng: torch.Generator, history: dict, config: dict) -> Path:
    """Everything a run needs to continue as if never stopped, in one file (atomically).

    `step` is the number of optimizer steps done. The learning rate is a function of the
    step, so the schedule needs nothing else. The state: the model's weights (unwrapped
    from DDP), the optimizer's state (AdamW's moments and step counts), both random number
    generators the loop draws from (torch's global one, used by dropout, and `data_rng`,
    which picks the windows: the data position), the history so far, and the config.
    Build that dict as `state`, keyed by `TRAINING_STATE_KEYS` (the generators under
    "rng" as {"torch": ..., "data": ...}); the given `save_checked` writes it with a
    checksum of its contents to a temporary file and `os.replace`s it onto `path`, so a
    crash while saving never leaves a torn checkpoint where the last good one was.
    """
    path = Path(path)
    # BEGIN SOLUTION 3.11
    state = {
        "step": step,
        "model": unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "data": data_rng.get_state()},
        "history": history,
        "config": config,
    }
    # END SOLUTION
    return save_checked(path, state)


TRAINING_STATE_KEYS = ("step", "model", "optimizer", "rng", "history", "config")


def load_training_state(path: str | Path, *, model: nn.Module, optimizer: torch.optim.Optimizer,
                        data_rng: torch.Generator, config: dict | None = None) -> tuple[int, dict]:
    """Restore what `save_training_state` wrote, in place: returns (step, history).

    If `config` is given and differs from the saved one, raise ValueError naming the
    differing keys: resuming with other hyperparameters is a different run, not a resume.
    The file is loaded with `weights_only=True` and its checksum verified first: an empty,
    truncated or corrupted file raises `CheckpointError` (a ValueError) naming it.
    """
    state = load_checked(path, keys=TRAINING_STATE_KEYS, what="training state")
    if config is not None and state["config"] != config:
        diff = sorted(k for k in set(config) | set(state["config"]) if config.get(k) != state["config"].get(k))
        raise ValueError(f"{path} was saved with another config (differs in {diff}); resuming would not "
                         "continue the same run")
    # BEGIN SOLUTION 3.11
    unwrap(model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])
    data_rng.set_state(state["rng"]["data"])
    return state["step"], state["history"]
    # END SOLUTION


def setup_distributed() -> tuple[int, int]:
    """(rank, world size): join the process group that `torchrun` describes in the environment.

    `torchrun --nproc_per_node N` starts N copies of the script with RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT set. Each copy calls `torch.distributed.init_process_group`
    with the "gloo" backend (CPU; "nccl" on GPUs), which reads them, and is then one rank
    of the group. Run without torchrun (WORLD_SIZE unset or 1), it is a single process.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    # BEGIN SOLUTION 3.12
    if not dist.is_initialized():
        dist.init_process_group(backend="gloo")
    return dist.get_rank(), dist.get_world_size()
    # END SOLUTION


def shard_batch(x: torch.Tensor, y: torch.Tensor, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of a global batch: rows [rank·B/W, (rank+1)·B/W) of x and y.

    Every rank draws the SAME global batch from the same generator (so all ranks stay at
    the same data position) and keeps its own contiguous slice; the slices are disjoint
    and together are the whole batch. B must be divisible by the world size W.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if x.shape[0] % world_size:
        raise ValueError(f"a batch of {x.shape[0]} rows does not split over {world_size} processes")
    if world_size == 1:
        return x, y
    # BEGIN SOLUTION 3.12
    rows = x.shape[0] // world_size
    share = slice(rank * rows, (rank + 1) * rows)
    return x[share], y[share]
    # END SOLUTION


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    """The mean of a scalar tensor over all processes (the value itself in a single process).

    Each rank's loss is the mean over its own shard; the loss of the step is the mean over
    ranks (shards are equal in size). gloo has no AVG reduction: sum, then divide.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return value
    # BEGIN SOLUTION 3.12
    value = value.clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / dist.get_world_size()
    # END SOLUTION


# =========================================================================================
# The loop (given): everything above, put together
# =========================================================================================

@dataclass
class TrainConfig:
    """One training run. The global batch is batch_size x grad_accum x processes windows."""

    model: GPTConfig = field(default_factory=GPTConfig)
    batch_size: int = 16  # windows per micro-batch, per process
    block_size: int = 256  # window length (at most model.block_size)
    grad_accum: int = 1  # micro-batches per optimizer step, per process
    steps: int = 1000
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 50
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    max_norm: float = 1.0
    eval_every: int = 100  # 0: evaluate only after the last step
    eval_tokens: int = 65536  # val targets per evaluation
    eval_batch_size: int = 32  # windows per evaluation forward (no gradients kept: larger is cheap)
    ckpt_every: int = 0  # 0: save the training state only at the end (if a path is given)
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):  # read back from a checkpoint or JSON
            self.model = GPTConfig(**self.model)
        self.betas = tuple(self.betas)
        _check_positive(batch_size=self.batch_size, block_size=self.block_size, grad_accum=self.grad_accum,
                        steps=self.steps, max_lr=self.max_lr, max_norm=self.max_norm, eval_tokens=self.eval_tokens,
                        eval_batch_size=self.eval_batch_size)
        if self.block_size > self.model.block_size:
            raise ValueError(f"block_size {self.block_size} exceeds the model's context {self.model.block_size}")
        if not 0 <= self.warmup_steps <= self.steps:
            raise ValueError(f"warmup_steps must be in [0, steps={self.steps}], got {self.warmup_steps}")
        if self.eval_every < 0 or self.ckpt_every < 0:
            raise ValueError(f"eval_every and ckpt_every must be >= 0, got {self.eval_every}, {self.ckpt_every}")


PRESETS: dict[str, TrainConfig] = {
    # a smoke run for tests, the notebook and torchrun: seconds on a laptop
    "tiny": TrainConfig(model=GPTConfig(block_size=32, n_layer=2, n_head=2, n_embd=32), batch_size=8,
                        block_size=32, steps=40, max_lr=1e-2, min_lr=1e-3, warmup_steps=5,
                        eval_every=20, eval_tokens=4096),
    # the course's default model: 2 layers x 192 dims (0.99 M parameters; stages 04-08 run it
    # many times, so the work per token stays small), 6,000 steps of 4 windows of 256: 6.1 M
    # tokens, a quarter of the train split; the time and bits/byte of the committed run are in
    # stage 03's README and the checkpoint's meta. Chosen by pilot runs (same code, data and
    # seed, fp32 on a GPU; val bits/byte on these 65,536 tokens). Tokens matter most: 2 x 192
    # gave 2.23 after 2.6 M tokens, 1.94 / 1.84 / 1.73 after 4.1 / 5.1 / 6.1 M, 1.42 after 16 M.
    # At 16 M tokens deeper or wider did better (3 x 192 1.36, 4 x 192 1.34, 3 x 256 1.32,
    # 4 x 256 1.30, 6 x 128 1.37), but a fixed CPU budget buys ~1.5x more tokens of 2 x 192
    # than of 3 x 192, and 3 x 192 after 3.1 / 3.6 M tokens gave only 2.12 / 2.02. Batch 8 was
    # no better than 4 for the same tokens; peak learning rate 3e-3 worse than 2e-3 (1.88 vs
    # 1.84 after 5.1 M), 1e-3 about the same at 16 M.
    "default": TrainConfig(model=GPTConfig(n_layer=2, n_head=6, n_embd=192), batch_size=4, block_size=256,
                           steps=6000, max_lr=2e-3, min_lr=2e-4, warmup_steps=300, eval_every=1000,
                           eval_tokens=65536),
}


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """PyTorch's AdamW (3.2, built once by hand) with weight decay on the weight matrices only.

    Decay pulls weights toward zero; for biases and LayerNorm gains that is no regulariser,
    just a bias toward 0 (or, for a gain, toward switching the layer off). So parameters
    with fewer than two dimensions go to a group without decay.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.max_lr, betas=cfg.betas)


HISTORY_KEYS = ("step", "loss", "lr", "grad_norm", "tokens", "time", "val_step", "val_loss", "val_bpb")


def train(cfg: TrainConfig, train_tokens: torch.Tensor, val_tokens: torch.Tensor, *,
          state_path: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
          progress: bool = True) -> tuple[GPT, dict[str, list[float]]]:
    """Train a GPT on a token stream: (the model, the history of the run).

    One process, or one rank of a `torchrun` group (then the model is wrapped in DDP, every
    rank draws the same global batch and trains on its shard, and rank 0 evaluates, saves
    and shows progress). With `state_path`, the training state is saved every
    `cfg.ckpt_every` steps and when the loop ends; `resume=True` continues from it.
    `stop_after=k` ends the loop after step k as if the run were interrupted there (the
    schedule still runs to cfg.steps), which is how the tests check exact resumption.
    Seeds torch's global generator with `cfg.seed` (the model's initialisation, dropout).
    """
    if resume and state_path is None:
        raise ValueError("resume=True needs the state_path to resume from")
    rank, world = setup_distributed()
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model)
    model.train()
    optimizer = make_optimizer(model, cfg)
    data_rng = torch.Generator().manual_seed(cfg.seed)
    history: dict[str, list[float]] = {k: [] for k in HISTORY_KEYS}
    start = 0
    if resume:
        start, history = load_training_state(state_path, model=model, optimizer=optimizer,
                                             data_rng=data_rng, config=asdict(cfg))
    net = DDP(model) if world > 1 else model
    end = cfg.steps if stop_after is None else min(cfg.steps, stop_after)
    global_rows = cfg.batch_size * cfg.grad_accum * world
    tokens_per_step = global_rows * cfg.block_size
    elapsed = history["time"][-1] if history["time"] else 0.0
    t0 = time.perf_counter()
    bar = tqdm(range(start, end), initial=start, total=cfg.steps, desc="train", unit="step",
               disable=not progress or rank != 0, dynamic_ncols=True)
    for step in bar:
        lr = lr_schedule(step, max_lr=cfg.max_lr, warmup_steps=cfg.warmup_steps, total_steps=cfg.steps,
                         min_lr=cfg.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_tokens, global_rows, cfg.block_size, data_rng)
        x, y = shard_batch(x, y, rank, world)
        micro = list(zip(x.split(cfg.batch_size), y.split(cfg.batch_size)))
        loss, norm = train_step(net, optimizer, micro, max_norm=cfg.max_norm, step=step)
        done = step + 1
        for key, value in (("step", done), ("loss", loss), ("lr", lr), ("grad_norm", norm),
                           ("tokens", done * tokens_per_step), ("time", elapsed + time.perf_counter() - t0)):
            history[key].append(value)
        if rank == 0 and ((cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps):
            ev = evaluate(model, val_tokens, block_size=cfg.block_size, batch_size=cfg.eval_batch_size,
                          max_tokens=cfg.eval_tokens)
            history["val_step"].append(done)
            history["val_loss"].append(ev["loss"])
            history["val_bpb"].append(ev["bpb"])
            if progress:
                bar.write(f"step {done}: train loss {loss:.3f}, val loss {ev['loss']:.3f}, "
                          f"val {ev['bpb']:.3f} bits/byte")
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.1e}", refresh=False)
        save_now = (cfg.ckpt_every and done % cfg.ckpt_every == 0) or done == end
        if state_path is not None and rank == 0 and save_now:
            save_training_state(state_path, model=model, optimizer=optimizer, step=done, data_rng=data_rng,
                                history=history, config=asdict(cfg))
    bar.close()
    return model, history


@torch.no_grad()
def generate(model: GPT, prompt_ids: list[int], max_new_tokens: int, *, temperature: float = 0.8,
             seed: int = 0) -> list[int]:
    """Sample a continuation from a GPT, re-reading the (cropped) context each step.

    The plain way: O(T) work per new token over the whole window. Stage 04's KV cache
    removes the re-reading.
    """
    if not prompt_ids:
        raise ValueError("generate needs a non-empty prompt (start with [EOT] for none)")
    rng = np.random.default_rng(seed)
    ids = list(prompt_ids)
    was_training = model.training
    model.eval()
    for _ in range(max_new_tokens):
        window = torch.tensor([ids[-model.config.block_size:]])
        ids.append(pick_next(model(window)[0, -1].numpy(), temperature, rng))
    model.train(was_training)
    return ids[len(prompt_ids):]


def sample_gpt(model: GPT, prompt: str, max_new_tokens: int = 200, temperature: float = 0.8, seed: int = 0) -> str:
    """Continue `prompt` (text) with a GPT: prompt + the sampled bytes, decoded."""
    tok = ByteTokenizer()
    ids = [EOT] + tok.encode(prompt)
    return prompt + tok.decode(generate(model, ids, max_new_tokens, temperature=temperature, seed=seed),
                               stop_at_eot=True)


def plot_history(history: dict[str, list[float]], ax=None, label: str = "", smooth: int = 10):
    """Train loss (moving average over `smooth` steps) and val loss against the step."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    loss = np.asarray(history["loss"], dtype=np.float64)
    k = max(1, min(smooth, len(loss)))
    ma = np.convolve(loss, np.ones(k) / k, mode="valid")
    line, = ax.plot(history["step"][k - 1:], ma, label=f"{label} train".strip())
    if history.get("val_step"):
        ax.plot(history["val_step"], history["val_loss"], "o--", color=line.get_color(),
                label=f"{label} val".strip())
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


# =========================================================================================
# The command line: python -m solutions.train --preset default
# =========================================================================================

def corpus_splits(data_dir: str | Path | None) -> tuple[Path, Path]:
    """(train.jsonl, val.jsonl): from `data_dir`, or stage 02's pipeline (built once, cached)."""
    if data_dir is None:
        train_path = Path(build_train_split(CORPUS_DIR))
    else:
        if Path(data_dir).is_file():
            raise ValueError(f"data_dir {data_dir} is a file; give the folder that holds train.jsonl and val.jsonl")
        train_path = Path(data_dir) / "train.jsonl"
    val_path = train_path.with_name("val.jsonl")
    for p in (train_path, val_path):
        if not p.is_file():
            raise FileNotFoundError(f"no split at {p}; a data directory holds train.jsonl and val.jsonl")
    return train_path, val_path


def describe_split(path: Path, tokens: torch.Tensor) -> dict:
    """Documents and tokens of one split, and documents by kind of source, for the meta.

    The kind of a source is its prefix before ':' ("pydoc_data.topics:if" -> "pydoc_data.topics"),
    else its file suffix ("asyncio/tasks.py" -> "*.py").
    """
    kinds: dict[str, int] = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                source = str(json.loads(line).get("source", "?"))
                kind = source.split(":", 1)[0] if ":" in source else f"*{Path(source).suffix}"
                kinds[kind] = kinds.get(kind, 0) + 1
    return {"file": str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path),
            "documents": sum(kinds.values()), "tokens": len(tokens), "documents_by_kind": kinds}


class _Parser(argparse.ArgumentParser):
    """argparse, but every refusal reads `error: <what is wrong>` (exit 2) with the usage first."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main(argv: list[str] | None = None) -> int:
    """`python -m solutions.train [options]`; exit 0, or 2 with `error: ...` for a bad argument.

    Writes the model to `--out` (default: out/<preset>/gpt.pt, a git-ignored run folder);
    the committed default model is replaced only with `--replace-default-model`. Every
    output is checked before training (not an input, not a shipped file, not a folder)
    and written atomically.
    """
    p = _Parser(prog="python -m solutions.train", description="Train the course's GPT. Nothing the course "
                "ships is overwritten: the model goes to --out (default: out/PRESET/gpt.pt) unless "
                "--replace-default-model is given.")
    p.add_argument("--preset", choices=sorted(PRESETS), default="default")
    p.add_argument("--data", default=None, help="folder with train.jsonl and val.jsonl "
                                                "(default: stage 02's corpus in data/corpus, built if missing)")
    p.add_argument("--steps", type=int, help="override the preset's steps (the warmup is capped at it)")
    p.add_argument("--grad-accum", type=int, help="override the preset's gradient accumulation")
    p.add_argument("--seed", type=int, help="override the preset's seed")
    p.add_argument("--out", default=None, help="save the model here with save_checkpoint "
                                               f"(default: {_rel(RUNS_DIR)}/PRESET/gpt.pt)")
    p.add_argument("--replace-default-model", action="store_true",
                   help=f"save the model to {_rel(DEFAULT_WEIGHTS)}, replacing the committed default model that "
                        "stages 04-08 load (only with --preset default, not with --out)")
    p.add_argument("--state", default=None, help="training-state checkpoint to save (and --resume from); "
                                                 "an existing one is overwritten only with --resume")
    p.add_argument("--resume", action="store_true", help="continue from --state")
    p.add_argument("--history", default=None, help="write the run's history as JSON")
    p.add_argument("--plot", default=None, help="write the loss curves as PNG")
    p.add_argument("--threads", type=int, default=None, help="torch threads per process")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)

    for name in ("steps", "grad_accum", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.replace_default_model and args.out:
        p.error(f"give --out or --replace-default-model, not both (--out {args.out})")
    if args.replace_default_model and args.preset != "default":
        p.error(f"--replace-default-model needs --preset default, got --preset {args.preset}")
    if args.resume and not args.state:
        p.error("--resume needs --state FILE (the training state to continue)")
    if args.state and not args.resume and Path(args.state).exists():
        p.error(f"--state {args.state} exists: pass --resume to continue that run, or choose another path")
    if args.resume and not Path(args.state).is_file():
        p.error(f"--resume: no training state at {args.state}")
    overrides = {k: v for k, v in (("steps", args.steps), ("grad_accum", args.grad_accum), ("seed", args.seed))
                 if v is not None}
    preset = PRESETS[args.preset]
    if args.steps is not None:
        overrides["warmup_steps"] = min(preset.warmup_steps, args.steps)
    if args.replace_default_model:
        out = DEFAULT_WEIGHTS
    else:
        out = Path(args.out) if args.out else RUNS_DIR / args.preset / "gpt.pt"
    outputs = [Path(f) for f in (out, args.state, args.history, args.plot) if f]
    try:
        cfg = replace(preset, **overrides)
        if args.data is not None:  # before anything is built or trained
            corpus_splits(args.data)
        check_outputs(files=outputs, inputs=[Path(args.data or CORPUS_DIR) / f"{s}.jsonl" for s in ("train", "val")],
                      allow=[DEFAULT_WEIGHTS] if args.replace_default_model else [])
        if args.resume:  # a damaged state or another run's state: refused before any work
            saved = load_checked(args.state, keys=TRAINING_STATE_KEYS, what="training state")["config"]
            if saved != asdict(cfg):
                diff = sorted(k for k in set(saved) | set(asdict(cfg)) if saved.get(k) != asdict(cfg).get(k))
                raise ValueError(f"--state {args.state} was saved with another config (differs in {diff}); "
                                 "resume with the same --preset, --steps, --grad-accum and --seed")
        return _run(args, argv, cfg, out)
    except (ValueError, TypeError, FileNotFoundError) as e:  # UnsafeOutputError, CheckpointError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # while writing: the previous outputs are still there (atomic writes)
        print(f"error: {e.strerror or e}: {e.filename or ''}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, argv: list[str] | None, cfg: TrainConfig, out: Path) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    rank, world = setup_distributed()
    train_path, val_path = corpus_splits(args.data)
    train_tokens, val_tokens = load_tokens(train_path), load_tokens(val_path)
    if rank == 0:
        print(f"{args.preset}: {cfg.model.n_layer} layers, {cfg.model.n_embd} dims, {cfg.steps} steps x "
              f"{cfg.batch_size * cfg.grad_accum * world} windows of {cfg.block_size}; "
              f"train {len(train_tokens):,} tokens, val {len(val_tokens):,}; "
              f"{world} process(es) x {torch.get_num_threads()} threads")
    t0 = time.perf_counter()
    model, history = train(cfg, train_tokens, val_tokens, state_path=args.state, resume=args.resume,
                           progress=not args.no_progress)
    seconds = time.perf_counter() - t0
    if rank == 0:
        final = {"loss": history["val_loss"][-1], "bpb": history["val_bpb"][-1]}
        print(f"trained in {history['time'][-1]:.0f} s ({seconds:.0f} s in this session): "
              f"val loss {final['loss']:.4f}, {final['bpb']:.4f} bits/byte")
        if args.history:
            write_text_atomic(args.history, json.dumps(history))
        if args.plot:
            import matplotlib

            matplotlib.use("Agg")
            with atomic_write(args.plot, "wb") as f:
                plot_history(history, label=args.preset).figure.savefig(f, format="png", dpi=120,
                                                                        bbox_inches="tight")
        command = " ".join(["python -m solutions.train", *(sys.argv[1:] if argv is None else argv)])
        meta = {"command": command, "preset": args.preset, "config": asdict(cfg), "seed": cfg.seed,
                "steps": cfg.steps, "tokens_seen": history["tokens"][-1],
                "val_loss": final["loss"], "val_bpb": final["bpb"],
                "val_tokens_evaluated": cfg.eval_tokens, "train_seconds": round(history["time"][-1], 1),
                "processes": world, "threads": torch.get_num_threads(), "torch": str(torch.__version__),
                "history": {k: history[k] for k in ("step", "loss", "lr", "val_step", "val_loss", "val_bpb")},
                "corpus": {"train": describe_split(train_path, train_tokens),
                           "val": describe_split(val_path, val_tokens),
                           "description": "stage 02's deduplicated CPython standard library "
                                          "sources and pydoc topics, byte-level tokens"}}
        save_checkpoint(model, out, meta)
        print(f"saved {out} ({out.stat().st_size / 1e6:.1f} MB)")
        print(sample_gpt(model, "def ", 200, temperature=0.8))
    if world > 1:
        dist.barrier()  # rank 0 may still be saving and sampling: the ranks leave the group together
        dist.destroy_process_group()
    return 0


def demo() -> None:
    """Train the engine's MLP LM for a few steps, then sample the course's default GPT."""
    print("Part 1: a byte-level MLP language model on the stage-01 engine (AdamW, warmup + cosine)")
    tokens = np.frombuffer(Path(__file__).read_bytes(), dtype=np.uint8).astype(np.int64)
    split = int(0.9 * len(tokens))
    model = MLPLanguageModel(context=8, embed_dim=16, hidden=256, rng=0)
    optimizer = AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    train_mlp_lm(model, optimizer, tokens[:split], tokens[split:], steps=300, batch_size=128, max_lr=1e-2,
                 warmup_steps=20, min_lr=1e-3, eval_every=50)
    print("\nPart 2: the course's default GPT (solutions/assets/gpt_default.pt), continuing 'def '")
    gpt, _ = load_default()
    print(sample_gpt(gpt, "def ", 160, temperature=0.7, seed=0))


if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # A rank of a torchrun job leaves without interpreter finalisation. Gloo's worker
        # threads release a collective's tensors a moment after the collective returns; when
        # that happens while Python is finalising, the release needs the GIL of a dying
        # interpreter and the process aborts (SIGABRT, "terminate called without an active
        # exception") after all its work is done. The race is described in pytorch/pytorch
        # PR #179291 (closed unmerged). Everything is written (atomically) by now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)
