# GENERATED from solutions/paged/engine.py by `course stubs --write`.
# Nothing to write here: given code of stage 06 (06_paged_attention/06_paged_attention.ipynb).
"""Stage 05's engine on paged memory (given): the cache, the block manager and the scheduler wired together."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from solutions.batching import Engine, Request, Scheduler, StepOutput
from solutions.checks import check_int
from solutions.kv_cache import Decoder

from .block_manager import BlockManager
from .block_table import blocks_needed
from .cache import PagedKVCache
from .fork import ParallelSampling


class PagedEngine(ParallelSampling, Engine):
    """Stage 05's `Engine` on a `PagedKVCache`: same API, same schedulers, same outputs.

    A running request owns a cache row (`request.slot`, a block table) and only the
    blocks its tokens fill. `num_blocks` (default: the memory of stage 05's contiguous
    cache, max_batch_size x max_len tokens) is the memory; the scheduler's
    `max_batch_size` only limits how many rows one step runs.

    The scheduler keeps its policy (FCFS admission, preemption of the latest arrival,
    chunked prefill); what memory costs it asks of `block_manager` (`scheduler.memory`,
    a `BlockManager`): whole blocks, less prefix-cache hits on blocks in use, plus a block
    for each copy-on-write ahead. So `fits` admits by free blocks and `preempt` frees the
    victim's blocks (recomputed later, maybe from the prefix cache).

    Public state, read between steps: `cache`, `allocator` (`num_free_blocks`,
    `num_blocks`), `block_manager`, `kv_usage()`, `num_preemptions`, `prefix_queries` and
    `prefix_hits` (tokens looked up in / found in the prefix cache, at every admission:
    `BlockManager.admit`), `request.num_cached_tokens` (prompt tokens a request took from
    the prefix cache at its first admission), `cache.slot_usage()`.
    `add_forked(request, n)`: parallel sampling on shared blocks (fork.py).
    """

    def __init__(self, model: Decoder, scheduler: Scheduler, *, block_size: int = 16, num_blocks: int | None = None,
                 enable_prefix_caching: bool = True, max_len: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.block_size = check_int("block_size", block_size, 1)
        self._num_blocks = None if num_blocks is None else check_int("num_blocks", num_blocks, 1)
        if not isinstance(enable_prefix_caching, bool):
            raise TypeError(f"enable_prefix_caching must be a bool, got {enable_prefix_caching!r}")
        self.enable_prefix_caching = enable_prefix_caching
        self.num_preemptions = 0
        self._forks: dict[str, list[Request]] = {}  # leader id -> siblings waiting for its prefill
        super().__init__(model, scheduler, max_len=max_len, clock=clock)
        self.allocator = self.cache.allocator
        self.block_manager = BlockManager(self.cache, scheduler, self.dead_rows)
        scheduler.memory = self.block_manager  # the scheduler asks it what memory costs: charge / held

    @property
    def prefix_queries(self) -> int:
        """Tokens looked up in the prefix cache (at every admission; 0 with it off)."""
        return self.block_manager.prefix_queries

    @property
    def prefix_hits(self) -> int:
        """Tokens found in the prefix cache (at every admission)."""
        return self.block_manager.prefix_hits

    def kv_usage(self) -> float:
        """Blocks in use / all blocks (0..1); cached blocks nobody holds count as free."""
        return self.allocator.usage()

    # -- the memory (hooks of stage 05's Engine)
    def _make_cache(self) -> PagedKVCache:
        return PagedKVCache.for_model(self.model, self.scheduler.max_batch_size, max_len=self.max_len,
                                      block_size=self.block_size, num_blocks=self._num_blocks,
                                      enable_prefix_caching=self.enable_prefix_caching)

    def _cache_capacity(self) -> int:
        return self.cache.num_blocks * self.block_size

    def _describe_cache(self) -> str:
        return f"{self.cache.num_blocks} blocks x {self.block_size} tokens"

    def _acquire(self, request: Request) -> None:
        """Stage 05's `_acquire` (an empty row), started from the prefix cache (`BlockManager.admit`)."""
        super()._acquire(request)
        self.block_manager.admit(request)

    def _forward(self, chunks: list[tuple[Request, int]]) -> tuple[list[Request], torch.Tensor]:
        """Stage 05's step on paged memory, then: blocks that became full enter the prefix
        cache (`commit`), and a forked request that finished its prompt shares it with its
        siblings (`_fork_siblings`)."""
        ready, logits = super()._forward(chunks)
        if self.enable_prefix_caching:
            bs = self.block_size
            for r, _ in chunks:
                if r.num_computed // bs > len(self.cache.row_hashes[r.slot]):
                    self.cache.commit(r.slot, r.tokens)
        if self._forks:
            ready, logits = self._fork_siblings(ready, logits)
        return ready, logits

    def step(self) -> StepOutput:
        out = super().step()
        self.num_preemptions += len(out.preempted)
        return out

    # -- requests
    def add_request(self, request: Request, *, arrival: float | None = None) -> Request:
        """Stage 05's `add_request`; a request that needs more blocks than the whole pool
        (its prompt + max_new_tokens) could never run: ValueError."""
        if isinstance(request, Request):
            need = blocks_needed(len(request.prompt) + request.max_new_tokens, self.block_size)
            if need > self.cache.num_blocks:
                raise ValueError(f"request {request.request_id!r} needs up to {need} KV blocks of "
                                 f"{self.block_size} tokens but the pool has {self.cache.num_blocks}: it could "
                                 f"never run")
        request = super().add_request(request, arrival=arrival)
        request.num_cached_tokens = 0
        return request

    def forget(self, request_id: str) -> Request:
        request = super().forget(request_id)
        self.block_manager.forget(request_id)
        return request
