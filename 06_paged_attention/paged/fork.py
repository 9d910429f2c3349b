# GENERATED from solutions/paged/fork.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 06_paged_attention/06_paged_attention.ipynb. Exercises in this file (line of each hole, then the commands):
#   6.7 Fork and copy-on-write: lines 35, 45; `course check 6.7`, `course hint 6.7`
#   6.8 The engine on paged memory: block manager, parallel sampling: line 111; `course check 6.8`, `course hint 6.8`
"""Fork and copy-on-write (6.7): rows that share blocks, copied when one writes; parallel sampling (6.8)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from solutions.batching import Request, Scheduler, State
from solutions.checks import check_int

from .allocator import BlockAllocator
from .block_table import blocks_needed


class CopyOnWrite:
    """Forked rows of `PagedKVCache`; the cache inherits it. A block held by more than one
    table (reference count > 1) is read by all of them and written by none: a row about to
    write into it first gets its own copy (`reserve` calls `_copy_on_write`)."""

    def fork_row(self, src: int, dst: int) -> None:
        """Row dst becomes a copy of row src that SHARES its blocks (no K/V is copied): the
        same block table (both views), each block one more holder, the same committed keys
        (`row_hashes`) and length; dst's lists are its own, not src's (a row that grows
        later must not grow the other). Rows outside the cache, or a dst that is not empty
        (blocks or length): ValueError, nothing changed."""
        (src, dst) = self._row_ids([src, dst])
        if self.tables[dst] or int(self.lengths[dst]):
            raise ValueError(f"fork_row: row {dst} is not empty")
        raise NotImplementedError('Exercise 6.7: Fork and copy-on-write — see 06_paged_attention.ipynb')

    def _copy_on_write(self, targets: list[tuple[int, int]]) -> None:
        """Give the rows of `targets`, (row, table index i) pairs, their own copies of the
        shared blocks they will write. Afterwards, taken in `targets` order, each entry whose
        block was still shared (count > 1) when its turn came holds at index i of its table
        (both views) a block of its own, newly allocated, whose K and V equal the shared
        block's in every layer; the shared block has one holder less. An entry whose block is
        no longer shared (count 1: an earlier copy left it to this row) keeps it. Nothing
        else changes. `reserve` checked that enough blocks are free."""
        raise NotImplementedError('Exercise 6.7: Fork and copy-on-write — see 06_paged_attention.ipynb')

    # -- given
    # The state this part uses, all of it set by `PagedKVCache.__init__` (cache.py) and stage
    # 04's `_CacheBase`: declared here so that a reader sees what the methods above touch. It
    # also calls two methods of block_table.py's `BlockTables`: `_row_ids` and `_set_table`.
    lengths: torch.Tensor           # (batch,) int64: the valid tokens of each row
    allocator: BlockAllocator       # the pool: reference counts, fork, allocate, free
    block_size: int
    k: torch.Tensor                 # (n_layer, num_blocks, block_size, n_head, head_dim) pools
    v: torch.Tensor
    tables: list[list[int]]         # row r's blocks, in logical order (block_table.py)
    block_tables: torch.Tensor      # (batch, max_blocks) int64: the same ids, padded with -1
    row_hashes: list[list[bytes]]   # row r's committed keys (prefix.py)

    def _blocks_to_copy(self, row_ids: list[int], starts: list[int], new: list[int]) -> list[tuple[int, int]]:
        """(row, table index) of the shared blocks (reference count > 1) that rows will
        write into, positions starts[i]..new[i]-1; only blocks the row already holds (given)."""
        out = []
        bs, refs = self.block_size, self.allocator.ref_counts
        for r, s, n in zip(row_ids, starts, new):
            table = self.tables[r]
            for i in range(s // bs, min(len(table), blocks_needed(n, bs))):
                if refs[table[i]] > 1:
                    out.append((r, i))
        return out


class ParallelSampling:
    """n answers to one prompt on shared blocks; `PagedEngine` inherits it (engine.py), whose
    `_forks` maps a leader's id to the siblings waiting for its prompt to run."""

    # The state this part uses, set by `PagedEngine.__init__` (engine.py) and stage 05's
    # `Engine.__init__`: declared here so that a reader sees what the methods below touch. It
    # also calls the engine's `add_request` and, through `super()`, stage 05's `abort`.
    _forks: dict[str, list[Request]]  # leader id -> siblings waiting for its prefill
    requests: dict[str, Request]
    scheduler: Scheduler
    free_slots: list[int]             # the cache rows nobody holds, in order
    cache: CopyOnWrite                # the engine's PagedKVCache: here only its `fork_row` is used
    clock: Callable[[], float]

    def _fork_siblings(self, ready: list[Request], logits: torch.Tensor) -> tuple[list[Request], torch.Tensor]:
        """Siblings of a leader whose prompt has just run join it; returns (ready, logits[rows]).

        `ready`, `logits` (len(ready), V): the step's requests that sample now, and their
        logits (row k for ready[k]). A ready leader's siblings leave `_forks` (its entry is
        removed). Afterwards each of them either runs or waits:
        - a row is free for it (`free_slots` not empty and `scheduler.running` shorter than
          `max_batch_size`): it is RUNNING (at `self.clock()`), in `scheduler.running` and in
          the returned ready, in that row (`slot`; it left `free_slots`), a fork of the
          leader's row (6.7: its blocks shared, no K/V copied), with the leader's `num_computed` and
          `num_cached_tokens`; its logits row is a copy of the leader's, so it samples its
          first token, with its own generator, from the same logits;
        - no row is free: it waits in the scheduler's waiting queue, at its place by
          `Request.order` like an ordinary request, and computes its prompt itself later.
        Siblings take free rows in order (leaders in `ready` order, each one's siblings in
        `_forks` order), each the first free row. Returned ready: the given requests, then
        the siblings that joined, in that order; returned logits row k is ready[k]'s.
        Joining is not an admission: `prefix_queries` and `prefix_hits` do not change."""
        rows = list(range(len(ready)))
        now = self.clock()
        for i, leader in enumerate(list(ready)):
            siblings = self._forks.pop(leader.request_id, None)
            if not siblings:
                continue
            raise NotImplementedError('Exercise 6.8: The engine on paged memory: block manager, parallel sampling — see 06_paged_attention.ipynb')
        return ready, logits[rows]

    # -- given
    def add_forked(self, request: Request, n: int) -> list[Request]:
        """Parallel sampling: n sequences continue one prompt. They are n requests with ids
        f"{request.request_id}-{i}" (child i samples with seed + i when the request has a
        seed). Only child 0 is queued; when its prompt has run, the others fork from it —
        they share all its blocks (copy-on-write) and sample their first token from the
        same logits — so the prompt is computed and stored once, not n times. A sibling
        that finds no free row then is queued as an ordinary request."""
        if not isinstance(request, Request):
            raise TypeError(f"add_forked expects a Request, got {type(request).__name__}")
        n = check_int("n", n, 1)
        if request.state is not State.WAITING or request.events:
            raise ValueError(f"request {request.request_id!r} was already used ({request.state.value})")
        ids = [f"{request.request_id}-{i}" for i in range(n)]
        taken = [i for i in ids if i in self.requests]
        if taken:
            raise ValueError(f"request ids {taken} are already in this engine")
        children = []
        for i, rid in enumerate(ids):
            sampling = request.sampling
            if sampling.seed is not None:
                sampling = dataclasses.replace(sampling, seed=sampling.seed + i)
            children.append(Request(request.prompt, request.max_new_tokens, sampling=sampling, stop=request.stop,
                                    priority=request.priority, request_id=rid, arrival=request.arrival,
                                    client=request.client))
        self.add_request(children[0])
        for child in children[1:]:
            self.add_request(child, arrival=children[0].arrival)
            self.scheduler.remove(child)  # waits for child 0's prefill, outside the queue
        if len(children) > 1:
            self._forks[children[0].request_id] = children[1:]
        return children

    def abort(self, request_id: str) -> bool:
        """Stage 05's `abort`, plus: a sibling still waiting for its leader's prefill is
        dropped from the fork; if the leader is aborted, its siblings are queued on their own."""
        if request_id in self.requests and not self.requests[request_id].finished:
            request = self.requests[request_id]
            for siblings in self._forks.values():
                if request in siblings:
                    siblings.remove(request)
            for s in self._forks.pop(request_id, []):
                self.scheduler.add(s)
        return super().abort(request_id)
