"""Training state that resumes exactly: weights, optimizer, both generators, history, config."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from solutions.fileio import load_checked, save_checked

TRAINING_STATE_KEYS = ("step", "model", "optimizer", "rng", "history", "config")


def save_training_state(path: str | Path, *, model: nn.Module, optimizer: torch.optim.Optimizer,
                        step: int, data_rng: torch.Generator, history: dict, config: dict) -> Path:
    """Write everything a run needs to continue as if never stopped to `path`; returns the Path.

    The state is a dict with exactly the keys TRAINING_STATE_KEYS: "step" (optimizer steps
    done; the schedule needs nothing else), "model" (the state_dict of `unwrap(model)`, so a
    DDP model saves the plain model's keys), "optimizer" (its state_dict: AdamW's moments and
    step counts), "rng" = {"torch": ..., "data": ...}: the states, as they are now, of torch's
    global generator (dropout draws from it) and of `data_rng` (the data position), each one
    that generator can be set back to; "history" and "config" as given. The given
    `save_checked` writes it atomically with a checksum (no temporary file is left; a crash
    never leaves a torn file where the last good one was). Nothing passed in is changed.
    """
    path = Path(path)
    # BEGIN SOLUTION 3.10
    # DECISION: what state a run needs to continue exactly (weights of the unwrapped model,
    #   optimizer moments, step, BOTH generators: torch's for dropout and the data one) and that
    #   loading restores each in place.
    # HINT: Build the dict `state` (the code below saves it): every key of TRAINING_STATE_KEYS.
    # HINT: Both generators: torch's global one (torch.get_rng_state(), dropout draws from it)
    #   and data_rng.get_state(), under "rng" as {"torch": ..., "data": ...}. Each is a
    #   ByteTensor snapshot: setting it back later replays the same draws.
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


def load_training_state(path: str | Path, *, model: nn.Module, optimizer: torch.optim.Optimizer,
                        data_rng: torch.Generator, config: dict | None = None) -> tuple[int, dict]:
    """Restore what `save_training_state` wrote, in place: returns (step, history).

    Afterwards `unwrap(model)`'s weights, the optimizer's state, torch's global generator and
    `data_rng` (the objects passed in, changed in place) are exactly as saved, so the next step
    is the step the saved run would have taken; `step` is the saved count of steps done.
    Before anything is restored: FileNotFoundError for a missing file; CheckpointError (a
    ValueError naming the file) for an empty, truncated, corrupted or foreign file (loaded
    with `weights_only=True`, checksum verified); and, if `config` is given and differs from
    the saved one, ValueError "... another config (differs in [<keys>]) ...".
    """
    state = load_checked(path, keys=TRAINING_STATE_KEYS, what="training state")
    if config is not None and state["config"] != config:
        diff = sorted(k for k in set(config) | set(state["config"]) if config.get(k) != state["config"].get(k))
        raise ValueError(f"{path} was saved with another config (differs in {diff}); resuming would not "
                         "continue the same run")
    # BEGIN SOLUTION 3.10
    # HINT: The reverse of each save: load_state_dict for the (unwrapped) model and the
    #   optimizer, torch.set_rng_state and data_rng.set_state for the generators.
    unwrap(model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])
    data_rng.set_state(state["rng"]["data"])
    return state["step"], state["history"]
    # END SOLUTION


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DDP wrapper (or the model itself)."""
    return model.module if isinstance(model, DDP) else model
