# GENERATED from solutions/train/distributed.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.11 Distributed data parallel: lines 26, 43, 56; `course check 3.11`, `course hint 3.11`
"""Distributed data parallel over processes that `torchrun` starts: join, shard, average."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def setup_distributed() -> tuple[int, int]:
    """(rank, world size) of this process: join the process group `torchrun` describes.

    `torchrun --nproc_per_node N` starts N copies of the script with RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT set. With WORLD_SIZE unset or 1, returns (0, 1) and creates
    no process group. Otherwise joins the group with the "gloo" backend (CPU) unless this
    process has joined already (a second call is harmless), and returns the group's rank and
    size (ints). Called again by every run of `train` in the same process.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    raise NotImplementedError('Exercise 3.11: Distributed data parallel — see 03_training_loop.ipynb')


def shard_batch(x: torch.Tensor, y: torch.Tensor, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of a global batch: rows [rank·B/W, (rank+1)·B/W) of x and of y.

    Every rank draws the SAME global batch from the same generator (so all ranks stay at the
    same data position) and keeps its own contiguous slice: the W slices, in rank order, are
    disjoint and concatenate to the whole batch. World size 1 returns x and y themselves.
    ValueError: rank outside [0, world_size); B not divisible by world_size.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if x.shape[0] % world_size:
        raise ValueError(f"a batch of {x.shape[0]} rows does not split over {world_size} processes")
    if world_size == 1:
        return x, y
    raise NotImplementedError('Exercise 3.11: Distributed data parallel — see 03_training_loop.ipynb')


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    """The mean of a scalar tensor over all processes of the group.

    Without a process group (one process) it returns `value` itself (the same object).
    Otherwise a new tensor, the same on every rank; `value` is not modified. Each rank's loss
    is the mean over its own shard and the shards are equal in size, so the mean over ranks
    is the loss of the whole global batch.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return value
    raise NotImplementedError('Exercise 3.11: Distributed data parallel — see 03_training_loop.ipynb')
