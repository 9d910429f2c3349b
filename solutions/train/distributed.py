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
    # BEGIN SOLUTION 3.11
    # DECISION: how the batch is split (every rank draws the same global batch and keeps one
    #   contiguous slice, so ranks stay at one data position) and how a mean is reduced without AVG
    #   (sum, then divide, on a copy).
    # HINT: torch.distributed.init_process_group(backend="gloo") reads the environment
    #   torchrun set; call it only if dist.is_initialized() is False, then ask the group.
    if not dist.is_initialized():
        dist.init_process_group(backend="gloo")
    return dist.get_rank(), dist.get_world_size()
    # END SOLUTION


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
    # BEGIN SOLUTION 3.11
    # HINT: Each rank keeps B // W rows; rank r's start row is r * (B // W).
    rows = x.shape[0] // world_size
    share = slice(rank * rows, (rank + 1) * rows)
    return x[share], y[share]
    # END SOLUTION


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    """The mean of a scalar tensor over all processes of the group.

    Without a process group (one process) it returns `value` itself (the same object).
    Otherwise a new tensor, the same on every rank; `value` is not modified. Each rank's loss
    is the mean over its own shard and the shards are equal in size, so the mean over ranks
    is the loss of the whole global batch.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return value
    # BEGIN SOLUTION 3.11
    # HINT: gloo has no AVG reduction: all_reduce with ReduceOp.SUM, then divide by the world
    #   size. all_reduce works in place, so reduce a clone, not the caller's tensor.
    value = value.clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / dist.get_world_size()
    # END SOLUTION
