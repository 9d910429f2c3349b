# GENERATED from solutions/train/loop.py by `course stubs --write`.
# Nothing to write here: given code of stage 03 (03_training_loop/03_training_loop.ipynb).
"""The loop (given): everything of Part 2 put together, for one process or one rank of many."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from solutions.gpt import GPT

from .checkpoint import load_training_state, save_training_state
from .config import TrainConfig
from .data import get_batch
from .distributed import setup_distributed, shard_batch
from .evaluation import evaluate
from .llama import Llama, LlamaConfig
from .schedule import lr_schedule
from .step import train_step


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
          progress: bool = True) -> tuple[GPT | Llama, dict[str, list[float]]]:
    """Train a GPT, or a Llama when cfg.model is a LlamaConfig, on a token stream: (the model,
    the history of the run).

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
    model = Llama(cfg.model) if isinstance(cfg.model, LlamaConfig) else GPT(cfg.model)
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
